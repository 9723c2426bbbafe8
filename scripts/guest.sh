#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Build what the guest needs once, boot it as many times as you like:
#
#   scripts/guest.sh build FLAVOUR                  kernel, module (and its
#                                                   test-only twin), guest
#                                                   programs, harness, runtime
#   scripts/guest.sh boot FLAVOUR MODE [TIMEOUT]    one boot of what was built
#   scripts/guest.sh FLAVOUR MODE [TIMEOUT]         both
#   scripts/guest.sh two FLAVOUR [TIMEOUT]          two guests of what was
#                                                   built on a virtual network
#                                                   (halfproc-harness pair):
#                                                   a program moves from A to B
#   scripts/guest.sh bench-apps FLAVOUR [OPTIONS]   the apps on DMI against
#                                                   MPI across two guests (the
#                                                   built kernel and module;
#                                                   OPTIONS: halfproc bench apps,
#                                                   default --size medium --runs 3
#                                                   --nodes 1,2; docs/apps.md)
#
# FLAVOUR: debug|release, or stock (the unpatched kernel: guest programs
# only, for mode mm).  MODE (tests/guest/init.sh): test, demo, bench,
# migrate, criu (needs Debian's criu on the host), sabotage, mm, panic,
# hang, fail.  Results land in out/<flavour>/<mode>.{log,
# results.json,tap}.  Environment for boot: HALFPROC_APPEND (more kernel
# arguments, e.g. halfproc.only=hp_tlb halfproc.repeat=50), HALFPROC_PTI
# (on|off, default on), HALFPROC_CPU (QEMU -cpu model, default max; use
# max,la57=off for 4-level paging), HALFPROC_RUN (the results' name
# instead of MODE), HALFPROC_SHARE (a host folder the guest
# mounts), HALFPROC_QUIET, HALFPROC_GUEST_EXTRA ("SRC:DST ..." more files); for bench-apps
# HALFPROC_APPS_TIMEOUT (seconds for both guests, default 3600), HALFPROC_APPS_CPUS (vCPUs
# per guest, default 1; 2 suits --nodes 4, two nodes per guest).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/lib.sh"

with_libs() {	# with_libs PATH DST: SRC:DST lines of a program and its shared libraries
	local lib
	echo "$(readlink -f "$1"):$2"
	# Each library (and the dynamic loader) at the path the program looks for it.
	for lib in $(ldd "$1" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) (.*/\1/p'); do
		echo "$(readlink -f "$lib"):$lib"
	done
}

debian_programs() {	# SRC:DST lines: Debian's programs the migration tests run, with their libraries
	local p path
	for p in xz gzip bzip2 sha256sum stress-ng; do
		path="$(command -v "$p")" ||
			die "$p is not installed (apt-get install xz-utils gzip bzip2 coreutils stress-ng)"
		with_libs "$path" "/opt/deb/$p"
	done | sort -u
}

criu_files() {	# SRC:DST lines: Debian's criu (mode criu only: apt-get install criu)
	local path
	path="$(PATH="$PATH:/usr/sbin:/sbin" command -v criu)" || die "criu is not installed (apt-get install criu)"
	with_libs "$path" /usr/sbin/criu | sort -u
}

initramfs() {	# initramfs FLAVOUR MODE [SRC:DST...]: writes out/FLAVOUR/initramfs-MODE.cpio
	local flavour="$1" mode="$2" OUT="$HALFPROC_ROOT/out/$1"
	shift 2
	[ -f "$OUT/files" ] && [ -f "$OUT/kernel" ] ||
		die "nothing built for $flavour: run scripts/guest.sh build $flavour"
	local HARNESS="$HALFPROC_ROOT/target/release/halfproc-harness"
	local files=() f
	while read -r f; do files+=(--file "$f"); done <"$OUT/files"
	# The migration tests' scripts, as they are now (no build step).
	for f in "$HALFPROC_ROOT"/tests/migrate/*.sh; do files+=(--file "$f:/migrate/${f##*/}"); done
	for f in "$HALFPROC_ROOT"/tests/dmi/*.sh; do files+=(--file "$f:/dmi/${f##*/}"); done
	for f in ${HALFPROC_GUEST_EXTRA:-} "$@"; do files+=(--file "$f"); done
	# The arguments of the in-guest copy benchmark (bench and demo modes).
	printf '%s\n' "${HALFPROC_BENCH_ARGS:---sizes 6..26:2 --reps 3 --placement both}" \
		>"$OUT/bench.args"
	files+=(--file "$OUT/bench.args:/etc/bench.args")
	"$HARNESS" initramfs --out "$OUT/initramfs-$mode.cpio" --busybox /bin/busybox \
		--init "$HALFPROC_ROOT/tests/guest/init.sh" "${files[@]}"
}

