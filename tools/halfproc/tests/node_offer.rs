//! The offer before the freeze (`Offer` -> `Accept`/`Denied`/`Error`): what
//! a destination refuses without the image is refused before the program
//! is stopped. Each refusal is checked from the program's side: its
//! /proc status, read all through `halfproc migrate`, never shows it
//! stopped or traced; and the answer says so ("was never stopped").
//!
//! - a destination that does not admit the source (no shared secret):
//!   `Denied`, exit 77;
//! - a destination that cannot take the owner's uid (it runs as another,
//!   non-root user; needs root to start it so, skipped otherwise):
//!   `Denied`, exit 77;
//! - a full destination (`--max-programs 1`, its slot held by an accepted
//!   offer): exit 1; the offer's ticket expires, and then the migration
//!   goes through; a `PreCopy` without an offer is an error;
//! - a destination whose restorer would run past its `RLIMIT_AS`
//!   (`prlimit --as`, inherited from its daemon) for `xz -9`'s mappings:
//!   exit 1, naming the limit and both sizes.

mod common;

use common::*;
use halfproc_node::proto::{Conn, Creds, Identity, Msg, Origin};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a poll of /proc/PID/status saw while a command ran.
#[derive(Debug, Default)]
struct Seen {
    polls: u64,
    /// `State:` lines showing a stop (`T` stopped, `t` tracing stop).
    stopped: Vec<String>,
    /// `TracerPid:` lines other than 0.
    traced: Vec<String>,
}

/// Runs `cmd` while another thread reads /proc/`pid`/status over and
/// over: (exit code, stderr, what was seen). A freeze (ptrace seize and
/// interrupt) shows as `t` and a tracer for all of the dump.
fn watched(pid: i32, mut cmd: Command) -> (Option<i32>, String, Seen) {
    let done = Arc::new(AtomicBool::new(false));
    let d2 = done.clone();
    let poller = std::thread::spawn(move || {
        let mut seen = Seen::default();
        let path = format!("/proc/{pid}/status");
        // At least one look after the command ended, then stop.
        loop {
            let last = d2.load(Ordering::SeqCst);
            let st = std::fs::read_to_string(&path).expect("the program ended");
            seen.polls += 1;
            for l in st.lines() {
                if l.starts_with("State:") && (l.contains("T (") || l.contains("t (")) {
                    seen.stopped.push(l.to_string());
                }
                if l.starts_with("TracerPid:") && l.split_whitespace().nth(1) != Some("0") {
                    seen.traced.push(l.to_string());
                }
            }
            if last {
                return seen;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    });
    let o = cmd.output().unwrap();
    done.store(true, Ordering::SeqCst);
    let seen = poller.join().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        seen,
    )
}

fn assert_never_stopped(seen: &Seen, err: &str) {
    assert!(seen.polls > 0, "no poll");
    assert!(
        seen.stopped.is_empty() && seen.traced.is_empty(),
        "the program was seen stopped in {} and traced in {} of {} polls ({:?}, {:?}): {err}",
        seen.stopped.len(),
        seen.traced.len(),
        seen.polls,
        seen.stopped.first(),
        seen.traced.first()
    );
    assert!(
        err.contains("was never stopped") && !err.contains("resumed"),
        "{err}"
    );
}

fn migrate_cmd(mut client: Command, from: &str, pid: i32, to: &str) -> Command {
    client.args(["migrate", "--node", from, &pid.to_string(), "--to", to]);
    client
}

/// No program of the node's `ps` (the header line only).
fn runs_nothing(ps: &str) -> bool {
    ps.lines().skip(1).all(|l| l.trim().is_empty())
}

#[test]
fn a_node_that_does_not_admit_the_source_never_stops_the_program() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (Daemon::start_open(), Daemon::start_open());
    let argv = [targets(), "plain", "400", "wait"];
    let (want, want_code) = reference(&argv, None);
    let (r, held) = run_held_via(halfproc_plain(), &a, &argv, None, tmp.path(), "open");
    let pid = r.pid();
    let cmd = migrate_cmd(halfproc_plain(), &a.addr, pid, &b.addr);
    let (code, err, seen) = watched(pid, cmd);
    assert_eq!(code, Some(77), "{err}");
    assert!(err.contains("no shared secret"), "{err}");
    assert_never_stopped(&seen, &err);
    let o = halfproc_plain()
        .args(["ps", "--node", &b.addr])
        .output()
        .unwrap();
    assert!(
        runs_nothing(&String::from_utf8_lossy(&o.stdout)),
        "B runs something"
    );
    held.close();
    let (out, code, err) = r.finish();
    assert_same("open", &out, &want);
    assert_eq!(code, want_code, "{err}");
}

