//! Helpers shared by the integration tests of one node in the test process.

use std::sync::Arc;

use dmi::rmw::RmwTable;
use dmi::{Config, Dmi};

/// A one-node run in this process, on a loopback port of its own, whose
/// errors are returned rather than fatal.
pub fn node() -> Dmi {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let cfg = Config {
        rank: 0,
        peers: vec![l.local_addr().unwrap()],
        listener: Some(l),
        fatal_errors: false,
        members: None,
        pool_pages: None,
        ..Default::default()
    };
    Dmi::start(cfg, Arc::new(RmwTable::default())).unwrap()
}
