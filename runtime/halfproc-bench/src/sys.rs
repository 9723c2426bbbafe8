// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Thin, checked wrappers over the system calls the benchmarks use.
//!
//! Every `unsafe` block of the crate that talks to the kernel lives here,
//! next to the reason it is sound. Callers get `Result`s and slices.
//!
//! C headers: `sys/mman.h`, `linux/futex.h`, `sys/uio.h`, `sched.h`, and
//! `include/uapi/linux/halfproc.h` for `dmread`/`dmwrite` (numbers from
//! [`halfproc_uapi::nr`]).

use crate::error::{Error, Result};
use std::sync::atomic::AtomicU32;

/// The page size the benchmarks assume for touching and rounding.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// Round `len` up to a whole number of pages (at least one).
pub fn page_round(len: usize) -> usize {
    let p = page_size();
    len.max(1).div_ceil(p) * p
}

/// `CLOCK_MONOTONIC` in nanoseconds. The clock is system-wide, so a time
/// taken in one process can be subtracted from one taken in another.
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// An `mmap`ed region, unmapped on drop.
///
/// # Invariants
///
/// `ptr` is the start of a live mapping of `len` bytes, readable and
/// writable, owned by this value (no other value unmaps it).
#[derive(Debug)]
pub struct Region {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the region is plain memory owned by the value; moving the owner to
// another thread moves the ownership.
unsafe impl Send for Region {}

impl Region {
    /// Map `len` bytes with `flags` (and `fd`, `-1` for anonymous) at `addr`
    /// (0 for anywhere).
    fn map(what: &str, addr: usize, len: usize, flags: i32, fd: i32) -> Result<Self> {
        let len = page_round(len);
        // SAFETY: a new mapping; with MAP_FIXED_NOREPLACE or no fixed flag the
        // kernel does not replace any existing mapping, so no live Rust
        // object can be unmapped under our feet.
        let p = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::last_os(format!("mmap({what}, {len} bytes)")));
        }
        // INVARIANT: a live RW mapping of `len` bytes that we own.
        let r = Region { ptr: p.cast(), len };
        if addr != 0 && r.addr() != addr {
            return Err(Error::from_errno(
                format!("mmap({what}) landed at {:#x}, not {addr:#x}", r.addr()),
                libc::EEXIST,
            ));
        }
        Ok(r)
    }

    /// Private anonymous memory, as `malloc` gives for large sizes. Marked
    /// `MADV_DONTFORK` where the kernel has `madvise` (tiny guest kernels
    /// without `CONFIG_ADVISE_SYSCALLS` do not): a child then never shares
    /// it copy-on-write. The harness allocates private buffers after the
    /// spawn anyway, so the advice is a guard, not a requirement.
    pub fn private(len: usize) -> Result<Self> {
        let r = Self::map(
            "private",
            0,
            len,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
        )?;
        match r.advise(libc::MADV_DONTFORK, "MADV_DONTFORK") {
            Err(e) if e.errno() == Some(libc::ENOSYS) => {}
            other => other?,
        }
        Ok(r)
    }

    /// Shared anonymous memory (shmem), inherited by children: the classic
    /// inter-process shared memory of a fork-based program.
    pub fn shared_anon(len: usize) -> Result<Self> {
        Self::map(
            "shared anonymous",
            0,
            len,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
        )
    }

    /// A `MAP_SHARED` mapping of `fd` (a memfd or POSIX shm object).
    pub fn shared_fd(what: &str, fd: i32, len: usize, fixed_addr: Option<usize>) -> Result<Self> {
        let (addr, extra) = match fixed_addr {
            Some(a) => (a, libc::MAP_FIXED_NOREPLACE),
            None => (0, 0),
        };
        Self::map(what, addr, len, libc::MAP_SHARED | extra, fd)
    }

    /// Anonymous memory with extra `mmap` flags (e.g. `MAP_HALFPROC`).
    pub fn anon_with(what: &str, len: usize, flags: i32) -> Result<Self> {
        Self::map(what, 0, len, libc::MAP_ANONYMOUS | flags, -1)
    }

    fn advise(&self, advice: i32, what: &str) -> Result<()> {
        // SAFETY: the advice applies to our own mapping; DONTFORK and
        // HUGEPAGE do not change its contents.
        if unsafe { libc::madvise(self.ptr.cast(), self.len, advice) } != 0 {
            return Err(Error::last_os(format!("madvise({what})")));
        }
        Ok(())
    }

    /// Start address.
    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    /// Length in bytes (a whole number of pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never: mappings have at least a page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The whole region as bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: by the type invariant the mapping is live, readable and
        // `len` bytes long; other processes may write a shared mapping, but
        // the protocol keeps them from doing so while this slice is read.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The whole region as mutable bytes.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, plus `&mut self` makes this the only Rust
        // reference into the region.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Write one byte per page so that later accesses do not fault.
    pub fn prefault_write(&mut self) {
        let p = page_size();
        let b = self.bytes_mut();
        let mut i = 0;
        while i < b.len() {
            // SAFETY: `i < len`, inside the mapping; volatile so the store
            // is not elided.
            unsafe { std::ptr::write_volatile(b.as_mut_ptr().add(i), 0) };
            i += p;
        }
    }

    /// Read one byte per page, mapping pages that already exist.
    pub fn prefault_read(&self) {
        let p = page_size();
        let b = self.bytes();
        let mut i = 0;
        let mut acc = 0u8;
        while i < b.len() {
            // SAFETY: `i < len`, inside the mapping.
            acc ^= unsafe { std::ptr::read_volatile(b.as_ptr().add(i)) };
            i += p;
        }
        std::hint::black_box(acc);
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: by the type invariant we own this live mapping, and no
        // reference into it outlives `self`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// An owned file descriptor, closed on drop.
#[derive(Debug)]
pub struct Fd(pub i32);

impl Drop for Fd {
    fn drop(&mut self) {
        if self.0 >= 0 {
            // SAFETY: we own the descriptor.
            unsafe { libc::close(self.0) };
        }
    }
}

/// `memfd_create(name, MFD_CLOEXEC)` of `len` bytes.
pub fn memfd(name: &str, len: usize) -> Result<Fd> {
    let cname = std::ffi::CString::new(name).expect("no NUL in memfd name");
    // SAFETY: `cname` is a valid C string.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(Error::last_os("memfd_create"));
    }
    let fd = Fd(fd);
    ftruncate(&fd, len)?;
    Ok(fd)
}

