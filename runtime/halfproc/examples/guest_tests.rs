// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The integration tests as a standalone binary for the QEMU guest.
//!
//! Build it static and run it with the backend forced:
//!
//! ```text
//! cargo build --example guest_tests --target x86_64-unknown-linux-musl
//! HALFPROC_BACKEND=kernel ./guest_tests [FILTER]
//! ```
//!
//! Prints TAP (`ok N - name` / `not ok N - name`) and a final
//! `N passed, N failed` line; exits 1 if any case failed.

#[path = "../tests/cases/mod.rs"]
mod cases;

fn main() -> std::process::ExitCode {
    let set = cases::init();
    let filter = std::env::args().nth(1);
    if cases::run_tap(set, &cases::all(), filter.as_deref()) == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
