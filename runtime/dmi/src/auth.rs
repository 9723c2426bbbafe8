// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! How nodes prove they belong to a run: the run's secret (`DMI_SECRET_FILE`,
//! `dmi run --secret-file F`) and a challenge-response on every connection.
//! The accepting side sends a fresh random nonce; the connecting side
//! answers with HMAC-SHA256(secret, nonce || what it asks for) (its rank
//! and address for a peer, its address for a joiner). The secret never
//! travels, and an answer cannot be replayed (the nonce is new each time).
//! A run without a secret file uses the empty secret: its nodes still run
//! the exchange, but anyone who can reach them could answer it (loopback
//! runs of one user; `dmi run --accept-joins` requires a secret).

use std::os::unix::fs::PermissionsExt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::DmiError;

/// A challenge's nonce.
pub type Nonce = [u8; 16];

/// A fresh random nonce (getrandom(2)).
pub fn nonce() -> Nonce {
    let mut n = [0u8; 16];
    let mut got = 0;
    while got < n.len() {
        // SAFETY: getrandom writes at most `len - got` bytes into the
        // remaining part of the local buffer.
        let r = unsafe { libc::getrandom(n[got..].as_mut_ptr().cast(), n.len() - got, 0) };
        if r > 0 {
            got += r as usize;
        } else if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            // No entropy source at all: never answer with a fixed nonce.
            panic!("getrandom: {}", std::io::Error::last_os_error());
        }
    }
    n
}

fn hmac(secret: &[u8], nonce: &Nonce, what: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length: new_from_slice cannot fail.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes any key");
    m.update(nonce);
    m.update(what);
    m
}

/// The answer to `nonce` for `what`.
pub fn answer(secret: &[u8], nonce: &Nonce, what: &[u8]) -> Vec<u8> {
    hmac(secret, nonce, what).finalize().into_bytes().to_vec()
}

/// Whether `mac` answers `nonce` for `what` (compared in constant time).
pub fn check(secret: &[u8], nonce: &Nonce, what: &[u8], mac: &[u8]) -> bool {
    hmac(secret, nonce, what).verify_slice(mac).is_ok()
}

/// Reads a secret file: its bytes without a trailing newline; refused when
/// it is empty, unreadable, or readable by others than its owner.
pub fn read_secret(path: &std::path::Path) -> Result<Vec<u8>, DmiError> {
    let p = path.display();
    let meta =
        std::fs::metadata(path).map_err(|e| DmiError::Setup(format!("secret file {p}: {e}")))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(DmiError::Setup(format!(
            "secret file {p} is readable by others (chmod 600 {p})"
        )));
    }
    let mut s =
        std::fs::read(path).map_err(|e| DmiError::Setup(format!("secret file {p}: {e}")))?;
    while s.last().is_some_and(|&b| b == b'\n' || b == b'\r') {
        s.pop();
    }
    if s.is_empty() {
        return Err(DmiError::Setup(format!("secret file {p} is empty")));
    }
    Ok(s)
}

/// The run's secret from `DMI_SECRET_FILE` (empty when unset).
pub fn secret_from_env() -> Result<Vec<u8>, DmiError> {
    match std::env::var_os("DMI_SECRET_FILE") {
        Some(p) => read_secret(std::path::Path::new(&p)),
        None => Ok(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_checks_only_with_the_same_secret_nonce_and_request() {
        let n = nonce();
        let a = answer(b"s3cret", &n, b"hello 2");
        assert!(check(b"s3cret", &n, b"hello 2", &a));
        assert!(!check(b"other", &n, b"hello 2", &a));
        assert!(!check(b"s3cret", &n, b"hello 3", &a));
        assert!(!check(b"s3cret", &nonce(), b"hello 2", &a));
        assert_ne!(nonce(), nonce());
    }
}
