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
#   tree.sh MOVES
. /migrate/lib.sh
moves="${1:-20}"
d=/tmp/mig
mkdir -p "$d"
echo "TAP version 13"
echo "1..8"
head -c 32 /dev/urandom >"$d/tree-secret"
export HALFPROC_NODE_SECRET_FILE="$d/tree-secret"
a=127.0.0.1:7072 b=127.0.0.1:7073
start_node "$a" "$d/tree-a.log"; tap $? node_a_leads_a_set
start_node_in_pidns "$b" "$d/tree-b.log"; tap $? node_b_in_its_own_pid_namespace_leads_a_set

# Runs until the worker's SIGALRM (its timeout): the run then completes
# as usual, with the worker's count reported by the parent.
set -- /opt/deb/stress-ng --cpu 1 --cpu-method fft --timeout 600 --metrics-brief
worker_of() { cat "/proc/$1/task/$1/children" 2>/dev/null | tr -d ' '; }

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
stop_nodes
exit $failed
