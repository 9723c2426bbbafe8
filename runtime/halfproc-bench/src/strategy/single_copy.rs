// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Single-copy strategies: the kernel copies `d` straight from `p`'s private
//! memory into `p'`'s, with `dmread`/`dmwrite` (kernel backend) or
//! `process_vm_readv`/`process_vm_writev` (cross-memory attach, any kernel).
//!
//! * pull, one shot (`dmread`, `cma`): `p'` copies all of `d`, then sums it.
//!   At 2^28 bytes the sum re-reads 256 MiB from DRAM after the copy.
//! * pull, pipelined (`dmread-pipelined`, `cma-pull-pipelined`): `p'` copies
//!   one chunk and sums it while it is in cache. One core does all the work,
//!   but `d` crosses the memory bus once less.
//! * push, pipelined (`dmwrite-pipelined`, `cma-push-pipelined`): `p` copies
//!   chunk `k` into `p'`'s buffer and advances `head`; `p'` sums chunk `k`
//!   while `p` copies chunk `k + 1`. The copy and the sum run on two cores
//!   at once: the single-copy counterpart of `double-copy-pipelined`.
//! * push-pull (`cma-push-pull`, `dm-push-pull`): both cores copy. Chunks
//!   are claimed from a shared counter; `p` pushes the chunks it claims and
//!   flags each one done; `p'` sums the done chunks in order and, whenever
//!   the next one is not ready, claims and pulls a chunk itself and sums it
//!   at once. The partial checksums are combined in order at the end
//!   ([`Checksum::combine`]). A single copy whose copying work is split
//!   over both cores' memory bandwidth, and balanced dynamically: the reader,
//!   which also sums everything, copies less.
//!
//! The writer publishes the address of `d` and the reader the address of its
//! buffer in the control block during `init`.

use super::{private_buffer, Halves, Link, Reader, Writer, POISON};
use crate::error::{Error, Result};
use crate::pattern::{checksum, Checksum};
use halfproc_sys::copy::{self, Dir};
use halfproc_sys::Region;
use std::rc::Rc;
use std::sync::atomic::{AtomicU8, Ordering};

/// The kernel interface that does the copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// `process_vm_readv`/`process_vm_writev`.
    Cma,
    /// `dmread`/`dmwrite`.
    Dm,
}

impl Engine {
    /// Copy `len` bytes between our `local` and `remote` in `pid`, looping
    /// over partial transfers and retrying after `EINTR`.
    ///
    /// # Safety
    ///
    /// `local` must be valid for `len` bytes in the direction of `dir`.
    unsafe fn copy(
        self,
        dir: Dir,
        pid: i32,
        remote: usize,
        local: *mut u8,
        len: usize,
    ) -> Result<()> {
        let mut done = 0usize;
        while done < len {
            let l = [copy::iovec(local as usize + done, len - done)];
            let r = [copy::iovec(remote + done, len - done)];
            // SAFETY: `l` is the rest of the caller's buffer, valid by our
            // contract; the kernel checks the remote side.
            let n = unsafe {
                match self {
                    Engine::Cma => copy::cma(dir, pid, &l, &r),
                    Engine::Dm => copy::dm(dir, pid, &l, &r),
                }
            };
            match n {
                Err(e) if e.errno() == libc::EINTR => continue,
                Err(e) => return Err(e.into()),
                Ok(0) => return Err(Error::Verify(format!("{self:?} {dir:?}: copied 0 bytes"))),
                Ok(n) => done += n,
            }
        }
        Ok(())
    }
}

struct PrivateWriter {
    engine: Engine,
    mode: Mode,
    buf: Option<Region>,
    done: Option<Rc<Region>>,
}

struct PrivateReader {
    engine: Engine,
    mode: Mode,
    buf: Option<Region>,
    done: Option<Rc<Region>>,
    /// Per-chunk partial sums and owners (push-pull), allocated in `init`.
    parts: Vec<Checksum>,
    mine: Vec<bool>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    PullOneShot,
    PullPipelined,
    Push,
    PushPull,
}

/// Flag `k` of the shared per-chunk "done" array.
fn flag(done: &Region, k: usize) -> &AtomicU8 {
    assert!(k < done.len());
    // SAFETY: `k` is inside the shared region, which lives as long as
    // `done`; AtomicU8 has the size and alignment of u8, and the region is
    // only accessed through atomics while both processes run.
    unsafe { &*(done.addr() as *const AtomicU8).add(k) }
}

