//! Image directories are written and read with the client's rights: a
//! root daemon makes `checkpoint -o DIR` and reads `restore DIR` on a
//! thread with the client's filesystem ids and groups and no
//! capabilities, so that a user can neither make it write where the user
//! may not (a root-only directory, through a symbolic link) nor restore,
//! or learn anything from, an image the user may not read (through a
//! `/proc` magic link either). Needs root (to be other users); skipped
//! otherwise.

mod common;

use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};

const OWNER: u32 = 65534;

fn as_root() -> Command {
    Command::new(env!("CARGO_BIN_EXE_halfproc"))
}

/// A temporary directory everyone may write to (the clients' pid files),
/// with `rootonly` in it: root's, mode 0700.
fn dirs() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), PermissionsExt::from_mode(0o777)).unwrap();
    let rootonly = tmp.path().join("rootonly");
    std::fs::create_dir(&rootonly).unwrap();
    std::fs::set_permissions(&rootonly, PermissionsExt::from_mode(0o700)).unwrap();
    (tmp, rootonly)
}

/// `argv` run through `d` by `cmd`'s user, held running (`wait`): the
/// client and the program's pid.
fn run_as(cmd: Command, d: &Daemon, tmp: &Path, argv: &[&str]) -> (Child, i32) {
    let pid_file = tmp.join(format!("pid-{}", std::process::id()));
    let held = run_via_control(cmd, &d.control, &pid_file, argv, Stdio::piped());
    let _ = std::fs::remove_file(&pid_file);
    held
}

/// (exit code, stderr) of `checkpoint PID -o dir` through `d` as `cmd`'s user.
fn checkpoint(mut cmd: Command, d: &Daemon, pid: i32, dir: &Path) -> (i32, String) {
    let o = cmd
        .args([
            "checkpoint",
            "--node",
            &format!("unix:{}", d.control.display()),
        ])
        .arg(pid.to_string())
        .arg("-o")
        .arg(dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    (o.status.code().unwrap_or(-1), err)
}

/// (exit code, stderr, whether it started a program) of `restore dir`
/// through `d` as `cmd`'s user, stdin empty.
fn restore(mut cmd: Command, d: &Daemon, tmp: &Path, dir: &Path) -> (i32, String, bool) {
    let pid_file = tmp.join("restored-pid");
    let _ = std::fs::remove_file(&pid_file);
    let o = cmd
        .args([
            "restore",
            "--node",
            &format!("unix:{}", d.control.display()),
        ])
        .arg("--pid-file")
        .arg(&pid_file)
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let started = pid_file.exists();
    (o.status.code().unwrap_or(-1), err, started)
}

/// Neither stopped nor traced.
fn untouched(pid: i32) {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let tracer = st.lines().find(|l| l.starts_with("TracerPid:")).unwrap();
    let state = proc_state(pid).unwrap();
    assert!(state != 'T' && state != 't', "state {state}");
    assert_eq!(tracer, "TracerPid:\t0");
}

/// A user's `checkpoint -o` into a root-only directory (directly, through
/// a symbolic link, or the directory itself) is refused with 77 naming the
/// reason, nothing is created there and the program is neither stopped nor
/// traced; into the user's own directory it works and the image is the
/// user's (mode 0600). Root's checkpoint still writes where root may.
#[test]
fn a_user_writes_an_image_only_where_it_may() {
    if !is_root() {
        eprintln!("SKIP: needs root to act as other users");
        return;
    }
    let (tmp, rootonly) = dirs();
    let d = Daemon::start();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&rootonly, &link).unwrap();
    let argv = [targets(), "plain", "3000", "wait"];
    let (want, want_code) = reference(&argv[..3], None);
    let (mut run, pid) = run_as(as_user(OWNER), &d, tmp.path(), &argv);

    for dir in [rootonly.join("img"), link.join("img"), rootonly.clone()] {
        let (code, err) = checkpoint(as_user(OWNER), &d, pid, &dir);
        assert_eq!(code, 77, "checkpoint -o {}: {err}", dir.display());
        assert!(
            err.contains("permission denied")
                && err.contains(&format!("with the rights of uid {OWNER}"))
                && err.contains("nothing was stopped"),
            "{err}"
        );
        let left: Vec<_> = std::fs::read_dir(&rootonly).unwrap().collect();
        assert!(
            left.is_empty(),
            "written into the root-only directory: {left:?}"
        );
        untouched(pid);
    }

    let mine = tmp.path().join("mine/img");
    let (code, err) = checkpoint(as_user(OWNER), &d, pid, &mine);
    assert_eq!(code, 0, "owner's checkpoint into its own directory: {err}");
    for p in [mine.parent().unwrap(), &mine] {
        assert_eq!(
            std::fs::metadata(p).unwrap().uid(),
            OWNER,
            "{}",
            p.display()
        );
    }
    for f in ["pages.img", "manifest.json"] {
        let md = std::fs::metadata(mine.join(f)).unwrap();
        assert_eq!((md.uid(), md.gid()), (OWNER, OWNER), "{f}");
        assert_eq!(md.mode() & 0o777, 0o600, "{f}");
    }
    untouched(pid);

    let (code, err) = checkpoint(as_root(), &d, pid, &rootonly.join("img"));
    assert_eq!(code, 0, "root's checkpoint: {err}");
    let md = std::fs::metadata(rootonly.join("img/pages.img")).unwrap();
    assert_eq!(md.uid(), 0);

    drop(run.stdin.take());
    let out = run.wait_with_output().unwrap();
    assert_same("the program", &out.stdout, &want);
    assert_eq!(out.status.code(), Some(want_code));
}

