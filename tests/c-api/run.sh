#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The C library as a user gets it: install it into a fresh prefix with
# scripts/install, copy each program here (and the installed example) to a
# directory outside the repository, and build it there with
#   cc prog.c $(pkg-config --cflags --libs halfproc)
# and each DMI program in dmi/ the same way with
#   cc prog.c $(pkg-config --cflags --libs dmi)
# run on two nodes by the installed `dmi run -n 2`; its output must hold the
# line its source gives after "EXPECT: ".
#
#   tests/c-api/run.sh host          build (shared library) and run each one
#                                    here: TAP on stdout, exit 1 on a failure
#   tests/c-api/run.sh guest OUTDIR  build static binaries for the guest
#                                    (the halfproc ones; the guest runs DMI
#                                    programs through scripts/guest.sh)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../../scripts/lib.sh"
what="${1:-host}"
work="$(mktemp -d /tmp/halfproc-c-api.XXXXXX)"
trap 'rm -rf "$work"' EXIT
"$HALFPROC_ROOT/scripts/install" --prefix "$work/prefix" >"$work/install.log" 2>&1 ||
	{ cat "$work/install.log" >&2; die "scripts/install failed"; }
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
mkdir -p "$work/src"
cp "$here"/*.c "$here"/dmi/*.c "$work/prefix/share/doc/halfproc/example.c" "$work/src/"
cd "$work/src"
# Every program here, and the installed example: a new one cannot be left out.
progs=(example)
for c in "$here"/*.c; do progs+=("$(basename "$c" .c)"); done
dmi_progs=()
for c in "$here"/dmi/*.c; do dmi_progs+=("$(basename "$c" .c)"); done

build() {	# build PROG OUTPUT [--static]: as a user would, through pkg-config
	# shellcheck disable=SC2046
	cc -std=gnu11 -Wall -Werror -O2 ${3:+-static} -o "$2" "$1.c" -pthread \
		$(pkg-config ${3:+--static} --cflags --libs "${lib:-halfproc}")
}
case "$what" in
host)
	# The linker records this as the run path (as -Wl,-rpath would).
	export LD_RUN_PATH="$work/prefix/lib"
	n=0 bad=0
	echo "TAP version 13"
	echo "1..$((${#progs[@]} + ${#dmi_progs[@]}))"
	for p in "${progs[@]}"; do
		n=$((n + 1))
		if ! build "$p" "$p" 2>"$p.err"; then
			sed 's/^/# /' "$p.err"
			echo "not ok $n c_api.$p # did not build"
			bad=1
			continue
		fi
		if timeout 180 "./$p" >"$p.out" 2>&1; then
			echo "ok $n c_api.$p"
		else
			echo "not ok $n c_api.$p (exit $?)"
			bad=1
		fi
		sed 's/^/# /' "$p.out"
	done
	for p in "${dmi_progs[@]}"; do
		n=$((n + 1))
		want="$(sed -n 's/^.*EXPECT: //p' "$p.c")"
		if [ -z "$want" ]; then
			echo "not ok $n c_api.dmi.$p # tests/c-api/dmi/$p.c has no EXPECT: line"
			bad=1
			continue
		fi
		if ! lib=dmi build "$p" "$p" 2>"$p.err"; then
			sed 's/^/# /' "$p.err"
			echo "not ok $n c_api.dmi.$p # did not build"
			bad=1
			continue
		fi
		if timeout 120 "$work/prefix/bin/dmi" run -n 2 -- "./$p" >"$p.out" 2>&1; then
			if grep -qxF "$want" "$p.out"; then
				echo "ok $n c_api.dmi.$p"
			else
				echo "not ok $n c_api.dmi.$p # no line \"$want\""
				bad=1
			fi
		else
			echo "not ok $n c_api.dmi.$p (dmi run -n 2: exit $?)"
			bad=1
		fi
		sed 's/^/# /' "$p.out"
	done
	exit "$bad"
	;;
guest)
	out="${2:?usage: tests/c-api/run.sh guest OUTDIR}"
	mkdir -p "$out"
	for p in "${progs[@]}"; do
		build "$p" "$out/$p" --static ||
			die "building tests/c-api/$p.c statically against the installed library failed"
	done
	;;
*) die "usage: tests/c-api/run.sh host | guest OUTDIR" ;;
esac
