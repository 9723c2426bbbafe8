//! Errors of the checkpoint/restore engine. Every message names the resource
//! (file, fd, mapping, signal, system call) it is about.

use std::fmt;
use std::io;

/// Why a process was refused: before anything was stopped, or, for what
/// changed meanwhile (a new thread, SIGKILL or SIGSTOP sent), by the dump
/// of the frozen process, which then lets it continue as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// More than one thread (`Threads:` in `/proc/pid/status`).
    MultiThreaded { threads: u32 },
    /// A socket on this fd.
    Socket { fd: i32, target: String },
    /// A pipe or FIFO on this fd.
    Pipe { fd: i32, target: String },
    /// A device file (other than /dev/null, /dev/zero, /dev/full, /dev/[u]random).
    Device { fd: i32, target: String },
    /// Another kind of fd (eventfd, epoll, memfd, deleted file, ...).
    UnsupportedFd { fd: i32, target: String },
    /// A file or directory of procfs or sysfs.
    KernelFile { fd: i32, target: String },
    /// A shared writable (or shared anonymous) mapping.
    SharedMapping { start: u64, end: u64, path: String },
    /// A mapping of a shared memory object (`/dev/zero (deleted)`: shared
    /// anonymous memory) that another process maps too.
    SharedMemoryWith {
        start: u64,
        end: u64,
        path: String,
        pid: i32,
    },
    /// A mapping of a shared memory object while the maps of process `pid`
    /// cannot be read: it may map the object too.
    SharedMemoryUnknown {
        start: u64,
        end: u64,
        path: String,
        pid: i32,
    },
    /// A mapping of a shared memory object that cannot be checked or
    /// carried as it is, and `why`.
    SharedMemoryUnchecked {
        start: u64,
        end: u64,
        path: String,
        why: String,
    },
    /// A SysV shared memory segment (`shmat`).
    SysvShm { start: u64, end: u64, path: String },
    /// A mapping that cannot be carried (device mapping, deleted file with shared flag, ...).
    UnsupportedMapping { start: u64, end: u64, path: String },
    /// It has child processes, which would be left behind (and could no
    /// longer be waited for).
    Children { pids: Vec<i32> },
    /// Another tracer is attached.
    Traced { tracer: i32 },
    /// SIGKILL or SIGSTOP is pending (other pending signals are carried).
    PendingSignals { mask: u64 },
    /// Not a process we can read (zombie, kernel thread).
    NotRunning { state: String },
    /// POSIX timers (`timer_create`, listed in `/proc/pid/timers`).
    PosixTimers { count: usize },
    /// A process tree larger than [`crate::tree::MAX_PROCESSES`].
    TreeTooLarge { root: i32, max: usize },
    /// A process of the tree below the target was refused.
    InTree { pid: i32, why: Box<Refusal> },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::MultiThreaded { threads } => {
                write!(
                    f,
                    "process has {threads} threads; only single-threaded processes can be \
                     migrated (the engine freezes, dumps and restores one thread: the other \
                     threads' registers, TLS and stacks are not carried)"
                )
            }
            Refusal::PosixTimers { count } => write!(
                f,
                "process has {count} POSIX timer(s) (timer_create), which cannot be carried \
                 (interval timers of setitimer and alarm are)"
            ),
            Refusal::Socket { fd, target } => write!(f, "fd {fd} is a socket ({target})"),
            Refusal::Pipe { fd, target } => write!(f, "fd {fd} is a pipe or FIFO ({target})"),
            Refusal::Device { fd, target } => write!(f, "fd {fd} is a device file ({target})"),
            Refusal::UnsupportedFd { fd, target } => {
                write!(f, "fd {fd} cannot be carried ({target})")
            }
            Refusal::KernelFile { fd, target } => write!(
                f,
                "fd {fd} is a file of procfs or sysfs ({target}): the kernel's view of this \
                 machine and its processes, which cannot be carried"
            ),
            Refusal::SharedMapping { start, end, path } => {
                write!(f, "shared writable mapping {start:#x}-{end:#x} ({path})")
            }
            Refusal::SharedMemoryWith {
                start,
                end,
                path,
                pid,
            } => write!(
                f,
                "shared mapping {start:#x}-{end:#x} ({path}) is shared with pid {pid}"
            ),
            Refusal::SharedMemoryUnknown {
                start,
                end,
                path,
                pid,
            } => write!(
                f,
                "shared mapping {start:#x}-{end:#x} ({path}) may be shared with pid {pid}, \
                 whose maps cannot be read"
            ),
            Refusal::SharedMemoryUnchecked {
                start,
                end,
                path,
                why,
            } => write!(f, "shared mapping {start:#x}-{end:#x} ({path}): {why}"),
            Refusal::SysvShm { start, end, path } => write!(
                f,
                "SysV shared memory mapping {start:#x}-{end:#x} ({path}): SysV shm is not supported"
            ),
            Refusal::UnsupportedMapping { start, end, path } => {
                write!(f, "mapping {start:#x}-{end:#x} cannot be carried ({path})")
            }
            Refusal::Children { pids } => write!(
                f,
                "process has child processes {pids:?}; they would be left behind"
            ),
            Refusal::Traced { tracer } => write!(f, "process is already ptraced by pid {tracer}"),
            Refusal::PendingSignals { mask } => write!(
                f,
                "SIGKILL or SIGSTOP pending (mask {mask:#x}): the process is being killed or \
                 stopped; other pending signals are carried"
            ),
            Refusal::NotRunning { state } => write!(f, "process is not running (state {state})"),
            Refusal::InTree { pid, why } => write!(f, "its child process {pid}: {why}"),
            Refusal::TreeTooLarge { root, max } => write!(
                f,
                "the process tree of pid {root} has more than {max} processes"
            ),
        }
    }
}

/// Errors of [`checkpoint`](crate::checkpoint) and [`restore`](crate::restore).
#[derive(Debug)]
pub enum Error {
    /// The process was refused; nothing was stopped.
    Refused(Refusal),
    /// A system call or file operation failed.
    Io { what: String, source: io::Error },
    /// The image is malformed, of another version, or fails its checksums.
    Image(String),
    /// The restore environment does not allow restoring this image.
    Restore(String),
    /// The process ended (or was reaped) before it could be frozen.
    Gone(i32),
    /// The caller's check of the stopped process ([`crate::AfterFreeze`])
    /// refused it (the text is the caller's); it was let go as it was,
    /// nothing of it read.
    Changed(String),
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    /// `Error::Io` from `errno` after a failed libc call.
    pub(crate) fn last(what: impl Into<String>) -> Self {
        Error::io(what, io::Error::last_os_error())
    }

    /// The message without the "cannot restore: " of a restore error (to
    /// be wrapped in another one).
    pub fn text(&self) -> String {
        match self {
            Error::Restore(m) => m.clone(),
            e => e.to_string(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Refused(r) => write!(f, "refused: {r}"),
            Error::Io { what, source } => write!(f, "{what}: {source}"),
            Error::Image(m) => write!(f, "bad image: {m}"),
            Error::Restore(m) => write!(f, "cannot restore: {m}"),
            Error::Gone(pid) => write!(f, "pid {pid} ended before it could be frozen"),
            Error::Changed(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<halfproc_sys::Error> for Error {
    /// A failed call of the sys layer, with its errno.
    fn from(e: halfproc_sys::Error) -> Self {
        Error::io(e.to_string(), io::Error::from_raw_os_error(e.errno()))
    }
}

impl From<Refusal> for Error {
    fn from(r: Refusal) -> Self {
        Error::Refused(r)
    }
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;