/// `ftruncate(fd, len)`.
pub fn ftruncate(fd: &Fd, len: usize) -> Result<()> {
    // SAFETY: plain syscall on a descriptor we own.
    if unsafe { libc::ftruncate(fd.0, len as libc::off_t) } != 0 {
        return Err(Error::last_os("ftruncate"));
    }
    Ok(())
}

/// `FUTEX_WAIT` on a shared (not `FUTEX_PRIVATE_FLAG`) futex word: sleeps
/// while `*word == expected`, at most `timeout_ns`.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call;
    // the kernel only reads it. EAGAIN/EINTR/ETIMEDOUT are all "re-check".
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        )
    };
}

/// `FUTEX_WAKE` one waiter on a shared futex word.
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid, aligned u32; wake does not touch memory.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, 1) };
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; zero is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } != 0 {
        return Err(Error::last_os("sched_getaffinity"));
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| {
            // SAFETY: `c < CPU_SETSIZE`; reads a bit of our own set.
            unsafe { libc::CPU_ISSET(c, &set) }
        })
        .collect())
}

/// Pin the calling process to `cpu`.
pub fn pin_to(cpu: usize) -> Result<()> {
    set_cpus(&[cpu])
}

/// Let the calling process run on `cpus` (each `< CPU_SETSIZE`).
pub fn set_cpus(cpus: &[usize]) -> Result<()> {
    // SAFETY: cpu_set_t is plain data; zero is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(Error::from_errno(format!("cpu {cpu}"), libc::EINVAL));
        }
        // SAFETY: `cpu < CPU_SETSIZE`, checked above.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) } != 0 {
        return Err(Error::last_os(format!("sched_setaffinity({cpus:?})")));
    }
    Ok(())
}

/// Which side of a cross-address-space copy the remote memory is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Copy remote -> local (`process_vm_readv`, `dmread`).
    Read,
    /// Copy local -> remote (`process_vm_writev`, `dmwrite`).
    Write,
}

