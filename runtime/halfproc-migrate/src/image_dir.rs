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
//! back to `openat`, magic links followed. Image files are created under a
//! temporary name (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600: an image
//! holds a program's memory), written there, and renamed into place only
//! once the whole checkpoint is written ([`ImageOut::commit`],
//! `manifest.json` last): a file already there (a hard link to another
//! file, a FIFO) is replaced, never written through or truncated, and a
//! checkpoint that is refused or fails leaves the directory as it was (an
//! earlier image in it intact), its temporary files removed. A symbolic
//! link in place of an image file is refused. Image files are opened for reading `O_NONBLOCK` (a FIFO does
//! not block the opener) and must be regular files (not a FIFO, a device
//! such as `/dev/zero` that never ends, a directory).

use crate::files_img::FILES;
use crate::image::{MANIFEST, PAGES};
use crate::Creds;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The files a checkpoint writes, each new and empty under a temporary
/// name in the image directory (see [`create`]): `pages.img` and
/// `manifest.json` (written last), and `files.img` (opened for reading
/// too: its CRC-32 is read back) when the mapped files are carried.
/// [`ImageOut::commit`] renames them into place once written; dropped
/// without that (a refused or failed checkpoint), it removes them, and the
/// directory holds what it held before.
#[derive(Debug)]
pub struct ImageOut {
    pub pages: File,
    pub manifest: File,
    pub files: Option<File>,
    dir: OwnedFd,
    path: std::path::PathBuf,
    /// Temporary names and the names they take, in the order they are
    /// renamed: `pages.img`, `files.img`, `manifest.json`.
    tmp: Vec<(String, &'static str)>,
    /// Whose rights the renames and removals are made with (those the
    /// files were created with): `None`, the calling thread's.
    creds: Option<Creds>,
}

impl ImageOut {
    /// Makes the renames and removals of [`ImageOut::commit`] and of a
    /// drop with `creds`'s file access rights ([`Creds::with_fs`]), as
    /// [`create`] was run with (a node daemon's client's): what the
    /// client may not replace in the directory (another user's file in a
    /// sticky directory) is not replaced with the daemon's rights.
    pub fn with_creds(mut self, creds: Option<Creds>) -> ImageOut {
        self.creds = creds;
        self
    }

    /// Puts the written image in place: removes the directory's
    /// `manifest.json` first (so that it never names files of another
    /// checkpoint, even if this is interrupted), and its `files.img`
    /// when this image has none, then renames `pages.img`, `files.img`
    /// and last `manifest.json` into place. On error the temporary files
    /// left are removed. Errors name the path.
    pub fn commit(mut self) -> io::Result<()> {
        let r = match &self.creds {
            Some(c) => c.with_fs(|| self.put_in_place()).and_then(|r| r),
            None => self.put_in_place(),
        };
        if r.is_ok() {
            self.tmp.clear();
        }
        r
    }

    fn put_in_place(&self) -> io::Result<()> {
        let d = self.dir.as_raw_fd();
        // A tree image's description left in the directory would name
        // other processes' images and be restored instead of this one.
        let mut gone = vec![crate::tree::TREE, MANIFEST];
        if self.files.is_none() {
            gone.push(FILES);
        }
        for name in gone {
            let c = cstr(Path::new(name))?;
            // SAFETY: unlinkat relative to a directory fd we hold.
            if unsafe { libc::unlinkat(d, c.as_ptr(), 0) } != 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::NotFound {
                    return Err(ctx("remove", &self.path.join(name), e));
                }
            }
        }
        for (tmp, name) in &self.tmp {
            let (from, to) = (cstr(Path::new(tmp))?, cstr(Path::new(name))?);
            // SAFETY: renameat within a directory fd we hold, NUL-terminated
            // names.
            if unsafe { libc::renameat(d, from.as_ptr(), d, to.as_ptr()) } != 0 {
                let e = io::Error::last_os_error();
                return Err(ctx("rename into place", &self.path.join(name), e));
            }
        }
        Ok(())
    }

