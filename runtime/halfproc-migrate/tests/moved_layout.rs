//! A restore from memory moves large anonymous runs into place with
//! `mremap` (see `src/restore_moves.rs`): the copy's VMAs must cover the
//! same ranges with the same protections, flags and backing as the
//! original's, its contents must be the original's, writes must not leak
//! into the tool's image (copy on write) and the program must run on. The
//! same image restored from contents that are not page-aligned (a `Vec`)
//! takes the copying path and must give the same result without splits.
//! The image (21 MiB) is read by 3 threads (`set_reader_threads`): the
//! contents the copy checks and the image's CRC-32 must be those of a
//! single pass.

mod common;

use common::*;
use halfproc_migrate::{freeze_and_dump, restore_from_memory, set_reader_threads, RestoreOptions};

/// One line of /proc/PID/maps: (start, end, perms, offset, path).
type Line = (u64, u64, String, u64, String);

fn maps(pid: i32) -> Vec<Line> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (s, e) = f[0].split_once('-').unwrap();
            (
                u64::from_str_radix(s, 16).unwrap(),
                u64::from_str_radix(e, 16).unwrap(),
                f[1].to_string(),
                u64::from_str_radix(f[2], 16).unwrap(),
                f.get(5).map(|p| p.to_string()).unwrap_or_default(),
            )
        })
        .collect()
}

/// Adjacent lines that differ only in where one VMA ends are joined: what
/// a program can observe of its address space short of mremap's
/// single-VMA rule.
fn coalesce(v: &[Line]) -> Vec<Line> {
    let mut out: Vec<Line> = Vec::new();
    for l in v {
        if let Some(p) = out.last_mut() {
            let file_next = p.4.is_empty() || p.3 + (p.1 - p.0) == l.3;
            if p.1 == l.0 && p.2 == l.2 && p.4 == l.4 && file_next {
                p.1 = l.1;
                continue;
            }
        }
        out.push(l.clone());
    }
    out
}

/// VmFlags of every VMA of `pid` whose range lies in [start, end), without
/// the huge page advice ("hg", "nh": see docs/migration.md) and soft-dirty
/// ("sd", set on every new VMA).
fn vm_flags(pid: i32, start: u64, end: u64) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let mut out = Vec::new();
    let mut inside = false;
    for l in text.lines() {
        let first = l.split_whitespace().next().unwrap_or("");
        if let Some((s, e)) = first.split_once('-') {
            if let (Ok(s), Ok(e)) = (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16)) {
                inside = s >= start && e <= end;
                continue;
            }
        }
        if let Some(f) = l.strip_prefix("VmFlags:") {
            if inside {
                let mut v: Vec<String> = f
                    .split_whitespace()
                    .filter(|x| !["hg", "nh", "sd"].contains(x))
                    .map(String::from)
                    .collect();
                v.sort();
                out.push(v);
            }
        }
    }
    out
}

/// Restores a `targets layout` process from memory (page-aligned contents
/// if `aligned`, else a Vec copy of them); returns the copy's raw maps.
fn restore_and_compare(aligned: bool) -> (Vec<Line>, Vec<u64>) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let pid = spawn(targets(), &["layout"], None, &out);
    let line = wait_line(&out, "full ");
    let addr: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .step_by(2)
        .map(|a| u64::from_str_radix(a, 16).unwrap())
        .collect();
    set_reader_threads(3);
    assert_eq!(halfproc_migrate::reader_threads(20 << 20), 3);
    let d = freeze_and_dump(pid, &[]).expect("freeze_and_dump");
    assert_eq!(
        crc32fast::hash(&d.pages),
        d.manifest.pages_crc,
        "the threads' CRCs combined"
    );
    let opts = RestoreOptions {
        stopped: true,
        ..Default::default()
    };
    let copy = if aligned {
        restore_from_memory(&d.manifest, &d.pages, &opts)
    } else {
        let v = d.pages.to_vec();
        assert_ne!(
            v.as_ptr() as usize % 4096,
            0,
            "a Vec here should not be page-aligned"
        );
        restore_from_memory(&d.manifest, &v, &opts)
    }
    .expect("restore_from_memory");
    let (orig, got) = (maps(pid), maps(copy.pid));
    let (o, c) = (coalesce(&orig), coalesce(&got));
    // Every range of the original, identical in the copy; the copy's
    // only other lines are the restorer's region (anonymous, outside them).
    for l in &o {
        assert!(
            c.contains(l) || l.4 == "[vsyscall]",
            "original {l:x?} not in the copy:\n{got:x?}"
        );
        let (fo, fc) = (vm_flags(pid, l.0, l.1), vm_flags(copy.pid, l.0, l.1));
        let first = fo.first().cloned().unwrap_or_default();
        assert!(
            fc.iter().all(|f| *f == first) || l.4.starts_with('/'),
            "VmFlags of {l:x?}: original {fo:?}, copy {fc:?}"
        );
    }
    for l in c.iter().filter(|l| !o.contains(l)) {
        assert!(
            l.4.is_empty() && !o.iter().any(|x| x.0 < l.1 && l.0 < x.1),
            "copy has {l:x?}, the original has nothing like it"
        );
    }
    // The copy runs on, checks its contents, writes them, grows `full`
    // with mremap. The image is kept meanwhile: the copy's writes must not
    // reach it (its moved pages are shared with it, copy on write).
    let mut d = d;
    let image = std::mem::take(&mut d.pages);
    let crc = d.manifest.pages_crc;
    d.kill();
    // SAFETY: continuing and signalling our own child.
    unsafe {
        libc::kill(copy.pid, libc::SIGCONT);
        libc::kill(copy.pid, libc::SIGUSR1);
    }
    let st = describe(wait(copy.pid));
    let report = wait_line(&out, "bad ");
    assert_eq!(report, "bad 0 grew 1", "copy's report");
    assert_eq!(st, "exit 8");
    assert_eq!(
        crc32fast::hash(&image),
        crc,
        "the copy's writes reached the image"
    );
    (got, addr)
}

/// Lines of `m` inside [start, start + len).
fn lines_in(m: &[Line], start: u64, len: u64) -> Vec<&Line> {
    m.iter()
        .filter(|l| l.0 < start + len && start < l.1)
        .collect()
}

#[test]
fn moved_runs_keep_the_original_layout() {
    let (got, a) = restore_and_compare(true);
    // `full` (every page written) was moved as one run: one VMA exactly
    // (the copy's mremap of it above needs that).
    let f = lines_in(&got, a[0], 16 << 20);
    assert_eq!(f.len(), 1, "full: {f:x?}");
    assert_eq!((f[0].0, f[0].1), (a[0], a[0] + (16 << 20)), "full: {f:x?}");
    // `half` is split where its written part ends (moved part, empty part).
    let h = lines_in(&got, a[1], 4 << 20);
    assert!(
        h.iter()
            .any(|l| l.0 == a[1] + (2 << 20) || l.1 == a[1] + (2 << 20)),
        "half: {h:x?}"
    );
}

#[test]
fn contents_not_page_aligned_are_copied_with_the_same_result() {
    let (got, a) = restore_and_compare(false);
    // Copied, not moved: no split at the end of half's written part.
    let h = lines_in(&got, a[1], 4 << 20);
    assert!(
        h.iter()
            .all(|l| l.0 < a[1] + (2 << 20) && l.1 > a[1] + (2 << 20)),
        "half: {h:x?}"
    );
}
