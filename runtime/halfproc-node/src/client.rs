//! The client side, for the `halfproc` command: blocking functions that
//! talk to a node daemon (each builds a small runtime of its own).

use crate::proto::{Conn, Exit, Identity, Msg};
use std::io::{self, Read, Write};

/// Environment variable naming the local node daemon (`HOST:PORT` or `unix:PATH`).
pub const NODE_ENV: &str = "HALFPROC_NODE";
/// The node daemon's address when neither `--node` nor `HALFPROC_NODE` says.
pub const DEFAULT_NODE: &str = "127.0.0.1:7070";

/// `--node`, else `$HALFPROC_NODE`, else [`DEFAULT_NODE`]; a loopback
/// `HOST:PORT` becomes that node's control socket (`unix:PATH`) when the
/// client has no shared secret and the socket exists (see
/// [`crate::rundir`]): without the secret, TCP serves `ps` only.
pub fn node_addr(flag: Option<&str>, me: &Identity) -> String {
    let addr = flag
        .map(str::to_string)
        .or_else(|| std::env::var(NODE_ENV).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| DEFAULT_NODE.to_string());
    if me.secret.is_some() {
        return addr;
    }
    match crate::rundir::loopback_port(&addr).and_then(crate::rundir::client_socket) {
        Some(p) => format!("{}{}", crate::proto::UNIX_PREFIX, p.display()),
        None => addr,
    }
}

fn runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// Sends one request; `progress` gets every `Progress` line; returns the
/// final answer (`Error` is returned as a message, not an `Err`).
pub fn request(
    addr: &str,
    me: &Identity,
    req: Msg,
    mut progress: impl FnMut(&str),
) -> io::Result<Msg> {
    runtime()?.block_on(async {
        let mut c = Conn::connect(addr, me).await?;
        c.send(&req).await?;
        loop {
            match c.recv().await? {
                Msg::Progress(p) => progress(&p),
                m => return Ok(m),
            }
        }
    })
}

/// A run session: sends `first` (`Run` or `RestoreDir`), relays this
/// process's stdin to the program and its output to this process's
/// stdout/stderr, and returns how the program ended. `started` gets the pid.
pub fn run(addr: &str, me: &Identity, first: Msg, started: impl FnOnce(i32)) -> io::Result<Exit> {
    runtime()?.block_on(async {
        let c = Conn::connect(addr, me).await?;
        let (mut r, mut w) = c.split();
        w.send(&first).await?;
        let pid = match r.recv().await? {
            Some(Msg::Started { pid }) => pid,
            Some(Msg::Error(e)) => return Err(io::Error::other(e)),
            Some(Msg::Denied(e)) => return Err(io::Error::new(io::ErrorKind::PermissionDenied, e)),
            Some(m) => return Err(io::Error::other(format!("unexpected answer {m:?}"))),
            None => return Err(crate::proto::closed()),
        };
        started(pid);
        // Stdin is read by a plain thread (a blocking read must not keep the
        // runtime alive at exit); the caller exits the process afterwards.
        let (itx, mut irx) = tokio::sync::mpsc::channel::<Option<Vec<u8>>>(16);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            let mut stdin = io::stdin().lock();
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        let _ = itx.blocking_send(None);
                        return;
                    }
                    Ok(n) => {
                        if itx.blocking_send(Some(buf[..n].to_vec())).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        tokio::spawn(async move {
            while let Some(chunk) = irx.recv().await {
                let m = match chunk {
                    Some(d) => Msg::Stdin(d),
                    None => Msg::StdinEof,
                };
                let eof = matches!(m, Msg::StdinEof);
                if w.send(&m).await.is_err() || eof {
                    // Keep the write half open until the end: dropping it
                    // would look like the client leaving.
                    std::future::pending::<()>().await;
                }
            }
        });
        let mut out = io::stdout().lock();
        let mut err = io::stderr().lock();
        loop {
            match r.recv().await? {
                Some(Msg::Output { stream, data }) => {
                    let w: &mut dyn Write = if stream == 2 { &mut err } else { &mut out };
                    w.write_all(&data)?;
                    w.flush()?;
                }
                Some(Msg::Exited(e)) => return Ok(e),
                Some(Msg::Error(e)) => return Err(io::Error::other(e)),
                Some(_) => {}
                None => {
                    return Err(io::Error::other(
                        "the node daemon closed the connection before the program ended",
                    ))
                }
            }
        }
    })
}
