// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! User-defined read-modify-write functions, run at a page's owner.
//!
//! A function is known by its index in the table, so every node must
//! register the same functions in the same order (as SPMD programs do).
//! Index 0 and 1 are built in: fetch-and-add and compare-and-swap of a
//! little-endian `i64`.

use std::sync::{Arc, RwLock};

use crate::error::DmiError;

/// What the owner calls: change `target` in place given `arg`; the returned
/// bytes are the caller's result.
pub type RmwFn = Arc<dyn Fn(&mut [u8], &[u8]) -> Result<Vec<u8>, String> + Send + Sync>;

/// Built-in: adds the `i64` in `arg` to the `i64` target; returns the old value.
pub const FETCH_ADD_I64: u32 = 0;
/// Built-in: `arg` is `expected, desired` (two `i64`); stores `desired` if
/// the target equals `expected`; returns the old value.
pub const CAS_I64: u32 = 1;

/// Looks functions up by index.
pub trait RmwFuncs: Send + Sync {
    fn exists(&self, func: u32) -> bool;
    fn call(&self, func: u32, target: &mut [u8], arg: &[u8]) -> Result<Vec<u8>, DmiError>;
}

/// The table: built-ins first, then registered functions.
pub struct RmwTable {
    funcs: RwLock<Vec<RmwFn>>,
}

fn i64_at(b: &[u8], what: &str) -> Result<i64, String> {
    b.get(..8)
        .and_then(|s| s.try_into().ok())
        .map(i64::from_le_bytes)
        .ok_or_else(|| format!("{what}: needs 8 bytes, has {}", b.len()))
}

impl Default for RmwTable {
    fn default() -> Self {
        let add: RmwFn = Arc::new(|t: &mut [u8], a: &[u8]| {
            let old = i64_at(t, "fetch-add target")?;
            let d = i64_at(a, "fetch-add argument")?;
            t[..8].copy_from_slice(&old.wrapping_add(d).to_le_bytes());
            Ok(old.to_le_bytes().to_vec())
        });
        let cas: RmwFn = Arc::new(|t: &mut [u8], a: &[u8]| {
            let old = i64_at(t, "cas target")?;
            let expected = i64_at(a, "cas expected")?;
            let desired = i64_at(a.get(8..).unwrap_or_default(), "cas desired")?;
            if old == expected {
                t[..8].copy_from_slice(&desired.to_le_bytes());
            }
            Ok(old.to_le_bytes().to_vec())
        });
        RmwTable {
            funcs: RwLock::new(vec![add, cas]),
        }
    }
}

impl RmwTable {
    /// Adds a function; returns its index.
    pub fn register(&self, f: RmwFn) -> u32 {
        let mut v = self.funcs.write().unwrap_or_else(|e| e.into_inner());
        v.push(f);
        (v.len() - 1) as u32
    }
}

impl RmwFuncs for RmwTable {
    fn exists(&self, func: u32) -> bool {
        let v = self.funcs.read().unwrap_or_else(|e| e.into_inner());
        (func as usize) < v.len()
    }

    fn call(&self, func: u32, target: &mut [u8], arg: &[u8]) -> Result<Vec<u8>, DmiError> {
        let f = {
            let v = self.funcs.read().unwrap_or_else(|e| e.into_inner());
            v.get(func as usize).cloned()
        };
        let f = f.ok_or_else(|| DmiError::BadArgument(format!("no function {func}")))?;
        f(target, arg).map_err(DmiError::BadArgument)
    }
}
