//! Debian's gzip, xz and sha256sum, checkpointed mid-run, killed and
//! restored, produce the same output and exit status as an unmigrated run.

mod common;

use common::*;
use halfproc_migrate::{checkpoint, restore, Leave};
use std::path::Path;
use std::time::Instant;

fn tool(name: &str) -> &'static Path {
    for dir in ["/usr/bin", "/bin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return Box::leak(p.into_boxed_path());
        }
    }
    panic!("{name} is not installed (apt-get install gzip xz-utils coreutils)");
}

/// Reference run, then a run migrated once after `after_ms`.
fn migrate_matches(name: &str, args: &[&str], stdin: Option<&Path>, after_ms: u64, tmp: &Path) {
    let cmd = tool(name);
    let (want, want_st) = reference(cmd, args, stdin, tmp);
    let out = tmp.join("migrated.out");
    let pid = spawn(cmd, args, stdin, &out);
    sleep_ms(after_ms);
    let img = tmp.join("img");
    let t = Instant::now();
    let s =
        checkpoint(pid, &img, Leave::Kill).unwrap_or_else(|e| panic!("{name}: checkpoint: {e}"));
    let ck = t.elapsed();
    let t = Instant::now();
    let r = restore(&img).unwrap_or_else(|e| panic!("{name}: restore: {e}"));
    let rs = t.elapsed();
    let st = describe(wait(r.pid));
    eprintln!(
        "{name}: checkpoint {ck:?} ({} KiB pages, {} VMAs), restore {rs:?}",
        s.pages_bytes / 1024,
        s.vmas
    );
    assert!(!want.is_empty(), "{name}: empty reference output");
    assert_eq!(st, want_st, "{name}: exit status");
    assert_same_output(&std::fs::read(&out).unwrap(), &want);
}

#[test]
fn gzip_migrated_matches() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input.txt");
    input_file(&input, 6 << 20);
    migrate_matches("gzip", &["-9", "-n", "-c"], Some(&input), 250, tmp.path());
}

#[test]
fn xz_migrated_matches() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input.txt");
    input_file(&input, 2 << 20);
    migrate_matches("xz", &["-T1", "-6", "-c"], Some(&input), 400, tmp.path());
}

#[test]
fn sha256sum_migrated_matches() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input.txt");
    input_file(&input, 8 << 20);
    let p = input.to_str().unwrap();
    let args: Vec<&str> = std::iter::repeat_n(p, 60).collect();
    migrate_matches("sha256sum", &args, None, 250, tmp.path());
}