two() {	# two FLAVOUR [TIMEOUT]: two guests on a virtual network, a migration from A to B
	local flavour="$1" timeout="${2:-420}" OUT="$HALFPROC_ROOT/out/$1"
	# The nodes' shared secret, new for every run.
	mkdir -p "$OUT"
	head -c 32 /dev/urandom | base64 >"$OUT/two.secret"
	chmod 600 "$OUT/two.secret"
	initramfs "$flavour" two "$OUT/two.secret:/etc/halfproc-node.secret"
	phase "two guests ($flavour, mode two, network 10.0.2.0/24 over UDP on loopback, timeout ${timeout}s)"
	local rc=0
	"$HALFPROC_ROOT/target/release/halfproc-harness" pair --kernel "$(cat "$OUT/kernel")" \
		--initrd "$OUT/initramfs-two.cpio" --log-a "$OUT/two-a.log" --log-b "$OUT/two-b.log" \
		--timeout "$timeout" --cpus 1 --memory 1024 --cpu "${HALFPROC_CPU:-max}" \
		--append "halfproc.mode=two pti=${HALFPROC_PTI:-on} ${HALFPROC_APPEND:-}" \
		--expect-a migrate/two-a --expect-a dmi/two-a --expect-b migrate/two-b \
		--expect-b dmi/two-b ${HALFPROC_QUIET:+--quiet} || rc=$?
	done_phase
	return "$rc"
}

mpi_files() {	# SRC:DST lines: Open MPI (mpirun, orted, plugins, help texts) for the guest
	local M=/usr/lib/x86_64-linux-gnu/openmpi P=/usr/lib/x86_64-linux-gnu/pmix2 f
	command -v orted >/dev/null || die "Open MPI is not installed (scripts/deps.sh installs it)"
	{
		with_libs "$(command -v orterun)" /usr/bin/mpirun
		with_libs "$(command -v orted)" /usr/bin/orted
		for f in "$M"/lib/openmpi3/*.so "$P"/lib/pmix/*.so; do with_libs "$f" "$f"; done
		find /usr/share/openmpi /etc/openmpi "$P/share" -type f | sed 's/.*/&:&/'
	} | sort -u
}

