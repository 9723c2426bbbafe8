// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `bench mm`'s counts: what an operation on the shared range costs in
//! events rather than time, from the kernel module's counters
//! (`/sys/kernel/debug/halfproc/total/`, see `kmod/stats.rs`). Counts
//! survive emulation where times under QEMU TCG do not.
//!
//! For 1, 2, 4 and 8 members (a fresh set each; every member but the one
//! measuring sleeps in `read()`, so its CPU may have loaded its tables once
//! but does not run it), the measuring member does [`COUNT_OPS`] of each
//! operation on a private page and on a shared-range page, and the deltas
//! per operation are reported: address-space switches, notifier flushes,
//! member flushes, CPUs those reached and IPIs among them. The counters are
//! global, so the sweep must run alone (nothing else may use a set).

use crate::error::{Error, Result};
use crate::os;
use crate::report::write_grid;
use halfproc_sys::mem::{self, MapFlags, Region};
use halfproc_sys::task;
use serde_json::{json, Value};
use std::fmt::Write as _;

/// Where the module's summed counters are.
pub const COUNTER_DIR: &str = "/sys/kernel/debug/halfproc/total";
/// The counters read, in report order.
pub const COUNTERS: [&str; 5] = [
    "switches",
    "flushes",
    "member_flushes",
    "flush_cpus",
    "ipis",
];
/// Operations per measurement.
pub const COUNT_OPS: usize = 200;
/// Set sizes measured.
pub const MEMBERS: [usize; 4] = [1, 2, 4, 8];
/// The operations.
pub const OPS: [&str; 3] = ["mmap+munmap", "mmap+touch+munmap", "mprotect RO+RW pair"];

/// Deltas per operation of one (members, operation, side).
#[derive(Clone, Debug)]
pub struct CountRow {
    /// Members of the set.
    pub members: usize,
    /// One of [`OPS`].
    pub op: &'static str,
    /// Shared range (`true`) or private memory.
    pub shared: bool,
    /// Per operation, in [`COUNTERS`] order.
    pub per_op: [f64; 5],
}

/// The counters now, or `None` without the module's debugfs files.
fn read() -> Option<[u64; 5]> {
    let mut v = [0u64; 5];
    for (i, name) in COUNTERS.iter().enumerate() {
        let s = std::fs::read_to_string(format!("{COUNTER_DIR}/{name}")).ok()?;
        v[i] = s.trim().parse().ok()?;
    }
    Some(v)
}

/// Whether the counters can be read here.
pub fn available() -> bool {
    read().is_some()
}

/// One page, private or in the shared range.
fn page(shared: bool) -> Result<Region> {
    let len = mem::page_size();
    Ok(if shared {
        Region::halfproc(len, None, MapFlags::empty())?
    } else {
        Region::anon("private", len, MapFlags::MAP_PRIVATE)?
    })
}

/// `n` operations `op` (an index into [`OPS`]) on one side.
fn run_op(op: usize, shared: bool, n: usize) -> Result<()> {
    match op {
        0 | 1 => {
            for _ in 0..n {
                let mut r = page(shared)?;
                if op == 1 {
                    r.prefault_write();
                }
            }
        }
        _ => {
            let mut r = page(shared)?;
            r.prefault_write();
            for i in 0..2 * n {
                let prot = if i % 2 == 0 {
                    libc::PROT_READ
                } else {
                    libc::PROT_READ | libc::PROT_WRITE
                };
                // SAFETY: `r` is our own mapping of `r.len()` bytes.
                if unsafe { libc::mprotect(r.addr() as *mut _, r.len(), prot) } != 0 {
                    return Err(Error::io("mprotect", std::io::Error::last_os_error()));
                }
            }
        }
    }
    Ok(())
}

