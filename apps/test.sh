#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# apps/test.sh [SIZE]: build the apps, run each serial reference and its MPI
# version on 1, 2 and 4 ranks at SIZE (default: small), and check that every
# MPI checksum agrees with the serial one within the app's stated tolerance
# (common/checksum.c).  Exit 1 naming each app and rank count that disagreed
# or failed to run.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
size="${1:-small}"
out="${APPS_OUT:-$here/../out/apps}"
apps=(jacobi nbody pagerank cg)
ranks=(1 2 4)
per_run=60	# seconds; a small run takes well under 5

command -v mpicc >/dev/null && command -v mpirun >/dev/null ||
	{ echo "apps: mpicc/mpirun missing (scripts/deps.sh installs them)" >&2; exit 1; }
make -s -C "$here" -j "$(nproc)" O="$out" >&2 || { echo "apps: build failed" >&2; exit 1; }

passed=0
failed=()
# run NAME COMMAND...: "CHECKSUM ITERATIONS TIME_PER_ITER" as printed, or nothing
run() {
	local name="$1" log rc=0
	shift
	log="$(timeout "$per_run" "$@" 2>&1)" || rc=$?
	if ((rc)); then
		printf '%s\n' "$log" | tail -5 >&2
		echo "apps: $name: exited $rc" >&2
		return 1
	fi
	printf '%s\n' "$log" | awk '{ v[$1] = $2 }
		END { if ("checksum" in v) print v["checksum"], v["iterations"], v["time_per_iter"] }'
}
for app in "${apps[@]}"; do
	read -r ref iters secs < <(run "$app serial" "$out/serial/$app" "$size")
	if [ -z "${ref:-}" ]; then
		failed+=("$app serial: no checksum")
		continue
	fi
	printf '%-8s serial        %4s iterations, %.2e s/iteration; checksum %s\n' \
		"$app" "$iters" "$secs" "$ref"
	for np in "${ranks[@]}"; do
		val=""
		read -r val iters secs < <(run "$app mpi $np" \
			"$here/mpirun.sh" "$np" "$out/mpi/$app" "$size")
		if [ -z "$val" ]; then
			failed+=("$app mpi $np ranks: no checksum")
			continue
		fi
		verdict="$("$out/cks-cmp" "$app" "$ref" "$val")"
		ok=$?
		printf '%-8s mpi %d ranks   %4s iterations, %.2e s/iteration; checksum %s; %s\n' \
			"$app" "$np" "$iters" "$secs" "$val" "${verdict#*: }"
		if ((ok == 0)); then
			passed=$((passed + 1))
		else
			failed+=("$app mpi $np ranks: checksum $val, serial $ref")
		fi
	done
done
echo "apps: ${passed} passed, ${#failed[@]} failed"
if ((${#failed[@]})); then
	printf 'apps: disagree: %s\n' "${failed[@]}" >&2
	exit 1
fi
