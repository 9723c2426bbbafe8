//! Helpers of the node daemon tests: daemons on loopback ports, `halfproc
//! run` clients with their output in files, migrations, C test programs.
#![allow(dead_code)] // each test binary uses a subset

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

#[path = "../../../../runtime/halfproc-migrate/tests/common/input.rs"]
mod input;
#[allow(unused_imports)] // each test binary uses a subset
pub use input::input_file;

/// `halfproc` holding the tests' shared secret (as the daemons of
/// [`Daemon::start`] do: they migrate to each other), control sockets in
/// this test binary's [`run_dir`].
pub fn halfproc() -> Command {
    let mut c = halfproc_plain();
    c.env("HALFPROC_NODE_SECRET_FILE", test_secret());
    c
}

/// `halfproc` without a secret, control sockets in [`run_dir`].
pub fn halfproc_plain() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_halfproc"));
    c.env_remove("HALFPROC_NODE_SECRET_FILE")
        .env_remove("HALFPROC_NODE")
        .env("HALFPROC_RUN_DIR", run_dir());
    c
}

/// The nodes' shared secret of this test binary (a file, mode 0600).
pub fn test_secret() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        use std::os::unix::fs::OpenOptionsExt;
        let p = std::env::temp_dir().join(format!("halfproc-test-secret-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&p)
            .unwrap();
        std::io::Write::write_all(&mut f, b"halfproc tests: 0123456789abcdef\n").unwrap();
        p
    })
}

/// Where this test binary's daemons put their default control sockets
/// (`$HALFPROC_RUN_DIR`; created by the first daemon).
pub fn run_dir() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| std::env::temp_dir().join(format!("halfproc-test-run-{}", std::process::id())))
}

/// A node daemon on 127.0.0.1 with a port of its own; SIGTERM on drop.
pub struct Daemon {
    child: Child,
    pub addr: String,
    /// Its unix control socket.
    pub control: PathBuf,
}

impl Daemon {
    /// With the tests' shared secret.
    pub fn start() -> Daemon {
        Daemon::start_with(&[])
    }

    /// Without a secret (loopback only; TCP serves `ps` only).
    pub fn start_open() -> Daemon {
        Daemon::start_cmd(halfproc_plain(), &[])
    }

    /// With extra arguments of `halfproc node`.
    pub fn start_with(args: &[&str]) -> Daemon {
        Daemon::start_env(args, &[])
    }

    /// With extra arguments and environment variables.
    pub fn start_env(args: &[&str], env: &[(&str, &str)]) -> Daemon {
        Daemon::start_wrapped(&[], args, env)
    }

