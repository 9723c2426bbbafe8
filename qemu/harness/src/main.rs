// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `halfproc-harness`: the command-line face of the harness.

use clap::{Args, Parser, Subcommand};
use halfproc_harness::{cpio::Archive, qemu, scan};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Boot a kernel under QEMU (TCG), run the in-guest suite, and judge the run
/// honestly: a panic, a hang, a kernel report (oops, BUG, WARNING, lockdep,
/// KFENCE, RCU stall), a failed test, a program that broke its TAP plan or
/// never ran each fail it.
#[derive(Parser)]
#[command(name = "halfproc-harness", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write an initramfs (newc cpio): busybox, /init and the given files.
    Initramfs(InitramfsArgs),
    /// Boot a kernel with an initramfs and judge the run. Exit 0 only if it
    /// passed; the summary line, `<log>.results.json` and `<log>.tap` say why.
    Run(RunArgs),
    /// Scan a saved console log for kernel reports (exit 1 if any).
    Scan {
        /// The console log.
        log: PathBuf,
    },
}

#[derive(Args)]
struct InitramfsArgs {
    /// The archive to write.
    #[arg(long)]
    out: String,
    /// A statically linked busybox (installed as /bin/busybox and /bin/sh).
    #[arg(long)]
    busybox: String,
    /// The script to install as /init.
    #[arg(long)]
    init: String,
    /// SRC:DST: copy the host file SRC to DST in the archive (repeatable).
    #[arg(long, value_name = "SRC:DST")]
    file: Vec<String>,
}

#[derive(Args)]
struct RunArgs {
    /// The kernel (bzImage).
    #[arg(long)]
    kernel: PathBuf,
    /// The initramfs.
    #[arg(long)]
    initrd: PathBuf,
    /// Where to write the console log; results go next to it.
    #[arg(long)]
    log: PathBuf,
    /// Kill the guest after this many seconds (a hang fails the run).
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// More kernel command line (after `console=ttyS0 panic=-1`).
    #[arg(long, default_value = "")]
    append: String,
    /// A host directory the guest can mount over 9p (tag `hostshare`).
    #[arg(long)]
    share: Option<PathBuf>,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 1024)]
    memory: u32,
    /// Guest vCPUs.
    #[arg(long, default_value_t = 2)]
    cpus: u32,
    /// QEMU CPU model: `max` (5-level paging where TCG offers it), or
    /// `max,la57=off` for 4-level paging.
    #[arg(long, default_value = "max")]
    cpu: String,
    /// The qemu binary.
    #[arg(long, default_value = "qemu-system-x86_64")]
    qemu: String,
    /// A program that must run (its `/init` markers); repeatable. One that
    /// never started is a failure.
    #[arg(long, value_name = "PROG")]
    expect: Vec<String>,
    /// A file listing expected programs, one per line.
    #[arg(long, value_name = "FILE")]
    expect_file: Option<PathBuf>,
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
    let mut expected = a.expect;
    if let Some(f) = &a.expect_file {
        let text =
            std::fs::read_to_string(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
        expected.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from),
        );
    }
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
        expected,
    };
    for p in [&o.kernel, &o.initrd] {
        if !p.exists() {
            return Err(format!("{} does not exist", p.display()));
        }
    }
    let v = qemu::run(&o).map_err(|e| e.to_string())?;
    for c in &v.causes {
        eprintln!("halfproc: FAIL: {c}");
    }
    println!("halfproc: {}", v.summary_line());
    eprintln!(
        "halfproc: console log {}, results {}",
        o.log.display(),
        o.log.with_extension("results.json").display()
    );
    Ok(if v.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn scan_log(log: &std::path::Path) -> Result<ExitCode, String> {
    let text =
        std::fs::read_to_string(log).map_err(|e| format!("cannot read {}: {e}", log.display()))?;
    let f = scan::scan(&text);
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
