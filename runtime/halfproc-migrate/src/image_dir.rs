//! Opening an image directory's files, to write a checkpoint or to read
//! one, in the caller's name: a node daemon calls these on a thread that
//! has its client's file access rights ([`crate::Creds::with_fs`]), and
//! then works through the returned files only, so that no path a client
//! names is resolved with the daemon's rights.
//!
//! Every path is resolved with `openat2(RESOLVE_NO_MAGICLINKS)`: a `/proc`
//! magic link (`/proc/self/fd/N`, `/proc/PID/cwd`, `/proc/PID/root`) is
//! refused (`ELOOP`) rather than followed, since `/proc/self` is the
//! daemon, whose open files the kernel lets any of its threads reach past
//! the directories' permissions. Plain symbolic links are followed (with
//! the caller's rights). A kernel without `openat2` (before 5.6) falls
//! back to `openat`, magic links followed. Image files are created with
//! `O_NOFOLLOW` (a symbolic link in their place is refused, not written
//! through) and mode 0600 (an image holds a program's memory).

use crate::files_img::FILES;
use crate::image::{MANIFEST, PAGES};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The files a checkpoint writes: `pages.img` and `manifest.json`
/// (created, the pages truncated; the manifest is truncated when it is
/// written, last), and `files.img` (opened for reading too: its CRC-32 is
/// read back) when the mapped files are carried.
#[derive(Debug)]
pub struct ImageOut {
    pub pages: File,
    pub manifest: File,
    pub files: Option<File>,
}

/// The files a restore reads: `manifest.json`, `pages.img`, and the
/// directory, where [`ImageIn::files`] opens `files.img` when needed.
#[derive(Debug)]
pub struct ImageIn {
    pub manifest: File,
    pub pages: File,
    dir: OwnedFd,
    path: std::path::PathBuf,
}

impl ImageIn {
    /// `files.img` of the image, if there is one (opened as the image's
    /// other files were, by the thread that calls this).
    pub fn files(&self) -> io::Result<Option<File>> {
        match open_at(Some(self.dir.as_fd()), Path::new(FILES), libc::O_RDONLY, 0) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ctx("open", &self.path.join(FILES), e)),
        }
    }
}

fn cstr(p: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))
}

/// `e` naming `what` and `p`. `ELOOP` (a `/proc` magic link, which is not
/// followed, a symbolic link in place of an image file, or a loop) becomes
/// `PermissionDenied`: refused, not a failure to retry.
fn ctx(what: &str, p: &Path, e: io::Error) -> io::Error {
    let (kind, why) = match e.raw_os_error() {
        Some(libc::ELOOP) => (
            io::ErrorKind::PermissionDenied,
            format!(
                "{e}: a /proc magic link (not followed), a symbolic link in place of an \
                 image file (not written through), or a symbolic link loop"
            ),
        ),
        _ => (e.kind(), e.to_string()),
    };
    io::Error::new(kind, format!("{what} {}: {why}", p.display()))
}

/// Opens `path` (relative to `dir`, else to the working directory) with
/// `flags` (`O_CLOEXEC` added) and `mode`, following no `/proc` magic
/// link (see the module's text).
pub fn open_at(dir: Option<BorrowedFd>, path: &Path, flags: i32, mode: u32) -> io::Result<File> {
    let c = cstr(path)?;
    let at = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    let flags = flags | libc::O_CLOEXEC;
    // SAFETY: all-zero is a valid `open_how` (no flags, mode or resolve).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.mode = if flags & libc::O_CREAT != 0 {
        mode as u64
    } else {
        0
    };
    how.resolve = libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: openat2 with a NUL-terminated path and an `open_how` of the
    // size passed; the fd it returns is ours.
    let mut fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            at,
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    } as i32;
    if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
        // SAFETY: openat with a NUL-terminated path; the fd is ours.
        fd = unsafe { libc::openat(at, c.as_ptr(), flags, mode as libc::c_uint) };
    }
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned to us and is owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// A directory to work in (`O_PATH`): `path`, made with its missing
/// parents (`mkdir -p`, mode 0777 less the umask, as before) when `create`.
fn dir_fd(path: &Path, create: bool) -> io::Result<OwnedFd> {
    let flags = libc::O_PATH | libc::O_DIRECTORY;
    match open_at(None, path, flags, 0) {
        Err(e) if create && e.kind() == io::ErrorKind::NotFound => {}
        r => return r.map(OwnedFd::from),
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    };
    let parent = match parent.as_os_str().is_empty() {
        true => Path::new("."),
        false => parent,
    };
    let p = dir_fd(parent, true)?;
    let c = cstr(Path::new(name))?;
    // SAFETY: mkdirat relative to a directory fd we hold, NUL-terminated name.
    if unsafe { libc::mkdirat(p.as_raw_fd(), c.as_ptr(), 0o777) } != 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::AlreadyExists {
            return Err(e);
        }
    }
    open_at(Some(p.as_fd()), Path::new(name), flags, 0).map(OwnedFd::from)
}

