//! Shared helpers of the integration tests: building the C test program,
//! spawning targets with stdio on files, waiting, comparing.
#![allow(dead_code)] // each test binary uses a subset

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

mod input;
#[allow(unused_imports)] // each test binary uses a subset
pub use input::input_file;

/// Compiles `tests/NAME.c` with cc into a per-process temporary directory.
fn build_c(name: &str, flags: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("halfproc-migrate-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/{name}.c"));
    let st = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(st.success(), "cc failed for {}", src.display());
    out
}

/// Builds tests/prog.c once per test binary.
pub fn prog() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| build_c("prog", &["-O1"]))
}

/// Builds tests/sigq.c (pending signals) once per test binary.
pub fn sigq() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| build_c("sigq", &["-O1"]))
}

/// Builds tests/targets.c once per test binary.
pub fn targets() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| build_c("targets", &["-O1", "-pthread"]))
}

/// Spawns `cmd args` with stdin from `stdin` (or /dev/null) and stdout to `out`.
pub fn spawn(cmd: &Path, args: &[&str], stdin: Option<&Path>, out: &Path) -> i32 {
    spawn_to(cmd, args, stdin, out, false)
}

/// [`spawn`], with stderr on `out` too when `with_stderr` (one open file
/// description for both), else on /dev/null.
pub fn spawn_to(
    cmd: &Path,
    args: &[&str],
    stdin: Option<&Path>,
    out: &Path,
    with_stderr: bool,
) -> i32 {
    let input = match stdin {
        Some(p) => Stdio::from(File::open(p).unwrap()),
        None => Stdio::null(),
    };
    let mut c = Command::new(cmd);
    // SAFETY: close_range and prctl are async-signal-safe; close_range
    // drops fds inherited from the test harness (cargo's jobserver pipe)
    // that would be refused; the death signal kills the target when the
    // test's thread ends, so a failed test leaves no target spinning.
    unsafe {
        c.pre_exec(|| {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        })
    };
    let out = File::create(out).unwrap();
    let err = match with_stderr {
        true => Stdio::from(out.try_clone().unwrap()),
        false => Stdio::null(),
    };
    let child = c
        .args(args)
        .stdin(input)
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("spawn target");
    let pid = child.id() as i32;
    std::mem::forget(child); // reaped with waitpid below or by checkpoint(Kill)
    pid
}

/// waitpid; returns the raw wait status.
pub fn wait(pid: i32) -> i32 {
    let mut st = 0;
    // SAFETY: waiting for our own child.
    let r = unsafe { libc::waitpid(pid, &mut st, 0) };
    assert_eq!(r, pid, "waitpid({pid})");
    st
}

/// Describes a wait status for assertions.
pub fn describe(st: i32) -> String {
    if libc::WIFEXITED(st) {
        format!("exit {}", libc::WEXITSTATUS(st))
    } else if libc::WIFSIGNALED(st) {
        format!("signal {}", libc::WTERMSIG(st))
    } else {
        format!("status {st:#x}")
    }
}

/// Runs the command to completion unmigrated; returns (stdout bytes, status).
pub fn reference(cmd: &Path, args: &[&str], stdin: Option<&Path>, dir: &Path) -> (Vec<u8>, String) {
    let out = dir.join("reference.out");
    let pid = spawn(cmd, args, stdin, &out);
    let st = describe(wait(pid));
    (std::fs::read(&out).unwrap(), st)
}

pub fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// Asserts equal output, naming the first differing line.
pub fn assert_same_output(got: &[u8], want: &[u8]) {
    if got == want {
        return;
    }
    let g = String::from_utf8_lossy(got);
    let w = String::from_utf8_lossy(want);
    let (gl, wl): (Vec<&str>, Vec<&str>) = (g.lines().collect(), w.lines().collect());
    let i = gl
        .iter()
        .zip(&wl)
        .position(|(a, b)| a != b)
        .unwrap_or(gl.len().min(wl.len()));
    panic!(
        "output differs at line {i} (got {} bytes / {} lines, want {} bytes / {} lines):\n got: {:?}\nwant: {:?}",
        got.len(),
        gl.len(),
        want.len(),
        wl.len(),
        gl.get(i),
        wl.get(i)
    );
}

/// (state letter, TracerPid) of a process.
pub fn state_and_tracer(pid: i32) -> (char, i32) {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let get = |k: &str| {
        st.lines()
            .find(|l| l.starts_with(k))
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_string()
    };
    (
        get("State:").chars().next().unwrap(),
        get("TracerPid:").parse().unwrap(),
    )
}

/// Waits (up to 5 s) for a line starting with `prefix` in the file `out`.
pub fn wait_line(out: &Path, prefix: &str) -> String {
    for _ in 0..500 {
        if let Ok(t) = std::fs::read_to_string(out) {
            if let Some(l) = t.lines().find(|l| l.starts_with(prefix)) {
                return l.to_string();
            }
        }
        sleep_ms(10);
    }
    panic!("no line {prefix:?} in {}", out.display());
}

/// SIGKILL and reap.
pub fn kill(pid: i32) {
    // SAFETY: signalling and reaping our own child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    wait(pid);
}

/// Whether this test process may read every process's maps (root, or
/// `CAP_SYS_PTRACE`), as a lone shared anonymous object's check needs
/// (otherwise another user's process makes it "may be shared"). When not,
/// says the test `name` is skipped.
pub fn can_read_all_maps(name: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ptrace = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let v = s.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
            u64::from_str_radix(v.trim(), 16).ok()
        })
        .is_some_and(|c| c & (1 << 19) != 0);
    if !(root || ptrace) {
        eprintln!("SKIP {name}: needs euid 0 or CAP_SYS_PTRACE to read every process's maps");
    }
    root || ptrace
}
