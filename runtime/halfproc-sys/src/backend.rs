// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Backend detection: is the patched kernel with the module here?
//!
//! The kernel backend exists when the `halfproc` module is loaded, which it
//! announces at [`KERNEL_MODULE_PATH`]; the choice a user makes is read from
//! [`BACKEND_ENV`]. The runtime's `Backend`/`BackendKind` (with the
//! semantics table and parsing errors of its public API) and the benchmarks
//! build on these.
//!
//! C header: `<linux/halfproc.h>` (see the `halfproc-uapi` crate).

use std::path::Path;

/// Where the module announces itself.
pub const KERNEL_MODULE_PATH: &str = "/sys/module/halfproc";

/// Environment variable that selects the backend (`auto`, `kernel`,
/// `portable`).
pub const BACKEND_ENV: &str = "HALFPROC_BACKEND";

/// Whether the kernel backend is present (the module is loaded).
///
/// # Examples
///
/// ```
/// let here = halfproc_sys::backend::kernel_available();
/// assert_eq!(here, std::path::Path::new("/sys/module/halfproc").exists());
/// ```
pub fn kernel_available() -> bool {
    Path::new(KERNEL_MODULE_PATH).exists()
}
