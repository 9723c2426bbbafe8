#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# dmi-two.sh run -n N PROGRAM ARGS...: the `--dmi` launcher of `halfproc
# bench apps` on two guests (apps/guest/two.sh a). N = 2: rank 0 here and
# rank 1 on the other guest (apps/guest/serve.sh), one DMI node per guest,
# each on the kernel backend (HALFPROC_BACKEND=kernel, init.sh); N = 1: one
# node here. Rank 0's output on stdout (the report); rank 1's on stderr.
# Each run gets its own port (a late starter meets the right run).
# Environment: APPS_ME, APPS_PEER (the two guests' addresses).
[ "$1" = run ] && [ "$2" = -n ] && [ $# -ge 4 ] ||
	{ echo "usage: $0 run -n 1|2 PROGRAM [ARGS...]" >&2; exit 2; }
n="$3"
shift 3
seq=$(($(cat /tmp/dmi-two.seq 2>/dev/null || echo 0) + 1))
echo "$seq" >/tmp/dmi-two.seq
port=$((7400 + seq))
case "$n" in
1) exec env DMI_RANK=0 DMI_SIZE=1 DMI_PEERS="127.0.0.1:$port" "$@" ;;
2) ;;
*) echo "$0: $n nodes: two guests run 1 or 2" >&2; exit 2 ;;
esac
peers="$APPS_ME:$port,$APPS_PEER:$port"
echo dmi >>/tmp/apps-launched
echo "dmi $peers $*" | nc "$APPS_PEER" 7300 >/tmp/dmi-rank1.out &
remote=$!
env DMI_RANK=0 DMI_SIZE=2 DMI_PEERS="$peers" "$@"
r0=$?
wait "$remote"
grep -v '^halfproc-rank1-rc=' /tmp/dmi-rank1.out | sed 's/^/rank 1: /' >&2
r1="$(sed -n 's/^halfproc-rank1-rc=//p' /tmp/dmi-rank1.out)"
[ "$r0" = 0 ] && [ "$r1" = 0 ] && exit 0
echo "$0: rank 0 exited $r0, rank 1 (on $APPS_PEER) ${r1:-gave no status}" >&2
exit 1
