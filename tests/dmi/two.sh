#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only OR MIT
# DMI across two machines: two QEMU guests on a virtual network
# (qemu/harness pair), each a DMI node on the kernel backend, rank 0 on
# guest A and rank 1 on guest B, started by hand the way a cluster launcher
# would (DMI_RANK, DMI_SIZE, DMI_PEERS).  init.sh runs this after
# migrate/two.sh in mode two:
#   two.sh a|b MY_IP PEER_IP
# Both guests run the same runs in the same order, each on its own port so
# a late starter meets the right run (connections wait 20 s):
#   1. runtime/dmi/examples/instances.c with 2 compute instances per node
#      (DMI_create'd members of each guest's set, dmwrite replies), checked
#      against the formula by every instance;
#   2. the paper's Jacobi (apps/dmi/jacobi.c), whose checksum guest A
#      compares with the serial reference (apps/common/cks-cmp);
#   3. DMI_create's instances move between the guests (runtime/dmi/
#      examples/yield.c barrier, DMI_MOVE_AT=3:0@1,7:0@0: A's instance 0
#      goes to B and back, B's moves within B and then to A): each guest
#      checks the lines it printed against a run without moves in itself
#      (dmi run -n 2), and counts the moves and arrivals it saw;
#   4. B's node is killed (SIGKILL) while the bench-size Jacobi computes:
#      A's node must stop within seconds with status 3, naming node 1 and
#      its closed or reset connection;
#   5. B drops off the network (eth0 down, no FIN reaches A) during the
#      same run: each node must stop within seconds with status 3, naming
#      the other after 3 s without a heartbeat.
# TAP on stdout.
role="$1" me="$2" peer="$3"
export HALFPROC_BACKEND=kernel
A=/dmi/apps
if [ "$role" = a ]; then rank=0 hosts="$me $peer"; else rank=1 hosts="$peer $me"; fi
n=0 failed=0
tap() { # tap RC NAME
	n=$((n + 1))
	if [ "$1" = 0 ]; then echo "ok $n $2"; else echo "not ok $n $2"; failed=1; fi
}
# node PORT CMD...: this guest's rank of a DMI program; output in /tmp/dmi-two.log
node() {
	port="$1"; shift
	env DMI_RANK=$rank DMI_SIZE=2 DMI_PEERS="$(peers "$port")" "$@" >/tmp/dmi-two.log 2>&1
}
# node_bg PORT CMD...: the same in the background, its pid in $pid
node_bg() {
	port="$1"; shift
	env DMI_RANK=$rank DMI_SIZE=2 DMI_PEERS="$(peers "$port")" "$@" >/tmp/dmi-two.log 2>&1 &
	pid=$!
}
peers() { echo $hosts | sed "s/\([^ ]*\) \(.*\)/\1:$1,\2:$1/"; }
# connected PORT: wait (30 s at most) until the two nodes of the run on PORT
# are connected, then 2 s more for the computation to be under way
connected() {
	i=0
	while ! netstat -tn 2>/dev/null | grep ESTABLISHED | grep -q ":$1 " && [ $i -lt 300 ]; do
		sleep 0.1; i=$((i + 1))
	done
	netstat -tn 2>/dev/null | grep ESTABLISHED | grep ":$1 " | sed 's/^/# /'
	sleep 2
}
now() { cut -d' ' -f1 /proc/uptime; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
show() { sed 's/^/#   /' /tmp/dmi-two.log; }
echo "TAP version 13"
echo "1..5"
echo "# rank $rank of 2, peers $hosts"
# A's serial reference first: B starts each run without waiting for it.
[ "$role" = a ] && ref="$($A/serial/jacobi small | awk '$1 == "checksum" { print $2 }')"

node 7101 /dmi/instances 2; r=$?
show
tap $r "instances_on_both_guests_rank_$rank"

node 7102 $A/dmi/jacobi small; r=$?
show
if [ "$role" = a ]; then
	val="$(awk '$1 == "checksum" { print $2 }' /tmp/dmi-two.log)"
	echo "# jacobi on two guests: checksum ${val:-none}, serial ${ref:-none}"
	[ "$r" = 0 ] && [ -n "$val" ] && [ -n "$ref" ] && $A/cks-cmp jacobi "$ref" "$val"
	r=$?
fi
tap $r "jacobi_across_two_guests_rank_$rank"

# The moves between the guests: stdin /dev/null and stdout a pipe (a moved
# instance takes its new node's stdout pipe; a console or a regular file
# would be refused or reopened by path on the other guest).
ylines() { sed -n 's/^instance \([0-9]*\): sum \([0-9a-f]*\) moves \([0-9]*\) pid \([0-9]*\) -> \([0-9]*\).*/\1 \2 \3 \4 \5/p' | sort -n; }
xmoves() {
	yref="$(/bin/dmi run -n 2 --grace 2 -- /dmi/yield 2 barrier </dev/null 2>/tmp/yx0.err)" ||
		{ cat /tmp/yx0.err; return 1; }
	{
		env DMI_RANK=$rank DMI_SIZE=2 DMI_PEERS="$(peers 7105)" DMI_MOVE_AT=3:0@1,7:0@0 \
			/dmi/yield 2 barrier </dev/null 2>&1
		echo "$?" >/tmp/dmi-two.rc
	} | cat >/tmp/dmi-two.log
	show
	[ "$(cat /tmp/dmi-two.rc)" = 0 ] || return 1
	# Instance G of the run without moves: "G SUM"; joins: "join G: ...".
	want="$(echo "$yref" | ylines | awk '$3 == 0 && $4 == $5 { print $1, $2 }')"
	# Printed here: where each instance ended (A: 0, 1 and B's 2; B: 3);
	# instance 0 of each node (G even) moved twice (on another machine a
	# copy may get its old pid back), instance 1 not at all.
	got="$(ylines </tmp/dmi-two.log | awk '$1 % 2 ? $3 == 0 && $4 == $5 : $3 == 2 { print $1, $2 }')"
	mine="$(echo "$got" | awk '{ print $1 }' | tr '\n' ' ')"
	bad="$(echo "$got" | while read -r g sum; do
		echo "$want" | grep -qx "$g $sum" || echo "$g"; done)"
	jwant="$(echo "$yref" | grep "^join [$((2 * rank))$((2 * rank + 1))]: " | sort)"
	jgot="$(grep '^join ' /tmp/dmi-two.log | sort)"
	cross="$(grep -c ' moved at yield [0-9]* to node ' /tmp/dmi-two.log)"
	within="$(grep ' moved at yield ' /tmp/dmi-two.log | grep -vc ' to node ')"
	arrived="$(grep -c ' arrived from node ' /tmp/dmi-two.log)"
	echo "# instances printed here: $mine(want $([ "$rank" = 0 ] && echo "0 1 2" || echo 3)), not as without moves: ${bad:-none}"
	echo "# moves to the other guest: $cross, within: $within, arrivals: $arrived"
	if [ "$rank" = 0 ]; then
		[ "$mine" = "0 1 2 " ] && [ "$cross" = 1 ] && [ "$within" = 0 ] && [ "$arrived" = 2 ]
	else
		[ "$mine" = "3 " ] && [ "$cross" = 2 ] && [ "$within" = 1 ] && [ "$arrived" = 1 ]
	fi && [ -z "$bad" ] && [ "$(echo "$want" | wc -l)" = 4 ] &&
		[ "$(echo "$jwant" | wc -l)" = 2 ] && [ "$jwant" = "$jgot" ]
}
xmoves
tap $? "create_instances_move_between_the_guests_rank_$rank"

