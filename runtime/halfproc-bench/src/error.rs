// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Errors of the benchmarks.
//!
//! Three kinds matter to a user and are kept apart: a bad argument
//! ([`Error::Usage`], exit code 2 in the binary), a system call that failed
//! ([`Error::Sys`]: `halfproc-sys`'s error, with the call named and `errno`
//! kept), and a measurement that cannot be trusted ([`Error::Verify`]: the reader's checksum did not
//! match the data the writer wrote, or a peer died or stalled).

use std::borrow::Cow;
use std::fmt;
use std::io;

/// What went wrong.
#[derive(Debug)]
pub enum Error {
    /// The arguments are wrong; the message says which and what is allowed.
    Usage(String),
    /// A system call failed, or a mapping missed the shared range.
    Sys(halfproc_sys::Error),
    /// A result cannot be trusted: wrong checksum, short transfer, a peer
    /// that died or did not answer.
    Verify(String),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A [`Error::Sys`] from `errno`, right after the failing call.
    #[cold]
    pub fn last_os(what: impl Into<Cow<'static, str>>) -> Self {
        Error::Sys(halfproc_sys::Error::last_os(what))
    }

    /// A [`Error::Sys`] from an explicit `errno` value.
    #[cold]
    pub fn from_errno(what: impl Into<Cow<'static, str>>, errno: i32) -> Self {
        Error::Sys(halfproc_sys::Error::from_errno(what, errno))
    }

    /// A [`Error::Sys`] from an [`io::Error`] (of `std::fs`, `std::net`).
    #[cold]
    pub fn io(what: impl Into<Cow<'static, str>>, err: io::Error) -> Self {
        Error::Sys(halfproc_sys::Error::io(what, err))
    }

    /// A [`Error::Usage`].
    #[cold]
    pub fn usage(msg: impl Into<String>) -> Self {
        Error::Usage(msg.into())
    }

    /// The `errno` of a [`Error::Sys`], if any.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Sys(e) => Some(e.errno()),
            _ => None,
        }
    }

    /// Whether this error means "this machine or kernel cannot do that"
    /// (the strategy is unavailable) rather than "the benchmark is broken".
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Error::Sys(e) if e.is_unsupported())
    }
}

impl From<halfproc_sys::Error> for Error {
    fn from(e: halfproc_sys::Error) -> Self {
        Error::Sys(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(m) => write!(f, "usage: {m}"),
            Error::Sys(e) => e.fmt(f),
            Error::Verify(m) => write!(f, "verification failed: {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Sys(e) => e.source(),
            _ => None,
        }
    }
}
