// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The one error type of the low-level layer.
//!
//! A system call that failed ([`Error::Os`]: what was called, and the
//! kernel's error), or a mapping meant for the shared range that the kernel
//! put somewhere else ([`Error::Misplaced`]: an unpatched kernel ignores
//! `MAP_HALFPROC`; a kernel before 4.17 treats `MAP_FIXED_NOREPLACE` as a
//! hint). The runtime and the benchmarks wrap it in their own errors, which
//! add what only they know (bad handles, usage, failed checksums).

use std::borrow::Cow;
use std::fmt;
use std::io;

/// What went wrong below the runtime.
///
/// # Examples
///
/// ```
/// use halfproc_sys::Error;
/// let e = Error::from_errno("clone3(CLONE_HALFPROC)", libc::EOPNOTSUPP);
/// assert_eq!(e.errno(), libc::EOPNOTSUPP);
/// assert!(e.is_unsupported());
/// assert!(e.to_string().starts_with("clone3(CLONE_HALFPROC): "));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed.
    Os {
        /// The call and what it was for, e.g. `"mmap(private, 4096 bytes)"`.
        what: Cow<'static, str>,
        /// The error the kernel returned.
        err: io::Error,
    },
    /// A mapping landed where it was not asked for.
    Misplaced {
        /// Which mapping.
        what: &'static str,
        /// Where it landed (it has been unmapped again).
        addr: u64,
        /// The fixed address asked for, or `None` when the request was
        /// "anywhere in the shared range" (`MAP_HALFPROC`).
        wanted: Option<u64>,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::Os`] from `errno`, right after the failing call.
    #[cold]
    pub fn last_os(what: impl Into<Cow<'static, str>>) -> Self {
        Error::Os {
            what: what.into(),
            err: io::Error::last_os_error(),
        }
    }

    /// An [`Error::Os`] from an explicit `errno` value.
    #[cold]
    pub fn from_errno(what: impl Into<Cow<'static, str>>, errno: i32) -> Self {
        Self::io(what, io::Error::from_raw_os_error(errno))
    }

    /// An [`Error::Os`] from an [`io::Error`] (e.g. of `std::fs`).
    #[cold]
    pub fn io(what: impl Into<Cow<'static, str>>, err: io::Error) -> Self {
        Error::Os {
            what: what.into(),
            err,
        }
    }

    /// An [`Error::Os`] from one of `nix`'s errors.
    #[cold]
    pub(crate) fn nix(what: impl Into<Cow<'static, str>>, errno: nix::errno::Errno) -> Self {
        Self::from_errno(what, errno as i32)
    }

    /// The `errno` value that stands for this error: the kernel's for
    /// [`Error::Os`] (`EIO` if it had none), `EOPNOTSUPP` for a mapping the
    /// kernel did not put in the shared range, `EEXIST` for one it did not
    /// put at the fixed address asked for.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Os { err, .. } => err.raw_os_error().unwrap_or(libc::EIO),
            Error::Misplaced { wanted: None, .. } => libc::EOPNOTSUPP,
            Error::Misplaced {
                wanted: Some(_), ..
            } => libc::EEXIST,
        }
    }

    /// Whether this error means "this machine or kernel cannot do that"
    /// rather than "the caller is broken".
    pub fn is_unsupported(&self) -> bool {
        matches!(
            self.errno(),
            libc::ENOSYS | libc::EOPNOTSUPP | libc::EPERM | libc::EACCES
        )
    }

    /// The error as an [`io::Error`] (the kernel's own for [`Error::Os`]).
    pub fn into_io(self) -> io::Error {
        match self {
            Error::Os { err, .. } => err,
            other => io::Error::from_raw_os_error(other.errno()),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Os { what, err } => write!(f, "{what}: {err}"),
            Error::Misplaced {
                what,
                addr,
                wanted: None,
            } => write!(
                f,
                "{what} landed at {addr:#x}, outside the shared range [2^45, 2^46): \
                 the kernel ignored MAP_HALFPROC (not patched?)"
            ),
            Error::Misplaced {
                what,
                addr,
                wanted: Some(w),
            } => write!(
                f,
                "{what} landed at {addr:#x}, not {w:#x} (address in use?)"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Os { err, .. } => Some(err),
            Error::Misplaced { .. } => None,
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        e.into_io()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_of_each_kind() {
        let os = Error::from_errno("dmread", libc::ESRCH);
        assert_eq!((os.errno(), os.is_unsupported()), (libc::ESRCH, false));
        let nowhere = Error::Misplaced {
            what: "mmap(MAP_HALFPROC)",
            addr: 0x7f00_0000_0000,
            wanted: None,
        };
        assert_eq!(nowhere.errno(), libc::EOPNOTSUPP);
        assert!(nowhere.is_unsupported());
        assert!(nowhere.to_string().contains("0x7f0000000000"), "{nowhere}");
        let taken = Error::Misplaced {
            what: "memfd",
            addr: 1 << 46,
            wanted: Some(1 << 45),
        };
        assert_eq!(taken.into_io().raw_os_error(), Some(libc::EEXIST));
        let no_errno = Error::io("write", io::Error::other("custom"));
        assert_eq!(no_errno.errno(), libc::EIO);
    }
}