bench_apps() {	# bench_apps FLAVOUR [OPTIONS]: the apps across two guests
	local flavour="$1" OUT="$HALFPROC_ROOT/out/$1"
	shift
	local timeout="${HALFPROC_APPS_TIMEOUT:-3600}" results="$HALFPROC_ROOT/out/bench-apps-guests"
	# vCPUs per guest: 1 (one node per guest); 4-node runs put two on each.
	local cpus="${HALFPROC_APPS_CPUS:-1}"
	local ko
	ko="$(sed -n 's|^\(.*\):/lib/modules/halfproc.ko$|\1|p' "$OUT/files" 2>/dev/null)"
	[ -f "$OUT/kernel" ] && [ -f "$ko" ] ||
		die "no kernel or module built for $flavour: run scripts/guest.sh build $flavour"
	phase "build the runtime, DMI and the apps for the guests"
	local RT="$HALFPROC_ROOT/target/x86_64-unknown-linux-gnu/release" p
	for p in "-p dmi -p dmi-cli" "-p halfproc-cli --bin halfproc"; do
		# shellcheck disable=SC2086
		RUSTFLAGS="-C target-feature=+crt-static" cargo build -q -j"${CARGO_BUILD_JOBS:-2}" --release \
			--manifest-path "$HALFPROC_ROOT/Cargo.toml" --target x86_64-unknown-linux-gnu $p 2>&1 |
			grep -v "dropping unsupported crate type .cdylib." >&2 || true
	done
	[ -f "$RT/libdmi.a" ] && [ -x "$RT/halfproc" ] || die "static cargo build of dmi/halfproc failed"
	cargo build -q --release -p halfproc-harness --manifest-path "$HALFPROC_ROOT/Cargo.toml"
	# DMI programs static (the kernel backend's runtime inside), the normal
	# and the one-line half-process forms (APP_yield, for --yield yes); MPI
	# ones against Debian's Open MPI, copied in with its libraries.
	local S="$OUT/guest/apps-static" D="$OUT/guest/apps-mpi" app dmi=() mpi=()
	for app in jacobi nbody pagerank cg; do
		dmi+=("$S/dmi/$app" "$S/dmi/${app}_yield")
		mpi+=("$D/mpi/$app")
	done
	# glibc warns about getaddrinfo in static programs (guest.sh build says why).
	mkdir -p "$S"
	make -s -C "$HALFPROC_ROOT/apps" O="$S" CFLAGS="-O2 -static -s" DMI_LIBDIR="$RT" \
		"$S/cks-cmp" "${dmi[@]}" 2>"$S/build.log" ||
		{ cat "$S/build.log" >&2; die "building the static DMI apps failed"; }
	make -s -C "$HALFPROC_ROOT/apps" O="$D" "${mpi[@]}" >&2 || die "building the MPI apps failed"
	done_phase
	mkdir -p "$results"
	# One argument a line (apps/guest/two.sh reads them so); OPTIONS come last and win.
	printf '%s\n' --size medium --runs 3 --nodes 1,2 --timeout 600 \
		--label "two QEMU guests (TCG, $cpus vCPU each)" \
		--dmi-note "one node per guest on 2 nodes (rank 0 on A, rank 1 on B), two on 4 (ranks 0-1 on A, 2-3 on B), kernel backend, TCP over the guests' virtio-net link" \
		--mpi-note "Open MPI, the same placement (orted on B through apps/guest/rsh.sh), btl self,tcp, mpi_yield_when_idle 1" \
		"$@" >"$OUT/bench-apps.args"
	local files=(--file "$ko:/lib/modules/halfproc.ko" --file "$RT/halfproc:/bin/halfproc"
		--file "$S/cks-cmp:/apps/cks-cmp" --file "$OUT/bench-apps.args:/etc/bench-apps.args") f
	for app in jacobi nbody pagerank cg; do
		files+=(--file "$S/dmi/$app:/apps/dmi/$app" --file "$S/dmi/${app}_yield:/apps/dmi/${app}_yield"
			--file "$D/mpi/$app:/apps/mpi/$app")
	done
	for f in "$HALFPROC_ROOT"/apps/guest/*.sh; do files+=(--file "$f:/apps/guest/${f##*/}"); done
	while read -r f; do files+=(--file "$f"); done < <({ mpi_files; with_libs "$D/mpi/cg" /apps/mpi/cg; } | sort -u)
	"$HALFPROC_ROOT/target/release/halfproc-harness" initramfs --out "$OUT/initramfs-apps.cpio" \
		--busybox /bin/busybox --init "$HALFPROC_ROOT/tests/guest/init.sh" "${files[@]}"
	phase "apps on two guests ($flavour, options $*, timeout ${timeout}s)"
	local rc=0
	info "host load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
	# 2 GiB each: the bench size's arrays, the programs and Open MPI in the initramfs.
	"$HALFPROC_ROOT/target/release/halfproc-harness" pair --kernel "$(cat "$OUT/kernel")" \
		--initrd "$OUT/initramfs-apps.cpio" --log-a "$OUT/apps-a.log" --log-b "$OUT/apps-b.log" \
		--timeout "$timeout" --cpus "$cpus" --memory 2048 --cpu "${HALFPROC_CPU:-max}" \
		--append "halfproc.mode=apps pti=${HALFPROC_PTI:-on} ${HALFPROC_APPEND:-}" \
		--share-a "$results" --expect-a apps/two-a --expect-b apps/two-b \
		${HALFPROC_QUIET:+--quiet} || rc=$?
	done_phase
	info "host load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
	info "results: $results/apps.{json,svg,png}; logs: $OUT/apps-{a,b}.log"
	return "$rc"
}

