// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The C ABI (`include/dmi.h`): the paper's names and argument orders.
//! Calls return 0 (or a value) on success and -1 on error, with the message
//! in `DMI_errmsg()` (per thread). One node per process: `DMI_init` reads
//! the environment `dmi run` sets.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, RwLock};

use crate::addr::{REGION_MAX, REGION_SHIFT};
use crate::error::DmiError;
use crate::msg::{ReadMode, WriteMode};
use crate::rmw::{RmwFn, RmwTable};
use crate::runtime::{Dmi, Handle};

pub(crate) static NODE: RwLock<Option<Arc<Dmi>>> = RwLock::new(None);
/// `DMI_finalize` ended this process's run: a process takes part in one
/// run (its instance mover, instance registry and node set are set up
/// once), so a later `DMI_init` is refused.
static FINALIZED: AtomicBool = AtomicBool::new(false);
pub(crate) static RMW: LazyLock<Arc<RmwTable>> = LazyLock::new(|| Arc::new(RmwTable::default()));

/// Room for the last error message (longer ones are cut at a character).
const ERRMSG_MAX: usize = 1024;

thread_local! {
    // A fixed buffer, so the pointer DMI_errmsg returned stays valid (the
    // text changes with the next error of this thread, the place does not).
    static LAST: RefCell<[u8; ERRMSG_MAX]> = const { RefCell::new([0; ERRMSG_MAX]) };
}

/// The errno value of an error (documented in `dmi.h`).
pub fn errno_of(e: &DmiError) -> c_int {
    match e {
        DmiError::BadAddress(_) => libc::EFAULT,
        DmiError::OutOfRange(_) => libc::ERANGE,
        DmiError::BadArgument(_) => libc::EINVAL,
        DmiError::NotInitialized => libc::ENOTCONN,
        DmiError::NodeFailed { .. } => libc::EHOSTDOWN,
        DmiError::Setup(_) => libc::EIO,
        DmiError::Instance(_) => libc::ECHILD,
        DmiError::PoolFull(_) => libc::ENOMEM,
    }
}

pub(crate) fn set_err(e: &DmiError) {
    let s = e.to_string().replace('\0', " ");
    let mut n = s.len().min(ERRMSG_MAX - 1);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    LAST.with(|l| {
        let mut b = l.borrow_mut();
        b[..n].copy_from_slice(&s.as_bytes()[..n]);
        b[n] = 0;
    });
    // SAFETY: __errno_location returns this thread's errno, always valid.
    unsafe { *libc::__errno_location() = errno_of(e) };
}

pub(crate) fn with<T>(fail: T, f: impl FnOnce(&Dmi) -> Result<T, DmiError>) -> T {
    let d = NODE.read().unwrap_or_else(|e| e.into_inner()).clone();
    let r = match d.as_deref() {
        Some(d) => f(d),
        None => Err(DmiError::NotInitialized),
    };
    r.unwrap_or_else(|e| {
        set_err(&e);
        fail
    })
}

fn status(r: Result<(), DmiError>) -> Result<c_int, DmiError> {
    r.map(|_| 0)
}

fn read_mode(mode: c_int) -> Result<ReadMode, DmiError> {
    match mode {
        0 => Ok(ReadMode::Invalidate),
        1 => Ok(ReadMode::Update),
        2 => Ok(ReadMode::Get),
        m => Err(DmiError::BadArgument(format!(
            "read mode {m} (use DMI_INVALIDATE, DMI_UPDATE or DMI_GET)"
        ))),
    }
}

fn write_mode(mode: c_int) -> Result<WriteMode, DmiError> {
    match mode {
        3 => Ok(WriteMode::Exclusive),
        4 => Ok(WriteMode::Put),
        m => Err(DmiError::BadArgument(format!(
            "write mode {m} (use DMI_EXCLUSIVE or DMI_PUT)"
        ))),
    }
}

/// A buffer from C: null is allowed only for size 0.
fn check_buf(buf: *const c_void, size: i64) -> Result<usize, DmiError> {
    if size < 0 {
        return Err(DmiError::BadArgument(format!("negative size {size}")));
    }
    if buf.is_null() && size > 0 {
        return Err(DmiError::BadArgument("buf is NULL".into()));
    }
    Ok(size as usize)
}

