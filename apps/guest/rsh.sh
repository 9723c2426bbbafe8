#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# rsh.sh HOST COMMAND...: Open MPI's rsh agent between the two guests
# (mpirun --mca plm_rsh_agent): COMMAND (its orted) runs on HOST through
# that guest's request server (apps/guest/serve.sh), its output comes back
# here, and this returns when it ends, as ssh would.
host="$1"
shift
echo "exec $*" | nc "$host" 7300
