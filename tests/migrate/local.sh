#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# In the guest (kernel backend): two node daemons, unmodified programs
# started with `halfproc run` as members of the daemon's set and migrated
# MOVES times between the daemons while they run; output and exit status
# must be byte-identical to a run that never moved.  Debian's xz, gzip,
# bzip2, sha256sum (copied with their shared libraries to /opt/deb) and
# tests/demo/ticker.c.  TAP on stdout.
#   local.sh MOVES TICKS
. /migrate/lib.sh
moves="${1:-20}" ticks="${2:-400}"
begin 16 local
a=127.0.0.1:7070 b=127.0.0.1:7071
start_node "$a" "$d/node-a.log"; tap $? node_a_leads_a_set
start_node "$b" "$d/node-b.log"; tap $? node_b_leads_a_set

# Started through clone3 + execve by the daemon: PATH search, cwd, status,
# and a program that cannot be started (exit 127, errno named).
out="$(cd "$d" && env PATH=/nowhere:/bin halfproc run --node "$a" -- sh -c 'pwd; exit 7' </dev/null)"
r=$?
echo "# sh -c 'pwd; exit 7' in $d: printed $out, exit status $r"
[ "$out" = "$d" ] && [ $r = 7 ]; tap $? run_searches_path_keeps_cwd_and_status
halfproc run --node "$a" -- /nonexistent/prog </dev/null 2>"$d/enoent.err"
r=$?
sed 's/^/# /' "$d/enoent.err"
[ $r = 127 ] && grep -q "cannot start /nonexistent/prog: No such file" "$d/enoent.err"
tap $? run_of_a_missing_program_exits_127_naming_it

seq 1 100000 >"$d/data"
seq 7 13 600000 | sed 's/$/ halfproc/' >>"$d/data"
echo "# input: $(wc -c <"$d/data") bytes"
: >"$d/empty"

# check NAME REF_RC [FILTER]: output and status against the reference
check() {
	if [ -n "${3:-}" ]; then
		sed "$3" "$d/$1.out" >"$d/$1.cmp"; sed "$3" "$d/$1.ref" >"$d/$1.refcmp"
	else
		cp "$d/$1.out" "$d/$1.cmp"; cp "$d/$1.ref" "$d/$1.refcmp"
	fi
	if ! cmp "$d/$1.refcmp" "$d/$1.cmp"; then
		echo "# $1: output differs from the unmigrated run ($(wc -c <"$d/$1.out") vs $(wc -c <"$d/$1.ref") bytes)"
		sed 's/^/#   /' "$d/$1.err"
		return 1
	fi
	if [ "$(cat "$d/$1.rc")" != "$2" ]; then
		echo "# $1: exit status $(cat "$d/$1.rc"), unmigrated $2"
		return 1
	fi
	echo "# $1: $(wc -c <"$d/$1.out") bytes identical, exit status $2; frozen $(stats "$d/$1.moves" 1), total $(stats "$d/$1.moves" 2)"
}

one() {	# one NAME INPUT FILTER CMD...
	name="$1" input="$2" filter="$3"
	shift 3
	cp "$input" "$d/$name.in"
	"$@" <"$input" >"$d/$name.ref" 2>/dev/null
	ref_rc=$?
	t0=$(date +%s)
	migrate_run "$name" "$moves" "$a" "$b" "$@"
	tap $? "${name}_migrated_${moves}_times_while_running"
	check "$name" "$ref_rc" "$filter"
	tap $? "${name}_output_and_status_as_unmigrated"
	echo "# $name: $(($(date +%s) - t0)) s with its moves; pre-copied pages that changed unseen by" \
		"the tracker (sent while frozen): $(sed -n 's/.*(\([0-9]*\) of them changed unseen.*/\1/p' \
			"$d/$name.mlog" | awk '{ s += $1 } END { print s + 0 }')"
}

one xz "$d/data" "" /opt/deb/xz -T1 -6 -c
one gzip "$d/data" "" /opt/deb/gzip -9 -n -c
one bzip2 "$d/data" "" /opt/deb/bzip2 -9 -c
one sha256sum "$d/data" "" /opt/deb/sha256sum "$d/data" -
one ticker "$d/empty" 's/ pid [0-9]*$//' /demo/ticker "$ticks" stdin
# Each move read the program with dmread (the daemon said so), none with
# process_vm_readv: the restored copies were members too.
dumps="$(cat "$d"/*.mlog | grep -c "frozen and dumped")"
dm="$(cat "$d"/*.mlog | grep "frozen and dumped" | grep -c "(read with dmread)")"
echo "# $dm of $dumps dumps read with dmread, $((5 * moves)) moves made"
[ "$dumps" = $((5 * moves)) ] && [ "$dm" = "$dumps" ]
tap $? every_move_read_with_dmread
# Each move pre-copied with soft-dirty tracking: `halfproc migrate` ends
# with "halfproc migrate: pre-copy (soft-dirty): ..." (runtime/halfproc-node
# /src/precopy.rs), not "pre-copy (content hash)" nor "stop-and-copy (WHY)".
sd="$(cat "$d"/*.mlog | grep -c '^halfproc migrate: pre-copy (soft-dirty): ')"
echo "# $sd of $((5 * moves)) moves pre-copied with soft-dirty"
cat "$d"/*.mlog | grep -E '^halfproc migrate: (pre-copy|stop-and-copy) ' |
	grep -v '^halfproc migrate: pre-copy (soft-dirty): ' | cut -c 19-100 | sort | uniq -c |
	head -5 | sed 's/^/# not soft-dirty: /'
[ "$sd" = $((5 * moves)) ]
tap $? every_move_pre_copied_with_soft_dirty
stop_nodes
exit $failed
