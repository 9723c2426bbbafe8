// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! One receiver for all compute instances of a node (`DMI_RECEIVERS=single`,
//! `docs/dmi.md`, "One receiver against one per instance"): the paper's
//! model (half-process.txt sec. 5.2), kept to measure it against a receiver
//! thread per instance (`serve.rs`, the default).
//!
//! One thread, `dmi-recv`, started by the node's first `DMI_create`, takes
//! the calls of every instance's [`Mailbox`] in turn and handles each with
//! the same code as a receiver of its own (`serve::step`); so are deaths
//! (`serve::ended`, `serve::finish`, every [`POLL`]) and moves within the
//! node. It sleeps on the node's [`Bell`] (in the shared range), which
//! every instance rings after putting a request into its mailbox. A
//! barrier cannot block the one receiver (the others could never arrive):
//! arrivals are held and all answered when the round completes. A movable
//! run (its instances move between nodes) is refused
//! (`serve::init_movable`).
//!
//! Lock order: the bell's lock is never held with another one;
//! `Registry::state` before a mailbox's lock, as in `serve.rs`.

use std::sync::{Arc, Mutex as StdMutex, OnceLock};
use std::time::{Duration, Instant};

use halfproc::sync::{Condvar, Mutex};

use crate::error::DmiError;
use crate::node::CallReq;
use crate::ring::{lock, Mailbox, Taken, POLL};
use crate::serve::{due, ended, finish, finish_round, locked, step, Due, Registry, Served, Step};

/// Who takes the instances' calls (`DMI_RECEIVERS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receivers {
    /// A receiver thread per instance (the default).
    PerInstance,
    /// One receiver thread for all instances of the node (the paper's
    /// model, half-process.txt sec. 5.2): `serve_single.rs`.
    Single,
}

impl Receivers {
    /// `DMI_RECEIVERS=per-instance|single` (default per-instance).
    pub fn from_env() -> Result<Receivers, DmiError> {
        match std::env::var("DMI_RECEIVERS").as_deref() {
            Err(_) | Ok("per-instance") => Ok(Receivers::PerInstance),
            Ok("single") => Ok(Receivers::Single),
            Ok(v) => Err(DmiError::Setup(format!(
                "DMI_RECEIVERS={v:?} is not valid (use per-instance or single)"
            ))),
        }
    }
}

/// What wakes the single receiver: a counter of requests, bumped by every
/// instance after each request (and by the node when its program stops
/// creating, or a new instance is handed over).
pub struct Bell {
    rung: Mutex<u64>,
    cv: Condvar,
}

impl Bell {
    /// Instance or node: there is something to look at.
    pub(crate) fn ring(&self) {
        if let Ok(mut g) = lock(&self.rung) {
            *g = g.wrapping_add(1);
            drop(g);
            self.cv.notify_one();
        }
    }

    fn rung(&self) -> u64 {
        lock(&self.rung).map_or(0, |g| *g)
    }

    /// Waits up to `timeout` unless the bell rang since it said `seen`.
    fn wait(&self, seen: u64, timeout: Duration) {
        let Ok(g) = lock(&self.rung) else {
            std::thread::sleep(timeout);
            return;
        };
        if *g == seen {
            let _ = self.cv.wait_timeout(g, timeout);
        }
    }
}

struct Single {
    bell: &'static Bell,
    /// Instances created and not yet taken over by the receiver.
    new: StdMutex<Vec<Served>>,
}

static SINGLE: OnceLock<Single> = OnceLock::new();
static START: StdMutex<()> = StdMutex::new(());

/// The node's bell; the first call makes it and starts the receiver.
pub(crate) fn bell(reg: &Arc<Registry>) -> Result<&'static Bell, DmiError> {
    let _g = START.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(one) = SINGLE.get() {
        return Ok(one.bell);
    }
    let b = halfproc::alloc::shared_box(Bell {
        rung: Mutex::new(0),
        cv: Condvar::new(),
    })
    .map_err(|e| DmiError::Setup(format!("the receiver's bell: {e}")))?;
    let bell: &'static Bell = halfproc::SharedBox::leak(b);
    let one = SINGLE.get_or_init(|| Single {
        bell,
        new: StdMutex::new(Vec::new()),
    });
    let reg = reg.clone();
    std::thread::Builder::new()
        .name("dmi-recv".into())
        .spawn(move || receive(&reg, one))
        .map_err(|e| DmiError::Setup(format!("the node's receiver thread: {e}")))?;
    Ok(one.bell)
}

