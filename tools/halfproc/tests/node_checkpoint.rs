//! `halfproc checkpoint` and `halfproc restore` through the node daemon.

mod common;

use common::*;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::process::Stdio;

fn checkpoint(d: &Daemon, pid: i32, dir: &std::path::Path, kill: bool) -> Result<String, String> {
    let extra: &[&str] = if kill { &["--kill"] } else { &[] };
    checkpoint_with(d, pid, dir, extra)
}

/// `halfproc checkpoint` with `extra` arguments: Ok(stderr) or Err(why).
fn checkpoint_with(
    d: &Daemon,
    pid: i32,
    dir: &std::path::Path,
    extra: &[&str],
) -> Result<String, String> {
    let mut c = halfproc();
    c.args(["checkpoint", "--node", &d.addr, &pid.to_string(), "-o"])
        .arg(dir)
        .args(extra);
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    if o.status.success() {
        Ok(err)
    } else {
        Err(format!("exit {:?}: {err}", o.status.code()))
    }
}

/// `halfproc restore DIR`: (stdout, exit code).
fn restore(d: &Daemon, dir: &std::path::Path, tmp: &std::path::Path) -> (Vec<u8>, i32) {
    let (out, code, _) = restore_err(d, dir, tmp);
    (out, code)
}

/// `halfproc restore DIR`: (stdout, exit code, stderr).
fn restore_err(d: &Daemon, dir: &std::path::Path, tmp: &std::path::Path) -> (Vec<u8>, i32, String) {
    let out = tmp.join("restored.out");
    let o = halfproc()
        .args(["restore", "--node", &d.addr])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(File::create(&out).unwrap())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    (
        std::fs::read(&out).unwrap(),
        o.status.code().unwrap_or(-1),
        err,
    )
}

/// `prog 20000` run on a daemon and checkpointed 300 ms later.
struct Checkpointed {
    tmp: tempfile::TempDir,
    a: Daemon,
    r: Running,
    img: std::path::PathBuf,
    want: Vec<u8>,
    want_code: i32,
}

fn run_and_checkpoint(kill: bool) -> Checkpointed {
    let tmp = tempfile::tempdir().unwrap();
    let argv = [prog(), "20000"];
    let (want, want_code) = reference(&argv, None);
    let a = Daemon::start();
    let r = run(&a, &argv, None, tmp.path(), "prog");
    let pid = r.pid();
    sleep_ms(300);
    let img = tmp.path().join("img");
    let s = checkpoint(&a, pid, &img, kill).expect("checkpoint");
    eprintln!("{s}");
    Checkpointed {
        tmp,
        a,
        r,
        img,
        want,
        want_code,
    }
}

#[test]
fn checkpoint_kill_then_restore_continues_the_output() {
    let c = run_and_checkpoint(true);
    let (before, code, err) = c.r.finish();
    assert_eq!(code, 75, "run after checkpoint --kill ({err})");
    assert!(err.contains("checkpointed into"), "{err}");
    let (after, code) = restore(&c.a, &c.img, c.tmp.path());
    assert_eq!(code, c.want_code, "restored program's exit status");
    assert!(!after.is_empty(), "nothing after the checkpoint");
    assert_same("before + after", &[before, after].concat(), &c.want);
}

#[test]
fn checkpoint_leaves_it_running_and_restore_repeats_the_rest() {
    let c = run_and_checkpoint(false);
    let (out, code, _) = c.r.finish();
    assert_same("original", &out, &c.want);
    assert_eq!(code, c.want_code);
    let (rest, code) = restore(&c.a, &c.img, c.tmp.path());
    assert_eq!(code, c.want_code, "restored copy's exit status");
    assert!(
        !rest.is_empty() && c.want.ends_with(&rest),
        "restored output is not the tail"
    );
}

