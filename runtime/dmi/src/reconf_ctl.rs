// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The control socket of a reconfigurable run (`dmi run --control PATH`):
//! node 0 listens on a Unix socket for `dmi node join` and `dmi node
//! leave RANK`. One line per connection, one line of answer ("ok: ..." or
//! "error: ..."). A request is recorded in the rescale state in global
//! memory (`reconf::Var::Live*`) and is seen by every thread of the running
//! itergroup at the same `DMI_check_rescale` call; the controller applies it
//! when the itergroup ends.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::addr::NodeId;
use crate::error::DmiError;
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
/// `spares_from` on.
pub(crate) fn serve(dmi: &Dmi, vars: i64, l: UnixListener, spares_from: u32, stop: &AtomicBool) {
    let path = l
        .local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(Path::to_path_buf));
    while !stop.load(Ordering::Relaxed) {
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
            let asked = get(dmi, vars, Var::LiveJoins).map_err(e)?;
            let rank = i64::from(spares_from) + asked;
            if rank >= i64::from(dmi.size()) {
                return Err("no spare node left (start the run with dmi run --spares K)".into());
            }
            put(dmi, vars, Var::LiveJoins, asked + 1).map_err(e)?;
            Ok(format!("node {rank} joins at the next DMI_check_rescale"))
        }
        ["leave", r] => {
            let r: NodeId = r.parse().map_err(|_| format!("{r:?} is not a node rank"))?;
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
        _ => Err(format!("unknown request {line:?} (join, or leave RANK)")),
    }
}
