//! Mapped files that are not the same where a program moves to. The
//! restore maps a file again when it is identical there and copies it
//! otherwise: a binary replaced under its name while the program runs (a
//! rebuild) is carried whole by the source, like a deleted one; a file
//! that differs at the destination (another machine with another version,
//! modelled by a mount namespace) is sent by the source on the
//! destination's request. Output and exit status of an unmigrated run.
//! Executables are copied with cp(1), never written by this process: a
//! write descriptor of ours inherited by a child another test forks
//! meanwhile would make the exec fail with ETXTBSY.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

fn cp(from: &str, to: &Path) {
    assert!(Command::new("cp")
        .arg(from)
        .arg(to)
        .status()
        .unwrap()
        .success());
}

#[test]
fn a_program_whose_binary_was_replaced_moves_with_its_text() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = tmp.path().join("prog-v1");
    cp(prog(), &exe);
    let argv = [exe.to_str().unwrap(), "40000", "wait"];
    let (want, want_code) = reference(&argv, None);
    let nodes = [Daemon::start(), Daemon::start()];
    let (r, held) = run_held(&nodes[0], &argv, None, tmp.path(), "replaced");
    let mut pid = r.pid();
    sleep_ms(100);
    // Another file under the same name; the running program keeps the old
    // (its maps line now says "(deleted)": carried whole).
    let new = tmp.path().join("prog-v2");
    cp("/bin/true", &new);
    std::fs::rename(&new, &exe).unwrap();
    let m = migrate(&nodes[0].addr, pid, &nodes[1].addr).expect("migration with a replaced binary");
    pid = m.pid;
    // And back: its text is private memory now, carried like the rest.
    sleep_ms(50);
    migrate(&nodes[1].addr, pid, &nodes[0].addr).expect("and back");
    held.close();
    let (out, code, err) = r.finish();
    assert_same("replaced binary", &out, &want);
    assert_eq!(code, want_code, "run's stderr: {err}");
}

/// The path of the program's binary names another file while its mapping
/// still shows that path (another file bind-mounted over it: no
/// "(deleted)"): the dump sees the inodes differ and carries the text.
/// Before, the image named the other file and the copy ran its bytes.
#[test]
fn a_binary_hidden_under_its_name_moves_with_its_text() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: needs root to bind-mount");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let exe = tmp.path().join("prog-hidden");
    cp(prog(), &exe);
    let argv = [exe.to_str().unwrap(), "40000", "wait"];
    let (want, want_code) = reference(&argv, None);
    let nodes = [Daemon::start(), Daemon::start()];
    let (r, held) = run_held(&nodes[0], &argv, None, tmp.path(), "hidden");
    let pid = r.pid();
    sleep_ms(100);
    let mount = |args: &[&str]| {
        assert!(Command::new(args[0])
            .args(&args[1..])
            .status()
            .unwrap()
            .success())
    };
    let e = exe.to_str().unwrap();
    mount(&["mount", "--bind", "/bin/true", e]);
    let moved = migrate(&nodes[0].addr, pid, &nodes[1].addr);
    mount(&["umount", e]);
    let m = moved.expect("migration with a hidden binary");
    sleep_ms(50);
    migrate(&nodes[1].addr, m.pid, &nodes[0].addr).expect("and back");
    held.close();
    let (out, code, err) = r.finish();
    assert_same("hidden binary", &out, &want);
    assert_eq!(code, want_code, "run's stderr: {err}");
}

#[test]
fn a_file_that_differs_at_the_destination_is_copied_from_the_source() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: needs root for a mount namespace");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (data, other) = (tmp.path().join("data.bin"), tmp.path().join("other.bin"));
    let pattern = |k: u8| {
        (0..256 * 1024u32)
            .map(|i| (i as u8) ^ k)
            .collect::<Vec<u8>>()
    };
    std::fs::write(&data, pattern(0x5a)).unwrap();
    std::fs::write(&other, pattern(0xa5)).unwrap();
    let argv = [targets(), "mapfile", "300", "wait", data.to_str().unwrap()];
    let (want, want_code) = reference(&argv, None);
    let a = Daemon::start();
    // B sees another file under the same name.
    let script = format!(
        "mount --bind '{}' '{}' && exec \"$0\" \"$@\"",
        other.display(),
        data.display()
    );
    let b = Daemon::start_wrapped(
        &[
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
        ],
        &[],
        &[],
    );
    let (r, held) = run_held(&a, &argv, None, tmp.path(), "differs");
    let pid = r.pid();
    sleep_ms(100);
    let m = migrate(&a.addr, pid, &b.addr).expect("migration to a node with another file");
    assert!(
        m.said
            .contains("1 mapped file range(s) differ there: sent their contents (0.2 MiB)"),
        "{}",
        m.said
    );
    held.close();
    let (out, code, err) = r.finish();
    assert_same("file that differs there", &out, &want);
    assert_eq!(code, want_code, "run's stderr: {err}");
}
