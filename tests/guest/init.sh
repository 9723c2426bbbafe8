#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# /init of the test initramfs.  The mode comes from the kernel command line
# (halfproc.mode=test|bench|demo|migrate|criu|two|apps|panic|hang|fail; two and apps also
# halfproc.role/ip/peer from halfproc-harness pair); the exit status goes to the
# harness over the second serial port as HALFPROC_EXIT=<n>.
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmp /tmp
# The module's counters (hp_counters, halfproc bench mm).
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mkdir -p /dev/shm && mount -t tmpfs shm /dev/shm
# cgroup v2 (hp_memcg); absent without CONFIG_CGROUPS, and hp_memcg skips.
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
ip link set lo up 2>/dev/null
export PATH=/bin:/sbin:/usr/bin:/usr/sbin:/tests
# The runtime's tests and CLI must use the kernel backend here.
export HALFPROC_BACKEND=kernel
# Emulated and possibly sharing the host: give each runtime case more time.
export HALFPROC_TEST_TIMEOUT=240

mode=test
only=""
repeat=1
role="" ipaddr="" peer="" moves=20
for a in $(cat /proc/cmdline); do
	case "$a" in
	halfproc.mode=*) mode="${a#halfproc.mode=}" ;;
	halfproc.only=*) only="$(echo "${a#halfproc.only=}" | tr , ' ')" ;;
	halfproc.repeat=*) repeat="${a#halfproc.repeat=}" ;;
	halfproc.role=*) role="${a#halfproc.role=}" ;;
	halfproc.ip=*) ipaddr="${a#halfproc.ip=}" ;;
	halfproc.peer=*) peer="${a#halfproc.peer=}" ;;
	halfproc.moves=*) moves="${a#halfproc.moves=}" ;;
	esac
done

status() {
	echo "HALFPROC_EXIT=$1" >/dev/ttyS1
	sync
	poweroff -f
}

n=0
tap() {	# tap <rc> <name>: one TAP line of the shell's own tests
	n=$((n + 1))
	if [ "$1" = 0 ]; then echo "ok $n init.$2"; else echo "not ok $n init.$2"; rc=1; fi
}

# prog NAME CMD...: run a test program between the harness's markers, so
# its TAP is judged against its own plan and a crash cannot hide.  The
# harness parses exactly these two lines (qemu/harness/src/programs.rs):
#   # halfproc-harness: begin NAME
#   # halfproc-harness: end NAME rc=STATUS
# NAME has no spaces; it is what scripts/guest.sh lists in out/<flavour>/expect.
# The end marker starts on a fresh line even when the program's last line
# did not end in a newline.
prog() {
	name="$1"
	shift
	printf '# halfproc-harness: begin %s\n' "$name"
	"$@"
	r=$?
	printf '\n# halfproc-harness: end %s rc=%s\n' "$name" "$r"
	return $r
}

# The kernel's own mm selftests: normal processes must not notice us.
# Without ASLR: mremap_test picks MAP_FIXED_NOREPLACE addresses next to
# its own mappings and fails at random (EEXIST) when they collide.
mm_selftests() {
	echo 0 >/proc/sys/kernel/randomize_va_space
	for t in /tests/mm/*; do
		[ -x "$t" ] || continue
		(cd /tmp && prog "mm/${t##*/}" "$t") || rc=1
	done
	echo 2 >/proc/sys/kernel/randomize_va_space
}

# with_reclaim CMD...: run CMD with a zram swap device and a hugetlb pool
# (hp_reclaim), then take both away again: elsewhere swap would turn
# hp_memcg's memcg OOM into swapping.
with_reclaim() {
	if [ -e /sys/block/zram0/disksize ]; then
		echo 1 >/sys/block/zram0/reset 2>/dev/null
		echo 256M >/sys/block/zram0/disksize && mkswap /dev/zram0 >/dev/null &&
			swapon /dev/zram0 && echo "# reclaim: zram0 swap, 256 MiB"
	fi
	echo 4 >/proc/sys/vm/nr_hugepages 2>/dev/null
	"$@"
	r=$?
	swapoff /dev/zram0 2>/dev/null
	echo 0 >/proc/sys/vm/nr_hugepages 2>/dev/null
	return $r
}

case "$mode" in
mm)	# The unpatched kernel (scripts/stock-compare.sh): the mm selftests only.
	rc=0; mm_selftests; status $rc ;;
panic)	echo "harness self-test: init exits, the kernel must panic"; exit 1 ;;
hang)	echo "harness self-test: init hangs, the harness must time out"; while :; do sleep 60; done ;;
fail)	echo "not ok 1 harness.self_test_failure"; status 1 ;;
esac

