// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The time limits of cross-node moves (`xmove.rs`) and their test-only
//! hooks: `DMI_TEST_WORD_LIMIT_MS` scales the limits after `Ready`, the `VAR=NODE:MS`
//! holds stop a node at one point of a move. All read once per process.

use std::sync::OnceLock;
use std::time::Duration;

use crate::addr::NodeId;
use crate::transport::report;

/// How long a restored copy's node waits for the source's word after
/// `Ready` before it asks the source (`Query`); unscaled.
const WORD_LIMIT: Duration = Duration::from_secs(60);

/// `d` scaled by `DMI_TEST_WORD_LIMIT_MS` (tests only: the word limit, in
/// ms, every limit of a move scaled with it), read once.
fn scaled(d: Duration) -> Duration {
    static MS: OnceLock<Option<u64>> = OnceLock::new();
    let ms = MS.get_or_init(|| {
        let v = std::env::var("DMI_TEST_WORD_LIMIT_MS").ok()?;
        let ms = v.parse::<u64>().ok().filter(|&ms| ms > 0);
        if ms.is_none() {
            report(&format!(
                "dmi: DMI_TEST_WORD_LIMIT_MS={v:?} ignored (want MS, not 0)"
            ));
        }
        ms
    });
    match *ms {
        Some(ms) => {
            let ms = d.as_millis() * u128::from(ms) / WORD_LIMIT.as_millis();
            Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
        }
        None => d,
    }
}

/// How long after `Ready` a source may still kill its original (40 s):
/// past it, it resumes the original.
pub(crate) fn commit_limit() -> Duration {
    scaled(Duration::from_secs(40))
}

/// How long a restored copy's node waits for the source's word after it
/// sent `Ready` (60 s: the source's [`commit_limit`] and room for its
/// kill, join and `Commit`) before it asks the source (`Query`).
pub(crate) fn word_limit() -> Duration {
    scaled(WORD_LIMIT)
}

/// How long a restored copy's node waits for the source's answer to its
/// `Query` (60 s): a backstop only, a source that runs answers at once.
pub(crate) fn query_limit() -> Duration {
    scaled(Duration::from_secs(60))
}

/// How long a restored copy waits parked for its move to commit before it
/// ends itself (`ring.rs`, 240 s): longer than its node waits for the
/// source's word and the answer to its `Query`, after which the node ends
/// the copy. A backstop only.
pub(crate) fn copy_park_limit() -> Duration {
    word_limit() + query_limit() + scaled(Duration::from_secs(120))
}

/// How long a source waits for the target's answer to an image (30 s;
/// not scaled: a restore takes what it takes).
pub(crate) fn answer_limit() -> Duration {
    Duration::from_secs(30)
}

/// The test-only holds (`VAR=NODE:MS`), read once per process.
const HOLDS: [&str; 8] = [
    "DMI_TEST_AWAY_DELAY",
    "DMI_TEST_SERVE_DELAY",
    "DMI_TEST_AT_DELAY",
    "DMI_TEST_COMMIT_DELAY",
    "DMI_TEST_READY_DELAY",
    "DMI_TEST_READY_LATE",
    "DMI_TEST_WORD_RACE",
    "DMI_TEST_MOVING_DELAY",
];

/// Tests only: with `VAR=NODE:MS`, node `NODE` waits `MS` ms here (saying
/// `what`), a window to kill a node in at that point of a move
/// (`DMI_TEST_READY_DELAY`: the source, after `Ready`, before it asks the
/// origin; `DMI_TEST_READY_LATE`: the source, on `Ready`, before its
/// commit limit starts; `DMI_TEST_WORD_RACE`: the target, after no answer
/// to its `Query` came, before it ends the copy; `DMI_TEST_COMMIT_DELAY`: the source, after the commit and
/// before its `Commit`; `DMI_TEST_AT_DELAY`: the target, before its `At`;
/// `DMI_TEST_MOVING_DELAY`: the origin, before its `MovingSeen`;
/// `DMI_TEST_SERVE_DELAY`: the target, after `Commit`, before it serves
/// the copy; `DMI_TEST_AWAY_DELAY`: the source, before it checks the
/// target and stops the instance). The
/// variables are read once; a malformed one is reported once.
pub(crate) fn test_hold(var: &str, me: NodeId, what: &str) {
    if let Some(ms) = hold_ms(var, me) {
        report(&format!("dmi: node {me}: {what} (test delay {ms} ms)"));
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// How long node `me` holds at `var` (`test_hold`), if at all.
pub(crate) fn hold_ms(var: &str, me: NodeId) -> Option<u64> {
    static READ: OnceLock<Vec<(&'static str, NodeId, u64)>> = OnceLock::new();
    let holds = READ.get_or_init(|| {
        let mut v = Vec::new();
        for name in HOLDS {
            let Ok(val) = std::env::var(name) else {
                continue;
            };
            let parsed = val
                .split_once(':')
                .and_then(|(n, ms)| Some((n.parse::<NodeId>().ok()?, ms.parse::<u64>().ok()?)));
            match parsed {
                Some((n, ms)) => v.push((name, n, ms)),
                None => report(&format!(
                    "dmi: node {me}: {name}={val:?} ignored (want NODE:MS)"
                )),
            }
        }
        v
    });
    holds
        .iter()
        .find(|&&(n, node, _)| n == var && node == me)
        .map(|&(_, _, ms)| ms)
}
