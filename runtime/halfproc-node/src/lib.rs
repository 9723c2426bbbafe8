//! The halfproc node daemon (`halfproc node`) and its client side: runs
//! programs with their stdio relayed to a `halfproc run` client, lists them,
//! checkpoints and restores them, and migrates them between nodes by
//! streaming a `halfproc-migrate` image over a framed TCP connection.
//! See `docs/migration.md`.
//!
//! # Layout
//!
//! - [`proto`]: the framed, versioned messages;
//! - [`access`]: peers (control socket, TCP), what each may ask, the owner check;
//! - [`seal`]: an HMAC on every frame after the handshake (with a secret);
//! - [`rundir`]: where the control socket lives by default, how clients find it;
//! - [`daemon`]: listener, one task per connection, program and session tables, shutdown;
//! - [`session`]: a run session at the program's origin (output order, stdin buffer);
//! - [`member`]: the kernel backend: the daemon leads a set, `run` starts members (clone3 + execve);
//! - [`program`]: one incarnation on a node (keeper thread, relays, link to the origin);
//! - [`migrate`]: source of a migration;
//! - [`checkpoint`], [`restore_dir`]: checkpoint into and restore from an image directory;
//! - [`migrate_in`]: destination of a migration (the offer first, then the image);
//! - [`admission`]: what a destination takes: the rules of an offer and its ticket;
//! - [`precopy`]: the source's pre-copy rounds (mechanism probe, dump thread);
//! - [`client`]: blocking client functions for the `halfproc` command.

pub mod access;
pub mod admission;
pub mod checkpoint;
pub mod client;
pub mod daemon;
pub mod files;
pub mod member;
pub mod migrate;
pub mod migrate_dump;
pub mod migrate_in;
pub mod migrate_tree;
pub mod migrate_tree_in;
pub mod pipes;
pub mod precopy;
pub mod program;
pub mod proto;
pub mod restore_dir;
pub mod rundir;
pub mod seal;
pub mod session;
pub mod yield_point;
