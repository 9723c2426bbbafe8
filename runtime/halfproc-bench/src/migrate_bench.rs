//! `halfproc bench migrate`: checkpoint+restore throughput of a process
//! with N MiB of private memory, against memcpy bandwidth measured in the
//! same run (issue 11's measure).
//!
//! For each size: fork a child that maps and fills N MiB (distinct bytes
//! per page), points its stdio at /dev/null and waits; then, `--reps`
//! times: [`halfproc_migrate::freeze_and_dump`] (ptrace seize, every page
//! read into memory) and [`halfproc_migrate::restore_from_memory`]
//! rebuilding a new process from them (returns once the copy is rebuilt;
//! with `--memfd`, the pages are first written into a memfd and restored
//! with [`halfproc_migrate::restore_from`], as from a received image file); the original is stopped from the
//! seize until the copy exists, which is the frozen time of a local
//! stop-and-copy migration. The copy is checked (its first, middle and last
//! page of the N MiB read back and compared) and killed, the original resumed. memcpy: `copy_from_slice` of N MiB
//! between two pre-faulted buffers, once per rep just before the rep's dumps
//! (so that both see the same load on a shared machine). Reported: min and
//! median of each, throughput = image bytes / (dump + restore), and the
//! ratio to memcpy. `--phases` also prints, per size, the min and median
//! of each phase of the engine ([`halfproc_migrate::phases`]) and of the
//! memfd write. Touch: after each rep the copy (then the original) writes
//! one byte of every page of its N MiB when sent SIGUSR1 and records how
//! long that took: the write faults a copy whose pages were moved into
//! place pays later, outside the frozen time.

use crate::os::now_ns;
use std::io::Write;
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const HELP: &str =
    "usage: halfproc bench migrate [--sizes 64,256,1024] [--reps 3] [--threads 1,2] [--prefault 1,0]\n\
  [--phases] [--memfd]\n\
  checkpoint+restore (in memory) of a process with SIZE MiB of private memory,\n\
  min/median over REPS, throughput vs memcpy bandwidth measured in the same run;\n\
  --threads: reader thread counts of the dump to compare, alternated rep by rep\n\
  (default: the engine's default, the CPUs available, at most 8; HALFPROC_DUMP_THREADS);\n\
  --prefault: with (1) and without (0) the image's memory faulted in before the target\n\
  is stopped, alternated rep by rep (default: the engine's, HALFPROC_DUMP_PREFAULT);\n\
  --phases: also min/median time of each phase (freeze, pagemap, read, crc, restore fill, ...)\n\
  --memfd: restore from a memfd the pages are written into (as from a file), not from memory\n";

