// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Boot a kernel under QEMU (TCG), stream and log its console, enforce a
//! timeout, and judge the run.

use crate::programs::{self, Tagged};
use crate::{scan, tap};
use serde::Serialize;
use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The marker the guest's init writes to the status port (`/dev/ttyS1`).
pub const EXIT_MARKER: &str = "HALFPROC_EXIT=";

/// How to run one guest.
#[derive(Clone, Debug)]
pub struct RunOpts {
    /// The qemu binary.
    pub qemu: String,
    /// `bzImage`.
    pub kernel: PathBuf,
    /// The initramfs.
    pub initrd: PathBuf,
    /// Extra kernel command line, appended to the harness's own.
    pub append: String,
    /// Kill the guest after this long.
    pub timeout: Duration,
    /// Where the console log goes; the status port file and the results
    /// files are written next to it.
    pub log: PathBuf,
    /// A host directory shared with the guest over 9p (tag `hostshare`).
    pub share: Option<PathBuf>,
    /// Guest memory in MiB.
    pub memory_mb: u32,
    /// Guest vCPUs.
    pub cpus: u32,
    /// The QEMU CPU model (`max`; `max,la57=off` for 4-level paging).
    pub cpu: String,
    /// Echo the console to stdout while it runs.
    pub echo: bool,
    /// Programs that must have run (`/init` markers); one that did not is a
    /// failure, not a smaller total.
    pub expected: Vec<String>,
}

/// What happened.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// The exit status the guest reported, if it did.
    pub exit_status: Option<i32>,
    /// Whether the harness killed the guest at the timeout.
    pub timed_out: bool,
    /// Kernel reports found on the console.
    pub findings: Vec<scan::Finding>,
    /// TAP results found on the console, tagged with their program, and the
    /// failures for programs that broke their plan or never ran.
    pub results: Vec<Tagged>,
    /// Why the run failed; empty when it passed.
    pub causes: Vec<String>,
    /// Wall time of the guest.
    pub elapsed: Duration,
}

impl Verdict {
    /// Totals over all results.
    pub fn summary(&self) -> tap::Summary {
        let r: Vec<_> = self.results.iter().map(|t| t.result.clone()).collect();
        tap::summarize(&r)
    }

    /// Whether the run passed.
    pub fn passed(&self) -> bool {
        self.causes.is_empty()
    }

    /// The one-line summary.
    pub fn summary_line(&self) -> String {
        let s = self.summary();
        format!(
            "{} passed, {} failed, {} skipped; {} kernel reports; {} in {:.1}s",
            s.passed,
            s.failed,
            s.skipped,
            self.findings.len(),
            if self.passed() { "PASS" } else { "FAIL" },
            self.elapsed.as_secs_f64()
        )
    }
}

/// Judge a finished run from its console log and status-port contents.
pub fn judge(
    console: &str,
    status: &str,
    timed_out: bool,
    timeout: Duration,
    expected: &[String],
) -> Verdict {
    let findings = scan::scan(console);
    let results = programs::judge(&programs::split(console), expected);
    let exit_status = status
        .lines()
        .find_map(|l| l.trim().strip_prefix(EXIT_MARKER))
        .and_then(|v| v.trim().parse::<i32>().ok());
    let mut causes = Vec::new();
    if timed_out {
        causes.push(format!(
            "guest hung: killed after the {}s timeout",
            timeout.as_secs()
        ));
    }
    for f in &findings {
        causes.push(format!(
            "kernel reported {} at console line {}: {}",
            f.kind, f.line, f.text
        ));
    }
    match exit_status {
        None if !timed_out => {
            if findings.iter().any(|f| f.kind == "panic") {
                causes.push("guest panicked before reporting an exit status".into());
            } else {
                causes.push("guest stopped without reporting an exit status".into());
            }
        }
        Some(rc) if rc != 0 => causes.push(format!("guest test suite exited with status {rc}")),
        _ => {}
    }
    let failed: Vec<_> = results
        .iter()
        .filter(|t| t.result.status == tap::Status::Fail)
        .map(|t| t.result.name.as_str())
        .collect();
    if !failed.is_empty() {
        causes.push(format!(
            "{} tests failed: {}",
            failed.len(),
            failed.join(", ")
        ));
    }
    Verdict {
        exit_status,
        timed_out,
        findings,
        results,
        causes,
        elapsed: Duration::ZERO,
    }
}

