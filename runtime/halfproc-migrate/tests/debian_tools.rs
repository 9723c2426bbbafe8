//! Debian's gzip, xz, bzip2 and sha256sum, checkpointed, killed and
//! restored 20 times in a row while they run, produce the same output and
//! exit status as an unmigrated run (small inputs: a fraction of a second
//! of work each).

mod common;

use common::*;
use halfproc_migrate::{checkpoint, restore, Leave};
use std::path::Path;
use std::time::{Duration, Instant};

/// Moves per run.
const MOVES: u32 = 20;

fn tool(name: &str) -> &'static Path {
    for dir in ["/usr/bin", "/bin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return Box::leak(p.into_boxed_path());
        }
    }
    panic!("{name} is not installed (apt-get install gzip xz-utils bzip2 coreutils)");
}

/// Runs the tool unmigrated: (stdout, status, its CPU time).
fn reference_cpu(
    cmd: &Path,
    args: &[&str],
    stdin: Option<&Path>,
    dir: &Path,
) -> (Vec<u8>, String, Duration) {
    let out = dir.join("reference.out");
    let pid = spawn(cmd, args, stdin, &out);
    let mut st = 0;
    // SAFETY: an all-zero rusage is a valid value to be overwritten.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child, into locals we own.
    let r = unsafe { libc::wait4(pid, &mut st, 0, &mut ru) };
    assert_eq!(r, pid, "wait4({pid})");
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (
        std::fs::read(&out).unwrap(),
        describe(st),
        tv(ru.ru_utime) + tv(ru.ru_stime),
    )
}

/// Waits for our child `pid`; if it is still there after `most`, kills it
/// and fails naming where it was (a restored process that never finishes).
fn wait_or_report(name: &str, pid: i32, most: Duration) -> i32 {
    let t = Instant::now();
    loop {
        let mut st = 0;
        // SAFETY: polling our own child.
        if unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) } == pid {
            return st;
        }
        if t.elapsed() > most {
            let read =
                |f: &str| std::fs::read_to_string(format!("/proc/{pid}/{f}")).unwrap_or_default();
            let status: String = read("status")
                .lines()
                .filter(|l| l.starts_with("State") || l.starts_with("SigBlk"))
                .collect::<Vec<_>>()
                .join(", ");
            // minflt, utime, stime (after the comm field: 7, 11, 12).
            let counts = || -> Vec<u64> {
                let stat = read("stat");
                let f: Vec<u64> = stat
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .split_whitespace()
                    .map(|w| w.parse().unwrap_or(0))
                    .collect();
                [7, 11, 12]
                    .iter()
                    .map(|&i| f.get(i).copied().unwrap_or(0))
                    .collect()
            };
            let before = counts();
            sleep_ms(100);
            let after = counts();
            let faults = after[0].saturating_sub(before[0]);
            let times = &after[1..];
            let (syscall, stack) = (read("syscall"), read("stack"));
            kill(pid);
            panic!(
                "{name}: pid {pid} did not end within {most:?} after its last restore: {status}; \
                 utime/stime {times:?} ticks, {faults} minor faults in 100 ms; syscall {}; \
                 kernel stack {:?}",
                syscall.trim(),
                stack.lines().next().unwrap_or("")
            );
        }
        sleep_ms(20);
    }
}

/// Why a run with moves stopped early.
enum Short {
    /// The tool ended before the last move, with the reference's output
    /// and status: too little work for the moves.
    Ended(u32),
}