/// A buffer for an access: `check_buf`, and a size larger than any region
/// (`REGION_MAX` bytes) is refused before the buffer is touched, so it is
/// an error, not an attempt to copy that much. (Smaller sizes past a
/// region's end are found by the node, which knows the regions.)
fn check_access(buf: *const c_void, size: i64) -> Result<usize, DmiError> {
    let len = check_buf(buf, size)?;
    if len as u64 > REGION_MAX {
        return Err(DmiError::OutOfRange(format!(
            "size {size} runs past the end of any region (a region has at most 2^{REGION_SHIFT} bytes)"
        )));
    }
    Ok(len)
}

/// Copies a C buffer (checked by `check_buf`).
///
/// # Safety
/// `buf` must be valid for reading `len` bytes (or `len` is 0).
unsafe fn bytes<'a>(buf: *const c_void, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: the caller guarantees `buf` is readable for `len` bytes.
    unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }
}

/// # Safety
/// `buf` must be valid for writing `len` bytes (or `len` is 0).
unsafe fn bytes_mut<'a>(buf: *mut c_void, len: usize) -> &'a mut [u8] {
    if len == 0 {
        return &mut [];
    }
    // SAFETY: the caller guarantees `buf` is writable for `len` bytes.
    unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) }
}

/// In a new compute instance (`serve.rs`): the node's state copied by the
/// fork is left alone (its threads do not exist here) and `d` takes over.
pub(crate) fn become_instance(d: Dmi) {
    let mut g = NODE.write().unwrap_or_else(|e| e.into_inner());
    std::mem::forget(g.replace(Arc::new(d)));
}

/// The last error of this thread (empty if none).
#[no_mangle]
pub extern "C" fn DMI_errmsg() -> *const c_char {
    LAST.with(|l| l.as_ptr().cast::<c_char>().cast_const())
}

/// `DMI_init` after `DMI_finalize`: -1 with the reason.
fn refuse_after_finalize() -> c_int {
    set_err(&DmiError::BadArgument(
        "DMI_init after DMI_finalize: a process takes part in one DMI run (its instance \
         mover and instance registry are set up once); start a new process for another run"
            .into(),
    ));
    -1
}

/// Connects this node to the others (environment of `dmi run`).
#[no_mangle]
pub extern "C" fn DMI_init() -> c_int {
    // First: a finalized process starts nothing (a movable run's program
    // neither). Set under NODE's write lock, so a DMI_init that holds
    // that lock sees it.
    if FINALIZED.load(Ordering::SeqCst) {
        return refuse_after_finalize();
    }
    let started = NODE.read().unwrap_or_else(|e| e.into_inner()).is_some();
    if crate::host::requested() && !started {
        // Returns in the program's instance only; the node process hosts.
        return match crate::host::run_program(RMW.clone()) {
            Ok(()) => 0,
            Err(e) => {
                set_err(&e);
                -1
            }
        };
    }
    let mut g = NODE.write().unwrap_or_else(|e| e.into_inner());
    if g.is_some() {
        return 0;
    }
    // Again under the lock: a DMI_finalize may have ended the node since.
    if FINALIZED.load(Ordering::SeqCst) {
        return refuse_after_finalize();
    }
    match Dmi::from_env(RMW.clone()).and_then(|d| crate::guest::start(&d).map(|_| d)) {
        Ok(d) => {
            *g = Some(Arc::new(d));
            0
        }
        Err(e) => {
            set_err(&e);
            -1
        }
    }
}

/// Barrier with every node, then disconnects.
#[no_mangle]
pub extern "C" fn DMI_finalize() -> c_int {
    let mut g = NODE.write().unwrap_or_else(|e| e.into_inner());
    let d = match g.take().map(Arc::try_unwrap) {
        Some(Ok(d)) => {
            // Under the lock: no DMI_init starts another node meanwhile.
            FINALIZED.store(true, Ordering::SeqCst);
            drop(g);
            Some(d)
        }
        Some(Err(d)) => {
            *g = Some(d);
            set_err(&DmiError::BadArgument(
                "DMI_finalize while another thread is in a DMI call".into(),
            ));
            return -1;
        }
        None => None,
    };
    match d {
        Some(d) => status(d.finalize()).unwrap_or_else(|e| {
            set_err(&e);
            -1
        }),
        None => {
            set_err(&DmiError::NotInitialized);
            -1
        }
    }
}

