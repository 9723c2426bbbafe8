#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The boot test of the Debian packages (scripts/distro.sh boot-test), run by
# systemd (halfproc-boot-test.service) in a Debian 12 image booted from its
# own disk.  Checks that the packaged kernel booted, that systemd loaded the
# packaged module at boot through modprobe (modules-load.d), then runs the
# runtime's suite and the C library's programs as the normal user hp.
# Follows the harness's guest contract (halfproc-harness run --help): TAP on
# the console, each program between markers, the status on /dev/ttyS1.
D=/usr/local/lib/halfproc-boot-test
rc=0 n=0
tap() {	# tap <rc> <name>
	n=$((n + 1))
	if [ "$1" = 0 ]; then echo "ok $n init.$2"; else echo "not ok $n init.$2"; rc=1; fi
}
prog() {	# prog NAME CMD...: between the harness's markers
	name="$1"
	shift
	printf '# halfproc-harness: begin %s\n' "$name"
	"$@"
	r=$?
	printf '\n# halfproc-harness: end %s rc=%s\n' "$name" "$r"
	[ "$r" = 0 ] || rc=1
}
as_user() { runuser -u hp -- env HOME=/home/hp "$@"; }

echo "TAP version 13"
want="$(cat "$D/kernel-release")"
echo "# kernel $(uname -r), package built for $want; $(. /etc/os-release && echo "$PRETTY_NAME")"
[ "$(uname -r)" = "$want" ]; tap $? booted_the_packaged_kernel
# Boot finished without a failed unit ("degraded" names them).
state="$(systemctl is-system-running --wait)"
echo "# systemd: $state"
[ "$state" = running ] || systemctl --failed --no-legend | sed 's/^/# failed: /'
[ "$state" = running ]; tap $? systemd_reached_running
# Loaded at boot by systemd-modules-load (libkmod, as modprobe), from the
# path depmod indexed for the package, not by this script.
echo "# modules-load: $(systemctl show -p ActiveState --value systemd-modules-load.service)," \
	"halfproc from $(modinfo -n halfproc 2>&1)"
[ -d /sys/module/halfproc ]; tap $? module_loaded_at_boot
case "$(modinfo -n halfproc 2>/dev/null)" in
"/lib/modules/$want/updates/halfproc.ko") true ;;
*) false ;;
esac
tap $? module_found_by_modprobe_path
journalctl -b -u systemd-modules-load.service --no-pager -o cat | sed 's/^/# modules-load: /'
# A normal user, as after a bare-metal install.
[ "$(as_user id -u)" = 1000 ]; tap $? user_is_unprivileged
as_user halfproc info --probe | sed 's/^/# /'
as_user halfproc info --probe >/dev/null 2>&1; tap $? halfproc_info_probe
as_user halfproc info 2>&1 | grep -q "backend: kernel"; tap $? kernel_backend_detected
# The runtime's suite on the kernel backend, and the C library's programs
# (dynamically linked against the packaged libhalfproc).
prog rt/guest_tests as_user env HALFPROC_BACKEND=kernel "$D/guest_tests"
for t in "$D"/c-api/*; do
	echo "# running ${t##*/}"
	as_user "$t"; tap $? "c_api_${t##*/}"
done
# halfproc run and live migration between two node daemons, as hp.
prog migrate as_user "$D/migrate.sh"

echo "HALFPROC_EXIT=$rc" >/dev/ttyS1
sync
systemctl poweroff --no-block
