//! Programs that link the runtime and call `halfproc_yield()`
//! (`tests/yielder.c`): a migration stops them at their next yield and moves
//! them from there; one that does not reach a yield in time is moved from
//! where it is (one whose move fails is let go at its yield and runs on:
//! `node_faults.rs`).
//! Output and exit status always equal an unmigrated run's.

mod common;

use common::*;

const MOVES: usize = 10;

#[test]
fn a_yielding_program_moves_at_its_yields() {
    let tmp = tempfile::tempdir().unwrap();
    let argv = [yielder(), "yield", "60000"];
    let (want, want_code) = reference(&argv, None);
    assert_eq!(want_code, 3);
    let nodes = [Daemon::start(), Daemon::start()];
    let (r, held) = run_held(&nodes[0], &argv, None, tmp.path(), "yield");
    let mut pid = r.pid();
    // Its first yield maps the page; before it the program would be frozen
    // where it is.
    sleep_ms(200);
    let mut here = 0;
    for i in 0..MOVES {
        let to = 1 - here;
        let m = migrate(&nodes[here].addr, pid, &nodes[to].addr)
            .unwrap_or_else(|e| panic!("move {i} of pid {pid}: {e}"));
        assert!(
            m.said
                .contains(&format!("pid {pid} stopped at halfproc_yield() after")),
            "move {i}: {}",
            m.said
        );
        pid = m.pid;
        here = to;
        sleep_ms(20);
    }
    held.close();
    let (out, code, err) = r.finish();
    assert_same("yielder", &out, &want);
    assert_eq!(code, want_code, "run's stderr: {err}");
    // Every move was seen by the program as a yield that returned 1.
    assert!(
        err.contains(&format!("yielder: moved {MOVES}\n")),
        "run's stderr: {err}"
    );
}

#[test]
fn a_program_that_stops_yielding_is_moved_where_it_is() {
    let tmp = tempfile::tempdir().unwrap();
    // One yield, then 3-4 s of hashing and a wait without any.
    let argv = [yielder(), "stall", "100000"];
    let (want, want_code) = reference(&argv, None);
    let env = [("HALFPROC_YIELD_WAIT_MS", "300")];
    let nodes = [Daemon::start_env(&[], &env), Daemon::start_env(&[], &env)];
    let (r, held) = run_held(&nodes[0], &argv, None, tmp.path(), "stall");
    let pid = r.pid();
    sleep_ms(100);
    let m = migrate(&nodes[0].addr, pid, &nodes[1].addr).expect("migrate");
    assert!(
        m.said
            .contains(&format!("pid {pid} did not reach halfproc_yield() within")),
        "{}",
        m.said
    );
    // The request was withdrawn before the freeze: the copy's last yield
    // returns at once (0), as in the unmigrated run.
    held.close();
    let (out, code, err) = r.finish();
    assert_same("yielder stall", &out, &want);
    assert!(String::from_utf8_lossy(&out).ends_with("last yield 0\n"));
    assert_eq!(code, want_code, "run's stderr: {err}");
}
