// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Errors of DMI calls. Bad input is an error value, never a crash.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::addr::NodeId;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DmiError {
    /// An address outside every region, or not a region start for munmap.
    BadAddress(String),
    /// An access that runs past the end of its region.
    OutOfRange(String),
    /// A mode that is not valid for the call, a bad size, an unknown function.
    BadArgument(String),
    /// DMI was not initialised (or already finalised).
    NotInitialized,
    /// A node died or became unreachable; nothing after this is reliable.
    NodeFailed { node: NodeId, reason: String },
    /// Start-up failed (environment, connections).
    Setup(String),
    /// A compute instance of this node failed (how, in words).
    Instance(String),
    /// No node's memory pool had room for a page (`DMI_POOL_PAGES`).
    PoolFull(String),
}

impl fmt::Display for DmiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DmiError::BadAddress(s) => write!(f, "bad address: {s}"),
            DmiError::OutOfRange(s) => write!(f, "out of range: {s}"),
            DmiError::BadArgument(s) => write!(f, "bad argument: {s}"),
            DmiError::NotInitialized => write!(f, "DMI is not initialised (call DMI_init first)"),
            DmiError::NodeFailed { node, reason } => write!(f, "node {node} failed: {reason}"),
            DmiError::Setup(s) => write!(f, "start-up: {s}"),
            DmiError::Instance(s) => write!(f, "{s}"),
            DmiError::PoolFull(s) => write!(f, "out of memory: {s}"),
        }
    }
}

impl std::error::Error for DmiError {}
