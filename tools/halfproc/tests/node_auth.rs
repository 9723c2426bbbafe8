//! Who a node serves over TCP.
//!
//! - Nodes with a shared secret (`--secret-file`) serve only peers that
//!   prove they hold it: clients and nodes without it, or with another, are
//!   refused before any request, and a migration to a node without it is
//!   refused while the program keeps running.
//! - A node without a secret listens on loopback only (exit 2 otherwise)
//!   and serves `ps` alone over TCP: a TCP peer (any local user) may not
//!   run, restore, checkpoint or migrate anything, nor send it an image;
//!   local clients are served on its control socket, which a loopback
//!   `--node` finds by default.
//! - After the handshake every frame carries an HMAC: a frame altered on
//!   the way ends the migration, and the program keeps running.

mod common;

use common::*;
use halfproc_node::proto::{decode, Msg};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};

/// A client without a secret that finds no control socket: it uses TCP.
fn tcp_client() -> Command {
    let mut c = halfproc_plain();
    c.env("HALFPROC_RUN_DIR", "/nonexistent/halfproc-run");
    c
}

fn ps_with(d: &Daemon, secret: Option<&Path>) -> (bool, String) {
    let mut c = tcp_client();
    c.args(["ps", "--node", &d.addr]);
    if let Some(s) = secret {
        c.arg("--secret-file").arg(s);
    }
    let o = c.output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn output(mut c: Command) -> (Option<i32>, String, String) {
    let o = c.stdin(Stdio::null()).output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).trim().to_string(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn wait_pid(pid_file: &Path) -> i32 {
    while std::fs::read_to_string(pid_file).map_or(true, |p| p.trim().is_empty()) {
        sleep_ms(5);
    }
    std::fs::read_to_string(pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn shared_secret_is_required_and_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let secret = tmp.path().join("secret");
    std::fs::write(&secret, "0123456789abcdef0123456789abcdef\n").unwrap();
    let other = tmp.path().join("other");
    std::fs::write(&other, "fedcba9876543210fedcba9876543210\n").unwrap();
    let s = secret.to_str().unwrap();
    let (a, b, open) = (
        Daemon::start_with(&["--secret-file", s]),
        Daemon::start_with(&["--secret-file", s]),
        Daemon::start_open(),
    );

    assert!(
        ps_with(&a, Some(&secret)).0,
        "client with the secret refused"
    );
    for (who, key) in [
        ("no secret", None),
        ("another secret", Some(other.as_path())),
    ] {
        let (ok, err) = ps_with(&a, key);
        assert!(!ok, "client with {who} served");
        assert!(err.contains("authentication failed"), "{who}: {err}");
    }
    // A client with the secret does not talk to a node without it.
    let (ok, err) = ps_with(&open, Some(&secret));
    assert!(!ok && err.contains("authentication failed"), "{err}");

    let argv = [targets(), "plain", "1500"];
    let (want, want_code) = reference(&argv, None);
    let pid_file = tmp.path().join("pid");
    let out = tmp.path().join("out");
    let mut run = tcp_client()
        .args(["run", "--node", &a.addr, "--secret-file", s, "--pid-file"])
        .arg(&pid_file)
        .arg("--")
        .args(argv)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .spawn()
        .unwrap();
    let pid = wait_pid(&pid_file);
    let migrate = |from: &str, pid: i32, to: &str| {
        let mut c = tcp_client();
        c.env("HALFPROC_NODE_SECRET_FILE", s).args([
            "migrate",
            "--node",
            from,
            &pid.to_string(),
            "--to",
            to,
        ]);
        output(c)
    };
    let (code, _, e) = migrate(&a.addr, pid, &open.addr);
    assert_eq!(code, Some(1), "migrated to a node without the secret: {e}");
    assert!(
        e.contains("authentication failed") && e.contains("keeps running here"),
        "{e}"
    );
    let (code, on_b, e) = migrate(&a.addr, pid, &b.addr);
    assert_eq!(code, Some(0), "{e}");
    let on_b: i32 = on_b.parse().unwrap();
    let (code, _, e) = migrate(&b.addr, on_b, &a.addr);
    assert_eq!(code, Some(0), "{e}");
    let st = run.wait().unwrap();
    assert_same("plain", &std::fs::read(&out).unwrap(), &want);
    assert_eq!(st.code(), Some(want_code));
}

#[test]
fn without_a_secret_a_node_listens_on_loopback_only() {
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let (code, _, err) = output({
            let mut c = halfproc_plain();
            c.args(["node", "--listen", listen]);
            c
        });
        assert_eq!(code, Some(2), "listen {listen}: {err}");
        assert!(
            err.contains("refusing to listen on")
                && err.contains("without a shared secret")
                && err.contains("--secret-file"),
            "{err}"
        );
    }
}

/// A node without a secret: over TCP only `ps`; its own user's clients
/// are served on the control socket, found from the loopback address.
#[test]
fn without_a_secret_tcp_serves_ps_only() {
    let tmp = tempfile::tempdir().unwrap();
    let (d, e) = (Daemon::start_open(), Daemon::start_open());
    assert!(
        d.control.starts_with(run_dir()),
        "control socket {} not in {}",
        d.control.display(),
        run_dir().display()
    );
    let (ok, err) = ps_with(&d, None);
    assert!(ok, "ps over TCP: {err}");

    let denied = |args: &[&str]| {
        let mut c = tcp_client();
        c.args(args);
        let (code, _, err) = output(c);
        assert_eq!(code, Some(77), "{args:?} over TCP without a secret: {err}");
        assert!(
            err.contains("no shared secret")
                && err.contains(&format!("--node unix:{}", d.control.display())),
            "{args:?}: {err}"
        );
    };
    let marker = tmp.path().join("ran");
    let touch = format!("touch {}", marker.display());
    denied(&["run", "--node", &d.addr, "--", "sh", "-c", &touch]);
    assert!(!marker.exists(), "a TCP peer ran a program");

    // The same user's client, no --node given but the loopback address:
    // through the control socket.
    let argv = [targets(), "plain", "400", "wait"];
    let (want, want_code) = reference(&argv, None);
    let (stdin_r, stdin_w) = std::io::pipe().unwrap();
    let pid_file = tmp.path().join("pid");
    let out = tmp.path().join("out");
    let mut run = halfproc_plain()
        .args(["run", "--node", &d.addr, "--pid-file"])
        .arg(&pid_file)
        .arg("--")
        .args(argv)
        .stdin(stdin_r)
        .stdout(std::fs::File::create(&out).unwrap())
        .spawn()
        .unwrap();
    let pid = wait_pid(&pid_file);
    let img = tmp.path().join("img");
    let (pid_s, img_s) = (pid.to_string(), img.to_str().unwrap().to_string());
    denied(&["checkpoint", "--node", &d.addr, &pid_s, "-o", &img_s]);
    assert!(!img.exists(), "a TCP peer wrote an image");
    denied(&["migrate", "--node", &d.addr, &pid_s, "--to", &e.addr]);
    denied(&["restore", "--node", &d.addr, &img_s]);
    // A node's request over TCP (an image to restore follows): refused as well.
    let answer = halfproc_node::client::request(
        &d.addr,
        &halfproc_node::proto::Identity::default(),
        Msg::PreCopy,
        |_| {},
    )
    .unwrap();
    assert!(
        matches!(&answer, Msg::Denied(w) if w.contains("no shared secret")),
        "{answer:?}"
    );

    // Through the control socket the owner may checkpoint it...
    let mut c = halfproc_plain();
    c.args(["checkpoint", "--node", &d.addr, &pid_s, "-o", &img_s]);
    let (code, _, err) = output(c);
    assert_eq!(code, Some(0), "checkpoint on the control socket: {err}");
    assert!(img.read_dir().unwrap().count() > 0, "no image written");
    // ...but a migration to another node needs the nodes' secret: the
    // other node refuses the offer, before the program is stopped.
    let mut c = halfproc_plain();
    c.args(["migrate", "--node", &d.addr, &pid_s, "--to", &e.addr]);
    let (code, _, err) = output(c);
    assert_eq!(code, Some(77), "{err}");
    assert!(
        err.contains("no shared secret") && err.contains("was never stopped"),
        "{err}"
    );
    drop(stdin_w);
    let st = run.wait().unwrap();
    assert_same("plain", &std::fs::read(&out).unwrap(), &want);
    assert_eq!(st.code(), Some(want_code));
}

/// Flips one byte of the program's name in the source's `MigrateIn` (a
/// field nothing else checks) and forwards everything else untouched.
fn tampering_proxy(dest: String) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (mut src, _) = l.accept().unwrap();
        let mut dst = TcpStream::connect(dest).unwrap();
        let (mut src2, mut dst2) = (src.try_clone().unwrap(), dst.try_clone().unwrap());
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut dst2, &mut src2);
            let _ = src2.shutdown(Shutdown::Write);
        });
        loop {
            let mut len = [0u8; 4];
            if src.read_exact(&mut len).is_err() {
                break;
            }
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            if src.read_exact(&mut body).is_err() {
                break;
            }
            if let Ok(Msg::MigrateIn { program, .. }) = decode(&body) {
                let name = program.as_bytes();
                let at = body
                    .windows(name.len())
                    .position(|w| w == name)
                    .expect("the program's name in its frame");
                let last = at + name.len() - 1;
                body[last] = if body[last] == b'X' { b'Y' } else { b'X' };
            }
            if dst.write_all(&len).is_err() || dst.write_all(&body).is_err() {
                break;
            }
        }
        let _ = dst.shutdown(Shutdown::Write);
    });
    addr
}

#[test]
fn a_frame_altered_on_the_way_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (Daemon::start(), Daemon::start());
    let argv = [targets(), "plain", "400", "wait"];
    let (want, want_code) = reference(&argv, None);
    let (r, held) = run_held(&a, &argv, None, tmp.path(), "tampered");
    let pid = r.pid();
    let via = tampering_proxy(b.addr.clone());
    let err = migrate(&a.addr, pid, &via).expect_err("migrated with an altered frame");
    assert!(
        err.contains("integrity check") && err.contains("was resumed here"),
        "{err}"
    );
    let on_b = ps(&b);
    assert!(
        on_b.lines().skip(1).all(|l| l.trim().is_empty()),
        "B keeps a copy: {on_b}"
    );
    // Untouched, the same migration goes through.
    migrate(&a.addr, pid, &b.addr).expect("migration without the proxy");
    held.close();
    let (out, code, err) = r.finish();
    assert_same("tampered", &out, &want);
    assert_eq!(code, want_code, "{err}");
}