    /// Removes the temporary files not renamed (best effort).
    fn remove_temps(&self) {
        for (tmp, _) in &self.tmp {
            if let Ok(c) = cstr(Path::new(tmp)) {
                // SAFETY: unlinkat relative to a directory fd we hold; a
                // name already renamed is not there (ENOENT, ignored).
                unsafe { libc::unlinkat(self.dir.as_raw_fd(), c.as_ptr(), 0) };
            }
        }
    }
}

impl Drop for ImageOut {
    fn drop(&mut self) {
        if self.tmp.is_empty() {
            return;
        }
        match &self.creds {
            Some(c) => drop(c.with_fs(|| self.remove_temps())),
            None => self.remove_temps(),
        }
    }
}

/// The top of a tree image directory (see [`crate::tree`]), made by
/// [`create_tree_top`]: its description (`tree.json`) is written last, by
/// [`TreeTop::commit`], once every process's image is in place.
pub struct TreeTop {
    dir: OwnedFd,
    path: std::path::PathBuf,
    name: &'static str,
    /// Whose rights the commit is made with (as [`ImageOut::with_creds`]).
    creds: Option<Creds>,
}

impl TreeTop {
    /// The commit with these file access rights.
    pub fn with_creds(mut self, creds: Option<Creds>) -> TreeTop {
        self.creds = creds;
        self
    }

    /// Removes an earlier description, and an earlier one-process image
    /// in the directory itself: the directory is no image while the
    /// processes' images are put in place (call it right before the first
    /// of them is; a failure after it leaves no image, not an old one).
    pub fn clear(&self) -> io::Result<()> {
        let gone = || {
            for name in [self.name, MANIFEST, FILES, PAGES] {
                let c = cstr(Path::new(name))?;
                // SAFETY: unlinkat relative to a directory fd we hold.
                if unsafe { libc::unlinkat(self.dir.as_raw_fd(), c.as_ptr(), 0) } != 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::NotFound {
                        return Err(ctx("remove", &self.path.join(name), e));
                    }
                }
            }
            Ok(())
        };
        match &self.creds {
            Some(c) => c.with_fs(gone).and_then(|r| r),
            None => gone(),
        }
    }

    /// Writes `text` under a temporary name and renames it into place.
    /// Errors name the path.
    pub fn commit(&self, text: &[u8]) -> io::Result<()> {
        let put = || {
            let (mut f, tmp) = create_file(self.dir.as_fd(), self.name, libc::O_WRONLY)
                .map_err(|e| ctx("create", &self.path.join(self.name), e))?;
            let (from, to) = (cstr(Path::new(&tmp))?, cstr(Path::new(self.name))?);
            let d = self.dir.as_raw_fd();
            let r = io::Write::write_all(&mut f, text)
                .map_err(|e| ctx("write", &self.path.join(&tmp), e))
                .and_then(|()| {
                    // SAFETY: renameat within a directory fd we hold,
                    // NUL-terminated names.
                    match unsafe { libc::renameat(d, from.as_ptr(), d, to.as_ptr()) } {
                        0 => Ok(()),
                        _ => Err(ctx(
                            "rename into place",
                            &self.path.join(self.name),
                            io::Error::last_os_error(),
                        )),
                    }
                });
            if r.is_err() {
                // SAFETY: unlinkat relative to a directory fd we hold.
                unsafe { libc::unlinkat(d, from.as_ptr(), 0) };
            }
            r
        };
        match &self.creds {
            Some(c) => c.with_fs(put).and_then(|r| r),
            None => put(),
        }
    }
}

