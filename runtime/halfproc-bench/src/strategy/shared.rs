// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Zero-copy strategies: the writer writes `d` into memory both processes
//! map, and the reader checksums it in place.
//!
//! * `shared` (the paper's "half-process"): the half-process shared range,
//!   through [`SharedArea`] (memfd at `2^45` on the portable backend,
//!   `MAP_HALFPROC` on the kernel backend).
//! * `posix-shm` (the paper's "inter-process"): a POSIX shared memory object
//!   (`shm_open` on `/dev/shm`), mapped before the reader is spawned and
//!   unlinked at once, so a crash leaves nothing behind.
//!
//! On the portable backend both are shmem pages and should measure the same,
//! as they did in the paper (Figs. 7/8: "perform equally well").

use super::{Halves, Link, Reader, Writer};
use crate::backend::SharedArea;
use crate::error::{Error, Result};
use crate::pattern::checksum;
use halfproc::BackendKind;
use halfproc_sys::mem::{page_round, truncate, Region};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};

/// The mapping both halves use. Both halves hold a reference, so dropping
/// the other half after the spawn does not unmap it.
enum Mem {
    Area(SharedArea),
    Shm(Region),
}

impl Mem {
    fn region(&self) -> &Region {
        match self {
            Mem::Area(a) => a.region(),
            Mem::Shm(r) => r,
        }
    }
}

struct InPlaceWriter(Rc<Mem>);
struct InPlaceReader(Rc<Mem>);

fn halves(mem: Mem) -> Halves {
    let mem = Rc::new(mem);
    Halves {
        writer: Box::new(InPlaceWriter(mem.clone())),
        reader: Box::new(InPlaceReader(mem)),
    }
}

/// `d` in the half-process shared range.
pub fn shared_range(backend: BackendKind, max: usize) -> Result<Halves> {
    let mut area = SharedArea::new(backend, max, 0)?;
    area.region_mut().prefault_write();
    Ok(halves(Mem::Area(area)))
}

/// `d` in a POSIX shared memory object.
pub fn posix_shm(max: usize) -> Result<Halves> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "/halfproc-bench-{}-{}",
        halfproc_sys::task::getpid(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let cname = std::ffi::CString::new(name.clone()).expect("no NUL");
    // SAFETY: `cname` is a valid C string.
    let fd = unsafe {
        libc::shm_open(
            cname.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        return Err(Error::last_os(format!(
            "shm_open({name}) (is tmpfs mounted on /dev/shm?)"
        )));
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `cname` is valid; unlinking our own object.
    unsafe { libc::shm_unlink(cname.as_ptr()) };
    truncate(fd.as_fd(), page_round(max))?;
    let mut region = Region::shared_fd("POSIX shm", fd.as_fd(), max, None)?;
    region.prefault_write();
    Ok(halves(Mem::Shm(region)))
}

impl Writer for InPlaceWriter {
    fn init(&mut self, _max: usize, _link: &Link<'_>) -> Result<()> {
        Ok(())
    }

    fn source(&mut self, size: usize) -> &mut [u8] {
        let r = self.0.region();
        // SAFETY: the region is a live RW mapping of at least `size` bytes
        // (callers never ask for more than `max`); the reader only reads it
        // between `go` and `done`, and the writer only writes it before `go`.
        unsafe { std::slice::from_raw_parts_mut(r.addr() as *mut u8, size) }
    }

    fn send(&mut self, _size: usize, _link: &Link<'_>) -> Result<()> {
        Ok(())
    }
}

impl Reader for InPlaceReader {
    fn init(&mut self, _max: usize, _link: &Link<'_>) -> Result<()> {
        // Map the pages into the reader's page tables up front: the paper
        // measures reading, not first-touch faults.
        self.0.region().prefault_read();
        Ok(())
    }

    fn prepare(&mut self, _size: usize) -> Result<()> {
        // Nothing to poison: the reader reads the writer's bytes in place,
        // and each repetition's seed differs.
        Ok(())
    }

    fn receive(&mut self, size: usize, _link: &Link<'_>) -> Result<u64> {
        Ok(checksum(&self.0.region().bytes()[..size]))
    }
}
