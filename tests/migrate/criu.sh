#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# CRIU 3.17 (Debian 12's, copied into the guest with its libraries) side by
# side with halfproc on the same programs, in the debug-kernel guest:
# `criu check`; `criu dump` + `criu restore` (as root) against halfproc's
# checkpoint and migration between two node daemons run by an unprivileged
# user; times, image sizes, and whether a plain user may run each.  Both
# restored runs must end with the output of a run that never stopped.
# TAP on stdout; the numbers are `#` lines.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. /migrate/lib.sh
d=/tmp/criu
mkdir -p "$d"
chmod 777 "$d"
echo "TAP version 13"
echo "1..15"
now() { cut -d' ' -f1 /proc/uptime; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%d", (b - a) * 1000 }'; }
kib() { du -sk "$1" | cut -f1; }
# An unprivileged user for halfproc and for the refused criu run.
echo "user:x:1000:1000::/tmp:/bin/sh" >>/etc/passwd
echo "user:x:1000:" >>/etc/group
as_user() { su -s /bin/sh user -c "$*"; }

# criu check opens /dev/ptmx; the initramfs has no devpts mounted.
mkdir -p /dev/pts
mount -t devpts devpts /dev/pts 2>/dev/null
[ -e /dev/ptmx ] || ln -s pts/ptmx /dev/ptmx
criu check >"$d/check.log" 2>&1
r=$?
sed 's/^/# criu check: /' "$d/check.log" | tail -n 5
tap $r criu_check_as_root

seq 1 500000 >"$d/data"
: >"$d/empty"
# exited PID: the process is gone or a zombie
exited() { ! [ -e "/proc/$1" ] || grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat"; }

# criu_one NAME INPUT FILTER CMD...: dump mid-run (killing it), restore
# detached, wait, compare
criu_one() {
	name="$1" input="$2" filter="$3"
	shift 3
	"$@" <"$input" 2>/dev/null | sed "$filter" >"$d/$name.ref"
	rm -rf "$d/$name.img"; mkdir -p "$d/$name.img"
	# Its own session: a process started from this init has session id 0,
	# which criu refuses ("A session leader of N(N) is outside of its pid
	# namespace"); setsid execs the program, so $! is its pid.
	setsid "$@" <"$input" >"$d/$name.out" 2>/dev/null &
	pid=$!
	sleep 2
	t0=$(now)
	criu dump -t "$pid" -D "$d/$name.img" --shell-job -o dump.log
	r=$?
	t1=$(now)
	wait "$pid" 2>/dev/null
	[ $r = 0 ] || tail -n 5 "$d/$name.img/dump.log" | sed 's/^/#   /'
	tap $r "criu_dumps_$name"
	dumped=$r
	t2=$(now)
	r=1
	# Only a dumped (and so killed) process is restored; otherwise the
	# original finishes and proves nothing.
	if [ $dumped = 0 ]; then
		criu restore -D "$d/$name.img" --shell-job --restore-detached -o restore.log
		r=$?
	fi
	t3=$(now)
	[ $r = 0 ] || tail -n 5 "$d/$name.img/restore.log" 2>/dev/null | sed 's/^/#   /'
	# The restored process (criu keeps the pid) has 120 s to end.
	i=0
	while ! exited "$pid" && [ $i -lt 1200 ]; do sleep 0.1; i=$((i + 1)); done
	if ! exited "$pid"; then
		echo "# criu $name: restored pid $pid did not exit within 120 s; killed"
		kill -9 "$pid" 2>/dev/null
		r=1
	fi
	[ $r = 0 ] && sed "$filter" "$d/$name.out" | cmp -s - "$d/$name.ref"
	tap $? "criu_restored_${name}_ends_like_an_unstopped_run"
	echo "# criu $name: dump $(ms "$t0" "$t1") ms, restore $(ms "$t2" "$t3") ms, image $(kib "$d/$name.img") KiB (logs included)"
}

# ours_one NAME INPUT FILTER CMD...: as the user: checkpoint (size), one
# migration between the user's daemons, compare
ours_one() {
	name="$1" input="$2" filter="$3"
	shift 3
	cp "$input" "/tmp/mig/$name.in"
	"$@" <"$input" >"/tmp/mig/$name.raw" 2>/dev/null
	ref_rc=$?
	sed "$filter" "/tmp/mig/$name.raw" >"/tmp/mig/$name.ref"
	as_user "
		. /migrate/lib.sh
		export HALFPROC_NODE_SECRET_FILE=/tmp/mig/secret
		d=/tmp/mig
		wait_output=0
		migrate_run_hook() { sleep 2; rm -rf \$d/$name.img; halfproc checkpoint --node 127.0.0.1:7070 \$pid -o \$d/$name.img >/dev/null 2>&1; }
		migrate_run $name 1 127.0.0.1:7070 127.0.0.1:7071 $*
	"
	r=$?
	tap $r "halfproc_migrates_${name}_as_a_plain_user"
	sed "$filter" "/tmp/mig/$name.out" | cmp -s - "/tmp/mig/$name.ref" &&
		[ "$(cat "/tmp/mig/$name.rc")" = "$ref_rc" ]
	tap $? "halfproc_migrated_${name}_ends_like_an_unstopped_run"
	# shellcheck disable=SC2046 # split on purpose: frozen and total ms
	set -- $(cat "/tmp/mig/$name.moves")
	echo "# halfproc $name: checkpoint image $(kib "/tmp/mig/$name.img") KiB; migration frozen $1 ms, total $2 ms"
}

# ours_cr NAME FILTER CMD...: as the user, what criu_one does with
# criu: `halfproc run` on node A, 2 s in `halfproc checkpoint --kill`
# (stops the program, writes the image, kills it: what `criu dump` does by
# default), then `halfproc restore` of the image on the same node; the
# output before the checkpoint (run exits 75) and after it (from restore)
# together must be the unstopped run's.  Input from a file argument, not
# stdin: `run` relays stdin through the daemon, and what it had read past
# the pipe would not be in the image.  restore's time: from its start until
# it wrote the restored pid (after the restore; polled every 10 ms).
# Bounded: 60 s for restore to write the pid (or exit), then 120 s for the
# restored program to end; past either, what did not happen is said on a
# `#` line and the restored program and the restore client are killed.
ours_cr() {
	what="$1" name="cr-$1" filter="$2"
	shift 2
	"$@" </dev/null >"/tmp/mig/$name.raw" 2>/dev/null
	ref_rc=$?
	sed "$filter" "/tmp/mig/$name.raw" >"/tmp/mig/$name.ref"
	as_user "
		export HALFPROC_NODE_SECRET_FILE=/tmp/mig/secret
		d=/tmp/mig n=$name
		now() { cut -d' ' -f1 /proc/uptime; }
		rm -rf \$d/\$n.img \$d/\$n.pid \$d/\$n.rpid \$d/\$n.cpid \$d/\$n.rc1 \$d/\$n.rc2
		( halfproc run --node 127.0.0.1:7070 --pid-file \$d/\$n.pid -- $* </dev/null \
			>\$d/\$n.out1 2>\$d/\$n.err1; echo \$? >\$d/\$n.rc1 ) &
		i=0
		while [ ! -s \$d/\$n.pid ] && [ \$i -lt 300 ]; do sleep 0.1; i=\$((i + 1)); done
		sleep 2
		t0=\$(now)
		halfproc checkpoint --node 127.0.0.1:7070 --kill \$(cat \$d/\$n.pid) -o \$d/\$n.img \
			>\$d/\$n.cerr 2>&1 || exit 1
		t1=\$(now)
		wait
		t2=\$(now)
		( halfproc restore --node 127.0.0.1:7070 --pid-file \$d/\$n.rpid \$d/\$n.img </dev/null \
			>\$d/\$n.out2 2>\$d/\$n.err2 &
		  echo \$! >\$d/\$n.cpid; wait \$!; echo \$? >\$d/\$n.rc2 ) &
		i=0
		while [ ! -s \$d/\$n.rpid ] && [ ! -s \$d/\$n.rc2 ] && [ \$i -lt 6000 ]; do
			sleep 0.01; i=\$((i + 1))
		done
		t3=\$(now)
		[ -s \$d/\$n.rpid ] || [ -s \$d/\$n.rc2 ] ||
			echo \"# $what: halfproc restore neither wrote the restored pid nor exited within 60 s\"
		i=0
		while [ -s \$d/\$n.rpid ] && [ ! -s \$d/\$n.rc2 ] && [ \$i -lt 1200 ]; do
			sleep 0.1; i=\$((i + 1))
		done
		[ -s \$d/\$n.rpid ] && [ ! -s \$d/\$n.rc2 ] &&
			echo \"# $what: restored pid \$(cat \$d/\$n.rpid) did not end within 120 s\"
		if [ ! -s \$d/\$n.rc2 ]; then
			echo \"# $what: killing the restored program and halfproc restore\"
			[ -s \$d/\$n.rpid ] && kill -9 \$(cat \$d/\$n.rpid) 2>/dev/null
			sleep 1
			kill -9 \$(cat \$d/\$n.cpid) 2>/dev/null
		fi
		wait
		echo \$t0 \$t1 \$t2 \$t3 >\$d/\$n.times
		[ -s \$d/\$n.rpid ]
	"
	r=$?
	[ $r = 0 ] || sed 's/^/#   /' "/tmp/mig/$name.cerr" "/tmp/mig/$name.err2" 2>/dev/null | tail -n 5
	tap $r "halfproc_checkpoints_and_restores_${what}_as_a_plain_user"
	cat "/tmp/mig/$name.out1" "/tmp/mig/$name.out2" | sed "$filter" | cmp -s - "/tmp/mig/$name.ref" &&
		[ "$(cat "/tmp/mig/$name.rc1")" = 75 ] && [ "$(cat "/tmp/mig/$name.rc2")" = "$ref_rc" ]
	tap $? "halfproc_restored_${what}_ends_like_an_unstopped_run"
	# shellcheck disable=SC2046 # split on purpose: the four times
	set -- $(cat "/tmp/mig/$name.times" 2>/dev/null) 0 0 0 0
	echo "# halfproc $what checkpoint+restore: checkpoint --kill $(ms "$1" "$2") ms, restore $(ms "$3" "$4") ms, image $(kib "/tmp/mig/$name.img") KiB"
}

criu_one ticker "$d/empty" 's/ pid [0-9]*$//' /demo/ticker 150
criu_one xz "$d/data" "" /opt/deb/xz -T1 -6 -c

mkdir -p /tmp/mig
chmod 777 /tmp/mig
head -c 32 /dev/urandom >/tmp/mig/secret
chown 1000:1000 /tmp/mig/secret
as_user "
	. /migrate/lib.sh
	export HALFPROC_NODE_SECRET_FILE=/tmp/mig/secret
	start_node 127.0.0.1:7070 /tmp/mig/node-a.log
	start_node 127.0.0.1:7071 /tmp/mig/node-b.log
" </dev/null >/dev/null 2>&1 &
i=0
while ! grep -q listening /tmp/mig/node-b.log 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
grep -q "members of this node's set" /tmp/mig/node-b.log
tap $? halfproc_nodes_run_as_a_plain_user
ours_one ticker "$d/empty" 's/ pid [0-9]*$//' /demo/ticker 150
ours_one xz "$d/data" "" /opt/deb/xz -T1 -6 -c
ours_cr ticker 's/ pid [0-9]*$//' /demo/ticker 150
cp "$d/data" /tmp/mig/data
ours_cr xz "" /opt/deb/xz -T1 -6 -c /tmp/mig/data

# A plain user may not use criu at all.
mkdir -p "$d/user"; chmod 777 "$d/user"
as_user "criu dump -t $(pidof halfproc | cut -d" " -f1) -D $d/user -o user.log" >"$d/user.out" 2>&1
r=$?
cat "$d/user.out" "$d/user/user.log" 2>/dev/null | grep -E "Error|denied|not permitted" |
	head -n 3 | sed 's/^/# criu as user: /'
# Refused for its privileges (as root the same criu starts, above): the
# first thing it tries that a plain user may not do fails.
[ $r != 0 ] && cat "$d/user.out" "$d/user/user.log" 2>/dev/null |
	grep -q -i -E "permission denied|not permitted|root|CAP_"
tap $? criu_refuses_a_plain_user
killall halfproc 2>/dev/null
exit $failed
