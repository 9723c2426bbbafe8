#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Part of the packages' boot test, run as the normal user hp: two node
# daemons on loopback, an unmodified program (tests/demo/ticker.c, built
# against Debian 12's libc) started with `halfproc run` on node A and moved
# A -> B -> A while it prints; its output and exit status must equal those
# of a run that never moved.  TAP on stdout, exit 1 on a failure.
set -u
D=/usr/local/lib/halfproc-boot-test
w="$(mktemp -d)"
moves=4 ticks=100 fail=0
echo "TAP version 13"
echo "1..3"
head -c 32 /dev/urandom | base64 >"$w/secret"
chmod 600 "$w/secret"
export HALFPROC_NODE_SECRET_FILE="$w/secret"
node() {	# node NAME: start a daemon, print its address
	halfproc node --listen 127.0.0.1:0 >"$w/node-$1.log" 2>&1 &
	i=0
	while [ $i -lt 100 ]; do
		a="$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$w/node-$1.log" | head -n 1)"
		[ -n "$a" ] && { echo "$a"; return 0; }
		sleep 0.1; i=$((i + 1))
	done
	sed 's/^/# /' "$w/node-$1.log" >&2
	return 1
}
a="$(node A)" && b="$(node B)"
if [ -z "$a" ] || [ -z "$b" ]; then
	echo "not ok 1 two node daemons started"
	echo "Bail out! no node daemon"
	exit 1
fi
echo "ok 1 two node daemons started ($a, $b)"
"$D/ticker" $ticks stdin </dev/null >"$w/reference.out"
ref_rc=$?
# The program's stdin (relayed by halfproc run) stays open until the moves
# are done, and it reads it to the end before its last line: it cannot
# finish before them, however slow they are.
mkfifo "$w/in"
halfproc run --node "$a" --pid-file "$w/pid" -- "$D/ticker" $ticks stdin \
	<"$w/in" >"$w/run.out" 2>"$w/run.err" &
run=$!
exec 3>"$w/in"
i=0
while [ ! -s "$w/pid" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
pid="$(cat "$w/pid" 2>/dev/null)" from="$a" to="$b" moved=0 m=0
while [ -n "$pid" ] && [ $m -lt $moves ]; do
	m=$((m + 1))
	sleep 0.3
	if new="$(halfproc migrate --node "$from" --to "$to" "$pid" 2>"$w/migrate.err")"; then
		echo "# move $m: pid $pid -> $new: $(tail -n 1 "$w/migrate.err")"
		pid="$new" t="$from" from="$to" to="$t" moved=$((moved + 1))
	else
		sed 's/^/# migrate: /' "$w/migrate.err"
	fi
done
if [ "$moved" = $moves ]; then
	echo "ok 2 $moved live migrations"
else
	echo "not ok 2 $moved of $moves live migrations"
	fail=1
fi
exec 3>&-
wait "$run"
rc=$?
strip() { sed 's/ pid [0-9]*$//' "$1"; }
places="$(awk '$1 == "tick" { print $NF }' "$w/run.out" | uniq | wc -l)"
# (How many processes printed tick lines depends on timing: a move after
# the last tick, while the program reads its stdin, prints none.  Not judged.)
if [ "$(strip "$w/reference.out")" = "$(strip "$w/run.out")" ] && [ "$rc" = "$ref_rc" ]; then
	echo "ok 3 same output and exit status ($rc) as the unmoved run, printed from $places processes"
else
	echo "not ok 3 output or exit status differs (rc $rc, unmoved $ref_rc)"
	diff "$w/reference.out" "$w/run.out" | head -n 10 | sed 's/^/# /'
	sed 's/^/# run: /' "$w/run.err"
	fail=1
fi
pkill -u "$(id -u)" -f "halfproc node" 2>/dev/null
rm -rf "$w"
exit "$fail"
