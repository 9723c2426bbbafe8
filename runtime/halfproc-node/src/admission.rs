//! Whether a destination takes an incoming migration: the rules, asked
//! twice with the same function ([`check`]).
//!
//! A migration starts with the source's [`Msg::Offer`](crate::proto::Msg)
//! (the program's owner, origin and an estimate of its image), sent before
//! anything is stopped. The destination answers `Accept { ticket }`, or
//! `Denied` (may not: the owner's ids) or `Error` (cannot now: full,
//! memory, the restore's address space beyond this daemon's `RLIMIT_AS`,
//! shutting down, the origin's session gone). The peer itself was
//! admitted or refused on its first message ([`crate::access::admit`]).
//! An accepted offer holds a reservation (a program slot, the estimated
//! bytes) until the connection ends or its hold passes without the
//! migration starting, so the later `MigrateIn` on the same connection is
//! checked again ([`Admission::confirm`]) and cannot be refused for a limit
//! the ticket holds: only what it did not promise (more bytes than
//! estimated) is counted anew.
//!
//! What only the image tells (its format and checksums, the memory its
//! pages take, files that differ here, a restore step failing for a
//! reason the rules do not model, e.g. `RLIMIT_DATA`) is known after the
//! freeze; those refusals still resume the original. The address space is
//! checked with the source's reading of /proc in the offer and with the
//! image's VMAs and runs on `MigrateIn`; the restore's own failure stays
//! the last word.

use crate::daemon::Node;
use crate::proto::Origin;
use halfproc_migrate::restore_need::{self as need, Mapped};
use halfproc_migrate::Creds;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a source proposes: from its `Offer`, then from its `MigrateIn`.
pub struct Proposal<'a> {
    pub owner: &'a Creds,
    pub origin: &'a Origin,
    /// Bytes of page contents: the offer's estimate, then the manifest's.
    pub image_bytes: u64,
    /// What the restorer will map for the program: the source's reading of
    /// /proc in the offer, then the manifest's.
    pub mapped: Mapped,
    /// Runs of pages in the image: unknown in the offer (at most one per
    /// page is assumed), the manifest's then.
    pub runs: Option<u64>,
}

/// The state of this node the rules look at.
#[derive(Debug, Clone)]
pub struct Here {
    /// The daemon's effective uid.
    pub uid: u32,
    pub node_id: u64,
    /// `/proc/self/uid_map` and `gid_map`: ids a copy may take here.
    pub uid_map: String,
    pub gid_map: String,
    /// Programs running on this node.
    pub programs: usize,
    pub max_programs: Option<usize>,
    /// `MemAvailable` (bytes), if known.
    pub mem_available: Option<u64>,
    /// The daemon's soft `RLIMIT_AS`, which the restorer it forks inherits
    /// (`None`: unlimited).
    pub rlimit_as: Option<u64>,
    /// The daemon's address space now (`VmSize`, bytes): the forked
    /// restorer holds all of it until it has mapped its region.
    pub vm_size: u64,
    pub shutting_down: bool,
    /// When the origin is this node: whether its run session still exists.
    pub origin_session_here: bool,
}

/// What the tickets of other migrations hold.
#[derive(Debug, Clone, Copy, Default)]
pub struct Held {
    pub tickets: usize,
    pub bytes: u64,
}

/// Why an offer (or the migration it announced) is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not allowed (answered `Denied`, exit 77 for the client).
    Denied(String),
    /// Not possible now (answered `Error`).
    Unable(String),
}

/// Any other failure of an incoming migration.
impl From<String> for Refusal {
    fn from(s: String) -> Refusal {
        Refusal::Unable(s)
    }
}

impl Refusal {
    pub fn text(&self) -> &str {
        match self {
            Refusal::Denied(s) | Refusal::Unable(s) => s,
        }
    }
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / 1048576.0)
}

