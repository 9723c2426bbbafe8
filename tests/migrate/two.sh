#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Two machines (two QEMU guests on a virtual network, qemu/harness pair):
# a node daemon in each with the same secret (/etc/halfproc-node.secret).
#   two.sh a MY_IP PEER_IP TICKS: guest A starts tests/demo/ticker and
#     Debian's xz with `halfproc run` on its daemon, migrates each to guest
#     B while it runs, and checks that it finishes there with the output and
#     exit status of a run that never moved, relayed back to A's `halfproc
#     run` (xz's stdin keeps flowing from A to B).  Then tells B to stop.
#   two.sh b MY_IP PEER_IP: guest B serves until A says it is done.
# TAP on stdout.
. /migrate/lib.sh
role="$1" me="$2" peer="$3" ticks="${4:-150}"
d=/tmp/mig
mkdir -p "$d"
export HALFPROC_NODE_SECRET_FILE=/etc/halfproc-node.secret
# Every stdin request and answer in the daemons' logs (see diagnose).
export HALFPROC_LOG=info,halfproc_node::program=debug,halfproc_node::daemon=debug
echo "TAP version 13"
diagnose() {	# what the programs of this node are doing
	halfproc ps --node 127.0.0.1:7070 2>&1 | sed 's/^/# ps: /'
	netstat -tn 2>&1 | sed 's/^/# netstat: /'
	tail -n 40 "$d/node.log" | sed 's/^/# node log: /'
	grep eth0 /proc/net/dev | sed 's/^/# dev: /'
	for p in $(ls /proc | grep '^[0-9]*$'); do
		[ -e "/proc/$p/exe" ] || continue # a kernel thread
		case "$(cat "/proc/$p/comm")" in sh | init | sleep) continue ;; esac
		echo "# pid $p: $(cut -d' ' -f2,3 "/proc/$p/stat") wchan $(cat "/proc/$p/wchan" 2>/dev/null)" \
			"$(grep -E '^(SigPnd|ShdPnd|SigBlk|TracerPid)' "/proc/$p/status" | tr '\n\t' '  ')"
		sed 's/^/#   /' "/proc/$p/stack" 2>/dev/null
		ls -l "/proc/$p/fd" 2>/dev/null | sed -n 's/.* \([0-9]* -> .*\)/#   fd \1/p'
		for t in /proc/"$p"/task/*; do
			echo "#   task ${t##*/} $(cut -d' ' -f3 "$t/stat") $(cat "$t/wchan" 2>/dev/null)"
		done
	done
}
if [ "$role" = b ]; then
	echo "1..2"
	start_node "0.0.0.0:7070" "$d/node.log" --advertise "$me:7070"
	tap $? node_b_leads_a_set
	# A runs `touch` here through this daemon when it is done.
	i=0
	while [ ! -f /tmp/two-done ] && [ $i -lt 2400 ]; do
		sleep 0.1; i=$((i + 1))
		# Still waiting after 90 s: say what this node's programs are doing.
		[ $i = 900 ] && diagnose
	done
	[ -f /tmp/two-done ]; tap $? guest_a_finished_its_test_here
	stop_nodes
	exit $failed
fi

echo "1..7"
start_node "0.0.0.0:7070" "$d/node.log" --advertise "$me:7070"
tap $? node_a_leads_a_set
i=0
while ! halfproc ps --node "$peer:7070" >/dev/null 2>&1 && [ $i -lt 600 ]; do
	sleep 0.1; i=$((i + 1))
done
halfproc ps --node "$peer:7070" >/dev/null; tap $? node_b_reachable_over_the_network
echo "# node B answered after $((i / 10)) s"

# move NAME INPUT FILTER CMD...: run on A, one move to B, finish there
move() {
	name="$1" input="$2" filter="$3"
	shift 3
	cp "$input" "$d/$name.in"
	"$@" <"$input" >"$d/$name.ref" 2>/dev/null
	ref_rc=$?
	migrate_run "$name" 1 "$me:7070" "$peer:7070" "$@"
	r=$?
	sed 's/^/# /' "$d/$name.mlog"
	tap $r "${name}_moved_from_a_to_b_while_running"
	sed "$filter" "$d/$name.out" >"$d/$name.cmp"
	sed "$filter" "$d/$name.ref" >"$d/$name.refcmp"
	cmp "$d/$name.refcmp" "$d/$name.cmp" && [ "$(cat "$d/$name.rc")" = "$ref_rc" ]
	r=$?
	[ $r = 0 ] || sed 's/^/#   /' "$d/$name.err"
	echo "# $name: $(wc -c <"$d/$name.out") bytes, exit status $(cat "$d/$name.rc") (unmigrated $ref_rc)"
	tap $r "${name}_finished_on_b_output_and_status_relayed_to_a"
}

: >"$d/empty"
wait_output=1
move ticker "$d/empty" 's/ pid [0-9]*$//' /demo/ticker "$ticks" stdin
# The ticker's first line came from the original on A, its last from the
# copy on B (pids as `halfproc run` and `halfproc migrate` reported them).
first="$(sed -n '1s/.* pid //p' "$d/ticker.out")"
last="$(grep '^tick' "$d/ticker.out" | tail -n 1 | sed 's/.* pid //')"
echo "# ticker: first line from pid $first, last from pid $last; incarnations: $(cat "$d/ticker.pids" | tr '\n' ' ')"
[ "$first" = "$(sed -n 1p "$d/ticker.pids")" ] && [ "$last" = "$(sed -n 2p "$d/ticker.pids")" ] &&
	grep -q "pid $first -> .* pid $last:" "$d/ticker.mlog"
tap $? ticker_printed_from_a_then_from_b
wait_output=0
seq 1 60000 >"$d/data"
move xz "$d/data" "" /opt/deb/xz -T1 -6 -c
halfproc run --node "$peer:7070" -- /bin/touch /tmp/two-done
stop_nodes
exit $failed