struct Opts {
    sizes: Vec<usize>,
    reps: usize,
    phases: bool,
    memfd: bool,
    /// Reader thread counts to compare (empty: the engine's default).
    threads: Vec<usize>,
    /// Prefault settings to compare (empty: the engine's default).
    prefault: Vec<bool>,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        sizes: vec![64, 256, 1024],
        reps: 3,
        phases: false,
        memfd: false,
        threads: Vec::new(),
        prefault: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--sizes" => {
                o.sizes = val()?
                    .split(',')
                    .map(|s| {
                        s.trim()
                            .parse::<usize>()
                            .map_err(|e| format!("--sizes {s}: {e}"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--reps" => {
                o.reps = val()?.parse().map_err(|e| format!("--reps: {e}"))?;
            }
            "--threads" => {
                o.threads = val()?
                    .split(',')
                    .map(|s| match s.trim().parse::<usize>() {
                        Ok(n) if (1..=halfproc_migrate::DUMP_MAX_THREADS).contains(&n) => Ok(n),
                        _ => Err(format!(
                            "--threads {s}: a thread count from 1 to {}",
                            halfproc_migrate::DUMP_MAX_THREADS
                        )),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--prefault" => {
                o.prefault = val()?
                    .split(',')
                    .map(|s| match s.trim() {
                        "1" => Ok(true),
                        "0" => Ok(false),
                        _ => Err(format!("--prefault {s}: 1 (on) or 0 (off)")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--phases" => o.phases = true,
            "--memfd" => o.memfd = true,
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if o.reps == 0 || o.sizes.contains(&0) {
        return Err("--reps and every size must be at least 1".into());
    }
    Ok(o)
}

/// The holder's region and the result of its last touch of it (see
/// [`touch`]), at the same address in the holder and in its restored copies.
#[repr(C)]
struct Touch {
    addr: AtomicU64,
    len: AtomicU64,
    /// Touches done so far.
    seq: AtomicU64,
    /// Nanoseconds the last one took.
    ns: AtomicU64,
}
static TOUCH: Touch = Touch {
    addr: AtomicU64::new(0),
    len: AtomicU64::new(0),
    seq: AtomicU64::new(0),
    ns: AtomicU64::new(0),
};

/// SIGUSR1 handler of the holder (and so of its copies): writes one byte
/// of every page of the region (adds 0, the contents stay) and records how
/// long that took. In a copy whose pages were moved into place (shared with
/// nobody once the tool dropped its image) each first write is a fault; in
/// the original, or a copy whose pages were copied in, none is.
extern "C" fn touch(_: libc::c_int) {
    let (addr, len) = (
        TOUCH.addr.load(Ordering::Relaxed),
        TOUCH.len.load(Ordering::Relaxed),
    );
    let t = now_ns();
    for pg in (0..len).step_by(4096) {
        let p = (addr + pg) as *mut u8;
        // SAFETY: the region is the holder's own mapping of `len` bytes,
        // readable and writable; the value written is the value read.
        unsafe { p.write_volatile(p.read_volatile()) };
    }
    TOUCH.ns.store(now_ns() - t, Ordering::Relaxed);
    TOUCH.seq.fetch_add(1, Ordering::Release);
}

/// Has `pid` (the holder or a copy) touch its region; waits for it.
fn touch_time(pid: i32) -> Result<Duration, String> {
    let read = || -> Result<(u64, u64), String> {
        let mut b = [0u8; 32];
        halfproc_sys::copy::vm_read(pid, &TOUCH as *const Touch as usize, &mut b)
            .map_err(|e| format!("reading the touch result of {pid}: {e}"))?;
        let w = |i: usize| u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        Ok((w(2), w(3)))
    };
    let (seq, _) = read()?;
    // SAFETY: signalling our own child (the holder) or its copy.
    unsafe { libc::kill(pid, libc::SIGUSR1) };
    let t = Instant::now();
    loop {
        let (s, ns) = read()?;
        if s != seq {
            return Ok(Duration::from_nanos(ns));
        }
        if t.elapsed() > Duration::from_secs(30) {
            return Err(format!("pid {pid} did not touch its memory within 30 s"));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// (min, median) in ms.
fn min_median(v: &mut [Duration]) -> (f64, f64) {
    v.sort();
    (v[0].as_secs_f64() * 1e3, v[v.len() / 2].as_secs_f64() * 1e3)
}

/// A child holding `mib` MiB of filled private memory, waiting: its pid
/// and the address of that memory.
fn spawn_holder(mib: usize) -> Result<(i32, u64), String> {
    let mut p = [0i32; 2];
    // SAFETY: `p` is a valid out array of two fds.
    if unsafe { libc::pipe(p.as_mut_ptr()) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: fork; the child only makes raw system calls and writes to
    // memory it maps itself, then waits until killed.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: the child: map, fill, detach stdio, report, wait.
        unsafe {
            libc::close(p[0]);
            let len = mib << 20;
            let m = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            ) as *mut u8;
            if m as *mut libc::c_void == libc::MAP_FAILED {
                libc::_exit(1);
            }
            for pg in 0..len / 4096 {
                let b = m.add(pg * 4096) as *mut u64;
                for w in 0..512 {
                    b.add(w).write((pg as u64) << 16 | w as u64);
                }
            }
            TOUCH.addr.store(m as u64, Ordering::Relaxed);
            TOUCH.len.store(len as u64, Ordering::Relaxed);
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = touch as extern "C" fn(libc::c_int) as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            libc::close(null);
            // Nothing else inherited (a pipe to another process is refused).
            let w = p[1] as u32;
            if w > 3 {
                libc::syscall(libc::SYS_close_range, 3u32, w - 1, 0u32);
            }
            libc::syscall(libc::SYS_close_range, w + 1, u32::MAX, 0u32);
            let addr = m as u64;
            libc::write(p[1], (&addr as *const u64).cast(), 8);
            libc::close(p[1]);
            loop {
                libc::pause();
            }
        }
    }
    // SAFETY: closing our copy of the write end; the read end is owned below.
    unsafe { libc::close(p[1]) };
    // SAFETY: p[0] is a fresh fd we own.
    let mut r = unsafe { std::fs::File::from_raw_fd(p[0]) };
    // Until EOF: the child has closed its end too.
    let mut b = Vec::new();
    std::io::Read::read_to_end(&mut r, &mut b).map_err(|e| format!("holder of {mib} MiB: {e}"))?;
    let Ok(addr) = b.as_slice().try_into().map(u64::from_ne_bytes) else {
        return Err(format!("holder of {mib} MiB did not start"));
    };
    Ok((pid, addr))
}

fn kill_reap(pid: i32) {
    // SAFETY: our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
}

/// One checkpoint+restore of `pid`: (time, of which dump, image bytes).
/// Checks pages `first`, middle and last of the copy's `mib` MiB at `addr`
/// hold what the holder wrote there.
fn check_copy(pid: i32, addr: u64, mib: usize) -> Result<(), String> {
    let pages = (mib << 20) / 4096;
    for pg in [0, pages / 2, pages - 1] {
        let mut buf = vec![0u8; 4096];
        let at = addr as usize + pg * 4096;
        let n = halfproc_sys::copy::vm_read(pid, at, &mut buf)
            .map_err(|e| format!("reading the copy at {at:#x}: {e}"))?;
        let ok = n == 4096
            && buf.chunks_exact(8).enumerate().all(|(w, c)| {
                u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])) == (pg as u64) << 16 | w as u64
            });
        if !ok {
            return Err(format!(
                "page {pg} of the restored copy differs from the original"
            ));
        }
    }
    Ok(())
}

/// One rep's times.
struct Rep {
    /// From the call to dump to the end of the restore.
    took: Duration,
    /// From the seize to the end of the restore (the original's frozen
    /// time; `took` also has what the dump does before it stops the
    /// target: the refusal checks and the prefault).
    frozen: Duration,
    dumped: Duration,
    bytes: u64,
    /// The copy's first write to each page, the tool's image dropped.
    touch_copy: Duration,
    /// The same in the original, resumed.
    touch_orig: Duration,
}

fn one(pid: i32, addr: u64, mib: usize, memfd: bool) -> Result<Rep, String> {
    let t = Instant::now();
    let d = halfproc_migrate::freeze_and_dump(pid, &[]).map_err(|e| e.to_string())?;
    let dumped = t.elapsed();
    let opts = halfproc_migrate::RestoreOptions::default();
    let copy = if memfd {
        // SAFETY: memfd_create with a static NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"bench-pages".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: a fresh fd we own.
        let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
        let tw = Instant::now();
        f.write_all(&d.pages).map_err(|e| e.to_string())?;
        halfproc_migrate::phases::add("memfd", tw.elapsed());
        halfproc_migrate::restore_from(&d.manifest, f, &opts)
    } else {
        halfproc_migrate::restore_from_memory(&d.manifest, &d.pages, &opts)
    }
    .map_err(|e| e.to_string())?;
    let frozen = d.frozen_for();
    let took = t.elapsed();
    let bytes = d.pages.len() as u64;
    // Resumes the original and drops the image: the copy's moved pages are
    // its own from here on.
    d.resume();
    // The copy exists and runs (it waits in pause() like the original),
    // with the original's contents.
    // SAFETY: kill(pid, 0) probes our own child.
    let alive = unsafe { libc::kill(copy.pid, 0) } == 0;
    let same = check_copy(copy.pid, addr, mib);
    let touch_copy = touch_time(copy.pid);
    kill_reap(copy.pid);
    if !alive {
        return Err("the restored copy is not running".into());
    }
    same?;
    Ok(Rep {
        took,
        frozen,
        dumped,
        bytes,
        touch_copy: touch_copy?,
        touch_orig: touch_time(pid)?,
    })
}

/// Faulting in `mib` MiB of fresh private anonymous memory (4 KiB pages,
/// no huge page advice, as the restored copy's VMAs): `MADV_POPULATE_WRITE`
/// of a new mapping. Every restore pays at least this for its pages.
fn fault_in_times(mib: usize, reps: usize) -> Result<Vec<Duration>, String> {
    let len = mib << 20;
    let mut out = Vec::new();
    for _ in 0..reps {
        // SAFETY: a new private anonymous mapping, unmapped below.
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if m == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        let t = Instant::now();
        // SAFETY: populating our own fresh mapping of `len` bytes.
        let r = unsafe { libc::madvise(m, len, libc::MADV_POPULATE_WRITE) };
        let d = t.elapsed();
        // SAFETY: unmapping the mapping made above; nothing refers to it.
        unsafe { libc::munmap(m, len) };
        if r != 0 {
            return Err(format!(
                "MADV_POPULATE_WRITE: {}",
                std::io::Error::last_os_error()
            ));
        }
        out.push(d);
    }
    Ok(out)
}

/// memcpy of `mib` MiB between two pre-faulted buffers, timed once per
/// rep between the reps' dumps, so that both see the same load.
struct Memcpy {
    src: Vec<u8>,
    dst: Vec<u8>,
}

impl Memcpy {
    fn new(mib: usize) -> Memcpy {
        let m = Memcpy {
            src: vec![7u8; mib << 20],
            dst: vec![1u8; mib << 20],
        };
        // Not inherited by the restore's fork of this tool: the fork would
        // copy their page table entries and the child unmap them again
        // (90 ms each for 2 GiB of 4 KiB pages), which is not the engine's.
        for b in [&m.src, &m.dst] {
            let start = (b.as_ptr() as usize).next_multiple_of(4096);
            let end = (b.as_ptr() as usize + b.len()) & !4095;
            if end > start {
                // SAFETY: advice on whole pages inside our own buffer; it
                // changes only what a fork inherits, not the contents.
                unsafe { libc::madvise(start as *mut _, end - start, libc::MADV_DONTFORK) };
            }
        }
        m
    }

    fn time(&mut self) -> Duration {
        let t = Instant::now();
        self.dst.copy_from_slice(std::hint::black_box(&self.src));
        std::hint::black_box(&self.dst);
        t.elapsed()
    }
}

/// One size and thread count's measurements over the reps.
#[derive(Default)]
struct Acc {
    times: Vec<Duration>,
    frozen: Vec<Duration>,
    dumps: Vec<Duration>,
    touch_copy: Vec<Duration>,
    touch_orig: Vec<Duration>,
    bytes: u64,
    phases: Vec<(&'static str, Vec<Duration>)>,
}

impl Acc {
    fn add(&mut self, r: Rep) {
        self.times.push(r.took);
        self.frozen.push(r.frozen);
        self.dumps.push(r.dumped);
        self.bytes = r.bytes;
        self.touch_copy.push(r.touch_copy);
        self.touch_orig.push(r.touch_orig);
    }

    fn add_phases(&mut self, taken: Vec<(&'static str, Duration)>) {
        for (name, d) in taken {
            match self.phases.iter_mut().find(|(n, _)| *n == name) {
                Some((_, v)) => v.push(d),
                None => self.phases.push((name, vec![d])),
            }
        }
    }
}

/// Entry point; returns the exit code.
pub fn main(args: &[String]) -> i32 {
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) if e.is_empty() => {
            print!("{HELP}");
            return 0;
        }
        Err(e) => {
            eprintln!("halfproc-bench migrate: {e}\n{HELP}");
            return 2;
        }
    };
    println!(
        "{:>6} {:>3} {:>2} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12} {:>7} {:>9} {:>9} {:>9} {:>12} {:>12} {:>12}",
        "MiB",
        "thr",
        "pf",
        "image MiB",
        "c+r min ms",
        "c+r med ms",
        "frozen min",
        "frozen med",
        "dump med",
        "c+r MiB/s",
        "memcpy med",
        "memcpy MiB/s",
        "ratio",
        "ratio min",
        "ratio frz",
        "frz min",
        "fault-in med",
        "touch copy",
        "touch orig"
    );
    let threads = if o.threads.is_empty() {
        vec![halfproc_migrate::reader_threads(u64::MAX)]
    } else {
        o.threads.clone()
    };
    let prefault = if o.prefault.is_empty() {
        vec![halfproc_migrate::prefault_enabled()]
    } else {
        o.prefault.clone()
    };
    let configs: Vec<(usize, bool)> = threads
        .iter()
        .flat_map(|&t| prefault.iter().map(move |&p| (t, p)))
        .collect();
    for &mib in &o.sizes {
        let (pid, addr) = match spawn_holder(mib) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("halfproc-bench migrate: {e}");
                return 1;
            }
        };
        let mut accs: Vec<Acc> = configs.iter().map(|_| Acc::default()).collect();
        let mut memcpy = Memcpy::new(mib);
        let mut mc = Vec::with_capacity(o.reps);
        for _ in 0..o.reps {
            mc.push(memcpy.time());
            for (acc, &(t, pf)) in accs.iter_mut().zip(&configs) {
                halfproc_migrate::set_reader_threads(t);
                halfproc_migrate::set_prefault(pf);
                if o.phases {
                    halfproc_migrate::phases::start();
                }
                let r = one(pid, addr, mib, o.memfd);
                acc.add_phases(halfproc_migrate::phases::take());
                match r {
                    Ok(r) => acc.add(r),
                    Err(e) => {
                        kill_reap(pid);
                        eprintln!(
                            "halfproc-bench migrate: {mib} MiB, {t} threads, prefault {pf}: {e}"
                        );
                        return 1;
                    }
                }
            }
        }
        kill_reap(pid);
        drop(memcpy);
        let mut fault = match fault_in_times(mib, o.reps) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("halfproc-bench migrate: {e}");
                return 1;
            }
        };
        let (_, fmed) = min_median(&mut fault);
        let (mmin, mmed) = min_median(&mut mc);
        for (acc, &(t, pf)) in accs.iter_mut().zip(&configs) {
            let (cmin, cmed) = min_median(&mut acc.times);
            let (fzmin, fzmed) = min_median(&mut acc.frozen);
            let (_, dmed) = min_median(&mut acc.dumps);
            let (_, tcmed) = min_median(&mut acc.touch_copy);
            let (_, tomed) = min_median(&mut acc.touch_orig);
            let img = acc.bytes as f64 / 1048576.0;
            let cr_bw = img / (cmed / 1e3);
            let mc_bw = mib as f64 / (mmed / 1e3);
            // Best against best: image bytes / min(c+r) over MiB / min(memcpy).
            let best = (img / cmin) / (mib as f64 / mmin);
            let frz = (img / fzmed) / (mib as f64 / mmed);
            let frz_best = (img / fzmin) / (mib as f64 / mmin);
            let pf = u8::from(pf);
            println!(
                "{mib:>6} {t:>3} {pf:>2} {img:>10.1} {cmin:>10.1} {cmed:>10.1} {fzmin:>10.1} {fzmed:>10.1} {dmed:>10.1} {cr_bw:>12.0} {mmed:>10.1}ms {mc_bw:>12.0} {:>7.3} {best:>9.3} {frz:>9.3} {frz_best:>9.3} {fmed:>10.1}ms {tcmed:>10.1}ms {tomed:>10.1}ms",
                cr_bw / mc_bw
            );
            for (name, v) in &mut acc.phases {
                let (min, med) = min_median(v);
                println!(
                    "{:>8}phase {name:<18} min {min:>9.2} ms  median {med:>9.2} ms",
                    ""
                );
            }
        }
    }
    println!(
        "c+r = dump into memory (refusal checks, prefault, freeze, read) (+ memfd) + \
         restore, from the call to the restore's return; frozen = from the seize to the \
         restore's return (a local stop-and-copy migration's frozen time); pf: the \
         image's memory faulted in before the seize (1) or not (0); ratio: medians, \
         ratio min: minima; ratio frz / frz min: frozen medians / minima; fault-in: MADV_POPULATE_WRITE of SIZE MiB of fresh 4 KiB pages, \
         which a restore that copies pays; touch copy / orig (medians): the restored copy \
         (its pages moved into place, the image dropped) / the original writing one byte \
         of every page of its SIZE MiB for the first time since the restore: what the \
         copy pays later for pages moved rather than copied (not in c+r)"
    );
    0
}
