#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only OR MIT
# Compute instances on the kernel backend, in the QEMU guest (busybox sh).
# Not wired into scripts/guest.sh yet; by hand (docs/dmi.md):
#   static dmi (RUSTFLAGS=-C target-feature=+crt-static, --target
#   x86_64-unknown-linux-gnu) at /bin/dmi, examples/instances.c linked
#   with -static against libdmi.a at /tests/dmi_inst_prog, this script at
#   /tests/dmi_inst; boot with HALFPROC_APPEND=halfproc.only=dmi_inst.
# instances.c checks its checksum against the formula and exits non-zero
# when it differs.
ifconfig lo 127.0.0.1 up 2>/dev/null || ip link set lo up
export HALFPROC_BACKEND=kernel
P=/tests/dmi_inst_prog
rc=0
n=0
echo "1..5"
t() { # name command...
	name="$1"; shift
	n=$((n + 1))
	out="$("$@" 2>&1)"; r=$?
	echo "$out" | sed 's/^/# /'
	if [ "$r" = 0 ]; then echo "ok $n $name"; else echo "not ok $n $name (rc $r)"; rc=1; fi
}
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
for i in 1 2 3; do
	/bin/dmi run -n 1 $P 1 bench 2>&1 | sed 's/^/# dmwrite: /'
	DMI_REPLY=staging /bin/dmi run -n 1 $P 1 bench 2>&1 | sed 's/^/# staging: /'
done
exit $rc
