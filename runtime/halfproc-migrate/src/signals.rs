//! Pending signals: read from the frozen target's two queues (its thread's
//! own, `SigPnd`, and the process-wide one, `ShdPnd`) with
//! `PTRACE_PEEKSIGINFO`, as CRIU does; the restorer queues each again with
//! the same siginfo (`restore_plan`). Queued to itself, any `si_code` is
//! accepted: the kernel only refuses `si_code >= 0` and `SI_TKILL` when the
//! sender is not the receiver.
//!
//! What delivery would drop (not blocked, and ignored, or default-ignored
//! and not caught) is not carried. SIGKILL and SIGSTOP pending are refused:
//! the process is being killed or stopped.

use crate::error::{Error, Refusal, Result};
use crate::freeze::Frozen;
use crate::image::{PendingSignal, SigAction, SIGINFO_SIZE};
use crate::procfs;

const fn bit(sig: i32) -> u64 {
    1u64 << (sig - 1)
}

/// Job-control signals: sending SIGSTOP drops a pending SIGCONT, sending
/// SIGCONT drops pending stop signals. The restorer queues these after a
/// stop/continue of its own (`RestoreOptions::stopped`), not before.
pub(crate) const JOB_CONTROL: u64 =
    bit(libc::SIGCONT) | bit(libc::SIGTSTP) | bit(libc::SIGTTIN) | bit(libc::SIGTTOU);

/// Signals that cannot be carried: pending, the process is being killed or
/// stopped.
pub(crate) const NOT_CARRIED: u64 = bit(libc::SIGKILL) | bit(libc::SIGSTOP);

/// Whether `s` is queued after the restorer's own stop and continue.
pub(crate) fn job_control(s: &PendingSignal) -> bool {
    JOB_CONTROL & bit(s.signo) != 0
}

/// Signals the kernel drops when it delivers them: not blocked, and
/// ignored, or default-ignored (SIGCHLD, SIGCONT, SIGURG, SIGWINCH) and not
/// caught. A node daemon's SIGCONT that resumed a copy is one.
pub(crate) fn discarded_on_delivery(blocked: u64, actions: &[SigAction]) -> u64 {
    let default_ignored =
        bit(libc::SIGCHLD) | bit(libc::SIGCONT) | bit(libc::SIGURG) | bit(libc::SIGWINCH);
    let mut out = 0;
    for a in actions {
        let b = bit(a.sig);
        let ignored = a.handler == libc::SIG_IGN as u64;
        let dfl = a.handler == libc::SIG_DFL as u64;
        if ignored || (dfl && default_ignored & b != 0) {
            out |= b;
        }
    }
    out & !blocked
}

/// Every siginfo of one queue, in order.
fn peek_queue(f: &Frozen, shared: bool) -> Result<Vec<[u8; SIGINFO_SIZE]>> {
    let mut out = Vec::new();
    let mut batch = [[0u8; SIGINFO_SIZE]; 32];
    loop {
        let n = f.peek_siginfo(shared, out.len() as u64, &mut batch)?;
        out.extend_from_slice(&batch[..n]);
        if n < batch.len() {
            return Ok(out);
        }
    }
}

fn i32_at(b: &[u8], off: usize) -> i32 {
    i32::from_le_bytes(b[off..off + 4].try_into().unwrap_or([0; 4]))
}

/// (thread and process pending masks, thread queue, process queue).
type Snapshot = ((u64, u64), Vec<[u8; SIGINFO_SIZE]>, Vec<[u8; SIGINFO_SIZE]>);

/// Both queues and both pending masks, read until a read is consistent:
/// a signal sent meanwhile may append to a queue (fine) or, for job-control
/// signals, remove an entry (which would shift the peeks); the masks before
/// and after and two peeks, the first a prefix of the second, rule that out.
fn snapshot(f: &Frozen) -> Result<Snapshot> {
    let pid = f.pid();
    let masks = || -> Result<(u64, u64)> {
        let st = procfs::status(pid)?;
        Ok((
            procfs::sigmask_field(&st, "SigPnd")?,
            procfs::sigmask_field(&st, "ShdPnd")?,
        ))
    };
    for _ in 0..8 {
        let before = masks()?;
        let (p1, s1) = (peek_queue(f, false)?, peek_queue(f, true)?);
        let (p2, s2) = (peek_queue(f, false)?, peek_queue(f, true)?);
        let after = masks()?;
        if before == after && p2.starts_with(&p1) && s2.starts_with(&s1) {
            return Ok((after, p2, s2));
        }
    }
    Err(Error::Restore(format!(
        "pid {pid}: signals kept arriving while it was frozen; its pending signals could not be read"
    )))
}

