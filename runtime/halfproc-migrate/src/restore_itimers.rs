//! The restorer's interval-timer ops ([`crate::restore_plan`]): a stopped
//! `ITIMER_REAL` is stopped again before anything else of the program is
//! set, and the armed timers are set last.

use crate::image::Manifest;
use crate::itimers::{itimerval, stopped_real};
use crate::restore_plan::Blob;
use libc::*;

/// How long the restorer waits for the `SIGALRM` of a stopped
/// `ITIMER_REAL` set to expire in 1 µs ([`stop_real`]).
const STOP_WAIT_S: u64 = 1;

/// Stops the stopped `ITIMER_REAL` of `m` ([`stopped_real`]) as the
/// original's is: expired, its `SIGALRM` flushed and never dequeued, so
/// the kernel does not re-arm it and `getitimer` reads `{0, interval}`.
/// Made while every signal is blocked and fd 0 is free (before the
/// program's files and dispositions): `setitimer` of 1 µs with its
/// interval; its `SIGALRM` (blocked, so queued whatever the disposition)
/// waited for with `ppoll` on a `signalfd` (fd 0), which does not dequeue
/// it, `STOP_WAIT_S` at most (a timeout fails this step); then
/// `SIG_IGN`, which flushes it from the queues without a dequeue (the
/// program's dispositions are set afterwards; `SIG_DFL` here where the
/// image has none for `SIGALRM`). Synchronous: when the restorer goes on,
/// the timer's expiry has run and its signal is gone, whoever traces the
/// copy later.
pub(crate) fn stop_real(
    m: &Manifest,
    b: &mut Blob,
    op: &mut impl FnMut(c_long, &[u64], u64, String),
) {
    let Some(t) = stopped_real(m) else {
        return;
    };
    let it = b.push(&itimerval(1, t.interval_us), 8);
    let alrm = b.push(&(1u64 << (SIGALRM - 1)).to_le_bytes(), 8);
    // struct pollfd { int fd = 0; short events = POLLIN; short revents; }
    let mut pfd = [0u8; 8];
    pfd[4..6].copy_from_slice(&(POLLIN as u16).to_le_bytes());
    let pfd = b.push(&pfd, 8);
    let ts = b.push(&[STOP_WAIT_S.to_le_bytes(), [0; 8]].concat(), 8);
    let act = |h: usize| -> Vec<u8> {
        [h as u64, 0, 0, 0]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect()
    };
    let ign = b.push(&act(SIG_IGN), 8);
    op(
        SYS_setitimer,
        &[ITIMER_REAL as u64, it, 0],
        0,
        format!(
            "setitimer(ITIMER_REAL, 1 us, {} us), to stop it",
            t.interval_us
        ),
    );
    op(
        SYS_signalfd4,
        &[u64::MAX, alrm, 8, SFD_CLOEXEC as u64],
        0,
        "signalfd4(SIGALRM) at fd 0".into(),
    );
    op(
        SYS_ppoll,
        &[pfd, 1, ts, 0, 8],
        1,
        format!(
            "wait for the SIGALRM of the stopped ITIMER_REAL (ppoll on the signalfd, \
             {STOP_WAIT_S} s at most; 0: it never came)"
        ),
    );
    op(SYS_close, &[0], 0, "close the signalfd".into());
    op(
        SYS_rt_sigaction,
        &[SIGALRM as u64, ign, 0, 8],
        0,
        "rt_sigaction(SIGALRM, SIG_IGN): flush the stopped ITIMER_REAL's SIGALRM".into(),
    );
    if !m.sigactions.iter().any(|s| s.sig == SIGALRM) {
        let dfl = b.push(&act(SIG_DFL), 8);
        op(
            SYS_rt_sigaction,
            &[SIGALRM as u64, dfl, 0, 8],
            0,
            "rt_sigaction(SIGALRM, SIG_DFL)".into(),
        );
    }
}

/// Sets the armed timers of `m`: the restorer's last step before
/// `rt_sigreturn`, so that a copy held stopped does not spend them (what
/// was left at the freeze runs from here on).
pub(crate) fn arm(m: &Manifest, b: &mut Blob, op: &mut impl FnMut(c_long, &[u64], u64, String)) {
    for t in m.itimers.iter().filter(|t| t.value_us > 0) {
        let at = b.push(&itimerval(t.value_us, t.interval_us), 8);
        op(
            SYS_setitimer,
            &[t.which as u64, at, 0],
            0,
            format!("setitimer({}, {} us)", t.which, t.value_us),
        );
    }
}
