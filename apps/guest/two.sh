#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The apps on DMI against MPI across two QEMU guests (scripts/guest.sh
# bench-apps; init.sh runs this in mode apps):
#   two.sh a|b MY_IP PEER_IP
# B serves requests (apps/guest/serve.sh: B's ranks of each DMI run, Open
# MPI's orted) until A says quit; A runs `halfproc bench apps` with the
# launchers of this directory and the options in /etc/bench-apps.args,
# writing apps.{json,svg,png} to the host's shared folder (/mnt) when the
# host shares one. TAP on stdout.
role="$1" me="$2" peer="$3"
export HALFPROC_BACKEND=kernel APPS_ME="$me" APPS_PEER="$peer"
# Open MPI's libraries and plugins where Debian keeps them; no ld.so.cache here.
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu/openmpi/lib:/usr/lib/x86_64-linux-gnu/pmix2/lib
# Open MPI names the nodes; both guests would otherwise be "(none)".
hostname "guest-$role"
if [ "$role" = a ]; then ip_a="$me" ip_b="$peer"; else ip_a="$peer" ip_b="$me"; fi
printf '127.0.0.1 localhost\n%s guest-a\n%s guest-b\n' "$ip_a" "$ip_b" >/etc/hosts
failed=0 n=0
tap() { # tap RC NAME
	n=$((n + 1))
	if [ "$1" = 0 ]; then echo "ok $n $2"; else echo "not ok $n $2"; failed=1; fi
}
echo "TAP version 13"
if [ "$role" = b ]; then
	echo "1..1"
	nc -ll -p 7300 -e /apps/guest/serve.sh &
	server=$!
	# Until A says quit (the harness's timeout bounds it).
	while [ ! -e /tmp/apps-quit ]; do sleep 1; done
	kill "$server"
	echo "ok 1 served_guest_a_until_quit"
	exit 0
fi
# With --yield yes (the half-process form, movable runs) a probe first.
yield_form=""
[ "$(sed -n '/^--yield$/{n;p}' /etc/bench-apps.args | tail -n 1)" = yes ] && yield_form=1
echo "1..$((3 + ${yield_form:-0}))"
halfproc info >/tmp/info.txt 2>&1
sed -n '1,2s/^/# /p' /tmp/info.txt
grep -q "^backend: kernel" /tmp/info.txt
tap $? "kernel_backend_on_guest_a"
i=0
until [ "$(echo ping | nc "$peer" 7300 2>/dev/null)" = pong ]; do
	i=$((i + 1))
	[ $i -lt 120 ] || { tap 1 "apps_on_two_guests # guest B's server never answered"; exit 1; }
	sleep 1
done
out=/tmp/bench-apps
mkdir -p /mnt "$out"
mount -t 9p -o trans=virtio,version=9p2000.L hostshare /mnt 2>/dev/null && out=/mnt
echo "# guest B answers; results to $out"
if [ -n "$yield_form" ]; then
	# A movable run of Jacobi's one-line form on both guests (medium: some
	# seconds of iterations to look at): on each, a process jacobi_yield
	# forked by its node process, seeing its set's mappings, on the kernel
	# backend (apps/guest/members.sh). Counted as a launch to B like the rest.
	/apps/guest/dmi-two.sh run -n 2 --movable /apps/dmi/jacobi_yield medium >/tmp/hp-probe.out 2>&1 &
	probe=$!
	echo "exec /apps/guest/members.sh jacobi_yield 120; echo members-rc=\$?" | nc "$peer" 7300 >/tmp/members-b.txt &
	mb=$!
	/apps/guest/members.sh jacobi_yield 120 >/tmp/members-a.txt
	ra=$?
	wait "$mb"
	wait "$probe"
	rp=$?
	sed 's/^/# hp probe, guest A: /' /tmp/members-a.txt
	sed 's/^/# hp probe, guest B: /' /tmp/members-b.txt
	grep -e '^checksum' -e '^iterations' -e 'time_per_iter' /tmp/hp-probe.out | sed 's/^/# hp probe: /'
	[ "$rp" = 0 ] || sed 's/^/# hp probe: /' /tmp/hp-probe.out
	[ "$ra" = 0 ] && [ "$rp" = 0 ] && grep -q '^members-rc=0$' /tmp/members-b.txt
	tap $? hp_instances_are_members_on_both_guests
fi
# The options, one a line (scripts/guest.sh bench-apps writes them).
set --
while IFS= read -r a; do set -- "$@" "$a"; done </etc/bench-apps.args
halfproc bench apps --bin /apps --dmi /apps/guest/dmi-two.sh \
	--mpirun /apps/guest/mpirun-two.sh --out "$out" "$@" 2>&1
r=$?
sync
tap "$r" apps_on_two_guests
# Every multi-node run had its upper ranks on B: what A launched, B served.
for k in dmi mpi; do echo "$k $(grep -c "^$k$" /tmp/apps-launched 2>/dev/null)"; done >/tmp/apps-launched.n
echo served | nc "$peer" 7300 >/tmp/apps-served.n
echo "# ranks on guest B launched from here: $(paste -sd' ' /tmp/apps-launched.n); run on guest B: $(paste -sd' ' /tmp/apps-served.n)"
cmp -s /tmp/apps-launched.n /tmp/apps-served.n
tap $? every_multi_node_run_had_its_upper_ranks_on_guest_b
echo quit | nc "$peer" 7300 >/dev/null
exit $failed