/// `process_vm_readv`/`process_vm_writev` of one contiguous range, looping
/// over partial transfers.
///
/// # Safety
///
/// `local` must be valid for `len` bytes: readable for [`Dir::Write`],
/// writable for [`Dir::Read`].
pub unsafe fn cma(dir: Dir, pid: i32, remote: usize, local: *mut u8, len: usize) -> Result<()> {
    let name = match dir {
        Dir::Read => "process_vm_readv",
        Dir::Write => "process_vm_writev",
    };
    copy_all(name, len, |done| {
        let l = libc::iovec {
            // SAFETY: `done < len`, inside the caller's buffer.
            iov_base: unsafe { local.add(done) }.cast(),
            iov_len: len - done,
        };
        let r = libc::iovec {
            iov_base: (remote + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: the iovecs describe the caller's buffer (valid by the
        // function's contract) and a remote range the kernel checks.
        unsafe {
            match dir {
                Dir::Read => libc::process_vm_readv(pid, &l, 1, &r, 1, 0),
                Dir::Write => libc::process_vm_writev(pid, &l, 1, &r, 1, 0),
            }
        }
    })
}

/// `dmread`/`dmwrite` (syscalls 470/471) of one range, looping over
/// partial transfers.
///
/// # Safety
///
/// As for [`cma`].
pub unsafe fn dm(dir: Dir, pid: i32, remote: usize, local: *mut u8, len: usize) -> Result<()> {
    let (nr, name) = match dir {
        Dir::Read => (halfproc_uapi::nr::DMREAD, "dmread"),
        Dir::Write => (halfproc_uapi::nr::DMWRITE, "dmwrite"),
    };
    copy_all(name, len, |done| {
        // SAFETY: arguments as documented in halfproc.h: (pid, remote ptr,
        // size, local buf); `done < len`, and the local buffer is valid by
        // our contract.
        unsafe { libc::syscall(nr, pid, remote + done, len - done, local.add(done)) as isize }
    })
}

/// Call `step(done)` (one copy of the rest from offset `done`, returning the
/// bytes copied or -1 with `errno` set, like the system call `name`) until
/// `len` bytes are copied, retrying after `EINTR`.
fn copy_all(name: &str, len: usize, mut step: impl FnMut(usize) -> isize) -> Result<()> {
    let mut done = 0usize;
    while done < len {
        let n = step(done);
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(Error::Sys {
                what: name.into(),
                err: e,
            });
        }
        if n == 0 {
            return Err(Error::Verify(format!("{name}: copied 0 bytes")));
        }
        done += n as usize;
    }
    Ok(())
}

/// Write all of `buf` to `fd`.
pub fn write_all(fd: i32, buf: &[u8], what: &str) -> Result<()> {
    let mut off = 0;
    while off < buf.len() {
        // SAFETY: the pointer/length describe the rest of `buf`.
        let n = unsafe { libc::write(fd, buf[off..].as_ptr().cast(), buf.len() - off) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(Error::last_os(format!("write({what})")));
        }
        off += n as usize;
    }
    Ok(())
}

/// Read at most `buf.len()` bytes from `fd`; 0 means end of stream.
pub fn read_some(fd: i32, buf: &mut [u8], what: &str) -> Result<usize> {
    loop {
        // SAFETY: the pointer/length describe `buf`, writable.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err(Error::last_os(format!("read({what})")));
        }
    }
}

/// `vmsplice` all of `buf` into the pipe `fd` (no `SPLICE_F_GIFT`: the
/// pipe references the pages; the caller must leave them alone until the
/// reader has consumed them).
pub fn vmsplice_all(fd: i32, buf: &[u8]) -> Result<()> {
    let mut off = 0;
    while off < buf.len() {
        let iov = libc::iovec {
            iov_base: buf[off..].as_ptr() as *mut libc::c_void,
            iov_len: buf.len() - off,
        };
        // SAFETY: one iovec over the rest of `buf`; the kernel only reads it.
        let n = unsafe { libc::vmsplice(fd, &iov, 1, 0) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(Error::last_os("vmsplice"));
        }
        off += n as usize;
    }
    Ok(())
}

/// `getpid()`.
pub fn getpid() -> i32 {
    // SAFETY: no preconditions.
    unsafe { libc::getpid() }
}

/// Kill `pid` and reap it, ignoring errors (cleanup on an error path).
pub fn kill_and_reap(pid: i32) {
    // SAFETY: signalling and reaping our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        let mut st = 0;
        libc::waitpid(pid, &mut st, 0);
    }
}

/// Whether child `pid` has exited (reaping it if so).
pub fn child_exited(pid: i32) -> bool {
    let mut st = 0;
    // SAFETY: non-blocking reap of our own child.
    let r = unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
    r == pid || r < 0
}

/// Wait for child `pid` and return its exit status (or -signal).
pub fn wait_child(pid: i32) -> Result<i32> {
    let mut st = 0;
    loop {
        // SAFETY: reaping our own child.
        let r = unsafe { libc::waitpid(pid, &mut st, 0) };
        if r == pid {
            break;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err(Error::last_os("waitpid"));
        }
    }
    if libc::WIFEXITED(st) {
        Ok(libc::WEXITSTATUS(st))
    } else {
        Ok(-libc::WTERMSIG(st))
    }
}
