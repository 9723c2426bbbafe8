// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Two guests of the same kernel at once, connected by a virtual network.
//!
//! Each guest gets a virtio-net card on a point-to-point UDP link over the
//! host's loopback (`-netdev dgram`, QEMU 7.2+): guest A sends to guest B's
//! port and the other way round. Neither side listens or connects, so the two
//! QEMUs may start in any order and one that is slow to boot loses nothing
//! but the frames sent before its card was up (ARP retries cover that). Under
//! TCG this needs no privileges, no tap device and no bridge.
//!
//! The guests learn their addresses from the kernel command line:
//! `halfproc.role=a|b halfproc.ip=10.0.2.1/24 halfproc.peer=10.0.2.2`
//! (`tests/guest/init.sh` sets up `eth0`). Both consoles are logged and
//! judged like a single guest's; the pair passes only if both do.

use crate::qemu::{self, RunOpts};
use crate::verdict::Verdict;
use std::io;
use std::net::UdpSocket;
use std::path::PathBuf;

/// One end of the link.
#[derive(Clone, Debug)]
pub struct Net {
    /// UDP port on 127.0.0.1 this guest's card receives on.
    pub local_port: u16,
    /// UDP port on 127.0.0.1 of the other guest's card.
    pub remote_port: u16,
    /// The card's MAC address.
    pub mac: String,
}

impl Net {
    /// The qemu arguments for this card.
    pub fn args(&self) -> Vec<String> {
        vec![
            "-netdev".into(),
            format!(
                "dgram,id=net0,local.type=inet,local.host=127.0.0.1,local.port={},\
                 remote.type=inet,remote.host=127.0.0.1,remote.port={}",
                self.local_port, self.remote_port
            ),
            "-device".into(),
            format!("virtio-net-pci,netdev=net0,mac={}", self.mac),
        ]
    }
}

/// Two UDP ports on 127.0.0.1 that were free a moment ago (bound to port 0
/// and released; qemu binds them right after, and a port taken in between
/// makes that qemu fail to start, which fails the run with qemu's message).
pub fn free_udp_ports() -> io::Result<(u16, u16)> {
    let a = UdpSocket::bind("127.0.0.1:0")?;
    let b = UdpSocket::bind("127.0.0.1:0")?;
    Ok((a.local_addr()?.port(), b.local_addr()?.port()))
}

/// Guest `role`'s options: `base` with its log, its card on the link and
/// its address on the kernel command line.
pub fn guest(base: &RunOpts, role: char, log: PathBuf, ports: (u16, u16)) -> RunOpts {
    let (me, peer, local, remote) = match role {
        'a' => (1, 2, ports.0, ports.1),
        _ => (2, 1, ports.1, ports.0),
    };
    let mut o = base.clone();
    o.log = log;
    o.echo_prefix = format!("[{role}] ");
    o.net = Some(Net {
        local_port: local,
        remote_port: remote,
        mac: format!("52:54:00:12:34:{me:02x}"),
    });
    o.append = format!(
        "{} halfproc.role={role} halfproc.ip=10.0.2.{me}/24 halfproc.peer=10.0.2.{peer}",
        o.append
    )
    .trim()
    .to_string();
    o
}

/// Boots guests A and B at once and judges both.
pub fn run(a: &RunOpts, b: &RunOpts) -> io::Result<(Verdict, Verdict)> {
    std::thread::scope(|s| {
        let ta = s.spawn(|| qemu::run(a));
        let tb = s.spawn(|| qemu::run(b));
        let va = ta.join().expect("guest A thread");
        let vb = tb.join().expect("guest B thread");
        Ok((va?, vb?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_two_guests_point_at_each_other() {
        let base = RunOpts {
            qemu: "q".into(),
            kernel: "/k".into(),
            initrd: "/i".into(),
            append: "halfproc.mode=two".into(),
            timeout: Duration::from_secs(1),
            log: "/x.log".into(),
            share: None,
            memory_mb: 512,
            cpus: 1,
            cpu: "max".into(),
            echo: false,
            echo_prefix: String::new(),
            net: None,
            disk: None,
            expected: Vec::new(),
        };
        let (p, q) = free_udp_ports().unwrap();
        assert_ne!(p, q);
        let a = guest(&base, 'a', "/a.log".into(), (p, q));
        let b = guest(&base, 'b', "/b.log".into(), (p, q));
        let (na, nb) = (a.net.clone().unwrap(), b.net.clone().unwrap());
        assert_eq!(
            (na.local_port, na.remote_port),
            (nb.remote_port, nb.local_port)
        );
        assert_ne!(na.mac, nb.mac);
        assert!(a
            .append
            .ends_with("halfproc.ip=10.0.2.1/24 halfproc.peer=10.0.2.2"));
        assert!(b.append.contains("halfproc.role=b halfproc.ip=10.0.2.2/24"));
        assert!(a.append.starts_with("halfproc.mode=two "));
        assert_eq!(a.log, PathBuf::from("/a.log"));
    }
}