#[test]
fn a_node_that_cannot_take_the_owner_never_stops_the_program() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: needs root to start a destination as another user");
        return;
    }
    const B_UID: u32 = 65533;
    use std::os::unix::fs::{chown, PermissionsExt};
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // The nodes' secret, readable by B's user (and root).
    let secret = tmp.path().join("secret");
    std::fs::write(&secret, "0123456789abcdef0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    chown(&secret, Some(B_UID), Some(B_UID)).unwrap();
    let bdir = tmp.path().join("b");
    std::fs::create_dir(&bdir).unwrap();
    chown(&bdir, Some(B_UID), Some(B_UID)).unwrap();
    let s = secret.to_str().unwrap();
    let a = Daemon::start_with(&["--secret-file", s]);
    let b = Daemon::start_wrapped(
        &[
            "setpriv",
            &format!("--reuid={B_UID}"),
            &format!("--regid={B_UID}"),
            "--clear-groups",
            "--",
        ],
        &[
            "--secret-file",
            s,
            "--control",
            bdir.join("b.sock").to_str().unwrap(),
        ],
        &[],
    );
    let client = || {
        let mut c = halfproc_plain();
        c.env("HALFPROC_NODE_SECRET_FILE", s);
        c
    };
    let argv = [targets(), "plain", "400", "wait"];
    let (want, want_code) = reference(&argv, None);
    let (r, held) = run_held_via(client(), &a, &argv, None, tmp.path(), "owner");
    let pid = r.pid();
    let (code, err, seen) = watched(pid, migrate_cmd(client(), &a.addr, pid, &b.addr));
    assert_eq!(code, Some(77), "{err}");
    assert!(
        err.contains(&format!(
            "this node runs as uid {B_UID} and cannot restore a program of uid 0"
        )),
        "{err}"
    );
    assert_never_stopped(&seen, &err);
    held.close();
    let (out, code, err) = r.finish();
    assert_same("owner", &out, &want);
    assert_eq!(code, want_code, "{err}");
}

/// A raw node-to-node connection (with the tests' secret).
struct Raw {
    rt: tokio::runtime::Runtime,
    conn: Conn,
}

impl Raw {
    fn connect(addr: &str) -> Raw {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let me = Identity::load(1, Some(test_secret())).unwrap();
        let conn = rt.block_on(Conn::connect(addr, &me)).unwrap();
        Raw { rt, conn }
    }

    fn ask(&mut self, m: Msg) -> Msg {
        self.rt.block_on(self.conn.send(&m)).unwrap();
        self.next()
    }

    fn next(&mut self) -> Msg {
        let conn = &mut self.conn;
        self.rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(30), conn.recv()).await })
            .expect("no answer in 30 s")
            .expect("connection")
    }
}

fn offer() -> Msg {
    Msg::Offer {
        program: "raw".into(),
        // This test's own ids (the daemons run as the same user).
        owner: Box::new(Creds::current()),
        origin: Origin {
            addr: "127.0.0.1:1".into(),
            node: 1,
            session: 1,
        },
        image_bytes: 4096,
        mapped: Default::default(),
        precopy: false,
        tree: vec![],
    }
}

#[test]
fn a_full_node_refuses_before_the_freeze_and_an_offer_holds_its_slot() {
    let tmp = tempfile::tempdir().unwrap();
    const HOLD_MS: u64 = 4000;
    let a = Daemon::start();
    let hold = HOLD_MS.to_string();
    let b = Daemon::start_env(
        &["--max-programs", "1"],
        &[("HALFPROC_OFFER_HOLD_MS", &hold)],
    );
    // A migration must begin with an offer.
    let mut raw = Raw::connect(&b.addr);
    let m = raw.ask(Msg::PreCopy);
    assert!(
        matches!(&m, Msg::Error(e) if e.contains("a migration starts with Offer")),
        "{m:?}"
    );
    // An accepted offer holds B's only slot...
    let mut raw = Raw::connect(&b.addr);
    let accepted = Instant::now();
    let m = raw.ask(offer());
    let Msg::Accept { hold_ms, .. } = m else {
        panic!("offer not accepted: {m:?}");
    };
    assert_eq!(hold_ms, HOLD_MS);

    let argv = [targets(), "plain", "400", "wait"];
    let (want, want_code) = reference(&argv, None);
    let (r, held) = run_held(&a, &argv, None, tmp.path(), "full");
    let pid = r.pid();
    // ...so a real migration is refused before its program is stopped.
    let (code, err, seen) = watched(pid, migrate_cmd(halfproc(), &a.addr, pid, &b.addr));
    assert!(
        accepted.elapsed() < Duration::from_millis(HOLD_MS),
        "too slow to test the hold: {:?}",
        accepted.elapsed()
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("this node is full: 0 program(s) run here and 1 migration(s) are on their way, of at most 1 (--max-programs)"),
        "{err}"
    );
    assert_never_stopped(&seen, &err);

    // No migration follows the offer: its ticket expires and is returned
    // before B says so.
    let m = raw.next();
    assert!(
        matches!(&m, Msg::Error(e) if e.contains("expired: no migration came within 4000 ms")),
        "{m:?}"
    );
    let moved = migrate(&a.addr, pid, &b.addr).expect("migration once the slot is free");
    assert!(!moved.said.contains("never stopped"), "{}", moved.said);
    // Now a program runs there: B is full without any ticket.
    let m = Raw::connect(&b.addr).ask(offer());
    assert!(
        matches!(&m, Msg::Error(e) if e.contains("this node is full: 1 program(s) run here")),
        "{m:?}"
    );
    held.close();
    let (out, code, err) = r.finish();
    assert_same("full", &out, &want);
    assert_eq!(code, want_code, "{err}");
}

