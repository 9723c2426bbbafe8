// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The physical limits `dmi bench` compares DMI against, measured in the
//! same run: memcpy of each access size, and loopback TCP (a request of 16
//! bytes answered with SIZE bytes, as a remote GET is; and a one-way
//! stream).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::bench_stats::Sample;

/// memcpy of `size` bytes: each sample times a batch of copies (enough
/// for about 1 MiB, so small copies are above the clock's resolution).
pub fn memcpy(size: usize, reps: usize) -> Sample {
    let src: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut dst = vec![0u8; size];
    let batch = (1 << 20) / size.max(1);
    let batch = batch.clamp(1, 100_000);
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        for _ in 0..batch {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        times.push(t.elapsed() / batch as u32);
    }
    Sample::new("memcpy", "", size, times)
}

/// A loopback echo server: answers each 8-byte length with that many bytes.
fn server(l: TcpListener) {
    let Ok((mut s, _)) = l.accept() else { return };
    let _ = s.set_nodelay(true);
    let mut out = vec![0x5au8; 1 << 20];
    loop {
        let mut req = [0u8; 16];
        if s.read_exact(&mut req).is_err() {
            return;
        }
        let mut left = u64::from_le_bytes(req[..8].try_into().unwrap_or_default()) as usize;
        while left > 0 {
            let n = left.min(out.len());
            if s.write_all(&out[..n]).is_err() {
                return;
            }
            left -= n;
        }
        out[0] = out[0].wrapping_add(1);
    }
}

/// A connected client to a fresh loopback echo server.
pub struct Tcp {
    s: TcpStream,
    buf: Vec<u8>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Tcp {
    pub fn start() -> std::io::Result<Tcp> {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let addr = l.local_addr()?;
        let thread = std::thread::spawn(move || server(l));
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Tcp {
            s,
            buf: vec![0; 1 << 20],
            thread: Some(thread),
        })
    }

    /// One request of 16 bytes answered with `size` bytes.
    fn round_trip(&mut self, size: usize) -> std::io::Result<()> {
        let mut req = [0u8; 16];
        req[..8].copy_from_slice(&(size as u64).to_le_bytes());
        self.s.write_all(&req)?;
        let mut left = size;
        while left > 0 {
            let n = left.min(self.buf.len());
            self.s.read_exact(&mut self.buf[..n])?;
            left -= n;
        }
        Ok(())
    }

    /// Request-response with a `size`-byte answer (the floor of a GET).
    pub fn request(&mut self, size: usize, reps: usize) -> std::io::Result<Sample> {
        self.round_trip(size)?;
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = Instant::now();
            self.round_trip(size)?;
            times.push(t.elapsed());
        }
        Ok(Sample::new("tcp request-response", "", size, times))
    }

    /// A one-way stream of `total` bytes (the bandwidth floor).
    pub fn stream(&mut self, total: usize, reps: usize) -> std::io::Result<Sample> {
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = Instant::now();
            self.round_trip(total)?;
            times.push(t.elapsed());
        }
        Ok(Sample::new("tcp stream", "", total, times))
    }
}

impl Drop for Tcp {
    fn drop(&mut self) {
        let _ = self.s.shutdown(std::net::Shutdown::Both);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
