//! A program whose blocked signals are pending (both queues, several
//! real-time instances with sigqueue values, from itself and from other
//! processes: `runtime/halfproc-migrate/tests/sigq.c`) started with
//! `halfproc run` and migrated 20 times between two node daemons: after
//! the moves it unblocks them and reports every delivery in order; output
//! and exit status equal an unmigrated run's. Its SIGCONT handler sees none
//! of the daemons' SIGCONTs that resume each copy.

mod common;

use common::*;

const MIGRATIONS: usize = 20;

/// 20 migrations between two daemons started with `env`.
fn migrated_20_times(env: &[(&str, &str)]) {
    let tmp = tempfile::tempdir().unwrap();
    let argv = [sigq(), "20000", "wait"];
    let (want, want_code) = reference(&argv, None);
    let text = String::from_utf8_lossy(&want);
    assert!(
        text.contains("deliveries=19 sigcont=0"),
        "reference: {text}"
    );
    let nodes = [Daemon::start_env(&[], env), Daemon::start_env(&[], env)];
    let (r, held) = run_held(&nodes[0], &argv, None, tmp.path(), "sigq");
    let mut pid = r.pid();
    // Its children (senders) are gone once it says so.
    r.wait_output("queued\n");
    let mut here = 0;
    for i in 0..MIGRATIONS {
        sleep_ms(10);
        let to = 1 - here;
        pid = migrate(&nodes[here].addr, pid, &nodes[to].addr)
            .unwrap_or_else(|e| panic!("sigq: migration {i} of pid {pid}: {e}"))
            .pid;
        here = to;
    }
    held.close();
    let (out, code, err) = r.finish();
    assert_same("sigq", &out, &want);
    assert_eq!(code, want_code, "sigq: exit status (run's stderr: {err})");
}

#[test]
fn pending_signals_migrated_20_times() {
    migrated_20_times(&[]);
}

#[test]
fn pending_signals_migrated_20_times_after_pre_copy() {
    // Pre-copy rounds while it runs, then the frozen delta (content
    // comparison, which works where soft-dirty is missing).
    migrated_20_times(&[("HALFPROC_PRECOPY", "hash")]);
}
