//! Interval timers (`setitimer`, `alarm`): read with `getitimer` executed in
//! the frozen target, and which of them the copy arms again (the restorer's
//! last `setitimer`s, `restore_plan`).
//!
//! `ITIMER_REAL` is an hrtimer whose expiry sends SIGALRM to the
//! process-wide queue and stops. A periodic one is re-armed only when a
//! SIGALRM is dequeued from that queue (`dequeue_signal`): until then its
//! value reads 0 and its interval still reads. A SIGALRM the kernel never
//! queues (ignored and not blocked when sent, to an untraced process: a
//! traced one gets every signal queued) or flushes (`SIG_IGN` set while it
//! was pending) is never dequeued: the periodic timer has stopped for good
//! (until `setitimer`, or a SIGALRM from someone else dequeued from that
//! queue). So a periodic `ITIMER_REAL` reading 0 runs again in the copy
//! only with a SIGALRM carried in the process-wide queue. Without one it
//! is carried stopped (`value_us` 0, its interval; image version 4) and
//! the restorer stops it the same way (`restore_itimers::stop_real`:
//! expired with its SIGALRM blocked, waited for, then flushed), whatever
//! SIGALRM's disposition and mask.
//!
//! While we trace the target every signal sent to it is queued, ignored
//! ones too (`sig_ignored` is false for a traced task): a SIGALRM that
//! expires during the freeze is queued, and `signals::read_pending` leaves
//! it out when delivery would drop it (ignored, not blocked), which is what
//! sending it untraced would have done.
//!
//! An expired `ITIMER_REAL` whose expiry has not run yet (the hrtimer
//! still active: its callback, which queues the SIGALRM, is late) reads
//! 1 µs, not 0. `getitimer` truncates to microseconds: one with less than
//! 1 µs left reads 0; it expires within microseconds, so a reading taken
//! long before the queues (the first, before the memory is dumped) is
//! followed by its SIGALRM in them.

use crate::error::{Error, Result};
use crate::freeze::Frozen;
use crate::image::{Itimer, Manifest, PendingSignal};
use crate::mem::MemoryReader;
use crate::procfs;
use std::time::{Duration, Instant};

/// One `getitimer` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reading {
    /// `ITIMER_REAL`, `ITIMER_VIRTUAL` or `ITIMER_PROF`.
    pub which: i32,
    /// Microseconds to the next expiry as read (0: expired, disarmed, or
    /// less than 1 µs left).
    pub value_us: u64,
    /// Microseconds between expiries (0: fires once).
    pub interval_us: u64,
}

/// The three timers, read by `getitimer` executed in `f` at the `syscall`
/// instruction `insn` into the writable `scratch` (32 bytes). The caller
/// blocks every signal first and puts back the registers `regs` and the
/// scratch bytes afterwards.
pub(crate) fn read(
    f: &Frozen,
    reader: &dyn MemoryReader,
    regs: &[u64],
    insn: u64,
    scratch: u64,
) -> Result<Vec<Reading>> {
    let mut out = Vec::new();
    for which in [libc::ITIMER_REAL, libc::ITIMER_VIRTUAL, libc::ITIMER_PROF] {
        // struct itimerval: it_interval, it_value (timeval each).
        let w: [u64; 4] = f.inject_and_read(
            reader,
            regs,
            insn,
            libc::SYS_getitimer,
            &[which as u64, scratch],
            scratch,
            (&format!("getitimer({which})"), "itimerval"),
        )?;
        out.push(Reading {
            which,
            value_us: w[2] * 1_000_000 + w[3],
            interval_us: w[0] * 1_000_000 + w[1],
        });
    }
    Ok(out)
}

/// The signal a timer `which` sends when it expires.
fn signal_of(which: i32) -> i32 {
    match which {
        libc::ITIMER_VIRTUAL => libc::SIGVTALRM,
        libc::ITIMER_PROF => libc::SIGPROF,
        _ => libc::SIGALRM,
    }
}

