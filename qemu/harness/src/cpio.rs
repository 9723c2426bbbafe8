// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! A writer for `newc` cpio archives, the initramfs format the kernel
//! unpacks (`Documentation/driver-api/early-userspace/buffer-format.rst`).

use std::io::{self, Write};

/// A cpio `newc` archive being written.
///
/// # Examples
///
/// ```
/// use halfproc_harness::cpio::Archive;
/// let mut a = Archive::new(Vec::new());
/// a.dir("bin", 0o755).unwrap();
/// a.file("bin/hello", 0o755, b"#!/bin/sh\necho hi\n").unwrap();
/// a.symlink("bin/sh", "busybox").unwrap();
/// let bytes = a.finish().unwrap();
/// assert!(bytes.starts_with(b"070701"));
/// assert_eq!(bytes.len() % 4, 0);
/// ```
pub struct Archive<W: Write> {
    out: W,
    ino: u32,
    written: u64,
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

impl<W: Write> Archive<W> {
    /// Start an archive on `out`.
    pub fn new(out: W) -> Self {
        Archive {
            out,
            ino: 1,
            written: 0,
        }
    }

    /// Add a directory.
    pub fn dir(&mut self, path: &str, perm: u32) -> io::Result<()> {
        self.entry(path, S_IFDIR | perm, 0, b"")
    }

    /// Add a regular file with `data`.
    pub fn file(&mut self, path: &str, perm: u32, data: &[u8]) -> io::Result<()> {
        self.entry(path, S_IFREG | perm, 0, data)
    }

    /// Add a symbolic link `path -> target`.
    pub fn symlink(&mut self, path: &str, target: &str) -> io::Result<()> {
        self.entry(path, S_IFLNK | 0o777, 0, target.as_bytes())
    }

    /// Add a character device node.
    pub fn chardev(&mut self, path: &str, perm: u32, major: u32, minor: u32) -> io::Result<()> {
        self.entry(path, S_IFCHR | perm, (major << 8) | minor, b"")
    }

    fn entry(&mut self, path: &str, mode: u32, rdev: u32, data: &[u8]) -> io::Result<()> {
        let path = path.trim_start_matches('/');
        if path.is_empty() || path.split('/').any(|c| c == "..") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad archive path {path:?}"),
            ));
        }
        let nlink = if mode & S_IFDIR != 0 { 2 } else { 1 };
        self.ino += 1;
        self.header(self.ino, mode, nlink, data.len(), rdev, path)?;
        self.put(data)?;
        self.pad()
    }

    fn header(
        &mut self,
        ino: u32,
        mode: u32,
        nlink: u32,
        size: usize,
        rdev: u32,
        name: &str,
    ) -> io::Result<()> {
        let size = u32::try_from(size)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file over 4 GiB"))?;
        let hdr = format!(
            "070701{ino:08X}{mode:08X}{uid:08X}{gid:08X}{nlink:08X}{mtime:08X}{size:08X}\
             {dmaj:08X}{dmin:08X}{rmaj:08X}{rmin:08X}{namesize:08X}{check:08X}",
            uid = 0,
            gid = 0,
            mtime = 0,
            dmaj = 0,
            dmin = 0,
            rmaj = rdev >> 8,
            rmin = rdev & 0xff,
            namesize = name.len() + 1,
            check = 0,
        );
        self.put(hdr.as_bytes())?;
        self.put(name.as_bytes())?;
        self.put(&[0])?;
        self.pad()
    }

    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.out.write_all(b)?;
        self.written += b.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> io::Result<()> {
        let n = (4 - (self.written % 4) as usize) % 4;
        self.put(&[0u8; 3][..n])
    }

    /// Write the trailer and return the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.header(0, 0, 1, 0, 0, "TRAILER!!!")?;
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parse a newc archive back into (name, mode, data) triples.
    fn parse(mut b: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut off = 0usize;
        loop {
            assert_eq!(&b[..6], b"070701", "magic at offset {off}");
            let field = |i: usize| {
                u32::from_str_radix(std::str::from_utf8(&b[6 + 8 * i..14 + 8 * i]).unwrap(), 16)
                    .unwrap() as usize
            };
            let (mode, size, namesize) = (field(1), field(6), field(11));
            let name = std::str::from_utf8(&b[110..110 + namesize - 1])
                .unwrap()
                .to_string();
            let data_at = (110 + namesize).div_ceil(4) * 4;
            let data = b[data_at..data_at + size].to_vec();
            let next = (data_at + size).div_ceil(4) * 4;
            if name == "TRAILER!!!" {
                return out;
            }
            out.push((name, mode as u32, data));
            b = &b[next..];
            off += next;
        }
    }

    #[test]
    fn roundtrip() {
        let mut a = Archive::new(Vec::new());
        a.dir("dev", 0o755).unwrap();
        a.chardev("dev/console", 0o600, 5, 1).unwrap();
        a.file("init", 0o755, b"#!/bin/sh\n").unwrap();
        a.file("odd", 0o644, b"x").unwrap();
        a.symlink("bin/sh", "busybox").unwrap();
        let bytes = a.finish().unwrap();
        let e = parse(&bytes);
        let names: Vec<_> = e.iter().map(|x| x.0.as_str()).collect();
        assert_eq!(names, ["dev", "dev/console", "init", "odd", "bin/sh"]);
        assert_eq!(e[2].2, b"#!/bin/sh\n");
        assert_eq!(e[3].2, b"x");
        assert_eq!(e[4].2, b"busybox");
        assert_eq!(e[1].1 & 0o170000, S_IFCHR);
        assert_eq!(e[0].1 & 0o170000, S_IFDIR);
    }

    #[test]
    fn rejects_escaping_paths() {
        let mut a = Archive::new(Vec::new());
        assert!(a.file("../etc/passwd", 0o644, b"").is_err());
        assert!(a.file("/", 0o644, b"").is_err());
    }
}
