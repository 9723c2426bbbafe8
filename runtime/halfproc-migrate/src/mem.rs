//! Reading the target's memory. The portable backend uses
//! `process_vm_readv` and falls back to `/proc/pid/mem` (which may read
//! pages without `PROT_READ`); the kernel backend's `dmread` will be another
//! implementation of [`MemoryReader`].

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Copies memory of a stopped process.
pub trait MemoryReader {
    /// Fills `buf` from `addr` in the target, all of it or an error.
    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()>;
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
