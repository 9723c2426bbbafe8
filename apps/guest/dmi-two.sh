#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# dmi-two.sh run -n N [--movable] PROGRAM ARGS...: the `--dmi` launcher of
# `halfproc bench apps` on two guests (apps/guest/two.sh a). N = 2: rank 0
# here and rank 1 on the other guest (apps/guest/serve.sh), one DMI node per
# guest; N = 4: ranks 0 and 1 here, 2 and 3 there (blocks of ranks per
# guest, as Open MPI's --host a:2,b:2 places them); N = 1: one node here.
# Every node on the kernel backend (HALFPROC_BACKEND=kernel, init.sh). Rank
# 0's output on stdout (the report); the other ranks' on stderr. Each run
# gets its own ports (a late starter meets the right run).
# --movable: a movable run, as `dmi run --movable` starts one (what `bench
# apps --yield yes` asks for): every node with DMI_MOVABLE=1 (the program
# after DMI_init runs as a compute instance, a member of the node's
# half-process set), its descriptors above stderr closed and stdin from
# /dev/null (neither a pipe nor the guest's console could move with it).
# Environment: APPS_ME, APPS_PEER (the two guests' addresses).
usage() { echo "usage: $0 run -n 1|2|4 [--movable] PROGRAM [ARGS...]" >&2; exit 2; }
[ "$1" = run ] && [ "$2" = -n ] && [ $# -ge 4 ] || usage
n="$3"
shift 3
movable=""
if [ "$1" = --movable ]; then
	movable=1
	shift
	[ $# -ge 1 ] || usage
fi
seq=$(($(cat /tmp/dmi-two.seq 2>/dev/null || echo 0) + 1))
echo "$seq" >/tmp/dmi-two.seq
port=$((7400 + 4 * seq))
# node RANK PROGRAM ARGS...: one node of this run, here. A movable one in
# a subshell: it closes what the shell has open above stderr (busybox sh
# has no close_range; a substitution's child lists the same descriptors)
# and touches nothing of this script's.
node() {
	r_="$1"
	shift
	if [ -z "$movable" ]; then
		env DMI_RANK="$r_" DMI_SIZE="$n" DMI_PEERS="$peers" "$@"
		return
	fi
	(
		for fd in $(cd /proc/self/fd 2>/dev/null && echo *); do
			[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
		done
		exec env DMI_RANK="$r_" DMI_SIZE="$n" DMI_PEERS="$peers" DMI_MOVABLE=1 "$@" </dev/null
	)
}
case "$n" in
1)
	peers="127.0.0.1:$port"
	[ -n "$movable" ] || exec env DMI_RANK=0 DMI_SIZE=1 DMI_PEERS="$peers" "$@"
	node 0 "$@"
	exit
	;;
2) here=1 ;;
4) here=2 ;;
*) echo "$0: $n nodes: two guests run 1, 2 or 4" >&2; exit 2 ;;
esac
# Rank r listens on port+r, on the guest that runs it.
peers="" r=0
while [ $r -lt "$n" ]; do
	if [ $r -lt $here ]; then ip="$APPS_ME"; else ip="$APPS_PEER"; fi
	peers="$peers${peers:+,}$ip:$((port + r))"
	r=$((r + 1))
done
remote="" r=$here
while [ $r -lt "$n" ]; do
	echo dmi >>/tmp/apps-launched
	echo "dmi $r $n $peers ${movable:+--movable }$*" | nc "$APPS_PEER" 7300 >"/tmp/dmi-rank$r.out" &
	remote="$remote $!"
	r=$((r + 1))
done
local_pids="" r=1
while [ $r -lt $here ]; do
	node $r "$@" >"/tmp/dmi-rank$r.out" 2>&1 &
	local_pids="$local_pids $!"
	r=$((r + 1))
done
node 0 "$@"
r0=$?
failed=0
r=1
for p in $local_pids; do
	wait "$p" || { echo "$0: rank $r (here) exited $?" >&2; failed=1; }
	sed "s/^/rank $r: /" "/tmp/dmi-rank$r.out" >&2
	r=$((r + 1))
done
for p in $remote; do
	wait "$p"
	grep -v '^halfproc-rank-rc=' "/tmp/dmi-rank$r.out" | sed "s/^/rank $r: /" >&2
	rc="$(sed -n 's/^halfproc-rank-rc=//p' "/tmp/dmi-rank$r.out")"
	[ "$rc" = 0 ] || { echo "$0: rank $r (on $APPS_PEER) ${rc:+exited $rc}${rc:-gave no status}" >&2; failed=1; }
	r=$((r + 1))
done
[ "$r0" = 0 ] && [ "$failed" = 0 ] && exit 0
echo "$0: rank 0 exited $r0" >&2
exit 1
