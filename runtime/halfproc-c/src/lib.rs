// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The C ABI of the halfproc runtime (`libhalfproc_c.so` / `libhalfproc_c.a`).
//!
//! Conventions: functions return 0 or an errno value (pthread style);
//! allocation functions return null and set `errno`; `halfproc_dmread` /
//! `halfproc_dmwrite` return the bytes copied or -1 with `errno`. Lock types
//! are plain words: all-zero is the unlocked/initial state, so a zeroed
//! `halfproc_mutex_t` in `halfproc_malloc` memory is ready to use.
//!
//! `include/halfproc.h` is generated from this file by cbindgen; the test
//! `tests/header.rs` regenerates it and fails on any difference
//! (`HALFPROC_BLESS=1 cargo test -p halfproc-c --test header` rewrites it).
//!
//! C header: `include/halfproc.h`.

#![allow(non_camel_case_types)]

use core::ffi::{c_char, c_int, c_void};
use core::time::Duration;

use halfproc::backend::Request;
use halfproc::sync::{Acquired, Barrier, Condvar, LockError, Once, RawMutex};
use halfproc::{alloc, Member, Set, SetConfig};

/// Handle on a member (from `halfproc_create`).
pub type halfproc_t = u64;

/// A mutex usable across members. Zero-initialised = unlocked.
#[repr(C)]
pub struct halfproc_mutex_t {
    pub __state: u32,
}

/// A condition variable usable across members. Zero-initialised = ready.
#[repr(C)]
pub struct halfproc_cond_t {
    pub __seq: u32,
}

/// A barrier; initialise with `halfproc_barrier_init`.
#[repr(C)]
pub struct halfproc_barrier_t {
    pub __words: [u32; 3],
}

/// A reader-writer lock. Zero-initialised = unlocked.
#[repr(C)]
pub struct halfproc_rwlock_t {
    pub __words: [u32; 20],
}

/// One-time initialisation control. Zero-initialised = not yet run.
#[repr(C)]
pub struct halfproc_once_t {
    pub __state: u32,
}

/// `halfproc_barrier_wait` returns this in exactly one waiter per round.
pub const HALFPROC_BARRIER_SERIAL_THREAD: c_int = -1;

/// `halfproc_backend_kind` value for the kernel backend.
pub const HALFPROC_BACKEND_KERNEL: c_int = 1;
/// `halfproc_backend_kind` value for the portable backend.
pub const HALFPROC_BACKEND_PORTABLE: c_int = 2;

const _: () = {
    assert!(core::mem::size_of::<halfproc_mutex_t>() == core::mem::size_of::<RawMutex>());
    assert!(core::mem::size_of::<halfproc_cond_t>() == core::mem::size_of::<Condvar>());
    assert!(core::mem::size_of::<halfproc_barrier_t>() == core::mem::size_of::<Barrier>());
    assert!(core::mem::size_of::<halfproc_rwlock_t>() == halfproc::sync::rwlock::raw::SIZE);
    assert!(core::mem::size_of::<halfproc_once_t>() == core::mem::size_of::<Once>());
    assert!(
        core::mem::align_of::<halfproc_rwlock_t>()
            == core::mem::align_of::<halfproc::sync::rwlock::raw::Raw>()
    );
};

fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// A byte count for C, or -1 with `errno` set.
fn bytes_or_errno(r: std::io::Result<usize>) -> isize {
    match r {
        Ok(n) => n as isize,
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EINVAL));
            -1
        }
    }
}

/// Creates the half-process set of this process. `backend` is `"auto"`,
/// `"kernel"`, `"portable"` or NULL (from `HALFPROC_BACKEND`, default auto).
/// Any thread may call it, at any time. Returns 0, `EEXIST` if
/// already done, `ENOSYS` if the kernel backend was asked for but is missing.
///
/// # Safety
///
/// `backend` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn halfproc_init(backend: *const c_char) -> c_int {
    let mut cfg = match SetConfig::from_env() {
        Ok(c) => c,
        Err(e) => return e.errno(),
    };
    if !backend.is_null() {
        // SAFETY: per the contract.
        let s = unsafe { core::ffi::CStr::from_ptr(backend) };
        match s.to_str().ok().and_then(|s| s.parse::<Request>().ok()) {
            Some(r) => cfg.backend = r,
            None => return libc::EINVAL,
        }
    }
    match Set::init(cfg) {
        Ok(_) => 0,
        Err(e) => e.errno(),
    }
}