    fn start_cmd(mut cmd: Command, args: &[&str]) -> Daemon {
        let mut child = cmd
            .args(["node", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start halfproc node");
        // Three lines: the address, the backend, the control socket.
        let mut r = BufReader::new(child.stdout.take().unwrap());
        let mut lines = [String::new(), String::new(), String::new()];
        for l in &mut lines {
            r.read_line(l).unwrap();
        }
        let word = |l: &str, n: usize| {
            l.split_whitespace()
                .nth(n)
                .unwrap_or_else(|| panic!("no word {n} in {l:?}"))
                .to_string()
        };
        Daemon {
            addr: word(&lines[0], 4),
            control: PathBuf::from(word(&lines[2], 4)),
            child,
        }
    }

    /// Run by `wrapper` (a command that ends by executing its arguments,
    /// e.g. `unshare -m sh -c '...; exec "$0" "$@"'`), with extra arguments
    /// and environment variables.
    pub fn start_wrapped(wrapper: &[&str], args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let mut cmd = halfproc();
        if let Some((first, rest)) = wrapper.split_first() {
            let mut c = Command::new(first);
            c.args(rest).arg(cmd.get_program());
            for (k, v) in cmd.get_envs() {
                match v {
                    Some(v) => c.env(k, v),
                    None => c.env_remove(k),
                };
            }
            cmd = c;
        }
        cmd.envs(env.iter().copied());
        Daemon::start_cmd(cmd, args)
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Whether the daemon process has exited (and its status code).
    pub fn exited(&mut self) -> Option<Option<i32>> {
        self.child.try_wait().unwrap().map(|s| s.code())
    }

    /// SIGKILL, as a crashed machine would.
    pub fn kill(&mut self) {
        signal(self.pid(), libc::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        signal(self.pid(), libc::SIGTERM);
        let _ = self.child.wait();
    }
}

/// A node daemon in a pid namespace of its own, as another machine would
/// have its own pids (root only). Its init is a shell that reaps what is
/// orphaned there (a moved worker, killed after its parent). `unshare
/// --fork` and that shell ignore SIGTERM: dropped, it is killed, and its
/// namespace with it.
pub struct NodeInNamespace(pub Daemon);

impl NodeInNamespace {
    pub fn start() -> NodeInNamespace {
        NodeInNamespace(Daemon::start_wrapped(
            &[
                "unshare",
                "--pid",
                "--fork",
                "--mount-proc",
                "--kill-child",
                "sh",
                "-c",
                "\"$0\" \"$@\" & wait",
            ],
            &[],
            &[],
        ))
    }
}

impl std::ops::Deref for NodeInNamespace {
    type Target = Daemon;
    fn deref(&self) -> &Daemon {
        &self.0
    }
}

impl Drop for NodeInNamespace {
    fn drop(&mut self) {
        self.0.kill();
    }
}

/// Whether the tests run as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The children of `pid` as `/proc` of this pid namespace lists them.
pub fn children(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|k| k.parse().ok())
        .collect()
}

/// `halfproc run` on `d` of Debian's stress-ng with one `cpu` worker that
/// runs until its timeout (600 s, or a SIGALRM to the worker), verbose,
/// once it has its worker: (the client, the program's pid, the worker's).
pub fn run_stress_ng(d: &Daemon, dir: &Path, name: &str) -> (Running, i32, i32) {
    run_stress_ng_at(d, "/usr/bin/stress-ng", dir, name)
}

/// [`run_stress_ng`] of the stress-ng binary at `bin`.
pub fn run_stress_ng_at(d: &Daemon, bin: &str, dir: &Path, name: &str) -> (Running, i32, i32) {
    let argv = [
        bin,
        "--cpu",
        "1",
        "--cpu-method",
        "fft",
        "--timeout",
        "600",
        "--metrics-brief",
        "-v",
    ];
    let r = run(d, &argv, None, dir, name);
    let pid = r.pid();
    let worker = first_child(pid);
    (r, pid, worker)
}

/// The first child `pid` forks (waits up to 20 s): a stress-ng's worker.
pub fn first_child(pid: i32) -> i32 {
    let t = Instant::now();
    loop {
        if let Some(&c) = children(pid).first() {
            return c;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "pid {pid} forked no child"
        );
        sleep_ms(5);
    }
}

pub fn signal(pid: i32, sig: i32) {
    // SAFETY: sending a signal has no memory-safety preconditions.
    unsafe { libc::kill(pid, sig) };
}

/// A `halfproc run` client, stdout and stderr in files.
pub struct Running {
    child: Child,
    pid_file: PathBuf,
    out: PathBuf,
    err: PathBuf,
}

impl Running {
    /// The program's pid on its first node (waits for the pid file).
    pub fn pid(&self) -> i32 {
        let t = Instant::now();
        loop {
            if let Ok(s) = std::fs::read_to_string(&self.pid_file) {
                if let Ok(p) = s.trim().parse() {
                    return p;
                }
            }
            assert!(t.elapsed() < Duration::from_secs(20), "no pid file");
            sleep_ms(5);
        }
    }

    /// Waits (up to 20 s) until the program's relayed output holds `text`.
    pub fn wait_output(&self, text: &str) {
        let t = Instant::now();
        while !std::fs::read_to_string(&self.out).is_ok_and(|o| o.contains(text)) {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "no {text:?} in the output"
            );
            sleep_ms(5);
        }
    }

    /// Waits for `run` to exit: (stdout bytes, exit code, stderr text).
    pub fn finish(mut self) -> (Vec<u8>, i32, String) {
        let st = self.child.wait().unwrap();
        (
            std::fs::read(&self.out).unwrap(),
            st.code().unwrap_or(-1),
            std::fs::read_to_string(&self.err).unwrap(),
        )
    }
}

/// `halfproc run --node D -- argv` with stdin from a file (or /dev/null).
pub fn run(d: &Daemon, argv: &[&str], stdin: Option<&Path>, dir: &Path, name: &str) -> Running {
    run_via(halfproc(), d, argv, stdin, dir, name)
}

/// [`run`] by `client` (e.g. [`halfproc_plain`]).
pub fn run_via(
    client: Command,
    d: &Daemon,
    argv: &[&str],
    stdin: Option<&Path>,
    dir: &Path,
    name: &str,
) -> Running {
    let mut tail = vec![std::ffi::OsStr::new("--")];
    tail.extend(argv.iter().map(std::ffi::OsStr::new));
    attached(client, "run", d, &tail, stdin, dir, name)
}

/// `halfproc restore --node D IMG` in the background, attached as
/// [`run`] is (stdin from /dev/null).
pub fn restore_attached(d: &Daemon, img: &Path, dir: &Path, name: &str) -> Running {
    attached(
        halfproc(),
        "restore",
        d,
        &[img.as_os_str()],
        None,
        dir,
        name,
    )
}

/// `client SUB --node D --pid-file DIR/NAME.pid TAIL`, its stdin from a
/// file (or /dev/null), stdout and stderr into `DIR/NAME.out`, `.err`.
fn attached(
    client: Command,
    sub: &str,
    d: &Daemon,
    tail: &[&std::ffi::OsStr],
    stdin: Option<&Path>,
    dir: &Path,
    name: &str,
) -> Running {
    let input = match stdin {
        Some(p) => Stdio::from(File::open(p).unwrap()),
        None => Stdio::null(),
    };
    attached_with(client, sub, d, tail, input, dir, name)
}

/// [`attached`] with `stdin` as given.
fn attached_with(
    mut client: Command,
    sub: &str,
    d: &Daemon,
    tail: &[&std::ffi::OsStr],
    input: Stdio,
    dir: &Path,
    name: &str,
) -> Running {
    let pid_file = dir.join(format!("{name}.pid"));
    let out = dir.join(format!("{name}.out"));
    let err = dir.join(format!("{name}.err"));
    let child = client
        .args([sub, "--node", &d.addr, "--pid-file"])
        .arg(&pid_file)
        .args(tail)
        .stdin(input)
        .stdout(File::create(&out).unwrap())
        .stderr(File::create(&err).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("start halfproc {sub}: {e}"));
    Running {
        child,
        pid_file,
        out,
        err,
    }
}

/// The stdin of a `halfproc run` started by [`run_held`]: its input is
/// written, then the pipe stays open until [`Held::close`], so a program
/// that reads stdin to EOF cannot finish before the test is done with it.
pub struct Held {
    close: std::sync::mpsc::Sender<()>,
    writer: std::thread::JoinHandle<()>,
}

impl Held {
    /// EOF for the program.
    pub fn close(self) {
        let _ = self.close.send(());
        self.writer.join().unwrap();
    }
}

/// [`run`] with stdin from a pipe of the test: `input` (a file, or nothing),
/// then EOF only at [`Held::close`].
pub fn run_held(
    d: &Daemon,
    argv: &[&str],
    input: Option<&Path>,
    dir: &Path,
    name: &str,
) -> (Running, Held) {
    run_held_via(halfproc(), d, argv, input, dir, name)
}

/// [`run_held`] by `client` (e.g. [`halfproc_plain`]).
pub fn run_held_via(
    client: Command,
    d: &Daemon,
    argv: &[&str],
    input: Option<&Path>,
    dir: &Path,
    name: &str,
) -> (Running, Held) {
    let mut tail = vec![std::ffi::OsStr::new("--")];
    tail.extend(argv.iter().map(std::ffi::OsStr::new));
    let mut running = attached_with(client, "run", d, &tail, Stdio::piped(), dir, name);
    let mut pipe = running.child.stdin.take().unwrap();
    let data = input.map(|p| std::fs::read(p).unwrap()).unwrap_or_default();
    let (close, closed) = std::sync::mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        pipe.write_all(&data).unwrap();
        let _ = closed.recv();
        drop(pipe);
    });
    (running, Held { close, writer })
}

