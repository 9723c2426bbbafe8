//! Pipes with unread bytes: a self-pipe that holds more than a new pipe
//! does is made as large again by the restore.

mod common;

use common::*;
use halfproc_migrate::{checkpoint, restore, Leave};

/// Review of 2026-11-28: the restorer made a self-pipe with a blocking
/// `pipe2` of the default size (64 KiB) and wrote its unread bytes into
/// it, nobody reading: 100000 bytes (the original enlarged its pipe to
/// 256 KiB) blocked the copy for good, and the restore with it. The pipe
/// is now made non-blocking and sized for them; the copy reads every byte.
#[test]
fn a_self_pipe_holding_more_than_64_kib_is_restored_whole() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let args = ["bigpipe", go.to_str().unwrap()];
    std::fs::write(&go, b"").unwrap();
    let want_out = dir.path().join("want");
    assert_eq!(
        describe(wait(spawn(targets(), &args, None, &want_out))),
        "exit 0"
    );
    std::fs::remove_file(&go).unwrap();
    let want = std::fs::read_to_string(&want_out).unwrap();
    assert!(want.contains("read 100000 bytes"), "{want}");

    let out = dir.path().join("out");
    let pid = spawn(targets(), &args, None, &out);
    wait_line(&out, "filled");
    let img = dir.path().join("img");
    checkpoint(pid, &img, Leave::Kill).unwrap();
    let m = halfproc_migrate::image::read(&img).unwrap();
    let unread: usize = m
        .fds
        .iter()
        .filter_map(|f| Some(f.pipe.as_ref()?.data.len()))
        .sum();
    assert_eq!(unread, 100000);
    // On a thread: the old restore never returned.
    let (tx, rx) = std::sync::mpsc::channel();
    let i = img.clone();
    std::thread::spawn(move || tx.send(restore(&i).map(|r| r.pid)));
    let pid = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the restore still runs after 30 s")
        .unwrap();
    std::fs::write(&go, b"").unwrap();
    assert_eq!(describe(wait(pid)), "exit 0");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), want);
}