/// A process tree is restored with its pids: an offer of one whose pid is
/// taken on the destination is refused there, before anything is stopped;
/// a `TreeIn` that follows an offer of one process is no tree.
#[test]
fn a_tree_whose_pids_are_taken_is_refused_by_its_offer() {
    let b = Daemon::start();
    let me = std::process::id() as i32;
    let mut taken = offer();
    if let Msg::Offer { tree, .. } = &mut taken {
        *tree = vec![me, 1];
    }
    let m = Raw::connect(&b.addr).ask(taken);
    assert!(
        matches!(&m, Msg::Error(e) if e.contains(&format!("pid {me} is in use here (by a process)"))),
        "{m:?}"
    );
    let mut raw = Raw::connect(&b.addr);
    let Msg::Accept { ticket, .. } = raw.ask(offer()) else {
        panic!("offer not accepted");
    };
    let m = raw.ask(Msg::TreeIn {
        id: 1,
        ticket,
        origin: Origin {
            addr: "127.0.0.1:1".into(),
            node: 1,
            session: 1,
        },
        gen: 1,
        stdin_offset: 0,
        program: "raw".into(),
        owner: Box::new(Creds::current()),
        procs: vec![],
        manifests: vec![],
    });
    assert!(
        matches!(&m, Msg::Error(e) if e.contains("expected MigrateIn after Accept, got TreeIn")),
        "{m:?}"
    );
}

/// The destination's daemon runs under `prlimit --as=400MiB`, which the
/// restorer it forks inherits (the program's own limits are set after its
/// memory is rebuilt), and `xz -9` maps about 674 MiB: the restore could
/// not map it, and the offer says so before anything is stopped.
#[test]
fn a_restore_beyond_the_nodes_rlimit_as_never_stops_the_program() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input.txt");
    input_file(&input, 4 << 20);
    let argv = [tool("xz"), "-9", "-T1", "-c"];
    let (want, want_code) = reference(&argv, Some(&input));
    let limit = format!("--as={}", 400 << 20);
    let a = Daemon::start();
    let small = Daemon::start_wrapped(&["prlimit", &limit, "--"], &[], &[]);
    let (r, held) = run_held(&a, &argv, Some(&input), tmp.path(), "xz-as");
    let pid = r.pid();
    // Offered once its encoder is allocated (on loaded cores 300 ms may
    // not be enough, and a program that maps after the offer is refused
    // only on MigrateIn, after the freeze).
    wait_vm_size(pid, 600 << 20);
    let (code, err, seen) = watched(pid, migrate_cmd(halfproc(), &a.addr, pid, &small.addr));
    eprintln!("{err}");
    assert_never_stopped(&seen, &err);
    assert_eq!(code, Some(1), "{err}");
    let maps = err
        .split("the program maps ")
        .nth(1)
        .and_then(|t| {
            t.split(" MiB and this node's restorer runs under RLIMIT_AS 400.0 MiB")
                .next()
        })
        .and_then(|n| n.parse::<f64>().ok());
    assert!(
        maps.is_some_and(|m| m > 600.0) && err.contains("not enough address space"),
        "the refusal does not name the limit and both sizes: {err}"
    );
    assert!(runs_nothing(&ps(&small)), "B runs something");
    held.close();
    let (out, code, err) = r.finish();
    assert_same("xz refused by RLIMIT_AS", &out, &want);
    assert_eq!(code, want_code, "xz exit status ({err})");
}