/// The signals (a mask, bit `n - 1` for signal `n`) of the timers that
/// expired between the `first` and the `last` reading: armed at the first
/// and reading 0 at the last (an `ITIMER_REAL` is not re-armed while the
/// target is frozen, no signal being dequeued; a one-shot CPU timer, which
/// the injected calls may run down, is disarmed when its signal is sent,
/// under the same lock). Its signal may have come after the queues were
/// read between the two; they are read again once it is there
/// ([`wait_for_queued`]). Without this, an `ITIMER_REAL` armed at the
/// first reading and expired before the queues were read was carried
/// armed beside its own SIGALRM (the copy got the signal twice), and a
/// one-shot CPU timer's signal sent after the queues were read was lost.
/// (A periodic CPU timer re-armed meanwhile is not seen: one expired but
/// not yet run reads a tick left, more than before too, and its signal
/// comes only when the target runs.)
pub(crate) fn expired_between(first: &[Reading], last: &[Reading]) -> u64 {
    let mut mask = 0;
    for a in first.iter().filter(|a| a.value_us > 0) {
        let Some(b) = last.iter().find(|b| b.which == a.which) else {
            continue;
        };
        if b.value_us == 0 {
            mask |= 1 << (signal_of(a.which) - 1);
        }
    }
    mask
}

