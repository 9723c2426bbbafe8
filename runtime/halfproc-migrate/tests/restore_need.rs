//! The address space a restore needs (`halfproc_migrate::restore_need`),
//! the estimate a node checks against its `RLIMIT_AS` before a migration
//! is frozen, beside what restores really reach: `VmPeak` of the restored
//! copy (the kernel refuses a mapping that would take the address space
//! past `RLIMIT_AS`, and `VmPeak` is the most it held). Then the limit
//! itself: xz's restore goes through under an `RLIMIT_AS` of its peak and
//! fails, naming the step, a MiB below it.
//!
//! One test in a binary of its own: the restoring process's own address
//! space is part of a peak (the forked child holds it), so no other test
//! may map or unmap in it meanwhile.

mod common;

use common::*;
use halfproc_migrate::restore_need::{self as need, Mapped};
use halfproc_migrate::{freeze_and_dump, restore_from_memory, RestoreOptions};
use std::path::Path;

const MIB: u64 = 1 << 20;

/// `VmPeak` of `pid`, in bytes.
fn vm_peak(pid: i32) -> u64 {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let l = st.lines().find(|l| l.starts_with("VmPeak:")).unwrap();
    l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// `VmSize` of `pid`, in bytes.
fn vm_size(pid: i32) -> u64 {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let l = st.lines().find(|l| l.starts_with("VmSize:")).unwrap();
    l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

fn set_rlimit_as(bytes: u64) {
    let r = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads one struct rlimit, which `r` is.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &r) }, 0);
}

fn stopped() -> RestoreOptions {
    RestoreOptions {
        stopped: true,
        ..Default::default()
    }
}

/// What one program's restore needs: (the estimate, the copy's peak,
/// the estimate's parts).
struct Measured {
    estimate: u64,
    seen: u64,
    mapped: Mapped,
    pages: u64,
    caller: u64,
}

/// Runs `cmd`, dumps it once `ready` says it has mapped what it maps,
/// restores it stopped from memory and compares; `then` gets the dump
/// before the original is killed.
fn measure(
    name: &str,
    (cmd, args, stdin): (&Path, &[&str], Option<&Path>),
    ready: impl FnOnce(i32, &Path),
    then: impl FnOnce(&halfproc_migrate::Dumped),
) -> Measured {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let pid = spawn(cmd, args, stdin, &out);
    ready(pid, &out);
    // What a source offers, read while the program runs.
    let offered = need::mapped(pid, None).unwrap();
    let d = freeze_and_dump(pid, &[]).expect("freeze_and_dump");
    let m = &d.manifest;
    let mapped = need::mapped_in(m);
    assert_eq!(
        offered, mapped,
        "{name}: /proc read before the dump and the image differ"
    );
    let runs = need::runs_in(m);
    let region = need::region(&mapped, m.pages_len, runs);
    // The contents are in this process already (the dump's PageBuf).
    let caller = need::own_vm_size().unwrap();
    let estimate = need::peak(&mapped, region, caller);
    let copy = restore_from_memory(m, &d.pages, &stopped()).expect("restore_from_memory");
    let seen = vm_peak(copy.pid);
    kill(copy.pid);
    eprintln!(
        "{name}: maps {:.1} MiB in {} VMAs, {:.1} MiB of contents in {runs} runs; this \
         process {:.1} MiB; region {:.1} MiB; estimate {:.1} MiB, the copy's VmPeak {:.1} MiB",
        mapped.bytes as f64 / MIB as f64,
        mapped.vmas,
        m.pages_len as f64 / MIB as f64,
        caller as f64 / MIB as f64,
        region as f64 / MIB as f64,
        estimate as f64 / MIB as f64,
        seen as f64 / MIB as f64
    );
    let pages = m.pages_len;
    then(&d);
    d.kill();
    Measured {
        estimate,
        seen,
        mapped,
        pages,
        caller,
    }
}

fn xz() -> &'static Path {
    for dir in ["/usr/bin", "/bin"] {
        let p = Path::new(dir).join("xz");
        if p.exists() {
            return Box::leak(p.into_boxed_path());
        }
    }
    panic!("xz is not installed (apt-get install xz-utils)");
}

#[test]
fn the_estimate_bounds_the_restores_peak_and_the_limit_holds_at_it() {
    // Idle after mapping 21 MiB: the test process's own mappings, which
    // the fork holds, are the larger part.
    let l = measure(
        "layout",
        (targets(), &["layout"][..], None),
        |_, out| {
            wait_line(out, "full ");
        },
        |_| (),
    );
    assert!(l.caller > l.mapped.bytes, "layout: not the case meant");
    // The peak right after the fork: this process, the new region. The
    // estimate's region has the data allowance (1 MiB) and a table bound.
    assert!(l.seen <= l.estimate, "layout: peak beyond the estimate");
    assert!(l.estimate - l.seen < 2 * MIB, "layout: estimate far off");

    // xz -9 maps about 674 MiB: its VMAs are the larger part.
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    input_file(&input, 4 << 20);
    // Ready once its encoder is allocated (it maps nothing more after).
    let encoder = |pid: i32, _: &Path| {
        for _ in 0..3000 {
            if vm_size(pid) > 600 * MIB {
                return;
            }
            sleep_ms(10);
        }
        panic!("xz -9 did not map 600 MiB in 30 s");
    };
    let args: &[&str] = &["-9", "-T1", "-c"];
    let x = measure("xz -9", (xz(), args, Some(&input)), encoder, |d| {
        let m = &d.manifest;
        let peak = {
            let c = restore_from_memory(m, &d.pages, &stopped()).expect("restore again");
            let p = vm_peak(c.pid);
            kill(c.pid);
            p
        };
        // Under an RLIMIT_AS of its peak the restore goes through; a MiB
        // below it, the restorer fails and says where.
        set_rlimit_as(peak);
        let at = restore_from_memory(m, &d.pages, &stopped());
        set_rlimit_as(peak - MIB);
        let below = restore_from_memory(m, &d.pages, &stopped());
        set_rlimit_as(libc::RLIM_INFINITY);
        let c = at.expect("restore under an RLIMIT_AS of its peak");
        kill(c.pid);
        let e = below.expect_err("restored below its peak").to_string();
        eprintln!("xz -9 under RLIMIT_AS {peak} (its peak): restored; a MiB below: {e}");
        assert!(
            e.contains("restorer step") && e.contains("Cannot allocate memory"),
            "{e}"
        );
    });
    assert!(x.mapped.bytes > x.caller, "xz: not the case meant");
    // The VMAs are mapped while the region holds the contents not yet
    // moved out of it: the estimate counts all of them, so it is over by
    // at most the contents (and the allowance).
    assert!(x.seen <= x.estimate, "xz: peak beyond the estimate");
    assert!(
        x.estimate - x.seen < x.pages + 2 * MIB,
        "xz: estimate far off"
    );
}