/// Whether `id` lies in one of the ranges of a `/proc/PID/[ug]id_map`
/// (`inside outside count` per line).
/// The id map at `path` (`/proc/self/uid_map`, `gid_map`). A kernel without
/// user namespaces (`CONFIG_USER_NS` off) has no such file: there is only
/// the initial namespace, which maps every id to itself.
pub fn id_map(path: &str) -> String {
    match std::fs::read_to_string(path) {
        Ok(map) => map,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => IDENTITY_MAP.into(),
        Err(_) => String::new(),
    }
}

/// The initial user namespace's map, as the kernel prints it.
const IDENTITY_MAP: &str = "         0          0 4294967295\n";

pub fn mapped(map: &str, id: u32) -> bool {
    map.lines().any(|l| {
        let v: Vec<u64> = l
            .split_whitespace()
            .filter_map(|s| s.parse().ok())
            .collect();
        matches!(v[..], [inside, _, count] if (id as u64) >= inside && (id as u64) < inside + count)
    })
}

/// The rules. `own`: `None` for an offer (it needs a program slot and room
/// for its estimate), `Some(bytes)` for the `MigrateIn` of an accepted
/// offer whose ticket holds a slot and `bytes` (only what exceeds them is
/// checked). `others`: what the other tickets hold.
pub fn check(here: &Here, others: Held, own: Option<u64>, p: &Proposal) -> Result<(), Refusal> {
    if here.shutting_down {
        return Err(Refusal::Unable("this node is shutting down".into()));
    }
    let o = p.owner;
    if here.uid != 0 && o.uid != here.uid {
        return Err(Refusal::Denied(format!(
            "this node runs as uid {} and cannot restore a program of uid {}",
            here.uid, o.uid
        )));
    }
    if here.uid == 0 {
        if !mapped(&here.uid_map, o.uid) {
            return Err(Refusal::Denied(format!(
                "the program's uid {} is not mapped in this node's user namespace \
                 (/proc/self/uid_map: {}): its copy could not take its owner's ids",
                o.uid,
                here.uid_map
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            )));
        }
        if let Some(g) = std::iter::once(&o.gid)
            .chain(&o.groups)
            .find(|g| !mapped(&here.gid_map, **g))
        {
            return Err(Refusal::Denied(format!(
                "the program's group {g} is not mapped in this node's user namespace \
                 (/proc/self/gid_map: {}): its copy could not take its owner's ids",
                here.gid_map
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            )));
        }
    }
    if p.origin.node == here.node_id && !here.origin_session_here {
        return Err(Refusal::Unable(format!(
            "the program's origin is this node, and its run session {} is gone \
             (its `halfproc run` left)",
            p.origin.session
        )));
    }
    if let (None, Some(max)) = (own, here.max_programs) {
        if here.programs + others.tickets >= max {
            return Err(Refusal::Unable(format!(
                "this node is full: {} program(s) run here and {} migration(s) are on their \
                 way, of at most {max} (--max-programs)",
                here.programs, others.tickets
            )));
        }
    }
    address_space(here, p)?;
    let need = p.image_bytes.saturating_sub(own.unwrap_or(0));
    if let (true, Some(avail)) = (need > 0, here.mem_available) {
        if need.saturating_add(others.bytes) > avail {
            return Err(Refusal::Unable(format!(
                "not enough memory: the program's image is about {}{}, this node has {} \
                 available (MemAvailable), {} of it promised to migrations on their way",
                mib(p.image_bytes),
                match own {
                    Some(b) if b > 0 => format!(" ({} more than offered)", mib(need)),
                    _ => String::new(),
                },
                mib(avail),
                mib(others.bytes)
            )));
        }
    }
    Ok(())
}

