// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! A compute instance SIGKILLed inside a fast write (`pool_write.rs`,
//! `pool_journal.rs`; `docs/dmi.md`, "A writer that dies"): a one-node run
//! in a child process of this test, whose instance stops itself (test
//! hook, `SIGSTOP`) in a write of two pages from the frames, either holding
//! both frames before it committed ("held") or after committing with half
//! of the first page copied ("torn"). The test sees it stopped, sees that
//! the node's engine waits for the page while the writer lives, kills it,
//! and then wants: the engine's read to complete (no hang), both pages
//! whole (the old bytes when it died before committing, the new ones
//! after), the death reported by `join` as before, the node writing the
//! page from the frames again, and another instance that ran all along
//! reading and writing the pages afterwards.

mod common;
use common::node;

use std::process::Command;
use std::time::{Duration, Instant};

use dmi::node::CallReq;
use dmi::pool::WriteStop;
use dmi::serve::{self, Ended, NodeRef};
use dmi::{Dmi, ReadMode, WriteMode};

const PS: usize = 4096;
const SCENARIO: &str = "DMI_KILL_IN_WRITE";

/// Each scenario in a process of its own (a node's instance registry fails
/// every creation after an instance died), bounded by 60 s.
#[test]
fn an_instance_killed_in_a_fast_write_neither_hangs_its_node_nor_tears_pages() {
    for stage in ["held", "torn"] {
        let mut c = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "scenario", "--nocapture", "--test-threads", "1"])
            .env(SCENARIO, stage)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while c.try_wait().unwrap().is_none() {
            if t.elapsed() > Duration::from_secs(60) {
                let _ = c.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let o = c.wait_with_output().unwrap();
        let text = format!(
            "{stage}: {:?} after {:?}\n--- stdout\n{}--- stderr\n{}",
            o.status,
            t.elapsed(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.status.success(), "{text}");
        let err = String::from_utf8_lossy(&o.stderr);
        let how = if stage == "held" {
            "died in a fast write of 2 page(s); its pages are as before it"
        } else {
            "died in a fast write of 2 page(s); completed it"
        };
        assert!(err.contains(how), "{text}");
        assert!(err.contains("was killed by signal 9"), "{text}");
        eprintln!("{text}");
    }
}

/// Waits up to `limit` for one byte on `fd`.
fn byte_within(fd: i32, limit: Duration) -> Option<u8> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    if unsafe { libc::poll(&mut p, 1, limit.as_millis() as i32) } != 1 {
        return None;
    }
    let mut b = 0u8;
    // SAFETY: reads one byte into `b`.
    (unsafe { libc::read(fd, (&mut b as *mut u8).cast(), 1) } == 1).then_some(b)
}

fn pipe() -> (i32, i32) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    (fds[0], fds[1])
}

fn send(fd: i32, bytes: &[u8]) -> bool {
    // SAFETY: writes `bytes` from valid memory.
    unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) == bytes.len() as isize }
}

/// The process state letter in /proc/PID/stat ('T': stopped).
fn state(pid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 2..].chars().next()
}

fn whole(b: &[u8], want: u8) -> bool {
    b.iter().all(|&x| x == want)
}