/// With `on` non-zero, every child this process creates from now on
/// (`fork`, `posix_spawn`, `vfork`+`exec`) becomes a member of the set, and
/// so do their children, across `exec`; with 0 it stops. Returns 0,
/// `ENXIO` without a set, `ENOTSUP` on the portable backend (an `exec`ed
/// program loses the shared mapping), `EPERM` outside the set.
#[no_mangle]
pub extern "C" fn halfproc_set_inherit(on: c_int) -> c_int {
    match Set::get().and_then(|s| s.inherit_children(on != 0)) {
        Ok(()) => 0,
        Err(e) => e.errno(),
    }
}

/// The backend in use: `HALFPROC_BACKEND_KERNEL`, `HALFPROC_BACKEND_PORTABLE`,
/// or 0 without a set.
#[no_mangle]
pub extern "C" fn halfproc_backend_kind() -> c_int {
    match Set::get() {
        Ok(s) => s.backend().kind() as c_int,
        Err(_) => 0,
    }
}

/// Runs `func(arg)` in a new member, which starts as a copy of the calling
/// process at this moment (like `fork()`; the shared range is shared).
/// Returns 0 and stores the handle in `*out`, or an errno value: `EINVAL`
/// (`out` or `func` NULL, `arg` neither NULL nor a mapped address), `ENXIO`
/// (no `halfproc_init`), `EPERM` (caller outside the set), `EAGAIN` (1024
/// unjoined members, or fork failed for lack of resources), `ENOMEM`.
///
/// # Safety
///
/// `out` is writable; `func(arg)` is sound to call in a copy of the caller.
#[no_mangle]
pub unsafe extern "C" fn halfproc_create(
    out: *mut halfproc_t,
    func: Option<extern "C" fn(*mut c_void) -> c_int>,
    arg: *mut c_void,
) -> c_int {
    let (Some(func), false) = (func, out.is_null()) else {
        return libc::EINVAL;
    };
    let set = match Set::get() {
        Ok(s) => s,
        Err(e) => return e.errno(),
    };
    // SAFETY: per the contract.
    match unsafe { Member::spawn_c(set, func, arg) } {
        Ok(m) => {
            // SAFETY: `out` is writable per the contract.
            unsafe { *out = m.to_raw() };
            0
        }
        Err(e) => e.errno(),
    }
}

/// Waits for member `h`. `*status` (if not NULL) gets its wait status as
/// `waitpid(2)` reports it: test it with `WIFEXITED`/`WEXITSTATUS` and
/// `WIFSIGNALED`/`WTERMSIG` (0 means it returned 0). Returns 0 or an errno
/// value: `ESRCH` already joined or stale, `EINVAL` detached or the caller
/// itself, `ECHILD` its status was lost (reaped by another `wait()`, or its
/// creator is gone).
///
/// # Safety
///
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn halfproc_join(h: halfproc_t, status: *mut c_int) -> c_int {
    let r = Member::from_raw(h).and_then(|m| m.join());
    match r {
        Ok(st) => {
            if !status.is_null() {
                let v = st.wait_status();
                // SAFETY: per the contract.
                unsafe { *status = v };
            }
            0
        }
        Err(e) => e.errno(),
    }
}

/// Detaches member `h`. Returns 0 or an errno value.
#[no_mangle]
pub extern "C" fn halfproc_detach(h: halfproc_t) -> c_int {
    match Member::from_raw(h).and_then(|m| m.detach()) {
        Ok(()) => 0,
        Err(e) => e.errno(),
    }
}

/// The process id of member `h`, or -1.
#[no_mangle]
pub extern "C" fn halfproc_pid(h: halfproc_t) -> libc::pid_t {
    Member::from_raw(h).map(|m| m.pid()).unwrap_or(-1)
}

fn lock_result(r: Result<Acquired, LockError<()>>) -> c_int {
    match r {
        Ok(Acquired::Clean) => 0,
        Ok(Acquired::OwnerDied) => libc::EOWNERDEAD,
        Err(e) => e.errno(),
    }
}

