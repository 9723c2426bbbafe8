// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `halfproc-harness`: the command-line face of the harness.

use clap::{Args, Parser, Subcommand};
use halfproc_harness::verdict::{judge, Verdict};
use halfproc_harness::{cpio::Archive, pair, qemu, scan};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Boot a kernel under QEMU (TCG), run the in-guest suite, and judge the run
/// honestly: a panic, a hang, a kernel report (oops, BUG, WARNING, lockdep,
/// KASAN, KFENCE, RCU stall), a failed test, and a test program that broke
/// its TAP plan, did not finish, exited non-zero unexplained or never
/// started each fail it.
#[derive(Parser)]
#[command(name = "halfproc-harness", version, after_help = OVERVIEW)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

const OVERVIEW: &str = "\
Typical use (scripts/guest.sh does this):
  halfproc-harness initramfs --out initramfs.cpio --busybox /bin/busybox \\
      --init tests/guest/init.sh --file out/debug/guest/tests/hp_sets:/tests/hp_sets
  halfproc-harness run --kernel bzImage --initrd initramfs.cpio --log out/debug/test.log \\
      --timeout 1500 --expect-file out/debug/expect --append halfproc.mode=test
  halfproc-harness judge out/debug/test.log --expect-file out/debug/expect

Exit status: 0 the run passed, 1 it failed (the causes are printed), 2 usage or I/O error.
`halfproc-harness run --help` describes what the guest must print.";

const GUEST_CONTRACT: &str = "\
What the guest's /init must do:
  - write `HALFPROC_EXIT=<status>` to the second serial port (/dev/ttyS1) and power off;
    no status (a panic, init exiting) or a non-zero one fails the run;
  - print a marker on the console around every test program it runs:
      # halfproc-harness: begin hp_sets
      ...the program's TAP: TAP version 13, 1..N, ok N name, not ok N name...
      # halfproc-harness: end hp_sets rc=0
    (tests/guest/init.sh: `prog NAME CMD...`). Result lines outside markers belong to `init`.

How each program is held to its word (each breach is a result named PROG.BREACH: detail):
  plan_mismatch   declared 1..N, reported another number (a skip if it ended with
                  kselftest's ksft_exit_skip(): a `# SKIP` result, exit status 4)
  no_plan/no_tap  reported results without a plan, or no TAP at all
  skipped         declared `1..0 # SKIP reason` (a skip, not a failure)
  did_not_finish  no end marker: crashed, hung or killed
  exit_status     exited non-zero (other than 4) with no failing result or bail-out
  bail_out        printed `Bail out! reason`
  missing         named by --expect/--expect-file but never started
Nested TAP (`# ok 1 ...`, indented `    ok 1 ...`) and diagnostics do not count.

Output: one line `N passed, N failed, N skipped; N kernel reports; PASS|FAIL in Ts`,
<log>.results.json (each result with program, name, status, plan) and <log>.tap.";

#[derive(Subcommand)]
enum Cmd {
    /// Write an initramfs (newc cpio): busybox, /init and the given files.
    Initramfs(InitramfsArgs),
    /// Boot a kernel with an initramfs and judge the run. Exit 0 only if it
    /// passed; the summary line, `<log>.results.json` and `<log>.tap` say why.
    #[command(after_long_help = GUEST_CONTRACT)]
    Run(RunArgs),
    /// Boot two guests of the same kernel at once, connected by a virtual
    /// network (UDP over the host's loopback), and judge both: exit 0 only
    /// if both passed.
    #[command(after_long_help = PAIR_HELP)]
    Pair(PairArgs),
    /// Judge a saved console log again (no boot, no files written): the
    /// same verdict `run` gave, e.g. after changing the expected list.
    #[command(after_long_help = GUEST_CONTRACT)]
    Judge(JudgeArgs),
    /// Scan a saved console log for kernel reports (exit 1 if any).
    Scan {
        /// The console log.
        log: PathBuf,
    },
}

/// The programs that must have run.
#[derive(Args)]
struct ExpectArgs {
    /// A program that must run (the NAME of its `/init` markers, e.g.
    /// `hp_sets`, `mm/cow`); repeatable. One that never started is a
    /// failure, not a smaller total.
    #[arg(long, value_name = "PROG")]
    expect: Vec<String>,
    /// A file of expected programs, one per line (blank lines and `#`
    /// comments ignored); `scripts/guest.sh build` writes `out/<flavour>/expect`.
    #[arg(long, value_name = "FILE")]
    expect_file: Option<PathBuf>,
}

impl ExpectArgs {
    fn programs(self) -> Result<Vec<String>, String> {
        let mut expected = self.expect;
        if let Some(f) = &self.expect_file {
            let text = std::fs::read_to_string(f)
                .map_err(|e| format!("cannot read {}: {e}", f.display()))?;
            expected.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(String::from),
            );
        }
        Ok(expected)
    }
}