#[test]
fn checkpoint_of_a_socket_holder_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let argv = [targets(), "socket", "600"];
    let (want, want_code) = reference(&argv, None);
    let a = Daemon::start();
    let r = run(&a, &argv, None, tmp.path(), "socket");
    let pid = r.pid();
    sleep_ms(100);
    let e = checkpoint(&a, pid, &tmp.path().join("img"), true).expect_err("checkpointed a socket");
    assert!(
        e.contains("exit Some(1)") && e.contains("is a socket"),
        "{e}"
    );
    assert!(e.contains("keeps running"), "{e}");
    let (out, code, _) = r.finish();
    assert_same("socket", &out, &want);
    assert_eq!(code, want_code);
}

/// The program's binary is another file when the image is restored (a
/// rebuild, or the image taken to a machine with another version): an
/// image taken `--with-files` carries the text it ran and restores; one
/// taken without is refused, naming the binary and the option, and
/// nothing runs.
#[test]
fn with_files_an_image_restores_where_its_binary_changed() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = tmp.path().join("prog-v1");
    // cp(1), not a write of ours: see node_files.rs on ETXTBSY.
    assert!(std::process::Command::new("cp")
        .arg(prog())
        .arg(&exe)
        .status()
        .unwrap()
        .success());
    let argv = [exe.to_str().unwrap(), "20000"];
    let (want, want_code) = reference(&argv, None);
    let a = Daemon::start();
    let r = run(&a, &argv, None, tmp.path(), "prog-v1");
    let pid = r.pid();
    sleep_ms(300);
    let with = tmp.path().join("img-with");
    let without = tmp.path().join("img-without");
    // Into `without` twice, with the files first: the second checkpoint
    // must not leave the first one's files.img beside its own manifest
    // (restored, it would overwrite the new pages with the old ones).
    checkpoint_with(&a, pid, &without, &["--with-files"]).expect("checkpoint");
    assert!(without.join("files.img").exists());
    let s = checkpoint_with(&a, pid, &without, &[]).expect("checkpoint");
    assert!(!s.contains("mapped files"), "{s}");
    assert!(
        !without.join("files.img").exists(),
        "a stale files.img stayed"
    );
    let s = checkpoint_with(&a, pid, &with, &["--kill", "--with-files"]).expect("checkpoint");
    assert!(s.contains("MiB of mapped files"), "{s}");
    eprintln!("{s}");
    let (before, code, err) = r.finish();
    assert_eq!(code, 75, "run after checkpoint --kill ({err})");
    // Another file under the binary's name.
    let new = tmp.path().join("prog-v2");
    assert!(std::process::Command::new("cp")
        .args(["/bin/true"])
        .arg(&new)
        .status()
        .unwrap()
        .success());
    std::fs::rename(&new, &exe).unwrap();

    let (out, code, err) = restore_err(&a, &without, tmp.path());
    assert_ne!(code, 0, "restored without the files: {err}");
    assert!(out.is_empty(), "the refused restore ran: {out:?}");
    assert!(
        err.contains(exe.to_str().unwrap()) && err.contains("--with-files"),
        "{err}"
    );

    // Another image's files.img beside a manifest written without: refused.
    std::fs::copy(with.join("files.img"), without.join("files.img")).unwrap();
    let (out, code, err) = restore_err(&a, &without, tmp.path());
    assert_ne!(code, 0, "restored with another image's files: {err}");
    assert!(out.is_empty() && err.contains("--with-files"), "{err}");

    let (after, code, err) = restore_err(&a, &with, tmp.path());
    assert_eq!(code, want_code, "restored program's exit status ({err})");
    assert!(!after.is_empty(), "nothing after the checkpoint");
    assert_same("before + after", &[before, after].concat(), &want);
    // A damaged files.img is refused before anything runs.
    let img = with.join("files.img");
    let mut raw = std::fs::read(&img).unwrap();
    let last = raw.len() - 1;
    raw[last] ^= 0x55;
    std::fs::write(&img, raw).unwrap();
    let (out, code, err) = restore_err(&a, &with, tmp.path());
    assert_ne!(code, 0, "restored a damaged files.img: {err}");
    assert!(
        out.is_empty() && err.contains("is not the one this image's manifest was written with"),
        "{err}"
    );
}

/// `VmRSS` and `VmHWM` (peak) of `pid`, in KiB.
fn rss_and_peak_kib(pid: i32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |key: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
    };
    (kib("VmRSS:"), kib("VmHWM:"))
}