/// Makes `dir` (as [`create`] does) for a tree image whose description is
/// the file `name`; an earlier one stays until [`TreeTop::clear`]. Errors
/// name the path.
pub fn create_tree_top(dir: &Path, name: &'static str) -> io::Result<TreeTop> {
    let d = dir_fd(dir, true).map_err(|e| ctx("mkdir", dir, e))?;
    Ok(TreeTop {
        dir: d,
        path: dir.to_path_buf(),
        name,
        creds: None,
    })
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

/// The most `manifest.json` may hold: a larger one is refused unread
/// (a manifest describes at most `vm.max_map_count`, by default 65530,
/// mappings, a few hundred bytes each).
pub const MANIFEST_MAX: u64 = 64 << 20;

impl ImageIn {
    /// All of `manifest.json`, refused (`InvalidData`) if it holds more
    /// than [`MANIFEST_MAX`] bytes.
    pub fn read_manifest(&self) -> io::Result<Vec<u8>> {
        use std::io::Read;
        let mut text = Vec::new();
        (&self.manifest)
            .take(MANIFEST_MAX + 1)
            .read_to_end(&mut text)?;
        if text.len() as u64 > MANIFEST_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} holds more than {} MiB: not a manifest",
                    self.path.join(MANIFEST).display(),
                    MANIFEST_MAX >> 20
                ),
            ));
        }
        Ok(text)
    }

    /// `files.img` of the image, if there is one (opened as the image's
    /// other files were, by the thread that calls this).
    pub fn files(&self) -> io::Result<Option<File>> {
        match open_regular(Some(self.dir.as_fd()), Path::new(FILES)) {
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

/// Opens `name` (relative to `dir`, else to the working directory; see
/// [`open_at`]) for reading: `O_NONBLOCK` (opening a FIFO does not wait
/// for a writer), then it must be a regular file (`fstat`; else
/// `InvalidInput`, naming its type), then blocking again.
pub fn open_regular(dir: Option<BorrowedFd>, name: &Path) -> io::Result<File> {
    let f = open_at(dir, name, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
    regular(&f)?;
    // SAFETY: fcntl on an fd we own, integer arguments.
    let fl = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) };
    // SAFETY: as above.
    if fl < 0 || unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(f)
}

/// `Ok` if `f` is a regular file, else `InvalidInput` naming what it is.
pub fn regular(f: &File) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let t = f.metadata()?.file_type();
    if t.is_file() {
        return Ok(());
    }
    let what = if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{what}, not a regular file"),
    ))
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
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{} does not exist, and a path that ends in `..` (or `/`) cannot be created",
                path.display()
            ),
        ));
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

/// Creates image directory `dir` (and its missing parents) and, under
/// temporary names, its files for a checkpoint, to be put in place by
/// [`ImageOut::commit`] (which, without `with_files`, also removes the
/// `files.img` an earlier checkpoint left there: restored with the new
/// image, it would overwrite its file pages with old contents). Other
/// files in `dir` are left alone, and so, until the commit, is an earlier
/// image. A symbolic link in place of an image file is refused (`ELOOP`).
/// Errors name the path.
pub fn create(dir: &Path, with_files: bool) -> io::Result<ImageOut> {
    let d = dir_fd(dir, true).map_err(|e| ctx("mkdir", dir, e))?;
    let mut tmp = Vec::new();
    let mut make = |name: &'static str, flags: i32| {
        let (f, t) =
            create_file(d.as_fd(), name, flags).map_err(|e| ctx("create", &dir.join(name), e))?;
        tmp.push((t, name));
        Ok::<_, io::Error>(f)
    };
    let made = (|| {
        let pages = make(PAGES, libc::O_WRONLY)?;
        let files = match with_files {
            true => Some(make(FILES, libc::O_RDWR)?),
            false => None,
        };
        Ok::<_, io::Error>((pages, files, make(MANIFEST, libc::O_WRONLY)?))
    })();
    match made {
        Ok((pages, files, manifest)) => Ok(ImageOut {
            pages,
            manifest,
            files,
            dir: d,
            path: dir.to_path_buf(),
            tmp,
            creds: None,
        }),
        Err(e) => {
            for (t, _) in &tmp {
                if let Ok(c) = cstr(Path::new(t)) {
                    // SAFETY: unlinkat relative to a directory fd we hold.
                    unsafe { libc::unlinkat(d.as_raw_fd(), c.as_ptr(), 0) };
                }
            }
            Err(e)
        }
    }
}

