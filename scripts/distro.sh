#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Bare metal: Debian packages of a general-purpose patched kernel, the
# module and the runtime, and a boot test of them (docs/install.md).
#
#   scripts/distro.sh packages    build into $HALFPROC_CACHE/distro/debs:
#       linux-image-KVER_*.deb           the kernel (x86_64_defconfig +
#                                        kvm_guest.config + qemu/config/
#                                        distro.config, make bindeb-pkg)
#       halfproc-modules-KVER_*.deb      the module, loaded at boot by
#                                        systemd-modules-load (modprobe)
#       halfproc_*.deb                   the halfproc command and the C
#                                        library (scripts/install)
#   scripts/distro.sh image       a Debian 12 disk image (mmdebstrap:
#                                 systemd, a user hp with uid 1000) with the
#                                 packages installed by apt, and the boot test
#   scripts/distro.sh boot-test [TIMEOUT]
#                                 boot the image's own kernel and initramfs
#                                 from its disk in QEMU and judge the boot
#                                 test (tests/distro/boot-test.sh): the
#                                 packaged kernel runs, systemd loaded the
#                                 module, the runtime suite passes as hp
#   scripts/distro.sh all [TIMEOUT]   the three in order
#
# The kernel and its package are rebuilt only when their inputs changed;
# the module and runtime packages, the image and the boot are made again
# each time (about a minute).  Not in the default scripts/test (a cold
# defconfig kernel takes about 14 minutes on two busy cores):
# `scripts/test --distro` adds it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/lib.sh"
D="$HALFPROC_CACHE/distro"
DEBS="$D/debs"
OUT="$HALFPROC_ROOT/out/distro"
JOBS="${HALFPROC_JOBS:-$(($(nproc) + 1))}"
MIRROR="${HALFPROC_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY="${HALFPROC_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}"
APT_PKGS=(dpkg-dev debhelper mmdebstrap e2fsprogs)

deps() {
	"$here/deps.sh"
	export HALFPROC_DEPS_DONE=1
	apt_ensure "${APT_PKGS[@]}"
}

kernel_release() { LOCALVERSION= make -s -C "$HALFPROC_CACHE/src/linux" O="$1" kernelrelease; }
version() { sed -n 's/^version = "\(.*\)"/\1/p' "$HALFPROC_ROOT/runtime/halfproc-c/Cargo.toml" | head -1; }
stamp() { # stamp FILE...: one key for the contents of the files
	cat "$@" | sha256sum | cut -c1-16
}

# control DIR PACKAGE DEPENDS DESCRIPTION: DIR/DEBIAN/control
control() {
	mkdir -p "$1/DEBIAN"
	cat >"$1/DEBIAN/control" <<-EOF
		Package: $2
		Version: $(version)
		Architecture: amd64
		Maintainer: halfproc developers <halfproc@localhost>
		Depends: $3
		Section: kernel
		Priority: optional
		Description: $4
	EOF
}

module_deb() { # module_deb BUILD KVER
	local build="$1" kver="$2" ko stage="$D/stage-module"
	ko="$("$here/kmod.sh" distro)"
	rm -rf "$stage"
	install -D -m 644 "$ko" "$stage/lib/modules/$kver/updates/halfproc.ko"
	install -d "$stage/etc/modules-load.d"
	echo halfproc >"$stage/etc/modules-load.d/halfproc.conf"
	control "$stage" "halfproc-modules-$kver" "linux-image-$kver, kmod" \
		"half-process module for Linux $kver
 The policy half of half-processes (CLONE_HALFPROC, MAP_HALFPROC, dmread,
 dmwrite) for the patched kernel linux-image-$kver; loaded at every boot
 by systemd-modules-load."
	cat >"$stage/DEBIAN/postinst" <<-EOF
		#!/bin/sh
		set -e
		depmod -a "$kver"
		if [ "\$(uname -r)" = "$kver" ]; then modprobe halfproc || true; fi
	EOF
	cat >"$stage/DEBIAN/postrm" <<-EOF
		#!/bin/sh
		set -e
		if [ -d "/lib/modules/$kver" ]; then depmod -a "$kver"; fi
	EOF
	chmod 755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/postrm"
	echo /etc/modules-load.d/halfproc.conf >"$stage/DEBIAN/conffiles"
	dpkg-deb --root-owner-group -Zxz --build "$stage" "$DEBS/" >/dev/null
}

