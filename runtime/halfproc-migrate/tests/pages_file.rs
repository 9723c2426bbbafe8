//! `pages.img` checked and restored with bounded memory: an image with
//! 64 MiB of pages (the C test program's, with a VMA of 64 MiB added) is
//! read and restored holding a few MiB at most (this test binary's
//! allocator counts them), and a pages file changed after the check, or
//! truncated, is caught (the process killed before it ran), never a crash.

mod common;
mod counting;

use common::*;
use counting::peak_during;
use halfproc_migrate::image::{self, Backing, PageRun, Vma};
use halfproc_migrate::pages_file::{restore_file_checked, verify_pages_file, verify_restored};
use halfproc_migrate::{checkpoint, restore, restore_from, Leave, RestoreOptions};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;

const MIB: u64 = 1 << 20;
/// The added VMA: unused by the program, far from its own and the
/// restorer's.
const BIG_AT: u64 = 0x3000_0000_0000;
const BIG: u64 = 64 * MIB;
/// What a streaming restore may hold: a chunk (1 MiB) and the plan.
const BUDGET: usize = 4 * MIB as usize;

fn byte(i: u64) -> u8 {
    ((i / 4096) % 251 + 1) as u8
}

/// Adds the VMA of `BIG` bytes to the image in `img`: its pages at the
/// end of `pages.img`, the manifest's size and CRC updated.
fn add_big_vma(img: &std::path::Path) {
    let mut m = image::read(img).unwrap();
    let pages = OpenOptions::new()
        .read(true)
        .write(true)
        .open(img.join(image::PAGES))
        .unwrap();
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; MIB as usize];
    for off in (0..m.pages_len).step_by(MIB as usize) {
        let n = (m.pages_len - off).min(MIB) as usize;
        pages.read_exact_at(&mut buf[..n], off).unwrap();
        h.update(&buf[..n]);
    }
    for off in (0..BIG).step_by(MIB as usize) {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = byte(off + i as u64);
        }
        pages.write_all_at(&buf, m.pages_len + off).unwrap();
        h.update(&buf);
    }
    m.vmas.push(Vma {
        start: BIG_AT,
        end: BIG_AT + BIG,
        prot: libc::PROT_READ | libc::PROT_WRITE,
        backing: Backing::Anon,
        grows_down: false,
        pages: vec![PageRun {
            addr: BIG_AT,
            len: BIG,
            file_off: m.pages_len,
        }],
    });
    m.vmas.sort_by_key(|v| v.start);
    m.pages_len += BIG;
    m.pages_crc = h.finalize();
    image::write_manifest(img, &m).unwrap();
}

#[test]
fn a_64_mib_pages_image_restores_within_4_mib_and_changes_are_caught() {
    let tmp = tempfile::tempdir().unwrap();
    let (want, want_st) = reference(prog(), &["15000"], None, tmp.path());
    let out = tmp.path().join("restored.out");
    let pid = spawn(prog(), &["15000"], None, &out);
    sleep_ms(300);
    let img = tmp.path().join("img");
    checkpoint(pid, &img, Leave::Kill).expect("checkpoint");
    add_big_vma(&img);

    // Checked and restored: the pages are streamed, never held whole.
    let (r, peak) = peak_during(|| restore(&img));
    let pid = r.expect("restore").pid;
    let st = describe(wait(pid));
    eprintln!(
        "restore of {} MiB of pages: at most {} KiB held",
        (image::read(&img).unwrap().pages_len) >> 20,
        peak >> 10
    );
    assert_same_output(&std::fs::read(&out).unwrap(), &want);
    assert_eq!(st, want_st, "exit status");
    assert!(
        peak <= BUDGET,
        "the restore held {peak} bytes (budget {BUDGET})"
    );

    // The restored process holds what was checked.
    let m = image::read(&img).unwrap();
    let path = img.join(image::PAGES);
    let opts = RestoreOptions {
        stopped: true,
        ..Default::default()
    };
    let pid = restore_from(&m, File::open(&path).unwrap(), &opts)
        .expect("restore stopped")
        .pid;
    let pages = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let (r, peak) = peak_during(|| verify_restored(&m, pid, &pages));
    r.expect("the restored process holds the checked pages");
    assert!(peak <= BUDGET, "the check held {peak} bytes");
    kill(pid);

    // Changed after the check (one byte): the process restored from it
    // does not hold what was checked; it is killed and reaped before it
    // ran, and the restore fails saying why.
    let no_child_left = || {
        let mut st = 0;
        // SAFETY: asking for any child of ours, without waiting.
        let r = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
        assert_eq!(r, -1, "a child was left: {}", describe(st));
    };
    let at = m.pages_len - BIG / 2;
    pages.write_all_at(&[!byte(BIG / 2)], at).unwrap();
    let e = restore_file_checked(&m, File::open(&path).unwrap(), &RestoreOptions::default())
        .expect_err("restored from a changed pages.img");
    assert!(
        e.to_string().contains("changed after it was checked"),
        "{e}"
    );
    no_child_left();

    // Truncated after the check (a mapping of it would fault): an error,
    // no crash, nothing left running.
    pages.set_len(at).unwrap();
    let e = restore_file_checked(&m, File::open(&path).unwrap(), &RestoreOptions::default())
        .expect_err("restored from a truncated pages.img");
    eprintln!("truncated: {e}");
    assert!(e.to_string().contains("fill pages of"), "{e}");
    no_child_left();
    let e = verify_pages_file(&m, &pages).expect_err("a truncated pages.img was accepted");
    assert!(
        e.to_string().contains("pages size or checksum mismatch"),
        "{e}"
    );
}
