#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only OR MIT
# DMI in one QEMU guest on the kernel backend (busybox sh; scripts/guest.sh
# build puts the static programs at /bin/dmi and /dmi/, init.sh runs this in
# mode test as dmi/instances).  Compute instances (runtime/dmi/examples/
# instances.c: DMI_create'd members of the node's set, replies written into
# their private buffers with dmwrite) on 1 and 2 nodes, checked against the
# formula by the program itself; a killed instance named by the node; the
# paper's Jacobi (apps/dmi/jacobi.c) on 1 and 2 nodes against the serial
# reference within the app's tolerance (apps/common/cks-cmp).  TAP.
ifconfig lo 127.0.0.1 up 2>/dev/null || ip link set lo up
export HALFPROC_BACKEND=kernel
P=/dmi/instances
A=/dmi/apps
rc=0
n=0
echo "TAP version 13"
echo "1..8"
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
for i in 1 2 3; do
	# Hits from the frames in the shared range, then the node path.
	/bin/dmi run -n 1 $P 1 bench 2>&1 | sed 's/^/# frames: /'
	DMI_FAST_READS=0 /bin/dmi run -n 1 $P 1 bench 2>&1 | sed 's/^/# dmwrite: /'
	DMI_FAST_READS=0 DMI_REPLY=staging /bin/dmi run -n 1 $P 1 bench 2>&1 | sed 's/^/# staging: /'
done
exit $rc
