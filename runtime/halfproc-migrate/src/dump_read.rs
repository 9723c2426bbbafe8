//! Reading a dump's page contents into the in-memory image, by one or more
//! reader threads. The contents are cut into pieces of at most 2 MiB, in
//! image order; the threads take them one at a time from a shared queue,
//! read each straight to its offset and hash it at once, while it is in
//! the cache; the pieces' CRC-32s are combined in image order, so the
//! checksum is the one a single pass would give.
//!
//! One thread copies at about a third of memcpy speed here (the reader
//! pins each 4 KiB page of the target and faults in the image's pages):
//! that work is per page and parallel, so more threads shorten the frozen
//! time on an idle machine. [`set_reader_threads`] (or
//! `HALFPROC_DUMP_THREADS`) chooses; the default is the CPUs this process
//! may run on, at most [`MAX_THREADS`], and one thread for an image under
//! [`PARALLEL_MIN`].

use crate::mem::MemoryReader;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The most reader threads a dump starts.
pub const MAX_THREADS: usize = 8;
/// Images smaller than this are read by one thread.
pub const PARALLEL_MIN: u64 = 16 << 20;

/// 0: not chosen yet (environment, then the CPU count).
static THREADS: AtomicUsize = AtomicUsize::new(0);

/// Sets how many threads read a large image (clamped to 1..=[`MAX_THREADS`]).
pub fn set_reader_threads(n: usize) {
    THREADS.store(n.clamp(1, MAX_THREADS), Ordering::Relaxed);
}

/// How many threads read an image of `total` bytes.
pub fn reader_threads(total: u64) -> usize {
    if total < PARALLEL_MIN {
        return 1;
    }
    match THREADS.load(Ordering::Relaxed) {
        0 => {
            let n = std::env::var("HALFPROC_DUMP_THREADS")
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            set_reader_threads(n);
            THREADS.load(Ordering::Relaxed)
        }
        n => n,
    }
}

/// 0: not chosen yet (environment), 1: off, 2: on.
static PREFAULT: AtomicUsize = AtomicUsize::new(0);

/// Whether a dump into memory faults in its image's memory before it stops
/// the target (default: yes; `HALFPROC_DUMP_PREFAULT=0` says no).
pub fn set_prefault(on: bool) {
    PREFAULT.store(if on { 2 } else { 1 }, Ordering::Relaxed);
}

/// See [`set_prefault`].
pub fn prefault_enabled() -> bool {
    match PREFAULT.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var("HALFPROC_DUMP_PREFAULT").map_or(true, |v| v != "0");
            set_prefault(on);
            on
        }
        v => v == 2,
    }
}

/// One read: `len` bytes of the target at `addr` go to `off` in the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    pub addr: u64,
    pub off: u64,
    pub len: u64,
    /// Which run (index into the caller's list) it belongs to, for errors.
    pub run: usize,
}

/// A failed read: the piece and the error.
pub(crate) struct ReadError {
    pub piece: Piece,
    pub err: io::Error,
}

