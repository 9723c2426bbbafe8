// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Double copy through shared memory, as MPI intra-node transports do
//! (the paper's "doublecopy"; MVAPICH2/Open MPI shared-memory paths).
//!
//! * `double-copy`: one shot. `p` copies all of `d` into a bounce buffer of
//!   the full size, rings `head`; `p'` copies it into its private buffer,
//!   then checksums. The two copies run one after the other.
//! * `double-copy-pipelined`: a ring of [`SLOTS`] chunks. `p` copies chunk
//!   `k` into slot `k % SLOTS` and advances `head`; `p'` copies slot `k` out,
//!   advances `tail` (freeing the slot), and checksums the chunk while it is
//!   still in cache. On two cores the two copies overlap, so each core's
//!   copy bandwidth is used at once.
//!
//! The bounce memory is `MAP_SHARED` anonymous memory created before the
//! reader is spawned (no `/dev/shm` needed).

use super::{private_buffer, Halves, Link, Reader, Writer, POISON};
use crate::error::Result;
use crate::pattern::{checksum, Checksum};
use halfproc_sys::Region;
use std::rc::Rc;

/// Slots of the pipelined ring.
pub const SLOTS: usize = 8;

struct BounceWriter {
    bounce: Rc<Region>,
    chunk: Option<usize>,
    buf: Option<Region>,
}

struct BounceReader {
    bounce: Rc<Region>,
    chunk: Option<usize>,
    buf: Option<Region>,
}

fn halves(bounce: Region, chunk: Option<usize>) -> Halves {
    let bounce = Rc::new(bounce);
    Halves {
        writer: Box::new(BounceWriter {
            bounce: bounce.clone(),
            chunk,
            buf: None,
        }),
        reader: Box::new(BounceReader {
            bounce,
            chunk,
            buf: None,
        }),
    }
}

/// One-shot double copy with a bounce buffer of `max` bytes.
pub fn one_shot(max: usize) -> Result<Halves> {
    let mut bounce = Region::shared_anon(max)?;
    bounce.prefault_write();
    Ok(halves(bounce, None))
}

/// Pipelined double copy through [`SLOTS`] chunks of `chunk` bytes.
pub fn pipelined(chunk: usize) -> Result<Halves> {
    let mut bounce = Region::shared_anon(SLOTS * chunk)?;
    bounce.prefault_write();
    Ok(halves(bounce, Some(chunk)))
}

/// Pointer to the bounce memory for writing.
///
/// The bounce buffer is written by `p` and read by `p'`; the head/tail
/// protocol keeps a slot from being written and read at the same time.
fn bounce_mut(r: &Region) -> *mut u8 {
    r.addr() as *mut u8
}

impl Writer for BounceWriter {
    fn init(&mut self, max: usize, _link: &Link<'_>) -> Result<()> {
        self.buf = Some(private_buffer(max)?);
        Ok(())
    }

    fn source(&mut self, size: usize) -> &mut [u8] {
        &mut self.buf.as_mut().expect("init before source").bytes_mut()[..size]
    }

    fn send(&mut self, size: usize, link: &Link<'_>) -> Result<()> {
        let d = &self.buf.as_ref().expect("init before send").bytes()[..size];
        let b = bounce_mut(&self.bounce);
        match self.chunk {
            None => {
                // SAFETY: the bounce region holds `max >= size` bytes; the
                // reader does not touch it until `head` is rung below.
                unsafe { std::ptr::copy_nonoverlapping(d.as_ptr(), b, size) };
                link.ctl.head.set(1);
            }
            Some(chunk) => {
                for (k, piece) in d.chunks(chunk).enumerate() {
                    if k >= SLOTS {
                        // Slot k % SLOTS is free once chunk k - SLOTS is out.
                        link.wait_tail((k + 1 - SLOTS) as u32)?;
                    }
                    // SAFETY: slot `k % SLOTS` lies inside the ring
                    // (`SLOTS * chunk` bytes) and the reader is done with it
                    // (tail >= k + 1 - SLOTS).
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            piece.as_ptr(),
                            b.add((k % SLOTS) * chunk),
                            piece.len(),
                        )
                    };
                    link.ctl.head.set(k as u32 + 1);
                }
            }
        }
        Ok(())
    }
}

impl Reader for BounceReader {
    fn init(&mut self, max: usize, _link: &Link<'_>) -> Result<()> {
        self.bounce.prefault_read();
        self.buf = Some(private_buffer(max)?);
        Ok(())
    }

    fn prepare(&mut self, size: usize) -> Result<()> {
        self.buf.as_mut().expect("init before prepare").bytes_mut()[..size].fill(POISON);
        Ok(())
    }

    fn receive(&mut self, size: usize, link: &Link<'_>) -> Result<u64> {
        let buf = &mut self.buf.as_mut().expect("init before receive").bytes_mut()[..size];
        let bounce = self.bounce.addr() as *const u8;
        match self.chunk {
            None => {
                link.wait_head(1)?;
                // SAFETY: the writer filled `size <= max` bytes of the bounce
                // buffer before ringing `head` (acquired above).
                buf.copy_from_slice(unsafe { std::slice::from_raw_parts(bounce, size) });
                Ok(checksum(buf))
            }
            Some(chunk) => {
                let mut sum = Checksum::new();
                for (k, piece) in buf.chunks_mut(chunk).enumerate() {
                    link.wait_head(k as u32 + 1)?;
                    // SAFETY: slot `k % SLOTS` is inside the ring, and the
                    // writer filled it before ringing `head` (acquired above);
                    // it does not touch it again before `tail` passes `k`.
                    let slot = unsafe {
                        std::slice::from_raw_parts(bounce.add((k % SLOTS) * chunk), piece.len())
                    };
                    piece.copy_from_slice(slot);
                    link.ctl.tail.set(k as u32 + 1);
                    sum.update(piece);
                }
                Ok(sum.finish())
            }
        }
    }
}