/// This node's rank; -1 before `DMI_init` (leaving the last error alone,
/// so `fprintf(..., DMI_rank(), DMI_errmsg())` still shows the reason).
#[no_mangle]
pub extern "C" fn DMI_rank() -> c_int {
    let g = NODE.read().unwrap_or_else(|e| e.into_inner());
    g.as_ref().map_or(-1, |d| d.rank() as c_int)
}

/// The number of nodes; -1 before `DMI_init` (the last error is kept).
#[no_mangle]
pub extern "C" fn DMI_size() -> c_int {
    let g = NODE.read().unwrap_or_else(|e| e.into_inner());
    g.as_ref().map_or(-1, |d| d.size() as c_int)
}

#[no_mangle]
pub extern "C" fn DMI_root() -> i64 {
    with(-1, |d| Ok(d.root()))
}

#[no_mangle]
pub extern "C" fn DMI_mmap(page_size: i64, page_num: i64) -> i64 {
    with(-1, |d| d.mmap(page_size, page_num))
}

#[no_mangle]
pub extern "C" fn DMI_munmap(addr: i64) -> c_int {
    with(-1, |d| status(d.munmap(addr)))
}

/// # Safety
/// `buf` must be writable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn DMI_read(addr: i64, size: i64, buf: *mut c_void, mode: c_int) -> c_int {
    with(-1, |d| {
        let len = check_access(buf, size)?;
        let mode = read_mode(mode)?;
        // SAFETY: the caller guarantees `buf` is writable for `size` bytes.
        status(d.read(addr, unsafe { bytes_mut(buf, len) }, mode))
    })
}

/// # Safety
/// `buf` must be readable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn DMI_write(addr: i64, size: i64, buf: *const c_void, mode: c_int) -> c_int {
    with(-1, |d| {
        let len = check_access(buf, size)?;
        let mode = write_mode(mode)?;
        // SAFETY: the caller guarantees `buf` is readable for `size` bytes.
        status(d.write(addr, unsafe { bytes(buf, len) }, mode))
    })
}

/// One range of a group access.
#[repr(C)]
pub struct DMI_access_t {
    pub addr: i64,
    pub size: i64,
    pub buf: *mut c_void,
}

/// # Safety
/// `acc` must point to `num` entries whose buffers are valid for their sizes.
unsafe fn accesses<'a>(acc: *const DMI_access_t, num: i64) -> Result<&'a [DMI_access_t], DmiError> {
    if num < 0 || (acc.is_null() && num > 0) {
        return Err(DmiError::BadArgument(format!("{num} accesses at {acc:p}")));
    }
    if num == 0 {
        return Ok(&[]);
    }
    // SAFETY: the caller guarantees `acc` points to `num` entries.
    Ok(unsafe { std::slice::from_raw_parts(acc, num as usize) })
}

/// The entries of a group access, each buffer checked: `(addr, buf, len)`.
///
/// # Safety
/// `acc` must point to `num` entries (or `num` is 0).
unsafe fn group(
    acc: *const DMI_access_t,
    num: i64,
) -> Result<Vec<(i64, *mut c_void, usize)>, DmiError> {
    // SAFETY: the caller guarantees `acc` points to `num` entries.
    let acc = unsafe { accesses(acc, num)? };
    acc.iter()
        .map(|a| Ok((a.addr, a.buf, check_access(a.buf, a.size)?)))
        .collect()
}

/// # Safety
/// `acc[0..num]` must be valid, each buffer writable for its size.
#[no_mangle]
pub unsafe extern "C" fn DMI_group_read(acc: *mut DMI_access_t, num: i64, mode: c_int) -> c_int {
    with(-1, |d| {
        let mode = read_mode(mode)?;
        // SAFETY: the caller guarantees the entries are valid.
        let parts = unsafe { group(acc, num)? };
        // SAFETY: each buffer is writable for its size (caller).
        let mut items: Vec<(i64, &mut [u8])> = parts
            .into_iter()
            .map(|(a, p, l)| (a, unsafe { bytes_mut(p, l) }))
            .collect();
        status(d.group_read(&mut items, mode))
    })
}

