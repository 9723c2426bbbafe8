//! Who may ask what: the peer of a connection and the owner check.
//!
//! Local clients reach the daemon through its unix **control socket**
//! (`halfproc node --control PATH`, clients `--node unix:PATH`); the kernel
//! tells who they are (`SO_PEERCRED`, `SO_PEERGROUPS`). Such a client may
//! checkpoint or migrate a program only if it is root or the program's
//! owner (its real, effective and saved uids are all the client's, the rule
//! of ptrace); a program it runs gets its ids (the daemon must be root to
//! start programs for other users). The control socket serves client
//! requests only; node-to-node traffic is TCP.
//!
//! TCP peers are not identified by the kernel. A daemon without a control
//! socket serves them as before (one user; the shared secret, if any, keeps
//! strangers out). A daemon with a control socket is multi-user: over TCP
//! it serves only peers that proved they hold the shared secret (nodes,
//! administrators), and answers anyone else's requests with [`Msg::Denied`]
//! (only `ps` is open).

use crate::proto::Msg;
use halfproc_migrate::Creds;
use std::os::fd::AsRawFd;

/// The other end of a connection.
#[derive(Debug, Clone)]
pub enum Peer {
    /// A client on the control socket.
    Local(Creds),
    /// A TCP peer; `authenticated` if it proved it holds the shared secret.
    Network { authenticated: bool },
}

/// The credentials of the process at the other end of a unix socket.
pub fn local_peer(s: &tokio::net::UnixStream) -> std::io::Result<Creds> {
    let c = s.peer_cred()?;
    let mut groups = vec![0u32; 256];
    let mut len = (groups.len() * 4) as libc::socklen_t;
    // SAFETY: getsockopt into a buffer of `len` bytes we own.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERGROUPS,
            groups.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    groups.truncate(len as usize / 4);
    Ok(Creds {
        uid: c.uid(),
        gid: c.gid(),
        groups,
    })
}

/// What a request runs as once admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admit {
    /// Go ahead with the daemon's own credentials.
    AsDaemon,
    /// Go ahead; a program it starts gets these credentials.
    As(Creds),
}

fn denied(s: String) -> String {
    s
}

/// Whether `peer` may make request `m` at all (the owner of a target
/// process is checked by [`may_act`]). `control`: the daemon has a control
/// socket; `daemon_uid`: its effective uid.
/// The error is the text of a [`Msg::Denied`].
pub fn admit(peer: &Peer, m: &Msg, control: bool, daemon_uid: u32) -> Result<Admit, String> {
    let client = matches!(
        m,
        Msg::Run { .. }
            | Msg::RestoreDir { .. }
            | Msg::Ps
            | Msg::Migrate { .. }
            | Msg::Checkpoint { .. }
            | Msg::Resolve { .. }
    );
    match peer {
        Peer::Network { authenticated } => {
            if control && !authenticated && !matches!(m, Msg::Ps) {
                return Err(denied(
                    "this node has a control socket (multi-user): over TCP it serves only peers \
                     holding the nodes' shared secret (--secret-file); local clients use \
                     --node unix:PATH"
                        .into(),
                ));
            }
            Ok(Admit::AsDaemon)
        }
        Peer::Local(c) => {
            if !client {
                return Err(denied(
                    "the control socket serves client requests only (nodes talk over TCP)".into(),
                ));
            }
            let starts = matches!(m, Msg::Run { .. } | Msg::RestoreDir { .. });
            if !starts || c.uid == daemon_uid {
                Ok(Admit::AsDaemon)
            } else if daemon_uid == 0 {
                Ok(Admit::As(c.clone()))
            } else {
                Err(denied(format!(
                    "the node daemon runs as uid {daemon_uid} and cannot start programs as \
                     uid {}",
                    c.uid
                )))
            }
        }
    }
}

/// Whether `peer` may `what` (checkpoint, migrate) process `pid`, whose
/// /proc status is `status`: root, or its owner. TCP peers were admitted
/// by [`admit`].
/// The error is the text of a [`Msg::Denied`].
pub fn may_act(peer: &Peer, pid: i32, status: &str, what: &str) -> Result<(), String> {
    let Peer::Local(c) = peer else {
        return Ok(());
    };
    if c.uid == 0 {
        return Ok(());
    }
    match Creds::from_status(status) {
        Ok(owner) if owner.uid == c.uid => Ok(()),
        Ok(owner) => Err(denied(format!(
            "permission denied: pid {pid} belongs to uid {}, you are uid {}; only its owner \
             or root may {what} it",
            owner.uid, c.uid
        ))),
        Err(e) => Err(denied(format!(
            "permission denied: pid {pid}: {e}; only root may {what} it"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(uid: u32) -> Peer {
        Peer::Local(Creds {
            uid,
            gid: uid,
            groups: vec![],
        })
    }

    const OWNED_BY_1000: &str = "Uid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\n";

    #[test]
    fn only_owner_or_root_may_act() {
        assert!(may_act(&user(1000), 5, OWNED_BY_1000, "migrate").is_ok());
        assert!(may_act(&user(0), 5, OWNED_BY_1000, "migrate").is_ok());
        let Err(e) = may_act(&user(1001), 5, OWNED_BY_1000, "migrate") else {
            panic!("uid 1001 may migrate uid 1000's process");
        };
        assert!(e.contains("belongs to uid 1000, you are uid 1001"), "{e}");
        let suid = OWNED_BY_1000.replace("Uid:\t1000\t1000\t1000", "Uid:\t1000\t0\t0");
        assert!(may_act(&user(1000), 5, &suid, "migrate").is_err());
    }

    #[test]
    fn programs_run_as_the_local_client() {
        let run = Msg::Run {
            argv: vec!["true".into()],
            cwd: "/".into(),
            env: vec![],
        };
        let Ok(Admit::As(c)) = admit(&user(1000), &run, true, 0) else {
            panic!("root daemon must run it as the client");
        };
        assert_eq!(c.uid, 1000);
        assert!(matches!(
            admit(&user(1000), &run, true, 1000),
            Ok(Admit::AsDaemon)
        ));
        assert!(admit(&user(1001), &run, true, 1000).is_err());
        let node_msg = Msg::Commit;
        assert!(admit(&user(0), &node_msg, true, 0).is_err());
    }

    #[test]
    fn tcp_needs_the_secret_on_a_multi_user_node() {
        let mig = Msg::Migrate {
            pid: 1,
            to: "x:1".into(),
        };
        let anon = Peer::Network {
            authenticated: false,
        };
        assert!(admit(&anon, &mig, true, 0).is_err());
        assert!(admit(&anon, &Msg::Ps, true, 0).is_ok());
        assert!(admit(&anon, &mig, false, 0).is_ok());
        let node = Peer::Network {
            authenticated: true,
        };
        assert!(admit(&node, &mig, true, 0).is_ok());
    }
}