/// Initialises (zeroes) a mutex.
///
/// # Safety
///
/// `m` is valid and not in use.
#[no_mangle]
pub unsafe extern "C" fn halfproc_mutex_init(m: *mut halfproc_mutex_t) -> c_int {
    // SAFETY: per the contract.
    unsafe { m.write(halfproc_mutex_t { __state: 0 }) };
    0
}

/// Locks. Returns 0, `EOWNERDEAD` (locked, but the previous owner died
/// holding it: repair the data), or `EPERM` outside the set.
///
/// # Safety
///
/// `m` is a valid mutex.
#[no_mangle]
pub unsafe extern "C" fn halfproc_mutex_lock(m: *mut halfproc_mutex_t) -> c_int {
    // SAFETY: same layout (asserted above), valid per the contract.
    lock_result(unsafe { &*(m as *const RawMutex) }.lock())
}

/// Locks if free: 0, or `EBUSY`.
///
/// # Safety
///
/// `m` is a valid mutex.
#[no_mangle]
pub unsafe extern "C" fn halfproc_mutex_trylock(m: *mut halfproc_mutex_t) -> c_int {
    // SAFETY: same layout, valid per the contract.
    match unsafe { &*(m as *const RawMutex) }.try_lock() {
        Ok(true) => 0,
        Ok(false) => libc::EBUSY,
        Err(e) => e.errno(),
    }
}

/// Unlocks (the caller must hold the mutex).
///
/// # Safety
///
/// `m` is a valid mutex held by the calling thread.
#[no_mangle]
pub unsafe extern "C" fn halfproc_mutex_unlock(m: *mut halfproc_mutex_t) -> c_int {
    // SAFETY: per the contract.
    unsafe { (*(m as *const RawMutex)).unlock() };
    0
}

/// Destroys a mutex: `EBUSY` while locked.
///
/// # Safety
///
/// `m` is a valid mutex.
#[no_mangle]
pub unsafe extern "C" fn halfproc_mutex_destroy(m: *mut halfproc_mutex_t) -> c_int {
    // SAFETY: per the contract.
    if unsafe { &*(m as *const RawMutex) }.is_locked() {
        libc::EBUSY
    } else {
        0
    }
}

/// Initialises a condition variable.
///
/// # Safety
///
/// `c` is valid and not in use.
#[no_mangle]
pub unsafe extern "C" fn halfproc_cond_init(c: *mut halfproc_cond_t) -> c_int {
    // SAFETY: per the contract.
    unsafe { c.write(halfproc_cond_t { __seq: 0 }) };
    0
}

/// Waits on `c`, releasing `m` meanwhile. Returns as `halfproc_mutex_lock`.
///
/// # Safety
///
/// Valid `c` and `m`; the caller holds `m`.
#[no_mangle]
pub unsafe extern "C" fn halfproc_cond_wait(
    c: *mut halfproc_cond_t,
    m: *mut halfproc_mutex_t,
) -> c_int {
    // SAFETY: same layouts; the caller holds `m`.
    let (r, _) = unsafe { (*(c as *const Condvar)).wait_raw(&*(m as *const RawMutex), None) };
    lock_result(r)
}

/// Like `halfproc_cond_wait` for at most `timeout_ns` nanoseconds:
/// `ETIMEDOUT` on time-out (with `m` locked again).
///
/// # Safety
///
/// Valid `c` and `m`; the caller holds `m`.
#[no_mangle]
pub unsafe extern "C" fn halfproc_cond_timedwait(
    c: *mut halfproc_cond_t,
    m: *mut halfproc_mutex_t,
    timeout_ns: u64,
) -> c_int {
    // SAFETY: same layouts; the caller holds `m`.
    let (r, timed_out) = unsafe {
        (*(c as *const Condvar)).wait_raw(
            &*(m as *const RawMutex),
            Some(Duration::from_nanos(timeout_ns)),
        )
    };
    match lock_result(r) {
        0 if timed_out => libc::ETIMEDOUT,
        e => e,
    }
}

/// Wakes one waiter.
///
/// # Safety
///
/// `c` is valid.
#[no_mangle]
pub unsafe extern "C" fn halfproc_cond_signal(c: *mut halfproc_cond_t) -> c_int {
    // SAFETY: same layout.
    unsafe { (*(c as *const Condvar)).notify_one() };
    0
}

