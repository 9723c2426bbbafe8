#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# dmi-two.sh run -n N PROGRAM ARGS...: the `--dmi` launcher of `halfproc
# bench apps` on two guests (apps/guest/two.sh a). N = 2: rank 0 here and
# rank 1 on the other guest (apps/guest/serve.sh), one DMI node per guest;
# N = 4: ranks 0 and 1 here, 2 and 3 there (blocks of ranks per guest, as
# Open MPI's --host a:2,b:2 places them); N = 1: one node here. Every node
# on the kernel backend (HALFPROC_BACKEND=kernel, init.sh). Rank 0's
# output on stdout (the report); the other ranks' on stderr. Each run gets
# its own ports (a late starter meets the right run).
# Environment: APPS_ME, APPS_PEER (the two guests' addresses).
[ "$1" = run ] && [ "$2" = -n ] && [ $# -ge 4 ] ||
	{ echo "usage: $0 run -n 1|2|4 PROGRAM [ARGS...]" >&2; exit 2; }
n="$3"
shift 3
seq=$(($(cat /tmp/dmi-two.seq 2>/dev/null || echo 0) + 1))
echo "$seq" >/tmp/dmi-two.seq
port=$((7400 + 4 * seq))
case "$n" in
1) exec env DMI_RANK=0 DMI_SIZE=1 DMI_PEERS="127.0.0.1:$port" "$@" ;;
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
	echo "dmi $r $n $peers $*" | nc "$APPS_PEER" 7300 >"/tmp/dmi-rank$r.out" &
	remote="$remote $!"
	r=$((r + 1))
done
local_pids="" r=1
while [ $r -lt $here ]; do
	env DMI_RANK=$r DMI_SIZE="$n" DMI_PEERS="$peers" "$@" >"/tmp/dmi-rank$r.out" 2>&1 &
	local_pids="$local_pids $!"
	r=$((r + 1))
done
env DMI_RANK=0 DMI_SIZE="$n" DMI_PEERS="$peers" "$@"
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
