// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Backend detection: the patched kernel, or the portable emulation.
//!
//! - [`BackendKind::Kernel`]: members come from `clone3(CLONE_HALFPROC)`,
//!   shared memory from `mmap(MAP_HALFPROC)`, copies from `dmread`/`dmwrite`.
//!   Detected by `/sys/module/halfproc` (the module is loaded).
//! - [`BackendKind::Portable`]: any stock Linux. The set's range is one memfd
//!   mapped `MAP_SHARED` at `2^45` in the creator before any member exists, so
//!   every member (a `fork` of a member) inherits it at the same address.
//!   Freed memory is released for every member by punching holes in the memfd;
//!   copies use `process_vm_readv`/`process_vm_writev`.
//!
//! The choice comes from `HALFPROC_BACKEND` (`auto`, `kernel`, `portable`),
//! default `auto`. Asking for `kernel` where it is missing is an error.
//!
//! C header: `<linux/halfproc.h>` (see the `halfproc-uapi` crate).

use std::fmt;

pub use halfproc_sys::backend::{BACKEND_ENV, KERNEL_MODULE_PATH};

use crate::error::{Error, Result};

/// Which implementation of half-processes is in use.
///
/// # Examples
///
/// ```
/// use halfproc::BackendKind;
/// assert_eq!("portable".parse::<BackendKind>().unwrap(), BackendKind::Portable);
/// assert_eq!(BackendKind::Kernel.to_string(), "kernel");
/// assert!("bogus".parse::<BackendKind>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum BackendKind {
    /// The patched kernel with the `halfproc` module loaded.
    Kernel = 1,
    /// The emulation on a stock kernel.
    Portable = 2,
}

impl BackendKind {
    /// The lowercase name (`"kernel"` / `"portable"`).
    pub const fn name(self) -> &'static str {
        match self {
            BackendKind::Kernel => "kernel",
            BackendKind::Portable => "portable",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for BackendKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "kernel" => Ok(BackendKind::Kernel),
            "portable" => Ok(BackendKind::Portable),
            _ => Err(Error::InvalidArgument(
                "backend must be `kernel` or `portable`",
            )),
        }
    }
}

/// What the caller asks for.
///
/// # Examples
///
/// ```
/// use halfproc::backend::Request;
/// assert_eq!("auto".parse::<Request>().unwrap(), Request::Auto);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// The kernel backend if available, else portable.
    Auto,
    /// Exactly this backend (an error if unavailable).
    Exactly(BackendKind),
}

impl std::str::FromStr for Request {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "" | "auto" => Ok(Request::Auto),
            other => other.parse().map(Request::Exactly).map_err(|_| {
                Error::InvalidArgument("backend must be `auto`, `kernel` or `portable`")
            }),
        }
    }
}

/// One semantic property and whether the backend provides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Semantic {
    /// Short name.
    pub name: &'static str,
    /// Whether it holds.
    pub holds: bool,
    /// How it holds, or why not.
    pub note: &'static str,
}

/// A detected, usable backend.
///
/// # Examples
///
/// ```
/// use halfproc::{Backend, BackendKind};
/// let b = Backend::detect();
/// // Whatever was detected describes itself.
/// assert!(!b.semantics().is_empty());
/// assert_eq!(Backend::portable().kind(), BackendKind::Portable);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    kind: BackendKind,
    reason: String,
}

impl Backend {
    /// Whether the kernel backend is present (the module is loaded).
    pub fn kernel_available() -> bool {
        halfproc_sys::backend::kernel_available()
    }

    /// Detects the backend honouring `HALFPROC_BACKEND`; falls back to the
    /// portable backend when the variable is unset, `auto`, or unparsable.
    ///
    /// Use [`Backend::from_env`] to get an error instead.
    pub fn detect() -> Backend {
        Self::from_env().unwrap_or_else(|_| Self::auto())
    }

    /// Detects the backend from `HALFPROC_BACKEND`, failing clearly when the
    /// variable asks for something unavailable or is malformed.
    pub fn from_env() -> Result<Backend> {
        let req = match std::env::var(BACKEND_ENV) {
            Ok(v) => v.parse()?,
            Err(std::env::VarError::NotPresent) => Request::Auto,
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(Error::InvalidArgument("HALFPROC_BACKEND is not UTF-8"))
            }
        };
        Self::select(req)
    }

    /// Selects a backend for an explicit request.
    pub fn select(req: Request) -> Result<Backend> {
        match req {
            Request::Auto => Ok(Self::auto()),
            Request::Exactly(BackendKind::Portable) => Ok(Self::portable()),
            Request::Exactly(BackendKind::Kernel) => Self::kernel(),
        }
    }

    /// The kernel backend, or [`Error::KernelBackendUnavailable`].
    pub fn kernel() -> Result<Backend> {
        if Self::kernel_available() {
            Ok(Backend {
                kind: BackendKind::Kernel,
                reason: format!("{KERNEL_MODULE_PATH} exists (module loaded)"),
            })
        } else {
            Err(Error::KernelBackendUnavailable(format!(
                "{KERNEL_MODULE_PATH} does not exist: the halfproc module is not loaded \
                 or the kernel is not patched"
            )))
        }
    }

    /// The portable backend (always available on Linux).
    pub fn portable() -> Backend {
        Backend {
            kind: BackendKind::Portable,
            reason: "requested".into(),
        }
    }

    fn auto() -> Backend {
        match Self::kernel() {
            Ok(mut b) => {
                b.reason = format!("auto: {}", b.reason);
                b
            }
            Err(_) => Backend {
                kind: BackendKind::Portable,
                reason: format!("auto: {KERNEL_MODULE_PATH} not found"),
            },
        }
    }

    /// Which backend this is.
    pub fn kind(&self) -> BackendKind {
        self.kind
    }

    /// Why it was chosen.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// Which half-process semantics hold on this backend.
    pub fn semantics(&self) -> &'static [Semantic] {
        semantics(self.kind)
    }
}

