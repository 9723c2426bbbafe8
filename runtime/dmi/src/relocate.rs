// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Moving a compute instance at `DMI_yield` (`docs/dmi-reconf.md`, "DMI_yield"):
//! the policy ([`MoveSchedule`], `DMI_MOVE_AT`) and the move itself
//! ([`relocate`]): the parked instance is checkpointed with the migration
//! engine (its set range left out), restored (stopped) as a child of this
//! node that shares this node's set range, adopted as a member, given a
//! fresh mailbox and this node's pid through its private [`Home`] before
//! it runs, and the original is killed. Any
//! failure before the copy is told to go on resumes the original, which
//! stays where it was (nothing lost).

use std::collections::HashMap;
use std::io::Write;
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use halfproc::{Member, Set};
use halfproc_migrate::{freeze_and_dump_member, restore_from, RestoreOptions};

use crate::addr::NodeId;
use crate::error::DmiError;
use crate::ring::{Home, Mailbox, HOME_MOVED, HOME_PARKED, HOME_STAYED};

/// How long an instance may take to park after being told to move.
const PARK_LIMIT: Duration = Duration::from_secs(10);

/// Where a scheduled move goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// A new process of the same node.
    Here,
    /// Node `NODE` (`N:ID@NODE`: a movable run's rank, `host.rs`, or a
    /// `DMI_create` instance, which stays its creator's, `guest.rs`).
    Node(NodeId),
}

/// Which yields move an instance: `DMI_MOVE_AT=N:ID[@NODE][,...]` moves
/// instance `ID` (as `DMI_create` numbered it on its node, from 0; in a
/// movable run, its rank) at its `N`-th `DMI_yield` (from 1), to node
/// `NODE` or within its node.
#[derive(Debug, Default, Clone)]
pub struct MoveSchedule {
    at: HashMap<(u64, i64), Dest>,
}

impl MoveSchedule {
    pub fn parse(spec: &str) -> Result<MoveSchedule, DmiError> {
        let bad = |what: &str| {
            DmiError::Setup(format!(
                "DMI_MOVE_AT={spec:?}: {what} (expected YIELD:INSTANCE[@NODE][,...], \
                 YIELD counted from 1)"
            ))
        };
        let mut at = HashMap::new();
        for item in spec.split(',').filter(|s| !s.trim().is_empty()) {
            let (n, id) = item
                .trim()
                .split_once(':')
                .ok_or_else(|| bad(&format!("{item:?} has no ':'")))?;
            let n: u64 = n
                .parse()
                .map_err(|_| bad(&format!("bad yield number {n:?}")))?;
            let (id, dest) = match id.split_once('@') {
                Some((id, node)) => {
                    let node: NodeId = node
                        .parse()
                        .map_err(|_| bad(&format!("bad node {node:?}")))?;
                    (id, Dest::Node(node))
                }
                None => (id, Dest::Here),
            };
            let id: i64 = id
                .parse()
                .map_err(|_| bad(&format!("bad instance {id:?}")))?;
            if n == 0 || id < 0 {
                return Err(bad(&format!("{item:?} is out of range")));
            }
            at.insert((n, id), dest);
        }
        Ok(MoveSchedule { at })
    }

    pub fn from_env() -> Result<MoveSchedule, DmiError> {
        match std::env::var("DMI_MOVE_AT") {
            Ok(s) => MoveSchedule::parse(&s),
            Err(_) => Ok(MoveSchedule::default()),
        }
    }

    /// Where instance `id` moves at its `n`-th yield, if it does.
    pub fn moves(&self, n: u64, id: i64) -> Option<Dest> {
        self.at.get(&(n, id)).copied()
    }

    /// The first yield after the `n`-th at which instance `id` moves.
    pub fn next_after(&self, n: u64, id: i64) -> Option<u64> {
        self.at
            .keys()
            .filter(|&&(m, i)| i == id && m > n)
            .map(|&(m, _)| m)
            .min()
    }
}

/// A done move.
pub struct Moved {
    pub member: Member,
    pub mailbox: &'static Mailbox,
    /// Bytes of the image (private memory carried).
    pub bytes: u64,
    /// How long the checkpoint took (the instance stopped), how long the
    /// instance was stopped in all, and the whole move (from its yield).
    pub dump: Duration,
    pub frozen: Duration,
    pub total: Duration,
}

pub(crate) fn home_word(pid: i32, addr: usize) -> Result<u64, DmiError> {
    let mut b = [0u8; 8];
    halfproc::dmread(pid, addr, 8, &mut b)
        .map_err(|e| DmiError::Setup(format!("reading instance pid {pid}'s home: {e}")))?;
    Ok(u64::from_le_bytes(b))
}

