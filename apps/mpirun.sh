#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# mpirun.sh NP PROGRAM [ARGS...]: run an MPI app on NP ranks of this machine,
# whatever the MPI and whoever runs it.  Open MPI refuses root without
# --allow-run-as-root and more ranks than cores without --oversubscribe;
# MPICH needs neither.  Shared memory between the ranks (Open MPI: vader).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 NP PROGRAM [ARGS...]" >&2; exit 2; }
np="$1"
shift
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	exec mpirun --oversubscribe --bind-to none --mca btl self,vader \
		-np "$np" "$@"
fi
exec mpirun -np "$np" "$@"
