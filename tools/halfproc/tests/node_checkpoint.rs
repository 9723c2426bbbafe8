//! `halfproc checkpoint` and `halfproc restore` through the node daemon.

mod common;

use common::*;
use std::fs::File;
use std::process::Stdio;

fn checkpoint(d: &Daemon, pid: i32, dir: &std::path::Path, kill: bool) -> Result<String, String> {
    let mut c = halfproc();
    c.args(["checkpoint", "--node", &d.addr, &pid.to_string(), "-o"])
        .arg(dir);
    if kill {
        c.arg("--kill");
    }
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
    let out = tmp.join("restored.out");
    let st = halfproc()
        .args(["restore", "--node", &d.addr])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(File::create(&out).unwrap())
        .status()
        .unwrap();
    (std::fs::read(&out).unwrap(), st.code().unwrap_or(-1))
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