/// The qemu command line for `o`.
pub fn command(o: &RunOpts, status_file: &std::path::Path) -> Vec<String> {
    let mut c = vec![
        o.qemu.clone(),
        "-accel".into(),
        "tcg".into(),
        "-cpu".into(),
        o.cpu.clone(),
        "-smp".into(),
        o.cpus.to_string(),
        "-m".into(),
        format!("{}M", o.memory_mb),
        "-nodefaults".into(),
        "-no-reboot".into(),
        "-display".into(),
        "none".into(),
        "-serial".into(),
        "stdio".into(),
        "-serial".into(),
        format!("file:{}", status_file.display()),
        "-kernel".into(),
        o.kernel.display().to_string(),
        "-initrd".into(),
        o.initrd.display().to_string(),
        "-append".into(),
        format!("console=ttyS0 panic=-1 {}", o.append)
            .trim()
            .to_string(),
    ];
    if let Some(dir) = &o.share {
        c.push("-virtfs".into());
        c.push(format!(
            "local,path={},mount_tag=hostshare,security_model=none,id=hs",
            dir.display()
        ));
    }
    c
}

fn shell_quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_=.,/:+".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Boot the guest and judge it.
pub fn run(o: &RunOpts) -> io::Result<Verdict> {
    let status_file = o.log.with_extension("status");
    let _ = std::fs::remove_file(&status_file);
    let argv = command(o, &status_file);
    let printable: Vec<_> = argv.iter().map(|a| shell_quote(a)).collect();
    eprintln!("halfproc: running: {}", printable.join(" "));
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot start {}: {e}", o.qemu)))?;
    let stdout = child.stdout.take().expect("piped");
    let echo = o.echo;
    let mut logf = std::fs::File::create(&o.log)?;
    let reader = std::thread::spawn(move || -> io::Result<String> {
        let mut all = String::new();
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            if r.read_until(b'\n', &mut buf)? == 0 {
                return Ok(all);
            }
            let line = String::from_utf8_lossy(&buf);
            logf.write_all(line.as_bytes())?;
            if echo {
                print!("{line}");
                let _ = io::stdout().flush();
            }
            all.push_str(&line);
        }
    });
    let t0 = Instant::now();
    let mut timed_out = false;
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if t0.elapsed() > o.timeout {
            timed_out = true;
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let elapsed = t0.elapsed();
    let console = reader.join().expect("reader thread")?;
    let status = std::fs::read_to_string(&status_file).unwrap_or_default();
    let mut v = judge(&console, &status, timed_out, o.timeout, &o.expected);
    v.elapsed = elapsed;
    write_results(o, &v)?;
    Ok(v)
}

#[derive(Serialize)]
struct ResultsFile<'a> {
    verdict: &'static str,
    passed: usize,
    failed: usize,
    skipped: usize,
    exit_status: Option<i32>,
    timed_out: bool,
    elapsed_s: f64,
    causes: &'a [String],
    tests: Vec<TestEntry<'a>>,
}

#[derive(Serialize)]
struct TestEntry<'a> {
    program: &'a str,
    name: &'a str,
    status: &'static str,
}

fn status_name(s: tap::Status) -> &'static str {
    match s {
        tap::Status::Pass => "pass",
        tap::Status::Fail => "fail",
        tap::Status::Skip => "skip",
        tap::Status::Todo => "todo",
    }
}

