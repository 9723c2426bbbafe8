#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only OR MIT
# DMI in one QEMU guest on the kernel backend (busybox sh; scripts/guest.sh
# build puts the static programs at /bin/dmi and /dmi/, init.sh runs this in
# mode test as dmi/instances).  Compute instances (runtime/dmi/examples/
# instances.c: DMI_create'd members of the node's set, replies written into
# their private buffers with dmwrite) on 1 and 2 nodes, checked against the
# formula by the program itself; a killed instance named by the node; the
# paper's Jacobi (apps/dmi/jacobi.c) on 1 and 2 nodes against the serial
# reference within the app's tolerance (apps/common/cks-cmp).  DMI_yield on
# the kernel backend: instances (runtime/dmi/examples/yield.c) moved within
# their node at scheduled yields compute what an unmoved run does, and the
# one-line form of Jacobi (apps/dmi/jacobi_yield.c) moves between 3 nodes
# while one leaves and a spare joins, and agrees with the serial run: each
# move is read with dmread and restored as a new member of the node's set
# (clone3(CLONE_HALFPROC)).  TAP.
ifconfig lo 127.0.0.1 up 2>/dev/null || ip link set lo up
export HALFPROC_BACKEND=kernel
P=/dmi/instances
A=/dmi/apps
rc=0
n=0
echo "TAP version 13"
echo "1..10"
t() { # t NAME COMMAND...
	name="$1"; shift
	n=$((n + 1))
	out="$("$@" 2>&1)"; r=$?
	echo "$out" | sed 's/^/# /'
	if [ "$r" = 0 ]; then echo "ok $n $name"; else echo "not ok $n $name (rc $r)"; rc=1; fi
}
backend() { # the instances run on the kernel backend (halfproc info says so)
	halfproc info | sed -n '1,2s/^/# /p'
	halfproc info | grep -q "^backend: kernel"
}
t kernel_backend_detected backend
t one_node_three_instances /bin/dmi run -n 1 $P 3
t two_nodes_two_instances /bin/dmi run -n 2 $P 2
t two_nodes_three_instances_created_apart /bin/dmi run -n 2 $P 3 slow
t replies_through_staging env DMI_REPLY=staging /bin/dmi run -n 1 $P 3
crash() {
	out="$(/bin/dmi run -n 1 $P 3 crash 1 2>&1)"; r=$?
	echo "$out"
	[ "$r" != 0 ] && echo "$out" | grep -q "instance 1 (pid .*) was killed by signal 9"
}
t killed_instance_is_named crash
# The checksum line of an app's run ("checksum V"), or nothing.
cks() { "$@" 2>&1 | tee /tmp/dmi-app.log | awk '$1 == "checksum" { print $2 }'; }
ref="$(cks $A/serial/jacobi small)"
echo "# jacobi serial: checksum ${ref:-none}"
for nodes in 1 2; do
	jac() {
		val="$(cks /bin/dmi run -n "$nodes" $A/dmi/jacobi small)"
		sed 's/^/# /' /tmp/dmi-app.log
		[ -n "$ref" ] && [ -n "$val" ] && $A/cks-cmp jacobi "$ref" "$val"
	}
	t "jacobi_on_${nodes}_nodes_agrees_with_serial" jac
done
# "G SUM MOVES FIRST_PID LAST_PID" per instance line of yield.c, sorted.
ylines() { sed -n 's/.*instance \([0-9]*\): sum \([0-9a-f]*\) moves \([0-9]*\) pid \([0-9]*\) -> \([0-9]*\).*/\1 \2 \3 \4 \5/p' | sort -n; }
yield_moves() {
	# stdin from /dev/null: the guest's console is a device, which the
	# migration engine refuses to carry.
	yref="$(/bin/dmi run -n 2 --grace 2 -- /dmi/yield 2 </dev/null 2>/tmp/y0.err)" ||
		{ cat /tmp/y0.err; return 1; }
	# On each node: instance 0 moves at yields 3 and 7, instance 1 at 5.
	out="$(DMI_MOVE_AT=3:0,5:1,7:0 /bin/dmi run -n 2 --grace 2 -- /dmi/yield 2 </dev/null 2>/tmp/y1.err)" ||
		{ echo "$out"; cat /tmp/y1.err; return 1; }
	echo "$out"
	grep -e ' moved at yield ' -e ' stays: ' /tmp/y1.err
	want="$(echo "$yref" | ylines | awk '$3 == 0 && $4 == $5 { print $1, $2 }')"
	got="$(echo "$out" | ylines | awk '$3 == ($1 % 2 ? 1 : 2) && $4 != $5 { print $1, $2 }')"
	moves="$(grep -c ' moved at yield ' /tmp/y1.err)"
	echo "moves: $moves (want 6)"
	[ "$(echo "$want" | wc -l)" = 4 ] && [ "$want" = "$got" ] && [ "$moves" = 6 ]
}
t yield_moves_instances_within_their_node yield_moves
jacobi_yield() {
	iters="$($A/serial/jacobi small 2>/dev/null | awk '$1 == "iterations" { print $2 }')"
	[ -n "$iters" ] || { echo "serial jacobi printed no iterations"; return 1; }
	shrink=$((iters / 4 > 2 ? iters / 4 : 2))
	grow=$((iters / 2 > shrink + 1 ? iters / 2 : shrink + 1))
	val="$(DMI_MOVE_AT=1:1@0 cks /bin/dmi run -n 3 --movable --shrink-at "$shrink:1" \
		--grow-at "$grow:1" $A/dmi/jacobi_yield small </dev/null)"
	sed 's/^/  /' /tmp/dmi-app.log
	moves="$(grep -c ' moved at yield [0-9]* to node ' /tmp/dmi-app.log)"
	echo "moves: $moves (want 3); checksum ${val:-none}, serial ${ref:-none}"
	[ "$moves" = 3 ] && [ -n "$ref" ] && [ -n "$val" ] && $A/cks-cmp jacobi "$ref" "$val"
}
t jacobi_yield_moves_between_3_nodes_agrees_with_serial jacobi_yield
for i in 1 2 3; do
	# Hits from the frames in the shared range, then the node path.
	/bin/dmi run -n 1 $P 1 bench 2>&1 | sed 's/^/# frames: /'
	DMI_FAST_READS=0 /bin/dmi run -n 1 $P 1 bench 2>&1 | sed 's/^/# dmwrite: /'
	DMI_FAST_READS=0 DMI_REPLY=staging /bin/dmi run -n 1 $P 1 bench 2>&1 | sed 's/^/# staging: /'
done
exit $rc