/// Reader pulls (`pipelined`: chunk by chunk).
pub fn pull(engine: Engine, pipelined: bool) -> Halves {
    let mode = if pipelined {
        Mode::PullPipelined
    } else {
        Mode::PullOneShot
    };
    halves(engine, mode, None)
}

/// Writer pushes chunk by chunk, reader sums concurrently.
pub fn push(engine: Engine) -> Halves {
    halves(engine, Mode::Push, None)
}

/// Both copy, claiming chunks; see the module documentation.
pub fn push_pull(engine: Engine, max: usize, chunk: usize) -> Result<Halves> {
    let done = Rc::new(Region::shared_anon(max.div_ceil(chunk))?);
    Ok(halves(engine, Mode::PushPull, Some(done)))
}

fn halves(engine: Engine, mode: Mode, done: Option<Rc<Region>>) -> Halves {
    Halves {
        writer: Box::new(PrivateWriter {
            engine,
            mode,
            buf: None,
            done: done.clone(),
        }),
        reader: Box::new(PrivateReader {
            engine,
            mode,
            buf: None,
            done,
            parts: Vec::new(),
            mine: Vec::new(),
        }),
    }
}

impl Writer for PrivateWriter {
    fn init(&mut self, max: usize, link: &Link<'_>) -> Result<()> {
        let buf = private_buffer(max)?;
        link.ctl
            .src_addr
            .store(buf.addr() as u64, Ordering::Release);
        self.buf = Some(buf);
        Ok(())
    }

    fn source(&mut self, size: usize) -> &mut [u8] {
        &mut self.buf.as_mut().expect("init before source").bytes_mut()[..size]
    }

    fn send(&mut self, size: usize, link: &Link<'_>) -> Result<()> {
        if self.mode == Mode::PushPull {
            return self.send_claimed(size, link);
        }
        if self.mode != Mode::Push {
            return Ok(());
        }
        let d = self.buf.as_ref().expect("init before send").bytes()[..size].as_ptr();
        let dst = link.ctl.dst_addr.load(Ordering::Acquire) as usize;
        let pid = link.reader_pid();
        let mut off = 0;
        let mut k = 0u32;
        while off < size {
            let n = link.chunk.min(size - off);
            // SAFETY: `d + off .. + n` lies inside our private buffer, which
            // is only read here (Dir::Write reads local memory).
            unsafe {
                self.engine
                    .copy(Dir::Write, pid, dst + off, d.add(off).cast_mut(), n)?
            };
            k += 1;
            link.ctl.head.set(k);
            off += n;
        }
        Ok(())
    }
}

impl PrivateWriter {
    /// Push-pull, writer side: claim, push, flag done, ring `head`.
    fn send_claimed(&mut self, size: usize, link: &Link<'_>) -> Result<()> {
        let d = self.buf.as_ref().expect("init before send").bytes()[..size].as_ptr();
        let done = self.done.as_ref().expect("push-pull has flags");
        let dst = link.ctl.dst_addr.load(Ordering::Acquire) as usize;
        let pid = link.reader_pid();
        let n = size.div_ceil(link.chunk);
        loop {
            let k = link.ctl.claim.take() as usize;
            if k >= n {
                return Ok(());
            }
            let off = k * link.chunk;
            let len = link.chunk.min(size - off);
            // SAFETY: `d + off .. + len` lies inside our private buffer,
            // only read here.
            unsafe {
                self.engine
                    .copy(Dir::Write, pid, dst + off, d.add(off).cast_mut(), len)?
            };
            flag(done, k).store(1, Ordering::Release);
            link.ctl.head.ring();
        }
    }
}

