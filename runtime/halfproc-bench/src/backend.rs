// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Which half-process implementation the benchmark runs on, and the three
//! things it needs from it: spawning a member, a region of the shared range,
//! and `dmread`/`dmwrite`.
//!
//! * [`Backend::Kernel`]: the patched kernel with the `halfproc` module
//!   loaded (`/sys/module/halfproc` exists). Members are created with
//!   `clone3(CLONE_HALFPROC)`, shared-range memory with `mmap(MAP_HALFPROC)`,
//!   and `dmread`/`dmwrite` are system calls 470/471.
//! * [`Backend::Portable`]: a stock kernel. Members are plain `fork()`
//!   children; the shared range is a `MAP_SHARED` memfd mapped at
//!   `HALFPROC_RANGE_START` before the fork, so every member sees it at the
//!   same address; there is no `dmread`: the portable runtime emulates it with
//!   `process_vm_readv`, which this benchmark measures under its own name
//!   (`cma`) rather than twice.
//!
//! The `halfproc` runtime crate (runtime/halfproc) offers the same services,
//! but its members are cloned by a spawner process started at `Set::init`,
//! so they do not inherit what the caller creates later (sockets, pipes,
//! bounce buffers, private buffers), which this benchmark creates afresh for
//! every strategy. The benchmark therefore talks to the ABI directly (the
//! numbers come from `halfproc-uapi`): on the kernel backend the writer's
//! first `mmap(MAP_HALFPROC)` or `clone3(CLONE_HALFPROC)` creates its set
//! with the writer as first member, and each reader is cloned into it; on
//! the portable backend it does what the runtime's portable backend does
//! (memfd at `2^45`, `fork`, `process_vm_readv` for copies).

use crate::error::{Error, Result};
use crate::sys::{self, Fd, Region};
use halfproc_uapi::{
    in_shared_range, CloneArgs, CLONE_HALFPROC, HALFPROC_RANGE_START, MAP_HALFPROC,
};
use std::path::Path;

/// Where the kernel module announces itself.
pub const MODULE_SYSFS: &str = "/sys/module/halfproc";

/// The half-process implementation in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Patched kernel + `halfproc` module.
    Kernel,
    /// Stock kernel, memfd-based emulation.
    Portable,
}

impl Backend {
    /// `"kernel"` or `"portable"`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Kernel => "kernel",
            Backend::Portable => "portable",
        }
    }

    /// The kernel backend if the module is loaded, else the portable one.
    pub fn detect() -> Backend {
        if Path::new(MODULE_SYSFS).exists() {
            Backend::Kernel
        } else {
            Backend::Portable
        }
    }

    /// Resolve a user's choice (`auto`, `kernel`, `portable`).
    pub fn choose(choice: &str) -> Result<Backend> {
        match choice {
            "auto" => Ok(Backend::detect()),
            "portable" => Ok(Backend::Portable),
            "kernel" if Path::new(MODULE_SYSFS).exists() => Ok(Backend::Kernel),
            "kernel" => Err(Error::usage(format!(
                "--backend kernel: the halfproc kernel module is not loaded ({MODULE_SYSFS} does not exist)"
            ))),
            other => Err(Error::usage(format!(
                "unknown backend `{other}` (expected auto, kernel or portable)"
            ))),
        }
    }

    /// Why `dmread`/`dmwrite` cannot be measured here, or `None` if they can.
    pub fn dm_unavailable(self) -> Option<String> {
        match self {
            Backend::Kernel => None,
            Backend::Portable => Some(format!(
                "needs the kernel backend ({MODULE_SYSFS} absent); the portable backend emulates \
                 dmread/dmwrite with process_vm_readv/writev, measured here as cma-*"
            )),
        }
    }

    /// Create a member of the caller's set: `Ok(0)` in the child, the child's
    /// pid in the parent (like `fork`).
    pub fn spawn_member(self) -> Result<i32> {
        match self {
            Backend::Portable => {
                // SAFETY: fork has no memory-safety preconditions; the child
                // only runs code that is fork-safe in a single-threaded
                // child (glibc's fork resets its malloc locks).
                let pid = unsafe { libc::fork() };
                if pid < 0 {
                    return Err(Error::last_os("fork"));
                }
                Ok(pid)
            }
            Backend::Kernel => {
                let args = CloneArgs {
                    flags: CLONE_HALFPROC,
                    exit_signal: libc::SIGCHLD as u64,
                    ..CloneArgs::default()
                };
                // SAFETY: clone3 without CLONE_VM and without a new stack is
                // fork with extra flags: the child runs on a copy of our
                // stack. The binary is single-threaded when it spawns
                // members (the library documents this for run_copy/run_mm).
                let pid = unsafe {
                    libc::syscall(
                        libc::SYS_clone3,
                        &args as *const CloneArgs,
                        halfproc_uapi::CLONE_ARGS_SIZE,
                    )
                };
                if pid < 0 {
                    return Err(Error::last_os("clone3(CLONE_HALFPROC)"));
                }
                Ok(pid as i32)
            }
        }
    }
}

/// Memory in the shared range, visible at the same address in every member.
///
/// For [`Backend::Portable`] it must be created before members are spawned
/// (the memfd mapping is inherited); for [`Backend::Kernel`] the mapping is
/// made through `MAP_HALFPROC` and is visible to the whole set.
#[derive(Debug)]
pub struct SharedArea {
    region: Region,
    _fd: Option<Fd>,
}

impl SharedArea {
    /// `len` bytes of the shared range for `backend`, at `slot` (an index
    /// that keeps concurrent areas of the portable backend apart).
    pub fn new(backend: Backend, len: usize, slot: usize) -> Result<SharedArea> {
        let len = sys::page_round(len);
        let area = match backend {
            Backend::Portable => {
                // Slots are 1 TiB apart: far more than any benchmark size.
                let addr = HALFPROC_RANGE_START as usize + slot * (1usize << 40);
                let fd = sys::memfd("halfproc-bench-shared", len)?;
                let region = Region::shared_fd("shared range (memfd)", fd.0, len, Some(addr))?;
                SharedArea {
                    region,
                    _fd: Some(fd),
                }
            }
            Backend::Kernel => {
                let region =
                    Region::anon_with("MAP_HALFPROC", len, libc::MAP_PRIVATE | MAP_HALFPROC)?;
                SharedArea { region, _fd: None }
            }
        };
        if !in_shared_range(area.region.addr() as u64, len as u64) {
            return Err(Error::from_errno(
                format!(
                    "shared-range mapping landed at {:#x}, outside [2^45, 2^46) (kernel ignored MAP_HALFPROC?)",
                    area.region.addr()
                ),
                libc::EOPNOTSUPP,
            ));
        }
        Ok(area)
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
