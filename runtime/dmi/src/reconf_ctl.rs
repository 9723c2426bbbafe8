// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The control socket of a reconfigurable run (`dmi run --control PATH`):
//! node 0 listens on a Unix socket for `dmi node join`, `dmi node leave
//! RANK|HOST[:PORT]` and `dmi node list`. One line per connection, one line of answer ("ok: ..." or
//! "error: ..."). A request is recorded in the rescale state in global
//! memory (`reconf::Var::Live*`) and is seen by every thread of the running
//! itergroup at the same `DMI_check_rescale` call; the controller applies it
//! when the itergroup ends. Nodes from outside (`join.rs`) that node 0's
//! engine welcomed and that are connected to every node are recorded the
//! same way, by their new rank.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::addr::NodeId;
use crate::error::DmiError;
use crate::msg::AppMsg;
use crate::reconf::{get, put, Var, MAX_THREADS};
use crate::runtime::Dmi;

/// Binds the socket (replacing a stale one) for [`serve`].
pub(crate) fn bind(path: &Path) -> Result<UnixListener, DmiError> {
    let _ = std::fs::remove_file(path);
    let l = UnixListener::bind(path)
        .map_err(|e| DmiError::Setup(format!("control socket {}: {e}", path.display())))?;
    l.set_nonblocking(true)
        .map_err(|e| DmiError::Setup(format!("control socket: {e}")))?;
    Ok(l)
}

/// Answers requests until `stop`; live joins take spare ranks from
/// `spares_from` on. Records the nodes from outside that are ready.
pub(crate) fn serve(
    dmi: &Dmi,
    vars: i64,
    l: Option<UnixListener>,
    spares_from: u32,
    stop: &AtomicBool,
) {
    let path = l
        .as_ref()
        .and_then(|l| l.local_addr().ok())
        .and_then(|a| a.as_pathname().map(Path::to_path_buf));
    while !stop.load(Ordering::Relaxed) {
        while let Some(rank) = dmi.next_joined() {
            admit(dmi, vars, rank);
        }
        let Some(l) = &l else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        match l.accept() {
            Ok((s, _)) => {
                if let Err(e) = answer(dmi, vars, s, spares_from) {
                    eprintln!("dmi: control socket: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => {
                eprintln!("dmi: control socket: {e}");
                break;
            }
        }
    }
    if let Some(p) = path {
        let _ = std::fs::remove_file(p);
    }
}

/// A node from outside is ready: record it as a live join and tell it.
fn admit(dmi: &Dmi, vars: i64, rank: NodeId) {
    // Told first: the controller may bring it in (Spawn) as soon as the
    // request is recorded, and the two travel on the same connection.
    let text =
        format!("joined the run as node {rank}; it is brought in at the next DMI_check_rescale");
    let _ = dmi.send_app(rank, AppMsg::Admitted { text });
    if let Err(e) = record_join(dmi, vars, rank) {
        eprintln!("dmi: node 0: refusing node {rank}: {e}");
        let _ = dmi.send_app(rank, AppMsg::Refused { reason: e });
    } else {
        eprintln!("dmi: node 0: node {rank} joined from outside; it is brought in at the next DMI_check_rescale");
    }
}

/// Appends `rank` to the live join requests.
fn record_join(dmi: &Dmi, vars: i64, rank: NodeId) -> Result<(), String> {
    let e = |e: DmiError| e.to_string();
    let n = get(dmi, vars, Var::LiveJoins).map_err(e)?;
    if n as usize >= MAX_THREADS {
        return Err(format!("more than {MAX_THREADS} join requests"));
    }
    put(dmi, vars, Var::LiveJoin(n as usize), i64::from(rank)).map_err(e)?;
    put(dmi, vars, Var::LiveJoins, n + 1).map_err(e)
}

fn answer(dmi: &Dmi, vars: i64, s: UnixStream, spares_from: u32) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line)?;
    let reply = match request(dmi, vars, line.trim(), spares_from) {
        Ok(ok) => format!("ok: {ok}\n"),
        Err(e) => format!("error: {e}\n"),
    };
    (&s).write_all(reply.as_bytes())
}