/// In a fresh process: make a set of `members`, measure, write the deltas
/// (per operation times 1000, rounded) into `out`.
fn measure_set(members: usize, out: *mut u64) -> Result<()> {
    // The set, made by this process's first shared-range mapping.
    let _anchor = page(true)?;
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for two descriptors.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(Error::io("pipe", std::io::Error::last_os_error()));
    }
    let mut kids = Vec::new();
    for _ in 1..members {
        // SAFETY: single-threaded; the child only makes system calls.
        let pid = unsafe { task::clone_member() }?;
        if pid == 0 {
            let mut b = 0u8;
            // SAFETY: idle until the writer closes its end; then exit.
            unsafe {
                libc::close(fds[1]);
                libc::read(fds[0], (&mut b as *mut u8).cast(), 1);
                libc::_exit(0);
            }
        }
        kids.push(pid);
    }
    // SAFETY: our copy of the read end is not needed.
    unsafe { libc::close(fds[0]) };
    for op in 0..OPS.len() {
        for (side, shared) in [false, true].into_iter().enumerate() {
            let before = read().ok_or_else(|| Error::Verify("counters vanished".into()))?;
            run_op(op, shared, COUNT_OPS)?;
            let after = read().ok_or_else(|| Error::Verify("counters vanished".into()))?;
            for c in 0..COUNTERS.len() {
                let per_op = (after[c] - before[c]) * 1000 / COUNT_OPS as u64;
                // SAFETY: index < OPS * 2 * COUNTERS inside `out` (caller).
                unsafe {
                    out.add((op * 2 + side) * COUNTERS.len() + c)
                        .write_volatile(per_op)
                };
            }
        }
    }
    // SAFETY: closing the write end wakes the idle members, which exit.
    unsafe { libc::close(fds[1]) };
    for pid in kids {
        os::wait_child(pid)?;
    }
    Ok(())
}

/// Measure every set size in [`MEMBERS`].
pub fn sweep() -> Result<Vec<CountRow>> {
    let per_set = OPS.len() * 2 * COUNTERS.len();
    let mut rows = Vec::new();
    for members in MEMBERS {
        let results = Region::shared_anon(per_set * 8)?;
        let out = results.addr() as *mut u64;
        // SAFETY: the bench is single-threaded here (see `run_mm`); the
        // child makes a set of its own and exits without unwinding.
        let pid = unsafe { task::fork() }?;
        if pid == 0 {
            let code = match measure_set(members, out) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("halfproc-bench mm counts: {e}");
                    1
                }
            };
            // SAFETY: end the child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        if os::wait_child(pid)? != 0 {
            return Err(Error::Verify(format!(
                "bench mm counts with {members} members failed"
            )));
        }
        for (op, name) in OPS.iter().enumerate() {
            for (side, shared) in [false, true].into_iter().enumerate() {
                let mut per_op = [0f64; 5];
                for (c, v) in per_op.iter_mut().enumerate() {
                    // SAFETY: written by the child, which has exited.
                    let raw = unsafe {
                        out.add((op * 2 + side) * COUNTERS.len() + c)
                            .read_volatile()
                    };
                    *v = raw as f64 / 1000.0;
                }
                rows.push(CountRow {
                    members,
                    op: name,
                    shared,
                    per_op,
                });
            }
        }
    }
    Ok(rows)
}

/// The rows as a text table.
pub fn table(rows: &[CountRow]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\ncounts per operation ({COUNT_OPS} each; one measuring member, the others idle):"
    );
    let mut head = vec![
        "members".to_string(),
        "operation".to_string(),
        "side".to_string(),
    ];
    head.extend(COUNTERS.iter().map(|s| s.to_string()));
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut v = vec![
                r.members.to_string(),
                r.op.to_string(),
                if r.shared { "shared" } else { "private" }.to_string(),
            ];
            v.extend(r.per_op.iter().map(|x| format!("{x:.2}")));
            v
        })
        .collect();
    write_grid(&mut t, &head, &body);
    t
}

/// The rows as JSON.
pub fn json(rows: &[CountRow]) -> Value {
    Value::Array(
        rows.iter()
            .map(|r| {
                let mut o = json!({
                    "members": r.members,
                    "operation": r.op,
                    "side": if r.shared { "shared" } else { "private" },
                    "ops": COUNT_OPS,
                });
                for (c, name) in COUNTERS.iter().enumerate() {
                    o[format!("{name}_per_op")] = json!(r.per_op[c]);
                }
                o
            })
            .collect(),
    )
}
