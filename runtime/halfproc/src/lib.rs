// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The halfproc user runtime.
//!
//! A *half-process* shares the address range `[2^45, 2^46)` with the other
//! members of its *set* (thread semantics there) and keeps everything else
//! private. This crate gives programs members, locks and memory in that
//! range, on the patched kernel or on any stock Linux.
//!
//! # Layout
//!
//! - [`backend`]: kernel or portable, detected at start-up.
//! - [`set`]: the set of this process; maps the arena at `2^45`.
//! - [`member`]: create / join / detach members; a member starts as a copy
//!   of its creator at creation time (libc's `fork()`), from any thread.
//! - [`sync`]: `Mutex`, `Condvar`, `RwLock`, `Barrier`, `Once` on shared
//!   futexes, robust against a dying owner.
//! - [`alloc`]: the shared-arena allocator (`malloc`/`free` from any member,
//!   `SharedAlloc` for `Box`/`Vec`), and the K&R baseline.
//! - [`dm`]: `dmread`/`dmwrite` between members' private memory.
//!
//! # Examples
//!
//! ```
//! use halfproc::{sync::Mutex, Member, Set};
//!
//! fn bump(m: &Mutex<u64>) -> i32 {
//!     *m.lock().unwrap() += 1;
//!     0
//! }
//!
//! let set = Set::init_default().unwrap();
//! let counter: &Mutex<u64> = halfproc::SharedBox::leak(halfproc::alloc::shared_box(Mutex::new(0u64)).unwrap());
//! let members: Vec<_> = (0..3).map(|_| Member::spawn(set, move || bump(counter)).unwrap()).collect();
//! for m in members {
//!     assert!(m.join().unwrap().success());
//! }
//! assert_eq!(*counter.lock().unwrap(), 3);
//! ```

#![cfg_attr(loom, allow(dead_code, unused_imports))]

#[cfg(not(loom))]
pub mod alloc;
#[cfg(not(loom))]
pub mod backend;
#[cfg(not(loom))]
pub mod dm;
#[cfg(not(loom))]
pub mod error;
#[cfg(not(loom))]
mod identity;
#[cfg(not(loom))]
pub mod member;
#[cfg(not(loom))]
pub mod set;
#[cfg(not(loom))]
mod slots;
pub mod sync;
#[cfg(not(loom))]
pub mod yield_point;

#[cfg(not(loom))]
pub use alloc::{SharedAlloc, SharedBox, SharedVec};
#[cfg(not(loom))]
pub use backend::{Backend, BackendKind};
#[cfg(not(loom))]
pub use dm::{dmread, dmwrite};
#[cfg(not(loom))]
pub use error::{Error, Result};
#[cfg(not(loom))]
pub use member::{ExitStatus, Member};
#[cfg(not(loom))]
pub use set::{Set, SetConfig};
#[cfg(not(loom))]
pub use yield_point::yield_now;

/// Under loom only the lock state machines are compiled.
#[cfg(loom)]
pub use loom_shim::*;

#[cfg(loom)]
mod loom_shim {
    /// Stand-in error.
    #[derive(Debug)]
    pub enum Error {
        /// Bad argument.
        InvalidArgument(&'static str),
    }
    /// Stand-in result.
    pub type Result<T, E = Error> = core::result::Result<T, E>;
}