fn request(dmi: &Dmi, vars: i64, line: &str, spares_from: u32) -> Result<String, String> {
    let e = |e: DmiError| e.to_string();
    let words: Vec<&str> = line.split_whitespace().collect();
    match words[..] {
        ["join"] => {
            let taken = get(dmi, vars, Var::SparesTaken).map_err(e)?;
            let rank = i64::from(spares_from) + taken;
            if rank >= i64::from(dmi.size()) {
                return Err(
                    "no spare node left (start the run with dmi run --spares K, or join one from \
                     outside: dmi node join --run HOST:PORT)"
                        .into(),
                );
            }
            record_join(dmi, vars, rank as NodeId)?;
            put(dmi, vars, Var::SparesTaken, taken + 1).map_err(e)?;
            Ok(format!("node {rank} joins at the next DMI_check_rescale"))
        }
        ["list"] => {
            let members = dmi.members().map_err(e)?;
            let nodes: Vec<String> = members
                .iter()
                .map(|&r| match dmi.peer_addr(r) {
                    Some(a) => format!("{r}={a}"),
                    None => format!("{r}=?"),
                })
                .collect();
            Ok(format!("members {}", nodes.join(" ")))
        }
        ["leave", r] => {
            let r = leaving_rank(dmi, r)?;
            if r == 0 {
                return Err("node 0 cannot leave: it runs DMI_main".into());
            }
            if !dmi.members().map_err(e)?.contains(&r) {
                return Err(format!("node {r} is not a member"));
            }
            let n = get(dmi, vars, Var::LiveLeaves).map_err(e)?;
            for i in 0..n {
                if get(dmi, vars, Var::LiveLeave(i as usize)).map_err(e)? == i64::from(r) {
                    return Err(format!("node {r} is already leaving"));
                }
            }
            if n as usize >= MAX_THREADS {
                return Err(format!("more than {MAX_THREADS} leave requests"));
            }
            put(dmi, vars, Var::LiveLeave(n as usize), i64::from(r)).map_err(e)?;
            put(dmi, vars, Var::LiveLeaves, n + 1).map_err(e)?;
            Ok(format!("node {r} leaves at the next DMI_check_rescale"))
        }
        _ => Err(format!(
            "unknown request {line:?} (join, leave RANK|HOST[:PORT], or list)"
        )),
    }
}

/// The rank a leave names: a rank, or the address a member node listens
/// at (`HOST:PORT`, or an IP alone when one member listens there). Names
/// are not resolved: the run knows its nodes by address.
fn leaving_rank(dmi: &Dmi, what: &str) -> Result<NodeId, String> {
    if let Ok(r) = what.parse::<NodeId>() {
        return Ok(r);
    }
    let members = dmi.members().map_err(|e| e.to_string())?;
    let at = |f: &dyn Fn(std::net::SocketAddr) -> bool| -> Vec<NodeId> {
        members
            .iter()
            .copied()
            .filter(|&r| dmi.peer_addr(r).is_some_and(f))
            .collect()
    };
    let found = if let Ok(a) = what.parse::<std::net::SocketAddr>() {
        at(&|p| p == a)
    } else if let Ok(ip) = what.parse::<std::net::IpAddr>() {
        at(&|p| p.ip() == ip)
    } else {
        return Err(format!(
            "{what:?} is not a node rank, an IP address or IP:PORT"
        ));
    };
    match found[..] {
        [r] => Ok(r),
        [] => Err(format!("no member node listens at {what}")),
        _ => Err(format!(
            "several member nodes listen at {what} (ranks {found:?}): give IP:PORT or the rank"
        )),
    }
}
