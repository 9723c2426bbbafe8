#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Tests of the build and the harness themselves: each failure mode must be
# caught and named.
#   scripts/selftest.sh host     (no kernel build needed; includes harness)
#   scripts/selftest.sh harness  (the harness's judgement of a saved console log)
#   scripts/selftest.sh guest    (needs the debug kernel)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/lib.sh"
what="${1:-host}"
case "$what" in
host | harness | guest) ;;
*) die "usage: scripts/selftest.sh host|harness|guest" ;;
esac
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() {	# check NAME EXPECTED-TEXT COMMAND...: must fail and print the text
	local name="$1" want="$2"
	shift 2
	if "$@" >"$tmp/out" 2>&1; then
		echo "not ok - $name: succeeded, expected a failure"
		fail=$((fail + 1))
	elif grep -q -- "$want" "$tmp/out"; then
		echo "ok - $name"
		pass=$((pass + 1))
	else
		echo "not ok - $name: failed without naming the cause ($want)"
		sed 's/^/#   /' "$tmp/out" | tail -15
		fail=$((fail + 1))
	fi
}

if [ "$what" = host ] || [ "$what" = harness ]; then
	# The harness judges a saved console log (the in-guest suite's, as
	# tests/guest/init.sh marks it) as it would judge a boot.
	cargo build -q -p halfproc-harness --manifest-path "$HALFPROC_ROOT/Cargo.toml"
	H="$HALFPROC_ROOT/target/debug/halfproc-harness"
	log="$HALFPROC_ROOT/qemu/harness/tests/fixtures/guest-suite.log"
	echo HALFPROC_EXIT=0 >"$tmp/status"
	sed -n 's/^# halfproc-harness: begin //p' "$log" >"$tmp/expect"
	if "$H" judge "$log" --status "$tmp/status" --expect-file "$tmp/expect" >"$tmp/out" 2>&1 &&
		grep -q "26 passed, 0 failed, 2 skipped; 0 kernel reports; PASS" "$tmp/out"; then
		echo "ok - the harness passes a clean suite with every expected program"; pass=$((pass + 1))
	else
		echo "not ok - the harness failed a clean suite"; sed 's/^/#   /' "$tmp/out"; fail=$((fail + 1))
	fi
	check "a program that never started is named" "mm/cow.missing: expected program never started" \
		"$H" judge "$log" --status "$tmp/status" --expect-file "$tmp/expect" --expect mm/cow
	sed '/^ok 2 global.quarter_gigabyte/,$d' "$log" >"$tmp/cut.log"
	check "a program cut off mid-run is named" "hp_dm.did_not_finish: no end marker" \
		"$H" judge "$tmp/cut.log" --status "$tmp/status"
fi
if [ "$what" = host ]; then
	# A patch that does not apply is named, and the tree is left alone.
	mkdir -p "$tmp/patches"
	cp "$HALFPROC_ROOT"/patches/*.patch "$tmp/patches/"
	cp "$HALFPROC_ROOT/patches/series" "$tmp/patches/series"
	cat >"$tmp/patches/9999-broken.patch" <<'P'
From: nobody <nobody@localhost>
Subject: [PATCH] broken: does not apply

--- a/mm/mmap.c
+++ b/mm/mmap.c
@@ -1,3 +1,3 @@
-this line is not in mm/mmap.c
+nor is this one
 at all
P
	echo 9999-broken.patch >>"$tmp/patches/series"
	# The tree must exist (imported, at the real series) before the check
	# can mean anything: on a fresh machine it does not yet.
	SRC="$("$here/kernel-src.sh" 2>/dev/null)" || die "cannot prepare the kernel source tree"
	before="$(git -C "$SRC" rev-parse HEAD)"
	check "a patch that does not apply is named" "patch does not apply: patches/9999-broken.patch" \
		env HALFPROC_PATCHES="$tmp/patches" "$here/kernel-src.sh"
	after="$(git -C "$SRC" rev-parse HEAD)"
	if [ "$before" = "$after" ]; then echo "ok - the source tree is untouched by a failed apply"; pass=$((pass + 1))
	else echo "not ok - the source tree moved after a failed apply"; fail=$((fail + 1)); fi

	# A dropped config option is listed by name: real Kconfig, no rustc.
	make -s -C "$SRC" O="$tmp/cfg" tinyconfig >/dev/null
	"$SRC/scripts/kconfig/merge_config.sh" -m -O "$tmp/cfg" "$tmp/cfg/.config" \
		"$HALFPROC_ROOT/qemu/config/base.config" >/dev/null
	make -s -C "$SRC" O="$tmp/cfg" RUSTC=/nonexistent/rustc olddefconfig >/dev/null
	check "a config option dropped by olddefconfig is named" "CONFIG_RUST: wanted y, got n" \
		python3 "$here/check-config.py" "$tmp/cfg/.config" "$HALFPROC_ROOT/qemu/config/base.config"
elif [ "$what" = guest ]; then
	# Boots what scripts/guest.sh build debug built; builds nothing.
	export HALFPROC_QUIET=1
	check "a panicking guest fails the run" "guest panicked" "$here/guest.sh" boot debug panic 120
	check "a hanging guest is killed at the timeout" "guest hung: killed after the 20s timeout" \
		"$here/guest.sh" boot debug hang 20
	check "a failing guest test fails the run" "tests failed: harness.self_test_failure" \
		"$here/guest.sh" boot debug fail 120
fi
echo "# selftest $what: $pass passed, $fail failed"
[ "$fail" = 0 ]