/// The program run directly: (stdout, exit code).
pub fn reference(argv: &[&str], stdin: Option<&Path>) -> (Vec<u8>, i32) {
    let input = match stdin {
        Some(p) => Stdio::from(File::open(p).unwrap()),
        None => Stdio::null(),
    };
    let o = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(input)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    (o.stdout, o.status.code().unwrap_or(-1))
}

/// A successful migration: new pid, frozen time reported by the CLI, and
/// all it said on stderr (progress).
#[derive(Debug)]
pub struct Migrated {
    pub pid: i32,
    pub frozen_ms: f64,
    pub said: String,
}

/// `halfproc migrate --node FROM PID --to TO`: the new pid, or stderr.
pub fn migrate(from: &str, pid: i32, to: &str) -> Result<Migrated, String> {
    let o: Output = halfproc()
        .args(["migrate", "--node", from, &pid.to_string(), "--to", to])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    if o.status.success() {
        let pid = String::from_utf8_lossy(&o.stdout)
            .trim()
            .parse()
            .map_err(|_| format!("no pid printed; stderr: {err}"))?;
        let frozen_ms = err
            .rsplit("frozen ")
            .next()
            .and_then(|s| s.split(" ms").next())
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no frozen time in {err:?}"))?;
        Ok(Migrated {
            pid,
            frozen_ms,
            said: err,
        })
    } else {
        Err(format!("exit {:?}: {err}", o.status.code()))
    }
}