/// Write `<log>.results.json` and `<log>.tap`.
fn write_results(o: &RunOpts, v: &Verdict) -> io::Result<()> {
    let s = v.summary();
    let file = ResultsFile {
        verdict: if v.passed() { "pass" } else { "fail" },
        passed: s.passed,
        failed: s.failed,
        skipped: s.skipped,
        exit_status: v.exit_status,
        timed_out: v.timed_out,
        elapsed_s: v.elapsed.as_secs_f64(),
        causes: &v.causes,
        tests: v
            .results
            .iter()
            .map(|t| TestEntry {
                program: &t.program,
                name: &t.result.name,
                status: status_name(t.result.status),
            })
            .collect(),
    };
    let json = serde_json::to_string_pretty(&file).map_err(io::Error::other)?;
    std::fs::write(o.log.with_extension("results.json"), json + "\n")?;
    let mut t = format!("TAP version 13\n1..{}\n", v.results.len());
    for (i, r) in v.results.iter().enumerate() {
        let (ok, dir) = match r.result.status {
            tap::Status::Pass => ("ok", ""),
            tap::Status::Fail => ("not ok", ""),
            tap::Status::Skip => ("ok", " # SKIP"),
            tap::Status::Todo => ("not ok", " # TODO"),
        };
        let _ = writeln!(t, "{ok} {} {}: {}{dir}", i + 1, r.program, r.result.name);
    }
    std::fs::write(o.log.with_extension("tap"), t)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(60);

    #[test]
    fn clean_pass() {
        let v = judge("ok 1 a\nok 2 b\n", "HALFPROC_EXIT=0\n", false, T, &[]);
        assert!(v.passed(), "{:?}", v.causes);
        assert!(v.summary_line().starts_with("2 passed, 0 failed"));
    }

    #[test]
    fn oops_fails_even_if_tests_pass() {
        let console = "ok 1 a\n[    3.1] Oops: 0000 [#1] SMP\n";
        let v = judge(console, "HALFPROC_EXIT=0\n", false, T, &[]);
        assert!(!v.passed());
        assert!(v.causes[0].contains("oops"), "{:?}", v.causes);
    }

    #[test]
    fn panic_without_status() {
        let console = "[    1.0] Kernel panic - not syncing: Attempted to kill init!\n";
        let v = judge(console, "", false, T, &[]);
        assert!(
            v.causes.iter().any(|c| c.contains("panicked")),
            "{:?}",
            v.causes
        );
    }

    #[test]
    fn hang_is_reported() {
        let v = judge("ok 1 a\n", "", true, T, &[]);
        assert!(
            v.causes.iter().any(|c| c.contains("hung")),
            "{:?}",
            v.causes
        );
    }

    #[test]
    fn failing_test_and_status() {
        let v = judge("ok 1 a\nnot ok 2 b\n", "HALFPROC_EXIT=1\n", false, T, &[]);
        assert_eq!(v.causes.len(), 2, "{:?}", v.causes);
        assert!(v.causes[1].contains("b"));
    }

    #[test]
    fn command_line_has_the_essentials() {
        let o = RunOpts {
            qemu: "qemu-system-x86_64".into(),
            kernel: "/k".into(),
            initrd: "/i".into(),
            append: "pti=on".into(),
            timeout: T,
            log: "/tmp/x.log".into(),
            share: Some("/s".into()),
            memory_mb: 512,
            cpus: 2,
            cpu: "max,la57=off".into(),
            echo: false,
            expected: Vec::new(),
        };
        let c = command(&o, std::path::Path::new("/tmp/x.status")).join(" ");
        for want in [
            "-no-reboot",
            "-accel tcg",
            "panic=-1",
            "pti=on",
            "file:/tmp/x.status",
            "mount_tag=hostshare",
            "-cpu max,la57=off",
        ] {
            assert!(c.contains(want), "{want} missing from {c}");
        }
    }
}
