//! A restore reads `files.img` a chunk at a time: checking and writing a
//! files image many times larger than a memory budget stays within it.
//! The budget is measured, not assumed: this test binary's allocator counts
//! the bytes each thread holds and the most it held.

use halfproc_migrate::files_img::{Carried, Wanted};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;

mod counting;

use counting::peak_during;

const MIB: u64 = 1 << 20;
/// Records of 8 MiB each.
const RECORD: u64 = 8 * MIB;
const RECORDS: u64 = 6;
/// What a streaming restore may hold: a chunk (1 MiB) and change.
const BUDGET: usize = 3 * MIB as usize;

/// Byte `i` of the record at `start`.
fn byte(start: u64, i: u64) -> u8 {
    ((i * 31 + start / MIB) % 251) as u8
}

#[test]
fn a_48_mib_files_image_is_restored_within_3_mib() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("files.img");
    // Written in pieces, with its CRC-32 as a manifest keeps it.
    let mut whole = crc32fast::Hasher::new();
    let mut out = BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut put = |b: &[u8]| {
        whole.update(b);
        out.write_all(b).unwrap();
    };
    put(b"HPFILES1");
    let starts: Vec<u64> = (0..RECORDS).map(|k| (16 + 12 * k) * MIB).collect();
    for &s in &starts {
        let data: Vec<u8> = (0..RECORD).map(|i| byte(s, i)).collect();
        put(&s.to_le_bytes());
        put(&RECORD.to_le_bytes());
        put(&crc32fast::hash(&data).to_le_bytes());
        put(&data);
    }
    out.flush().unwrap();
    drop(out);
    let want_crc = whole.finalize();
    assert!(std::fs::metadata(&path).unwrap().len() > RECORDS * RECORD);

    // Every record but the second is needed; each mapping a page longer.
    let wanted: Vec<Wanted> = starts
        .iter()
        .enumerate()
        .filter(|&(k, _)| k != 1)
        .map(|(k, &s)| Wanted {
            start: s,
            end: s + RECORD + 4096,
            path: format!("/lib/lib{k}.so"),
        })
        .collect();
    let target = tempfile::tempfile().unwrap();
    let (written, peak) = peak_during(|| {
        let c = Carried::open(std::fs::File::open(&path).unwrap(), want_crc, &wanted).unwrap();
        c.write_into(&target).unwrap()
    });
    eprintln!(
        "files.img of {} MiB: {} MiB written, at most {} KiB held",
        (RECORDS * RECORD) >> 20,
        written >> 20,
        peak >> 10
    );
    assert_eq!(written, (RECORDS - 1) * RECORD);
    assert!(
        peak <= BUDGET,
        "restoring from files.img held {peak} bytes (budget {BUDGET})"
    );

    // The copy holds the records, and nothing where the unneeded one was.
    let mut buf = vec![0u8; MIB as usize];
    for (k, &s) in starts.iter().enumerate() {
        for off in (0..RECORD).step_by(MIB as usize) {
            target.read_exact_at(&mut buf, s + off).unwrap();
            let want: Vec<u8> = (off..off + MIB)
                .map(|i| if k == 1 { 0 } else { byte(s, i) })
                .collect();
            assert!(buf == want, "record {k} at +{off:#x} differs");
        }
    }
}
