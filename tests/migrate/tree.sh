#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# In the guest (kernel backend): a program that forks its workers moves as
# a process tree.  Debian's stress-ng (copied with its shared libraries to
# /opt/deb) is started with `halfproc run` on node A, so it is a member of
# A's set; its `cpu` worker, forked with a plain fork, is not (a fresh mm).
# They share /dev/zero memory and stderr.  It is migrated MOVES times
# between A and B while it runs; B runs in a pid namespace of its own, as
# another machine has its own pids (in one guest the originals hold theirs
# until the copies exist).  Every move must carry both processes with their
# pids, read the member with dmread and the worker with process_vm_readv,
# and restore each as it was (the next move's dmread of the root fails with
# EPERM if its copy is not a member).  Its output, numbers and pids aside,
# and its exit status must be those of a run that never moved.  TAP on
# stdout.
# Then the same program is checkpointed with `halfproc checkpoint --kill`
# and restored with `halfproc restore` MOVES times in a row on node A, a
# tree image each time; its output, across the clients of the run and the
# restores, must again be that of the unmigrated run.
# Last, a shell pipeline (`sh -c 'gzip -9 -n | sha256sum'`: the shell and
# its two children, joined by a pipe only they hold) migrated MOVES times
# between A and B while its stdin is held open.
#   tree.sh MOVES
. /migrate/lib.sh
moves="${1:-20}"
begin 13 tree
a=127.0.0.1:7072 b=127.0.0.1:7073
start_node "$a" "$d/tree-a.log"; tap $? node_a_leads_a_set
start_node_in_pidns "$b" "$d/tree-b.log"; tap $? node_b_in_its_own_pid_namespace_leads_a_set

# Runs until the worker's SIGALRM (its timeout): the run then completes
# as usual, with the worker's count reported by the parent.
set -- /opt/deb/stress-ng --cpu 1 --cpu-method fft --timeout 600 --metrics-brief
worker_of() { cat "/proc/$1/task/$1/children" 2>/dev/null | tr -d ' '; }
now_ms() { awk '{ printf "%d", $1 * 1000 }' /proc/uptime; }

