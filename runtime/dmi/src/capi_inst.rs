// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The C ABI of compute instances (`include/dmi.h`, half-process.txt
//! Fig. 11): `DMI_create` forks an instance running the program's
//! `DMI_thread(arg_addr)` as a member of the node's half-process set
//! (`serve.rs`); `DMI_join` waits for it, `DMI_detach` lets it go.

use std::ffi::c_int;

use crate::capi::{set_err, with};
use crate::error::DmiError;
use crate::serve::{self, Ended, NodeRef};

/// An instance's entry point: `uint64_t f(uint64_t arg_addr)` (the paper's
/// `DMI_thread`, half-process.txt Fig. 11).
pub type DMI_thread_t = Option<unsafe extern "C" fn(u64) -> u64>;

/// A compute instance (by value; valid in the node's program).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DMI_instance_t {
    pub id: i64,
}

fn fail(e: DmiError) -> c_int {
    set_err(&e);
    -1
}

/// Creates an instance running `func(arg_addr)`; `DMI_create(h, arg)` in
/// `dmi.h` is this with the program's `DMI_thread`.
///
/// # Safety
/// `handle` must be writable; `func` must be sound to call in a copy of
/// the calling process.
#[no_mangle]
pub unsafe extern "C" fn DMI_create_func(
    handle: *mut DMI_instance_t,
    func: DMI_thread_t,
    arg_addr: i64,
) -> c_int {
    let (Some(func), false) = (func, handle.is_null()) else {
        return fail(DmiError::BadArgument("handle or function is NULL".into()));
    };
    // Take what the instance needs, then fork with no lock held.
    let node = with(None, |d| NodeRef::of(d).map(Some));
    let Some(node) = node else { return -1 };
    let fatal = std::env::var("DMI_ERRORS").map_or(true, |v| v != "return");
    // The address travels as the paper's uint64_t and the result comes back
    // bit for bit (0 is success for DMI_join).
    // SAFETY: the caller guarantees `func` may run in the instance.
    let run = move |_: &crate::Dmi, a: i64| unsafe { func(a as u64) as i64 };
    match serve::create(node, fatal, run, arg_addr) {
        Ok(id) => {
            // SAFETY: `handle` is non-null and writable (caller).
            unsafe { (*handle).id = id };
            0
        }
        Err(e) => fail(e),
    }
}

/// Waits for the instance; 0 when its function returned 0, else -1 with the
/// reason (another return value, or how its process ended).
#[no_mangle]
pub extern "C" fn DMI_join(handle: DMI_instance_t) -> c_int {
    match serve::join(handle.id) {
        Ok(Ended::Returned(0)) => 0,
        Ok(Ended::Returned(v)) => fail(DmiError::Instance(format!(
            "instance {} returned {v}",
            handle.id
        ))),
        Ok(Ended::Failed(how)) => fail(DmiError::Instance(format!("instance {} {how}", handle.id))),
        Err(e) => fail(e),
    }
}

/// Lets the instance run on its own (its failure is still reported).
#[no_mangle]
pub extern "C" fn DMI_detach(handle: DMI_instance_t) -> c_int {
    serve::detach(handle.id).map_or_else(fail, |_| 0)
}

/// Where the node may move the calling compute instance (`docs/dmi-reconf.md`,
/// "DMI_yield"): 1 when it was moved (it now runs as another process,
/// served by its new mailbox), 0 when not (also in the node's own
/// program), -1 on error.
#[no_mangle]
pub extern "C" fn DMI_yield() -> c_int {
    with(-1, |d| d.yield_now().map(c_int::from))
}
