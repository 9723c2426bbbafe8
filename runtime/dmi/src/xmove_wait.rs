// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The bounded waits of a cross-node move (`xmove.rs`): the target's for
//! the source's word, the source's for the origin's record of the move.

use std::sync::mpsc;
use std::time::Duration;

use super::{locked, Answer, Mover, Word};
use crate::addr::NodeId;
use crate::msg::InstMsg;
use crate::transport::report;
use crate::xmove_hooks::{answer_limit, query_limit, word_limit};

/// Target: waits for the source's word about the copy `token` (instance
/// `id` from node `from`). Past [`word_limit`] after `Ready` (which may
/// have reached the source late, behind a large frame) it asks the source
/// (`Query`), which calls the move off unless it committed; only if no
/// answer comes within [`query_limit`] either is the copy ended here.
pub(super) fn wait_word(
    mv: &Mover,
    token: u64,
    from: NodeId,
    id: i64,
    rx: &mpsc::Receiver<Word>,
) -> Word {
    if let Ok(w) = rx.recv_timeout(word_limit()) {
        return w;
    }
    report(&format!(
        "dmi: node {}: no word from node {from} about instance {id} within {:?}; asking it",
        mv.me,
        word_limit()
    ));
    let _ = mv.caller.send_inst(from, InstMsg::Query { token });
    if let Ok(w) = rx.recv_timeout(query_limit()) {
        return w;
    }
    crate::xmove_hooks::test_hold(
        "DMI_TEST_WORD_RACE",
        mv.me,
        &format!("no answer from node {from} about instance {id}; its copy's end held back"),
    );
    if locked(&mv.arrived).remove(&token).is_some() {
        report(&format!(
            "dmi: node {}: node {from} did not answer about instance {id} within {:?}; its \
             copy ends",
            mv.me,
            query_limit()
        ));
        return Word::Abort;
    }
    // `word` or `gone` took the entry just now: its word is on the way.
    rx.recv().unwrap_or(Word::Abort)
}

/// Source: tells node `o`, the origin of instance `id`, that it moves to
/// node `to` at its yield `yields` and waits for its answer (`MovingSeen`:
/// the origin recorded it), at most `left`. `o` failing, refusing or not
/// answering calls the move off.
pub(super) fn origin_records(
    mv: &Mover,
    token: u64,
    o: NodeId,
    id: i64,
    to: NodeId,
    yields: u64,
    left: Duration,
) -> Result<(), String> {
    let limit = left.min(answer_limit());
    let (tx, rx) = mpsc::channel();
    {
        let mut w = locked(&mv.waiting);
        if let Some(why) = locked(&mv.dead).get(&o) {
            return Err(why.clone());
        }
        w.insert(token, (o, tx));
    }
    let m = InstMsg::Moving {
        id,
        node: to,
        yields,
        token,
    };
    let heard = match mv.caller.send_inst(o, m) {
        Ok(()) => rx
            .recv_timeout(limit)
            .unwrap_or_else(|_| Answer::Refused(format!("no answer within {limit:?}"))),
        Err(e) => Answer::Refused(e.to_string()),
    };
    locked(&mv.waiting).remove(&token);
    match heard {
        Answer::Seen => Ok(()),
        Answer::Refused(why) => Err(why),
        Answer::Ready(_) => Err("a wrong answer".into()),
    }
}
