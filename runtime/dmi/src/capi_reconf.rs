// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The C ABI of reconfigurable programs (`include/dmi.h`, `dmi_main.h`):
//! `DMI_run` (the `main` that `dmi_main.h` defines calls it with the
//! program's `DMI_main`, `DMI_itergroup` and optional `DMI_judge_rescale`),
//! `DMI_rescale`, `DMI_check_rescale`.

use std::ffi::{c_char, c_int, CStr};
use std::sync::Arc;

use crate::capi::{with, NODE, RMW};
use crate::error::DmiError;
use crate::reconf::{self, Ending, NodeInfo, Program};
use crate::runtime::Dmi;

/// A node as `DMI_judge_rescale` sees it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DMI_node_t {
    pub id: c_int,
    pub core_num: c_int,
    /// `host:port` of the node, NUL-terminated.
    pub host: [c_char; 64],
}

pub type DMI_main_t = extern "C" fn(argc: c_int, argv: *mut *mut c_char);
pub type DMI_itergroup_t = extern "C" fn(rank: c_int, pnum: c_int, addr: i64) -> c_int;
pub type DMI_judge_rescale_t = extern "C" fn(
    in_nodes: *mut DMI_node_t,
    out_nodes: *mut DMI_node_t,
    cur_nodes: *mut DMI_node_t,
    in_node_num: c_int,
    out_node_num: c_int,
    cur_node_num: c_int,
) -> c_int;

struct CProgram {
    main: DMI_main_t,
    itergroup: DMI_itergroup_t,
    judge: Option<DMI_judge_rescale_t>,
    argc: c_int,
    /// The process's own `argv` (as an address: it lives as long as the
    /// process and only `main` passes it on).
    argv: usize,
}

fn to_c(nodes: &[NodeInfo]) -> Vec<DMI_node_t> {
    nodes
        .iter()
        .map(|n| {
            let mut host = [0 as c_char; 64];
            for (d, s) in host.iter_mut().zip(n.addr.to_string().bytes().take(63)) {
                *d = s as c_char;
            }
            DMI_node_t {
                id: n.id as c_int,
                core_num: n.core_num as c_int,
                host,
            }
        })
        .collect()
}

impl Program for CProgram {
    fn main(&self, _dmi: &Dmi, _args: &[String]) {
        (self.main)(self.argc, self.argv as *mut *mut c_char);
    }

    fn itergroup(&self, _dmi: &Dmi, rank: i32, pnum: i32, addr: i64) -> i32 {
        (self.itergroup)(rank, pnum, addr)
    }

    fn judge_rescale(&self, i: &[NodeInfo], o: &[NodeInfo], c: &[NodeInfo]) -> bool {
        let Some(judge) = self.judge else {
            return !i.is_empty() || !o.is_empty();
        };
        let (mut i, mut o, mut c) = (to_c(i), to_c(o), to_c(c));
        let n = |v: &Vec<DMI_node_t>| v.len() as c_int;
        let (ni, no, nc) = (n(&i), n(&o), n(&c));
        judge(i.as_mut_ptr(), o.as_mut_ptr(), c.as_mut_ptr(), ni, no, nc) != 0
    }
}

/// Runs a reconfigurable program: node 0 calls `main(argc, argv)`, every
/// node runs itergroups as `DMI_rescale` decides. Returns the process's exit
/// status (0, or 1 after printing the error).
///
/// # Safety
/// `argv` must be the `argc` arguments `main` received.
#[no_mangle]
pub unsafe extern "C" fn DMI_run(
    argc: c_int,
    argv: *mut *mut c_char,
    main: Option<DMI_main_t>,
    itergroup: Option<DMI_itergroup_t>,
    judge: Option<DMI_judge_rescale_t>,
) -> c_int {
    let (Some(main), Some(itergroup)) = (main, itergroup) else {
        eprintln!("dmi: DMI_run needs DMI_main and DMI_itergroup");
        return 1;
    };
    let args: Vec<String> = (0..argc.max(0) as usize)
        .map(|i| {
            // SAFETY: the caller passes main's argv: argc valid C strings.
            let p = unsafe { *argv.add(i) };
            if p.is_null() {
                return String::new();
            }
            // SAFETY: a non-null argv entry is a NUL-terminated string.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        })
        .collect();
    let program = CProgram {
        main,
        itergroup,
        judge,
        argc,
        argv: argv as usize,
    };
    match run(program, &args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("dmi: {e}");
            1
        }
    }
}

fn run(program: CProgram, args: &[String]) -> Result<(), DmiError> {
    let dmi = {
        let mut g = NODE.write().unwrap_or_else(|e| e.into_inner());
        if g.is_some() {
            return Err(DmiError::BadArgument(
                "DMI_run after DMI_init: a program uses one or the other".into(),
            ));
        }
        let d = Arc::new(reconf::start_node(RMW.clone())?);
        *g = Some(d.clone());
        d
    };
    let r = reconf::run(&dmi, Box::new(program), args);
    NODE.write().unwrap_or_else(|e| e.into_inner()).take();
    let ending = r?;
    let dmi = Arc::try_unwrap(dmi)
        .map_err(|_| DmiError::Setup("a DMI call is still running at the end".into()))?;
    match ending {
        Ending::Finalize => dmi.finalize(),
        Ending::Leave => {
            dmi.leave();
            Ok(())
        }
    }
}

/// `DMI_rescale(addr, init_node_num)` (Fig. 6 line 8): from `DMI_main`.
#[no_mangle]
pub extern "C" fn DMI_rescale(addr: i64, init_node_num: c_int) -> c_int {
    with(-1, |d| reconf::rescale(d, addr, init_node_num).map(|_| 0))
}

/// `DMI_check_rescale()` (Fig. 7 line 18): 1 to end the itergroup, 0 to
/// go on, -1 on error (not in `DMI_itergroup`).
#[no_mangle]
pub extern "C" fn DMI_check_rescale() -> c_int {
    with(-1, |d| reconf::check_rescale(d).map(c_int::from))
}