/// Hands instance `s` (its mailbox rings the bell) to the receiver.
pub(crate) fn add(s: Served) {
    if let Some(one) = SINGLE.get() {
        one.new.lock().unwrap_or_else(|e| e.into_inner()).push(s);
        one.bell.ring();
    }
}

/// Wakes the receiver, if there is one (the node's program stopped
/// creating: a barrier may complete).
pub(crate) fn ring() {
    if let Some(one) = SINGLE.get() {
        one.bell.ring();
    }
}

/// The receiver: serves every instance's calls, forever.
fn receive(reg: &Registry, one: &'static Single) {
    let mut mine: Vec<Served> = Vec::new();
    // Instances in the barrier round (answered when it completes).
    let mut waiting: Vec<&'static Mailbox> = Vec::new();
    let mut looked = Instant::now();
    loop {
        let seen = one.bell.rung();
        mine.append(&mut one.new.lock().unwrap_or_else(|e| e.into_inner()));
        let mut busy = false;
        let mut i = 0;
        while i < mine.len() {
            // An arrival at the barrier keeps its request until the round
            // completes: not taken again.
            if waiting.iter().any(|m| std::ptr::eq(*m, mine[i].mb)) {
                i += 1;
                continue;
            }
            match mine[i].mb.take(Duration::ZERO) {
                // Nothing, or an unusable mailbox: its death is found below.
                Ok(Taken::Nothing) | Err(_) => {}
                Ok(Taken::Call(CallReq::Barrier, _)) => {
                    busy = true;
                    locked(reg).arrived += 1;
                    waiting.push(mine[i].mb);
                }
                Ok(t) => {
                    busy = true;
                    if let Step::Gone = step(reg, &mut mine[i], t) {
                        mine.swap_remove(i);
                        continue;
                    }
                }
            }
            i += 1;
        }
        if looked.elapsed() >= POLL {
            looked = Instant::now();
            reap(reg, &mut mine, &mut waiting);
        }
        settle(reg, &mine, &mut waiting);
        if !busy {
            one.bell.wait(seen, POLL);
        }
    }
}

/// Records the instances that ended (an arrival at the barrier that died
/// does not wait any more; its death fails the round).
fn reap(reg: &Registry, mine: &mut Vec<Served>, waiting: &mut Vec<&'static Mailbox>) {
    let mut i = 0;
    while i < mine.len() {
        let Some(status) = ended(&mine[i]) else {
            i += 1;
            continue;
        };
        let s = mine.swap_remove(i);
        if let Some(k) = waiting.iter().position(|m| std::ptr::eq(*m, s.mb)) {
            waiting.swap_remove(k);
            locked(reg).arrived -= 1;
        }
        finish(reg, s, status);
    }
}

/// Completes the barrier round if it is due: the node takes part in the
/// barrier of all nodes once for its instances, then answers them all.
fn settle(reg: &Registry, mine: &[Served], waiting: &mut Vec<&'static Mailbox>) {
    let Some(first) = mine.first() else { return };
    if waiting.is_empty() {
        return;
    }
    let mut s = locked(reg);
    let r = match due(&s) {
        Due::Wait => return,
        Due::Fail(e) => Err(e),
        Due::Release => {
            s.releasing = true;
            drop(s);
            let r = first.caller.call(CallReq::Barrier).map(drop);
            s = locked(reg);
            r
        }
    };
    finish_round(&mut s, r.clone());
    drop(s);
    reg.changed.notify_all();
    let out = r.map(|_| Vec::new());
    for mb in waiting.drain(..) {
        mb.answer(&out, None);
    }
}