/// A migration of a program to a destination that accepts the connection
/// and stays silent until released: the program is "being migrated".
pub struct HeldMigration {
    client: Child,
    release: std::sync::mpsc::Sender<()>,
    holder: std::thread::JoinHandle<()>,
}

/// Starts `halfproc migrate` of `pid` on `a` to a silent destination and
/// returns once `ps` shows the program as being migrated.
pub fn held_migration(a: &Daemon, pid: i32) -> HeldMigration {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let to = silent.local_addr().unwrap().to_string();
    let (release, held) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let (c, _) = silent.accept().unwrap();
        let _ = held.recv();
        drop(c);
    });
    let client = halfproc()
        .args(["migrate", "--node", &a.addr, &pid.to_string(), "--to", &to])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let line = format!("{pid:>8}  ");
    while !ps(a)
        .lines()
        .any(|l| l.starts_with(&line) && l.contains("being migrated"))
    {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "migration never showed in ps"
        );
        sleep_ms(10);
    }
    HeldMigration {
        client,
        release,
        holder,
    }
}

impl HeldMigration {
    /// The destination hangs up; returns the migrate client's (exit code, stderr).
    pub fn release(self) -> (Option<i32>, String) {
        self.release.send(()).unwrap();
        self.holder.join().unwrap();
        let o = self.client.wait_with_output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }
}

/// `halfproc ps --node D` output.
pub fn ps(d: &Daemon) -> String {
    let o = halfproc().args(["ps", "--node", &d.addr]).output().unwrap();
    assert!(o.status.success(), "ps failed");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// State letter of a process from /proc.
pub fn proc_state(pid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit(')')
        .next()?
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// Waits (30 s at most) until `pid`'s address space (`VmSize`) reaches
/// `bytes`: a program has mapped what a test means to move (xz's encoder
/// is allocated some time after it starts, later on loaded cores).
pub fn wait_vm_size(pid: i32, bytes: u64) {
    let t = std::time::Instant::now();
    loop {
        let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let vm = st
            .lines()
            .find(|l| l.starts_with("VmSize:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024;
        if vm >= bytes {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "pid {pid} did not map {bytes} bytes in 30 s (VmSize {vm})"
        );
        sleep_ms(10);
    }
}

/// Pids of the live (not zombie) processes whose comm is `comm`.
pub fn named(comm: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == comm)
                && proc_state(p).is_some_and(|s| s != 'Z')
        })
        .collect()
}

/// `halfproc ARGS` as user `uid` (setpriv, no supplementary groups).
pub fn as_user(uid: u32) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={uid}"),
        &format!("--regid={uid}"),
        "--clear-groups",
        "--",
        env!("CARGO_BIN_EXE_halfproc"),
    ]);
    c
}