/// The pending signals of the frozen `f` to carry, in delivery order (see
/// [`crate::image::Manifest::pending`]). `blocked` and `actions`: its mask
/// and dispositions.
pub(crate) fn read_pending(
    f: &Frozen,
    blocked: u64,
    actions: &[SigAction],
) -> Result<Vec<PendingSignal>> {
    let ((own_mask, shared_mask), own, shared) = snapshot(f)?;
    let mut seen_masks = own_mask | shared_mask;
    let mut out = Vec::new();
    for (is_shared, mask, queue) in [(false, own_mask, own), (true, shared_mask, shared)] {
        let mut queued = 0u64;
        for info in queue {
            let signo = i32_at(&info, 0);
            if !(1..=64).contains(&signo) {
                return Err(Error::Restore(format!(
                    "pid {}: a queued siginfo names signal {signo}",
                    f.pid()
                )));
            }
            queued |= bit(signo);
            seen_masks |= bit(signo);
            out.push(PendingSignal {
                shared: is_shared,
                signo,
                code: i32_at(&info, 8),
                info: info.to_vec(),
            });
        }
        // Pending with no siginfo (queued while the user's RLIMIT_SIGPENDING
        // was used up): delivered with a zeroed SI_USER siginfo, which is
        // what is carried.
        for signo in (1..=64).filter(|&s| mask & bit(s) != 0 && queued & bit(s) == 0) {
            let mut info = vec![0u8; SIGINFO_SIZE];
            info[0..4].copy_from_slice(&signo.to_le_bytes());
            out.push(PendingSignal {
                shared: is_shared,
                signo,
                code: libc::SI_USER,
                info,
            });
        }
    }
    if seen_masks & NOT_CARRIED != 0 {
        return Err(Refusal::PendingSignals {
            mask: seen_masks & NOT_CARRIED,
        }
        .into());
    }
    let dropped = discarded_on_delivery(blocked, actions);
    out.retain(|s| dropped & bit(s.signo) == 0);
    Ok(out)
}

/// Queues `s` again with its siginfo, to the process (`rt_sigqueueinfo`)
/// or to its thread (`rt_tgsigqueueinfo`); the pids (0 here) are filled in
/// by the child (see `restore_plan::Plan::pid_slots`).
pub(crate) fn requeue(
    b: &mut crate::restore_plan::Blob,
    op: &mut impl FnMut(libc::c_long, &[u64], u64, String),
    s: &crate::image::PendingSignal,
) {
    let info = b.push(&s.info, 8);
    let what = format!(
        "queue pending signal {} (si_code {}) to the {}",
        s.signo,
        s.code,
        if s.shared { "process" } else { "thread" }
    );
    if s.shared {
        op(
            libc::SYS_rt_sigqueueinfo,
            &[0, s.signo as u64, info],
            0,
            what,
        );
    } else {
        op(
            libc::SYS_rt_tgsigqueueinfo,
            &[0, 0, s.signo as u64, info],
            0,
            what,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discarded_are_unblocked_ignored_or_default_ignored() {
        let actions = [
            SigAction::plain(libc::SIGCONT, libc::SIG_DFL as u64),
            SigAction::plain(libc::SIGCHLD, 0x401000),
            SigAction::plain(libc::SIGUSR1, libc::SIG_IGN as u64),
            SigAction::plain(libc::SIGUSR2, libc::SIG_IGN as u64),
            SigAction::plain(libc::SIGTERM, libc::SIG_DFL as u64),
        ];
        let d = discarded_on_delivery(bit(libc::SIGUSR2), &actions);
        assert_eq!(d, bit(libc::SIGCONT) | bit(libc::SIGUSR1));
    }

    #[test]
    fn job_control_signals_are_the_four() {
        let s = |signo| PendingSignal {
            shared: true,
            signo,
            code: 0,
            info: vec![0; SIGINFO_SIZE],
        };
        assert!(job_control(&s(libc::SIGCONT)) && job_control(&s(libc::SIGTTOU)));
        assert!(!job_control(&s(libc::SIGUSR1)) && !job_control(&s(libc::SIGRTMIN())));
    }
}
