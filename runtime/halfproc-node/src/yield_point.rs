// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The daemon's side of `halfproc_yield()` (the page and its protocol:
//! `halfproc_sys::yield_page`): before freezing a program that has a yield
//! page, ask it to stop at its next yield and wait for it there; let it go
//! again if the move does not happen. A program without the page (one that
//! never yielded) is frozen where it is.
//!
//! The page is read and written through `/proc/PID/mem`: the daemon is the
//! program's parent, which is the access the freeze needs anyway.

use halfproc_sys::yield_page::{ADDR, LEN, MAGIC, STATE_OFFSET};
pub use halfproc_sys::yield_page::{PARKED, REQUESTED, RUNNING};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// How long a migration waits for a program with a yield page to reach its
/// next yield before it freezes it where it is: `HALFPROC_YIELD_WAIT_MS`
/// in the daemon's environment, default 5000.
pub fn wait_limit() -> Duration {
    let ms = std::env::var("HALFPROC_YIELD_WAIT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    Duration::from_millis(ms)
}

/// What [`park`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parking {
    /// No yield page: the program never called `halfproc_yield()`.
    NoPage,
    /// Stopped at a yield after this long.
    Parked(Duration),
    /// It did not reach a yield within the limit; asked to run on.
    NotReached(Duration),
}

/// `pid`'s memory, if its yield page is mapped (a private read-write page
/// exactly at `ADDR` with the magic).
fn page_of(pid: i32) -> Option<File> {
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let page = |m: &halfproc_migrate::MapsEntry| {
        m.start == ADDR as u64 && m.end == (ADDR + LEN) as u64 && m.prot & rw == rw && !m.shared
    };
    if !halfproc_migrate::maps(pid).ok()?.iter().any(page) {
        return None;
    }
    let mem = OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .ok()?;
    let mut magic = [0u8; 8];
    mem.read_exact_at(&mut magic, ADDR as u64).ok()?;
    (u64::from_le_bytes(magic) == MAGIC).then_some(mem)
}

fn state(mem: &File) -> Option<u32> {
    let mut w = [0u8; 4];
    mem.read_exact_at(&mut w, (ADDR + STATE_OFFSET) as u64)
        .ok()?;
    Some(u32::from_le_bytes(w))
}

fn set_state(mem: &File, s: u32) -> bool {
    mem.write_all_at(&s.to_le_bytes(), (ADDR + STATE_OFFSET) as u64)
        .is_ok()
}

/// Asks `pid` to stop at its next yield and waits up to `limit` (looking
/// every millisecond). On [`Parking::NotReached`] the request is withdrawn
/// first, so a copy made from a freeze that follows never parks for it.
pub async fn park(pid: i32, limit: Duration) -> Parking {
    let Some(mem) = page_of(pid) else {
        return Parking::NoPage;
    };
    let t0 = Instant::now();
    if !set_state(&mem, REQUESTED) {
        return Parking::NoPage;
    }
    loop {
        match state(&mem) {
            Some(PARKED) => return Parking::Parked(t0.elapsed()),
            // Gone (the freeze that follows says so), or the page changed.
            None => return Parking::NoPage,
            Some(_) => {}
        }
        if t0.elapsed() >= limit {
            set_state(&mem, RUNNING);
            // A yield that read the request before it was withdrawn parks
            // anyway: a freeze now finds it parked, and its copy knows it
            // moved; the original is let go if the move fails.
            return Parking::NotReached(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The state word of `pid`'s yield page ([`RUNNING`], [`REQUESTED`],
/// [`PARKED`]), or `None` without a page.
pub fn state_of(pid: i32) -> Option<u32> {
    state(&page_of(pid)?)
}

/// Lets `pid` run on from a yield where it waits (or withdraws a request):
/// the original stays here. Nothing to do without a page or a request.
pub fn let_go(pid: i32) {
    if let Some(mem) = page_of(pid) {
        if state(&mem).is_some_and(|s| s != RUNNING) {
            set_state(&mem, RUNNING);
        }
    }
}
