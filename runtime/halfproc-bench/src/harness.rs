// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Runs one strategy between two processes: the caller becomes the writer
//! `p`, a spawned member becomes the reader `p'`.
//!
//! Per measurement the harness follows the protocol in [`crate::control`]:
//! `p` writes `d` from a fresh seed (untimed), `p'` poisons its receive
//! buffer (untimed), the timer starts in `p` and stops in `p'` after its
//! checksum; then `p'` compares the checksum with the one regenerated from
//! the seed. A mismatch is an error, never a data point.
//!
//! The reader is a member of the writer's set (`clone3(CLONE_HALFPROC)` on
//! the kernel backend, `fork` on the portable one), so that `dmread` and the
//! shared range work between them. Both are pinned according to the
//! placement. The caller must be single-threaded on the kernel backend
//! (the binary is); the portable backend uses `fork`, which is safe from
//! multi-threaded test programs.

use crate::control::{SharedControl, WaitPolicy, CMD_MEASURE, CMD_QUIT};
use crate::error::{Error, Result};
use crate::os;
use crate::pattern;
use crate::strategy::{self, Link, Reader, Strategy};
use halfproc::BackendKind;
use halfproc_sys::task;
use std::cell::Cell;
use std::sync::atomic::Ordering::*;

/// What to run.
#[derive(Clone, Copy, Debug)]
pub struct Job<'a> {
    /// The strategy.
    pub strategy: Strategy,
    /// The backend.
    pub backend: BackendKind,
    /// Transfer sizes in bytes.
    pub sizes: &'a [usize],
    /// Untimed repetitions per size.
    pub warmup: usize,
    /// Timed repetitions per size.
    pub reps: usize,
    /// CPU of the writer and of the reader.
    pub cpus: (usize, usize),
    /// Chunk of pipelined strategies.
    pub chunk: usize,
    /// Mixed into every seed, so that rounds use different data.
    pub salt: u64,
}

/// The seed of one measurement: distinct for every strategy, size, round
/// and repetition, so stale bytes never pass the checksum.
pub fn seed(job: &Job<'_>, size: usize, rep: usize) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for v in [job.strategy as u64, size as u64, rep as u64, job.salt] {
        h = (h ^ v).wrapping_mul(0x0000_0100_0000_01b3);
        h ^= h >> 29;
    }
    h
}

/// Run `job`; returns, per size, the timed samples in nanoseconds.
///
/// Any error means the run is broken; `run_copy` reports the strategy as
/// failed. (Whether a strategy can run at all on the backend is decided
/// before, by `Strategy::unavailable_on`.)
pub fn run(job: &Job<'_>) -> Result<Vec<Vec<u64>>> {
    let max = *job
        .sizes
        .iter()
        .max()
        .ok_or_else(|| Error::usage("no sizes"))?;
    let halves = strategy::prepare(job.strategy, job.backend, max, job.chunk)?;
    run_with(job, halves)
}

/// [`run`] with halves made by the caller (`job.strategy` then only names
/// the run and salts the seeds). Lets tests check that a transport which
/// corrupts data is caught.
pub fn run_with(job: &Job<'_>, halves: strategy::Halves) -> Result<Vec<Vec<u64>>> {
    let max = *job
        .sizes
        .iter()
        .max()
        .ok_or_else(|| Error::usage("no sizes"))?;
    let ctl_mem = SharedControl::new()?;
    let ctl = ctl_mem.get();
    ctl.writer_pid.store(task::getpid() as u64, Release);
    let same = job.cpus.0 == job.cpus.1;
    let policy = WaitPolicy::for_same_core(same);

    let pid = crate::backend::spawn_member(job.backend)?;
    if pid == 0 {
        // The reader. Never return into the caller's stack frames.
        drop(halves.writer);
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            reader_main(halves.reader, &ctl_mem, job.cpus.1, max, job.chunk, policy)
        }))
        .unwrap_or(101);
        // SAFETY: ends the child without running the parent's atexit
        // handlers or destructors a second time.
        unsafe { libc::_exit(code) };
    }

    drop(halves.reader);
    let reaped = Cell::new(false);
    let alive = || {
        if !reaped.get() && os::child_exited(pid) {
            reaped.set(true);
        }
        !reaped.get()
    };
    let result = writer_main(job, halves.writer, &ctl_mem, pid, max, policy, &alive);
    match &result {
        Ok(_) => {
            ctl.op.store(CMD_QUIT, Release);
            ctl.cmd.ring();
            if !reaped.get() {
                let st = os::wait_child(pid)?;
                if st != 0 {
                    return Err(Error::Verify(format!("reader exited with status {st}")));
                }
            }
        }
        Err(_) if !reaped.get() => os::kill_and_reap(pid),
        Err(_) => {}
    }
    result
}

