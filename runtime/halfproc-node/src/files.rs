// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Mapped files that are not the same at the destination.
//!
//! The restore maps a file-backed mapping (program text, libraries) from
//! the same file when it is identical there (size, mtime, CRC-32) and
//! copies it otherwise: the destination names the mappings whose file
//! changed, was replaced or is missing (`NeedFiles`), the source reads
//! them from the frozen original - the contents it was running, whatever
//! the file holds now - and sends them (`FilePages`), and the destination
//! restores those mappings as private memory and writes the contents into
//! the stopped copy through `/proc/PID/mem` before it answers `Restored`.
//! A shared mapping of such a file cannot be copied and fails the move.

use crate::proto::{Conn, Msg, CHUNK};
use halfproc_migrate::image::Manifest;
use std::os::unix::fs::FileExt;

/// Destination: which of `m`'s file mappings must be copied, as
/// `[start, end)` ranges, and `m` changed to restore them as private
/// memory.
pub fn plan_copies(m: &mut Manifest) -> Result<Vec<(u64, u64)>, String> {
    let idx = halfproc_migrate::differing_files(m).map_err(|e| e.to_string())?;
    let ranges = idx
        .iter()
        .map(|&i| (m.vmas[i].start, m.vmas[i].end))
        .collect();
    halfproc_migrate::copy_instead(m, &idx);
    Ok(ranges)
}

/// Destination: asks the source for `ranges` and receives them.
pub async fn fetch(
    conn: &mut Conn,
    ranges: Vec<(u64, u64)>,
) -> Result<Vec<(u64, Vec<u8>)>, String> {
    let want: u64 = ranges.iter().map(|(s, e)| e - s).sum();
    conn.send(&Msg::NeedFiles {
        ranges: ranges.clone(),
    })
    .await
    .map_err(|e| format!("asking for mapped files: {e}"))?;
    let mut got = Vec::new();
    let mut total = 0u64;
    loop {
        match conn
            .recv()
            .await
            .map_err(|e| format!("receiving mapped files: {e}"))?
        {
            Msg::FilePages { addr, data } => {
                let end = addr + data.len() as u64;
                if !ranges.iter().any(|&(s, e)| s <= addr && end <= e) {
                    return Err(format!(
                        "file contents at {addr:#x}-{end:#x} were not asked for"
                    ));
                }
                total += data.len() as u64;
                got.push((addr, data));
            }
            Msg::FilePagesEnd if total == want => return Ok(got),
            Msg::FilePagesEnd => {
                return Err(format!(
                    "{total} bytes of mapped files received, {want} asked for"
                ))
            }
            Msg::Error(e) => return Err(format!("source: {e}")),
            other => return Err(format!("expected mapped files, got {other:?}")),
        }
    }
}

/// Destination: writes the fetched contents into the stopped copy `pid`.
pub fn fill(pid: i32, contents: &[(u64, Vec<u8>)]) -> Result<(), String> {
    if contents.is_empty() {
        return Ok(());
    }
    let mem = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .map_err(|e| format!("open /proc/{pid}/mem: {e}"))?;
    for (addr, data) in contents {
        mem.write_all_at(data, *addr)
            .map_err(|e| format!("write {} bytes at {addr:#x} of the copy: {e}", data.len()))?;
    }
    Ok(())
}

/// Writes the records of an image's `files.img` into the stopped copy
/// `pid`, streamed from the file (`halfproc restore DIR`).
pub fn fill_from_image(
    pid: i32,
    carried: &halfproc_migrate::files_img::Carried,
) -> Result<(), String> {
    if carried.is_empty() {
        return Ok(());
    }
    let mem = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .map_err(|e| format!("open /proc/{pid}/mem: {e}"))?;
    carried
        .write_into(&mem)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Source: sends `ranges` of the frozen original `pid`, each of which must
/// be one of its private file mappings (a destination reads nothing else).
pub async fn serve(conn: &mut Conn, pid: i32, ranges: &[(u64, u64)]) -> Result<u64, String> {
    let maps = halfproc_migrate::maps(pid).map_err(|e| e.to_string())?;
    let private_file = |s: u64, e: u64| {
        maps.iter()
            .any(|m| m.start == s && m.end == e && !m.shared && m.path.starts_with('/'))
    };
    if let Some(&(s, e)) = ranges.iter().find(|&&(s, e)| !private_file(s, e)) {
        let why = format!("{s:#x}-{e:#x} is not a private file mapping of pid {pid}");
        let _ = conn.send(&Msg::Error(why.clone())).await;
        return Err(why);
    }
    let owned = ranges.to_vec();
    let chunks = tokio::task::spawn_blocking(move || read_ranges(pid, &owned))
        .await
        .map_err(|e| format!("reading pid {pid}: {e}"))??;
    let mut sent = 0u64;
    for (addr, data) in chunks {
        sent += data.len() as u64;
        conn.send(&Msg::FilePages { addr, data })
            .await
            .map_err(|err| format!("sending mapped files: {err}"))?;
    }
    conn.send(&Msg::FilePagesEnd)
        .await
        .map_err(|e| format!("sending mapped files: {e}"))?;
    Ok(sent)
}

/// `ranges` of `pid`'s memory in chunks of at most `CHUNK` bytes.
fn read_ranges(pid: i32, ranges: &[(u64, u64)]) -> Result<Vec<(u64, Vec<u8>)>, String> {
    let reader = halfproc_migrate::reader(pid).map_err(|e| format!("read pid {pid}: {e}"))?;
    let mut out = Vec::new();
    for &(s, e) in ranges {
        let mut at = s;
        while at < e {
            let n = (e - at).min(CHUNK as u64) as usize;
            let mut data = vec![0u8; n];
            reader
                .read(at, &mut data)
                .map_err(|err| format!("read {n} bytes at {at:#x} of pid {pid}: {err}"))?;
            out.push((at, data));
            at += n as u64;
        }
    }
    Ok(out)
}
