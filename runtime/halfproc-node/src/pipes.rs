//! The pipes a node daemon relays a program's stdio through: new ones for
//! a program it starts, or for the relayed fds of an image it restores.

use crate::proto::Stream;
use halfproc_migrate::image::Manifest;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

fn pipe_pair() -> Result<(OwnedFd, OwnedFd), String> {
    halfproc_sys::fd::pipe(libc::O_CLOEXEC).map_err(|e| e.to_string())
}

fn ino(fd: &OwnedFd) -> u64 {
    // SAFETY: fstat into a zeroed stat buffer we own.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd.as_raw_fd(), &mut st);
        st.st_ino
    }
}

/// The daemon's ends of the relayed pipes and the process's ends.
pub(crate) struct Pipes {
    pub(crate) stdin: Option<OwnedFd>,
    pub(crate) outputs: Vec<(Stream, OwnedFd)>,
    /// (fd number in the process, its end)
    pub(crate) child: Vec<(i32, OwnedFd)>,
    pub(crate) inos: Vec<u64>,
}

pub(crate) fn spawn_pipes() -> Result<Pipes, String> {
    let (r0, w0) = pipe_pair()?;
    let (r1, w1) = pipe_pair()?;
    let (r2, w2) = pipe_pair()?;
    Ok(Pipes {
        inos: vec![ino(&r0), ino(&r1), ino(&r2)],
        stdin: Some(w0),
        outputs: vec![(1, r1), (2, r2)],
        child: vec![(0, r0), (1, w1), (2, w2)],
    })
}

/// New pipes for the relayed fds of images (one, or a tree's): one per
/// pipe of the images (by its inode there: a tree's processes share
/// them); a read end is stdin (its unread bytes written first), a write
/// end is stderr if its lowest fd is 2, else stdout. Also: each original
/// pipe's inode -> the process's end of its new pipe.
pub(crate) fn image_pipes<M: std::borrow::Borrow<Manifest>>(
    ms: &[M],
) -> Result<(Pipes, BTreeMap<u64, RawFd>), String> {
    let mut p = Pipes {
        stdin: None,
        outputs: Vec::new(),
        child: Vec::new(),
        inos: Vec::new(),
    };
    let mut ends = BTreeMap::new();
    let fds = ms.iter().flat_map(|m| &m.borrow().fds);
    for f in fds.filter(|f| f.dup_of.is_none()) {
        let Some(r) = &f.relayed else { continue };
        if ends.contains_key(&r.ino) {
            continue;
        }
        let (rd, wr) = pipe_pair()?;
        p.inos.push(ino(&rd));
        if r.write {
            p.outputs.push((if f.fd == 2 { 2 } else { 1 }, rd));
            p.child.push((f.fd, wr));
        } else {
            if p.stdin.is_some() {
                return Err(format!("fd {}: a second relayed stdin pipe", f.fd));
            }
            if !r.unread.is_empty() {
                // SAFETY: fcntl on our own pipe, room for the carried bytes.
                unsafe {
                    libc::fcntl(
                        wr.as_raw_fd(),
                        libc::F_SETPIPE_SZ,
                        r.unread.len().max(65536) as i32,
                    )
                };
                File::from(wr.try_clone().map_err(|e| e.to_string())?)
                    .write_all(&r.unread)
                    .map_err(|e| format!("refill stdin pipe: {e}"))?;
            }
            p.stdin = Some(wr);
            p.child.push((f.fd, rd));
        }
        ends.insert(r.ino, p.child.last().map_or(-1, |c| c.1.as_raw_fd()));
    }
    Ok((p, ends))
}
