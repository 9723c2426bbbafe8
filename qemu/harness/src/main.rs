// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `halfproc-harness`: the command-line face of the harness.
//!
//! ```text
//! halfproc-harness initramfs --out FILE --busybox PATH --init FILE [--file SRC:DST]...
//! halfproc-harness run --kernel BZIMAGE --initrd FILE --log FILE [--timeout S]
//!                      [--append ARGS] [--share DIR] [--memory MB] [--cpus N] [--cpu MODEL] [--quiet]
//! halfproc-harness scan LOG
//! ```

use halfproc_harness::{cpio::Archive, qemu, scan};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

fn usage() -> ExitCode {
    eprintln!(
        "usage:\n  halfproc-harness initramfs --out FILE --busybox PATH --init FILE [--file SRC:DST]...\n  \
         halfproc-harness run --kernel BZIMAGE --initrd FILE --log FILE [--timeout S] [--append ARGS]\n  \
         \x20                    [--share DIR] [--memory MB] [--cpus N] [--cpu MODEL] [--quiet]\n  \
         halfproc-harness scan LOG"
    );
    ExitCode::from(2)
}

/// Parsed `--key value` options; flags map to an empty value.
struct Args(Vec<(String, String)>);

impl Args {
    fn parse(argv: &[String], flags: &[&str]) -> Result<Args, String> {
        let mut out = Vec::new();
        let mut it = argv.iter();
        while let Some(a) = it.next() {
            let Some(key) = a.strip_prefix("--") else {
                return Err(format!("unexpected argument {a:?}"));
            };
            if flags.contains(&key) {
                out.push((key.to_string(), String::new()));
            } else {
                let v = it.next().ok_or_else(|| format!("--{key} needs a value"))?;
                out.push((key.to_string(), v.clone()));
            }
        }
        Ok(Args(out))
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(a, _)| a == k)
            .map(|(_, v)| v.as_str())
    }
    fn need(&self, k: &str) -> Result<&str, String> {
        self.get(k).ok_or_else(|| format!("missing --{k}"))
    }
    fn all<'a>(&'a self, k: &'a str) -> impl Iterator<Item = &'a str> {
        self.0
            .iter()
            .filter(move |(a, _)| a == k)
            .map(|(_, v)| v.as_str())
    }
    fn num<T: std::str::FromStr>(&self, k: &str, default: T) -> Result<T, String> {
        match self.get(k) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("--{k}: not a number: {v:?}")),
        }
    }
}

fn initramfs(a: &Args) -> Result<(), String> {
    let out = a.need("out")?;
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
    ar.file("bin/busybox", 0o755, &read(a.need("busybox")?)?)
        .map_err(io)?;
    ar.symlink("bin/sh", "busybox").map_err(io)?;
    ar.file("init", 0o755, &read(a.need("init")?)?)
        .map_err(io)?;
    let mut dirs = std::collections::BTreeSet::new();
    for spec in a.all("file") {
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

fn run(a: &Args) -> Result<ExitCode, String> {
    let o = qemu::RunOpts {
        qemu: a.get("qemu").unwrap_or("qemu-system-x86_64").to_string(),
        kernel: PathBuf::from(a.need("kernel")?),
        initrd: PathBuf::from(a.need("initrd")?),
        append: a.get("append").unwrap_or("").to_string(),
        timeout: Duration::from_secs(a.num("timeout", 600u64)?),
        log: PathBuf::from(a.need("log")?),
        share: a.get("share").map(PathBuf::from),
        memory_mb: a.num("memory", 1024u32)?,
        cpus: a.num("cpus", 2u32)?,
        cpu: a.get("cpu").unwrap_or("max").to_string(),
        echo: a.get("quiet").is_none(),
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

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = argv.split_first() else {
        return usage();
    };
    let result = match cmd.as_str() {
        "initramfs" => Args::parse(rest, &[])
            .and_then(|a| initramfs(&a))
            .map(|()| ExitCode::SUCCESS),
        "run" => Args::parse(rest, &["quiet"]).and_then(|a| run(&a)),
        "scan" => match rest {
            [log] => std::fs::read_to_string(log)
                .map_err(|e| format!("cannot read {log}: {e}"))
                .map(|text| {
                    let f = scan::scan(&text);
                    for x in &f {
                        println!("{}:{}: {}: {}", log, x.line, x.kind, x.text);
                    }
                    if f.is_empty() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }),
            _ => return usage(),
        },
        _ => return usage(),
    };
    match result {
        Ok(c) => c,
        Err(e) => {
            eprintln!("halfproc-harness: error: {e}");
            ExitCode::from(2)
        }
    }
}
