// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! DMI: a global address space with selective coherence over nodes
//! (dmi-reconfiguration sec. 3; the protocol is described in `docs/dmi.md`).
//!
//! * `addr`, `msg`, `node`, `owner`, `control`, `rmw`, `epoch`, `swap`: the
//!   protocol core, a state machine without I/O (`epoch`: nodes joining and
//!   leaving; `swap`: moving pages away when a node's pool is full).
//! * `sim` and `check`: a deterministic in-process network and the
//!   sequential-consistency checker the tests (and `dmi check`) use.
//! * `transport` and `runtime`: tokio connections with heartbeats, and the
//!   blocking Rust API [`Dmi`]; `capi`: the C ABI (`include/dmi.h`).
//! * `pool`: the node's page frames (in the shared range when the
//!   node has a half-process set) and the lock-free read of hits from them.
//! * `ring`, `serve` and `capi_inst`: compute instances as members of the
//!   node's half-process set, reaching the node through mailboxes in the
//!   shared range (`DMI_create`/`DMI_join`/`DMI_detach`).
//! * `slurm` and `hostlist`: start-up under `srun` (ranks and peers from
//!   the `SLURM_*` variables and a rendezvous at rank 0).
//! * `host` and `xmove`: movable runs (the program as a compute instance of
//!   its node) and moving instances between nodes at `DMI_yield`.
//! * `reconf` and `schedule`: reconfigurable programs (`DMI_main`,
//!   `DMI_rescale`, `DMI_itergroup`, `DMI_check_rescale`).

pub mod addr;
pub mod auth;
#[allow(non_camel_case_types, non_snake_case)]
pub mod capi;
#[allow(non_camel_case_types, non_snake_case)]
pub mod capi_inst;
#[allow(non_camel_case_types, non_snake_case)]
pub mod capi_reconf;
pub mod check;
mod config;
mod control;
mod engine;
pub mod epoch;
pub mod error;
pub mod flow;
mod guest;
mod host;
pub mod hostlist;
mod instance_fds;
pub mod join;
pub mod msg;
pub mod node;
mod owner;
mod page;
pub mod pool;
pub mod reconf;
mod reconf_ctl;
pub mod relocate;
pub mod ring;
pub mod rmw;
pub mod runtime;
pub mod schedule;
pub mod serve;
mod serve_single;
mod serve_yield;
pub mod sim;
pub mod slurm;
mod swap;
pub mod transport;
mod xmove;
mod xmove_hooks;

pub use addr::{NodeId, ROOT};
pub use error::DmiError;
pub use msg::{ReadMode, WriteMode};
pub use runtime::{Config, Dmi, Handle};
