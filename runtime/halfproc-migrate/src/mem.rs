//! Reading the target's memory. The portable backend uses
//! `process_vm_readv`; the kernel backend (the caller is a member of a
//! half-process set, as the node daemon is there, and so is every program it
//! started or restored) uses `dmread`. Both fall back to `/proc/pid/mem` for
//! pages the call refuses (no `PROT_READ`).

use halfproc_sys::copy::{dm, iovec, Dir};
use halfproc_sys::task::{halfproc_prctl, PR_HALFPROC_GET, PR_HALFPROC_IS_MEMBER};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Copies memory of a stopped process (from any thread: a dump may read
/// with several).
pub trait MemoryReader: Sync {
    /// Fills `buf` from `addr` in the target, all of it or an error.
    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()>;
}

/// Whether the calling process is a member of a half-process set: the
/// kernel backend. Its targets are then members of the same set (read with
/// `dmread`, their shared range left to the set) and restored copies are
/// made members too (`clone3(CLONE_HALFPROC)`).
pub fn caller_is_member() -> bool {
    halfproc_prctl(PR_HALFPROC_GET, 0).is_ok_and(|bits| bits & PR_HALFPROC_IS_MEMBER != 0)
}

/// Whether `pid` is a member of the caller's set: read with `dmread`, its
/// shared range left to the set, and restored into the set. Only on the
/// kernel backend; there the node daemon's programs are members, but what
/// they fork with a plain `fork` is not (a fresh mm, see docs/design.md):
/// stress-ng's workers, read with `process_vm_readv` and restored outside
/// the set as they were.
///
/// The module checks membership before it touches a page: a one-byte
/// `dmread` at an address no process maps (page 1, below `mmap_min_addr`)
/// fails with `EFAULT` for a member and `EPERM` for a process outside the
/// set. `EPERM` also answers for a member that is not dumpable; such a
/// process counts as a member, so that its first read fails with `EPERM`
/// as before rather than moving it out of the set.
pub fn in_callers_set(pid: i32) -> bool {
    if !caller_is_member() {
        return false;
    }
    let mut byte = [0u8; 1];
    let local = [iovec(byte.as_mut_ptr() as usize, 1)];
    let remote = [iovec(4096, 1)];
    // SAFETY: `local` describes `byte`, borrowed mutably for the call; the
    // kernel checks the remote side.
    match unsafe { dm(Dir::Read, pid, &local, &remote) } {
        Err(e) if e.errno() == libc::EPERM => {
            !crate::creds::status_dumpable(pid).is_ok_and(|(_, dumpable)| dumpable)
        }
        _ => true,
    }
}

/// The name of the call [`reader`] reads `pid` with: `dmread` or
/// `process_vm_readv`.
pub fn reader_kind(pid: i32) -> &'static str {
    if in_callers_set(pid) {
        "dmread"
    } else {
        "process_vm_readv"
    }
}

/// The reader of `pid` for this caller: [`DmReader`] for a member of the
/// caller's set ([`in_callers_set`]), [`PortableReader`] otherwise.
pub fn reader(pid: i32) -> io::Result<Box<dyn MemoryReader>> {
    reader_for(pid, in_callers_set(pid))
}

/// [`reader`] with the answer of [`in_callers_set`] known.
pub(crate) fn reader_for(pid: i32, member: bool) -> io::Result<Box<dyn MemoryReader>> {
    Ok(if member {
        Box::new(DmReader::new(pid)?)
    } else {
        Box::new(PortableReader::new(pid)?)
    })
}

/// `process_vm_readv` first, `/proc/pid/mem` for what it refuses.
pub struct PortableReader {
    pid: i32,
    mem: File,
}

impl PortableReader {
    /// A reader of `pid`, which the caller has ptrace-stopped.
    pub fn new(pid: i32) -> io::Result<Self> {
        Ok(PortableReader {
            pid,
            mem: File::open(format!("/proc/{pid}/mem"))?,
        })
    }

    fn vm_readv(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        let n = halfproc_sys::copy::vm_read(self.pid, addr as usize, buf)?;
        if n != buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "short process_vm_readv",
            ));
        }
        Ok(())
    }
}

impl MemoryReader for PortableReader {
    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        match self.vm_readv(addr, buf) {
            Ok(()) => Ok(()),
            Err(_) => self.mem.read_exact_at(buf, addr),
        }
    }
}

/// `dmread` from a member of the caller's set; `/proc/pid/mem` only for a
/// range `dmread` faults on (`EFAULT`: a page without `PROT_READ`). Any
/// other error (`EPERM`: not a member of our set, `ESRCH`) is returned, not
/// hidden behind the fallback.
pub struct DmReader {
    pid: i32,
    mem: File,
}

impl DmReader {
    /// A reader of member `pid`, which the caller has ptrace-stopped.
    pub fn new(pid: i32) -> io::Result<Self> {
        Ok(DmReader {
            pid,
            mem: File::open(format!("/proc/{pid}/mem"))?,
        })
    }
}

impl MemoryReader for DmReader {
    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        let local = [iovec(buf.as_mut_ptr() as usize, buf.len())];
        let remote = [iovec(addr as usize, buf.len())];
        // SAFETY: `local` describes `buf`, which we borrow mutably for the
        // whole call; the kernel checks the remote side.
        match unsafe { dm(Dir::Read, self.pid, &local, &remote) } {
            Ok(n) if n == buf.len() => Ok(()),
            Ok(_) => self.mem.read_exact_at(buf, addr),
            Err(e) if e.errno() == libc::EFAULT => self.mem.read_exact_at(buf, addr),
            Err(e) => Err(io::Error::new(
                io::Error::from_raw_os_error(e.errno()).kind(),
                format!("dmread of pid {} at {addr:#x}: {e}", self.pid),
            )),
        }
    }
}
