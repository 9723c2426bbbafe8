//! Reading a dump's page contents into the in-memory image, by one or more
//! reader threads. The contents are cut into pieces of at most 2 MiB, in
//! image order; each thread takes a contiguous share of them (equal bytes),
//! reads every piece straight to its offset and hashes it at once, while
//! it is in the cache; the threads' CRC-32s are combined in order, so the
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
use std::sync::atomic::{AtomicUsize, Ordering};

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
pub(crate) fn read_pieces(
    reader: &dyn MemoryReader,
    pieces: &[Piece],
    image: &mut [u8],
    threads: usize,
) -> Result<u32, ReadError> {
    let shares = split(pieces, threads.max(1));
    let mut rest = image;
    let mut jobs = Vec::with_capacity(shares.len());
    for share in shares {
        let bytes: u64 = share.iter().map(|p| p.len).sum();
        let (mine, tail) = rest.split_at_mut(bytes as usize);
        rest = tail;
        jobs.push((share, mine));
    }
    let read_share = |share: &[Piece], buf: &mut [u8]| -> Result<crc32fast::Hasher, ReadError> {
        let base = share.first().map_or(0, |p| p.off);
        let mut crc = crc32fast::Hasher::new();
        for &piece in share {
            let at = (piece.off - base) as usize;
            let dst = &mut buf[at..at + piece.len as usize];
            reader
                .read(piece.addr, dst)
                .map_err(|err| ReadError { piece, err })?;
            crc.update(dst);
        }
        Ok(crc)
    };
    let results: Vec<Result<crc32fast::Hasher, ReadError>> = if jobs.len() == 1 {
        jobs.into_iter().map(|(s, b)| read_share(s, b)).collect()
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = jobs
                .into_iter()
                .map(|(s, b)| scope.spawn(move || read_share(s, b)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        })
    };
    let mut total = crc32fast::Hasher::new();
    for r in results {
        total.combine(&r?);
    }
    Ok(total.finalize())
}

/// Cuts `pieces` into `min(n, pieces.len())` contiguous, non-empty shares
/// of about equal bytes: share k ends where the k-th n-th of the bytes
/// falls, a piece going to the share that holds its middle.
fn split(pieces: &[Piece], n: usize) -> Vec<&[Piece]> {
    let n = n.min(pieces.len());
    let total: u64 = pieces.iter().map(|p| p.len).sum();
    let mut out = Vec::with_capacity(n);
    let (mut start, mut acc) = (0, 0u64);
    for k in 1..n {
        let target = total * k as u64 / n as u64;
        // At least one piece, and one left for each share after this one.
        let last = pieces.len() - (n - k);
        let mut end = start + 1;
        acc += pieces[start].len;
        while end < last && acc + pieces[end].len / 2 <= target {
            acc += pieces[end].len;
            end += 1;
        }
        out.push(&pieces[start..end]);
        start = end;
    }
    if start < pieces.len() {
        out.push(&pieces[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

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

    #[test]
    fn shares_are_contiguous_nonempty_and_balanced() {
        let ps = pieces(&[4096; 10]);
        for n in 1..=12 {
            let s = split(&ps, n);
            assert_eq!(s.len(), n.min(10), "n = {n}");
            assert!(s.iter().all(|x| !x.is_empty()));
            let joined: Vec<Piece> = s.iter().flat_map(|x| x.iter().copied()).collect();
            assert_eq!(joined, ps);
            let max = s.iter().map(|x| x.len()).max().unwrap();
            let min = s.iter().map(|x| x.len()).min().unwrap();
            assert!(max - min <= 1, "n = {n}: {max} vs {min}");
        }
        assert_eq!(split(&[], 4).len(), 0);
        assert_eq!(split(&pieces(&[8192, 4096 * 100]), 2).len(), 2);
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
