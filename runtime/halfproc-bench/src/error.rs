// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Errors of the benchmarks.
//!
//! Three kinds matter to a user and are kept apart: a bad argument
//! ([`Error::Usage`], exit code 2 in the binary), a system call that failed
//! ([`Error::Sys`], with the call named and `errno` kept), and a measurement
//! that cannot be trusted ([`Error::Verify`]: the reader's checksum did not
//! match the data the writer wrote, or a peer died or stalled).

use std::fmt;
use std::io;

/// What went wrong.
#[derive(Debug)]
pub enum Error {
    /// The arguments are wrong; the message says which and what is allowed.
    Usage(String),
    /// A system call failed.
    Sys {
        /// The call and what it was for, e.g. `"mmap(shared range, 1 MiB)"`.
        what: String,
        /// The error the kernel returned.
        err: io::Error,
    },
    /// A result cannot be trusted: wrong checksum, short transfer, a peer
    /// that died or did not answer.
    Verify(String),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A [`Error::Sys`] from `errno`, right after the failing call.
    #[cold]
    pub fn last_os(what: impl Into<String>) -> Self {
        Error::Sys {
            what: what.into(),
            err: io::Error::last_os_error(),
        }
    }

    /// A [`Error::Sys`] from an explicit `errno` value.
    #[cold]
    pub fn from_errno(what: impl Into<String>, errno: i32) -> Self {
        Error::Sys {
            what: what.into(),
            err: io::Error::from_raw_os_error(errno),
        }
    }

    /// A [`Error::Usage`].
    #[cold]
    pub fn usage(msg: impl Into<String>) -> Self {
        Error::Usage(msg.into())
    }

    /// The `errno` of a [`Error::Sys`], if any.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Sys { err, .. } => err.raw_os_error(),
            _ => None,
        }
    }

    /// Whether this error means "this machine or kernel cannot do that"
    /// (the strategy is unavailable) rather than "the benchmark is broken".
    pub fn is_unsupported(&self) -> bool {
        matches!(
            self.errno(),
            Some(libc::ENOSYS | libc::EOPNOTSUPP | libc::EPERM | libc::EACCES)
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(m) => write!(f, "usage: {m}"),
            Error::Sys { what, err } => write!(f, "{what}: {err}"),
            Error::Verify(m) => write!(f, "verification failed: {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Sys { err, .. } => Some(err),
            _ => None,
        }
    }
}
