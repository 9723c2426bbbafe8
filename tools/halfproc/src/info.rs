// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `halfproc info`: the detected backend, which semantics hold, and a probe.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};

use clap::Args;
use halfproc::backend::{Backend, Request};
use halfproc::{Member, Set, SetConfig};

#[derive(Args)]
pub struct InfoArgs {
    /// Backend to use: auto (default: $HALFPROC_BACKEND or detection), kernel, portable.
    #[arg(long)]
    backend: Option<String>,
    /// Also create a set and check it works (member, shared memory, lock, dmread).
    #[arg(long)]
    probe: bool,
}

pub fn run(a: InfoArgs) -> ExitCode {
    let backend = match a.backend.as_deref() {
        Some(s) => s.parse::<Request>().and_then(Backend::select),
        None => Backend::from_env(),
    };
    let backend = match backend {
        Ok(b) => b,
        Err(e) => {
            eprintln!("halfproc: {e}");
            return ExitCode::from(2);
        }
    };
    println!("backend: {}", backend.kind());
    println!("reason: {}", backend.reason());
    println!(
        "kernel module: {}",
        if Backend::kernel_available() {
            "loaded"
        } else {
            "not loaded"
        }
    );
    println!("semantics:");
    for s in backend.semantics() {
        println!(
            "  [{}] {:<44} {}",
            if s.holds { "x" } else { " " },
            s.name,
            s.note
        );
    }
    if !a.probe {
        return ExitCode::SUCCESS;
    }
    match probe(&backend) {
        Ok(()) => {
            println!("probe: ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("probe: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

static PRIVATE: AtomicU64 = AtomicU64::new(0x5eed);

fn probe_member(cell: &halfproc::sync::Mutex<u64>) -> i32 {
    *cell
        .lock()
        .unwrap_or_else(|e| e.into_inner().expect("member of the set")) += 41;
    0
}

fn probe(backend: &Backend) -> Result<(), Box<dyn std::error::Error>> {
    let req = Request::Exactly(backend.kind());
    let set = Set::init(SetConfig::from_env()?.backend(req))?;
    println!(
        "probe: arena {:#x} + {} MiB, creator pid {}",
        set.base() as usize,
        set.size() >> 20,
        set.creator_pid()
    );
    let cell: &'static halfproc::sync::Mutex<u64> = halfproc::SharedBox::leak(
        halfproc::alloc::shared_box(halfproc::sync::Mutex::new(1u64))?,
    );
    let m = Member::spawn(set, move || probe_member(cell))?;
    let st = m.join()?;
    let v = *cell.lock().map_err(|e| e.to_string())?;
    println!("probe: member {st}, shared counter {v}");
    if !st.success() || v != 42 {
        return Err("member did not update shared memory".into());
    }
    let mut buf = [0u8; 8];
    let n = halfproc::dmread(set.creator_pid(), PRIVATE.as_ptr() as usize, 8, &mut buf)?;
    PRIVATE.fetch_add(0, Ordering::Relaxed);
    println!("probe: dmread copied {n} bytes");
    if u64::from_ne_bytes(buf) != 0x5eed {
        return Err("dmread returned wrong bytes".into());
    }
    Ok(())
}
