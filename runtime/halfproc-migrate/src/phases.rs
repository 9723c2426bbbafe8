//! Optional per-phase timing of a checkpoint and a restore, for
//! `halfproc bench migrate --phases`: off unless [`start`] was called on
//! the thread (then every phase adds its wall time to a per-thread list
//! that [`take`] returns). Phases are coarse (per VMA at most), so the
//! cost when on is a few clock reads.

use std::cell::RefCell;
use std::time::{Duration, Instant};

/// The phase in which a checkpoint waits for the signal of an interval
/// timer that expired between its two readings and reads the queues again
/// (`itimers::expired_between`): there only when that happened.
pub const ITIMER_EXPIRED: &str = "itimers: expired while frozen, queues read again";

thread_local! {
    static PHASES: RefCell<Option<Vec<(&'static str, Duration)>>> = const { RefCell::new(None) };
}

/// Starts (or restarts, from zero) collecting phase times on this thread.
pub fn start() {
    PHASES.with(|p| *p.borrow_mut() = Some(Vec::new()));
}

/// The times collected since [`start`], summed per phase name in the order
/// each name first appeared; collecting stops.
pub fn take() -> Vec<(&'static str, Duration)> {
    PHASES.with(|p| p.borrow_mut().take()).unwrap_or_default()
}

/// Adds `d` to phase `name` if collecting.
pub fn add(name: &'static str, d: Duration) {
    PHASES.with(|p| {
        if let Some(v) = p.borrow_mut().as_mut() {
            match v.iter_mut().find(|(n, _)| *n == name) {
                Some((_, t)) => *t += d,
                None => v.push((name, d)),
            }
        }
    });
}

/// Runs `f`, counting its wall time as phase `name`.
pub(crate) fn time<T>(name: &'static str, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    add(name, t.elapsed());
    r
}

#[cfg(test)]
mod tests {
    #[test]
    fn sums_per_name_only_when_started() {
        super::add("x", std::time::Duration::from_millis(1));
        assert!(super::take().is_empty());
        super::start();
        super::add("a", std::time::Duration::from_millis(1));
        super::add("b", std::time::Duration::from_millis(2));
        super::add("a", std::time::Duration::from_millis(3));
        let v = super::take();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0], ("a", std::time::Duration::from_millis(4)));
        assert_eq!(v[1].0, "b");
        assert!(super::take().is_empty());
    }
}
