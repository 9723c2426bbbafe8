#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# members.sh NAME [SECONDS]: whether the program NAME runs here as a movable
# DMI run's compute instance (apps/guest/two.sh a runs it here and, through
# serve.sh, on guest B while a movable run of NAME is going): waits up to
# SECONDS (default 60) for a process NAME whose parent is a process NAME (the
# instance the node forked with clone3(CLONE_HALFPROC): on the kernel
# backend a member of the node's half-process set), then prints one line:
#   instance PID node PPID range INST/NODE same yes|no fds-above-stderr N
#   backend B node-inherited FD:TARGET,...|none
# INST and NODE: their /proc/PID/maps lines inside the half-process range
# [2^45, 2^46) (a member's maps list its set's mappings there, patch 0012);
# same: whether the two lists are equal (the instance sees the set's
# mappings, made by its node after the fork too); node-inherited: the
# node's descriptors above stderr that are not close-on-exec (what its
# launch left open; the runtime's own are close-on-exec). Exits 0 if found with
# INST > 0, same yes, N = 0 and the kernel backend.
name="$1" secs="${2:-60}"
inrange() { awk '{ split($1, a, "-"); if (length(a[1]) == 12 && (substr(a[1], 1, 1) == "2" || substr(a[1], 1, 1) == "3")) print $1, $6 }' "$1" 2>/dev/null; }
end=$(($(date +%s) + secs))
while [ "$(date +%s)" -lt "$end" ]; do
	for d in /proc/[0-9]*; do
		# read, not cat: no process per entry (TCG makes each one slow).
		c="" && { read -r c <"$d/comm"; } 2>/dev/null
		[ "$c" = "$name" ] || continue
		pid="${d#/proc/}"
		ppid="$(sed -n 's/^PPid:[[:space:]]*//p' "$d/status" 2>/dev/null)"
		c="" && { read -r c <"/proc/$ppid/comm"; } 2>/dev/null
		[ "$c" = "$name" ] || continue
		# A moment for the new instance to close its node's descriptors.
		sleep 1
		inrange "/proc/$pid/maps" >/tmp/members.inst
		inrange "/proc/$ppid/maps" >/tmp/members.node
		ni="$(wc -l </tmp/members.inst)" nn="$(wc -l </tmp/members.node)"
		same=no
		cmp -s /tmp/members.inst /tmp/members.node && same=yes
		fds=0
		for fd in $(cd "/proc/$pid/fd" 2>/dev/null && echo *); do [ "$fd" -gt 2 ] 2>/dev/null && fds=$((fds + 1)); done
		# The node's descriptors above stderr without close-on-exec (the
		# runtime makes all of its own so): what the launch left open.
		inh=""
		for fd in $(cd "/proc/$ppid/fd" 2>/dev/null && echo *); do
			[ "$fd" -gt 2 ] 2>/dev/null || continue
			fl="$(sed -n 's/^flags:[[:space:]]*//p' "/proc/$ppid/fdinfo/$fd" 2>/dev/null)"
			[ -n "$fl" ] && [ $((0$fl & 02000000)) = 0 ] &&
				inh="$inh${inh:+,}$fd:$(readlink "/proc/$ppid/fd/$fd")"
		done
		backend="$(halfproc info 2>/dev/null | sed -n 's/^backend: //p')"
		echo "instance $pid node $ppid range $ni/$nn same $same fds-above-stderr $fds backend ${backend:-?} node-inherited ${inh:-none}"
		[ "$ni" -gt 0 ] && [ "$same" = yes ] && [ "$fds" = 0 ] && [ "$backend" = kernel ]
		exit
	done
	sleep 0.2 2>/dev/null || sleep 1
done
echo "no instance of $name (a process $name whose parent is $name) within ${secs}s"
exit 1