build() {	# build FLAVOUR: writes $OUT/files (SRC:DST per line) and $OUT/kernel
	local flavour="$1" OUT="$HALFPROC_ROOT/out/$1"
	mkdir -p "$OUT"
	# A failed build must leave nothing to boot: no stale artifacts.
	rm -f "$OUT/files" "$OUT/kernel"
	local BUILD SRC KO KO_SAB
	BUILD="$("$here/kernel.sh" "$flavour")"
	phase "build harness"
	cargo build -q --release -p halfproc-harness --manifest-path "$HALFPROC_ROOT/Cargo.toml"
	done_phase
	if [ "$flavour" = stock ]; then
		SRC="$HALFPROC_CACHE/src/stock"
		phase "build guest programs"
		"$HALFPROC_ROOT/tests/build.sh" "$SRC" "$BUILD" "$OUT/guest"
		done_phase
		local f
		for f in "$OUT"/guest/tests/mm/*; do
			[ -f "$f" ] && [ -x "$f" ] && echo "$f:/tests/mm/${f##*/}"
		done >"$OUT/files"
		echo "$BUILD/arch/x86/boot/bzImage" >"$OUT/kernel"
		return
	fi
	SRC="$HALFPROC_CACHE/src/linux"
	# The suite's kernel options (tests/guest/config, which names swap, KSM
	# and huge pages too) must hold on the flavour the suite runs on; the
	# release flavour boots the demo and the benchmarks, and kernel.sh has
	# already checked it against its own fragments.
	if [ "$flavour" = debug ]; then
		python3 "$here/check-config.py" "$BUILD/.config" "$HALFPROC_ROOT/tests/guest/config"
	fi
	KO="$("$here/kmod.sh" "$flavour")"
	KO_SAB="$("$here/kmod.sh" "$flavour" --sabotage)"
	KO_MN="$("$here/kmod.sh" "$flavour" --test-modules)"
	phase "build guest programs"
	"$HALFPROC_ROOT/tests/build.sh" "$SRC" "$BUILD" "$OUT/guest"
	done_phase
	phase "build the runtime for the guest (static)"
	# Static glibc binaries: the guest has no shared libraries.
	local p
	for p in "-p halfproc --example guest_tests" "-p halfproc-cli --bin halfproc"; do
		# shellcheck disable=SC2086
		RUSTFLAGS="-C target-feature=+crt-static" cargo build -q --release \
			--manifest-path "$HALFPROC_ROOT/Cargo.toml" --target x86_64-unknown-linux-gnu $p
	done
	local RT="$HALFPROC_ROOT/target/x86_64-unknown-linux-gnu/release"
	# The benchmark's strategy tests, run in the guest on the kernel backend.
	local bench_tests
	bench_tests="$(RUSTFLAGS="-C target-feature=+crt-static" cargo test -q --release \
		--manifest-path "$HALFPROC_ROOT/Cargo.toml" --target x86_64-unknown-linux-gnu \
		-p halfproc-bench --test strategies --no-run --message-format=json |
		python3 -c 'import json, sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "test" in m["target"]["kind"]:
        print(m["executable"])')"
	[ -x "$bench_tests" ] || die "no test binary for halfproc-bench --test strategies"
	done_phase
	phase "build DMI for the guest (static): dmi, the instances example, Jacobi"
	local DMI_OUT="$OUT/guest/dmi"
	mkdir -p "$DMI_OUT"
	RUSTFLAGS="-C target-feature=+crt-static" cargo build -q --release \
		--manifest-path "$HALFPROC_ROOT/Cargo.toml" --target x86_64-unknown-linux-gnu \
		-p dmi -p dmi-cli 2>&1 | grep -v "dropping unsupported crate type .cdylib." >&2 || true
	[ -f "$RT/libdmi.a" ] && [ -x "$RT/dmi" ] || die "cargo build -p dmi -p dmi-cli (static) failed"
	strip -o "$DMI_OUT/dmi" "$RT/dmi"
	# glibc warns about getaddrinfo in static programs: the guest has no
	# NSS, and DMI_PEERS holds addresses, not names.
	local ex
	for ex in instances yield; do
		cc -std=gnu11 -Wall -Werror -O2 -static -s -I "$HALFPROC_ROOT/runtime/dmi/include" \
			-o "$DMI_OUT/$ex" "$HALFPROC_ROOT/runtime/dmi/examples/$ex.c" \
			"$RT/libdmi.a" -lm 2>"$DMI_OUT/build.log" ||
			{ cat "$DMI_OUT/build.log" >&2; die "building runtime/dmi/examples/$ex.c failed"; }
	done
	make -s -C "$HALFPROC_ROOT/apps" O="$DMI_OUT/apps" CFLAGS="-O2 -static -s" DMI_LIBDIR="$RT" \
		"$DMI_OUT/apps/dmi/jacobi" "$DMI_OUT/apps/dmi/jacobi_yield" \
		"$DMI_OUT/apps/serial/jacobi" "$DMI_OUT/apps/cks-cmp" \
		2>"$DMI_OUT/build.log" ||
		{ cat "$DMI_OUT/build.log" >&2; die "building the Jacobi app for the guest failed"; }
	done_phase
	phase "build the C library's programs against its installed copy (static)"
	"$HALFPROC_ROOT/tests/c-api/run.sh" guest "$OUT/guest/c-api"
	done_phase
	{
		echo "$KO:/lib/modules/halfproc.ko"
		echo "$KO_SAB:/lib/modules/halfproc-sabotage.ko"
		echo "$KO_MN:/lib/modules/hp_mn_test.ko"
		echo "${KO_MN%/*}/hp_set_test.ko:/lib/modules/hp_set_test.ko"
		echo "$RT/examples/guest_tests:/tests/rt/guest_tests"
		echo "$RT/halfproc:/bin/halfproc"
		echo "$bench_tests:/tests/rt/bench_strategies"
		local f
		for f in "$OUT"/guest/tests/* "$OUT"/guest/tests/mm/*; do
			[ -f "$f" ] && [ -x "$f" ] && echo "$f:/tests/${f#"$OUT"/guest/tests/}"
		done
		for f in "$OUT"/guest/c-api/*; do
			[ -f "$f" ] && [ -x "$f" ] && echo "$f:/tests/c-api/${f##*/}"
		done
		echo "$DMI_OUT/dmi:/bin/dmi"
		echo "$DMI_OUT/instances:/dmi/instances"
		echo "$DMI_OUT/yield:/dmi/yield"
		for f in dmi/jacobi dmi/jacobi_yield serial/jacobi cks-cmp; do echo "$DMI_OUT/apps/$f:/dmi/apps/$f"; done
		for f in "$OUT"/guest/bench/* "$OUT"/guest/demo/* "$OUT"/guest/migrate/*; do
			[ -f "$f" ] && [ -x "$f" ] && echo "$f:/${f#"$OUT"/guest/}"
		done
		debian_programs
	} >"$OUT/files"
	# The programs init.sh runs between its markers in mode test: each must
	# report, or the run fails (halfproc-harness --expect-file).  Everything
	# under /tests but what init.sh runs under its own ok/not ok lines.
	sed -n 's|^.*:/tests/||p' "$OUT/files" |
		grep -v -x -e hp_nomod -e hp_hold -e rt/bench_strategies -e 'c-api/.*' >"$OUT/expect"
	echo dmi/instances >>"$OUT/expect"
	echo "$BUILD/arch/x86/boot/bzImage" >"$OUT/kernel"
}

boot() {	# boot FLAVOUR MODE [TIMEOUT]
	local flavour="$1" mode="$2" timeout="${3:-900}" OUT="$HALFPROC_ROOT/out/$1"
	local HARNESS="$HALFPROC_ROOT/target/release/halfproc-harness"
	local extra=()
	[ "$mode" = criu ] && mapfile -t extra < <(criu_files)
	initramfs "$flavour" "$mode" "${extra[@]}"
	phase "boot ($flavour, mode $mode, pti=${HALFPROC_PTI:-on}, cpu ${HALFPROC_CPU:-max}, timeout ${timeout}s)"
	local rc=0 expect=()
	# Every program of the full suite must report (not with halfproc.only).
	if [ "$mode" = test ] && [[ "${HALFPROC_APPEND:-}" != *halfproc.only=* ]]; then
		expect=(--expect-file "$OUT/expect")
	fi
	"$HARNESS" run --kernel "$(cat "$OUT/kernel")" "${expect[@]}" \
		--initrd "$OUT/initramfs-$mode.cpio" --log "$OUT/${HALFPROC_RUN:-$mode}.log" \
		--timeout "$timeout" --cpus 2 --memory 4096 --cpu "${HALFPROC_CPU:-max}" \
		${HALFPROC_SHARE:+--share "$HALFPROC_SHARE"} \
		--append "halfproc.mode=$mode pti=${HALFPROC_PTI:-on} ${HALFPROC_APPEND:-}" \
		${HALFPROC_QUIET:+--quiet} || rc=$?
	done_phase
	return "$rc"
}

case "${1:-}" in
build) [ $# = 2 ] || die "usage: scripts/guest.sh build debug|release"; build "$2" ;;
two) [ $# -ge 2 ] || die "usage: scripts/guest.sh two debug|release [TIMEOUT]"; shift; two "$@" ;;
bench-apps) [ $# -ge 2 ] || die "usage: scripts/guest.sh bench-apps debug|release [OPTIONS]"; shift; bench_apps "$@" ;;
boot) [ $# -ge 3 ] || die "usage: scripts/guest.sh boot debug|release MODE [TIMEOUT]"; shift; boot "$@" ;;
debug|release|stock) build "$1" && boot "$@" ;;
*) die "usage: scripts/guest.sh [build|boot] debug|release|stock [MODE [TIMEOUT]]" ;;
esac
