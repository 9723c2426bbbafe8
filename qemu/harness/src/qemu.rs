// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Boot a kernel under QEMU (TCG), stream and log its console, enforce a
//! timeout, and judge the run ([`crate::verdict`]).

use crate::results;
use crate::verdict::{judge, Verdict};
use std::io::{self, BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
    /// Put this before every echoed line (`[a] `: two guests at once).
    pub echo_prefix: String,
    /// A virtual network card on a point-to-point UDP link ([`crate::pair`]).
    pub net: Option<crate::pair::Net>,
    /// A raw disk image on a virtio-blk drive (`/dev/vda` in the guest): the
    /// Debian image of `scripts/distro.sh`, whose root file system it is.
    pub disk: Option<PathBuf>,
    /// Programs that must have run (`/init` markers); one that did not is a
    /// failure, not a smaller total.
    pub expected: Vec<String>,
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
        // One socket per vCPU: a socket split over two NUMA nodes makes
        // the kernel warn (topology_sane()).
        format!("{},sockets={}", o.cpus, o.cpus),
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
        // no_timer_check: the boot's check that the timer ticks through the
        // IO-APIC counts ticks within a busy loop; under TCG on a loaded
        // host too few arrive and the kernel panics ("IO-APIC + timer
        // doesn't work!", seen 2026-11-25 with the 2 cores shared by four
        // builds). Virtual machines' kernels commonly skip it.
        format!("console=ttyS0 panic=-1 no_timer_check {}", o.append)
            .trim()
            .to_string(),
    ];
    c.extend(numa(o.memory_mb, o.cpus));
    if let Some(n) = &o.net {
        c.extend(n.args());
    }
    if let Some(disk) = &o.disk {
        c.push("-drive".into());
        c.push(format!("file={},format=raw,if=virtio", disk.display()));
    }
    if let Some(dir) = &o.share {
        c.push("-virtfs".into());
        c.push(format!(
            "local,path={},mount_tag=hostshare,security_model=none,id=hs",
            dir.display()
        ));
    }
    c
}

/// Two NUMA nodes, memory split in half: node 0 has vCPU 0, node 1 the
/// rest (or none with one vCPU), so page migration between nodes is
/// exercised in the guest (tests/guest/hp_reclaim.c).
fn numa(memory_mb: u32, cpus: u32) -> Vec<String> {
    let half = memory_mb / 2;
    let mut c = Vec::new();
    for (id, size) in [(0, half), (1, memory_mb - half)] {
        c.push("-object".into());
        c.push(format!("memory-backend-ram,id=mem{id},size={size}M"));
        let cpu = match (id, cpus) {
            (0, _) => ",cpus=0".to_string(),
            (_, 1) => String::new(),
            (_, 2) => ",cpus=1".to_string(),
            (_, n) => format!(",cpus=1-{}", n - 1),
        };
        c.push("-numa".into());
        c.push(format!("node,nodeid={id}{cpu},memdev=mem{id}"));
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
    let prefix = o.echo_prefix.clone();
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
                print!("{prefix}{line}");
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
    results::write(&o.log, &v)?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(60);

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
            echo_prefix: String::new(),
            net: Some(crate::pair::Net {
                local_port: 40001,
                remote_port: 40002,
                mac: "52:54:00:12:34:01".into(),
            }),
            disk: Some("/d.img".into()),
            expected: Vec::new(),
        };
        let c = command(&o, std::path::Path::new("/tmp/x.status")).join(" ");
        for want in [
            "-no-reboot",
            "-accel tcg",
            "panic=-1",
            "no_timer_check",
            "pti=on",
            "file:/tmp/x.status",
            "mount_tag=hostshare",
            "-cpu max,la57=off",
            "-numa node,nodeid=0,cpus=0,memdev=mem0",
            "-numa node,nodeid=1,cpus=1,memdev=mem1",
            "memory-backend-ram,id=mem1,size=256M",
            "local.port=40001,remote.type=inet,remote.host=127.0.0.1,remote.port=40002",
            "virtio-net-pci,netdev=net0,mac=52:54:00:12:34:01",
            "-drive file=/d.img,format=raw,if=virtio",
        ] {
            assert!(c.contains(want), "{want} missing from {c}");
        }
    }
}
