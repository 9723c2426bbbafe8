// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `halfproc-bench copy|mm [options]`: see [`halfproc_bench`].

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(halfproc_bench::main_with_args(&args));
}