/// A new, empty file in `d` under a temporary name (`O_CREAT | O_EXCL |
/// O_NOFOLLOW`, mode 0600), opened with `flags`, for image file `name`,
/// and that temporary name. A symbolic link in place of `name` is
/// refused (`ELOOP`).
fn create_file(d: BorrowedFd, name: &str, flags: i32) -> io::Result<(File, String)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    match open_at(Some(d), Path::new(name), libc::O_PATH | libc::O_NOFOLLOW, 0) {
        Ok(f) if f.metadata()?.file_type().is_symlink() => {
            return Err(io::Error::from_raw_os_error(libc::ELOOP))
        }
        _ => {}
    }
    for _ in 0..100 {
        let tmp = format!(
            ".{name}.{}.{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let f = libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | flags;
        match open_at(Some(d), Path::new(&tmp), f, 0o600) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            r => return r.map(|file| (file, tmp)),
        }
    }
    Err(io::Error::from_raw_os_error(libc::EEXIST))
}

/// Opens the image in `dir` for a restore. Errors name the path.
pub fn open(dir: &Path) -> io::Result<ImageIn> {
    let d = dir_fd(dir, false).map_err(|e| ctx("open", dir, e))?;
    let read = |name: &str| {
        open_regular(Some(d.as_fd()), Path::new(name)).map_err(|e| ctx("open", &dir.join(name), e))
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
        out.commit().unwrap();
        for f in [PAGES, MANIFEST, FILES] {
            let mode = std::fs::metadata(dir.join(f)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
        let out = create(&dir, false).unwrap();
        assert!(out.files.is_none());
        out.commit().unwrap();
        assert!(!dir.join(FILES).exists());
        std::fs::write(dir.join(MANIFEST), "{}").unwrap();
        let img = open(&dir).unwrap();
        assert!(img.files().unwrap().is_none());
    }

    /// `f` on a thread of its own: `None` if it has not returned in 5 s
    /// (blocked opening a FIFO).
    fn soon<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(f()));
        rx.recv_timeout(std::time::Duration::from_secs(5)).ok()
    }

    fn mkfifo(p: &Path) {
        let c = cstr(p).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    /// A FIFO or a device in place of an image file is refused at once by
    /// a restore (it used to block the opener, or be read forever).
    #[test]
    fn a_restore_refuses_fifos_and_devices() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("img");
        create(&dir, true).unwrap().commit().unwrap();
        std::fs::write(dir.join(MANIFEST), "{}").unwrap();
        std::fs::remove_file(dir.join(PAGES)).unwrap();
        mkfifo(&dir.join(PAGES));
        let d = dir.clone();
        let e = soon(move || open(&d))
            .expect("open blocked on a FIFO")
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("a FIFO, not a regular file"), "{e}");
        std::fs::remove_file(dir.join(PAGES)).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.join(PAGES)).unwrap();
        let e = open(&dir).unwrap_err();
        assert!(
            e.to_string().contains("a device, not a regular file"),
            "{e}"
        );
        std::fs::remove_file(dir.join(PAGES)).unwrap();
        std::fs::write(dir.join(PAGES), "").unwrap();
        std::fs::remove_file(dir.join(FILES)).unwrap();
        mkfifo(&dir.join(FILES));
        let img = open(&dir).unwrap();
        let e = soon(move || img.files())
            .expect("files() blocked")
            .unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
    }

    /// An oversized manifest.json is refused, not read whole.
    #[test]
    fn a_manifest_over_the_limit_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("img");
        create(&dir, false).unwrap().commit().unwrap();
        let f = std::fs::File::create(dir.join(MANIFEST)).unwrap();
        f.set_len(MANIFEST_MAX + 1).unwrap();
        // (Not `unwrap_err`: on failure it would print 64 MiB.)
        let Err(e) = open(&dir).unwrap().read_manifest() else {
            panic!("a manifest over {MANIFEST_MAX} bytes was read");
        };
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert!(e.to_string().contains("more than 64 MiB"), "{e}");
        f.set_len(3).unwrap();
        assert_eq!(open(&dir).unwrap().read_manifest().unwrap(), b"\0\0\0");
    }

    /// A checkpoint replaces what is in place of its files (a FIFO, a hard
    /// link to another file) instead of opening it: it neither blocks nor
    /// truncates the other file.
    #[test]
    fn a_checkpoint_replaces_fifos_and_hard_links() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("img");
        std::fs::create_dir(&dir).unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::fs::hard_link(&victim, dir.join(PAGES)).unwrap();
        std::fs::hard_link(&victim, dir.join(FILES)).unwrap();
        mkfifo(&dir.join(MANIFEST));
        let d = dir.clone();
        let out = soon(move || create(&d, true))
            .expect("create blocked on a FIFO")
            .unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        for f in [PAGES, MANIFEST, FILES] {
            let md = std::fs::symlink_metadata(dir.join(f)).unwrap();
            assert!(md.is_file() && md.len() == 0, "{f}: {md:?}");
            assert_eq!(md.permissions().mode() & 0o777, 0o600, "{f}");
        }
        // No temporary file is left.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 3);
    }

    /// Review of 2026-11-28: a checkpoint renamed its new, empty files
    /// into place as it created them, so one refused or failed afterwards
    /// left empty files over an earlier image. Until the commit the
    /// earlier image is untouched (a restore reads it); dropped
    /// uncommitted, the new files are gone; committed, they replace it,
    /// `files.img` too, and no temporary file is left either way.
    #[test]
    fn an_earlier_image_stays_until_the_commit() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("img");
        let names = || {
            let mut v: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        };
        let write = |out: &ImageOut, what: &str| {
            use std::io::Write;
            for f in [&out.pages, &out.manifest].into_iter().chain(&out.files) {
                (&*f).write_all(what.as_bytes()).unwrap();
            }
        };
        let out = create(&dir, true).unwrap();
        write(&out, "old");
        out.commit().unwrap();
        let old = vec![FILES.to_string(), MANIFEST.into(), PAGES.into()];
        assert_eq!(names(), old);
        for with_files in [true, false] {
            let out = create(&dir, with_files).unwrap();
            write(&out, "new");
            assert_eq!(names().len(), 5 + with_files as usize, "{:?}", names());
            assert_eq!(std::fs::read(dir.join(MANIFEST)).unwrap(), b"old");
            drop(out);
            assert_eq!(names(), old, "an uncommitted image left files");
            for f in [PAGES, MANIFEST, FILES] {
                assert_eq!(std::fs::read(dir.join(f)).unwrap(), b"old", "{f}");
            }
        }
        let out = create(&dir, false).unwrap();
        write(&out, "new");
        out.commit().unwrap();
        assert_eq!(
            names(),
            [MANIFEST, PAGES],
            "files.img of the old image stays"
        );
        for f in [PAGES, MANIFEST] {
            assert_eq!(std::fs::read(dir.join(f)).unwrap(), b"new", "{f}");
        }
    }

    /// A directory path that does not exist and ends in `..` gets an error
    /// that says so, not a bare ENOENT.
    #[test]
    fn a_missing_path_ending_in_dotdot_is_named() {
        let t = tempfile::tempdir().unwrap();
        let e = create(&t.path().join("missing/.."), false).unwrap_err();
        assert!(e.to_string().contains("ends in `..`"), "{e}");
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
