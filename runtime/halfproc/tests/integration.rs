// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Integration tests (harness = false): the set is created first thing in
//! `main`, while the process is single-threaded, as applications should.
//! Runs on the backend `HALFPROC_BACKEND` selects (default: detected).
//! `cargo test --test integration -- FILTER` runs the cases whose name
//! contains FILTER.

#[path = "cases/mod.rs"]
mod cases;

fn main() -> std::process::ExitCode {
    let set = cases::init();
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if cases::run_tap(set, &cases::all(), filter.as_deref()) == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
