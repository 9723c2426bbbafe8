#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# tests/slurm/run.sh [SIZE]: the DMI Jacobi (apps/dmi/jacobi.c) under a
# real Slurm on this machine.  Starts munged, slurmctld and slurmd (Debian's
# slurm-wlm, installed by scripts/deps.sh) on a one-node cluster
# "localhost" with 2 CPUs in a private state directory (its own munge key,
# sockets, ports, logs and spool; removed afterwards), submits a batch job
# whose step is `srun -n 3 --overcommit jacobi SIZE`, and checks that the
# checksum of that 3-task run equals the serial reference and
# `dmi run -n 3`.  The tasks find each other through the SLURM_* variables
# alone (runtime/dmi/src/slurm.rs).  A daemon that does not come up is an
# error that prints its log.  Bounded: every wait has a timeout, the whole
# run takes well under a minute on a warm build.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../../scripts/lib.sh"
size="${1:-small}"
target="${CARGO_TARGET_DIR:-$HALFPROC_ROOT/target}"
up_timeout=30	# seconds for each daemon to come up
job_timeout=120	# seconds for the job

for c in munged mungekey slurmctld slurmd sbatch srun scontrol sinfo; do
	command -v "$c" >/dev/null ||
		die "slurm: $c is missing (scripts/deps.sh installs slurm-wlm and munge)"
done
work="$(mktemp -d /tmp/halfproc-slurm.XXXXXX)"
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT

phase "slurm: build the DMI library, dmi and the Jacobi"
cargo build -q -j2 --manifest-path "$HALFPROC_ROOT/Cargo.toml" -p dmi -p dmi-cli
make -s -C "$HALFPROC_ROOT/apps" O="$work/apps" \
	"$work/apps/serial/jacobi" "$work/apps/dmi/jacobi" "$work/apps/cks-cmp" >&2
done_phase

# Two free TCP ports for slurmctld and slurmd.
read -r ctld_port d_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')

# show_log NAME FILE: the daemon's log, for a failure message.
show_log() {
	echo "----- $1 log ($2) -----" >&2
	tail -40 "$2" >&2 2>/dev/null || echo "(no log)" >&2
	echo "-----" >&2
}
# wait_up NAME PID LOG TEST...: until TEST succeeds; dies with the log if the
# daemon exits or the time runs out.
wait_up() {
	local name="$1" pid="$2" log="$3" t0
	shift 3
	t0=$(date +%s)
	until "$@" >/dev/null 2>&1; do
		if ! kill -0 "$pid" 2>/dev/null; then
			show_log "$name" "$log"
			die "slurm: $name exited during start-up"
		fi
		if (($(date +%s) - t0 >= up_timeout)); then
			show_log "$name" "$log"
			die "slurm: $name did not come up within ${up_timeout}s"
		fi
		sleep 0.2
	done
	info "$name is up (pid $pid) after $(($(date +%s) - t0))s"
}

phase "slurm: start munged, slurmctld and slurmd in $work"
mkdir -p "$work/munge" "$work/ctld" "$work/spool" "$work/out"
chmod 700 "$work/munge"
mungekey --create --keyfile="$work/munge/munge.key" --bits=1024 2>"$work/mungekey.log" ||
	{ show_log mungekey "$work/mungekey.log"; die "slurm: mungekey failed"; }
munge_sock="$work/munge/munge.socket"
munged --foreground --force --key-file="$work/munge/munge.key" \
	--socket="$munge_sock" --pid-file="$work/munge/munged.pid" \
	--seed-file="$work/munge/seed" --log-file="$work/munged.log" \
	>>"$work/munged.log" 2>&1 &
pids+=($!)
wait_up munged "${pids[-1]}" "$work/munged.log" \
	sh -c "munge --socket='$munge_sock' -n | unmunge --socket='$munge_sock'"

export SLURM_CONF="$work/slurm.conf"
cat >"$SLURM_CONF" <<EOF
ClusterName=halfproc
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=$(id -un)
SlurmdUser=$(id -un)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_sock
StateSaveLocation=$work/ctld
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/builtin
InactiveLimit=0
KillWait=5
MinJobAge=5
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=10 State=UP OverSubscribe=FORCE:3
EOF
slurmctld -D -i -f "$SLURM_CONF" >>"$work/slurmctld.log" 2>&1 &
pids+=($!)
wait_up slurmctld "${pids[-1]}" "$work/slurmctld.log" scontrol ping
slurmd -D -N localhost -f "$SLURM_CONF" >>"$work/slurmd.log" 2>&1 &
pids+=($!)
node_idle() { sinfo -h -N -o %T | grep -qx idle; }
wait_up slurmd "${pids[-1]}" "$work/slurmd.log" node_idle
done_phase