/// `argv` run through the control socket `sock` by `cmd`'s user (`cmd` is
/// a `halfproc`), its pid written to `pid_file` (removed first), its
/// output to `stdout`: the client and the program's pid, once known (30 s
/// at most).
pub fn run_via_control(
    mut cmd: Command,
    sock: &Path,
    pid_file: &Path,
    argv: &[&str],
    stdout: Stdio,
) -> (Child, i32) {
    let _ = std::fs::remove_file(pid_file);
    let run = cmd
        .args(["run", "--node", &format!("unix:{}", sock.display())])
        .arg("--pid-file")
        .arg(pid_file)
        .arg("--")
        .args(argv)
        .stdin(Stdio::piped())
        .stdout(stdout)
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let pid = loop {
        if let Some(p) = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "no pid in {} after 30 s: {argv:?} did not start",
            pid_file.display()
        );
        sleep_ms(5);
    };
    (run, pid)
}

pub fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

fn build_c(src: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("halfproc-node-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(name);
    let st = Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&out)
        .arg(src)
        .args(extra)
        .status()
        .expect("run cc");
    assert!(st.success(), "cc failed for {}", src.display());
    out
}

/// The migration engine's C test program (globals, printf, malloc churn).
pub fn prog() -> &'static str {
    static P: OnceLock<PathBuf> = OnceLock::new();
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../runtime/halfproc-migrate/tests/prog.c");
    P.get_or_init(|| build_c(&src, "prog", &[]))
        .to_str()
        .unwrap()
}

/// The migration engine's pending-signal test program (`sigq.c`).
pub fn sigq() -> &'static str {
    static P: OnceLock<PathBuf> = OnceLock::new();
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../runtime/halfproc-migrate/tests/sigq.c");
    P.get_or_init(|| build_c(&src, "sigq", &[]))
        .to_str()
        .unwrap()
}

/// tests/node_targets.c.
pub fn targets() -> &'static str {
    static P: OnceLock<PathBuf> = OnceLock::new();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node_targets.c");
    P.get_or_init(|| build_c(&src, "node_targets", &[]))
        .to_str()
        .unwrap()
}

/// tests/yielder.c, linked with the runtime's static C library
/// (`halfproc-c` is a dev-dependency: cargo builds `libhalfproc_c.a` into
/// the test's own `deps` directory).
pub fn yielder() -> &'static str {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let deps = std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf();
        let lib = deps.join("libhalfproc_c.a");
        assert!(lib.exists(), "{} was not built", lib.display());
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        let inc = here.join("../../runtime/halfproc-c/include");
        let (inc, lib) = (inc.to_str().unwrap(), lib.to_str().unwrap());
        build_c(
            &here.join("tests/yielder.c"),
            "yielder",
            &["-I", inc, lib, "-lpthread", "-ldl", "-lm", "-lrt"],
        )
    })
    .to_str()
    .unwrap()
}

/// A Debian tool by name.
pub fn tool(name: &str) -> &'static str {
    for dir in ["/usr/bin", "/bin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return Box::leak(p.to_string_lossy().into_owned().into_boxed_str());
        }
    }
    panic!("{name} is not installed (apt-get install gzip bzip2 xz-utils coreutils stress-ng)");
}

/// Asserts equal bytes, naming the first difference.
pub fn assert_same(what: &str, got: &[u8], want: &[u8]) {
    if got == want {
        return;
    }
    let i = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    panic!(
        "{what}: output differs at byte {i} (got {} bytes, want {})",
        got.len(),
        want.len()
    );
}