/// Runs `cmd args` and checkpoints (kills) and restores it [`MOVES`] times
/// in a row while it runs, `gap` apart; checks its output and status
/// against the reference. `Err` if it ended correctly before the last move.
fn moves(
    name: &str,
    cmd: &Path,
    args: &[&str],
    stdin: Option<&Path>,
    tmp: &Path,
    want: &(Vec<u8>, String),
    gap: Duration,
) -> Result<String, Short> {
    let out = tmp.join("migrated.out");
    let mut pid = spawn(cmd, args, stdin, &out);
    let (mut ck, mut rs, mut kib) = (Duration::ZERO, Duration::ZERO, 0);
    for round in 0..MOVES {
        std::thread::sleep(gap);
        let img = tmp.join(format!("img{round}"));
        let t = Instant::now();
        let s = match checkpoint(pid, &img, Leave::Kill) {
            Ok(s) => s,
            Err(e) => {
                // Left running (or ended): see how it ends.
                let st = describe(wait(pid));
                let got = std::fs::read(&out).unwrap();
                if (&got, &st) == (&want.0, &want.1) {
                    return Err(Short::Ended(round));
                }
                panic!(
                    "{name}: move {round}: checkpoint: {e}; then the program ended with {st} \
                     (reference: {}) and {} bytes of output (reference: {}, same: {})",
                    want.1,
                    got.len(),
                    want.0.len(),
                    got == want.0
                );
            }
        };
        ck += t.elapsed();
        kib += s.pages_bytes / 1024;
        let t = Instant::now();
        pid = restore(&img)
            .unwrap_or_else(|e| panic!("{name}: move {round}: restore: {e}"))
            .pid;
        rs += t.elapsed();
        std::fs::remove_dir_all(&img).unwrap();
    }
    let st = describe(wait_or_report(name, pid, Duration::from_secs(60)));
    assert_eq!(st, want.1, "{name}: exit status after {MOVES} moves");
    assert_same_output(&std::fs::read(&out).unwrap(), &want.0);
    Ok(format!(
        "mean checkpoint {:?} ({} KiB pages), mean restore {:?}",
        ck / MOVES,
        kib / u64::from(MOVES),
        rs / MOVES
    ))
}

/// The tool on `input` (`size` bytes; `args(input)` are its arguments, its
/// stdin the input if `stdin`) moved [`MOVES`] times while it runs, `gap`
/// = 1/(8 * MOVES) of the reference's CPU time apart. The tool also runs a
/// little during each move (the checks before it is frozen, the end of the
/// restore), so whether it is still running at the last move depends on
/// the machine's load: a tool that ended before it, with the right output,
/// is run again on twice the input (at most 6 times). Small inputs first:
/// a fraction of a second per run on an idle machine.
fn migrated_matches(name: &str, mut size: usize, stdin: bool, args: impl Fn(&str) -> Vec<String>) {
    let cmd = tool(name);
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input.txt");
    for _ in 0..6 {
        input_file(&input, size);
        let argv = args(input.to_str().unwrap());
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let stdin = stdin.then_some(input.as_path());
        let (want, want_st, work) = reference_cpu(cmd, &argv, stdin, tmp.path());
        assert!(!want.is_empty(), "{name}: empty reference output");
        let gap = work / (8 * MOVES);
        let want = (want, want_st);
        match moves(name, cmd, &argv, stdin, tmp.path(), &want, gap) {
            Ok(said) => {
                eprintln!("{name}: {size} bytes, reference CPU {work:?}, {MOVES} moves {gap:?} apart: {said}");
                return;
            }
            Err(Short::Ended(n)) => {
                eprintln!(
                    "{name}: {size} bytes: ended (correctly) after {n} moves; twice the input"
                );
                size *= 2;
            }
        }
    }
    panic!("{name}: ends before {MOVES} moves even with {size} bytes of input");
}

#[test]
fn gzip_migrated_20_times_matches() {
    migrated_matches("gzip", 512 << 10, true, |_| {
        ["-9", "-n", "-c"].map(String::from).to_vec()
    });
}

#[test]
fn xz_migrated_20_times_matches() {
    migrated_matches("xz", 512 << 10, true, |_| {
        ["-T1", "-6", "-c"].map(String::from).to_vec()
    });
}

#[test]
fn bzip2_migrated_20_times_matches() {
    migrated_matches("bzip2", 1 << 20, true, |_| {
        ["-9", "-c"].map(String::from).to_vec()
    });
}

#[test]
fn sha256sum_migrated_20_times_matches() {
    migrated_matches("sha256sum", 2 << 20, false, |input| {
        std::iter::repeat_n(input.to_string(), 30).collect()
    });
}