/// A 256 MiB image restored through the daemon: `pages.img` is checked
/// and restored with bounded memory (the daemon's peak resident size
/// grows by less than 32 MiB, not by the image's size, as when it read
/// the whole file to check its CRC), and the restored program holds every
/// byte it wrote.
#[test]
fn a_large_image_restores_with_bounded_daemon_memory() {
    const MIB: u64 = 256;
    let tmp = tempfile::tempdir().unwrap();
    let mib = MIB.to_string();
    let argv = [targets(), "big", "4000", &mib];
    let a = Daemon::start();
    let r = run(&a, &argv, None, tmp.path(), "big");
    let pid = r.pid();
    r.wait_output("tick 1 ");
    let img = tmp.path().join("img");
    checkpoint(&a, pid, &img, true).expect("checkpoint");
    let (_, code, err) = r.finish();
    assert_eq!(code, 75, "run after checkpoint --kill ({err})");
    let pages = std::fs::metadata(img.join("pages.img")).unwrap().len();
    assert!(pages >= MIB << 20, "pages.img of {pages} bytes");
    // The peak from here on: what the checkpoint held is freed.
    std::fs::write(format!("/proc/{}/clear_refs", a.pid()), "5").unwrap();
    let (before, _) = rss_and_peak_kib(a.pid());
    let (out, code, err) = restore_err(&a, &img, tmp.path());
    let (_, peak) = rss_and_peak_kib(a.pid());
    let grew = peak.saturating_sub(before);
    eprintln!(
        "restore of {} MiB of pages: daemon resident {before} KiB, peak {peak} KiB (+{grew} KiB)",
        pages >> 20
    );
    assert_eq!(code, 7, "restored program's exit status ({err})");
    let out = String::from_utf8_lossy(&out);
    assert!(out.ends_with("big ok\n"), "restored output ends {:?}", {
        let t = out.len().saturating_sub(200);
        &out[t..]
    });
    assert!(
        grew < 32 << 10,
        "the daemon's peak resident size grew by {grew} KiB restoring {} MiB",
        pages >> 20
    );
    // Damaged (one byte flipped), then cut short: refused before anything
    // runs, saying so.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(img.join("pages.img"))
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, pages / 2).unwrap();
    f.write_all_at(&[!b[0]], pages / 2).unwrap();
    for what in ["damaged", "truncated"] {
        let (out, code, err) = restore_err(&a, &img, tmp.path());
        assert_ne!(code, 0, "restored a {what} pages.img: {err}");
        assert!(out.is_empty(), "the refused restore ran: {out:?}");
        assert!(err.contains("pages size or checksum mismatch"), "{err}");
        f.set_len(pages / 2).unwrap();
    }
}

/// Review of 2026-11-28: `restore DIR` opened `DIR/tree.json` blocking, so
/// a FIFO put there held a daemon thread (and the client) for good. It is
/// refused at once, naming it; the daemon still serves.
#[test]
fn a_fifo_as_tree_json_is_refused_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Daemon::start();
    let img = tmp.path().join("img");
    std::fs::create_dir(&img).unwrap();
    let fifo = std::ffi::CString::new(img.join("tree.json").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let mut c = halfproc()
        .args(["restore", "--node", &a.addr])
        .arg(&img)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(tmp.path().join("err")).unwrap())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    let st = loop {
        if let Some(st) = c.try_wait().unwrap() {
            break st;
        }
        if t.elapsed().as_secs() > 20 {
            c.kill().unwrap();
            c.wait().unwrap();
            // Its shutdown would wait for the blocked thread.
            // SAFETY: kill has no memory arguments.
            unsafe { libc::kill(a.pid(), libc::SIGKILL) };
            panic!("restore of a FIFO tree.json still waits after 20 s");
        }
        sleep_ms(20);
    };
    let err = std::fs::read_to_string(tmp.path().join("err")).unwrap();
    assert_eq!(st.code(), Some(127), "{err}");
    assert!(err.contains("tree.json"), "{err}");
    // The daemon answers the next request.
    let o = halfproc().args(["ps", "--node", &a.addr]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