/// # Safety
/// `acc[0..num]` must be valid, each buffer readable for its size.
#[no_mangle]
pub unsafe extern "C" fn DMI_group_write(acc: *const DMI_access_t, num: i64, mode: c_int) -> c_int {
    with(-1, |d| {
        let mode = write_mode(mode)?;
        // SAFETY: the caller guarantees the entries are valid.
        let parts = unsafe { group(acc, num)? };
        // SAFETY: each buffer is readable for its size (caller).
        let items: Vec<(i64, &[u8])> = parts
            .into_iter()
            .map(|(a, p, l)| (a, unsafe { bytes(p, l) }))
            .collect();
        status(d.group_write(&items, mode))
    })
}

#[no_mangle]
pub extern "C" fn DMI_mutex_lock(addr: i64) -> c_int {
    with(-1, |d| status(d.lock(addr)))
}

#[no_mangle]
pub extern "C" fn DMI_mutex_unlock(addr: i64) -> c_int {
    with(-1, |d| status(d.unlock(addr)))
}

#[no_mangle]
pub extern "C" fn DMI_barrier() -> c_int {
    with(-1, |d| match crate::reconf::itergroup_size() {
        // In DMI_itergroup: the itergroup's threads.
        Some(pnum) => status(d.barrier_of(pnum)),
        None => status(d.barrier()),
    })
}

/// A user-defined read-modify-write function, run at the owner.
pub type DMI_rmw_func_t = Option<
    unsafe extern "C" fn(
        target: *mut c_void,
        size: i64,
        arg: *const c_void,
        arg_size: i64,
        result: *mut c_void,
    ),
>;

/// Registers `func`; returns its id. Every node must register the same
/// functions in the same order.
#[no_mangle]
pub extern "C" fn DMI_rmw_register(func: DMI_rmw_func_t) -> c_int {
    let Some(func) = func else {
        set_err(&DmiError::BadArgument("NULL function".into()));
        return -1;
    };
    let f: RmwFn = Arc::new(move |target: &mut [u8], arg: &[u8]| {
        let mut result = vec![0u8; target.len()];
        // SAFETY: the function was registered by the program for this use;
        // every pointer is valid for the size passed with it.
        unsafe {
            func(
                target.as_mut_ptr().cast(),
                target.len() as i64,
                arg.as_ptr().cast(),
                arg.len() as i64,
                result.as_mut_ptr().cast(),
            )
        };
        Ok(result)
    });
    RMW.register(f) as c_int
}

/// Runs function `func` at the owner of `[addr, addr+size)` (one page) with
/// `arg`; its result (`size` bytes for user functions, 8 for the built-ins)
/// goes to `result`.
///
/// # Safety
/// `arg` readable for `arg_size` bytes; `result` writable for the result.
#[no_mangle]
pub unsafe extern "C" fn DMI_atomic(
    addr: i64,
    size: i64,
    arg: *const c_void,
    arg_size: i64,
    result: *mut c_void,
    func: c_int,
) -> c_int {
    with(-1, |d| {
        let alen = check_buf(arg, arg_size)?;
        let func =
            u32::try_from(func).map_err(|_| DmiError::BadArgument(format!("function {func}")))?;
        // SAFETY: `arg` is readable for `arg_size` bytes (caller).
        let out = d.atomic(addr, size, func, unsafe { bytes(arg, alen) })?;
        if !result.is_null() {
            // SAFETY: `result` is writable for the result's size (caller).
            unsafe { bytes_mut(result, out.len()) }.copy_from_slice(&out);
        }
        Ok(0)
    })
}

/// A pending asynchronous access.
#[repr(C)]
pub struct DMI_handle_t {
    pub p: *mut c_void,
}

struct Pending {
    handle: Handle,
    buf: *mut c_void,
    len: usize,
}

