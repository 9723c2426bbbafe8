// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Gives the shared library its soname so `-lhalfproc_c` links by name.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhalfproc_c.so");
    println!("cargo:rerun-if-changed=build.rs");
}
