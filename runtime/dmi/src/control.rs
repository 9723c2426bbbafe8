// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Regions (`DMI_mmap`/`DMI_munmap`), the DMI mutex and the barrier.
//!
//! * Node 0 hands out region ids; the caller of `DMI_mmap` then tells every
//!   node about the region and returns only when all acknowledged, so any
//!   node that later learns the address (through the global memory) already
//!   knows the region. `DMI_munmap` tells every node to forget it.
//! * A mutex lives at the home of the page holding its address: a FIFO of
//!   waiters, granted one at a time.
//! * The barrier lives at node 0 and releases when every node arrived.

use crate::addr::{NodeId, Region};
use crate::error::DmiError;
use crate::msg::{Msg, OpId, Reply, FINAL_BARRIER};
use crate::node::{CallId, Effects, Node, Op};

impl Node {
    pub(crate) fn start_mmap(
        &mut self,
        call: CallId,
        page_size: i64,
        page_num: i64,
        fx: &mut Effects,
    ) -> Result<(), DmiError> {
        Region::new(0, page_size, page_num)?;
        let op = self.fresh_id();
        self.add_work(call, 1);
        self.ops.insert(
            op,
            Op::NewRegion {
                call,
                page_size,
                page_num,
            },
        );
        if self.me == 0 {
            let id = self.alloc_region_id();
            self.region_id(op, id, fx);
        } else {
            fx.sends.push((0, Msg::NewRegionId { op }));
        }
        Ok(())
    }

    fn alloc_region_id(&mut self) -> u32 {
        let id = self.next_region;
        self.next_region += 1;
        id
    }

    /// Node 0 answered: map the region here and on every other node.
    fn region_id(&mut self, op: OpId, id: u32, fx: &mut Effects) {
        let Some(Op::NewRegion {
            call,
            page_size,
            page_num,
        }) = self.ops.remove(&op)
        else {
            return;
        };
        let region = match Region::new(id, page_size, page_num) {
            Ok(r) => r,
            Err(e) => {
                self.ops.insert(op, Op::Sync { call });
                self.finish_op(op, Reply::Err(e), fx);
                return;
            }
        };
        self.regions.insert(region);
        let result = region.base().to_le_bytes().to_vec();
        self.broadcast(call, Msg::MapRegion { op, region }, op, result, fx);
    }

    /// Sends `msg` to every other node and completes `op` of `call` (with
    /// `result`) when all acknowledged.
    fn broadcast(&mut self, call: CallId, msg: Msg, op: OpId, result: Vec<u8>, fx: &mut Effects) {
        let others: Vec<NodeId> = self
            .members
            .iter()
            .copied()
            .filter(|&n| n != self.me)
            .collect();
        self.ops.insert(
            op,
            Op::RegionAcks {
                call,
                remaining: others.len() as u32,
                result,
            },
        );
        for &n in &others {
            fx.sends.push((n, msg.clone()));
        }
        if others.is_empty() {
            self.finish_op(op, Reply::Done, fx);
        }
    }

    pub(crate) fn start_munmap(
        &mut self,
        call: CallId,
        addr: i64,
        fx: &mut Effects,
    ) -> Result<(), DmiError> {
        let region = self.regions.region_at(addr)?;
        if region.id == crate::addr::ROOT.id {
            return Err(DmiError::BadAddress(
                "the root page cannot be unmapped".into(),
            ));
        }
        self.forget_region(region.id);
        let op = self.fresh_id();
        self.add_work(call, 1);
        self.broadcast(
            call,
            Msg::UnmapRegion {
                op,
                region: region.id,
            },
            op,
            Vec::new(),
            fx,
        );
        Ok(())
    }

    fn forget_region(&mut self, id: u32) {
        self.regions.remove(id);
        self.pages.retain(|p, _| p.region != id);
        self.owners.retain(|p, _| p.region != id);
        self.locks
            .retain(|&a, _| (a >> crate::addr::REGION_SHIFT) as u64 != u64::from(id));
    }

    pub(crate) fn start_lock(
        &mut self,
        call: CallId,
        addr: i64,
        unlock: bool,
        fx: &mut Effects,
    ) -> Result<(), DmiError> {
        let page = self.regions.page_of(addr)?;
        let op = self.fresh_id();
        self.add_work(call, 1);
        self.ops.insert(op, Op::Sync { call });
        let h = self.home_of(page);
        let origin = self.me;
        let msg = if unlock {
            Msg::Unlock { origin, op, addr }
        } else {
            Msg::Lock { origin, op, addr }
        };
        if h == self.me {
            let me = self.me;
            self.handle_control(me, msg, fx);
        } else {
            fx.sends.push((h, msg));
        }
        Ok(())
    }

