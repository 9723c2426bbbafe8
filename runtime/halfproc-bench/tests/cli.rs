// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The binary's exit codes: 2 and a message naming the problem for bad
//! arguments, before anything is measured; 0 for a good run; 1 for a run a
//! strategy broke.

use std::process::Command;

fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_halfproc-bench"));
    cmd.args(args);
    cmd
}

/// `bench copy` of `strategies` at `sizes`, one repetition on one core.
fn tiny_copy<'a>(sizes: &'a str, strategies: &'a str) -> Vec<&'a str> {
    vec![
        "copy",
        "--sizes",
        sizes,
        "--strategies",
        strategies,
        "--reps",
        "1",
        "--placement",
        "same",
        "--out",
        "-",
    ]
}

fn run(args: &[&str]) -> (i32, String, String) {
    run_command(command(args))
}

fn run_command(mut cmd: Command) -> (i32, String, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn size_out_of_range() {
    let (code, _, err) = run(&["copy", "--sizes", "6..30", "--out", "-"]);
    assert_eq!(code, 2);
    assert!(err.contains("2^30 bytes is out of range"), "{err}");
    let (code, _, err) = run(&["copy", "--sizes", "3"]);
    assert_eq!(code, 2);
    assert!(err.contains("out of range"), "{err}");
}

#[test]
fn unknown_strategy() {
    let (code, _, err) = run(&["copy", "--strategies", "shared,telepathy"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown strategy `telepathy`"), "{err}");
    assert!(
        err.contains("double-copy-pipelined"),
        "lists the known names: {err}"
    );
}

#[test]
fn unknown_subcommand_and_option() {
    let (code, _, err) = run(&["frobnicate"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown subcommand `frobnicate`"), "{err}");
    let (code, _, err) = run(&["mm", "--mmaps", "-3"]);
    assert_eq!(code, 2);
    assert!(err.contains("--mmaps"), "{err}");
    let (code, out, _) = run(&["copy", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--strategies"));
}

#[test]
fn tiny_run_succeeds() {
    let mut args = tiny_copy("6,10", "shared,tcp");
    args.push("--quiet");
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("median time"), "{out}");
}

/// Installs, in the child before exec, a seccomp filter that makes
/// `process_vm_readv`/`writev` fail with EPERM, as a container runtime or a
/// Yama policy would.
fn deny_cma(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    let ins = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let filter = [
        ins(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        ins(JEQ_K, 2, 0, libc::SYS_process_vm_readv as u32),
        ins(JEQ_K, 1, 0, libc::SYS_process_vm_writev as u32),
        ins(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
        ins(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
    ];
    // SAFETY: the closure runs in the forked child before exec and only makes
    // two system calls on data it owns (async-signal-safe).
    unsafe {
        cmd.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    0,
                    &prog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
}

/// A refusal the benchmark meets mid-run is a failure (exit 1, named), not
/// "unavailable": the backend offers CMA, the policy forbids it.
#[test]
fn permission_denied_mid_run_fails_the_run() {
    let mut args = tiny_copy("12", "cma");
    args.extend(["--backend", "portable"]);
    let mut cmd = command(&args);
    deny_cma(&mut cmd);
    let (code, _, err) = run_command(cmd);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("FAILED cma"), "{err}");
    assert!(!err.contains("UNAVAILABLE"), "{err}");
}