/// Creates image directory `dir` (and its missing parents) and its files
/// for a checkpoint; without `with_files`, removes the `files.img` an
/// earlier checkpoint left there (restored with the new image, it would
/// overwrite its file pages with old contents). Other files in `dir` are
/// left alone; the image's own are overwritten. Errors name the path.
pub fn create(dir: &Path, with_files: bool) -> io::Result<ImageOut> {
    let d = dir_fd(dir, true).map_err(|e| ctx("mkdir", dir, e))?;
    let d = d.as_fd();
    let make = |name: &str, flags: i32| {
        let f = libc::O_CREAT | libc::O_NOFOLLOW | flags;
        open_at(Some(d), Path::new(name), f, 0o600).map_err(|e| ctx("create", &dir.join(name), e))
    };
    let pages = make(PAGES, libc::O_WRONLY | libc::O_TRUNC)?;
    let manifest = make(MANIFEST, libc::O_WRONLY)?;
    let files = match with_files {
        true => Some(make(FILES, libc::O_RDWR | libc::O_TRUNC)?),
        false => {
            let c = cstr(Path::new(FILES))?;
            // SAFETY: unlinkat relative to a directory fd we hold.
            if unsafe { libc::unlinkat(d.as_raw_fd(), c.as_ptr(), 0) } != 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::NotFound {
                    return Err(ctx("remove", &dir.join(FILES), e));
                }
            }
            None
        }
    };
    Ok(ImageOut {
        pages,
        manifest,
        files,
    })
}

/// Opens the image in `dir` for a restore. Errors name the path.
pub fn open(dir: &Path) -> io::Result<ImageIn> {
    let d = dir_fd(dir, false).map_err(|e| ctx("open", dir, e))?;
    let read = |name: &str| {
        open_at(Some(d.as_fd()), Path::new(name), libc::O_RDONLY, 0)
            .map_err(|e| ctx("open", &dir.join(name), e))
    };
    let manifest = read(MANIFEST)?;
    let pages = read(PAGES)?;
    Ok(ImageIn {
        manifest,
        pages,
        dir: d,
        path: dir.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn creates_parents_and_files_0600_and_removes_a_stale_files_img() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("a/b/img");
        let out = create(&dir, true).unwrap();
        assert!(out.files.is_some());
        for f in [PAGES, MANIFEST, FILES] {
            let mode = std::fs::metadata(dir.join(f)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
        drop(out);
        assert!(create(&dir, false).unwrap().files.is_none());
        assert!(!dir.join(FILES).exists());
        std::fs::write(dir.join(MANIFEST), "{}").unwrap();
        let img = open(&dir).unwrap();
        assert!(img.files().unwrap().is_none());
    }

    /// A symbolic link in place of an image file is not written through;
    /// a /proc magic link is not followed.
    #[test]
    fn refuses_links_in_place_of_files_and_magic_links() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let dir = t.path().join("img");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join(PAGES)).unwrap();
        let e = create(&dir, false).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        assert!(e.to_string().contains("in place of an image file"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        let cwd = Path::new("/proc/self/cwd");
        let e = open_at(None, cwd, libc::O_PATH | libc::O_DIRECTORY, 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
    }
}
