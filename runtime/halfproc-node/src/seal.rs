//! Integrity of every frame after the handshake, between peers that hold
//! the shared secret.
//!
//! The handshake proves each side holds the secret but protects nothing
//! sent after it: someone on the path could inject, alter, drop, reorder or
//! replay frames (an image, a `Commit`, a program's output). So each
//! direction gets its own session key,
//! `HMAC-SHA256(secret, "halfproc-frames" || sender's nonce || receiver's nonce)`
//! (both nonces fresh per connection: a recorded session does not replay
//! into another), and every frame body is followed by
//! `HMAC-SHA256(key, sequence number || body)`, the sequence number
//! counting the frames of that direction from 0. A frame whose tag does not
//! match ends the connection. Frames are not encrypted.

use bytes::{Bytes, BytesMut};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io;

type HmacSha256 = Hmac<Sha256>;

/// Bytes of the tag after each frame body.
pub const TAG: usize = 32;

/// One direction's key and frame counter.
#[derive(Clone)]
struct Dir {
    key: [u8; 32],
    seq: u64,
}

impl Dir {
    fn new(secret: &[u8], from: &[u8; 16], to: &[u8; 16]) -> Dir {
        let mut m = HmacSha256::new_from_slice(secret).expect("HMAC takes any key length");
        m.update(b"halfproc-frames");
        m.update(from);
        m.update(to);
        Dir {
            key: m.finalize().into_bytes().into(),
            seq: 0,
        }
    }

    fn mac(&self, body: &[u8]) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        m.update(&self.seq.to_be_bytes());
        m.update(body);
        m
    }
}

/// Tags the frames one side sends.
#[derive(Clone)]
pub struct Sealer(Dir);

/// Checks the frames one side receives.
#[derive(Clone)]
pub struct Opener(Dir);

/// The keys of a connection for the side that sent nonce `mine` and got
/// `theirs`.
pub fn keys(secret: &[u8], mine: &[u8; 16], theirs: &[u8; 16]) -> (Sealer, Opener) {
    (
        Sealer(Dir::new(secret, mine, theirs)),
        Opener(Dir::new(secret, theirs, mine)),
    )
}

impl Sealer {
    /// `body` followed by its tag.
    pub fn seal(&mut self, body: Bytes) -> Bytes {
        let tag = self.0.mac(&body).finalize().into_bytes();
        self.0.seq += 1;
        let mut out = BytesMut::with_capacity(body.len() + TAG);
        out.extend_from_slice(&body);
        out.extend_from_slice(&tag);
        out.freeze()
    }
}

impl Opener {
    /// The body of `frame` if its tag is right for the next frame of this
    /// direction; else an error (`InvalidData`) that says so.
    pub fn open(&mut self, mut frame: BytesMut) -> io::Result<BytesMut> {
        let bad = |why: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "frame {} failed its integrity check ({why}): altered, injected, dropped or \
                     replayed on the way; connection closed",
                    self.0.seq
                ),
            )
        };
        if frame.len() < TAG {
            return Err(bad("shorter than its tag"));
        }
        let tag = frame.split_off(frame.len() - TAG);
        if self.0.mac(&frame).verify_slice(&tag).is_err() {
            return Err(bad("wrong HMAC"));
        }
        self.0.seq += 1;
        Ok(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn pair() -> (Sealer, Opener) {
        let (a, b) = ([1u8; 16], [2u8; 16]);
        let (a_seal, _) = keys(S, &a, &b);
        let (_, b_open) = keys(S, &b, &a);
        (a_seal, b_open)
    }

    #[test]
    fn sealed_frames_open_in_order() {
        let (mut s, mut o) = pair();
        for body in [&b"one"[..], b"", b"three"] {
            let f = s.seal(Bytes::copy_from_slice(body));
            assert_eq!(&o.open(BytesMut::from(&f[..])).unwrap()[..], body);
        }
    }

    #[test]
    fn altered_replayed_dropped_or_foreign_frames_fail() {
        let (mut s, mut o) = pair();
        let f0 = s.seal(Bytes::from_static(b"pages"));
        let f1 = s.seal(Bytes::from_static(b"commit"));
        let mut altered = BytesMut::from(&f0[..]);
        altered[0] ^= 1;
        let e = o.open(altered).unwrap_err();
        assert!(e.to_string().contains("integrity check"), "{e}");
        // Dropped: the next frame's number is not the expected one.
        assert!(o.open(BytesMut::from(&f1[..])).is_err());
        assert!(o.open(BytesMut::from(&f0[..])).is_ok());
        // Replayed.
        assert!(o.open(BytesMut::from(&f0[..])).is_err());
        assert!(o.open(BytesMut::from(&f1[..])).is_ok());
        // Another secret.
        let (mut other, _) = keys(b"another secret, 16+ bytes", &[1; 16], &[2; 16]);
        let foreign = other.seal(Bytes::from_static(b"x"));
        assert!(pair().1.open(BytesMut::from(&foreign[..])).is_err());
        // Reflected back to its sender (the other direction's key).
        let (mut a_seal, mut a_open) = keys(S, &[1; 16], &[2; 16]);
        let reflected = a_seal.seal(Bytes::from_static(b"x"));
        assert!(a_open.open(BytesMut::from(&reflected[..])).is_err());
        assert!(pair().1.open(BytesMut::from(&b"short"[..])).is_err());
    }
}
