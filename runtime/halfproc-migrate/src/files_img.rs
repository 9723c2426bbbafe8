//! `files.img`: the contents of an image's private file mappings, as the
//! checkpointed process saw them, for a restore where a mapped file is no
//! longer the same (another machine's library, a rebuilt binary).
//!
//! Written only when asked (`halfproc checkpoint --with-files`): a restore
//! maps text from the same file when it is identical there (size, mtime,
//! CRC-32), and most images are restored where they were taken. When a file
//! differs, the restore makes its mappings private memory
//! ([`crate::copy_instead`]) and the caller writes these contents into the
//! stopped copy, as a node daemon does with `NeedFiles` in a live
//! migration.
//!
//! Format: the magic `HPFILES1`, then records to the end of the file, each
//! `start: u64, len: u64, crc32: u32` (little endian) and `len` bytes: the
//! first `len` bytes of the mapping at `start` (a mapping that reaches past
//! the end of its file stops at the first page that cannot be read).
//!
//! Both sides stream: [`write`] a chunk at a time from the stopped target,
//! and a restore ([`load`], [`Carried`]) checks the file and writes the
//! records it needs into the copy a chunk at a time, never holding it.

use crate::error::{Error, Result};
use crate::image::{Backing, Manifest};
use std::fs::File;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

mod read;
pub use read::{Carried, Wanted};

/// File name of the mapped files' contents in an image directory.
pub const FILES: &str = "files.img";

const MAGIC: &[u8; 8] = b"HPFILES1";
/// Bytes of a record's header: start, length, CRC-32.
const HEADER: usize = 20;
const PAGE: u64 = 4096;
/// Bytes read from the target at a time.
const CHUNK: u64 = 1 << 20;

/// The private file mappings of `m`: what `files.img` carries.
fn carried(m: &Manifest) -> impl Iterator<Item = (u64, u64)> + '_ {
    m.vmas.iter().filter_map(|v| match &v.backing {
        Backing::File { shared: false, .. } => Some((v.start, v.end)),
        _ => None,
    })
}

/// Writes `files.img` (`out`, opened for reading and writing, empty) from
/// the stopped process `pid` (which the caller traces: `/proc/PID/mem`
/// reads its mappings whatever their protection), a chunk at a time.
/// Returns the bytes of contents written and the CRC-32 of the whole file,
/// which the manifest keeps (`Manifest::files_crc`): a `files.img` left
/// from another checkpoint is refused.
pub(crate) fn write(out: &File, pid: i32, m: &Manifest) -> Result<(u64, u32)> {
    let werr = |e| Error::io(format!("write {FILES}"), e);
    let mem = File::open(format!("/proc/{pid}/mem"))
        .map_err(|e| Error::io(format!("open /proc/{pid}/mem"), e))?;
    let mut out = BufWriter::new(out);
    out.write_all(MAGIC).map_err(werr)?;
    let mut total = 0;
    for (start, end) in carried(m) {
        // The header's length and CRC are known at the end: patched in.
        let header = out.stream_position().map_err(werr)?;
        out.write_all(&[0u8; HEADER]).map_err(werr)?;
        let (len, crc) = copy_mapping(&mem, start, end, &mut out).map_err(werr)?;
        let after = out.stream_position().map_err(werr)?;
        out.seek(SeekFrom::Start(header)).map_err(werr)?;
        out.write_all(&start.to_le_bytes()).map_err(werr)?;
        out.write_all(&len.to_le_bytes()).map_err(werr)?;
        out.write_all(&crc.to_le_bytes()).map_err(werr)?;
        out.seek(SeekFrom::Start(after)).map_err(werr)?;
        total += len;
    }
    out.flush().map_err(werr)?;
    let f = out.into_inner().map_err(|e| werr(e.into_error()))?;
    let mut whole = crc32fast::Hasher::new();
    let mut buf = vec![0u8; CHUNK as usize];
    let mut at = 0u64;
    loop {
        let n = f
            .read_at(&mut buf, at)
            .map_err(|e| Error::io(format!("read {FILES}"), e))?;
        if n == 0 {
            break;
        }
        whole.update(&buf[..n]);
        at += n as u64;
    }
    Ok((total, whole.finalize()))
}

