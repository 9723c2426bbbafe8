// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Byte-stream strategies: loopback TCP, `AF_UNIX` sockets, pipes, and
//! `vmsplice` into a pipe.
//!
//! The writer's `d` is in its private memory; the reader receives into its
//! own private buffer and checksums each piece right after `read` returns
//! it (what a real consumer of a stream does). Connections are set up once,
//! before the reader is spawned, and outside the timer.

use super::{private_buffer, Halves, Link, Reader, Writer, POISON};
use crate::error::{Error, Result};
use crate::os;
use crate::pattern::Checksum;
use halfproc_sys::Region;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The pipe buffer the pipe strategies ask for (`F_SETPIPE_SZ`), capped by
/// `/proc/sys/fs/pipe-max-size`.
pub const PIPE_BUFFER: usize = 1 << 20;

struct StreamWriter {
    fd: OwnedFd,
    vmsplice: bool,
    buf: Option<Region>,
}

struct StreamReader {
    fd: OwnedFd,
    what: &'static str,
    buf: Option<Region>,
}

fn halves(wfd: OwnedFd, rfd: OwnedFd, what: &'static str, vmsplice: bool) -> Halves {
    Halves {
        writer: Box::new(StreamWriter {
            fd: wfd,
            vmsplice,
            buf: None,
        }),
        reader: Box::new(StreamReader {
            fd: rfd,
            what,
            buf: None,
        }),
    }
}

/// A connected loopback TCP pair (writer side has `TCP_NODELAY`).
pub fn tcp() -> Result<Halves> {
    let io = |what: &'static str, e: std::io::Error| Error::io(what, e);
    // A literal address: no resolver (static binaries, minimal guests).
    let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let listener = std::net::TcpListener::bind(any).map_err(|e| io("bind(127.0.0.1:0)", e))?;
    let addr = listener.local_addr().map_err(|e| io("getsockname", e))?;
    let w = std::net::TcpStream::connect(addr).map_err(|e| io("connect(loopback)", e))?;
    let (r, _) = listener.accept().map_err(|e| io("accept", e))?;
    w.set_nodelay(true).map_err(|e| io("TCP_NODELAY", e))?;
    Ok(halves(w.into(), r.into(), "tcp", false))
}

/// A connected `AF_UNIX` stream pair.
pub fn unix() -> Result<Halves> {
    let (w, r) =
        std::os::unix::net::UnixStream::pair().map_err(|e| Error::io("socketpair(AF_UNIX)", e))?;
    Ok(halves(w.into(), r.into(), "unix socket", false))
}

/// An anonymous pipe with a [`PIPE_BUFFER`] buffer; `vmsplice` selects how
/// the writer fills it.
pub fn pipe(vmsplice: bool) -> Result<Halves> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::last_os("pipe2"));
    }
    // SAFETY: two fresh descriptors from pipe2 that nothing else owns.
    let (w, r) = unsafe { (OwnedFd::from_raw_fd(fds[1]), OwnedFd::from_raw_fd(fds[0])) };
    let max = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(PIPE_BUFFER);
    // A smaller pipe only makes the strategy slower, so failure here is not
    // fatal: the default 64 KiB pipe still moves the bytes.
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        libc::fcntl(
            w.as_raw_fd(),
            libc::F_SETPIPE_SZ,
            PIPE_BUFFER.min(max) as libc::c_int,
        )
    };
    let what = if vmsplice { "vmsplice pipe" } else { "pipe" };
    Ok(halves(w, r, what, vmsplice))
}

impl Writer for StreamWriter {
    fn init(&mut self, max: usize, _link: &Link<'_>) -> Result<()> {
        self.buf = Some(private_buffer(max)?);
        Ok(())
    }

    fn source(&mut self, size: usize) -> &mut [u8] {
        &mut self.buf.as_mut().expect("init before source").bytes_mut()[..size]
    }

    fn send(&mut self, size: usize, _link: &Link<'_>) -> Result<()> {
        let d = &self.buf.as_ref().expect("init before send").bytes()[..size];
        if self.vmsplice {
            // The pipe keeps references to d's pages until the reader has
            // read them; the protocol only rewrites d after `done`.
            os::vmsplice_all(self.fd.as_raw_fd(), d)
        } else {
            os::write_all(self.fd.as_raw_fd(), d, "stream")
        }
    }
}

impl Reader for StreamReader {
    fn init(&mut self, max: usize, _link: &Link<'_>) -> Result<()> {
        self.buf = Some(private_buffer(max)?);
        Ok(())
    }

    fn prepare(&mut self, size: usize) -> Result<()> {
        self.buf.as_mut().expect("init before prepare").bytes_mut()[..size].fill(POISON);
        Ok(())
    }

    fn receive(&mut self, size: usize, _link: &Link<'_>) -> Result<u64> {
        let buf = &mut self.buf.as_mut().expect("init before receive").bytes_mut()[..size];
        let mut sum = Checksum::new();
        let mut off = 0;
        while off < size {
            let n = os::read_some(self.fd.as_raw_fd(), &mut buf[off..], self.what)?;
            if n == 0 {
                return Err(Error::Verify(format!(
                    "{}: stream ended after {off} of {size} bytes",
                    self.what
                )));
            }
            sum.update(&buf[off..off + n]);
            off += n;
        }
        Ok(sum.finish())
    }
}