# What this boot runs on (results are recorded per configuration).
paging=4-level
grep -qw la57 /proc/cpuinfo && paging=5-level
pti=off
dmesg | grep -q "page tables isolation: enabled" && pti=on
echo "# halfproc: $paging paging, pti $pti"

rc=0
for m in /lib/modules/extra/*.ko; do [ -f "$m" ] && insmod "$m"; done
echo "TAP version 13"
# The patched kernel without the module behaves normally and says so.
# (Mode apps boots only the apps' programs: scripts/guest.sh bench-apps.)
[ "$mode" = apps ] || { /tests/hp_nomod; tap $? no_module_errnos; }
module=/lib/modules/halfproc.ko
# sabotage: the test-only twin without member TLB flushes; hp_tlb must fail.
[ "$mode" = sabotage ] && module=/lib/modules/halfproc-sabotage.ko
insmod "$module"; tap $? module_loads
grep -q halfproc /proc/modules; tap $? module_listed

if [ "$mode" = sabotage ]; then
	# Stale translations must be detected: hp_tlb failing on violations
	# is the pass here (its own TAP goes to the log as comments).  One run
	# sees none in a few percent of runs (measured 1 in 10 with a build
	# sharing the host's cores: the readers' vCPU did not run while a
	# stale entry lived), so the claim is the issue's: the detector fails
	# the sabotaged module in most of halfproc.repeat=N runs.  Each run is
	# reported on a "# sabotage run" line (scripts/tlb-proof.sh counts them).
	i=0 seen=0
	while [ "$i" -lt "$repeat" ]; do
		i=$((i + 1))
		/tests/hp_tlb >/tmp/hp_tlb.out 2>&1; r=$?
		sed 's/^/# hp_tlb: /' /tmp/hp_tlb.out
		if [ "$r" != 0 ] && grep -q "STALE TRANSLATIONS" /tmp/hp_tlb.out; then
			seen=$((seen + 1)); echo "# sabotage run $i of $repeat: detected"
		else
			echo "# sabotage run $i of $repeat: missed"
		fi
	done
	echo "# sabotaged module detected in $seen of $repeat runs"
	[ $((2 * seen)) -gt "$repeat" ]
	tap $? "sabotaged_member_flush_is_detected_in_most_of_${repeat}_runs"
	mode=done
fi
if [ "$mode" = test ] && [ -n "$only" ]; then
	# halfproc.only=prog[:filter],...: a quick subset while developing;
	# halfproc.repeat=N runs it N times (a flakiness hunt: all must pass).
	i=0
	while [ "$i" -lt "$repeat" ]; do
		i=$((i + 1))
		for o in $only; do
			t="${o%%:*}"
			echo "# run $i of $repeat: $t"
			if [ "$t" != "$o" ]; then with_reclaim prog "$t" "/tests/$t" -r "global.${o#*:}"; r=$?
			else with_reclaim prog "$t" "/tests/$t"; r=$?; fi
			tap $r "run_${i}_of_${repeat}_$t"
		done
	done
	mode=done
fi
if [ -n "$ipaddr" ]; then
	# Two guests (halfproc-harness pair): eth0 on the link to the other.
	ip addr add "$ipaddr" dev eth0 && ip link set eth0 up; tap $? "net_eth0_${ipaddr%/*}"
fi
if [ "$mode" = migrate ]; then
	# Migration on the kernel backend in one guest (tests/migrate).
	prog migrate/softdirty /migrate/softdirty || rc=1
	prog migrate/local /migrate/local.sh "$moves" 400 || rc=1
	prog migrate/tree /migrate/tree.sh "$moves" || rc=1
	mode=done
fi
if [ "$mode" = criu ]; then
	# CRIU side by side with halfproc (docs/migration.md).
	prog migrate/criu /migrate/criu.sh || rc=1
	mode=done
fi
if [ "$mode" = two ]; then
	# Two machines: this guest's half of tests/migrate/two.sh.
	prog "migrate/two-$role" /migrate/two.sh "$role" "${ipaddr%/*}" "$peer" || rc=1
	# DMI across the two: a node on each, the kernel backend (tests/dmi).
	prog "dmi/two-$role" /dmi/two.sh "$role" "${ipaddr%/*}" "$peer" || rc=1
	mode=done
fi
if [ "$mode" = apps ]; then
	# The apps on DMI against MPI across two guests (apps/guest/two.sh).
	prog "apps/two-$role" /apps/guest/two.sh "$role" "${ipaddr%/*}" "$peer" || rc=1
	mode=done
fi
if [ "$mode" = demo ]; then
	# The main job: what halfproc is, in a few minutes.
	echo "# === halfproc info ==="
	halfproc info; tap $? demo_info
	echo "# === the half-process demo ==="
	/demo/hp_demo; tap $? demo_semantics
	out=/tmp/bench
	mkdir -p /mnt
	mount -t 9p -o trans=virtio,version=9p2000.L hostshare /mnt 2>/dev/null && out=/mnt
	echo "# === copy benchmark (quick): the paper's Figs. 7/8 ==="
	# shellcheck disable=SC2046
	halfproc bench copy $(cat /etc/bench.args 2>/dev/null) --out "$out" --label guest
	tap $? demo_bench_copy
	sync
	mode=done
fi
if [ "$mode" = test ]; then
	for t in hp_sets hp_exec hp_cleartid hp_fork hp_tlb hp_dm hp_remote hp_debug hp_memcg hp_switch hp_layout hp_account hp_oom hp_counters hp_notifier hp_settest hp_threads hp_mmstate hp_procfs hp_procstress hp_failslab hp_soak rt/guest_tests; do
		prog "$t" "/tests/$t" || rc=1
	done
	with_reclaim prog hp_reclaim /tests/hp_reclaim || rc=1
	with_reclaim prog hp_memcg_reclaim /tests/hp_memcg_reclaim || rc=1
	# DMI on the kernel backend: compute instances, Jacobi (tests/dmi).
	prog dmi/instances /dmi/instances.sh || rc=1
	halfproc info --probe; tap $? runtime_info_probe
	# The copy benchmark's strategy tests (checksummed transfers).
	/tests/rt/bench_strategies --test-threads=1; tap $? bench_strategies
	# The C library as installed (tests/c-api), statically linked.
	for t in /tests/c-api/*; do
		[ -x "$t" ] || continue
		echo "# running $t"
		"$t"; tap $? "c_api_${t##*/}"
	done
	mm_selftests
	# Module unload: refused while a set lives, fine once it is gone.
	# Every live set holds one reference on the module.
	sets_gone() {
		i=0
		while [ "$(cat /sys/module/halfproc/refcnt)" != 0 ] && [ $i -lt 100 ]; do
			sleep 0.2; i=$((i + 1))
		done
		[ "$(cat /sys/module/halfproc/refcnt)" = 0 ]
	}
	sets_gone; tap $? no_set_left_behind_by_the_tests
	# Module unload racing live hooks: sets made and torn down in a loop
	# while the module is unloaded and loaded again; both must have
	# happened, and the module must work at the end.
	unload_race() {
		(i=0; while [ $i -lt 150 ]; do
			/tests/hp_hold 0 >/dev/null 2>&1 && echo ok; i=$((i + 1))
		done) >/tmp/race.sets &
		j=0 out=0
		while [ $j -lt 300 ]; do
			if rmmod halfproc 2>/dev/null; then
				out=$((out + 1))
				insmod /lib/modules/halfproc.ko || return 1
			fi
			j=$((j + 1))
		done
		wait
		echo "# unload race: the module went $out times in 300 tries; $(wc -l </tmp/race.sets) of 150 sets worked"
		[ "$out" -gt 0 ] && [ "$(wc -l </tmp/race.sets)" -gt 0 ] && sets_gone && /tests/hp_hold 0
	}
	unload_race; tap $? module_unload_races_set_creation
	/tests/hp_hold 60 &
	sleep 1
	[ "$(cat /sys/module/halfproc/refcnt)" = 1 ]; tap $? live_set_pins_module
	rmmod halfproc 2>/dev/null; [ $? != 0 ]; tap $? unload_refused_with_live_set
	killall -9 hp_hold 2>/dev/null; wait
	sets_gone; tap $? last_member_exit_releases_set
	rmmod halfproc; tap $? unload_after_last_member
	grep -q halfproc /proc/modules; [ $? != 0 ]; tap $? module_gone
	/tests/hp_nomod; tap $? no_module_errnos_after_unload
	insmod /lib/modules/halfproc.ko; tap $? module_reloads
	/tests/hp_hold 0; tap $? set_works_after_reload
fi
if [ "$mode" = bench ]; then
	# Results go back to the host over 9p when it shares a folder.
	out=/tmp/bench
	mkdir -p /mnt
	if mount -t 9p -o trans=virtio,version=9p2000.L hostshare /mnt 2>/dev/null; then
		out=/mnt
	fi
	echo "# section 4.4.3 (C, interleaved, ratios):"
	/bench/hp_mm_bench 5000 4096; tap $? bench_mm_c
	halfproc bench mm --quick --out "$out" --label guest; tap $? bench_mm
	# shellcheck disable=SC2046
	halfproc bench copy $(cat /etc/bench.args 2>/dev/null) --out "$out" --label guest
	tap $? bench_copy
	sync
fi
echo "# init: exit status $rc"
status $rc
