//! File descriptors: pipes.

use crate::error::{Error, Result};
use nix::fcntl::OFlag;
use std::os::fd::OwnedFd;

/// `pipe2(flags)`: the read and the write end, owned. `flags` are
/// `O_CLOEXEC`, `O_NONBLOCK` and `O_DIRECT` bits (`libc::O_*`).
///
/// ```
/// let (r, w) = halfproc_sys::fd::pipe(libc::O_CLOEXEC).unwrap();
/// let mut w = std::fs::File::from(w);
/// std::io::Write::write_all(&mut w, b"x").unwrap();
/// let mut b = [0u8; 1];
/// std::io::Read::read_exact(&mut std::fs::File::from(r), &mut b).unwrap();
/// assert_eq!(&b, b"x");
/// ```
pub fn pipe(flags: libc::c_int) -> Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(OFlag::from_bits_truncate(flags))
        .map_err(|e| Error::from_errno("pipe2", e as i32))
}