pub(crate) fn set_home(pid: i32, addr: usize, words: &[u64]) -> Result<(), DmiError> {
    let b: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    halfproc::dmwrite(pid, addr, b.len(), &b)
        .map(drop)
        .map_err(|e| DmiError::Setup(format!("writing instance pid {pid}'s home: {e}")))
}

/// The stdio fds of `pid` that are pipes (`dmi run` relays the node's
/// stdio; an instance shares it): (fd, inode).
pub(crate) fn stdio_pipes(pid: i32) -> Vec<(i32, u64)> {
    (0..3)
        .filter_map(|fd| {
            let l = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
            let l = l.to_string_lossy();
            let ino = l.strip_prefix("pipe:[")?.strip_suffix(']')?.parse().ok()?;
            Some((fd, ino))
        })
        .collect()
}

/// Restores an instance's image as this node's child (with the node's
/// credentials; `inherit` its stdio), makes it a member of `set`, gives it
/// a fresh mailbox and lets it run, parked. The copy is restored stopped
/// (dying with this thread meanwhile) and only continued once its [`Home`]
/// (at `home`) holds its mailbox, this node's pid and the restore's number
/// (`Home::restored`): it knows from its first instruction that it is a
/// copy and which node to watch. Whatever fails, nothing is left behind:
/// the copy is killed and reaped. `what` names the instance in errors.
/// The within-node move and the arrival of a cross-node move share it.
pub(crate) fn restore_adopted(
    set: &'static Set,
    manifest: &halfproc_migrate::image::Manifest,
    pages: &[u8],
    inherit: Vec<(i32, i32)>,
    home: usize,
    what: &str,
) -> Result<(Member, &'static Mailbox), DmiError> {
    static RESTORES: AtomicU64 = AtomicU64::new(0);
    let file = memfd_with(pages)?;
    let opts = RestoreOptions {
        inherit,
        stopped: true,
        // the instance is the node's own child, restored with its credentials
        creds: None,
    };
    let r = restore_from(manifest, file, &opts)
        .map_err(|e| DmiError::Setup(format!("restore of {what}: {e}")))?;
    let member = Member::adopt(set, r.pid).map_err(|e| {
        // SAFETY: kill and reap our own child, which waits stopped.
        unsafe {
            libc::kill(r.pid, libc::SIGKILL);
            libc::waitpid(r.pid, std::ptr::null_mut(), 0);
        }
        DmiError::Setup(format!("adopting {what} (pid {}): {e}", r.pid))
    })?;
    let mb = match Mailbox::new() {
        Ok(mb) => mb,
        Err(e) => {
            let _ = member.kill(libc::SIGKILL);
            let _ = member.join();
            return Err(e);
        }
    };
    let me = std::process::id() as u64;
    let n = RESTORES.fetch_add(1, Ordering::Relaxed) + 1;
    let words = [mb as *const Mailbox as u64, me, n];
    let told = set_home(r.pid, home + std::mem::offset_of!(Home, mailbox), &words);
    if let Err(e) = told.and_then(|_| resume_stopped(r.pid)) {
        let _ = member.kill(libc::SIGKILL);
        let _ = member.join();
        // SAFETY: the copy is dead and nobody else has the new mailbox.
        unsafe { mb.release() };
        return Err(e);
    }
    Ok((member, mb))
}

/// Lets a copy restored stopped run (parked): back in this node's process
/// group (the restore put it in one of its own to stop it), then SIGCONT.
fn resume_stopped(pid: i32) -> Result<(), DmiError> {
    // SAFETY: setpgid, getpgrp and kill with integer arguments, on our own
    // child. Another group is no failure: the copy only has others' job
    // control signals (a terminal's) then.
    unsafe {
        libc::setpgid(pid, libc::getpgrp());
        if libc::kill(pid, libc::SIGCONT) != 0 {
            return Err(DmiError::Setup(format!(
                "continuing the copy (pid {pid}): {}",
                std::io::Error::last_os_error()
            )));
        }
    }
    Ok(())
}

/// Tests only: with `DMI_TEST_RESUMED_KILL=NODE`, node `NODE` kills itself
/// (SIGKILL) right after it let a copy of instance `id` (pid `pid`) that
/// arrived from another node run parked, before it says `Ready`: the copy
/// must notice and end (`ring.rs`, `Link::yield_now`).
pub(crate) fn test_kill_resumed(me: crate::addr::NodeId, id: i64, pid: i32) {
    let Ok(v) = std::env::var("DMI_TEST_RESUMED_KILL") else {
        return;
    };
    if v.parse::<crate::addr::NodeId>().ok() != Some(me) {
        return;
    }
    crate::transport::report(&format!(
        "dmi: node {me}: instance {id} resumed parked as pid {pid}; killing this node (test)"
    ));
    // SAFETY: kill(2) of this very process.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
}