const PAIR_HELP: &str = "\
Each guest gets a virtio-net card (eth0) on a point-to-point link between two free
UDP ports of 127.0.0.1 (-netdev dgram), and on its kernel command line:
  guest A: halfproc.role=a halfproc.ip=10.0.2.1/24 halfproc.peer=10.0.2.2
  guest B: halfproc.role=b halfproc.ip=10.0.2.2/24 halfproc.peer=10.0.2.1
Both consoles are echoed with [a]/[b] prefixes, logged, and judged as `run` judges one.";

#[derive(Args)]
struct PairArgs {
    /// The kernel (arch/x86/boot/bzImage), booted by both.
    #[arg(long, value_name = "BZIMAGE")]
    kernel: PathBuf,
    /// The initramfs, the same for both.
    #[arg(long, value_name = "FILE")]
    initrd: PathBuf,
    /// Guest A's console log (status and results files next to it).
    #[arg(long, value_name = "FILE")]
    log_a: PathBuf,
    /// Guest B's console log.
    #[arg(long, value_name = "FILE")]
    log_b: PathBuf,
    /// Kill a guest after this many seconds (a hang fails the run).
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    timeout: u64,
    /// More kernel command line for both.
    #[arg(long, value_name = "ARGS", default_value = "")]
    append: String,
    /// Memory of each guest in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    memory: u32,
    /// vCPUs of each guest.
    #[arg(long, value_name = "N", default_value_t = 1)]
    cpus: u32,
    /// QEMU CPU model.
    #[arg(long, value_name = "MODEL", default_value = "max")]
    cpu: String,
    /// The qemu binary.
    #[arg(long, value_name = "PATH", default_value = "qemu-system-x86_64")]
    qemu: String,
    /// A program that must run on guest A (repeatable).
    #[arg(long, value_name = "PROG")]
    expect_a: Vec<String>,
    /// A program that must run on guest B (repeatable).
    #[arg(long, value_name = "PROG")]
    expect_b: Vec<String>,
    /// A host directory guest A can mount over 9p (tag `hostshare`).
    #[arg(long, value_name = "DIR")]
    share_a: Option<PathBuf>,
    /// Do not echo the consoles while the guests run.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args)]
struct JudgeArgs {
    /// The console log `run --log` wrote.
    log: PathBuf,
    /// The status-port file (`HALFPROC_EXIT=N`) [default: LOG with extension `status`].
    #[arg(long, value_name = "FILE")]
    status: Option<PathBuf>,
    #[command(flatten)]
    expect: ExpectArgs,
}

#[derive(Args)]
struct InitramfsArgs {
    /// The archive to write.
    #[arg(long, value_name = "FILE")]
    out: String,
    /// A statically linked busybox (installed as /bin/busybox and /bin/sh).
    #[arg(long, value_name = "PATH")]
    busybox: String,
    /// The script to install as /init (tests/guest/init.sh).
    #[arg(long, value_name = "FILE")]
    init: String,
    /// Copy the host file SRC to DST in the archive, keeping its mode
    /// (repeatable); missing parent directories are created.
    #[arg(long, value_name = "SRC:DST")]
    file: Vec<String>,
}

#[derive(Args)]
struct RunArgs {
    /// The kernel (arch/x86/boot/bzImage).
    #[arg(long, value_name = "BZIMAGE")]
    kernel: PathBuf,
    /// The initramfs (`initramfs --out`).
    #[arg(long, value_name = "FILE")]
    initrd: PathBuf,
    /// Where to write the console log; `<log>.status`, `<log>.results.json`
    /// and `<log>.tap` go next to it.
    #[arg(long, value_name = "FILE")]
    log: PathBuf,
    /// Kill the guest after this many seconds (a hang fails the run).
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    timeout: u64,
    /// More kernel command line (after `console=ttyS0 panic=-1 no_timer_check`), e.g.
    /// `halfproc.mode=test pti=on`.
    #[arg(long, value_name = "ARGS", default_value = "")]
    append: String,
    /// A host directory the guest can mount over 9p (tag `hostshare`).
    #[arg(long, value_name = "DIR")]
    share: Option<PathBuf>,
    /// A raw disk image for a virtio-blk drive, `/dev/vda` in the guest
    /// (with `--append root=/dev/vda`, the guest boots from it:
    /// scripts/distro.sh boot-test).
    #[arg(long, value_name = "FILE")]
    disk: Option<PathBuf>,
    /// Guest memory in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    memory: u32,
    /// Guest vCPUs.
    #[arg(long, value_name = "N", default_value_t = 2)]
    cpus: u32,
    /// QEMU CPU model: `max` (5-level paging where TCG offers it), or
    /// `max,la57=off` for 4-level paging.
    #[arg(long, value_name = "MODEL", default_value = "max")]
    cpu: String,
    /// The qemu binary.
    #[arg(long, value_name = "PATH", default_value = "qemu-system-x86_64")]
    qemu: String,
    #[command(flatten)]
    expect: ExpectArgs,
    /// Do not echo the console while the guest runs.
    #[arg(long)]
    quiet: bool,
}

fn initramfs(a: &InitramfsArgs) -> Result<(), String> {
    let out = &a.out;
    let read = |p: &str| std::fs::read(p).map_err(|e| format!("cannot read {p}: {e}"));
    let f = std::fs::File::create(out).map_err(|e| format!("cannot create {out}: {e}"))?;
    let mut ar = Archive::new(std::io::BufWriter::new(f));
    let io = |e: std::io::Error| e.to_string();
    for d in [
        "bin", "sbin", "dev", "proc", "sys", "tmp", "mnt", "root", "etc", "usr", "usr/bin",
        "usr/sbin", "lib",
    ] {
        ar.dir(d, 0o755).map_err(io)?;
    }
    ar.chardev("dev/console", 0o600, 5, 1).map_err(io)?;
    ar.chardev("dev/null", 0o666, 1, 3).map_err(io)?;
    ar.file("bin/busybox", 0o755, &read(&a.busybox)?)
        .map_err(io)?;
    ar.symlink("bin/sh", "busybox").map_err(io)?;
    ar.file("init", 0o755, &read(&a.init)?).map_err(io)?;
    let mut dirs = std::collections::BTreeSet::new();
    for spec in &a.file {
        let (src, dst) = spec
            .split_once(':')
            .ok_or_else(|| format!("--file wants SRC:DST, got {spec:?}"))?;
        let dst = dst.trim_start_matches('/');
        let mut acc = String::new();
        for comp in dst
            .split('/')
            .collect::<Vec<_>>()
            .split_last()
            .map(|x| x.1)
            .unwrap_or(&[])
        {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(comp);
            if dirs.insert(acc.clone())
                && !["bin", "sbin", "usr", "usr/bin", "lib", "etc", "root"].contains(&acc.as_str())
            {
                ar.dir(&acc, 0o755).map_err(io)?;
            }
        }
        let data = read(src)?;
        let meta = std::fs::metadata(src).map_err(|e| e.to_string())?;
        use std::os::unix::fs::PermissionsExt;
        ar.file(dst, meta.permissions().mode() & 0o7777, &data)
            .map_err(io)?;
    }
    ar.finish().map_err(io)?;
    Ok(())
}

fn run(a: RunArgs) -> Result<ExitCode, String> {
    let expected = a.expect.programs()?;
    let o = qemu::RunOpts {
        qemu: a.qemu,
        kernel: a.kernel,
        initrd: a.initrd,
        append: a.append,
        timeout: Duration::from_secs(a.timeout),
        log: a.log,
        share: a.share,
        memory_mb: a.memory,
        cpus: a.cpus,
        cpu: a.cpu,
        echo: !a.quiet,
        echo_prefix: String::new(),
        net: None,
        disk: a.disk,
        expected,
    };
    for p in [&o.kernel, &o.initrd].into_iter().chain(&o.disk) {
        if !p.exists() {
            return Err(format!("{} does not exist", p.display()));
        }
    }
    let v = qemu::run(&o).map_err(|e| e.to_string())?;
    let code = report(&v);
    eprintln!(
        "halfproc: console log {}, results {}",
        o.log.display(),
        o.log.with_extension("results.json").display()
    );
    Ok(code)
}

fn pair(a: PairArgs) -> Result<ExitCode, String> {
    for p in [&a.kernel, &a.initrd] {
        if !p.exists() {
            return Err(format!("{} does not exist", p.display()));
        }
    }
    let base = qemu::RunOpts {
        qemu: a.qemu,
        kernel: a.kernel,
        initrd: a.initrd,
        append: a.append,
        timeout: Duration::from_secs(a.timeout),
        log: a.log_a.clone(),
        share: None,
        memory_mb: a.memory,
        cpus: a.cpus,
        cpu: a.cpu,
        echo: !a.quiet,
        echo_prefix: String::new(),
        net: None,
        disk: None,
        expected: Vec::new(),
    };
    let ports = pair::free_udp_ports().map_err(|e| format!("no free UDP port: {e}"))?;
    let mut ga = pair::guest(&base, 'a', a.log_a, ports);
    ga.expected = a.expect_a;
    ga.share = a.share_a;
    let mut gb = pair::guest(&base, 'b', a.log_b, ports);
    gb.expected = a.expect_b;
    let (va, vb) = pair::run(&ga, &gb).map_err(|e| e.to_string())?;
    let mut code = ExitCode::SUCCESS;
    for (name, v, o) in [("A", &va, &ga), ("B", &vb, &gb)] {
        for c in &v.causes {
            eprintln!("halfproc: guest {name}: FAIL: {c}");
        }
        println!("halfproc: guest {name}: {}", v.summary_line());
        if !v.passed() {
            code = ExitCode::FAILURE;
        }
        eprintln!(
            "halfproc: guest {name}: console log {}, results {}",
            o.log.display(),
            o.log.with_extension("results.json").display()
        );
    }
    Ok(code)
}

/// Print the causes and the summary line; the exit code of the verdict.
fn report(v: &Verdict) -> ExitCode {
    for c in &v.causes {
        eprintln!("halfproc: FAIL: {c}");
    }
    println!("halfproc: {}", v.summary_line());
    if v.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn judge_log(a: JudgeArgs) -> Result<ExitCode, String> {
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    };
    let console = read(&a.log)?;
    let status_file = a.status.unwrap_or_else(|| a.log.with_extension("status"));
    let status = read(&status_file)?;
    let expected = a.expect.programs()?;
    Ok(report(&judge(
        &console,
        &status,
        false,
        Duration::ZERO,
        &expected,
    )))
}

fn scan_log(log: &Path) -> Result<ExitCode, String> {
    let text =
        std::fs::read_to_string(log).map_err(|e| format!("cannot read {}: {e}", log.display()))?;
    let f: Vec<_> = scan::scan(&text).unexpected().cloned().collect();
    for x in &f {
        println!("{}:{}: {}: {}", log.display(), x.line, x.kind, x.text);
    }
    Ok(if f.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Cmd::Initramfs(a) => initramfs(&a).map(|()| ExitCode::SUCCESS),
        Cmd::Run(a) => run(a),
        Cmd::Pair(a) => pair(a),
        Cmd::Judge(a) => judge_log(a),
        Cmd::Scan { log } => scan_log(&log),
    };
    match result {
        Ok(c) => c,
        Err(e) => {
            eprintln!("halfproc-harness: error: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// The flags scripts/guest.sh passes, exactly as it passes them.
    #[test]
    fn the_scripts_flags_parse() {
        let Cmd::Initramfs(a) = Cli::try_parse_from([
            "h",
            "initramfs",
            "--out",
            "o.cpio",
            "--busybox",
            "/bin/busybox",
            "--init",
            "init.sh",
            "--file",
            "a:/tests/a",
            "--file",
            "b:/tests/mm/b",
        ])
        .unwrap()
        .command
        else {
            panic!("not initramfs")
        };
        assert_eq!(a.file, ["a:/tests/a", "b:/tests/mm/b"]);
        let Cmd::Run(r) = Cli::try_parse_from([
            "h",
            "run",
            "--kernel",
            "bz",
            "--expect-file",
            "expect",
            "--initrd",
            "i.cpio",
            "--log",
            "test.log",
            "--timeout",
            "1500",
            "--cpus",
            "2",
            "--memory",
            "4096",
            "--cpu",
            "max,la57=off",
            "--share",
            "/s",
            "--append",
            "halfproc.mode=test pti=on ",
            "--quiet",
            "--expect",
            "hp_sets",
            "--qemu",
            "q",
        ])
        .unwrap()
        .command
        else {
            panic!("not run")
        };
        assert_eq!((r.timeout, r.cpus, r.memory), (1500, 2, 4096));
        assert_eq!((r.cpu.as_str(), r.qemu.as_str()), ("max,la57=off", "q"));
        assert_eq!(r.append, "halfproc.mode=test pti=on ");
        assert!(r.quiet);
        assert_eq!(r.expect.expect, ["hp_sets"]);
        assert_eq!(r.expect.expect_file, Some(PathBuf::from("expect")));
        assert!(Cli::try_parse_from(["h", "run", "--kernel", "bz"]).is_err());
    }

    #[test]
    fn the_expect_file_skips_blanks_and_comments() {
        let dir = std::env::temp_dir().join(format!("halfproc-expect-{}", std::process::id()));
        std::fs::write(&dir, "# from guest.sh\nhp_sets\n\n  mm/cow  \n").unwrap();
        let got = ExpectArgs {
            expect: vec!["hp_dm".into()],
            expect_file: Some(dir.clone()),
        }
        .programs();
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(got.unwrap(), ["hp_dm", "hp_sets", "mm/cow"]);
    }
}
