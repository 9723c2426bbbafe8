//! The destination dies in the middle of a migration (a loopback proxy
//! between the nodes SIGKILLs the destination daemon at a chosen point): the
//! program is resumed on the source, the error says what happened, the copy
//! on the dead node does not survive, and the program later migrates to a
//! healthy node and finishes with the output and status of an unmigrated run.

mod common;

use common::*;
use halfproc_node::proto::{decode, Msg};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::{Duration, Instant};

#[derive(Clone, Copy)]
enum KillAt {
    /// After this many bytes of the source's stream were forwarded.
    Bytes(usize),
    /// When the destination answers that it restored the copy (`Restored`).
    Restored,
}

/// A proxy to `dest` that kills the daemon `dest_pid` at `at` and cuts both
/// connections. Returns its address.
fn killing_proxy(dest: String, dest_pid: i32, at: KillAt) -> (String, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let h = std::thread::spawn(move || {
        let (mut src, _) = l.accept().unwrap();
        let mut dst = TcpStream::connect(dest).unwrap();
        let (mut src2, mut dst2) = (src.try_clone().unwrap(), dst.try_clone().unwrap());
        let cut = move |a: &TcpStream, b: &TcpStream| {
            signal(dest_pid, libc::SIGKILL);
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        };
        let up = std::thread::spawn(move || {
            let mut n = 0;
            let mut buf = vec![0u8; 4096];
            loop {
                let k = match src2.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(k) => k,
                };
                if let KillAt::Bytes(limit) = at {
                    if n + k >= limit {
                        cut(&src2, &dst2);
                        return;
                    }
                }
                if dst2.write_all(&buf[..k]).is_err() {
                    return;
                }
                n += k;
            }
        });
        loop {
            let mut len = [0u8; 4];
            if dst.read_exact(&mut len).is_err() {
                break;
            }
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            if dst.read_exact(&mut body).is_err() {
                break;
            }
            let restored = matches!(decode(&body), Ok(Msg::Restored { .. }));
            if matches!(at, KillAt::Restored) && restored {
                cut(&src, &dst);
                break;
            }
            if src.write_all(&len).is_err() || src.write_all(&body).is_err() {
                break;
            }
        }
        let _ = up.join();
    });
    (addr, h)
}

fn destination_killed(name: &str, at: KillAt, expect: &str) {
    let tmp = tempfile::tempdir().unwrap();
    // A name of its own (comm is the name it is executed by), so the
    // surviving-copy check below sees only this test. A symlink, not a copy:
    // a copy's write fd, inherited by a child another test forks meanwhile,
    // makes the exec fail with ETXTBSY.
    let exe = tmp.path().join(name);
    std::os::unix::fs::symlink(targets(), &exe).unwrap();
    let argv = [exe.to_str().unwrap(), "nohup", "1500", "wait"];
    let (want, want_code) = reference(&argv, None);
    let (a, b, c) = (Daemon::start(), Daemon::start(), Daemon::start());
    let (r, held) = run_held(&a, &argv, None, tmp.path(), name);
    let pid = r.pid();
    sleep_ms(100);
    let (proxy, h) = killing_proxy(b.addr.clone(), b.pid(), at);
    let e = match migrate(&a.addr, pid, &proxy) {
        Ok(m) => panic!("{name}: migrated (pid {}) to a node killed mid-way", m.pid),
        Err(e) => e,
    };
    h.join().unwrap();
    eprintln!("{name}: {e}");
    assert!(
        e.contains(expect),
        "{name}: error does not say {expect:?}: {e}"
    );
    assert!(e.contains("was resumed here"), "{name}: {e}");
    let st = proc_state(pid).unwrap();
    assert!(st == 'R' || st == 'S', "{name}: source left in state {st}");
    sleep_ms(200);
    let others: Vec<i32> = named(name).into_iter().filter(|&p| p != pid).collect();
    assert_eq!(
        others,
        Vec::<i32>::new(),
        "{name}: a copy on the dead node survived"
    );
    let m = migrate(&a.addr, pid, &c.addr).expect("migration to a healthy node");
    sleep_ms(50);
    migrate(&c.addr, m.pid, &a.addr).expect("and back");
    held.close();
    let (out, code, err) = r.finish();
    assert_same(name, &out, &want);
    assert_eq!(code, want_code, "{name}: exit status ({err})");
}

/// A program stopped at `halfproc_yield()` for a move whose destination
/// dies while the image streams is let go from its yield (not left
/// waiting there), runs on and finishes as if never asked.
#[test]
fn a_yielding_program_is_let_go_when_the_destination_dies() {
    let tmp = tempfile::tempdir().unwrap();
    let argv = [yielder(), "yield", "60000"];
    let (want, want_code) = reference(&argv, None);
    let (a, b) = (Daemon::start(), Daemon::start());
    let (r, held) = run_held(&a, &argv, None, tmp.path(), "yield-fault");
    let pid = r.pid();
    sleep_ms(200);
    let (proxy, h) = killing_proxy(b.addr.clone(), b.pid(), KillAt::Bytes(64 * 1024));
    let e = match migrate(&a.addr, pid, &proxy) {
        Ok(m) => panic!("migrated (pid {}) to a node killed mid-way", m.pid),
        Err(e) => e,
    };
    h.join().unwrap();
    assert!(
        e.contains(&format!("pid {pid} stopped at halfproc_yield() after")),
        "{e}"
    );
    assert!(e.contains("was resumed here"), "{e}");
    // Let go at once: it runs on (it would give up waiting after a minute).
    let t = Instant::now();
    while halfproc_node::yield_point::state_of(pid) != Some(halfproc_node::yield_point::RUNNING) {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "still {:?} at its yield",
            halfproc_node::yield_point::state_of(pid)
        );
        sleep_ms(10);
    }
    held.close();
    let (out, code, err) = r.finish();
    assert_same("yielder after a failed move", &out, &want);
    assert_eq!(code, want_code, "run's stderr: {err}");
    assert!(err.contains("yielder: moved 0\n"), "run's stderr: {err}");
}