/// Root's image in a root-only directory: a user's `restore` of it is
/// refused with 77 and starts nothing, also through `/proc/PID/cwd` of a
/// root process working in that directory (a root daemon's capabilities
/// used to resolve that link for the user). The user restores its own.
#[test]
fn a_user_restores_only_an_image_it_may_read() {
    if !is_root() {
        eprintln!("SKIP: needs root to act as other users");
        return;
    }
    let (tmp, rootonly) = dirs();
    let d = Daemon::start();
    let argv = [targets(), "plain", "3000", "wait"];
    let (_, want_code) = reference(&argv[..3], None);
    let img = rootonly.join("img");
    let (mut run, pid) = run_as(as_root(), &d, tmp.path(), &argv);
    let (code, err) = checkpoint(as_root(), &d, pid, &img);
    assert_eq!(code, 0, "root's checkpoint: {err}");
    drop(run.stdin.take());
    run.wait_with_output().unwrap();
    // A root process working in the image directory.
    let mut sleeper = Command::new("sleep")
        .arg("300")
        .current_dir(&img)
        .spawn()
        .unwrap();
    let via_proc = Path::new("/proc")
        .join(sleeper.id().to_string())
        .join("cwd");

    for dir in [&img, &via_proc] {
        let (code, err, started) = restore(as_user(OWNER), &d, tmp.path(), dir);
        assert!(!started, "uid {OWNER} restored {}: {err}", dir.display());
        assert_eq!(code, 77, "restore {}: {err}", dir.display());
        assert!(
            err.contains("permission denied") && err.contains("nothing was restored"),
            "{err}"
        );
    }
    let _ = sleeper.kill();
    let _ = sleeper.wait();

    // Its own image, written by the daemon with its rights, it may.
    let (mut run, pid) = run_as(as_user(OWNER), &d, tmp.path(), &argv);
    let mine = tmp.path().join("mine");
    let (code, err) = checkpoint(as_user(OWNER), &d, pid, &mine);
    assert_eq!(code, 0, "owner's checkpoint: {err}");
    drop(run.stdin.take());
    run.wait_with_output().unwrap();
    let (code, err, started) = restore(as_user(OWNER), &d, tmp.path(), &mine);
    assert!(started, "owner's restore of its own image: {err}");
    assert_eq!(code, want_code, "owner's restore: {err}");
}
