// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! `qemu::run` end to end with a stand-in for qemu: a shell script that
//! prints a console log with `/init`'s markers and writes the status port
//! file, as a guest would. Checks the verdict and both result files.

use halfproc_harness::qemu::{run, RunOpts};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// One test at a time. Each writes a script and then executes it; a test
/// running beside it that forks (to start its own fake qemu) while the
/// script is still open for writing gives the child a copy of that
/// descriptor until the child's own exec, and the exec of the script fails
/// with `ETXTBSY` ("Text file busy": seen once in a fresh-clone CI run,
/// 2026-11-25).
static SERIAL: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fresh directory holding a fake qemu that prints `console` and reports
/// exit status `status`.
fn fake_qemu(tag: &str, console: &str, status: i32) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("halfproc-run-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("console"), console).unwrap();
    for f in ["bzImage", "initrd"] {
        std::fs::write(dir.join(f), "").unwrap();
    }
    // The status port is the argument after the second `-serial`.
    let script = format!(
        "#!/bin/sh\ncat '{}'\nfor a; do case \"$a\" in file:*) st=\"${{a#file:}}\" ;; esac; done\n\
         echo HALFPROC_EXIT={status} >\"$st\"\n",
        dir.join("console").display()
    );
    let q = dir.join("qemu");
    std::fs::write(&q, script).unwrap();
    std::fs::set_permissions(&q, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn opts(dir: &Path, expected: &[&str]) -> RunOpts {
    RunOpts {
        qemu: dir.join("qemu").display().to_string(),
        kernel: dir.join("bzImage"),
        initrd: dir.join("initrd"),
        append: "halfproc.mode=test".into(),
        timeout: Duration::from_secs(30),
        log: dir.join("test.log"),
        share: None,
        memory_mb: 256,
        cpus: 1,
        cpu: "max".into(),
        echo: false,
        echo_prefix: String::new(),
        net: None,
        disk: None,
        expected: expected.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn a_clean_run_writes_tagged_results() {
    let _serial = one_at_a_time();
    let console = include_str!("fixtures/guest-suite.log");
    let dir = fake_qemu("clean", console, 0);
    let v = run(&opts(&dir, &["hp_sets", "mm/mremap_test"])).unwrap();
    assert!(v.passed(), "{:#?}", v.causes);
    assert_eq!(
        std::fs::read_to_string(dir.join("test.log")).unwrap(),
        console
    );
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("test.results.json")).unwrap())
            .unwrap();
    assert_eq!(j["verdict"], "pass");
    assert_eq!((&j["passed"], &j["skipped"]), (&26.into(), &2.into()));
    let tests = j["tests"].as_array().unwrap();
    let xfail = tests
        .iter()
        .find(|t| {
            t["directive"]
                .as_str()
                .is_some_and(|d| d.starts_with("XFAIL"))
        })
        .unwrap();
    assert_eq!(xfail["program"], "mm/mremap_test");
    assert_eq!(
        xfail["name"],
        "mremap - Source and Destination Regions Overlapping"
    );
    assert_eq!(
        (&xfail["status"], &xfail["plan"]),
        (&"pass".into(), &3.into())
    );
    let names: Vec<_> = j["programs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "init",
            "hp_sets",
            "hp_dm",
            "rt/guest_tests",
            "mm/madv_populate",
            "mm/mdwe_test",
            "mm/mremap_test"
        ]
    );
    let tap = std::fs::read_to_string(dir.join("test.tap")).unwrap();
    assert!(
        tap.starts_with("TAP version 13\n1..28\nok 1 init.no_module_errnos\n"),
        "{tap}"
    );
    assert!(
        tap.contains("ok 16 rt/guest_tests: backend is detected and reported # 4 ms\n"),
        "{tap}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_missing_program_fails_the_run_and_the_files_say_so() {
    let _serial = one_at_a_time();
    let dir = fake_qemu("missing", "TAP version 13\nok 1 init.module_loads\n", 0);
    let v = run(&opts(&dir, &["hp_sets"])).unwrap();
    assert!(!v.passed());
    assert!(v
        .summary_line()
        .starts_with("1 passed, 1 failed, 0 skipped; 0 kernel reports; FAIL"));
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("test.results.json")).unwrap())
            .unwrap();
    assert_eq!(j["verdict"], "fail");
    assert_eq!(
        j["tests"][1],
        serde_json::json!({"program": "hp_sets", "status": "fail", "plan": null,
            "name": "hp_sets.missing: expected program never started", "synthetic": true})
    );
    let tap = std::fs::read_to_string(dir.join("test.tap")).unwrap();
    assert!(
        tap.ends_with("not ok 2 hp_sets.missing: expected program never started\n"),
        "{tap}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// `pair::run` with a fake qemu per role: each guest's console is logged at
/// its own path and judged on its own; a kernel report on B fails B only.
/// The fake refuses to start without its `-netdev` and its role.
#[test]
fn a_pair_is_judged_guest_by_guest() {
    let _serial = one_at_a_time();
    use halfproc_harness::pair;
    let dir = fake_qemu("pair", "", 0);
    std::fs::write(
        dir.join("a.console"),
        "TAP version 13\nok 1 init.net_eth0_10.0.2.1\n",
    )
    .unwrap();
    std::fs::write(dir.join("b.console"), include_str!("fixtures/oops.log")).unwrap();
    let script = format!(
        "#!/bin/sh\nrole=\nnet=\nfor a; do case \"$a\" in file:*) st=\"${{a#file:}}\" ;; \
         *halfproc.role=a*) role=a ;; *halfproc.role=b*) role=b ;; dgram,*) net=1 ;; esac; done\n\
         [ -n \"$role\" ] && [ -n \"$net\" ] || exit 3\n\
         cat '{}'/$role.console\necho HALFPROC_EXIT=0 >\"$st\"\n",
        dir.display()
    );
    std::fs::write(dir.join("qemu"), script).unwrap();
    let base = opts(&dir, &[]);
    let ports = pair::free_udp_ports().unwrap();
    let a = pair::guest(&base, 'a', dir.join("a.log"), ports);
    let b = pair::guest(&base, 'b', dir.join("b.log"), ports);
    let (va, vb) = pair::run(&a, &b).unwrap();
    assert!(va.passed(), "{:#?}", va.causes);
    assert!(!vb.passed());
    assert!(
        vb.summary_line().contains("1 kernel report"),
        "{}",
        vb.summary_line()
    );
    assert!(std::fs::read_to_string(dir.join("a.log"))
        .unwrap()
        .contains("init.net_eth0_10.0.2.1"));
    assert!(dir.join("b.results.json").exists());
    std::fs::remove_dir_all(dir).unwrap();
}
