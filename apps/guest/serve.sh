#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# One request from guest A to guest B (apps/guest/two.sh b serves them with
# `nc -ll -p 7300 -e` this script; the socket is stdin and stdout). The
# guests' private link is the only network they have; this is the remote
# execution a cluster gets from ssh. Requests, one line:
#   ping                      answers pong (A waits for B's server)
#   dmi RANK SIZE PEERS [--movable] PROGRAM ARGS
#                             rank RANK of a SIZE-node DMI run
#                             (DMI_PEERS=PEERS); its output, then
#                             halfproc-rank-rc=STATUS. --movable: of a
#                             movable run (apps/guest/dmi-two.sh says
#                             what that sets)
#   exec COMMAND              COMMAND in sh: what Open MPI's rsh agent
#                             (apps/guest/rsh.sh) asks for, its orted
#   served                    how many DMI ranks and orteds this server ran
#                             ("dmi N", "mpi N")
#   quit                      B's server stops (two.sh b returns)
read -r kind rest || exit 1
case "$kind" in
ping) echo pong ;;
dmi)
	echo dmi >>/tmp/apps-served
	# shellcheck disable=SC2086 # the program and its arguments, one word each
	set -- $rest
	rank="$1" size="$2" peers="$3"
	shift 3
	if [ "$1" = --movable ]; then
		shift
		# As dmi-two.sh starts its own: DMI_MOVABLE=1, nothing open above
		# stderr (nc's descriptors), in a subshell.
		(
			for fd in $(cd /proc/self/fd 2>/dev/null && echo *); do
				[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
			done
			exec env DMI_RANK="$rank" DMI_SIZE="$size" DMI_PEERS="$peers" DMI_MOVABLE=1 "$@" </dev/null 2>&1
		)
	else
		env DMI_RANK="$rank" DMI_SIZE="$size" DMI_PEERS="$peers" "$@" </dev/null 2>&1
	fi
	echo "halfproc-rank-rc=$?"
	;;
exec)
	case "$rest" in *orted*) echo mpi >>/tmp/apps-served ;; esac
	sh -c "$rest" </dev/null 2>&1
	;;
served) for k in dmi mpi; do echo "$k $(grep -c "^$k$" /tmp/apps-served 2>/dev/null)"; done ;;
quit) touch /tmp/apps-quit; echo bye ;;
*) echo "serve.sh: unknown request '$kind'"; exit 2 ;;
esac