/// Reads every piece into `image` (pieces are end to end from offset 0,
/// in order, covering all of `image`) with `threads` threads; returns the
/// CRC-32 of `image`. The first error (in image order) wins.
///
/// The threads take the pieces in image order, one at a time, from a
/// shared queue rather than in fixed shares: on a machine whose cores are
/// also busy with other work, a thread that is not scheduled for a while
/// no longer holds up the dump with the rest of its share. Each piece's
/// CRC-32 is kept by its index and the CRCs are combined in image order.
/// After a failed read no thread takes another piece; every piece before
/// the failed one was taken already and finishes, so the error of the
/// first failing piece in image order is the one reported.
pub(crate) fn read_pieces(
    reader: &dyn MemoryReader,
    pieces: &[Piece],
    image: &mut [u8],
    threads: usize,
) -> Result<u32, ReadError> {
    let mut bufs = Vec::with_capacity(pieces.len());
    let mut rest = image;
    for p in pieces {
        let (mine, tail) = rest.split_at_mut(p.len as usize);
        rest = tail;
        bufs.push(mine);
    }
    let queue = Mutex::new(pieces.iter().copied().zip(bufs).enumerate());
    let failed = AtomicBool::new(false);
    let work = || -> Vec<(usize, Result<crc32fast::Hasher, ReadError>)> {
        let mut done = Vec::new();
        loop {
            if failed.load(Ordering::Relaxed) {
                break;
            }
            let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
            let Some((i, (piece, dst))) = next else { break };
            let r = reader.read(piece.addr, dst).map(|()| {
                let mut crc = crc32fast::Hasher::new();
                crc.update(dst);
                crc
            });
            if r.is_err() {
                failed.store(true, Ordering::Relaxed);
            }
            done.push((i, r.map_err(|err| ReadError { piece, err })));
        }
        done
    };
    let n = threads.clamp(1, pieces.len().max(1));
    let mut results: Vec<(usize, Result<crc32fast::Hasher, ReadError>)> = if n == 1 {
        work()
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..n).map(|_| scope.spawn(work)).collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        })
    };
    results.sort_unstable_by_key(|&(i, _)| i);
    let mut total = crc32fast::Hasher::new();
    for (_, r) in results {
        total.combine(&r?);
    }
    Ok(total.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target whose byte at address `a` is `f(a)`; fails at `bad`.
    struct Fake {
        bad: Option<u64>,
        calls: Mutex<Vec<u64>>,
    }

    fn byte(a: u64) -> u8 {
        (a.wrapping_mul(2654435761) >> 13) as u8
    }

    impl MemoryReader for Fake {
        fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
            self.calls.lock().unwrap().push(addr);
            if self.bad == Some(addr) {
                return Err(io::Error::from_raw_os_error(libc::EFAULT));
            }
            for (i, b) in buf.iter_mut().enumerate() {
                *b = byte(addr + i as u64);
            }
            Ok(())
        }
    }

    fn pieces(lens: &[u64]) -> Vec<Piece> {
        let mut off = 0;
        lens.iter()
            .enumerate()
            .map(|(i, &len)| {
                let p = Piece {
                    addr: 0x10_0000 * (i as u64 + 1),
                    off,
                    len,
                    run: i,
                };
                off += len;
                p
            })
            .collect()
    }

    /// Piece 0 is read only once every other piece has been: a reader
    /// with a fixed share of the pieces would wait for it forever (here:
    /// 10 s, then the read fails); threads that take pieces from a queue
    /// read all the others meanwhile.
    struct Stalled {
        pieces: usize,
        calls: Mutex<usize>,
        more: std::sync::Condvar,
    }

    impl MemoryReader for Stalled {
        fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
            let mut calls = self.calls.lock().unwrap();
            *calls += 1;
            self.more.notify_all();
            if addr == 0x10_0000 {
                let (calls, wait) = self
                    .more
                    .wait_timeout_while(calls, std::time::Duration::from_secs(10), |c| {
                        *c < self.pieces
                    })
                    .unwrap();
                if wait.timed_out() {
                    return Err(io::Error::other(format!(
                        "{} of {} pieces read",
                        *calls, self.pieces
                    )));
                }
            }
            buf.fill(1);
            Ok(())
        }
    }

    #[test]
    fn a_stalled_thread_does_not_hold_back_the_other_pieces() {
        let ps = pieces(&[4096; 16]);
        let r = Stalled {
            pieces: ps.len(),
            calls: Mutex::new(0),
            more: std::sync::Condvar::new(),
        };
        let mut image = vec![0u8; 16 * 4096];
        match read_pieces(&r, &ps, &mut image, 2) {
            Ok(crc) => assert_eq!(crc, crc32fast::hash(&[1u8; 16 * 4096])),
            Err(e) => panic!("{}", e.err),
        }
    }

    #[test]
    fn any_thread_count_gives_the_bytes_and_crc_of_one_pass() {
        let ps = pieces(&[4096, 3 * 4096, 2 << 20, 4096, 5 * 4096, 2 << 20, 4096]);
        let total: u64 = ps.iter().map(|p| p.len).sum();
        let mut want = vec![0u8; total as usize];
        for p in &ps {
            for i in 0..p.len {
                want[(p.off + i) as usize] = byte(p.addr + i);
            }
        }
        for n in 1..=5 {
            let fake = Fake {
                bad: None,
                calls: Mutex::new(Vec::new()),
            };
            let mut image = vec![0u8; total as usize];
            let crc = read_pieces(&fake, &ps, &mut image, n).ok().unwrap();
            assert!(image == want, "{n} threads: contents differ");
            assert_eq!(crc, crc32fast::hash(&want), "{n} threads");
            assert_eq!(fake.calls.lock().unwrap().len(), ps.len());
        }
    }

    #[test]
    fn the_first_failing_piece_in_image_order_is_reported() {
        let ps = pieces(&[4096; 8]);
        for n in [1, 2, 4] {
            let fake = Fake {
                bad: Some(ps[5].addr),
                calls: Mutex::new(Vec::new()),
            };
            let mut image = vec![0u8; 8 * 4096];
            let e = read_pieces(&fake, &ps, &mut image, n).err().unwrap();
            assert_eq!(e.piece, ps[5]);
            assert_eq!(e.err.raw_os_error(), Some(libc::EFAULT));
        }
    }

    #[test]
    fn small_images_use_one_thread() {
        assert_eq!(reader_threads(PARALLEL_MIN - 1), 1);
        set_reader_threads(3);
        assert_eq!(reader_threads(PARALLEL_MIN), 3);
        set_reader_threads(100);
        assert_eq!(reader_threads(1 << 30), MAX_THREADS);
        set_reader_threads(0);
        assert_eq!(reader_threads(1 << 30), 1);
    }
}