/// The semantics table for one backend kind.
///
/// # Examples
///
/// ```
/// use halfproc::{backend::semantics, BackendKind};
/// let mprotect = semantics(BackendKind::Portable)
///     .iter()
///     .find(|s| s.name == "mprotect/munmap reach all members")
///     .unwrap();
/// assert!(!mprotect.holds);
/// ```
pub fn semantics(kind: BackendKind) -> &'static [Semantic] {
    match kind {
        BackendKind::Kernel => KERNEL_SEMANTICS,
        BackendKind::Portable => PORTABLE_SEMANTICS,
    }
}

const KERNEL_SEMANTICS: &[Semantic] = &[
    Semantic {
        name: "same address in every member",
        holds: true,
        note: "one set mm for [2^45, 2^46)",
    },
    Semantic {
        name: "runtime allocations shared",
        holds: true,
        note: "mmap(MAP_HALFPROC)",
    },
    Semantic {
        name: "foreign mappings in the range shared",
        holds: true,
        note: "any mmap(MAP_HALFPROC) by any member",
    },
    Semantic {
        name: "mprotect/munmap reach all members",
        holds: true,
        note: "kernel applies them to the set's mm",
    },
    Semantic {
        name: "members created at any time",
        holds: true,
        note: "libc fork() made a member by prctl(PR_HALFPROC_FORK_MEMBER)",
    },
    Semantic {
        name: "freed memory returned for all members",
        holds: true,
        note: "madvise(MADV_DONTNEED) on the set's mm",
    },
    Semantic {
        name: "cross-member futexes",
        holds: true,
        note: "shared-range futex keys resolve to the set",
    },
    Semantic {
        name: "dmread/dmwrite restricted to the set",
        holds: true,
        note: "enforced by the kernel",
    },
    Semantic {
        name: "dmread/dmwrite under Yama ptrace_scope>=2",
        holds: false,
        note: "the kernel applies ptrace's attach check: 2 needs CAP_SYS_PTRACE, 3 refuses (PR_SET_PTRACER covers 1)",
    },
    Semantic {
        name: "dmread/dmwrite under a seccomp filter on process_vm_*",
        holds: true,
        note: "own system calls",
    },
];

const PORTABLE_SEMANTICS: &[Semantic] = &[
    Semantic {
        name: "same address in every member",
        holds: true,
        note: "memfd mapped MAP_SHARED at 2^45 before members exist",
    },
    Semantic {
        name: "runtime allocations shared",
        holds: true,
        note: "the allocator carves the memfd mapping",
    },
    Semantic {
        name: "foreign mappings in the range shared",
        holds: false,
        note: "a raw mmap by one member stays private to it",
    },
    Semantic {
        name: "mprotect/munmap reach all members",
        holds: false,
        note: "page-table changes are per process",
    },
    Semantic {
        name: "members created at any time",
        holds: true,
        note: "libc fork() inherits the shared mapping",
    },
    Semantic {
        name: "freed memory returned for all members",
        holds: true,
        note: "holes punched in the memfd (madvise(MADV_REMOVE))",
    },
    Semantic {
        name: "cross-member futexes",
        holds: true,
        note: "MAP_SHARED memfd: inode-keyed futexes",
    },
    Semantic {
        name: "dmread/dmwrite restricted to the set",
        holds: true,
        note: "runtime checks the member table, then process_vm_readv/writev",
    },
    Semantic {
        name: "dmread/dmwrite under Yama ptrace_scope>=2",
        holds: false,
        note: "process_vm_* needs ptrace access: 2 needs CAP_SYS_PTRACE, 3 refuses (PR_SET_PTRACER covers 1)",
    },
    Semantic {
        name: "dmread/dmwrite under a seccomp filter on process_vm_*",
        holds: false,
        note: "they are process_vm_readv/writev",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse() {
        assert_eq!("".parse::<Request>().unwrap(), Request::Auto);
        assert_eq!(
            "kernel".parse::<Request>().unwrap(),
            Request::Exactly(BackendKind::Kernel)
        );
        assert!("Kernel".parse::<Request>().is_err());
    }

    #[test]
    fn kernel_request_matches_module_presence() {
        let present = std::path::Path::new(KERNEL_MODULE_PATH).exists();
        match Backend::select(Request::Exactly(BackendKind::Kernel)) {
            Ok(b) => {
                assert!(present);
                assert_eq!(b.kind(), BackendKind::Kernel);
            }
            Err(e) => {
                assert!(!present);
                assert!(e.to_string().contains(KERNEL_MODULE_PATH), "{e}");
                assert_eq!(e.errno(), libc::ENOSYS);
            }
        }
    }

    #[test]
    fn tables_name_the_same_properties() {
        let k: Vec<_> = KERNEL_SEMANTICS.iter().map(|s| s.name).collect();
        let p: Vec<_> = PORTABLE_SEMANTICS.iter().map(|s| s.name).collect();
        assert_eq!(k, p);
        // The kernel backend gives every property but one: dmread/dmwrite
        // take ptrace's attach check, which Yama's scope 2 and 3 refuse
        // (tests/guest/hp_dm.c yama_ptrace_scope).
        let missing: Vec<_> = KERNEL_SEMANTICS
            .iter()
            .filter(|s| !s.holds)
            .map(|s| s.name)
            .collect();
        assert_eq!(missing, ["dmread/dmwrite under Yama ptrace_scope>=2"]);
        assert!(PORTABLE_SEMANTICS.iter().any(|s| !s.holds));
    }
}