/// Wakes every waiter.
///
/// # Safety
///
/// `c` is valid.
#[no_mangle]
pub unsafe extern "C" fn halfproc_cond_broadcast(c: *mut halfproc_cond_t) -> c_int {
    // SAFETY: same layout.
    unsafe { (*(c as *const Condvar)).notify_all() };
    0
}

/// Destroys a condition variable.
///
/// # Safety
///
/// `c` is valid.
#[no_mangle]
pub unsafe extern "C" fn halfproc_cond_destroy(c: *mut halfproc_cond_t) -> c_int {
    let _ = c;
    0
}

/// Initialises a barrier for `count >= 1` participants (`EINVAL` for 0).
///
/// # Safety
///
/// `b` is valid and not in use.
#[no_mangle]
pub unsafe extern "C" fn halfproc_barrier_init(b: *mut halfproc_barrier_t, count: u32) -> c_int {
    match Barrier::new(count) {
        Ok(v) => {
            // SAFETY: same layout; valid per the contract.
            unsafe { (b as *mut Barrier).write(v) };
            0
        }
        Err(e) => e.errno(),
    }
}

/// Waits for all participants: `HALFPROC_BARRIER_SERIAL_THREAD` in one of
/// them, 0 in the others.
///
/// # Safety
///
/// `b` was initialised by `halfproc_barrier_init`.
#[no_mangle]
pub unsafe extern "C" fn halfproc_barrier_wait(b: *mut halfproc_barrier_t) -> c_int {
    // SAFETY: same layout, initialised per the contract.
    if unsafe { &*(b as *const Barrier) }.wait().is_leader() {
        HALFPROC_BARRIER_SERIAL_THREAD
    } else {
        0
    }
}

/// Initialises (zeroes) a reader-writer lock.
///
/// # Safety
///
/// `l` is valid and not in use.
#[no_mangle]
pub unsafe extern "C" fn halfproc_rwlock_init(l: *mut halfproc_rwlock_t) -> c_int {
    // SAFETY: per the contract.
    unsafe { l.write(halfproc_rwlock_t { __words: [0; 20] }) };
    0
}

fn rw(r: bool) -> c_int {
    if r {
        libc::EOWNERDEAD
    } else {
        0
    }
}

/// Read-locks: 0, or `EOWNERDEAD` when a dead holder was released.
///
/// # Safety
///
/// `l` is a valid lock.
#[no_mangle]
pub unsafe extern "C" fn halfproc_rwlock_rdlock(l: *mut halfproc_rwlock_t) -> c_int {
    // SAFETY: same layout (asserted).
    rw(halfproc::sync::rwlock::raw::read(unsafe {
        &*(l as *const halfproc::sync::rwlock::raw::Raw)
    }))
}

/// Write-locks: 0, or `EOWNERDEAD` when a dead holder was released.
///
/// # Safety
///
/// `l` is a valid lock.
#[no_mangle]
pub unsafe extern "C" fn halfproc_rwlock_wrlock(l: *mut halfproc_rwlock_t) -> c_int {
    // SAFETY: same layout (asserted).
    rw(halfproc::sync::rwlock::raw::write(unsafe {
        &*(l as *const halfproc::sync::rwlock::raw::Raw)
    }))
}

/// Unlocks a read or write lock the caller holds.
///
/// # Safety
///
/// `l` is a valid lock held by the calling thread.
#[no_mangle]
pub unsafe extern "C" fn halfproc_rwlock_unlock(l: *mut halfproc_rwlock_t) -> c_int {
    // SAFETY: same layout (asserted).
    halfproc::sync::rwlock::raw::unlock(unsafe {
        &*(l as *const halfproc::sync::rwlock::raw::Raw)
    });
    0
}

/// Runs `init` once across all members.
///
/// # Safety
///
/// `o` is a valid once control; `init` is callable.
#[no_mangle]
pub unsafe extern "C" fn halfproc_once(
    o: *mut halfproc_once_t,
    init: Option<extern "C" fn()>,
) -> c_int {
    let Some(init) = init else {
        return libc::EINVAL;
    };
    // SAFETY: same layout.
    match unsafe { &*(o as *const Once) }.call_once(|| init()) {
        Ok(()) => 0,
        Err(e) => e.errno(),
    }
}