/// Checks an asynchronous access's arguments, starts it with `req` (built
/// from the checked length), and stores the pending state in `h`.
///
/// # Safety
/// `h` must be null or writable; `out` (if any) must stay writable for the
/// length until `DMI_wait`.
unsafe fn start_async(
    h: *mut DMI_handle_t,
    buf: *const c_void,
    size: i64,
    out: Option<*mut c_void>,
    req: impl FnOnce(usize) -> Result<crate::node::CallReq, DmiError>,
) -> c_int {
    with(-1, |d| {
        let len = check_access(buf, size)?;
        if h.is_null() {
            return Err(DmiError::BadArgument("handle is NULL".into()));
        }
        let handle = d.start_call(req(len)?);
        let (buf, len) = out.map_or((std::ptr::null_mut(), 0), |b| (b, len));
        let p = Box::into_raw(Box::new(Pending { handle, buf, len }));
        // SAFETY: `h` is non-null and writable (caller).
        unsafe { (*h).p = p.cast() };
        Ok(0)
    })
}

/// Starts a read; the data is in `buf` when `DMI_wait(h)` returned 0.
///
/// # Safety
/// `buf` must stay writable for `size` bytes until `DMI_wait`; `h` valid.
#[no_mangle]
pub unsafe extern "C" fn DMI_read_async(
    addr: i64,
    size: i64,
    buf: *mut c_void,
    mode: c_int,
    h: *mut DMI_handle_t,
) -> c_int {
    let req = |_| {
        Ok(crate::node::CallReq::Read {
            items: vec![(addr, size)],
            mode: read_mode(mode)?,
        })
    };
    // SAFETY: forwarded from the caller's guarantees.
    unsafe { start_async(h, buf, size, Some(buf), req) }
}

/// Starts a write (`buf` is copied at once).
///
/// # Safety
/// `buf` readable for `size` bytes; `h` valid.
#[no_mangle]
pub unsafe extern "C" fn DMI_write_async(
    addr: i64,
    size: i64,
    buf: *const c_void,
    mode: c_int,
    h: *mut DMI_handle_t,
) -> c_int {
    let req = |len| {
        let mode = write_mode(mode)?;
        // SAFETY: `buf` is readable for `size` bytes (caller).
        let data = unsafe { bytes(buf, len) }.to_vec();
        Ok(crate::node::CallReq::Write {
            items: vec![(addr, data)],
            mode,
        })
    };
    // SAFETY: forwarded from the caller's guarantees.
    unsafe { start_async(h, buf, size, None, req) }
}

/// Arrives at a barrier now and returns at once; `DMI_wait(h)` returns when
/// every node arrived (a split-phase barrier, like `MPI_Ibarrier`: work
/// between the two overlaps the other nodes' late arrivals). Every node
/// must wait on one barrier before it starts the next.
///
/// # Safety
/// `h` valid.
#[no_mangle]
pub unsafe extern "C" fn DMI_barrier_async(h: *mut DMI_handle_t) -> c_int {
    let req = |_| Ok(crate::node::CallReq::Barrier);
    // SAFETY: no buffer; `h` is valid (caller).
    unsafe { start_async(h, std::ptr::null(), 0, None, req) }
}

/// Waits for an asynchronous access; the handle is used up.
///
/// # Safety
/// `h` must come from `DMI_read_async`/`DMI_write_async`/`DMI_barrier_async`,
/// waited on once.
#[no_mangle]
pub unsafe extern "C" fn DMI_wait(h: *mut DMI_handle_t) -> c_int {
    // SAFETY: `h` is valid (caller); its pointer came from Box::into_raw
    // above and is taken (nulled) here so it is freed once.
    let p = unsafe {
        if h.is_null() || (*h).p.is_null() {
            set_err(&DmiError::BadArgument(
                "no pending access in this handle".into(),
            ));
            return -1;
        }
        let p = (*h).p.cast::<Pending>();
        (*h).p = std::ptr::null_mut();
        Box::from_raw(p)
    };
    match p.handle.wait() {
        Ok(out) => {
            if p.len > 0 {
                // SAFETY: the buffer stays writable until this wait (caller).
                unsafe { bytes_mut(p.buf, p.len) }.copy_from_slice(&out);
            }
            0
        }
        Err(e) => {
            set_err(&e);
            -1
        }
    }
}
