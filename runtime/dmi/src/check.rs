// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Checks recorded histories against sequential consistency, page by page.
//!
//! Each client (a node, or a thread of one) records, in program order, the
//! value it wrote or read on each page; every write writes a value no other
//! write writes, and 0 is the initial value. A page's history is
//! sequentially consistent iff there is one interleaving of all clients'
//! events, keeping each client's order, in which every read returns the
//! value of the latest write before it. The search below tries to build
//! that interleaving: a read that matches the current value is always safe
//! to take at once, so only the choice of the next write branches; a state
//! where some client waits for a value already overwritten is dead; and
//! visited states (positions, current value) are never explored twice.
//!
//! A history may also say what each page held at the end ([`History::last`]:
//! read by clients after every write completed, e.g. after a barrier):
//! then all those reads must agree, and the order must end with the write
//! of that value. This catches a copy left stale after the last write,
//! which the order alone can explain by putting the stale reads early.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

/// One event of a client on one page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Event {
    Write(u64),
    Read(u64),
}

/// A whole run: for every client, its events per page, in program order.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct History {
    /// client -> page -> events
    pub clients: BTreeMap<u32, BTreeMap<u64, Vec<Event>>>,
    /// client -> page -> the value it read after all writes completed.
    #[serde(default)]
    pub last: BTreeMap<u32, BTreeMap<u64, u64>>,
}

impl History {
    pub fn record(&mut self, client: u32, page: u64, e: Event) {
        self.clients
            .entry(client)
            .or_default()
            .entry(page)
            .or_default()
            .push(e);
    }

    /// Merges another history (disjoint clients).
    pub fn merge(&mut self, other: History) {
        self.clients.extend(other.clients);
        self.last.extend(other.last);
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.clients
            .values()
            .flat_map(|m| m.values())
            .map(Vec::len)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks every page; the error names the first page with no valid order.
    pub fn check(&self) -> Result<(), String> {
        let mut pages: BTreeMap<u64, Vec<Vec<Event>>> = BTreeMap::new();
        for m in self.clients.values() {
            for (&p, ev) in m {
                pages.entry(p).or_default().push(ev.clone());
            }
        }
        let mut last: BTreeMap<u64, (u32, u64)> = BTreeMap::new();
        for (&c, m) in &self.last {
            for (&p, &v) in m {
                let (c0, v0) = *last.entry(p).or_insert((c, v));
                if v0 != v {
                    return Err(format!(
                        "page {p}: at the end client {c0} read {v0:#x}, client {c} {v:#x}"
                    ));
                }
            }
        }
        for (p, seqs) in pages {
            let end = last.get(&p).map(|&(_, v)| v);
            check_page_ending(&seqs, end).map_err(|e| format!("page {p}: {e}"))?;
        }
        Ok(())
    }
}

/// Checks one page: `seqs[c]` is client c's events in program order.
pub fn check_page(seqs: &[Vec<Event>]) -> Result<(), String> {
    check_page_ending(seqs, None)
}

/// [`check_page`], and the order must leave the page holding `end` (if
/// given: the value read after all writes completed).
pub fn check_page_ending(seqs: &[Vec<Event>], end: Option<u64>) -> Result<(), String> {
    let mut written = HashSet::new();
    for e in seqs.iter().flatten() {
        if let Event::Write(v) = e {
            if *v == 0 || !written.insert(*v) {
                return Err(format!("write value {v} is not unique and non-zero"));
            }
        }
    }
    for e in seqs.iter().flatten() {
        if let Event::Read(v) = e {
            if *v != 0 && !written.contains(v) {
                return Err(format!("a read returned {v:#x}, which no write wrote"));
            }
        }
    }
    // Where each value is written: (client, index).
    let mut writer = std::collections::HashMap::new();
    for (c, s) in seqs.iter().enumerate() {
        for (i, e) in s.iter().enumerate() {
            if let Event::Write(v) = e {
                writer.insert(*v, (c, i));
            }
        }
    }
    // A client waiting to read a value that was already overwritten can
    // never proceed: values are unique, so that state is dead.
    // With an end value, its write must be the last one: once taken, no
    // other write may follow.
    let last_write = end.and_then(|e| writer.get(&e).copied());
    let dead = |pos: &[usize], cur: u64| {
        let after_last = last_write.is_some_and(|(wc, wi)| {
            pos[wc] > wi
                && seqs
                    .iter()
                    .enumerate()
                    .any(|(c, s)| s[pos[c]..].iter().any(|e| matches!(e, Event::Write(_))))
        });
        after_last
            || seqs.iter().enumerate().any(|(c, s)| match s.get(pos[c]) {
                Some(Event::Read(v)) if *v != cur => match writer.get(v) {
                    None => cur != 0,
                    Some(&(wc, wi)) => pos[wc] > wi,
                },
                _ => false,
            })
    };
    let mut seen = HashSet::new();
    let mut stack = vec![(vec![0usize; seqs.len()], 0u64)];
    let mut best = 0;
    while let Some((mut pos, cur)) = stack.pop() {
        // Take every read that matches the current value.
        loop {
            let mut moved = false;
            for (c, s) in seqs.iter().enumerate() {
                while pos[c] < s.len() && s[pos[c]] == Event::Read(cur) {
                    pos[c] += 1;
                    moved = true;
                }
            }
            if !moved {
                break;
            }
        }
        let done: usize = pos.iter().sum();
        best = best.max(done);
        if pos.iter().zip(seqs).all(|(&p, s)| p == s.len()) {
            if end.is_none_or(|e| e == cur) {
                return Ok(());
            }
            continue;
        }
        if dead(&pos, cur) || !seen.insert((pos.clone(), cur)) {
            continue;
        }
        for (c, s) in seqs.iter().enumerate() {
            if let Some(Event::Write(v)) = s.get(pos[c]) {
                let mut next = pos.clone();
                next[c] += 1;
                stack.push((next, *v));
            }
        }
    }
    let total: usize = seqs.iter().map(Vec::len).sum();
    Err(format!(
        "no sequentially consistent order exists (at most {best} of {total} events can be ordered)"
    ))
}

#[cfg(test)]
mod tests {
    use super::Event::{Read as R, Write as W};
    use super::*;

