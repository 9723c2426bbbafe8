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
# (clone3(CLONE_HALFPROC)); DMI_create's instances (yield.c barrier) move
# between 3 nodes by DMI_MOVE_AT=N:ID@NODE and back, and compute what an
# unmoved run does.  dmi bench's read and write hits, through the node and
# into the frames.  TAP.
ifconfig lo 127.0.0.1 up 2>/dev/null || ip link set lo up
export HALFPROC_BACKEND=kernel
P=/dmi/instances
A=/dmi/apps
rc=0
n=0
echo "TAP version 13"
echo "1..12"
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
# The module's count of pages pinned by members' dmread/dmwrite, all sets
# since it loaded (debugfs; empty without it).
pinned() { cat /sys/kernel/debug/halfproc/total/pinned 2>/dev/null; }
# Seconds since boot, centiseconds kept.
now() { cut -d' ' -f1 /proc/uptime; }
# Median and range of field $1 of the lines on stdin: "MED (MIN-MAX)".
med() { sort -n | awk '{ v[NR] = $1 } END { if (NR) printf "%s (%s-%s)", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
# DMI_create's instances moved between nodes (docs/dmi-reconf.md, "Cross-
# node moves of DMI_create's instances"; the host's tools/dmi/tests/
# xcreate.rs): on 3 nodes x 2 instances of yield.c barrier, instance 0 of
# each node goes to node 1 at yield 3 and to node 0 at 7, instance 1 to
# node 2 at 5 and to node 0 at 9: 10 moves between nodes, 2 within (node
# 1's instance 0 at 3, node 2's instance 1 at 5), each instance 2 moves
# and a new pid.  Each image is read with dmread (the module's pinned
# count grows by its pages) and restored on the target as a new member of
# its set (adopting it dmreads the copy's shared range, which only a
# member of the set has); the checksums and DMI_join answers are the run's
# without moves.
yield_xnode() {
	p0="$(pinned)"; t0="$(now)"
	yref="$(/bin/dmi run -n 3 --grace 2 -- /dmi/yield 2 barrier </dev/null 2>/tmp/x0.err)" ||
		{ echo "$yref"; cat /tmp/x0.err; return 1; }
	p1="$(pinned)"; t1="$(now)"
	out="$(DMI_MOVE_AT=3:0@1,5:1@2,7:0@0,9:1@0 /bin/dmi run -n 3 --grace 2 -- /dmi/yield 2 barrier \
		</dev/null 2>/tmp/x1.err)" || { echo "$out"; cat /tmp/x1.err; return 1; }
	p2="$(pinned)"; t2="$(now)"
	echo "$out"
	grep -e ' moved at yield ' -e ' arrived from node ' -e ' stays: ' /tmp/x1.err
	want="$(echo "$yref" | ylines | awk '$3 == 0 && $4 == $5 { print $1, $2 }')"
	got="$(echo "$out" | ylines | awk '$3 == 2 && $4 != $5 { print $1, $2 }')"
	jwant="$(echo "$yref" | grep '^join ' | sort)"
	jgot="$(echo "$out" | grep '^join ' | sort)"
	cross="$(grep -c ' moved at yield [0-9]* to node ' /tmp/x1.err)"
	within="$(grep ' moved at yield ' /tmp/x1.err | grep -vc ' to node ')"
	arrived="$(grep -c ' arrived from node ' /tmp/x1.err)"
	# Node 2's instance 0 went on from node 1 to a third node, 0.
	third="$(grep -c "dmi: node 0: instance 0 (node 2's) arrived from node 1: pid " /tmp/x1.err)"
	# The image pages of all 12 moves, each read with dmread.
	pages="$(sed -n 's/.* moved at yield .*(\([0-9]*\) bytes, .*/\1/p' /tmp/x1.err |
		awk '{ s += $1 / 4096 } END { printf "%d", s }')"
	echo "$jgot"
	echo "moves between nodes: $cross (want 10), within: $within (want 2), arrivals: $arrived (want 10)"
	echo "times: without moves $(echo "$t1 $t0" | awk '{ print $1 - $2 }') s, with $(echo "$t2 $t1" | awk '{ print $1 - $2 }') s"
	for f in checkpoint stopped move; do
		echo "between nodes, $f us: $(sed -n "s/.* to node .* $f \([0-9]*\) us.*/\1/p" /tmp/x1.err | med)"
	done
	echo "image bytes: $(sed -n 's/.* to node .*(\([0-9]*\) bytes, .*/\1/p' /tmp/x1.err | med)"
	if [ -n "$p0" ]; then
		echo "pinned pages: $((p1 - p0)) without moves, $((p2 - p1)) with; the images: $pages pages"
		# The moved run pins at least the images' pages more.
		[ $((p2 - p1 - (p1 - p0))) -ge "$pages" ] || { echo "the images were not read with dmread"; return 1; }
	else
		echo "no /sys/kernel/debug/halfproc/total/pinned"; return 1
	fi
	[ "$(echo "$want" | wc -l)" = 6 ] && [ "$want" = "$got" ] &&
		[ "$(echo "$jwant" | wc -l)" = 6 ] && [ "$jwant" = "$jgot" ] &&
		[ "$cross" = 10 ] && [ "$within" = 2 ] && [ "$arrived" = 10 ] && [ "$third" = 1 ] &&
		[ "$pages" -gt 0 ]
}
t yield_moves_create_instances_between_3_nodes yield_xnode
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
# Write hits too (docs/dmi.md, "Intra-node writes"): dmi bench's
# intra-node part times reads and writes of a page node 0 owns, from its
# program and from an instance, through the node and straight into the
# frames in the set's shared range, and fails if a write meant for the
# frames went to the engine.  Its lines of hits, and memcpy's.
bench_intra() {
	out="$(/bin/dmi bench --nodes 2 --sizes 8,4096 --reps 30 --rounds 5 --json /tmp/bench.json \
		</dev/null 2>&1)"; r=$?
	echo "$out" | grep -e '^memcpy' -e 'hit, ' -e '^operation' -e 'FAIL\|rror'
	[ "$r" = 0 ] || echo "$out" | tail -20
	return $r
}
t dmi_bench_write_and_read_hits_on_the_kernel_backend bench_intra
for i in 1 2 3; do
	# Hits from the frames in the shared range, then the node path.
	/bin/dmi run -n 1 $P 1 bench 2>&1 | sed 's/^/# frames: /'
	DMI_FAST_READS=0 /bin/dmi run -n 1 $P 1 bench 2>&1 | sed 's/^/# dmwrite: /'
	DMI_FAST_READS=0 DMI_REPLY=staging /bin/dmi run -n 1 $P 1 bench 2>&1 | sed 's/^/# staging: /'
done
exit $rc