/// `malloc` in the shared range (any member may free the block).
#[no_mangle]
pub extern "C" fn halfproc_malloc(size: usize) -> *mut c_void {
    alloc::malloc(size).cast()
}

/// `calloc` in the shared range; NULL with `ENOMEM` on overflow.
#[no_mangle]
pub extern "C" fn halfproc_calloc(n: usize, size: usize) -> *mut c_void {
    alloc::calloc(n, size).cast()
}

/// `realloc` in the shared range.
///
/// # Safety
///
/// `p` is NULL or a live halfproc block.
#[no_mangle]
pub unsafe extern "C" fn halfproc_realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: per the contract.
    unsafe { alloc::realloc(p.cast(), size).cast() }
}

/// `free` for halfproc blocks, from any member.
///
/// # Safety
///
/// `p` is NULL or a live halfproc block.
#[no_mangle]
pub unsafe extern "C" fn halfproc_free(p: *mut c_void) {
    // SAFETY: per the contract.
    unsafe { alloc::free(p.cast()) }
}

/// `aligned_alloc` in the shared range (`EINVAL` unless a power of two).
#[no_mangle]
pub extern "C" fn halfproc_aligned_alloc(align: usize, size: usize) -> *mut c_void {
    alloc::aligned_alloc(align, size).cast()
}

/// `posix_memalign` in the shared range.
///
/// # Safety
///
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn halfproc_posix_memalign(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
) -> c_int {
    if out.is_null() || !align.is_power_of_two() || align % core::mem::size_of::<*mut c_void>() != 0
    {
        return libc::EINVAL;
    }
    let p = alloc::aligned_alloc(align, size);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: per the contract.
    unsafe { *out = p.cast() };
    0
}

/// Usable size of a live block.
///
/// # Safety
///
/// `p` is a live halfproc block.
#[no_mangle]
pub unsafe extern "C" fn halfproc_malloc_usable_size(p: *const c_void) -> usize {
    // SAFETY: per the contract.
    unsafe { alloc::usable_size(p.cast()) }
}

/// Copies `size` bytes at `ptr` in member `pid` to `buf`. Returns the bytes
/// copied (may be fewer at an unmapped page) or -1 with `errno`.
///
/// # Safety
///
/// `buf` is writable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn halfproc_dmread(
    pid: libc::pid_t,
    ptr: *const c_void,
    size: usize,
    buf: *mut c_void,
) -> isize {
    if buf.is_null() && size != 0 {
        set_errno(libc::EFAULT);
        return -1;
    }
    let local: &mut [u8] = if size == 0 {
        &mut []
    } else {
        // SAFETY: per the contract.
        unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), size) }
    };
    bytes_or_errno(halfproc::dmread(pid, ptr as usize, size, local))
}

/// Copies `size` bytes of `buf` to `ptr` in member `pid`. Returns the bytes
/// copied or -1 with `errno`.
///
/// # Safety
///
/// `buf` is readable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn halfproc_dmwrite(
    pid: libc::pid_t,
    ptr: *mut c_void,
    size: usize,
    buf: *const c_void,
) -> isize {
    if buf.is_null() && size != 0 {
        set_errno(libc::EFAULT);
        return -1;
    }
    let local: &[u8] = if size == 0 {
        &[]
    } else {
        // SAFETY: per the contract.
        unsafe { core::slice::from_raw_parts(buf.cast::<u8>(), size) }
    };
    bytes_or_errno(halfproc::dmwrite(pid, ptr as usize, size, local))
}

/// A migration point (see `halfproc::yield_point`): where a node daemon was
/// asked to migrate this program (`halfproc migrate PID --to HOST:PORT`),
/// the program stops here and is moved from here; otherwise it returns at
/// once. Returns 1 in the copy that now runs elsewhere (another pid), 0 when
/// the program did not move, -1 with `errno` if the yield page cannot be
/// mapped (`EEXIST`: its fixed address is taken; the program can then only
/// be migrated preemptively, like one that never yields).
#[no_mangle]
pub extern "C" fn halfproc_yield() -> c_int {
    match halfproc::yield_now() {
        Ok(moved) => c_int::from(moved),
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EINVAL));
            -1
        }
    }
}
