// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Nodes that were not started with the run join it while it runs (`dmi
//! node join --run HOST:PORT`, `dmi run --accept-joins`): real processes,
//! loopback and, as root with `ip netns`, a second network address behind
//! a veth pair. The programs check themselves: `dmi reconf-stress`'s
//! histories (`dmi check`) and `examples/reconf_test.c`'s counters, equal
//! to a run that never changed size. And the refusals: wrong secret, a run
//! that does not accept joins, a run that is ending, an unreachable run.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod common;
use common::{build_example, libdmi, text, Link};

const BIN: &str = env!("CARGO_BIN_EXE_dmi");

/// Builds libdmi and `examples/reconf_test.c` against it.
fn reconf_test() -> PathBuf {
    build_example(
        &libdmi(),
        "reconf_test",
        &tmp("bin"),
        "reconf_test",
        &[],
        Link::Direct,
    )
}

fn tmp(what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dmi-join-{}-{what}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A secret file of mode 600.
fn secret(dir: &Path, name: &str, content: &str) -> PathBuf {
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&p)
        .and_then(|mut f| std::io::Write::write_all(&mut f, content.as_bytes()))
        .unwrap();
    p
}

/// A process whose stdout and stderr lines arrive on `lines` and are kept.
struct Proc {
    child: Child,
    lines: Receiver<String>,
    readers: Vec<JoinHandle<String>>,
}

impl Proc {
    fn spawn(c: &mut Command) -> Proc {
        let mut child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = channel();
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let read = |r: Box<dyn std::io::Read + Send>, tx: std::sync::mpsc::Sender<String>| {
            std::thread::spawn(move || {
                let mut all = String::new();
                for l in BufReader::new(r).lines().map_while(Result::ok) {
                    let _ = tx.send(l.clone());
                    all += &l;
                    all.push('\n');
                }
                all
            })
        };
        let readers = vec![read(Box::new(out), tx.clone()), read(Box::new(err), tx)];
        Proc {
            child,
            lines,
            readers,
        }
    }

    /// The first line (from now on) containing `what`.
    fn wait_for(&self, what: &str) -> String {
        let t0 = Instant::now();
        loop {
            let left = Duration::from_secs(60).saturating_sub(t0.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(what) => return l,
                Ok(_) => {}
                Err(_) => panic!("no {what:?} within 60 s"),
            }
        }
    }

