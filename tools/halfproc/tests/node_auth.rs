//! Nodes with a shared secret (`--secret-file`) serve only peers that prove
//! they hold it: clients and nodes without it, or with another, are refused
//! before any request, and a migration to a node without it is refused while
//! the program keeps running.

mod common;

use common::*;

fn ps_with(d: &Daemon, secret: Option<&std::path::Path>) -> (bool, String) {
    let mut c = halfproc();
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
        Daemon::start(),
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
    let mut run = halfproc()
        .args(["run", "--node", &a.addr, "--secret-file", s, "--pid-file"])
        .arg(&pid_file)
        .arg("--")
        .args(argv)
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .spawn()
        .unwrap();
    while std::fs::read_to_string(&pid_file).map_or(true, |p| p.trim().is_empty()) {
        sleep_ms(5);
    }
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let migrate = |from: &str, pid: i32, to: &str| {
        halfproc()
            .env("HALFPROC_NODE_SECRET_FILE", s)
            .args(["migrate", "--node", from, &pid.to_string(), "--to", to])
            .output()
            .unwrap()
    };
    let o = migrate(&a.addr, pid, &open.addr);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(1),
        "migrated to a node without the secret: {e}"
    );
    assert!(
        e.contains("authentication failed") && e.contains("keeps running here"),
        "{e}"
    );
    let o = migrate(&a.addr, pid, &b.addr);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let on_b: i32 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    let o = migrate(&b.addr, on_b, &a.addr);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let st = run.wait().unwrap();
    assert_same("plain", &std::fs::read(&out).unwrap(), &want);
    assert_eq!(st.code(), Some(want_code));
}