#[test]
fn destination_killed_while_streaming() {
    destination_killed("fault_stream", KillAt::Bytes(16 << 10), "lost while");
}

#[test]
fn destination_killed_after_restoring_stopped_copy() {
    destination_killed("fault_restored", KillAt::Restored, "lost while restoring");
}

#[test]
fn sigterm_waits_for_the_migration_in_flight() {
    let tmp = tempfile::tempdir().unwrap();
    let argv = [targets(), "plain", "1500", "wait"];
    let mut a = Daemon::start();
    let (r, stdin) = run_held(&a, &argv, None, tmp.path(), "plain");
    let pid = r.pid();
    let held = held_migration(&a, pid);
    signal(a.pid(), libc::SIGTERM);
    sleep_ms(300);
    assert_eq!(a.exited(), None, "daemon exited with a migration in flight");
    let (code, e) = held.release();
    assert_eq!(code, Some(1), "{e}");
    assert!(
        e.contains("keeps running here"),
        "the migration's answer was lost: {e}"
    );
    let t = Instant::now();
    let code = loop {
        if let Some(c) = a.exited() {
            break c;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "daemon did not exit after the migration"
        );
        sleep_ms(20);
    };
    assert_eq!(code, Some(0), "daemon exit status");
    signal(pid, libc::SIGKILL);
    stdin.close();
    let _ = r.finish();
}

#[test]
fn failed_migrations_of_a_stdin_reader_lose_no_input() {
    // gzip reads its relayed stdin while it runs on B (origin A); two
    // migrations from B fail (a silent destination hangs up, a killed one),
    // then it comes back to A: every input byte is compressed exactly once.
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input.txt");
    input_file(&input, 16 << 20);
    let argv = [tool("gzip"), "-6", "-n", "-c"];
    let (want, want_code) = reference(&argv, Some(&input));
    let (a, b, c) = (Daemon::start(), Daemon::start(), Daemon::start());
    let (r, held) = run_held(&a, &argv, Some(&input), tmp.path(), "gzip");
    let on_b = migrate(&a.addr, r.pid(), &b.addr).expect("to B").pid;
    let (code, e) = held_migration(&b, on_b).release();
    assert_eq!(code, Some(1), "{e}");
    let (proxy, h) = killing_proxy(c.addr.clone(), c.pid(), KillAt::Bytes(16 << 10));
    migrate(&b.addr, on_b, &proxy).expect_err("migrated to a killed node");
    h.join().unwrap();
    migrate(&b.addr, on_b, &a.addr).expect("back to A");
    held.close();
    let (out, code, err) = r.finish();
    assert_same("gzip", &out, &want);
    assert_eq!(code, want_code, "gzip exit status ({err})");
}

/// The destination cannot restore for want of memory, by a limit the
/// offer does not look at: its daemon runs under `prlimit --data`
/// (`RLIMIT_DATA`, private writable memory; the restored copy's restorer
/// inherits it) and `xz -9` maps 674 MiB of it. The offer checks
/// `RLIMIT_AS` (`node_offer`), so this one is found by the restore after
/// the freeze: the migration fails naming what could not be had, the
/// destination keeps no copy, and the source runs on, its output and exit
/// status those of an unmigrated run.
#[test]
fn restore_out_of_memory_leaves_the_source_running() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input.txt");
    input_file(&input, 4 << 20);
    let argv = [tool("xz"), "-9", "-T1", "-c"];
    let (want, want_code) = reference(&argv, Some(&input));
    let limit = format!("--data={}", 400 << 20);
    let a = Daemon::start();
    let small = Daemon::start_wrapped(&["prlimit", &limit, "--"], &[], &[]);
    let (r, held) = run_held(&a, &argv, Some(&input), tmp.path(), "xz-oom");
    let pid = r.pid();
    wait_vm_size(pid, 600 << 20);
    let e = migrate(&a.addr, pid, &small.addr).expect_err("restored beyond the memory limit");
    eprintln!("{e}");
    assert!(
        e.contains("cannot restore")
            && e.contains("Cannot allocate memory")
            && e.contains("was resumed here"),
        "the error does not say what failed: {e}"
    );
    let left = ps(&small);
    assert!(
        left.lines().skip(1).all(|l| l.trim().is_empty()),
        "the destination keeps a copy: {left}"
    );
    let st = proc_state(pid).unwrap();
    assert!(st == 'R' || st == 'S', "source left in state {st}");
    held.close();
    let (out, code, err) = r.finish();
    assert_same("xz after a failed restore", &out, &want);
    assert_eq!(code, want_code, "xz exit status ({err})");
}
