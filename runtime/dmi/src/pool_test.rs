// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The frames and their index under a writer that keeps changing, killing
//! and reusing frames while readers read: no accepted read is torn, of
//! another page, or older than one the same reader accepted before.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::{Frame, Store};
use crate::addr::{PageId, Region, Regions};

const PAGES: u64 = 6;
const WORDS: usize = 64;

fn fill(page: u64, v: u64) -> Vec<u8> {
    let w = page << 40 | v;
    (0..WORDS).flat_map(|_| w.to_le_bytes()).collect()
}

#[test]
fn reads_are_whole_current_and_of_their_page() {
    let store = Store::heap();
    let mut regions = Regions::with_root();
    let r = Region::new(2, (WORDS * 8) as i64, PAGES as i64).unwrap();
    regions.insert(r);
    store.publish_regions(&regions);
    let ix = store.index();
    let page = |index| PageId { region: 2, index };
    let mut frames: Vec<Option<Frame>> = (0..PAGES)
        .map(|p| Some(store.frame(page(p), &fill(p, 1))))
        .collect();
    for f in frames.iter().flatten() {
        f.set_readable();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut last = [0u64; PAGES as usize];
                let (mut hits, mut misses) = (0u64, 0u64);
                let mut buf = vec![0u8; WORDS * 8];
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let p = i % PAGES;
                    let addr = r.base() + (p * (WORDS as u64) * 8) as i64;
                    if !ix.read(addr, &mut buf) {
                        misses += 1;
                        continue;
                    }
                    hits += 1;
                    let w: Vec<u64> = buf
                        .chunks_exact(8)
                        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                        .collect();
                    assert!(w.iter().all(|&x| x == w[0]), "torn read of page {p}");
                    assert_eq!(w[0] >> 40, p, "read another page's frame");
                    let v = w[0] & ((1 << 40) - 1);
                    assert!(v >= last[p as usize], "page {p} went back");
                    last[p as usize] = v;
                }
                (hits, misses)
            })
        })
        .collect();
    // The writer: writes, busy periods (flag clear), and drops that free a
    // frame for another page (the next page's new frame reuses it).
    for v in 2..60_000u64 {
        let p = (v % PAGES) as usize;
        match v % 7 {
            0 => {
                frames[p] = None;
                let q = (p + 1) % PAGES as usize;
                let keep = frames[q].as_ref().map(|f| f.to_vec());
                frames[q] = None;
                frames[p] = Some(store.frame(page(p as u64), &fill(p as u64, v)));
                if let Some(b) = keep {
                    frames[q] = Some(store.frame(page(q as u64), &b));
                }
            }
            _ => {
                if let Some(f) = frames[p].as_mut() {
                    f.write(0, &fill(p as u64, v));
                }
            }
        }
        if v % 5 != 0 {
            for f in frames.iter().flatten() {
                f.set_readable();
            }
        }
        store.take_dirty();
    }
    stop.store(true, Ordering::Relaxed);
    let (mut hits, mut misses) = (0, 0);
    for r in readers {
        let (h, m) = r.join().unwrap();
        hits += h;
        misses += m;
    }
    assert!(
        hits > 0,
        "no read was served from the frames ({misses} misses)"
    );
}

#[test]
fn misses_outside_regions_past_pages_and_when_closed() {
    let store = Store::heap();
    let mut regions = Regions::with_root();
    let r = Region::new(3, 16, 2).unwrap();
    regions.insert(r);
    store.publish_regions(&regions);
    let ix = store.index();
    let f = store.frame(
        PageId {
            region: 3,
            index: 1,
        },
        &[7u8; 16],
    );
    let mut b = [0u8; 16];
    assert!(
        !ix.read(r.base() + 16, &mut b),
        "not readable before publish"
    );
    f.set_readable();
    assert!(ix.read(r.base() + 16, &mut b));
    assert_eq!(b, [7u8; 16]);
    // Spanning into a page this node does not hold, past the region, in
    // an unknown region, at address 0.
    let mut two = [0u8; 20];
    assert!(!ix.read(r.base() + 12, &mut two));
    assert!(!ix.read(r.base() + 32, &mut b));
    assert!(!ix.read(4 << crate::addr::REGION_SHIFT, &mut b));
    assert!(!ix.read(0, &mut b));
    // A part of the page.
    let mut part = [0u8; 4];
    assert!(ix.read(r.base() + 20, &mut part));
    assert_eq!(part, [7u8; 4]);
    // Unmapped region: the table is republished without it.
    regions.remove(3);
    store.publish_regions(&regions);
    assert!(!ix.read(r.base() + 16, &mut b));
    regions.insert(r);
    store.publish_regions(&regions);
    assert!(ix.read(r.base() + 16, &mut b));
    store.close();
    assert!(!ix.read(r.base() + 16, &mut b), "closed");
    drop(f);
}