/// The restore's address space against the `RLIMIT_AS` its restorer
/// inherits from this daemon (the program's own limits are set only after
/// its memory is rebuilt): see `halfproc_migrate::restore_need`. Checked
/// for every migration by itself (a limit is per process, nothing is held
/// for a ticket).
fn address_space(here: &Here, p: &Proposal) -> Result<(), Refusal> {
    let Some(limit) = here.rlimit_as else {
        return Ok(());
    };
    let runs = p.runs.unwrap_or_else(|| need::runs_at_most(p.image_bytes));
    let region = need::region(&p.mapped, p.image_bytes, runs);
    let caller = need::caller_at_fork(here.vm_size, p.image_bytes);
    let peak = need::peak(&p.mapped, region, caller);
    if peak <= limit {
        return Ok(());
    }
    let larger = if p.mapped.bytes >= caller {
        "the program's mappings".to_string()
    } else {
        format!(
            "this daemon's {} with the page contents, which the forked restorer holds \
             until it has mapped its region",
            mib(caller)
        )
    };
    Err(Refusal::Unable(format!(
        "not enough address space: the program maps {} and this node's restorer runs under \
         RLIMIT_AS {} (the restore needs about {}: {larger}, plus the restorer's region of {} \
         with {} of page contents)",
        mib(p.mapped.bytes),
        mib(limit),
        mib(peak),
        mib(region),
        mib(p.image_bytes)
    )))
}

/// Limits of a node, from `halfproc node`'s flags.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    /// At most this many programs run here (`--max-programs`).
    pub max_programs: Option<usize>,
}

/// Environment variable: how long an accepted offer waits for its
/// migration to start (ms; default [`DEFAULT_HOLD`]).
pub const HOLD_ENV: &str = "HALFPROC_OFFER_HOLD_MS";
/// Default hold of a ticket: the source's answer timeout.
pub const DEFAULT_HOLD: Duration = crate::migrate::ANSWER_TIMEOUT;

/// A node's limits and the tickets it has given.
pub struct Admission {
    limits: Limits,
    /// Ticket id -> bytes it holds.
    tickets: Mutex<HashMap<u64, u64>>,
}

