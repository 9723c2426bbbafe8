//! Reading `files.img` at a restore, a chunk at a time: the file is never
//! held in memory, whatever its size (its writing streams the same way).
//!
//! [`Carried::open`] makes one pass over the whole file: the CRC-32 of all
//! of it (against the manifest's `files_crc`), every record's header and
//! CRC-32, and the file offsets of the records the restore needs. Then
//! [`Carried::write_into`] reads those records again, a chunk at a time,
//! into the restored copy, checking each record's CRC-32 once more (the
//! file stays open between the two: a change in between is an error, and
//! the copy, still stopped, is not let go). Memory: one buffer of
//! [`CHUNK`] bytes in each pass, and one small entry per needed record.

use super::{CHUNK, FILES, HEADER, MAGIC};
use crate::error::{Error, Result};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// A mapping a restore needs from `files.img`: `[start, end)` in the
/// restored process, and the file it maps (named in errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub start: u64,
    pub end: u64,
    pub path: String,
}

/// One needed record: where its contents lie in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    start: u64,
    len: u64,
    /// Offset of its contents in `files.img`.
    offset: u64,
    crc: u32,
    path: String,
}

/// The records of a checked `files.img` that a restore needs, by their
/// place in the file (the contents stay there until written).
#[derive(Debug)]
pub struct Carried {
    file: Option<File>,
    records: Vec<Record>,
}

/// Reads `file` from its start (whatever its position) up to `size` (its
/// size when opened: a file that grows meanwhile is not read further),
/// keeping the CRC-32 of everything read and the offset reached.
struct Hashing<'a> {
    file: &'a File,
    crc: crc32fast::Hasher,
    pos: u64,
    size: u64,
}