    #[test]
    fn accepts_consistent_and_rejects_inconsistent_histories() {
        // Two readers see the writes in the same order: fine.
        assert!(check_page(&[vec![W(1), W(2)], vec![R(1), R(2)], vec![R(0), R(2)]]).is_ok());
        // A reader goes back in time: no order.
        assert!(check_page(&[vec![W(1), W(2)], vec![R(2), R(1)]]).is_err());
        // Two readers see two writers' writes in opposite orders.
        assert!(check_page(&[vec![W(1)], vec![W(2)], vec![R(1), R(2)], vec![R(2), R(1)]]).is_err());
        // A writer does not see its own write.
        assert!(check_page(&[vec![W(1), R(0)]]).is_err());
        // A value nobody wrote.
        assert!(check_page(&[vec![W(1)], vec![R(7)]]).is_err());
        // Interleavings that need a write of the reader itself in between.
        assert!(check_page(&[vec![W(1), R(2), W(3)], vec![R(1), W(2), R(3)]]).is_ok());
        // A stale copy read early is fine, unless the page ends elsewhere.
        let h = [vec![W(1), W(2)], vec![R(1), R(1)]];
        assert!(check_page_ending(&h, Some(2)).is_ok());
        assert!(check_page_ending(&h, Some(1)).is_err());
        // Two writers: either may be last.
        let h = [vec![W(1)], vec![W(2)]];
        assert!(check_page_ending(&h, Some(1)).is_ok() && check_page_ending(&h, Some(2)).is_ok());
        assert!(check_page_ending(&h, Some(0)).is_err());
    }

    #[test]
    fn end_values_must_agree() {
        let mut h = History::default();
        h.record(0, 5, W(1));
        h.record(1, 5, R(1));
        h.last.entry(0).or_default().insert(5, 1);
        h.last.entry(1).or_default().insert(5, 1);
        assert!(h.check().is_ok());
        h.last.entry(1).or_default().insert(5, 0);
        let e = h.check().unwrap_err();
        assert!(e.contains("at the end"), "{e}");
    }
}
