// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Joining and leaving requests of a reconfigurable run, as a schedule.
//!
//! `dmi run -n N --grow-at ITER:K --shrink-at ITER:K` starts N node
//! processes available at once plus K spare processes per `--grow-at`, and
//! passes the schedule in `DMI_SCHEDULE` (`grow:ITER:K,shrink:ITER:K`) and
//! `DMI_INITIAL=N`. A request is published once the program has called
//! `DMI_check_rescale` ITER times in all (counted across itergroups): a
//! grow request brings the next K spare ranks, a shrink request takes the K
//! highest-ranked nodes of the itergroup (never node 0). Every node derives
//! the same requests from the same schedule, so every thread of an itergroup
//! sees the same joining and leaving nodes in `DMI_check_rescale`.

use crate::addr::NodeId;
use crate::error::DmiError;

/// One line of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Grow(u32),
    Shrink(u32),
}

/// A request published at check number `iter`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub iter: u64,
    pub join: Vec<NodeId>,
    pub leave: u32,
    /// Nodes asked by rank to leave (`dmi node leave RANK`).
    pub leave_ranks: Vec<NodeId>,
}

/// Parses `grow:ITER:K,shrink:ITER:K` (empty: no requests).
pub fn parse(s: &str) -> Result<Vec<(u64, Change)>, DmiError> {
    let bad = |item: &str, why: &str| {
        DmiError::Setup(format!(
            "DMI_SCHEDULE item {item:?}: {why} (want grow:ITER:K or shrink:ITER:K)"
        ))
    };
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let parts: Vec<&str> = item.split(':').collect();
        let [kind, iter, k] = parts[..] else {
            return Err(bad(item, "three fields"));
        };
        let iter: u64 = iter
            .parse()
            .map_err(|_| bad(item, "ITER is not a number"))?;
        let k: u32 = k.parse().map_err(|_| bad(item, "K is not a number"))?;
        if k == 0 {
            return Err(bad(item, "K must be at least 1"));
        }
        out.push(match kind {
            "grow" => (iter, Change::Grow(k)),
            "shrink" => (iter, Change::Shrink(k)),
            _ => return Err(bad(item, "unknown kind")),
        });
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out)
}

/// The requests of a run of `size` processes of which `initial` are
/// available at start and `init_node_num` take part in the first
/// itergroup: the other initially available nodes are a join request at
/// check 0, and each grow takes the next spare ranks.
pub fn resolve(
    changes: &[(u64, Change)],
    initial: u32,
    size: u32,
    init_node_num: u32,
) -> Result<Vec<Request>, DmiError> {
    let mut out = Vec::new();
    if init_node_num < initial {
        out.push(Request {
            iter: 0,
            join: (init_node_num..initial).collect(),
            leave: 0,
            leave_ranks: Vec::new(),
        });
    }
    let mut next = initial;
    for &(iter, c) in changes {
        match c {
            Change::Grow(k) => {
                if next + k > size {
                    return Err(DmiError::Setup(format!(
                        "the schedule grows past the {size} node processes started"
                    )));
                }
                out.push(Request {
                    iter,
                    join: (next..next + k).collect(),
                    leave: 0,
                    leave_ranks: Vec::new(),
                });
                next += k;
            }
            Change::Shrink(k) => out.push(Request {
                iter,
                join: Vec::new(),
                leave: k,
                leave_ranks: Vec::new(),
            }),
        }
    }
    Ok(out)
}

/// Applies `requests` to the nodes `cur`: (joining, leaving). A shrink
/// takes the highest-ranked nodes other than node 0.
pub fn apply(requests: &[Request], cur: &[NodeId]) -> (Vec<NodeId>, Vec<NodeId>) {
    let mut set: Vec<NodeId> = cur.to_vec();
    let (mut join, mut leave) = (Vec::new(), Vec::new());
    for r in requests {
        for &j in &r.join {
            if !set.contains(&j) {
                set.push(j);
                join.push(j);
            }
        }
        let highest: Vec<NodeId> = (0..r.leave)
            .map_while(|_| {
                let l = set.iter().copied().filter(|&n| n != 0).max()?;
                set.retain(|&n| n != l);
                Some(l)
            })
            .collect();
        let named: Vec<NodeId> = r
            .leave_ranks
            .iter()
            .copied()
            .filter(|&l| l != 0 && set.contains(&l))
            .collect();
        set.retain(|n| !named.contains(n));
        for l in highest.into_iter().chain(named) {
            if join.contains(&l) {
                join.retain(|&n| n != l);
            } else {
                leave.push(l);
            }
        }
    }
    (join, leave)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grow_then_shrink() {
        let c = parse("shrink:4:1, grow:2:2").unwrap();
        assert_eq!(c, vec![(2, Change::Grow(2)), (4, Change::Shrink(1))]);
        let r = resolve(&c, 1, 3, 1).unwrap();
        assert_eq!(r[0].join, vec![1, 2]);
        assert_eq!(apply(&r[..1], &[0]), (vec![1, 2], vec![]));
        assert_eq!(apply(&r[1..], &[0, 1, 2]), (vec![], vec![2]));
        assert_eq!(apply(&r, &[0]), (vec![1], vec![]));
        // Nodes available at start beyond init_node_num join at check 0.
        let r = resolve(&[], 3, 3, 1).unwrap();
        assert_eq!(
            r,
            vec![Request {
                iter: 0,
                join: vec![1, 2],
                leave: 0,
                leave_ranks: vec![]
            }]
        );
        // Named leaves: members only, never node 0.
        let named = Request {
            iter: 0,
            join: vec![],
            leave: 0,
            leave_ranks: vec![0, 2, 5],
        };
        assert_eq!(apply(&[named], &[0, 1, 2]), (vec![], vec![2]));
    }

    #[test]
    fn bad_schedules() {
        for s in ["grow:2", "grow:x:1", "grow:1:0", "move:1:1"] {
            assert!(parse(s).is_err(), "{s}");
        }
        assert!(resolve(&parse("grow:1:3").unwrap(), 1, 3, 1).is_err());
        // Node 0 never leaves.
        let r = resolve(&parse("shrink:1:5").unwrap(), 1, 1, 1).unwrap();
        assert_eq!(apply(&r, &[0]), (vec![], vec![]));
    }
}