# stopped NAME START PATTERN: the node ended with status 3 within 20 s,
# saying PATTERN (a full bench-size run takes minutes here).
stopped() {
	took="$(since "$2")"
	show
	echo "# $1: status $r after $took s"
	[ "$r" = 3 ] && awk -v t="$took" 'BEGIN { exit !(t < 20) }' && grep -Eq "$3" /tmp/dmi-two.log
}
t0="$(now)"
if [ "$role" = a ]; then
	node 7103 $A/dmi/jacobi bench; r=$?
	# A FIN, or an RST when the killed node had unread data.
	stopped killed_peer "$t0" "node 1 .* failed: (connection closed without a goodbye|connection error: Connection reset)"
else
	# Both nodes are connected and computing when this one is killed.
	node_bg 7103 $A/dmi/jacobi bench
	connected 7103
	kill -9 "$pid"; r=$?
	wait "$pid"
	echo "# killed this guest's node (pid $pid) 2 s after the two connected"
	[ "$r" = 0 ]
fi
tap $? "node_killed_on_b_is_reported_rank_$rank"

t0="$(now)"
if [ "$role" = a ]; then
	node 7104 $A/dmi/jacobi bench; r=$?
	stopped unreachable_peer "$t0" "node 1 .* failed: no message or heartbeat"
else
	node_bg 7104 $A/dmi/jacobi bench
	connected 7104
	ip link set eth0 down
	t0="$(now)"
	wait "$pid"; r=$?
	ip link set eth0 up
	stopped unreachable_peer "$t0" "node 0 .* failed: no message or heartbeat"
fi
tap $? "guest_off_the_network_is_reported_rank_$rank"
exit $failed