impl PrivateReader {
    /// Push-pull, reader side: see the module documentation.
    fn receive_claimed(&mut self, size: usize, link: &Link<'_>) -> Result<u64> {
        let base = self
            .buf
            .as_mut()
            .expect("init before receive")
            .bytes_mut()
            .as_mut_ptr();
        let done = self.done.as_ref().expect("push-pull has flags");
        let src = link.ctl.src_addr.load(Ordering::Acquire) as usize;
        let pid = link.writer_pid();
        let chunk = link.chunk;
        let n = size.div_ceil(chunk);
        let span = |k: usize| (k * chunk, chunk.min(size - k * chunk));
        let view = |off: usize, len: usize| {
            // SAFETY: `off + len <= size <= max`, inside our buffer; a chunk
            // is only read after its copy finished (ours, or the writer's,
            // acquired through its done flag).
            unsafe { std::slice::from_raw_parts(base.add(off), len) }
        };
        self.mine[..n].fill(false);
        let mut next_sum = 0;
        loop {
            // Sum, in order, the writer's chunks that have landed.
            while next_sum < n {
                if !self.mine[next_sum] {
                    if flag(done, next_sum).load(Ordering::Acquire) == 0 {
                        break;
                    }
                    let (off, len) = span(next_sum);
                    let mut c = Checksum::new();
                    c.update(view(off, len));
                    self.parts[next_sum] = c;
                }
                next_sum += 1;
            }
            if next_sum == n {
                break;
            }
            // The next chunk is not there yet: copy one ourselves.
            let k = link.ctl.claim.take() as usize;
            if k < n {
                let (off, len) = span(k);
                // SAFETY: our buffer, writable, `off + len <= size`.
                unsafe {
                    self.engine
                        .copy(Dir::Read, pid, src + off, base.add(off), len)?
                };
                let mut c = Checksum::new();
                c.update(view(off, len));
                self.parts[k] = c;
                self.mine[k] = true;
                continue;
            }
            // Everything is claimed: wait for the writer's chunk. `head` is
            // read before the flag, and the writer sets the flag before it
            // rings, so a ring after our check changes `head`.
            let seen = link.ctl.head.get();
            if flag(done, next_sum).load(Ordering::Acquire) == 0 {
                link.ctl
                    .head
                    .wait_until(link.policy, link.alive, |v| v != seen)?;
            }
        }
        let first = self.parts[0].clone();
        let sum = self.parts[1..n].iter().fold(first, |acc, p| acc.combine(p));
        Ok(sum.finish())
    }
}

impl Reader for PrivateReader {
    fn init(&mut self, max: usize, link: &Link<'_>) -> Result<()> {
        let buf = private_buffer(max)?;
        link.ctl
            .dst_addr
            .store(buf.addr() as u64, Ordering::Release);
        self.buf = Some(buf);
        if self.mode == Mode::PushPull {
            let n = max.div_ceil(link.chunk);
            self.parts = vec![Checksum::new(); n];
            self.mine = vec![false; n];
        }
        Ok(())
    }

    fn prepare(&mut self, size: usize) -> Result<()> {
        self.buf.as_mut().expect("init before prepare").bytes_mut()[..size].fill(POISON);
        if let Some(done) = &self.done {
            for k in 0..done.len() {
                flag(done, k).store(0, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    fn receive(&mut self, size: usize, link: &Link<'_>) -> Result<u64> {
        if self.mode == Mode::PushPull {
            return self.receive_claimed(size, link);
        }
        let buf = &mut self.buf.as_mut().expect("init before receive").bytes_mut()[..size];
        let src = link.ctl.src_addr.load(Ordering::Acquire) as usize;
        let pid = link.writer_pid();
        match self.mode {
            Mode::PullOneShot => {
                // SAFETY: `buf` is our writable buffer of `size` bytes.
                unsafe {
                    self.engine
                        .copy(Dir::Read, pid, src, buf.as_mut_ptr(), size)?
                };
                Ok(checksum(buf))
            }
            Mode::PullPipelined => {
                let mut sum = Checksum::new();
                for (k, piece) in buf.chunks_mut(link.chunk).enumerate() {
                    let remote = src + k * link.chunk;
                    // SAFETY: `piece` is a writable part of our buffer.
                    unsafe {
                        self.engine
                            .copy(Dir::Read, pid, remote, piece.as_mut_ptr(), piece.len())?
                    };
                    sum.update(piece);
                }
                Ok(sum.finish())
            }
            Mode::PushPull => unreachable!("handled above"),
            Mode::Push => {
                let base = buf.as_ptr();
                let mut sum = Checksum::new();
                let mut off = 0;
                let mut k = 0u32;
                while off < size {
                    let n = link.chunk.min(size - off);
                    k += 1;
                    link.wait_head(k)?;
                    // SAFETY: a fresh view of bytes the writer's kernel copy
                    // finished before it rang `head` (acquired above); they
                    // are inside our buffer and nobody writes them any more
                    // in this repetition.
                    sum.update(unsafe { std::slice::from_raw_parts(base.add(off), n) });
                    off += n;
                }
                Ok(sum.finish())
            }
        }
    }
}
