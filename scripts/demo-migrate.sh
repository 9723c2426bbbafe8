#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The main job's live-migration demo, on this host (portable backend): two
# node daemons on loopback, an unmodified C program (tests/demo/ticker.c)
# started on node A with `halfproc run`, then moved back and forth with
# `halfproc migrate` while it runs.  Its output keeps reaching `halfproc
# run`, and it must end with the same lines, digest and exit status as a run
# that never moved; the script fails (exit 1) otherwise.
#
#   scripts/demo-migrate.sh [--debug] [--moves N] [--ticks N]
#     --debug     use the debug build (what scripts/test already built)
#     --moves N   migrations to make (default 6)
#     --ticks N   lines the program prints, 40 ms apart (default 150)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/lib.sh"
profile=release moves=6 ticks=150
while (($#)); do
	case "$1" in
	--debug) profile=debug ;;
	--moves) moves="$2"; shift ;;
	--ticks) ticks="$2"; shift ;;
	-h|--help) sed -n '3,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument $1 (try --help)" ;;
	esac
	shift
done

phase "build the halfproc command ($profile)"
flags=(-q -p halfproc-cli --manifest-path "$HALFPROC_ROOT/Cargo.toml")
[ "$profile" = release ] && flags+=(--release)
cargo build "${flags[@]}"
target="$(cargo metadata -q --format-version 1 --no-deps \
	--manifest-path "$HALFPROC_ROOT/Cargo.toml" |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
hp="$target/$profile/halfproc"
done_phase

work="$(mktemp -d)"
# The daemons' pids go to a file: start_node runs in a command
# substitution's subshell, whose variables the parent never sees.
cleanup() {
	local pids
	pids="$(cat "$work/daemons" 2>/dev/null)"
	# shellcheck disable=SC2086 # one pid per word
	[ -n "$pids" ] && kill -TERM $pids 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
cc -O2 -Wall -Werror -o "$work/ticker" "$HALFPROC_ROOT/tests/demo/ticker.c"
head -c 32 /dev/urandom | base64 >"$work/secret"
export HALFPROC_NODE_SECRET_FILE="$work/secret"

start_node() {	# start_node NAME: prints the address it listens on
	local log="$work/node-$1.log" addr=""
	"$hp" node --listen 127.0.0.1:0 >"$log" 2>&1 &
	echo $! >>"$work/daemons"
	for _ in $(seq 100); do
		addr="$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$log" | head -n 1)"
		[ -n "$addr" ] && break
		sleep 0.1
	done
	[ -n "$addr" ] || die "node $1 did not start: $(cat "$log")"
	echo "$addr"
}
phase "two node daemons on loopback (shared secret)"
a="$(start_node A)"
b="$(start_node B)"
info "node A on $a, node B on $b"
done_phase

phase "halfproc run -- ./ticker $ticks on node A, and $moves live migrations while it runs"
(cd "$work" && exec ./ticker "$ticks" >reference.out) &
ref=$!
(cd "$work" && exec "$hp" run --node "$a" --pid-file "$work/pid" -- ./ticker "$ticks" \
	>"$work/run.out" 2>"$work/run.err") &
run=$!
for _ in $(seq 100); do [ -s "$work/pid" ] && break; sleep 0.1; done
[ -s "$work/pid" ] || die "halfproc run did not start the program: $(cat "$work/run.err")"
pid="$(cat "$work/pid")" from="$a" to="$b"
for i in $(seq "$moves"); do
	sleep 0.4
	if ! pid="$("$hp" migrate --node "$from" --to "$to" "$pid" 2>"$work/migrate.err")"; then
		cat "$work/migrate.err" >&2
		die "migration $i failed"
	fi
	info "move $i: $(tail -n 1 "$work/migrate.err")"
	if [ "$i" = 1 ]; then
		info "halfproc ps on node A:"; "$hp" ps --node "$a" | sed 's/^/        /' >&2
		info "halfproc ps on node B:"; "$hp" ps --node "$b" | sed 's/^/        /' >&2
	fi
	tmp="$from" from="$to" to="$tmp"
done
rc=0; wait "$run" || rc=$?
ref_rc=0; wait "$ref" || ref_rc=$?
done_phase

phase "check: output and exit status as a run that never moved"
strip() { sed 's/ pid [0-9]*$//' "$1"; }
info "where the program printed from (a new pid after each move):"
awk '{ p = $NF } p != last && $1 == "tick" { printf "        %s\n", $0; last = p }' \
	"$work/run.out" >&2
places="$(awk '$1 == "tick" { print $NF }' "$work/run.out" | uniq | wc -l)"
tail -n 1 "$work/run.out" | sed 's/^/        /' >&2
ok=1
if ! diff <(strip "$work/reference.out") <(strip "$work/run.out") >"$work/diff"; then
	info "FAILED: the output differs from the unmigrated run:"
	head -n 20 "$work/diff" >&2
	ok=0
fi
if [ "$rc" != "$ref_rc" ]; then
	info "FAILED: halfproc run exited $rc, the unmigrated run $ref_rc"
	ok=0
fi
if [ "$places" -lt $((moves + 1)) ]; then
	info "FAILED: the output came from $places processes, not $((moves + 1))"
	ok=0
fi
((ok)) || die "migration demo failed"
info "$ticks lines in order, the same digest and exit status ($rc) as the unmigrated run, printed from $places processes on 2 nodes"
done_phase
