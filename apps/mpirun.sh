#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# mpirun.sh NP PROGRAM [ARGS...]: run an MPI app on NP ranks of this machine,
# whatever the MPI and whoever runs it.  Open MPI refuses root without
# --allow-run-as-root and more ranks than cores without --oversubscribe;
# MPICH needs neither.  Shared memory between the ranks (Open MPI: vader).
# Waiting ranks yield the CPU (mpi_yield_when_idle): Open MPI only does that
# by itself when it knows it is oversubscribed, and on cores shared with
# other work a rank that spins keeps the rank it waits for off the CPU
# (measured: CG small on 2 ranks, 0.8-10 ms per iteration spinning against
# 0.2-0.4 ms yielding, on this 2-core machine under load).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 NP PROGRAM [ARGS...]" >&2; exit 2; }
np="$1"
shift
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	exec mpirun --oversubscribe --bind-to none --mca btl self,vader \
		--mca mpi_yield_when_idle 1 \
		-np "$np" "$@"
fi
exec mpirun -np "$np" "$@"
