// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Recovery of a dead instance's fast write, the writer's steps done by
//! hand up to the point where it "dies" (the process test
//! `tests/fastwrite_kill.rs` kills a real one): a write of two frames that
//! died before committing is dropped, one that died after committing (a
//! frame half copied, or one already let go and changed by the engine
//! since) is completed in the frames it still held; every frame is let go,
//! whole, with the right version, and the engine can take it again.

use std::sync::atomic::Ordering;

use super::{Journal, Recovered};
use crate::addr::{PageId, Region, Regions};
use crate::pool::{Frame, Head, Store, FREE, HEAD};

/// Two granted frames of 16 bytes (1s at version 5, 2s at version 7), and a
/// journal in the shared range (its buffer comes from the shared arena).
fn setup() -> (Store, Frame, Frame, &'static Journal) {
    static SET: std::sync::Once = std::sync::Once::new();
    SET.call_once(|| {
        halfproc::Set::get()
            .or_else(|_| halfproc::Set::init_default())
            .expect("a half-process set for the journal's buffer");
    });
    let store = Store::heap();
    let mut regions = Regions::with_root();
    regions.insert(Region::new(5, 16, 2).unwrap());
    store.publish_regions(&regions);
    let page = |index| PageId { region: 5, index };
    let mut f0 = store.frame(page(0), &[1u8; 16]);
    let mut f1 = store.frame(page(1), &[2u8; 16]);
    f0.set_version(5);
    f1.set_version(7);
    for f in [&f0, &f1] {
        f.set_readable();
        f.set_writable();
    }
    let j = halfproc::SharedBox::leak(halfproc::alloc::shared_box(Journal::default()).unwrap());
    (store, f0, f1, j)
}

fn head(f: &Frame) -> &Head {
    f.head()
}

/// The writer's steps 1 and 2 up to holding both frames (as
/// `Index::hold` does): returns the odd sequence values.
fn hold_both(j: &Journal, f0: &Frame, f1: &Frame) -> [u64; 2] {
    j.open();
    [f0, f1].map(|f| {
        let k = usize::from(std::ptr::eq(f, f1));
        assert!(j.record_frame(k, head(f)));
        head(f)
            .holder
            .compare_exchange(FREE, j.id(), Ordering::AcqRel, Ordering::Relaxed)
            .unwrap();
        let n = head(f).seq.write_begin();
        j.record_version(k, head(f).version.load(Ordering::Relaxed));
        n
    })
}

fn data(f: &Frame) -> *mut u8 {
    // SAFETY: the data follows the head.
    unsafe { (f.head.as_ptr() as *mut u8).add(HEAD) }
}

fn let_go_and_check(f: &Frame, bytes: &[u8], version: u64) {
    let h = head(f);
    assert_eq!(h.holder.load(Ordering::Relaxed), FREE, "still held");
    assert!(h.seq.read_begin().is_some(), "left odd");
    assert_eq!(f.version(), version);
    assert_eq!(f.bytes(), bytes, "the engine reads it again");
}

#[test]
fn a_write_that_died_before_committing_is_dropped() {
    let (_s, f0, f1, j) = setup();
    hold_both(j, &f0, &f1);
    // SAFETY: the "writer" (this test) stopped using the journal.
    let r = unsafe { j.recover() };
    assert_eq!(
        r,
        Recovered {
            frames: 2,
            committed: false
        }
    );
    let_go_and_check(&f0, &[1u8; 16], 5);
    let_go_and_check(&f1, &[2u8; 16], 7);
    // SAFETY: as above; twice does nothing more.
    assert_eq!(unsafe { j.recover() }, Recovered::default());
}

#[test]
fn a_committed_write_torn_in_its_first_frame_is_completed() {
    let (_s, f0, f1, j) = setup();
    hold_both(j, &f0, &f1);
    let new = [9u8; 8];
    assert!(j.commit(&[(0, 8, &new[..]), (1, 0, &new[..]), (0, 0, &new[..2])]));
    // Half of the first part, then death.
    // SAFETY: the frame has 16 bytes; this "writer" holds it.
    unsafe { std::ptr::copy_nonoverlapping(new.as_ptr(), data(&f0).add(8), 4) };
    // SAFETY: the "writer" stopped.
    let r = unsafe { j.recover() };
    assert_eq!(
        r,
        Recovered {
            frames: 2,
            committed: true
        }
    );
    let mut want0 = [1u8; 16];
    want0[8..].fill(9);
    want0[..2].fill(9);
    let mut want1 = [2u8; 16];
    want1[..8].fill(9);
    // One version step per page part, as the writer would have made.
    let_go_and_check(&f0, &want0, 7);
    let_go_and_check(&f1, &want1, 8);
}

#[test]
fn a_frame_the_dead_writer_had_let_go_is_not_touched_again() {
    let (_s, mut f0, f1, j) = setup();
    let n = hold_both(j, &f0, &f1);
    let new = [9u8; 16];
    assert!(j.commit(&[(0, 0, &new[..]), (1, 0, &new[..])]));
    for f in [&f0, &f1] {
        // SAFETY: 16 bytes; held by this "writer".
        unsafe { std::ptr::copy_nonoverlapping(new.as_ptr(), data(f), 16) };
        let h = head(f);
        h.version
            .store(h.version.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }
    // Frame 0 let go, then death; the engine writes frame 0 meanwhile.
    head(&f0).unlock(n[0]);
    f0.write(0, &[4u8; 16]);
    // SAFETY: the "writer" stopped.
    let r = unsafe { j.recover() };
    assert_eq!(
        r,
        Recovered {
            frames: 1,
            committed: true
        }
    );
    let_go_and_check(&f0, &[4u8; 16], 6);
    let_go_and_check(&f1, &[9u8; 16], 8);
}
