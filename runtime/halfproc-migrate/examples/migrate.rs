//! `migrate DIR MS CMD [ARGS...]`: run CMD (stdout to DIR/out), checkpoint
//! it after MS milliseconds into DIR/img, kill it, restore it, wait, print
//! the exit status and timings. A manual driver for the engine; stdin is
//! /dev/null or the file named by `MIGRATE_STDIN`.

use halfproc_migrate::{checkpoint, restore, Leave};
use std::process::{Command, Stdio};
use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 4 {
        eprintln!("usage: migrate DIR MS CMD [ARGS...]");
        std::process::exit(2);
    }
    let dir = std::path::PathBuf::from(&a[1]);
    let ms: u64 = a[2].parse().expect("MS");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let mut c = Command::new(&a[3]);
    // SAFETY: close_range is async-signal-safe; drops inherited fds (pipes).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut c, || {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            Ok(())
        })
    };
    let child = c
        .args(&a[4..])
        .stdin(match std::env::var_os("MIGRATE_STDIN") {
            Some(p) => Stdio::from(std::fs::File::open(p).expect("MIGRATE_STDIN")),
            None => Stdio::null(),
        })
        .stdout(std::fs::File::create(dir.join("out")).expect("out"))
        .spawn()
        .expect("spawn");
    let pid = child.id() as i32;
    std::mem::forget(child); // checkpoint(Leave::Kill) reaps it
    std::thread::sleep(std::time::Duration::from_millis(ms));
    let t = Instant::now();
    let img = dir.join("img");
    let _ = std::fs::remove_dir_all(&img);
    let s = checkpoint(pid, &img, Leave::Kill).unwrap_or_else(|e| panic!("checkpoint: {e}"));
    let ck = t.elapsed();
    let t = Instant::now();
    let r = restore(&img).unwrap_or_else(|e| panic!("restore: {e}"));
    let rs = t.elapsed();
    let mut st = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(r.pid, &mut st, 0) };
    println!(
        "status {st:#x} checkpoint {ck:?} ({} KiB) restore {rs:?}",
        s.pages_bytes / 1024
    );
}