impl Hashing<'_> {
    /// Fills `buf` unless the file ends first: the bytes read.
    fn fill(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.size.saturating_sub(self.pos);
        let n = left.min(buf.len() as u64) as usize;
        let buf = &mut buf[..n];
        let mut got = 0;
        while got < buf.len() {
            match self.file.read_at(&mut buf[got..], self.pos + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.crc.update(&buf[..got]);
        self.pos += got as u64;
        Ok(got)
    }
}

fn image(why: String) -> Error {
    Error::Image(format!("{FILES}: {why}"))
}

impl Carried {
    /// Nothing to write (no mapped file differs).
    pub fn none() -> Carried {
        Carried {
            file: None,
            records: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Bytes of contents to write.
    pub fn bytes(&self) -> u64 {
        self.records.iter().map(|r| r.len).sum()
    }

    /// The `[start, start + len)` ranges to write, in order.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        self.records
            .iter()
            .map(|r| (r.start, r.start + r.len))
            .collect()
    }

    /// Checks `file` (a `files.img`) in one streaming pass and finds the
    /// records of `wanted` in it. The whole file's CRC-32 must be
    /// `want_crc` (else: damaged, or another checkpoint's, with the first
    /// damaged record named when one is seen); every record must be whole
    /// and pass its CRC-32; each wanted mapping must have a record that
    /// starts where it starts and fits in it (else an error naming its
    /// file). `file` must be a regular file (not a FIFO or a device that
    /// never ends); it is read up to its size when opened. Memory: one
    /// entry per wanted mapping, whatever the records in the file; a
    /// second record for a wanted mapping is refused.
    pub fn open(file: File, want_crc: u32, wanted: &[Wanted]) -> Result<Carried> {
        Carried::open_within(file, want_crc, wanted, u64::MAX)
    }

    /// [`Carried::open`] of a file that may hold `most` bytes at most (what
    /// the image's file mappings can fill): a larger one is refused unread.
    pub(crate) fn open_within(
        file: File,
        want_crc: u32,
        wanted: &[Wanted],
        most: u64,
    ) -> Result<Carried> {
        let rerr = |e| Error::io(format!("read {FILES}"), e);
        let md = file
            .metadata()
            .map_err(|e| Error::io(format!("fstat {FILES}"), e))?;
        if !md.file_type().is_file() {
            return Err(image(format!("not a regular file ({:?})", md.file_type())));
        }
        if md.len() > most {
            return Err(image(format!(
                "it is {} bytes, more than this image's file mappings can fill ({most} bytes \
                 with the records' headers)",
                md.len()
            )));
        }
        // Where each wanted mapping's record goes (the first wanted one of
        // a start: a second is never found).
        let mut index = std::collections::HashMap::with_capacity(wanted.len());
        for (i, w) in wanted.iter().enumerate() {
            index.entry(w.start).or_insert(i);
        }
        let mut found: Vec<Option<Record>> = vec![None; wanted.len()];
        let mut r = Hashing {
            file: &file,
            crc: crc32fast::Hasher::new(),
            pos: 0,
            size: md.len(),
        };
        let mut magic = [0u8; 8];
        let n = r.fill(&mut magic).map_err(rerr)?;
        if n == magic.len() && magic[..7] == MAGIC[..7] && magic != *MAGIC {
            return Err(image(format!(
                "format {:?}, this tool reads {:?} only",
                String::from_utf8_lossy(&magic),
                String::from_utf8_lossy(MAGIC)
            )));
        }
        if magic != *MAGIC {
            return Err(image("not a files image (bad magic)".into()));
        }
        let mut buf = vec![0u8; CHUNK as usize];
        // The first damage seen: reported with the whole file's CRC.
        let mut damage = None;
        loop {
            let at = r.pos;
            let mut h = [0u8; HEADER];
            let n = r.fill(&mut h).map_err(rerr)?;
            if n == 0 {
                break;
            }
            if n < HEADER {
                damage = Some(format!(
                    "it ends {n} bytes into a record header at byte {at} (truncated)"
                ));
                break;
            }
            let word = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap());
            let (start, len) = (word(0), word(8));
            let crc = u32::from_le_bytes(h[16..20].try_into().unwrap());
            let mut hasher = crc32fast::Hasher::new();
            let mut left = len;
            while left > 0 {
                let k = left.min(CHUNK) as usize;
                let got = r.fill(&mut buf[..k]).map_err(rerr)?;
                hasher.update(&buf[..got]);
                left -= got as u64;
                if got < k {
                    break;
                }
            }
            if left > 0 {
                damage = Some(format!(
                    "the record for {start:#x} at byte {at} is cut short: its header says \
                     {len} bytes, the file ends after {}",
                    len - left
                ));
                break;
            }
            let got = hasher.finalize();
            if got != crc && damage.is_none() {
                damage = Some(format!(
                    "the record for {start:#x} at byte {at} fails its CRC-32 ({got:#010x}, \
                     its header says {crc:#010x})"
                ));
            }
            let Some(&i) = index.get(&start) else {
                continue;
            };
            if found[i].is_some() {
                damage
                    .get_or_insert_with(|| format!("a second record for {start:#x} at byte {at}"));
            } else if len <= wanted[i].end.saturating_sub(start) {
                found[i] = Some(Record {
                    start,
                    len,
                    offset: at + HEADER as u64,
                    crc,
                    path: wanted[i].path.clone(),
                });
            }
        }
        let whole = r.crc.finalize();
        if whole != want_crc {
            return Err(Error::Image(format!(
                "{FILES} is not the one this image's manifest was written with (CRC-32 \
                 {whole:#010x}, the manifest says {want_crc:#010x}): damaged, or left from \
                 another checkpoint{}",
                damage.map(|d| format!("; {d}")).unwrap_or_default()
            )));
        }
        if let Some(d) = damage {
            return Err(image(d));
        }
        let records = wanted
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let j = index[&w.start];
                found[j]
                    .clone()
                    .ok_or_else(|| {
                        image(format!(
                            "it does not carry {:#x}-{:#x} ({})",
                            w.start, w.end, w.path
                        ))
                    })
                    .and_then(
                        |rec| match (i == j, rec.len <= w.end.saturating_sub(w.start)) {
                            (true, _) | (false, true) => Ok(Record {
                                path: w.path.clone(),
                                ..rec
                            }),
                            (false, false) => Err(image(format!(
                                "it does not carry {:#x}-{:#x} ({})",
                                w.start, w.end, w.path
                            ))),
                        },
                    )
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Carried {
            file: Some(file),
            records,
        })
    }

    /// Writes the needed records into `target` at their addresses (the
    /// restored copy's `/proc/PID/mem`, opened for writing), a chunk at a
    /// time, checking each record's CRC-32 again. Returns the bytes
    /// written. On an error the copy holds part of the contents: the
    /// caller must not let it run.
    pub fn write_into(&self, target: &File) -> Result<u64> {
        let Some(file) = &self.file else {
            return Ok(0);
        };
        let mut buf =
            vec![0u8; CHUNK.min(self.records.iter().map(|r| r.len).max().unwrap_or(0)) as usize];
        let mut total = 0;
        for r in &self.records {
            let mut crc = crc32fast::Hasher::new();
            let mut done = 0;
            while done < r.len {
                let n = (r.len - done).min(CHUNK) as usize;
                let chunk = &mut buf[..n];
                file.read_exact_at(chunk, r.offset + done).map_err(|e| {
                    Error::io(
                        format!(
                            "read {n} bytes of the record for {:#x} ({}) at byte {} of {FILES}",
                            r.start,
                            r.path,
                            r.offset + done
                        ),
                        e,
                    )
                })?;
                crc.update(chunk);
                target.write_all_at(chunk, r.start + done).map_err(|e| {
                    Error::io(
                        format!(
                            "write {n} bytes at {:#x} of the copy ({})",
                            r.start + done,
                            r.path
                        ),
                        e,
                    )
                })?;
                done += n as u64;
            }
            let got = crc.finalize();
            if got != r.crc {
                return Err(image(format!(
                    "the record for {:#x} ({}) changed since it was checked (CRC-32 \
                     {got:#010x}, its header says {:#010x})",
                    r.start, r.path, r.crc
                )));
            }
            total += r.len;
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn record(start: u64, data: &[u8]) -> Vec<u8> {
        let mut r = start.to_le_bytes().to_vec();
        r.extend_from_slice(&(data.len() as u64).to_le_bytes());
        r.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
        r.extend_from_slice(data);
        r
    }

    fn file_of(raw: &[u8]) -> File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(raw).unwrap();
        f
    }

    fn want(start: u64, end: u64, path: &str) -> Wanted {
        Wanted {
            start,
            end,
            path: path.into(),
        }
    }

    /// Opens `raw` with its own CRC as the manifest's: the error text.
    fn refused(raw: &[u8], wanted: &[Wanted]) -> String {
        Carried::open(file_of(raw), crc32fast::hash(raw), wanted)
            .unwrap_err()
            .to_string()
    }

    fn image_of(records: &[(u64, &[u8])]) -> Vec<u8> {
        let mut raw = MAGIC.to_vec();
        for (start, data) in records {
            raw.extend(record(*start, data));
        }
        raw
    }

    #[test]
    fn open_indexes_the_wanted_records_and_writes_them() {
        // A record longer than a chunk: written in pieces.
        let big: Vec<u8> = (0..CHUNK as usize + 4100).map(|i| (i * 7) as u8).collect();
        let raw = image_of(&[(0x1000, b"text"), (0x5000, b""), (0x20_0000, &big)]);
        let wanted = [
            want(0x20_0000, 0x20_0000 + 2 * CHUNK, "/lib/big.so"),
            want(0x1000, 0x2000, "/bin/prog"),
        ];
        let c = Carried::open(file_of(&raw), crc32fast::hash(&raw), &wanted).unwrap();
        assert_eq!(
            c.ranges(),
            vec![(0x20_0000, 0x20_0000 + big.len() as u64), (0x1000, 0x1004)]
        );
        assert_eq!(c.bytes(), big.len() as u64 + 4);
        let target = tempfile::tempfile().unwrap();
        assert_eq!(c.write_into(&target).unwrap(), c.bytes());
        let mut got = vec![0u8; big.len()];
        target.read_exact_at(&mut got, 0x20_0000).unwrap();
        assert!(got == big, "the big record was not written whole");
        let mut text = [0u8; 4];
        target.read_exact_at(&mut text, 0x1000).unwrap();
        assert_eq!(&text, b"text");
        // Nothing else was written (the empty record, unwanted, was not).
        assert_eq!(
            target.metadata().unwrap().len(),
            0x20_0000 + big.len() as u64
        );
    }

    #[test]
    fn open_refuses_damage_naming_the_record() {
        let raw = image_of(&[(0x1000, b"text"), (0x5000, b"more")]);
        let w = [want(0x1000, 0x2000, "/bin/prog")];

        // A record whose contents fail its CRC (the whole file's CRC matching).
        let mut flipped = raw.clone();
        flipped[8 + HEADER] ^= 1;
        let e = refused(&flipped, &w);
        assert!(
            e.contains("the record for 0x1000 at byte 8 fails its CRC-32"),
            "{e}"
        );
        // The same damage under the manifest's CRC: both said.
        let e = Carried::open(file_of(&flipped), crc32fast::hash(&raw), &w)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("is not the one this image's manifest was written with")
                && e.contains(&format!(
                    "the manifest says {:#010x}",
                    crc32fast::hash(&raw)
                ))
                && e.contains("the record for 0x1000 at byte 8 fails its CRC-32"),
            "{e}"
        );
        // An intact file of another checkpoint.
        let e = Carried::open(file_of(&raw), crc32fast::hash(&raw) ^ 1, &w)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("damaged, or left from another checkpoint") && !e.contains("record"),
            "{e}"
        );
        // Truncated in the last record's contents, and in its header.
        let e = refused(&raw[..raw.len() - 1], &w);
        assert!(
            e.contains("the record for 0x5000 at byte 32 is cut short: its header says 4 bytes, the file ends after 3"),
            "{e}"
        );
        let e = refused(&raw[..8 + HEADER + 4 + 7], &w);
        assert!(
            e.contains("it ends 7 bytes into a record header at byte 32 (truncated)"),
            "{e}"
        );
        // A length past the end of the file.
        let mut long = raw.clone();
        long[8 + 8] = 0xff;
        let e = refused(&long, &w);
        assert!(
            e.contains("the record for 0x1000 at byte 8 is cut short"),
            "{e}"
        );
        // Magic: another version, or not a files image at all.
        let mut v2 = raw.clone();
        v2[7] = b'2';
        let e = refused(&v2, &w);
        assert!(
            e.contains("format \"HPFILES2\", this tool reads \"HPFILES1\" only"),
            "{e}"
        );
        let e = refused(b"HPFIL", &w);
        assert!(e.contains("bad magic"), "{e}");
        // A mapping it does not carry, or one its record does not fit in.
        let e = refused(&raw, &[want(0x3000, 0x4000, "/lib/libc.so.6")]);
        assert!(
            e.contains("does not carry 0x3000-0x4000 (/lib/libc.so.6)"),
            "{e}"
        );
        let e = refused(&raw, &[want(0x5000, 0x5002, "/lib/x.so")]);
        assert!(
            e.contains("does not carry 0x5000-0x5002 (/lib/x.so)"),
            "{e}"
        );
    }

    /// The file changes between the check and the write: the write fails,
    /// naming the record, after its contents reached the copy (which the
    /// caller then does not let run).
    /// A sparse `files.img`: records of zeros, each a valid empty record
    /// for 0x0 (the CRC-32 of nothing is 0). Only wanted records are kept
    /// (memory: one entry per wanted mapping, however many records), a
    /// second record for a wanted mapping is refused, and a file larger
    /// than the image's mappings can fill is refused unread.
    #[test]
    fn a_sparse_file_of_empty_records() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(MAGIC).unwrap();
        let size = 8 + 20 * 500_000;
        f.set_len(size).unwrap();
        let mut whole = crc32fast::Hasher::new();
        whole.update(MAGIC);
        whole.update(&vec![0u8; size as usize - 8]);
        let crc = whole.finalize();
        let zero = f.try_clone().unwrap();
        let e = Carried::open(zero, crc, &[want(0, 0x1000, "/lib/a")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("a second record for 0x0 at byte 28"), "{e}");
        // Nothing wanted there: no entry kept, nothing carried.
        let other = f.try_clone().unwrap();
        let e = Carried::open(other, crc, &[want(0x1000, 0x2000, "/lib/b")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not carry 0x1000-0x2000"), "{e}");
        let e = Carried::open_within(f, crc, &[want(0x1000, 0x2000, "/lib/b")], 8 + 20 + 0x1000)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("more than this image's file mappings can fill"),
            "{e}"
        );
    }

    /// A FIFO (or a device) is no `files.img`.
    #[test]
    fn open_refuses_what_is_not_a_regular_file() {
        let e = Carried::open(File::open("/dev/zero").unwrap(), 0, &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }

    #[test]
    fn write_into_checks_the_records_again() {
        let raw = image_of(&[(0x1000, b"text")]);
        let f = file_of(&raw);
        let again = f.try_clone().unwrap();
        let c = Carried::open(f, crc32fast::hash(&raw), &[want(0x1000, 0x2000, "/bin/p")]).unwrap();
        again.write_all_at(b"T", 8 + HEADER as u64).unwrap();
        let e = c
            .write_into(&tempfile::tempfile().unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the record for 0x1000 (/bin/p) changed since it was checked"),
            "{e}"
        );
        again.set_len(8 + HEADER as u64 + 2).unwrap();
        let e = c
            .write_into(&tempfile::tempfile().unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("read 4 bytes of the record for 0x1000 (/bin/p) at byte 28 of files.img"),
            "{e}"
        );
    }
}
