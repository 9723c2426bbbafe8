//! Checkpoint/restore of single-threaded Linux processes and trees of them
//! (migration phase 1, portable backend). See `docs/migration.md`.
//!
//! # Layout
//!
//! - [`refuse`]: checks run before anything is stopped;
//! - `freeze`: ptrace seize/interrupt, registers, signal mask and queues,
//!   injected `rt_sigaction` queries;
//! - `signals`: which pending signals are carried, read from both queues;
//! - `mem`: the [`MemoryReader`] trait (`process_vm_readv`, or `dmread` on the kernel backend);
//! - `dump`: [`checkpoint`]; `dump_mem`: which pages are carried, and reading them;
//! - [`image`]: the on-disk format (manifest + pages); [`PageBuf`]: page contents in memory;
//! - [`pages_file`]: `pages.img` checked, and restored from, with bounded memory;
//! - [`files_img`]: mapped files' contents, for a restore where a file differs;
//! - [`precopy`]: pre-copy rounds and dirty tracking for live migration;
//! - [`phases`]: optional per-phase timing (`halfproc bench migrate --phases`);
//! - [`restore_need`]: the address space a restore needs (for `RLIMIT_AS`);
//! - `restore`, `restore_plan`, `restore_moves`, `restorer`, `sigframe`: [`restore`],
//!   the blob's op table, which runs it moves rather than copies, the blob, the
//!   `rt_sigreturn` frame; `shmem`, `restore_shmem`: lone shared anonymous
//!   memory, checked and restored;
//! - [`tree`], `restore_tree`: process trees (a program and its forked
//!   workers) checkpointed and restored together, with their pids.

pub mod creds;
pub mod error;
mod freeze;
pub mod image;
pub mod image_dir;
mod itimers;
mod mem;
mod pagebuf;
pub mod pages_file;
mod pagescan;
pub mod phases;
pub mod precopy;
mod procfs;
pub mod refuse;
mod restorer;
mod sigframe;
mod signals;

mod dump;
mod dump_mem;
mod dump_read;
pub mod files_img;
mod restore;
mod restore_check;
mod restore_itimers;
mod restore_moves;
pub mod restore_need;
mod restore_plan;
mod restore_shmem;
mod restore_tree;
mod shmem;
pub mod tree;
mod tree_copies;

pub use creds::Creds;
pub use dump::{
    checkpoint, checkpoint_into, checkpoint_into_checked, checkpoint_relayed, freeze_and_dump,
    freeze_and_dump_checked, freeze_and_dump_member, AfterFreeze, CheckpointStats, Dumped, Leave,
};
pub use dump_read::{
    prefault_enabled, reader_threads, set_prefault, set_reader_threads,
    MAX_THREADS as DUMP_MAX_THREADS,
};
pub use error::{Error, Refusal, Result};
pub use mem::{caller_is_member, reader, reader_kind, DmReader, MemoryReader, PortableReader};
pub use pagebuf::PageBuf;
pub use precopy::{probe_soft_dirty, DirtyTracker};
pub use procfs::{maps, MapsEntry};
pub use restore::{restore, restore_from, restore_from_memory, RestoreOptions, Restored};
pub use restore_check::{copy_instead, differing_files};
pub use restore_tree::{
    read_tree, restore_tree, restore_tree_held, tree_restorable, HeldTree, TreePages,
};
pub use tree::{
    check_procs, check_tree, checkpoint_tree, checkpoint_tree_into, freeze_and_dump_tree, tree_out,
    DumpedTree, TreeOut, TreeStats,
};
