// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Gives the shared library the soname it is installed under
//! (`scripts/install`: `libhalfproc.so.<major>` -> `libhalfproc.so.<version>`).
fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhalfproc.so.{major}");
    println!("cargo:rerun-if-changed=build.rs");
}