tools_deb() {
	local stage="$D/stage-tools"
	rm -rf "$stage"
	"$here/install" --prefix /usr --destdir "$stage" >/dev/null
	control "$stage" halfproc "libc6 (>= 2.36), libgcc-s1" \
		"half-process runtime: the halfproc command and C library
 halfproc node/run/ps/migrate/checkpoint/restore, halfproc info --probe,
 and libhalfproc (header, shared and static library, pkg-config file)."
	sed -i 's/^Section: kernel/Section: libs/' "$stage/DEBIAN/control"
	printf '#!/bin/sh\nset -e\nldconfig\n' >"$stage/DEBIAN/postinst"
	printf '#!/bin/sh\nset -e\nldconfig\n' >"$stage/DEBIAN/postrm"
	chmod 755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/postrm"
	dpkg-deb --root-owner-group -Zxz --build "$stage" "$DEBS/" >/dev/null
}

packages() {
	local build kver key
	build="$("$here/kernel.sh" distro)"
	kver="$(kernel_release "$build")"
	mkdir -p "$DEBS"
	key="$(cat "$build/.halfproc-key")"
	if [ "$(cat "$DEBS/.kernel-key" 2>/dev/null)" != "$key" ] ||
		! ls "$DEBS"/linux-image-"$kver"_*.deb >/dev/null 2>&1; then
		phase "kernel packages $kver (make bindeb-pkg)"
		rm -f "$DEBS"/linux-*.deb "$HALFPROC_CACHE"/linux-*.deb
		# No linux-headers package: the module is built here and shipped
		# built, like the kernel.
		RUSTUP_TOOLCHAIN="$RUST_TOOLCHAIN" RUSTC="$(rustup which --toolchain "$RUST_TOOLCHAIN" rustc)" \
			LOCALVERSION= make -C "$HALFPROC_CACHE/src/linux" O="$build" -j"$JOBS" bindeb-pkg \
			KDEB_PKGVERSION="$kver-1" \
			DPKG_FLAGS="-Ppkg.linux-upstream.nokernelheaders" >"$D/bindeb-pkg.log" 2>&1 ||
			{ tail -30 "$D/bindeb-pkg.log" >&2; die "make bindeb-pkg failed; log: $D/bindeb-pkg.log"; }
		# dpkg-buildpackage writes next to the build tree.
		mv "$HALFPROC_CACHE"/linux-image-*.deb "$DEBS/"
		# Not linux-libc-dev: installed, it would replace Debian's own
		# kernel headers for user space.
		rm -f "$HALFPROC_CACHE"/linux-*.deb
		rm -f "$HALFPROC_CACHE"/linux-upstream_*.{buildinfo,changes}
		echo "$key" >"$DEBS/.kernel-key"
		done_phase
	fi
	phase "module and runtime packages"
	rm -f "$DEBS"/halfproc*.deb
	module_deb "$build" "$kver"
	tools_deb
	echo "$kver" >"$DEBS/.kernel-release"
	done_phase
	ls -l "$DEBS"/*.deb | awk '{ printf "    %8d kB  %s\n", $5 / 1024, $9 }' >&2
}

# The boot test's files: the script and its unit, the runtime's suite and
# the C library's programs built against the package's library.
test_files() {
	local t="$D/boot-test" stage="$D/stage-tools" c exe
	rm -rf "$t"
	mkdir -p "$t/c-api"
	cp "$HALFPROC_ROOT"/tests/distro/{boot-test.sh,migrate.sh,halfproc-boot-test.service} "$t/"
	cc -O2 -Wall -Werror -o "$t/ticker" "$HALFPROC_ROOT/tests/demo/ticker.c"
	cat "$DEBS/.kernel-release" >"$t/kernel-release"
	cargo build -q --release --manifest-path "$HALFPROC_ROOT/Cargo.toml" -p halfproc --example guest_tests
	cp "$HALFPROC_ROOT/target/release/examples/guest_tests" "$t/"
	for c in "$HALFPROC_ROOT"/tests/c-api/*.c "$stage/usr/share/doc/halfproc/example.c"; do
		exe="$t/c-api/$(basename "$c" .c)"
		# As a user of the package would: pkg-config, the installed header
		# and library (found here under the staging directory).
		# shellcheck disable=SC2046
		cc -std=gnu11 -Wall -Werror -O2 -o "$exe" "$c" -pthread \
			$(PKG_CONFIG_SYSROOT_DIR="$stage" PKG_CONFIG_LIBDIR="$stage/usr/lib/pkgconfig" \
				pkg-config --cflags --libs halfproc)
	done
}

image() {
	local kver key root="$D/rootfs" img="$D/debian12.img" size
	[ -f "$DEBS/.kernel-release" ] || die "no packages yet: run scripts/distro.sh packages"
	kver="$(cat "$DEBS/.kernel-release")"
	test_files
	key="$( (stamp "$DEBS"/*.deb; find "$D/boot-test" -type f -print0 | sort -z | xargs -0 cat | sha256sum) | stamp /dev/stdin)"
	if [ -f "$img" ] && [ "$(cat "$D/.image-key" 2>/dev/null)" = "$key" ]; then
		info "image is up to date: $img"
		return
	fi
	phase "Debian 12 image with the packages (mmdebstrap from $MIRROR)"
	rm -rf "$root" "$img" "$D/.image-key"
	local f
	# apt in the image installs the local packages with their dependencies,
	# as on a real machine; the kernel package's hooks build its initramfs.
	mmdebstrap --variant=minbase --mode=root \
		--aptopt='Acquire::Check-Valid-Until "false"' \
		--include=systemd,systemd-sysv,udev,kmod,initramfs-tools,zstd,procps,util-linux \
		--customize-hook="mkdir \"\$1/tmp/debs\" && cp '$DEBS'/*.deb \"\$1/tmp/debs/\"" \
		--customize-hook='chroot "$1" sh -c "apt-get install -y -q --no-install-recommends /tmp/debs/*.deb && rm -r /tmp/debs"' \
		--customize-hook='echo halfproc-test >"$1/etc/hostname"' \
		--customize-hook='echo "/dev/vda / ext4 defaults 0 1" >"$1/etc/fstab"' \
		--customize-hook='chroot "$1" useradd -m -u 1000 -s /bin/bash hp' \
		--customize-hook='chroot "$1" passwd -d root >/dev/null' \
		--customize-hook="cp -r '$D/boot-test' \"\$1/usr/local/lib/halfproc-boot-test\"" \
		--customize-hook='cp "$1/usr/local/lib/halfproc-boot-test/halfproc-boot-test.service" "$1/etc/systemd/system/"' \
		--customize-hook='chroot "$1" systemctl enable halfproc-boot-test.service' \
		--customize-hook='chroot "$1" systemctl mask serial-getty@ttyS0.service getty@tty1.service' \
		bookworm "$root" "deb $MIRROR bookworm main" "deb $SECURITY bookworm-security main" \
		>"$D/mmdebstrap.log" 2>&1 ||
		{ tail -30 "$D/mmdebstrap.log" >&2; die "mmdebstrap failed; log: $D/mmdebstrap.log"; }
	for f in "vmlinuz-$kver" "initrd.img-$kver"; do
		[ -f "$root/boot/$f" ] || die "the image has no /boot/$f: did the kernel package install?"
		cp "$root/boot/$f" "$D/"
	done
	# The root file system, made from the directory (no loop device).
	size=$(($(du -sm "$root" | cut -f1) + 1024))
	mkfs.ext4 -q -L halfproc-root -d "$root" "$img" "${size}M"
	echo "$key" >"$D/.image-key"
	done_phase
	info "image $img (${size} MiB, $(du -sm "$img" | cut -f1) MiB used on disk), kernel $kver"
}

boot_test() {
	local timeout="${1:-900}" kver
	[ -f "$D/.image-key" ] || die "no image yet: run scripts/distro.sh image"
	kver="$(cat "$DEBS/.kernel-release")"
	mkdir -p "$OUT"
	cargo build -q --release -p halfproc-harness --manifest-path "$HALFPROC_ROOT/Cargo.toml"
	# Every boot starts from the image as built.
	cp --sparse=always "$D/debian12.img" "$OUT/disk.img"
	phase "boot test: Debian 12 from its disk, kernel $kver (timeout ${timeout}s)"
	local rc=0
	"$HALFPROC_ROOT/target/release/halfproc-harness" run --kernel "$D/vmlinuz-$kver" \
		--initrd "$D/initrd.img-$kver" --disk "$OUT/disk.img" --log "$OUT/boot.log" \
		--timeout "$timeout" --cpus 2 --memory 2048 --cpu "${HALFPROC_CPU:-max}" \
		--append "root=/dev/vda rw ${HALFPROC_APPEND:-}" \
		--expect rt/guest_tests --expect migrate \
		${HALFPROC_QUIET:+--quiet} || rc=$?
	rm -f "$OUT/disk.img"
	done_phase
	return "$rc"
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
packages) deps; packages ;;
image) deps; image ;;
boot-test) deps; boot_test "$@" ;;
all) deps; packages; image; boot_test "$@" ;;
-h|--help) sed -n '3,27p' "$0" | sed 's/^# \{0,1\}//' ;;
*) die "usage: scripts/distro.sh packages|image|boot-test [TIMEOUT]|all [TIMEOUT] (try --help)" ;;
esac