/// Copies `[start, end)` of the target into `out` up to the first page it
/// cannot read (past the end of the mapped file: the process itself would
/// get SIGBUS there). Returns the bytes copied and their CRC-32.
fn copy_mapping(mem: &File, start: u64, end: u64, out: &mut impl Write) -> io::Result<(u64, u32)> {
    let mut crc = crc32fast::Hasher::new();
    let mut at = start;
    let mut buf = vec![0u8; CHUNK.min(end - start) as usize];
    while at < end {
        let n = (end - at).min(CHUNK) as usize;
        if mem.read_exact_at(&mut buf[..n], at).is_ok() {
            crc.update(&buf[..n]);
            out.write_all(&buf[..n])?;
            at += n as u64;
            continue;
        }
        // Page by page up to the first that fails.
        let mut page = [0u8; PAGE as usize];
        while at < end && mem.read_exact_at(&mut page, at).is_ok() {
            crc.update(&page);
            out.write_all(&page)?;
            at += PAGE;
        }
        break;
    }
    Ok((at - start, crc.finalize()))
}

/// The carried contents of the file mappings `idx` of `m` (from
/// [`crate::differing_files`]), in `files` (`dir/files.img`, opened by the
/// caller with the restoring user's rights; `None`: the image has none),
/// checked and indexed without being held in memory ([`Carried::open`]):
/// [`Carried::write_into`] copies them into the restored copy. An image
/// written without `--with-files` has no `files_crc`: then there is
/// nothing to load, and a differing file is an error naming it.
pub fn load(files: Option<File>, m: &Manifest, idx: &[usize]) -> Result<Carried> {
    if idx.is_empty() {
        return Ok(Carried::none());
    }
    let (Some(f), Some(want)) = (files, m.files_crc) else {
        return Err(Error::Restore(format!(
            "mapped file {} changed since the checkpoint (or is missing here), and the image \
             does not carry mapped files (checkpoint with --with-files)",
            path_of(m, idx[0])
        )));
    };
    let wanted: Vec<Wanted> = idx
        .iter()
        .map(|&i| Wanted {
            start: m.vmas[i].start,
            end: m.vmas[i].end,
            path: path_of(m, i).to_string(),
        })
        .collect();
    // No more than `write` can have written for this manifest is read.
    let most = carried(m).fold(MAGIC.len() as u64, |a, (start, end)| {
        a.saturating_add(HEADER as u64)
            .saturating_add(end.saturating_sub(start))
    });
    Carried::open_within(f, want, &wanted, most)
}

fn path_of(m: &Manifest, i: usize) -> &str {
    match &m.vmas[i].backing {
        Backing::File { path, .. } => path,
        _ => "?",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_mapping_stops_at_the_first_unreadable_page() {
        // Our own memory: two readable pages, then a hole.
        // SAFETY: a fresh anonymous mapping of 3 pages, unmapped below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                3 * PAGE as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        // SAFETY: the mapping above is 3 pages long; its first page is
        // written, its third unmapped (it is not referenced afterwards).
        unsafe {
            *(base as *mut u8) = 7;
            libc::munmap(base.add(2 * PAGE as usize), PAGE as usize);
        }
        let mem = File::open("/proc/self/mem").unwrap();
        let start = base as u64;
        let mut data = Vec::new();
        let (len, crc) = copy_mapping(&mem, start, start + 3 * PAGE, &mut data).unwrap();
        assert_eq!((len, data.len() as u64), (2 * PAGE, 2 * PAGE));
        assert_eq!(crc, crc32fast::hash(&data));
        assert_eq!(data[0], 7);
        // SAFETY: the two pages still mapped at `base`.
        unsafe { libc::munmap(base, 2 * PAGE as usize) };
    }
}
