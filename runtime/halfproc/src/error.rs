// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The runtime's error type.
//!
//! Every fallible operation returns [`Result`]. At the C boundary an error
//! becomes an errno value through [`Error::errno`].

use std::fmt;
use std::io;

/// What went wrong in a runtime call.
///
/// # Examples
///
/// ```
/// use halfproc::Error;
/// let e = Error::NotMember;
/// assert_eq!(e.errno(), libc::EPERM);
/// assert!(e.to_string().contains("not a member"));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The kernel backend was asked for but is not available.
    KernelBackendUnavailable(String),
    /// The kernel accepted `MAP_HALFPROC` but placed the mapping outside the
    /// shared range (an unpatched kernel ignores the flag).
    NotInSharedRange {
        /// Where the mapping landed.
        addr: u64,
    },
    /// The set was already created in this process (one set per process).
    AlreadyInitialized,
    /// No set exists in this process: call [`crate::Set::init`] first.
    NoSet,
    /// The calling process is not a member of the set (e.g. a plain `fork()`
    /// child of a member): shared-range operations are refused.
    NotMember,
    /// The backend in use cannot do this.
    Unsupported(&'static str),
    /// A bad argument (size overflow, bad alignment, bad handle, ...).
    InvalidArgument(&'static str),
    /// The member table or the arena is full.
    Exhausted(&'static str),
    /// A member handle no longer names a live member slot (joined, detached
    /// or reused).
    StaleHandle,
    /// The member's creator and the member are both gone and nobody
    /// recorded how the member ended (its reaper died with the creator).
    CreatorGone,
    /// The member was reaped by a `wait()` elsewhere in its creator: its
    /// exit status is lost.
    StatusLost,
    /// An operating-system call failed.
    Os {
        /// What the runtime was doing.
        what: &'static str,
        /// The error the kernel returned.
        err: io::Error,
    },
}

impl Error {
    pub(crate) fn os(what: &'static str, err: io::Error) -> Self {
        Error::Os { what, err }
    }

    pub(crate) fn last_os(what: &'static str) -> Self {
        Error::Os {
            what,
            err: io::Error::last_os_error(),
        }
    }

    /// An error of the low-level layer, while doing `what`: a failed call
    /// keeps its errno, a mapping outside the shared range becomes
    /// [`Error::NotInSharedRange`].
    #[cold]
    pub(crate) fn sys(what: &'static str, e: halfproc_sys::Error) -> Self {
        match e {
            halfproc_sys::Error::Misplaced {
                addr, wanted: None, ..
            } => Error::NotInSharedRange { addr },
            other => Error::os(what, other.into_io()),
        }
    }

    /// The errno value that stands for this error at the C boundary.
    pub fn errno(&self) -> i32 {
        match self {
            Error::KernelBackendUnavailable(_) => libc::ENOSYS,
            Error::NotInSharedRange { .. } => libc::ENOSYS,
            Error::AlreadyInitialized => libc::EEXIST,
            Error::NoSet => libc::ENXIO,
            Error::NotMember => libc::EPERM,
            Error::InvalidArgument(_) => libc::EINVAL,
            Error::Unsupported(_) => libc::ENOTSUP,
            Error::Exhausted(_) => libc::EAGAIN,
            Error::StaleHandle => libc::ESRCH,
            Error::CreatorGone | Error::StatusLost => libc::ECHILD,
            Error::Os { err, .. } => err.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::KernelBackendUnavailable(why) => {
                write!(f, "kernel backend unavailable: {why}")
            }
            Error::NotInSharedRange { addr } => write!(
                f,
                "mmap(MAP_HALFPROC) returned {addr:#x}, outside the shared range \
                 [2^45, 2^46): the kernel does not implement half-processes"
            ),
            Error::AlreadyInitialized => write!(f, "the half-process set is already initialized"),
            Error::NoSet => write!(
                f,
                "no half-process set in this process (call Set::init first)"
            ),
            Error::NotMember => write!(
                f,
                "this process is not a member of the half-process set \
                 (a plain fork() of a member is outside the set)"
            ),
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::Unsupported(what) => write!(f, "not supported: {what}"),
            Error::Exhausted(what) => write!(f, "out of resources: {what}"),
            Error::StaleHandle => write!(f, "member handle is stale (already joined or detached)"),
            Error::CreatorGone => write!(
                f,
                "the member and the process that created it are gone; how it ended is unknown"
            ),
            Error::StatusLost => write!(
                f,
                "the member was reaped by a wait() in its creator; its exit status is lost"
            ),
            Error::Os { what, err } => write!(f, "{what}: {err}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Os { err, .. } => Some(err),
            _ => None,
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        match e {
            Error::Os { err, .. } => err,
            other => io::Error::from_raw_os_error(other.errno()),
        }
    }
}

/// The runtime's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
