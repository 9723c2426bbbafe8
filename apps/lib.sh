# SPDX-License-Identifier: GPL-2.0
# Shared by the apps' measuring scripts (timeline.sh, timeline-yield.sh,
# yield-moves.sh, reconf-sweep.sh); sourced after scripts/lib.sh, with $here
# set to apps/.  CARGO_BUILD_JOBS (default 2) sets cargo's and make's jobs.
#
# apps_build_dmi: builds libdmi and the dmi command in DMI_PROFILE (release,
# or debug) and the DMI forms of the apps and cks-cmp against them; sets
# profile, target, build (the apps' output directory) and dmi (the command).
apps_build_dmi() {
	local pflag
	profile="${DMI_PROFILE:-release}"
	case "$profile" in
	release) pflag=--release ;;
	debug) pflag= ;;
	*) die "DMI_PROFILE=$profile: release or debug" ;;
	esac
	target="${CARGO_TARGET_DIR:-$here/../target}"
	build="$here/../out/apps-$profile"
	dmi="$target/$profile/dmi"
	phase "build libdmi and dmi ($profile), the apps against it"
	# shellcheck disable=SC2086 # empty for debug
	cargo build -q -j"${CARGO_BUILD_JOBS:-2}" $pflag --manifest-path "$here/../Cargo.toml" -p dmi -p dmi-cli ||
		die "cargo build -p dmi -p dmi-cli failed"
	make -s -C "$here" -j"${CARGO_BUILD_JOBS:-2}" O="$build" DMI_LIBDIR="$target/$profile" dmi "$build/cks-cmp" >&2 ||
		die "make dmi failed"
	done_phase
}
