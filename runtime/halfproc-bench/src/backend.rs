// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Which half-process implementation the benchmark runs on (the runtime's
//! [`BackendKind`]), and the three things it needs from it: spawning a
//! member, a region of the shared range, and `dmread`/`dmwrite`.
//!
//! * [`BackendKind::Kernel`]: the patched kernel with the `halfproc` module
//!   loaded (`/sys/module/halfproc` exists). Members are created with
//!   `clone3(CLONE_HALFPROC)`, shared-range memory with `mmap(MAP_HALFPROC)`,
//!   and `dmread`/`dmwrite` are system calls 470/471.
//! * [`BackendKind::Portable`]: a stock kernel. Members are plain `fork()`
//!   children; the shared range is a `MAP_SHARED` memfd mapped at
//!   `HALFPROC_RANGE_START` before the fork, so every member sees it at the
//!   same address; there is no `dmread`: the portable runtime emulates it with
//!   `process_vm_readv`, which this benchmark measures under its own name
//!   (`cma`) rather than twice.
//!
//! The benchmark measures the bare mechanisms rather than the runtime's
//! (no arena, no member table, no reaper), so it makes the system calls
//! itself, through `halfproc-sys`, the layer under the runtime: on the
//! kernel backend the writer's first `mmap(MAP_HALFPROC)` or
//! `clone3(CLONE_HALFPROC)` creates its set with the writer as first member,
//! and each reader is cloned into it; on the portable backend it does what
//! the runtime's portable backend does (memfd at `2^45`, `fork`,
//! `process_vm_readv` for copies). From the runtime it takes only the
//! backend's name and selection ([`BackendKind`], [`Backend::select`]).

use crate::error::{Error, Result};
use halfproc::backend::{Backend, BackendKind, Request};
use halfproc_sys::mem::{page_round, MapFlags, Region};
use halfproc_sys::range::HALFPROC_RANGE_START;
use halfproc_sys::task;

/// Resolve a user's `--backend` choice (`auto`, `kernel`, `portable`).
pub fn choose(choice: &str) -> Result<BackendKind> {
    choice
        .parse::<Request>()
        .and_then(Backend::select)
        .map(|b| b.kind())
        .map_err(|e| Error::usage(format!("--backend {choice}: {e}")))
}

/// The backend detected here (`$HALFPROC_BACKEND` ignored).
pub fn detect() -> BackendKind {
    Backend::select(Request::Auto).map_or(BackendKind::Portable, |b| b.kind())
}

/// Why `dmread`/`dmwrite` cannot be measured on `backend`, or `None` if
/// they can.
pub fn dm_unavailable(backend: BackendKind) -> Option<String> {
    match backend {
        BackendKind::Kernel => None,
        BackendKind::Portable => Some(format!(
            "needs the kernel backend ({} absent); the portable backend emulates \
             dmread/dmwrite with process_vm_readv/writev, measured here as cma-*",
            halfproc_sys::backend::KERNEL_MODULE_PATH
        )),
    }
}

/// Create a member of the caller's set: `Ok(0)` in the child, the child's
/// pid in the parent (like `fork`).
pub fn spawn_member(backend: BackendKind) -> Result<i32> {
    let pid = match backend {
        // SAFETY: the child only runs code that is fork-safe in a
        // single-threaded child (glibc's fork resets its malloc locks).
        BackendKind::Portable => unsafe { task::fork() },
        // SAFETY: the binary is single-threaded when it spawns members (the
        // library documents this for run_copy/run_mm), so no C library lock
        // is held across the clone; the child never uses pthread ids.
        BackendKind::Kernel => unsafe { task::clone_member() },
    };
    Ok(pid?)
}

/// Memory in the shared range, visible at the same address in every member.
///
/// For [`BackendKind::Portable`] it must be created before members are
/// spawned (the memfd mapping is inherited); for [`BackendKind::Kernel`] the
/// mapping is made through `MAP_HALFPROC` and is visible to the whole set.
#[derive(Debug)]
pub struct SharedArea {
    region: Region,
}

impl SharedArea {
    /// `len` bytes of the shared range for `backend`, at `slot` (an index
    /// that keeps concurrent areas of the portable backend apart).
    pub fn new(backend: BackendKind, len: usize, slot: usize) -> Result<SharedArea> {
        let len = page_round(len);
        let region = match backend {
            BackendKind::Portable => {
                // Slots are 1 TiB apart: far more than any benchmark size.
                let addr = HALFPROC_RANGE_START as usize + slot * (1usize << 40);
                Region::memfd_at(c"halfproc-bench-shared", len, addr, MapFlags::empty())?
            }
            BackendKind::Kernel => Region::halfproc(len, None, MapFlags::empty())?,
        };
        Ok(SharedArea { region })
    }

    /// The mapping.
    pub fn region(&self) -> &Region {
        &self.region
    }

    /// The mapping, mutably.
    pub fn region_mut(&mut self) -> &mut Region {
        &mut self.region
    }
}