/// A reservation; given back when dropped.
pub struct Ticket {
    pub id: u64,
    /// Bytes held for the image.
    pub bytes: u64,
    adm: Arc<Admission>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        lock(&self.adm.tickets).remove(&self.id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `MemAvailable` of /proc/meminfo, in bytes.
fn mem_available() -> Option<u64> {
    let t = std::fs::read_to_string("/proc/meminfo").ok()?;
    let l = t.lines().find(|l| l.starts_with("MemAvailable:"))?;
    Some(l.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

impl Admission {
    pub fn new(limits: Limits) -> Arc<Admission> {
        Arc::new(Admission {
            limits,
            tickets: Mutex::new(HashMap::new()),
        })
    }

    /// How long an accepted offer waits for its migration.
    pub fn hold() -> Duration {
        std::env::var(HOLD_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_millis)
            .unwrap_or(DEFAULT_HOLD)
    }

    fn here(&self, node: &Node, origin: &Origin) -> Here {
        Here {
            uid: node.uid,
            node_id: node.id,
            uid_map: id_map("/proc/self/uid_map"),
            gid_map: id_map("/proc/self/gid_map"),
            programs: node.program_count(),
            max_programs: self.limits.max_programs,
            mem_available: mem_available(),
            rlimit_as: need::own_rlimit_as(),
            vm_size: need::own_vm_size().unwrap_or(0),
            shutting_down: node.shutting_down(),
            origin_session_here: node.session(origin.session).is_some(),
        }
    }

    /// Checks an offer and, if it passes, reserves what it needs.
    pub fn reserve(self: &Arc<Self>, node: &Node, p: &Proposal) -> Result<Ticket, Refusal> {
        let mut t = lock(&self.tickets);
        let others = Held {
            tickets: t.len(),
            bytes: t.values().sum(),
        };
        check(&self.here(node, p.origin), others, None, p)?;
        let id = crate::daemon::random_id();
        t.insert(id, p.image_bytes);
        Ok(Ticket {
            id,
            bytes: p.image_bytes,
            adm: self.clone(),
        })
    }

    /// Checks the migration an accepted offer announced, by the same rules;
    /// its ticket then holds what arrived.
    pub fn confirm(&self, node: &Node, ticket: &mut Ticket, p: &Proposal) -> Result<(), Refusal> {
        let mut t = lock(&self.tickets);
        let others =
            t.iter()
                .filter(|(id, _)| **id != ticket.id)
                .fold(Held::default(), |h, (_, b)| Held {
                    tickets: h.tickets + 1,
                    bytes: h.bytes + b,
                });
        check(&self.here(node, p.origin), others, Some(ticket.bytes), p)?;
        ticket.bytes = ticket.bytes.max(p.image_bytes);
        t.insert(ticket.id, ticket.bytes);
        Ok(())
    }

    /// Tickets given and not yet returned.
    pub fn outstanding(&self) -> usize {
        lock(&self.tickets).len()
    }
}

/// The source's estimate of `pid`'s image: its anonymous resident and
/// swapped memory (a dump carries anonymous pages and written private
/// file pages, which are anonymous by then), and its resident shared
/// memory when it maps shared anonymous memory (whose pages a dump
/// carries too; `RssShmem` may count more, shared tmpfs file pages).
pub fn image_estimate(pid: i32) -> Result<u64, String> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|e| format!("/proc/{pid}/maps: {e}"))?;
    estimate_of(&st, has_shared_anon(&maps))
        .ok_or_else(|| format!("no RssAnon in /proc/{pid}/status"))
}

/// Whether `maps` (the text of `/proc/PID/maps`) has a shared anonymous
/// VMA (shared, `/dev/zero (deleted)`).
pub fn has_shared_anon(maps: &str) -> bool {
    maps.lines().any(|l| {
        l.ends_with(" /dev/zero (deleted)") && l.split(' ').nth(1).is_some_and(|p| p.ends_with('s'))
    })
}

/// [`image_estimate`] from the text of `/proc/PID/status`.
pub fn estimate_of(status: &str, shared_anon: bool) -> Option<u64> {
    let kib = |k: &str| {
        status
            .lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let anon = kib("RssAnon:")?;
    let shmem = if shared_anon {
        kib("RssShmem:").unwrap_or(0)
    } else {
        0
    };
    Some((anon + kib("VmSwap:").unwrap_or(0) + shmem) * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_without_user_namespaces_maps_every_id() {
        // No /proc/self/uid_map without CONFIG_USER_NS (the release guest).
        let map = id_map("/proc/self/no_such_id_map");
        assert!(mapped(&map, 0) && mapped(&map, 65534) && mapped(&map, u32::MAX - 1));
        // SAFETY: geteuid() has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        assert!(mapped(&id_map("/proc/self/uid_map"), euid));
    }

    /// Shared anonymous pages (`RssShmem`) count where the process maps
    /// shared anonymous memory (before, they were left out: a process of
    /// mostly shared anonymous memory got a reservation far too small).
    #[test]
    fn the_estimate_counts_shared_anonymous_memory() {
        let st = "Name:\tx\nRssAnon:\t    100 kB\nRssFile:\t  50 kB\n\
                  RssShmem:\t  4000 kB\nVmSwap:\t  20 kB\n";
        assert_eq!(estimate_of(st, false), Some(120 * 1024));
        assert_eq!(estimate_of(st, true), Some(4120 * 1024));
        assert_eq!(estimate_of("VmSwap:\t1 kB\n", true), None);
        let shm = "7f00-7f10 rw-s 00000000 00:01 17                         /dev/zero (deleted)\n";
        let private =
            "7f00-7f10 rw-p 00000000 00:01 17                         /dev/zero (deleted)\n";
        let file = "7f00-7f10 r--s 00000000 08:01 17                         /usr/lib/x\n";
        assert!(has_shared_anon(shm));
        assert!(!has_shared_anon(private) && !has_shared_anon(file) && !has_shared_anon(""));
    }

    fn here() -> Here {
        Here {
            uid: 0,
            node_id: 7,
            uid_map: IDENTITY_MAP.into(),
            gid_map: IDENTITY_MAP.into(),
            programs: 0,
            max_programs: None,
            mem_available: Some(1 << 30),
            rlimit_as: None,
            vm_size: 100 << 20,
            shutting_down: false,
            origin_session_here: true,
        }
    }

    fn owner(uid: u32) -> Creds {
        Creds {
            uid,
            gid: uid,
            groups: vec![],
        }
    }

    static ELSEWHERE: Origin = Origin {
        addr: String::new(),
        node: 9,
        session: 1,
    };

    fn prop(o: &Creds, bytes: u64) -> Proposal<'_> {
        Proposal {
            owner: o,
            origin: &ELSEWHERE,
            image_bytes: bytes,
            mapped: Mapped::default(),
            runs: None,
        }
    }

    fn refused(r: Result<(), Refusal>) -> String {
        r.expect_err("accepted").text().to_string()
    }

    #[test]
    fn a_non_root_node_takes_its_own_uid_only() {
        let h = Here {
            uid: 1000,
            ..here()
        };
        assert!(check(&h, Held::default(), None, &prop(&owner(1000), 0)).is_ok());
        let r = check(&h, Held::default(), None, &prop(&owner(0), 0));
        assert!(matches!(&r, Err(Refusal::Denied(_))), "{r:?}");
        assert!(refused(r).contains("runs as uid 1000 and cannot restore a program of uid 0"));
    }

    #[test]
    fn a_root_node_takes_the_ids_its_namespace_maps() {
        let h = Here {
            uid_map: "0 100000 65536\n".into(),
            gid_map: "0 100000 1000\n".into(),
            ..here()
        };
        assert!(check(&h, Held::default(), None, &prop(&owner(999), 0)).is_ok());
        let e = refused(check(&h, Held::default(), None, &prop(&owner(70000), 0)));
        assert!(
            e.contains("uid 70000 is not mapped") && e.contains("0 100000 65536"),
            "{e}"
        );
        let o = Creds {
            groups: vec![5, 4000],
            ..owner(5)
        };
        let e = refused(check(&h, Held::default(), None, &prop(&o, 0)));
        assert!(e.contains("group 4000 is not mapped"), "{e}");
        assert!(mapped("0 0 4294967295", u32::MAX - 1) && !mapped("", 0));
    }

    #[test]
    fn the_program_slots_count_the_tickets_given() {
        let h = Here {
            programs: 1,
            max_programs: Some(2),
            ..here()
        };
        let o = owner(0);
        assert!(check(&h, Held::default(), None, &prop(&o, 0)).is_ok());
        let one = Held {
            tickets: 1,
            bytes: 0,
        };
        let r = check(&h, one, None, &prop(&o, 0));
        assert!(matches!(&r, Err(Refusal::Unable(_))), "{r:?}");
        assert!(refused(r).contains("full: 1 program(s) run here and 1 migration(s)"));
        // The migration of an accepted offer holds its own slot.
        assert!(check(&h, one, Some(0), &prop(&o, 0)).is_ok());
    }

    #[test]
    fn memory_beyond_the_promise_is_counted_anew() {
        let h = Here {
            mem_available: Some(100 << 20),
            ..here()
        };
        let o = owner(0);
        let others = Held {
            tickets: 1,
            bytes: 60 << 20,
        };
        assert!(check(&h, others, None, &prop(&o, 40 << 20)).is_ok());
        let e = refused(check(&h, others, None, &prop(&o, 41 << 20)));
        assert!(
            e.contains("not enough memory") && e.contains("60.0 MiB of it promised"),
            "{e}"
        );
        // Promised 40 MiB: the image's 40 MiB are not counted again even if
        // memory has become short since; 10 MiB more than promised are.
        let short = Here {
            mem_available: Some(0),
            ..h.clone()
        };
        assert!(check(&short, others, Some(40 << 20), &prop(&o, 40 << 20)).is_ok());
        let e = refused(check(&short, others, Some(40 << 20), &prop(&o, 50 << 20)));
        assert!(e.contains("10.0 MiB more than offered"), "{e}");
    }

    #[test]
    fn a_gone_origin_session_and_a_shutdown_refuse() {
        let o = owner(0);
        let mine = Origin {
            node: 7,
            ..ELSEWHERE.clone()
        };
        let h = Here {
            origin_session_here: false,
            ..here()
        };
        let p = Proposal {
            owner: &o,
            origin: &mine,
            image_bytes: 0,
            mapped: Mapped::default(),
            runs: None,
        };
        assert!(refused(check(&h, Held::default(), None, &p)).contains("session 1 is gone"));
        // Another node's session is not looked for here.
        assert!(check(&h, Held::default(), None, &prop(&o, 0)).is_ok());
        let h = Here {
            shutting_down: true,
            ..here()
        };
        assert!(refused(check(&h, Held::default(), None, &prop(&o, 0))).contains("shutting down"));
    }

    #[test]
    fn a_restore_beyond_the_nodes_rlimit_as_is_refused() {
        const MIB: u64 = 1 << 20;
        let h = Here {
            rlimit_as: Some(400 * MIB),
            vm_size: 100 * MIB,
            ..here()
        };
        let o = owner(0);
        let p = |mapped: u64, pages: u64, runs: Option<u64>| Proposal {
            mapped: Mapped {
                bytes: mapped,
                vmas: 30,
            },
            runs,
            ..prop(&o, pages)
        };
        // xz -9: 674 MiB mapped, 100 MiB of contents.
        let r = check(&h, Held::default(), None, &p(674 * MIB, 100 * MIB, None));
        assert!(matches!(&r, Err(Refusal::Unable(_))), "{r:?}");
        let e = refused(r);
        assert!(
            e.contains("the program maps 674.0 MiB and this node's restorer runs under RLIMIT_AS 400.0 MiB")
                && e.contains("the program's mappings"),
            "{e}"
        );
        // The region (at most one run per page) plus the mappings: 674 +
        // 105.x MiB needed.
        let need = need::peak(
            &p(674 * MIB, 0, None).mapped,
            need::region(&p(674 * MIB, 0, None).mapped, 100 * MIB, 25600),
            0,
        );
        assert!(
            e.contains(&format!("needs about {:.1} MiB", need as f64 / MIB as f64)),
            "{e}"
        );
        // A small program fits; without a limit nothing is counted.
        assert!(check(&h, Held::default(), None, &p(200 * MIB, 10 * MIB, None)).is_ok());
        let free = Here {
            rlimit_as: None,
            ..h.clone()
        };
        assert!(check(&free, Held::default(), None, &p(674 * MIB, 100 * MIB, None)).is_ok());
        // The daemon's own address space counts when it is the larger part:
        // the fork holds it and the page contents beside the new region.
        let big = Here {
            vm_size: 300 * MIB,
            ..h.clone()
        };
        let e = refused(check(
            &big,
            Held::default(),
            None,
            &p(50 * MIB, 60 * MIB, None),
        ));
        assert!(
            e.contains("this daemon's 362.0 MiB with the page contents"),
            "{e}"
        );
        // The migration of an accepted offer is checked again, with the
        // image's runs: an estimate that passed can fail then.
        assert!(check(
            &h,
            Held::default(),
            Some(10 * MIB),
            &p(200 * MIB, 10 * MIB, Some(10))
        )
        .is_ok());
        let e = refused(check(
            &h,
            Held::default(),
            Some(10 * MIB),
            &p(390 * MIB, 10 * MIB, Some(10)),
        ));
        assert!(e.contains("the program maps 390.0 MiB"), "{e}");
    }

    #[test]
    fn the_estimate_reads_anonymous_memory() {
        let b = image_estimate(std::process::id() as i32).unwrap();
        assert!(b > 0);
        let e = image_estimate(-1).unwrap_err();
        assert!(e.contains("/proc/-1/status"), "{e}");
    }
}