    /// Waits for the end: (success, stdout, stderr).
    fn end(mut self) -> (bool, String, String) {
        let t0 = Instant::now();
        let st = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if t0.elapsed() > Duration::from_secs(120) {
                let _ = self.child.kill();
                break self.child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut r = std::mem::take(&mut self.readers).into_iter();
        let out = r.next().unwrap().join().unwrap();
        let err = r.next().unwrap().join().unwrap();
        (st.success(), out, err)
    }
}

impl Drop for Proc {
    /// A failed test leaves no node running.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The word after `after` in `line`.
fn word_after(line: &str, after: &str) -> String {
    let i = line
        .find(after)
        .unwrap_or_else(|| panic!("{after:?} in {line:?}"));
    line[i + after.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// `dmi node join --run AT --secret-file S -- PROG...` as a process.
fn joiner(at: &str, s: &Path, prog: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(["node", "join", "--run", at, "--secret-file"])
        .arg(s)
        .arg("--")
        .args(prog);
    c
}

#[test]
fn nodes_from_outside_join_a_running_program_and_one_leaves_again() {
    let base = tmp("live");
    let (s, bad) = (
        secret(&base, "s", "run secret\n"),
        secret(&base, "bad", "other"),
    );
    let (sock, dir) = (base.join("ctl.sock"), base.join("h"));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    let prog = [
        BIN,
        "reconf-stress",
        "--iters",
        "600",
        "--ops",
        "1",
        "--pause-ms",
        "5",
        "--dir",
        d,
    ];
    let run = Proc::spawn(
        Command::new(BIN)
            .args(["run", "-n", "1", "--accept-joins", "--secret-file"])
            .arg(&s)
            .arg("--control")
            .arg(&sock)
            .arg("--")
            .args(prog),
    );
    let at = word_after(&run.wait_for("accepts joins at"), "accepts joins at ");
    let t0 = Instant::now();
    while !sock.exists() {
        assert!(t0.elapsed() < Duration::from_secs(20), "no control socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A wrong secret is refused, and the run goes on.
    let o = joiner(&at, &bad, &prog).output().unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("refused: wrong secret"),
        "{}",
        text(&o)
    );
    // A node from outside joins through node 0 ...
    let j1 = Proc::spawn(&mut joiner(&at, &s, &prog));
    let line = run.wait_for("node 1 at ");
    let at1 = word_after(&line, "node 1 at ");
    run.wait_for("[0] -> [0, 1]");
    // ... and another through node 1, which sends it on to node 0.
    let j2 = Proc::spawn(&mut joiner(&at1, &s, &prog));
    run.wait_for("[0, 1] -> [0, 1, 2]");
    let o = Command::new(BIN)
        .arg("node")
        .arg("--control")
        .arg(&sock)
        .args(["leave", "2"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    run.wait_for("[0, 1, 2] -> [0, 1]");
    let (ok, out, err) = run.end();
    assert!(ok, "{out}\n{err}");
    assert!(
        out.contains("reconf-stress: 600 iterations"),
        "{out}\n{err}"
    );
    for (j, rank) in [(j1, 1), (j2, 2)] {
        let (ok, out, err) = j.end();
        assert!(ok, "joiner {rank}: {out}\n{err}");
        assert!(
            err.contains(&format!("joined the run as node {rank}")),
            "{out}\n{err}"
        );
    }
    // Every itergroup thread's history (node 0's, and nodes 1 and 2's
    // written by the processes that joined), checked together.
    let files = std::fs::read_dir(&dir).unwrap().count();
    assert!(files >= 4, "{files} histories");
    let c = Command::new(BIN).args(["check", d]).output().unwrap();
    assert!(c.status.success(), "{}", text(&c));
    // The run is over: nobody listens there any more.
    let o = joiner(&at, &s, &prog).output().unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cannot connect"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// `dmi run -n 1 ... reconf_test ITERS PAUSE` (plus `flags` before the
/// program).
fn run_reconf(prog: &Path, flags: &[&str], s: &Path, args: &[&str]) -> Proc {
    Proc::spawn(
        Command::new(BIN)
            .args(["run", "-n", "1", "--secret-file"])
            .arg(s)
            .args(flags)
            .arg("--")
            .arg(prog)
            .args(args),
    )
}

#[test]
fn counters_are_those_of_a_fixed_run_and_joins_are_refused_when_not_accepted() {
    let prog = reconf_test();
    let base = tmp("counters");
    let s = secret(&base, "s", "counters");
    let p = prog.to_str().unwrap();
    let want = "reconf ok: 24 counters at 150";
    let fixed = run_reconf(&prog, &[], &s, &["150"]).end();
    assert!(fixed.0 && fixed.1.contains(want), "{fixed:?}");
    assert!(
        fixed.1.contains("itergroups 1(in 0 out 0 cur 0)\n"),
        "{fixed:?}"
    );

    let run = run_reconf(&prog, &["--accept-joins"], &s, &["150", "10"]);
    let at = word_after(&run.wait_for("accepts joins at"), "accepts joins at ");
    // Until DMI_rescale runs, joins are refused (the node may come too
    // early; then it says so, and this tries again).
    let j = loop {
        let mut c = joiner(&at, &s, &[p]);
        let j = Proc::spawn(&mut c);
        let l = j.wait_for("dmi");
        if !l.contains("not accept joins yet") {
            break j;
        }
        assert!(!j.end().0);
    };
    run.wait_for("[0] -> [0, 1]");
    let (ok, out, err) = run.end();
    assert!(ok && out.contains(want), "{out}\n{err}");
    // One itergroup on node 0, the next on nodes 0 and 1 (the judge saw
    // one node coming in, none leaving, one current).
    assert!(
        out.contains("itergroups 1(in 1 out 0 cur 1) 2(in 0 out 0 cur 0)"),
        "{out}\n{err}"
    );
    let (ok, jo, je) = j.end();
    assert!(ok && je.contains("joined the run as node 1"), "{jo}\n{je}");

    // A run started without --accept-joins refuses.
    let run = run_reconf(&prog, &["--verbose"], &s, &["100", "10"]);
    let at = word_after(&run.wait_for("node 0 pid"), " at ");
    let o = joiner(&at, &s, &[p]).output().unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("does not accept joins (start it with dmi run --accept-joins"),
        "{}",
        text(&o)
    );
    let (ok, out, err) = run.end();
    assert!(
        ok && out.contains("reconf ok: 24 counters at 100"),
        "{out}\n{err}"
    );

    // A run whose DMI_rescale returned is ending.
    let run = run_reconf(&prog, &["--accept-joins"], &s, &["3", "0", "3000"]);
    let at = word_after(&run.wait_for("accepts joins at"), "accepts joins at ");
    run.wait_for("rescale returned");
    let o = joiner(&at, &s, &[p]).output().unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("refused: the run is ending"),
        "{}",
        text(&o)
    );
    let (ok, out, err) = run.end();
    assert!(
        ok && out.contains("reconf ok: 24 counters at 3"),
        "{out}\n{err}"
    );

    // Bad command lines: no secret, a secret others can read.
    let o = Command::new(BIN)
        .args(["node", "join", "--run", &at, "--", p])
        .env_remove("DMI_SECRET_FILE")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--secret-file FILE"),
        "{}",
        text(&o)
    );
    let open = base.join("open");
    std::fs::write(&open, "x").unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let o = joiner(&at, &open, &[p]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("readable by others"),
        "{}",
        text(&o)
    );
    let o = Command::new(BIN)
        .args(["run", "--accept-joins", p])
        .output()
        .unwrap();
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--secret-file"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// A network namespace joined to this one by a veth pair: a second
/// "machine" at another address. Removed on drop.
struct Netns {
    name: String,
    host_if: String,
    net: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

impl Netns {
    fn new() -> Result<Netns, String> {
        let id = std::process::id();
        let net = format!("10.213.{}", id % 250 + 1);
        let ns = Netns {
            name: format!("dmij{id}"),
            host_if: format!("dmjh{}", id % 100_000),
            net,
        };
        let peer = format!("dmjn{}", id % 100_000);
        let (n, h) = (ns.name.as_str(), ns.host_if.as_str());
        ip(&["netns", "add", n])?;
        ip(&["link", "add", h, "type", "veth", "peer", "name", &peer])?;
        ip(&["link", "set", &peer, "netns", n])?;
        ip(&["addr", "add", &format!("{}.1/24", ns.net), "dev", h])?;
        ip(&["link", "set", h, "up"])?;
        ip(&[
            "-n",
            n,
            "addr",
            "add",
            &format!("{}.2/24", ns.net),
            "dev",
            &peer,
        ])?;
        ip(&["-n", n, "link", "set", &peer, "up"])?;
        ip(&["-n", n, "link", "set", "lo", "up"])?;
        Ok(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.host_if]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}

#[test]
fn a_node_at_another_network_address_joins() {
    // SAFETY: geteuid only returns the caller's effective uid.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP a_node_at_another_network_address_joins: not root (needs ip netns)");
        return;
    }
    let ns = match Netns::new() {
        Ok(ns) => ns,
        Err(e) => {
            eprintln!("SKIP a_node_at_another_network_address_joins: no network namespace: {e}");
            return;
        }
    };
    let prog = reconf_test();
    let base = tmp("netns");
    let s = secret(&base, "s", "netns");
    let p = prog.to_str().unwrap();
    let host_ip = format!("{}.1", ns.net);
    let run = run_reconf(
        &prog,
        &["--accept-joins", "--bind", &host_ip],
        &s,
        &["200", "10"],
    );
    let at = word_after(&run.wait_for("accepts joins at"), "accepts joins at ");
    assert!(at.starts_with(&host_ip), "{at}");
    // Node 1 runs in the namespace (it listens at NET.2, the address its
    // connection to node 0 leaves from); node 2 runs here and connects to
    // node 1 over the veth pair.
    let mut c = Command::new("ip");
    c.args([
        "netns",
        "exec",
        &ns.name,
        BIN,
        "node",
        "join",
        "--run",
        &at,
        "--secret-file",
    ])
    .arg(&s)
    .args(["--", p]);
    let j1 = loop {
        let j = Proc::spawn(&mut c);
        if !j.wait_for("dmi").contains("not accept joins yet") {
            break j;
        }
        assert!(!j.end().0);
    };
    let l = run.wait_for("node 1 at ");
    assert!(
        word_after(&l, "node 1 at ").starts_with(&format!("{}.2:", ns.net)),
        "{l}"
    );
    run.wait_for("[0] -> [0, 1]");
    let j2 = Proc::spawn(&mut joiner(&at, &s, &[p]));
    run.wait_for("[0, 1] -> [0, 1, 2]");
    let (ok, out, err) = run.end();
    assert!(
        ok && out.contains("reconf ok: 24 counters at 200"),
        "{out}\n{err}"
    );
    for (j, rank) in [(j1, 1), (j2, 2)] {
        let (ok, out, err) = j.end();
        assert!(
            ok && err.contains(&format!("joined the run as node {rank}")),
            "{out}\n{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&base);
}