fn writer_main(
    job: &Job<'_>,
    mut w: Box<dyn strategy::Writer>,
    ctl_mem: &SharedControl,
    reader_pid: i32,
    max: usize,
    policy: WaitPolicy,
    alive: &dyn Fn() -> bool,
) -> Result<Vec<Vec<u64>>> {
    let ctl = ctl_mem.get();
    ctl.reader_pid.store(reader_pid as u64, Release);
    // Under Yama ptrace_scope=1 a child may not process_vm_readv its
    // parent unless the parent names it; harmless without Yama.
    task::allow_ptrace_from(reader_pid);
    os::pin_to(job.cpus.0)?;
    let link = Link {
        ctl,
        policy,
        alive,
        chunk: job.chunk,
    };
    w.init(max, &link)?;

    let mut out = Vec::with_capacity(job.sizes.len());
    let mut count = 0u32;
    for &size in job.sizes {
        let mut samples = Vec::with_capacity(job.reps);
        for rep in 0..job.warmup + job.reps {
            let seed = seed(job, size, rep);
            pattern::fill(w.source(size), seed);
            ctl.op.store(CMD_MEASURE, Relaxed);
            ctl.size.store(size as u64, Relaxed);
            ctl.seed.store(seed, Relaxed);
            count += 1;
            ctl.cmd.set(count);
            ctl.ready.wait_until(policy, alive, |v| v >= count)?;
            let t0 = os::now_ns();
            ctl.t0.store(t0, Relaxed);
            ctl.go.set(count);
            let sent = w
                .send(size, &link)
                .and_then(|()| ctl.done.wait_until(policy, alive, |v| v >= count).map(drop));
            // A failure on the reader's side explains a failure on ours
            // (a closed stream, a dead peer), so it is reported first.
            let errno = ctl.reader_errno.load(Acquire);
            if errno != 0 {
                let what = format!("{} (reader, {} bytes)", job.strategy, size);
                return Err(if errno == u64::MAX {
                    Error::Verify(format!("{what}: see the reader's message above"))
                } else {
                    Error::from_errno(what, errno as i32)
                });
            }
            sent?;
            if ctl.verified.load(Acquire) != 1 {
                return Err(Error::Verify(format!(
                    "{}: {} bytes: reader's checksum {:#018x}, expected {:#018x}",
                    job.strategy,
                    size,
                    ctl.checksum.load(Relaxed),
                    pattern::expected(seed, size)
                )));
            }
            if rep >= job.warmup {
                samples.push(ctl.elapsed.load(Relaxed));
            }
        }
        out.push(samples);
    }
    Ok(out)
}

fn reader_main(
    mut r: Box<dyn Reader>,
    ctl_mem: &SharedControl,
    cpu: usize,
    max: usize,
    chunk: usize,
    policy: WaitPolicy,
) -> i32 {
    let ctl = ctl_mem.get();
    // SAFETY: prctl with integer arguments; the reader dies with the writer.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    let parent = ctl.writer_pid.load(Acquire) as i32;
    // SAFETY: no preconditions.
    let alive = || unsafe { libc::getppid() } == parent;
    // See writer_main.
    task::allow_ptrace_from(parent);
    let link = Link {
        ctl,
        policy,
        alive: &alive,
        chunk,
    };
    let fail = |e: Error| {
        eprintln!("halfproc-bench reader: {e}");
        ctl.reader_errno
            .store(e.errno().map_or(u64::MAX, |n| n as u64), Release);
    };
    if let Err(e) = os::pin_to(cpu).and_then(|()| r.init(max, &link)) {
        // Report through the first command's `done`.
        fail(e);
    }
    let mut count = 0u32;
    loop {
        count = count.wrapping_add(1);
        if ctl.cmd.wait_until(policy, &alive, |v| v >= count).is_err() {
            return 3;
        }
        if ctl.op.load(Acquire) == CMD_QUIT {
            return 0;
        }
        if ctl.reader_errno.load(Acquire) != 0 {
            ctl.ready.set(count);
            ctl.done.set(count);
            return 1;
        }
        let size = ctl.size.load(Relaxed) as usize;
        let seed = ctl.seed.load(Relaxed);
        if let Err(e) = r.prepare(size) {
            fail(e);
        }
        ctl.head.set(0);
        ctl.tail.set(0);
        ctl.claim.reset();
        ctl.verified.store(0, Relaxed);
        ctl.ready.set(count);
        if ctl.go.wait_until(policy, &alive, |v| v >= count).is_err() {
            return 3;
        }
        let got = r.receive(size, &link);
        let t1 = os::now_ns();
        let t0 = ctl.t0.load(Relaxed);
        match got {
            Ok(sum) => {
                ctl.elapsed.store(t1.saturating_sub(t0), Relaxed);
                ctl.checksum.store(sum, Relaxed);
                let ok = sum == pattern::expected(seed, size);
                ctl.verified.store(ok as u64, Release);
            }
            Err(e) => fail(e),
        }
        ctl.done.set(count);
        if ctl.reader_errno.load(Acquire) != 0 {
            return 1;
        }
    }
}
