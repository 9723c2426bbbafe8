#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# members.sh NAME [SECONDS]: whether the program NAME runs here as a movable
# DMI run's compute instance (apps/guest/two.sh a runs it here and, through
# serve.sh, on guest B while a movable run of NAME is going): waits up to
# SECONDS (default 60) for a process NAME whose parent is a process NAME (the
# instance the node forked with clone3(CLONE_HALFPROC): on the kernel
# backend a member of the node's half-process set), then prints one line:
#   instance PID node PPID range INST/NODE same yes|no fds-above-stderr N backend B
# INST and NODE: their /proc/PID/maps lines inside the half-process range
# [2^45, 2^46) (a member's maps list its set's mappings there, patch 0012);
# same: whether the two lists are equal (the instance sees the set's
# mappings, made by its node after the fork too). Exits 0 if found with
# INST > 0, same yes, N = 0 and the kernel backend.
name="$1" secs="${2:-60}"
inrange() { awk '{ split($1, a, "-"); if (length(a[1]) == 12 && (substr(a[1], 1, 1) == "2" || substr(a[1], 1, 1) == "3")) print $1, $6 }' "$1" 2>/dev/null; }
i=0
while [ "$i" -lt $((secs * 5)) ]; do
	for d in /proc/[0-9]*; do
		[ "$(cat "$d/comm" 2>/dev/null)" = "$name" ] || continue
		pid="${d#/proc/}"
		ppid="$(sed -n 's/^PPid:[[:space:]]*//p' "$d/status" 2>/dev/null)"
		[ "$(cat "/proc/$ppid/comm" 2>/dev/null)" = "$name" ] || continue
		# A moment for the new instance to close its node's descriptors.
		sleep 1
		inrange "/proc/$pid/maps" >/tmp/members.inst
		inrange "/proc/$ppid/maps" >/tmp/members.node
		ni="$(wc -l </tmp/members.inst)" nn="$(wc -l </tmp/members.node)"
		same=no
		cmp -s /tmp/members.inst /tmp/members.node && same=yes
		fds=0
		for fd in $(cd "/proc/$pid/fd" 2>/dev/null && echo *); do [ "$fd" -gt 2 ] 2>/dev/null && fds=$((fds + 1)); done
		backend="$(halfproc info 2>/dev/null | sed -n 's/^backend: //p')"
		echo "instance $pid node $ppid range $ni/$nn same $same fds-above-stderr $fds backend ${backend:-?}"
		[ "$ni" -gt 0 ] && [ "$same" = yes ] && [ "$fds" = 0 ] && [ "$backend" = kernel ]
		exit
	done
	sleep 0.2 2>/dev/null || sleep 1
	i=$((i + 1))
done
echo "no instance of $name (a process $name whose parent is $name) within ${secs}s"
exit 1