/// Waits until every signal of `mask` is in the process-wide queue of the
/// frozen `pid` (`ShdPnd`), where an expired interval timer puts its
/// signal (an `ITIMER_REAL` with less than 1 µs left expires within
/// microseconds): while traced, an ignored one too. One second at most.
pub(crate) fn wait_for_queued(pid: i32, mask: u64) -> Result<()> {
    let limit = Duration::from_secs(1);
    let start = Instant::now();
    loop {
        let st = procfs::status(pid)?;
        if procfs::sigmask_field(&st, "ShdPnd")? & mask == mask {
            return Ok(());
        }
        if start.elapsed() > limit {
            return Err(Error::Restore(format!(
                "pid {pid}: an interval timer expired while it was frozen but its signal \
                 (mask {mask:#x}) was not queued within {limit:?}; its timers and signals \
                 cannot be read consistently"
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The timers carried, from the `last` reading (taken after the queues
/// were read) and the pending signals carried (`pending`: those delivery
/// would drop already left out). An armed timer keeps what was left and
/// its interval. A periodic `ITIMER_REAL` reading 0 runs again one
/// interval from the restore if a SIGALRM is carried in the process-wide
/// queue (the kernel would re-arm it when dequeuing that signal);
/// otherwise its SIGALRM was discarded or flushed and it never runs again:
/// carried stopped (`value_us` 0, its interval), whatever SIGALRM's
/// disposition and mask are now. The others reading 0 are disarmed.
pub(crate) fn carried(last: &[Reading], pending: &[PendingSignal]) -> Vec<Itimer> {
    let alrm_queued = pending.iter().any(|s| s.shared && s.signo == libc::SIGALRM);
    last.iter()
        .filter_map(|r| {
            let value_us = if r.value_us > 0 {
                r.value_us
            } else if r.which != libc::ITIMER_REAL || r.interval_us == 0 {
                return None;
            } else if alrm_queued {
                r.interval_us
            } else {
                0
            };
            Some(Itimer {
                which: r.which,
                value_us,
                interval_us: r.interval_us,
            })
        })
        .collect()
}

/// Checks the timers of an image: each at most once, and a stopped one
/// (`value_us` 0, version 4 on) only for a periodic `ITIMER_REAL` with no
/// SIGALRM pending in the process-wide queue (dequeuing it would re-arm
/// the timer: the dump carries such a timer running).
pub(crate) fn check(m: &Manifest) -> Result<()> {
    for (i, t) in m.itimers.iter().enumerate() {
        let known = [libc::ITIMER_REAL, libc::ITIMER_VIRTUAL, libc::ITIMER_PROF];
        if !known.contains(&t.which) || m.itimers[..i].iter().any(|u| u.which == t.which) {
            return Err(Error::Image(format!(
                "interval timer {} is unknown or carried twice",
                t.which
            )));
        }
        if t.value_us > 0 {
            continue;
        }
        let alrm_queued = m
            .pending
            .iter()
            .any(|s| s.shared && s.signo == libc::SIGALRM);
        if m.version < 4 || t.which != libc::ITIMER_REAL || t.interval_us == 0 || alrm_queued {
            return Err(Error::Image(format!(
                "interval timer {} carried with nothing left (interval {} us, image version {}): \
                 only a periodic ITIMER_REAL with no SIGALRM pending in the process-wide queue \
                 is carried stopped, from version 4 on",
                t.which, t.interval_us, m.version
            )));
        }
    }
    Ok(())
}

/// The stopped `ITIMER_REAL` of `m` ([`check`]ed), which the restorer
/// stops again (`restore_itimers::stop_real`): `getitimer` reads 0 and
/// the interval, as the original's.
pub(crate) fn stopped_real(m: &Manifest) -> Option<&Itimer> {
    m.itimers
        .iter()
        .find(|t| t.which == libc::ITIMER_REAL && t.value_us == 0)
}

/// A `struct itimerval` (interval, then value; a `timeval` each).
pub(crate) fn itimerval(value_us: u64, interval_us: u64) -> Vec<u8> {
    let tv = |us: u64| [us / 1_000_000, us % 1_000_000];
    [tv(interval_us), tv(value_us)]
        .concat()
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::SIGINFO_SIZE;

    fn reading(which: i32, value_us: u64, interval_us: u64) -> Reading {
        Reading {
            which,
            value_us,
            interval_us,
        }
    }

    fn itimer(which: i32, value_us: u64, interval_us: u64) -> Itimer {
        Itimer {
            which,
            value_us,
            interval_us,
        }
    }

    fn alrm(shared: bool) -> PendingSignal {
        PendingSignal {
            shared,
            signo: libc::SIGALRM,
            code: libc::SI_KERNEL,
            info: vec![0; SIGINFO_SIZE],
        }
    }

    #[test]
    fn armed_timers_keep_value_and_interval() {
        let last = [
            reading(libc::ITIMER_REAL, 1500, 20_000),
            reading(libc::ITIMER_VIRTUAL, 999_000, 0),
            reading(libc::ITIMER_PROF, 0, 0),
        ];
        let want = vec![
            itimer(libc::ITIMER_REAL, 1500, 20_000),
            itimer(libc::ITIMER_VIRTUAL, 999_000, 0),
        ];
        assert_eq!(carried(&last, &[]), want);
        assert_eq!(carried(&last, &[alrm(true)]), want);
    }

    /// The finding of 2026-11-28: an expired periodic ITIMER_REAL whose
    /// SIGALRM was discarded (ignored) was armed again in the copy.
    #[test]
    fn expired_periodic_real_runs_again_only_with_its_sigalrm_queued() {
        let last = [reading(libc::ITIMER_REAL, 0, 20_000)];
        let running = vec![itimer(libc::ITIMER_REAL, 20_000, 20_000)];
        let stopped = vec![itimer(libc::ITIMER_REAL, 0, 20_000)];
        // Pending in the process-wide queue: dequeuing it re-arms.
        assert_eq!(carried(&last, &[alrm(true)]), running);
        // Discarded or flushed: stopped for good, with its interval.
        assert_eq!(carried(&last, &[]), stopped);
        // tgkill'd to the thread: dequeuing it does not re-arm the timer.
        assert_eq!(carried(&last, &[alrm(false)]), stopped);
    }

    #[test]
    fn expired_one_shot_and_cpu_timers_reading_0_are_disarmed() {
        let last = [
            reading(libc::ITIMER_REAL, 0, 0),
            reading(libc::ITIMER_VIRTUAL, 0, 5000),
            reading(libc::ITIMER_PROF, 0, 7_000_000),
        ];
        assert_eq!(carried(&last, &[alrm(true)]), vec![]);
        assert_eq!(carried(&last, &[]), vec![]);
    }

    #[test]
    fn expiry_between_the_readings_is_seen() {
        let bit = |sig: i32| 1u64 << (sig - 1);
        let armed = [reading(libc::ITIMER_REAL, 300, 0)];
        let expired = [reading(libc::ITIMER_REAL, 0, 0)];
        assert_eq!(expired_between(&armed, &expired), bit(libc::SIGALRM));
        assert_eq!(expired_between(&armed, &armed), 0);
        assert_eq!(expired_between(&expired, &expired), 0);
        let periodic = [reading(libc::ITIMER_REAL, 0, 20_000)];
        assert_eq!(expired_between(&armed, &periodic), bit(libc::SIGALRM));
        // The one-shot CPU timers (review of cf09db0).
        let cpu = |v: u64, p: u64| {
            [
                reading(libc::ITIMER_VIRTUAL, v, 0),
                reading(libc::ITIMER_PROF, p, 0),
            ]
        };
        assert_eq!(
            expired_between(&cpu(40, 30), &cpu(0, 0)),
            bit(libc::SIGVTALRM) | bit(libc::SIGPROF)
        );
        assert_eq!(
            expired_between(&cpu(40, 30), &cpu(40, 0)),
            bit(libc::SIGPROF)
        );
        assert_eq!(expired_between(&cpu(40, 30), &cpu(39, 20)), 0);
        assert_eq!(expired_between(&cpu(0, 0), &cpu(0, 0)), 0);
    }

    #[test]
    fn itimerval_is_interval_then_value() {
        let b = itimerval(2_500_000, 20_000);
        let w: Vec<u64> = b
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(w, [0, 20_000, 2, 500_000]);
    }
}
