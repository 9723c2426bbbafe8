#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# mpirun-two.sh N PROGRAM ARGS...: the `--mpirun` launcher of `halfproc
# bench apps` on two guests: Open MPI with one rank per guest (N = 2), two
# per guest (N = 4: ranks 0-1 here, 2-3 there; N = 1: this guest only),
# orted started on the other guest by apps/guest/rsh.sh,
# TCP between the ranks on eth0 (the guests' link; self within a rank),
# waiting ranks yielding (apps/mpirun.sh says why).
[ $# -ge 2 ] || { echo "usage: $0 1|2 PROGRAM [ARGS...]" >&2; exit 2; }
n="$1"
shift
case "$n" in
1) hosts=guest-a ;;
2) hosts=guest-a,guest-b ;;
4) hosts=guest-a:2,guest-b:2 ;;
*) echo "$0: $n ranks: two guests run 1, 2 or 4" >&2; exit 2 ;;
esac
[ "$n" != 1 ] && echo mpi >>/tmp/apps-launched
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec mpirun -np "$n" --host "$hosts" --mca plm_rsh_agent /apps/guest/rsh.sh \
	--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include eth0 \
	--mca oob_tcp_if_include eth0 --bind-to none --mca mpi_yield_when_idle 1 \
	"$@"