/// One scenario (run by the test above in a child process).
#[test]
fn scenario() {
    let Ok(stage) = std::env::var(SCENARIO) else {
        return;
    };
    let stop = match stage.as_str() {
        "held" => WriteStop::Held,
        "torn" => WriteStop::Torn,
        s => panic!("unknown stage {s}"),
    };
    // What the two pages hold after the writer died: as before, or its write.
    let (old, new) = ((0x11u8, 0x22u8), (0x5au8, 0x5au8));
    let after = if stop == WriteStop::Held { old } else { new };
    let d = node();
    let base = d.mmap(PS as i64, 3).unwrap();
    for (p, v) in [(0, old.0), (1, old.1), (2, 0x33)] {
        d.write(base + p * PS as i64, &[v; PS], WriteMode::Exclusive)
            .unwrap();
    }
    let (pid_r, pid_w) = pipe();
    let (go_r, go_w) = pipe();

    // An instance that runs through the writer's death and uses the pages.
    let bystander = serve::create(
        NodeRef::of(&d).unwrap(),
        false,
        move |dmi: &Dmi, _| {
            if byte_within(go_r, Duration::from_secs(30)) != Some(1) {
                return 10;
            }
            let mut b = vec![0u8; 3 * PS];
            if dmi.read(base, &mut b, ReadMode::Get).is_err() {
                return 11;
            }
            if !whole(&b[..PS], 0x44) || !whole(&b[PS..2 * PS], after.1) {
                return 12;
            }
            if dmi
                .write(base + PS as i64, &[0x77; PS], WriteMode::Exclusive)
                .is_err()
            {
                return 13;
            }
            if dmi
                .read(base + PS as i64, &mut b[..PS], ReadMode::Get)
                .is_err()
            {
                return 14;
            }
            if !whole(&b[..PS], 0x77) {
                return 15;
            }
            0
        },
        0,
    )
    .unwrap();

    // The writer: one write of pages 0 and 1 from the frames, in which it
    // stops itself; it must never get past it.
    let writer = serve::create(
        NodeRef::of(&d).unwrap(),
        false,
        move |dmi: &Dmi, _| {
            // SAFETY: getpid has no arguments.
            let pid = unsafe { libc::getpid() };
            if !send(pid_w, &pid.to_le_bytes()) {
                return 20;
            }
            dmi::pool::stop_in_fast_write(Some(stop));
            if dmi
                .write(base, &[new.0; 2 * PS], WriteMode::Exclusive)
                .is_err()
            {
                return 21;
            }
            // The write did not stop: it was not a fast write.
            22
        },
        0,
    )
    .unwrap();

    let mut pid = [0u8; 4];
    for b in &mut pid {
        *b = byte_within(pid_r, Duration::from_secs(20)).expect("the writer's pid");
    }
    let pid = i32::from_le_bytes(pid);
    let t = Instant::now();
    while state(pid) != Some('T') {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the writer (pid {pid}) never stopped in a fast write (state {:?}; joined: {:?})",
            state(pid),
            serve::join(writer)
        );
        std::thread::sleep(Duration::from_millis(5));
    }

    // The engine reads the pages (a GET through the node, as a remote
    // node's request would): it must wait while the writer holds them.
    let caller = d.caller().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = caller.call(CallReq::Read {
            items: vec![(base, 2 * PS as i64)],
            mode: ReadMode::Get,
        });
        let _ = tx.send(r);
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "the engine read pages a live writer holds"
    );
    // SAFETY: kill with a pid and a signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let killed = Instant::now();
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| {
            panic!("the node's read of the pages still waits 10 s after their writer was killed")
        })
        .unwrap();
    eprintln!(
        "{stage}: the engine's read completed {:?} after the kill",
        killed.elapsed()
    );
    assert!(
        whole(&got[..PS], after.0) && whole(&got[PS..], after.1),
        "{stage}: pages 0 and 1 are not whole: {:x?}.. {:x?}..",
        &got[PS / 2 - 4..PS / 2 + 4],
        &got[PS..PS + 8]
    );
    assert_eq!(
        serve::join(writer).unwrap(),
        Ended::Failed("was killed by signal 9".into())
    );

    // The node writes page 0 from the frames again (the grant came back).
    let (hits, _) = dmi::pool::write_counts();
    d.write(base, &[0x44; PS], WriteMode::Exclusive).unwrap();
    assert_eq!(dmi::pool::write_counts().0, hits + 1, "not a fast write");
    let mut b = vec![0u8; PS];
    d.read(base, &mut b, ReadMode::Get).unwrap();
    assert!(whole(&b, 0x44));

    // The other instance goes on.
    assert!(send(go_w, &[1]));
    assert_eq!(serve::join(bystander).unwrap(), Ended::Returned(0));
    d.read(base + PS as i64, &mut b, ReadMode::Get).unwrap();
    assert!(whole(&b, 0x77));
    d.read(base + 2 * PS as i64, &mut b, ReadMode::Get).unwrap();
    assert!(whole(&b, 0x33));
    d.finalize().unwrap();
}