# The unmigrated run, ended the same way after 3 s.
"$@" </dev/null >"$d/stressng.refout" 2>"$d/stressng.ref" &
ref=$!
i=0
while [ -z "$(worker_of $ref)" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
sleep 3
kill -ALRM "$(worker_of $ref)"
wait $ref
ref_rc=$?
echo "# unmigrated: exit status $ref_rc"
sed 's/^/#   /' "$d/stressng.ref"

: >"$d/stressng.in"
worker="" after=""
migrate_run_hook() {	# before the first move: the worker, by its pid
	i=0
	while [ -z "$(worker_of "$pid")" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
	worker="$(worker_of "$pid")"
	echo "# stress-ng: pid $pid, its worker $worker"
}
migrate_run_done() {	# after the moves (back on A): the worker ends the run
	after="$(worker_of "$pid")"
	kill -ALRM "$after"
}
t0=$(date +%s)
migrate_run stressng "$moves" "$a" "$b" "$@"
tap $? "stress_ng_migrated_${moves}_times_while_running"
unset -f migrate_run_hook migrate_run_done
echo "# stress-ng: $(($(date +%s) - t0)) s with its moves; frozen $(stats "$d/stressng.moves" 1)," \
	"total $(stats "$d/stressng.moves" 2)"

# Every move carried the tree (root and worker), the root kept its pid,
# and the worker is its child with its pid after the last move.
trees="$(grep 'frozen and dumped' "$d/stressng.mlog" | grep -c 'a process tree of 2 processes')"
pids="$(sort -u "$d/stressng.pids" | tr '\n' ' ')"
echo "# $trees of $moves moves carried a tree of 2 processes; pids of the root: $pids;" \
	"its worker $worker before, $after after"
[ "$trees" = "$moves" ] && [ "$(sort -u "$d/stressng.pids" | wc -l)" = 1 ]
tap $? every_move_carried_the_tree_and_kept_the_root_s_pid
[ -n "$worker" ] && [ "$after" = "$worker" ]
tap $? the_worker_is_the_root_s_child_with_its_pid_after_the_moves

# Each dump read the member with dmread and the worker, outside the set,
# with process_vm_readv: as members and outside the set they were restored.
pid="$(head -1 "$d/stressng.pids")"
rw="$(grep -c "read with dmread for pid $pid; process_vm_readv for pid $worker)" \
	"$d/stressng.mlog")"
echo "# $rw of $moves dumps: dmread for pid $pid, process_vm_readv for pid $worker"
grep -m1 'frozen and dumped' "$d/stressng.mlog" | sed 's/^/#   /'
[ "$rw" = "$moves" ]
tap $? root_read_with_dmread_worker_with_process_vm_readv

# Output and status as unmigrated, numbers (times, counts, and the
# columns they widen) and pids aside; every line once, so none was lost or
# printed twice across the moves.
strip() { sed -e 's/\[[0-9]*\]//' -e 's/[0-9][0-9.]*/N/g' -e 's/  */ /g' "$1"; }
strip "$d/stressng.ref" >"$d/stressng.refcmp"
strip "$d/stressng.err" >"$d/stressng.cmp"
if cmp "$d/stressng.refcmp" "$d/stressng.cmp" && [ "$(cat "$d/stressng.rc")" = "$ref_rc" ] &&
	[ ! -s "$d/stressng.out" ]; then
	r=0
else
	r=1
	echo "# migrated: exit status $(cat "$d/stressng.rc"), unmigrated $ref_rc; its stderr:"
	sed 's/^/#   /' "$d/stressng.err"
fi
tap $r stress_ng_output_and_status_as_unmigrated
# The worker's count reached the parent through the shared memory, and
# every line names the root's pid.
ops="$(sed -n 's/.*\] cpu  *\([0-9]*\) .*/\1/p' "$d/stressng.err")"
others="$(grep -v -c "^stress-ng: [a-z]*: *\[$pid\] " "$d/stressng.err")"
echo "# bogo ops reported: ${ops:-none}; lines not naming pid $pid: $others"
[ "${ops:-0}" -gt 0 ] && [ "$others" = 0 ]
tap $? the_worker_s_count_reached_the_parent

# Checkpoint --kill and restore, MOVES times, on node A: the pids are free
# again once the originals are killed.
rm -f "$d"/stressng-c*.err "$d"/stressng-c*.pid "$d/stressng-c.times"
halfproc run --node "$a" --pid-file "$d/stressng-c0.pid" -- "$@" </dev/null \
	>"$d/stressng-c0.out" 2>"$d/stressng-c0.err" &
client=$!
i=0
while [ ! -s "$d/stressng-c0.pid" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
pid="$(cat "$d/stressng-c0.pid")"
i=0
while [ -z "$(worker_of "$pid")" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
worker="$(worker_of "$pid")"
echo "# stress-ng: pid $pid, its worker $worker"
m=0 ok=0 trees=0
while [ $ok = 0 ] && [ $m -lt "$moves" ]; do
	m=$((m + 1))
	sleep 0.3
	rm -rf "$d/stressng.img"
	t0=$(now_ms)
	if ! halfproc checkpoint --node "$a" --kill "$pid" -o "$d/stressng.img" 2>"$d/stressng-ck.log"; then
		echo "# checkpoint $m failed:"; sed 's/^/#   /' "$d/stressng-ck.log"; ok=1; break
	fi
	t1=$(now_ms)
	grep -q "and its 1 descendant(s), a process tree" "$d/stressng-ck.log" && trees=$((trees + 1))
	wait $client
	rc=$?
	[ $rc = 75 ] || { echo "# checkpoint $m: the client before it exited $rc, not 75"; ok=1; }
	halfproc restore --node "$a" --pid-file "$d/stressng-c$m.pid" "$d/stressng.img" </dev/null \
		>"$d/stressng-c$m.out" 2>"$d/stressng-c$m.err" &
	client=$!
	i=0
	while [ ! -s "$d/stressng-c$m.pid" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	t2=$(now_ms)
	echo "$((t1 - t0)) $((t2 - t1))" >>"$d/stressng-c.times"
	if [ "$(cat "$d/stressng-c$m.pid" 2>/dev/null)" != "$pid" ] || [ "$(worker_of "$pid")" != "$worker" ]; then
		echo "# restore $m: pid $(cat "$d/stressng-c$m.pid" 2>/dev/null), children $(worker_of "$pid")"
		sed 's/^/#   /' "$d/stressng-c$m.err"
		ok=1
	fi
done
if [ $ok = 0 ]; then
	kill -ALRM "$worker"
else
	# Not as expected: end whatever runs (the test fails below).
	kill -KILL "$(worker_of "$pid")" "$pid" 2>/dev/null
fi
wait $client
rc=$?
echo "# $m checkpoints (--kill) and restores, $trees of them trees, each restore the same pids;" \
	"checkpoint $(stats "$d/stressng-c.times" 1), restore until its pid file $(stats "$d/stressng-c.times" 2)"
[ $ok = 0 ] && [ "$trees" = "$moves" ]
tap $? "stress_ng_checkpointed_and_restored_${moves}_times_with_its_pids"
# The program's output through the run and every restore, in order (the
# clients' own lines, "halfproc run: the program was checkpointed into
# ...", left out).
: >"$d/stressng-c.err"
i=0
while [ $i -le "$m" ]; do
	grep -v '^halfproc ' "$d/stressng-c$i.err" >>"$d/stressng-c.err"
	i=$((i + 1))
done
strip "$d/stressng-c.err" >"$d/stressng-c.cmp"
if cmp "$d/stressng.refcmp" "$d/stressng-c.cmp" && [ "$rc" = "$ref_rc" ]; then
	r=0
else
	r=1
	echo "# after the restores: exit status $rc, unmigrated $ref_rc; the output:"
	sed 's/^/#   /' "$d/stressng-c.err"
fi
tap $r stress_ng_restored_output_and_status_as_unmigrated
ops="$(sed -n 's/.*\] cpu  *\([0-9]*\) .*/\1/p' "$d/stressng-c.err")"
echo "# bogo ops reported after the restores: ${ops:-none}"
[ "${ops:-0}" -gt 0 ]
tap $? the_worker_s_count_reached_the_restored_parent

# A shell pipeline: the pipe between gzip and sha256sum is made once on
# each side, with the bytes unread in it.
seq 1 150000 | sed 's/$/ halfproc pipeline/' >"$d/pipeline.in"
set -- /bin/sh -c '/opt/deb/gzip -9 -n | /opt/deb/sha256sum'
"$@" <"$d/pipeline.in" >"$d/pipeline.ref"
ref_rc=$?
unset -f migrate_run_hook migrate_run_done
migrate_run_hook() {	# before the first move: both children there
	i=0
	while [ "$(cat "/proc/$pid/task/$pid/children" 2>/dev/null | wc -w)" -lt 2 ] && [ $i -lt 200 ]; do
		sleep 0.1; i=$((i + 1))
	done
}
migrate_run pipeline "$moves" "$a" "$b" "$@"
r=$?
unset -f migrate_run_hook
trees="$(grep 'frozen and dumped' "$d/pipeline.mlog" | grep -c 'a process tree of 3 processes')"
echo "# pipeline: $trees of $moves moves carried a tree of 3 processes; frozen" \
	"$(stats "$d/pipeline.moves" 1), total $(stats "$d/pipeline.moves" 2)"
[ $r = 0 ] && [ "$trees" = "$moves" ]
tap $? "a_shell_pipeline_migrated_${moves}_times_as_a_tree"
if cmp "$d/pipeline.ref" "$d/pipeline.out" && [ "$(cat "$d/pipeline.rc")" = "$ref_rc" ]; then
	echo "# pipeline: $(cat "$d/pipeline.out")"
	r=0
else
	r=1
	echo "# pipeline: printed $(cat "$d/pipeline.out"), exit status $(cat "$d/pipeline.rc");" \
		"unmigrated $(cat "$d/pipeline.ref"), $ref_rc"
	sed 's/^/#   /' "$d/pipeline.err"
fi
tap $r pipeline_output_and_status_as_unmigrated
stop_nodes
exit $failed
