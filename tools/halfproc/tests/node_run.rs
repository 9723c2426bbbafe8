//! `halfproc run`: stdio relayed (stdin in, stdout and stderr apart) and the
//! exit codes that `--help` promises.

mod common;

use common::*;
use std::io::Write;
use std::process::Stdio;

fn run_with(node: &str, argv: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let mut c = halfproc()
        .args(["run", "--node", node, "--"])
        .args(argv)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(stdin).unwrap();
    let o = c.wait_with_output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn stdio_and_exit_codes() {
    let d = Daemon::start();
    let (code, out, err) = run_with(
        &d.addr,
        &["sh", "-c", "echo out; echo err >&2; exit 3"],
        b"",
    );
    assert_eq!((code, out.as_str(), err.as_str()), (3, "out\n", "err\n"));
    let (code, out, _) = run_with(&d.addr, &["tr", "a-z", "A-Z"], b"relayed stdin\n");
    assert_eq!((code, out.as_str()), (0, "RELAYED STDIN\n"));
    let (code, _, _) = run_with(&d.addr, &["sh", "-c", "kill -TERM $$"], b"");
    assert_eq!(code, 128 + libc::SIGTERM, "killed by a signal: 128+N");
    let (code, out, err) = run_with(&d.addr, &["/nonexistent/program"], b"");
    assert_eq!(code, 127, "cannot start: {out} {err}");
    assert!(err.contains("cannot start /nonexistent/program"), "{err}");
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = unused.local_addr().unwrap().to_string();
    drop(unused);
    let (code, _, err) = run_with(&addr, &["true"], b"");
    assert_eq!(code, 69, "no daemon: {err}");
}