pub(crate) fn memfd_with(bytes: &[u8]) -> Result<std::fs::File, DmiError> {
    // SAFETY: memfd_create with a valid C string.
    let fd = unsafe { libc::memfd_create(c"dmi-move".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(DmiError::Setup(format!(
            "memfd_create: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
    f.write_all(bytes)
        .map_err(|e| DmiError::Setup(format!("writing the image: {e}")))?;
    Ok(f)
}

/// Waits until the instance `pid`, told to move, parks (its [`Home`] at `home`).
pub(crate) fn wait_parked(pid: i32, home: usize) -> Result<(), DmiError> {
    let t0 = Instant::now();
    let state = std::mem::offset_of!(Home, state);
    loop {
        match home_word(pid, home + state)? {
            HOME_PARKED => return Ok(()),
            _ if t0.elapsed() > PARK_LIMIT => {
                return Err(DmiError::Setup(format!(
                    "instance pid {pid} did not park within {PARK_LIMIT:?}"
                )))
            }
            _ => std::thread::sleep(Duration::from_micros(200)),
        }
    }
}

/// Moves the instance `old`, which was told to move at a yield and parks
/// with its [`Home`] at `home`, into a new process of this node's `set`.
/// `arm` prepares the copy's new mailbox (its next move) before the copy
/// runs on: it may reach its next yield without calling its node at all
/// (hits are served from the frames). On error the original runs on where
/// it was (told so through its home).
pub fn relocate(
    set: &'static Set,
    old: Member,
    home: usize,
    arm: impl FnOnce(&'static Mailbox),
) -> Result<Moved, DmiError> {
    let t0 = Instant::now();
    let pid = old.pid();
    let state = std::mem::offset_of!(Home, state);
    wait_parked(pid, home)?;
    let stay = |e: DmiError| {
        let _ = set_home(pid, home + state, &[HOME_STAYED]);
        e
    };
    let range = (set.base() as u64, set.base() as u64 + set.size());
    let stdio = stdio_pipes(pid);
    let inos: Vec<u64> = stdio.iter().map(|&(_, i)| i).collect();
    let dumped = freeze_and_dump_member(pid, &inos, Some(range)).map_err(|e| {
        stay(DmiError::Setup(format!(
            "checkpoint of instance pid {pid}: {e}"
        )))
    })?;
    let dump = dumped.frozen_for();
    let attempt = || -> Result<(Member, &'static Mailbox), DmiError> {
        let inherit = stdio.iter().map(|&(fd, _)| (fd, fd)).collect();
        restore_adopted(
            set,
            &dumped.manifest,
            &dumped.pages,
            inherit,
            home,
            &format!("instance pid {pid}"),
        )
    };
    match attempt() {
        Ok((member, mb)) => {
            arm(mb);
            let bytes = dumped.manifest.pages_len;
            if let Err(e) = set_home(member.pid(), home + state, &[HOME_MOVED]) {
                let _ = member.kill(libc::SIGKILL);
                let _ = member.join();
                // SAFETY: nobody else has the new mailbox.
                unsafe { mb.release() };
                dumped.resume();
                return Err(stay(e));
            }
            let frozen = dumped.kill();
            // The original's slot: its exit (SIGKILL) is recorded by the reaper.
            let _ = old.join();
            Ok(Moved {
                member,
                mailbox: mb,
                bytes,
                dump,
                frozen,
                total: t0.elapsed(),
            })
        }
        Err(e) => {
            dumped.resume();
            Err(stay(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Dest, MoveSchedule};

    #[test]
    fn schedule_parses_and_finds_the_next_move() {
        let s = MoveSchedule::parse("3:0, 7:0@2,5:1").unwrap();
        assert_eq!(s.moves(3, 0), Some(Dest::Here));
        assert_eq!(s.moves(7, 0), Some(Dest::Node(2)));
        assert!(s.moves(5, 1).is_some() && s.moves(3, 1).is_none() && s.moves(4, 0).is_none());
        assert_eq!(s.next_after(0, 0), Some(3));
        assert_eq!(s.next_after(3, 0), Some(7));
        assert_eq!(s.next_after(7, 0), None);
        assert_eq!(s.next_after(0, 2), None);
        assert!(MoveSchedule::parse("").unwrap().next_after(0, 0).is_none());
    }

    #[test]
    fn bad_schedules_name_the_item() {
        for (spec, want) in [
            ("3-0", "has no ':'"),
            ("x:0", "bad yield number"),
            ("3:y", "bad instance"),
            ("0:1", "out of range"),
            ("2:-1", "out of range"),
            ("2:1@x", "bad node"),
        ] {
            let e = MoveSchedule::parse(spec).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("DMI_MOVE_AT"), "{spec}: {e}");
        }
    }
}
