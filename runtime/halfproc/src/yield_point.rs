// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `halfproc_yield()`: a migration point of a program that links the
//! runtime. Where a node daemon asked to migrate the program (`halfproc
//! migrate PID --to ...`), the program stops at its next yield, in a known
//! state (no runtime call in progress, no lock of the runtime held), and
//! the daemon moves it from there; elsewhere a yield costs an atomic load.
//! A program that never yields is migrated preemptively, at any
//! instruction. The page and its protocol: [`halfproc_sys::yield_page`].
//!
//! C header: `include/halfproc.h` (`halfproc_yield`).

use halfproc_sys::yield_page::{self, YieldPage, PARKED, REQUESTED, RUNNING};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::Duration;

static PAGE: OnceLock<Result<&'static YieldPage, i32>> = OnceLock::new();

/// This process's yield page, mapped at the first call.
fn page() -> io::Result<&'static YieldPage> {
    let r =
        PAGE.get_or_init(|| yield_page::map().map_err(|e| e.raw_os_error().unwrap_or(libc::EIO)));
    r.map_err(io::Error::from_raw_os_error)
}

/// How long a parked program looks again at its state.
const LOOK: Duration = Duration::from_millis(1);
/// How long it waits parked at most: then it runs on, and a daemon still
/// moving it freezes it where it is (as a program that never yields).
const PATIENCE: Duration = Duration::from_secs(60);

/// A migration point. Returns `Ok(true)` in a copy restored elsewhere (the
/// process moved: it now has another pid), `Ok(false)` when it did not
/// move. The first call maps the yield page; if its address is taken
/// (`EEXIST`), every call fails with that error and the program can only
/// be migrated preemptively.
///
/// While parked it sleeps 1 ms between looks, and gives up waiting when
/// the process that was its parent when it parked (its node daemon) is
/// gone, or after a minute.
pub fn yield_now() -> io::Result<bool> {
    let page = page()?;
    page.yields.fetch_add(1, Ordering::Relaxed);
    if page.state.load(Ordering::Acquire) != REQUESTED {
        return Ok(false);
    }
    // SAFETY: getpid/getppid have no preconditions.
    let (pid, parent) = unsafe { (libc::getpid(), libc::getppid()) };
    page.parked_pid.store(pid, Ordering::Relaxed);
    page.state.store(PARKED, Ordering::Release);
    let since = std::time::Instant::now();
    loop {
        // SAFETY: as above.
        if unsafe { libc::getpid() } != pid {
            // Restored elsewhere: caches of the old process go.
            crate::member::resumed_after_restore();
            page.moves.fetch_add(1, Ordering::Relaxed);
            page.state.store(RUNNING, Ordering::Release);
            return Ok(true);
        }
        // SAFETY: as above.
        let orphaned = unsafe { libc::getppid() } != parent;
        if page.state.load(Ordering::Acquire) != PARKED || orphaned || since.elapsed() > PATIENCE {
            page.state.store(RUNNING, Ordering::Release);
            return Ok(false);
        }
        std::thread::sleep(LOOK);
    }
}

/// Yields made by this process (moved or not) and moves seen, from the
/// page (carried with the process); `(0, 0)` before the first yield.
pub fn counts() -> (u64, u64) {
    match PAGE.get() {
        Some(Ok(p)) => (
            p.yields.load(Ordering::Relaxed),
            p.moves.load(Ordering::Relaxed),
        ),
        _ => (0, 0),
    }
}
