// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The yield page: how a program that links the runtime and a node daemon
//! agree on a migration point (`halfproc_yield()`).
//!
//! One private anonymous page at [`ADDR`], mapped by the program at its
//! first yield and marked with [`MAGIC`]. A daemon finds it in
//! `/proc/PID/maps` (a page mapped exactly there), asks the program to come
//! to a yield by writing [`REQUESTED`] into its state word (through
//! `/proc/PID/mem`), and freezes it once it reads [`PARKED`]. The page is
//! ordinary private memory, so the migration engine carries it to the
//! restored copy, which finds its pid changed and knows it moved.
//!
//! The address is fixed because nothing else could tell the daemon where
//! the word is after a move, and it is below the half-process range
//! `[2^45, 2^46)`, where no default layout (PIE text near `0x5555...`,
//! libraries and stacks near `0x7fff...`) puts anything. If something is
//! mapped there already, the program has no yield page and is migrated
//! preemptively, like an unmodified one.
//!
//! The protocol (state word, 32 bits):
//!
//! ```text
//!  program                                   daemon (migrate PID)
//!  RUNNING: yield returns at once    <----   writes REQUESTED
//!  yield: sees REQUESTED, records its pid,
//!         writes PARKED, sleeps 1 ms a look   reads PARKED -> freeze, dump,
//!                                             restore elsewhere, kill this one
//!  (the copy) pid differs: RUNNING, returns 1
//!  (failure)  daemon writes RUNNING: returns 0
//! ```

use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64};

/// Where the page is mapped (page aligned, just below `2^45`).
pub const ADDR: usize = 0x1fff_fff0_0000;
/// Its length: one page.
pub const LEN: usize = 4096;
/// First word of a mapped yield page: "hpyield1".
pub const MAGIC: u64 = 0x3164_6c65_6979_7068;

/// The program runs; a yield returns at once.
pub const RUNNING: u32 = 0;
/// The daemon asks the program to stop at its next yield.
pub const REQUESTED: u32 = 1;
/// The program waits in a yield for the daemon (which may move it).
pub const PARKED: u32 = 2;

/// The page's contents.
#[repr(C)]
pub struct YieldPage {
    /// [`MAGIC`] once the program mapped the page.
    pub magic: AtomicU64,
    /// [`RUNNING`], [`REQUESTED`] or [`PARKED`].
    pub state: AtomicU32,
    /// The program's pid when it parked: a copy restored elsewhere has
    /// another one.
    pub parked_pid: AtomicI32,
    /// Yields made (all of them, moved or not).
    pub yields: AtomicU64,
    /// Yields that returned in a restored copy.
    pub moves: AtomicU64,
}

/// Offset of [`YieldPage::state`], for a daemon writing it from outside.
pub const STATE_OFFSET: usize = 8;

const _: () = assert!(core::mem::offset_of!(YieldPage, state) == STATE_OFFSET);
const _: () = assert!(core::mem::size_of::<YieldPage>() <= LEN);

/// Maps the yield page of this process (`MAP_FIXED_NOREPLACE`: an address
/// already in use is an error, `EEXIST`) and marks it. A page already
/// there with the magic (a restored copy) is used as it is.
pub fn map() -> std::io::Result<&'static YieldPage> {
    use core::sync::atomic::Ordering;
    // SAFETY: an anonymous mapping at an address that must be free (the
    // kernel refuses to replace anything); nothing else is touched.
    let got = unsafe {
        libc::mmap(
            ADDR as *mut libc::c_void,
            LEN,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if got == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EEXIST) {
            // A restored copy has the page: ours if it is readable and has
            // the magic (read as another process would: a page we did not
            // map may not be readable, and is never written).
            let mut magic = [0u8; 8];
            // SAFETY: getpid has no preconditions.
            let me = unsafe { libc::getpid() };
            let ours = crate::copy::vm_read(me, ADDR, &mut magic).is_ok_and(|n| n == 8)
                && u64::from_ne_bytes(magic) == MAGIC;
            if ours {
                // SAFETY: mapped and readable at ADDR (read above), and ours
                // (the magic); `YieldPage` is atomics only.
                return Ok(unsafe { &*(ADDR as *const YieldPage) });
            }
        }
        return Err(e);
    }
    if got as usize != ADDR {
        // A kernel older than 4.17 ignores MAP_FIXED_NOREPLACE.
        // SAFETY: unmapping the mapping just made.
        unsafe { libc::munmap(got, LEN) };
        return Err(std::io::Error::from_raw_os_error(libc::EEXIST));
    }
    // SAFETY: the page was just mapped, zeroed, readable and writable, and
    // is never unmapped; `YieldPage` is atomics only (all-zero is valid).
    let page = unsafe { &*(ADDR as *const YieldPage) };
    page.magic.store(MAGIC, Ordering::Release);
    Ok(page)
}
