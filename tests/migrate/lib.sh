# SPDX-License-Identifier: GPL-2.0
# Shared by the in-guest migration tests (busybox sh): TAP output, node
# daemons, and one program run under `halfproc run` and migrated N times.
# Sourced, not run.

n=0 failed=0

# begin TESTS NAME: the TAP plan, /tmp/mig (as $d), and a new shared secret
# (/tmp/mig/NAME.secret) for the node daemons this test starts.
begin() {
	d=/tmp/mig
	mkdir -p "$d"
	echo "TAP version 13"
	echo "1..$1"
	head -c 32 /dev/urandom >"$d/$2.secret"
	export HALFPROC_NODE_SECRET_FILE="$d/$2.secret"
}

tap() {	# tap RC NAME
	n=$((n + 1))
	if [ "$1" = 0 ]; then echo "ok $n $2"; else echo "not ok $n $2"; failed=1; fi
}

nodes=""
start_node() {	# start_node LISTEN LOG [ARGS...]: waits until it listens (30 s at most)
	listen="$1" log="$2"
	shift 2
	halfproc node --listen "$listen" "$@" >"$log" 2>&1 &
	nodes="$nodes $!"
	wait_node "$log"
}

# start_node_in_pidns LISTEN LOG: start_node in a pid namespace of its own
# (its pids as another machine's: free for a process tree's restore while
# the originals hold them here); pid 1 there is a shell, which reaps.
start_node_in_pidns() {
	listen="$1" log="$2"
	unshare -p -f --mount-proc sh -c 'halfproc node --listen "$1" >"$2" 2>&1; exit $?' \
		sh "$listen" "$log" &
	u=$! i=0 daemon=""
	# unshare -> sh (pid 1 there) -> the daemon, by their pids here.
	while [ -z "$daemon" ] && [ $i -lt 300 ]; do
		sleep 0.1; i=$((i + 1))
		sh1="$(cat /proc/$u/task/$u/children 2>/dev/null)"
		[ -n "$sh1" ] && daemon="$(cat /proc/${sh1% }/task/${sh1% }/children 2>/dev/null)"
	done
	# Not found (the test fails in wait_node): unshare, so stop_nodes
	# does not wait for it forever.
	nodes="$nodes ${daemon:-$u}"
	wait_node "$log"
}

wait_node() {	# wait_node LOG: until the daemon logging there listens (30 s at most)
	log="$1"
	i=0
	while ! grep -q "listening on" "$log" 2>/dev/null && [ $i -lt 300 ]; do
		sleep 0.1; i=$((i + 1))
	done
	sed 's/^/# /' "$log"
	grep -q "members of this node's set" "$log"
}

# migrate_run NAME MOVES NODE1 NODE2 CMD...: runs CMD with stdin from
# /tmp/mig/NAME.in (held open until the moves are done) under `halfproc
# run` on NODE1, migrates it MOVES times NODE1 -> NODE2 -> NODE1 ..., then
# lets stdin end.  Leaves NAME.out, NAME.rc, NAME.moves (frozen/total ms per
# move), NAME.pids (the pid of each incarnation) and NAME.mlog (what
# `halfproc migrate` said) in /tmp/mig; returns
# non-zero if a move failed.
migrate_run() {
	name="$1" moves="$2" from="$3" to="$4"
	shift 4
	d=/tmp/mig
	rm -f "$d/$name.go" "$d/$name.pid" "$d/$name.moves" "$d/$name.mlog" "$d/$name.out" \
		"$d/$name.rc"
	(
		{
			cat "$d/$name.in"
			while [ ! -f "$d/$name.go" ]; do sleep 0.05; done
		} | halfproc run --node "$from" --pid-file "$d/$name.pid" -- "$@" \
			>"$d/$name.out" 2>"$d/$name.err"
		echo $? >"$d/$name.rc"
	) &
	runner=$!
	i=0
	while [ ! -s "$d/$name.pid" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	pid="$(cat "$d/$name.pid" 2>/dev/null)"
	ok=0
	[ -n "$pid" ] || { echo "# $name: halfproc run did not start it"; ok=1; }
	echo "$pid" >"$d/$name.pids"
	# With wait_output=1: the first move only once the program printed.
	i=0
	while [ "${wait_output:-0}" = 1 ] && [ ! -s "$d/$name.out" ] && [ $i -lt 300 ]; do
		sleep 0.1; i=$((i + 1))
	done
	# A caller's migrate_run_hook (if any) runs here, with $pid set.
	[ -n "$pid" ] && command -v migrate_run_hook >/dev/null && migrate_run_hook
	m=0
	while [ $ok = 0 ] && [ $m -lt "$moves" ]; do
		m=$((m + 1))
		new="$(halfproc migrate --node "$from" --to "$to" "$pid" 2>"$d/$name.merr")"
		r=$?
		cat "$d/$name.merr" >>"$d/$name.mlog"
		if [ $r = 0 ]; then
			sed -n 's/.*frozen \([0-9.]*\) ms, total \([0-9.]*\) ms.*/\1 \2/p' \
				"$d/$name.merr" >>"$d/$name.moves"
			pid="$new" t="$from" from="$to" to="$t"
			echo "$pid" >>"$d/$name.pids"
		else
			echo "# $name: move $m failed:"; sed 's/^/#   /' "$d/$name.merr"
			ok=1
		fi
	done
	# A caller's migrate_run_done (if any) runs here, with $pid set to
	# the program's pid where it is now.
	[ -n "$pid" ] && command -v migrate_run_done >/dev/null && migrate_run_done
	touch "$d/$name.go"
	# A caller's diagnose (if any) says what is going on if the program has
	# not finished 90 s after its stdin ended.
	i=0
	while [ ! -f "$d/$name.rc" ]; do
		sleep 0.1; i=$((i + 1))
		[ $i = 900 ] && command -v diagnose >/dev/null && diagnose
	done
	wait "$runner"
	return $ok
}

# stats FILE COLUMN: "median X ms (min-max)" of a column of migrate_run's NAME.moves
stats() {
	cut -d' ' -f"$2" "$1" | sort -n | awk '{ v[NR] = $1 } END {
		if (NR == 0) { print "none"; exit }
		printf "median %.1f ms (%.1f-%.1f)", v[int((NR + 1) / 2)], v[1], v[NR] }'
}

stop_nodes() {	# SIGTERM to the daemons start_node started, and wait
	# shellcheck disable=SC2086
	kill $nodes 2>/dev/null
	wait
}
