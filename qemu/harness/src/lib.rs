// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The halfproc QEMU harness: build an initramfs, boot a kernel under QEMU,
//! and judge the run.
//!
//! Modelled on kunit.py and virtme-ng: the exact qemu command is printed, a
//! timeout is enforced, the guest's exit status comes out over a dedicated
//! serial port, a panic is a failure, and the console is scanned for oops,
//! BUG, WARNING, KASAN, lockdep and similar reports, each of which fails the
//! run even when every test passed.
//!
//! # Layout
//!
//! - [`cpio`]: a `newc` archive writer for the initramfs;
//! - [`console`]: the programs' lines, with printk records taken out;
//! - [`scan`]: the console scanner;
//! - [`tap`]: TAP lines;
//! - [`programs`]: which program printed which line (`/init`'s markers);
//! - [`breaches`]: each program held to its plan, exit status and the
//!   expected list;
//! - [`verdict`]: the verdict of a run;
//! - [`results`]: `*.results.json` and `*.tap`;
//! - [`qemu`]: the QEMU invocation and timeout;
//! - [`pair`]: two guests at once on a virtual network.

pub mod breaches;
pub mod console;
pub mod cpio;
pub mod pair;
pub mod programs;
pub mod qemu;
pub mod results;
pub mod scan;
pub mod tap;
pub mod verdict;