    pub(crate) fn start_barrier(
        &mut self,
        call: CallId,
        count: u32,
        fx: &mut Effects,
    ) -> Result<(), DmiError> {
        let op = self.fresh_id();
        self.add_work(call, 1);
        self.ops.insert(op, Op::Sync { call });
        if self.me == 0 {
            self.handle_control(0, Msg::Barrier { op, count }, fx);
        } else {
            fx.sends.push((0, Msg::Barrier { op, count }));
        }
        Ok(())
    }

    /// Tells node 0 that this node's barriers cannot complete (one of its
    /// instances failed; `Event::Poison`).
    pub(crate) fn poison_barriers(&mut self, why: String, fx: &mut Effects) {
        if self.me == 0 {
            self.handle_control(0, Msg::BarrierPoison { why }, fx);
        } else {
            fx.sends.push((0, Msg::BarrierPoison { why }));
        }
    }

    /// Messages of regions, mutexes and the barrier.
    pub(crate) fn handle_control(&mut self, from: NodeId, msg: Msg, fx: &mut Effects) {
        match msg {
            Msg::NewRegionId { op } => {
                let id = self.alloc_region_id();
                fx.sends.push((from, Msg::RegionId { op, id }));
            }
            Msg::RegionId { op, id } => self.region_id(op, id, fx),
            Msg::MapRegion { op, region } => {
                self.regions.insert(region);
                fx.sends.push((from, Msg::RegionAck { op }));
            }
            Msg::UnmapRegion { op, region } => {
                self.forget_region(region);
                fx.sends.push((from, Msg::RegionAck { op }));
            }
            Msg::RegionAck { op } => {
                if let Some(Op::RegionAcks { remaining, .. }) = self.ops.get_mut(&op) {
                    *remaining -= 1;
                    if *remaining == 0 {
                        self.finish_op(op, Reply::Done, fx);
                    }
                }
            }
            Msg::Lock { addr, .. } | Msg::Unlock { addr, .. }
                if self.forward_lock(&msg, addr, fx) => {}
            Msg::Lock { origin, op, addr } => {
                let (held, waiters) = self.locks.entry(addr).or_default();
                if *held {
                    waiters.push_back((origin, op));
                } else {
                    *held = true;
                    self.reply(origin, op, Reply::Done, fx);
                }
            }
            Msg::Unlock { origin, op, addr } => {
                let from = origin;
                let (held, waiters) = self.locks.entry(addr).or_default();
                if !*held {
                    let e = DmiError::BadArgument(format!("mutex {addr:#x} is not locked"));
                    self.reply(from, op, Reply::Err(e), fx);
                    return;
                }
                if let Some((n, o)) = waiters.pop_front() {
                    self.reply(n, o, Reply::Done, fx);
                } else {
                    *held = false;
                }
                self.reply(from, op, Reply::Done, fx);
            }
            Msg::Barrier { op, count }
                if self.barrier_poison.is_some() && count != FINAL_BARRIER =>
            {
                let why = self.barrier_poison.clone().unwrap_or_default();
                self.reply(from, op, Reply::Err(DmiError::Instance(why)), fx);
            }
            Msg::Barrier { op, count } => {
                self.barrier.entry(count).or_default().push((from, op));
                self.maybe_release_barrier(fx);
            }
            Msg::BarrierPoison { why } => {
                let why = self
                    .barrier_poison
                    .get_or_insert(format!("node {from}: {why}"))
                    .clone();
                // DMI_finalize's round is left waiting: see FINAL_BARRIER.
                let fin = self.barrier.remove(&FINAL_BARRIER);
                let kept = fin.map(|f| (FINAL_BARRIER, f)).into_iter().collect();
                let waiting = std::mem::replace(&mut self.barrier, kept);
                for (n, o) in waiting.into_values().flatten() {
                    self.reply(n, o, Reply::Err(DmiError::Instance(why.clone())), fx);
                }
            }
            _ => {}
        }
    }

    /// Releases each barrier whose participants all arrived.
    pub(crate) fn maybe_release_barrier(&mut self, fx: &mut Effects) {
        let all = self.members.len();
        let full: Vec<u32> = self
            .barrier
            .iter()
            .filter(|(&c, w)| {
                let needed = match c {
                    0 | FINAL_BARRIER => all,
                    c => c as usize,
                };
                !w.is_empty() && w.len() >= needed
            })
            .map(|(&c, _)| c)
            .collect();
        for c in full {
            for (n, o) in self.barrier.remove(&c).unwrap_or_default() {
                self.reply(n, o, Reply::Done, fx);
            }
        }
    }

    /// A mutex message reached a node that is not (or no longer) the home
    /// of its page: send it on to the home of the current epoch. True when
    /// it was forwarded.
    fn forward_lock(&mut self, msg: &Msg, addr: i64, fx: &mut Effects) -> bool {
        let Ok(page) = self.regions.page_of(addr) else {
            return false;
        };
        let h = self.home_of(page);
        if h == self.me || self.members.is_empty() {
            return false;
        }
        fx.sends.push((h, msg.clone()));
        true
    }
}