phase "slurm: reference runs (serial, dmi run -n 3)"
cks() { awk '$1 == "checksum" { print $2 }'; }
ref="$("$work/apps/serial/jacobi" "$size" | cks)"
[ -n "$ref" ] || die "slurm: the serial Jacobi printed no checksum"
loop="$(timeout 60 "$target/debug/dmi" run -n 3 "$work/apps/dmi/jacobi" "$size" | cks)"
[ -n "$loop" ] || die "slurm: dmi run -n 3 jacobi printed no checksum"
info "serial $ref, dmi run -n 3 $loop"
done_phase

phase "slurm: sbatch a job whose step is srun -n 3 jacobi $size"
cat >"$work/job.sh" <<EOF
#!/bin/sh
# Started directly in the batch script (not a step), it must refuse.
if $work/apps/dmi/jacobi $size >/dev/null 2>$work/out/direct.err; then
	echo "the Jacobi started outside a step did not fail" >&2
	exit 1
fi
exec srun -n 3 --overcommit --kill-on-bad-exit=1 $work/apps/dmi/jacobi $size
EOF
chmod +x "$work/job.sh"
t0=$(date +%s)
if ! timeout "$job_timeout" sbatch --wait -n 3 --overcommit -t 5 -J dmi-jacobi \
	-o "$work/out/job.out" -e "$work/out/job.err" "$work/job.sh" >"$work/sbatch.log" 2>&1; then
	cat "$work/sbatch.log" >&2
	echo "----- job stdout -----" >&2; cat "$work/out/job.out" >&2 2>/dev/null || true
	echo "----- job stderr -----" >&2; cat "$work/out/job.err" >&2 2>/dev/null || true
	show_log slurmd "$work/slurmd.log"
	die "slurm: the job failed or timed out (${job_timeout}s)"
fi
info "$(cat "$work/sbatch.log"): $(($(date +%s) - t0))s"
mapfile -t got < <(cks <"$work/out/job.out")
((${#got[@]} == 1)) ||
	{ cat "$work/out/job.out" "$work/out/job.err" >&2; die "slurm: expected one checksum line from rank 0, got ${#got[@]}"; }
verdict="$("$work/apps/cks-cmp" jacobi "$ref" "${got[0]}")" ||
	die "slurm: srun -n 3 checksum ${got[0]} disagrees with the serial $ref ($verdict)"
[ "${got[0]}" = "$loop" ] ||
	die "slurm: srun -n 3 checksum ${got[0]} differs from dmi run -n 3 ($loop)"
grep -q '^app jacobi impl dmi ranks 3 ' "$work/out/job.out" ||
	{ cat "$work/out/job.out" >&2; die "slurm: the job did not run as 3 DMI nodes"; }
grep -q "this is a job's batch script, not a job step" "$work/out/direct.err" ||
	{ cat "$work/out/direct.err" >&2; die "slurm: no clear error when started in the batch script outside a step"; }
echo "slurm: jacobi $size under srun -n 3: checksum ${got[0]}, equal to dmi run -n 3 and to the serial $ref"
done_phase

phase "slurm: a step whose rendezvous port is taken fails with a clear error"
# slurmctld listens on its port, so rank 0 cannot bind it.
t0=$(date +%s)
rc=0
timeout 60 srun -n 3 --overcommit --kill-on-bad-exit=1 -t 2 \
	--export="ALL,DMI_SLURM_PORT=$ctld_port,DMI_SLURM_TIMEOUT=3" \
	"$work/apps/dmi/jacobi" "$size" >"$work/out/bad.out" 2>"$work/out/bad.err" || rc=$?
((rc != 0 && rc != 124)) ||
	{ cat "$work/out/bad.err" >&2; die "slurm: the step with a taken port exited $rc (expected a failure, not success or a time-out)"; }
grep -q "rank 0: binding the rendezvous port $ctld_port" "$work/out/bad.err" ||
	{ cat "$work/out/bad.err" >&2; die "slurm: no message naming the taken rendezvous port"; }
info "failed as expected (status $rc) in $(($(date +%s) - t0))s:"
sed 's/^/        /' "$work/out/bad.err" >&2
done_phase
