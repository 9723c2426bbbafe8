// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! halfproc's one low-level layer: the system calls of half-processes and
//! of their portable emulation, in one place for the runtime, the
//! benchmarks and the migration engine.
//!
//! It sits on `halfproc-uapi` (the ABI numbers), `libc` and `nix`: `nix`
//! where it wraps a call (`mmap`, `munmap`, `madvise`, `memfd_create`,
//! `ftruncate`, `process_vm_readv`, `pipe2`), raw `libc::syscall` for what it lacks
//! (`clone3`, `dmread`/`dmwrite` and their vectored forms, `futex`,
//! `pidfd_open`, `prctl(PR_HALFPROC)`). Every `unsafe` block says why it is
//! sound; every `unsafe fn` says what its caller must promise.
//!
//! # Layout
//!
//! | module | concept |
//! |---|---|
//! | [`error`] | the one error type: a failed call, or a misplaced mapping |
//! | [`range`] | the shared range and its bounds check |
//! | [`size`] | byte counts with `K`/`M`/`G` suffixes |
//! | [`backend`] | is the kernel backend here? |
//! | [`mem`] | mappings: private, shared, `MAP_HALFPROC`, memfd at `2^45` |
//! | [`futex`] | shared futex wait/wake |
//! | [`task`] | ids, liveness, `fork`, `clone3(CLONE_HALFPROC)`, pidfds, `PR_HALFPROC` |
//! | [`copy`] | `dmread`/`dmwrite`(v) and `process_vm_readv`/`writev` |
//! | [`fd`] | pipes |
//!
//! # Examples
//!
//! ```
//! use halfproc_sys::{mem::Region, range::in_shared_range, Error};
//! // The portable backend's shared memory: a memfd at a fixed address.
//! let at = (halfproc_sys::range::HALFPROC_RANGE_START + (11 << 40)) as usize;
//! let r = Region::memfd_at(c"example", 1 << 20, at, nix::sys::mman::MapFlags::empty())?;
//! assert!(in_shared_range(r.addr() as u64, r.len() as u64));
//! # Ok::<(), Error>(())
//! ```

pub mod backend;
pub mod copy;
pub mod error;
pub mod fd;
pub mod futex;
pub mod mem;
pub mod range;
pub mod size;
pub mod task;
pub mod yield_page;

pub use error::{Error, Result};
pub use mem::Region;
pub use range::{in_shared_range, overlaps_shared_range};
pub use size::parse_size;
