// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Case: allocator stress in the style of mimalloc's test-stress.

use super::*;

// ---------------------------------------------------------------------------
// Stress in the style of mimalloc's test-stress: blocks stamped with cookies,
// handed between members through a shared transfer array, checked on free.

const TRANSFERS: usize = 1000;
const COOKIE: u64 = 0xbf58_476d_1ce4_e5b9;

#[repr(C)]
struct Stress {
    transfer: [AtomicUsize; TRANSFERS],
    deadline_ms: u64,
    errors: AtomicU64,
    ops: AtomicU64,
    seed: AtomicU64,
}

fn pick(r: &mut u64) -> u64 {
    // splitmix64: deterministic per member.
    *r = r.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *r;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A block of `words` u64: word 0 = count, the rest = cookie ^ address ^ i.
fn stress_alloc(r: &mut u64) -> *mut u64 {
    let roll = pick(r) % 100;
    let words = if roll == 0 {
        1 + (pick(r) % 40_000) as usize // rare large (up to 320 KiB)
    } else if roll < 10 {
        1 + (pick(r) % 1000) as usize
    } else {
        1 + (pick(r) % 16) as usize
    };
    let p = alloc::malloc(words * 8) as *mut u64;
    if p.is_null() {
        return p;
    }
    // SAFETY: fresh block of `words` u64.
    unsafe {
        *p = words as u64;
        for i in 1..words {
            *p.add(i) = COOKIE ^ (p as u64) ^ i as u64;
        }
    }
    p
}

/// Checks the stamps, then frees; returns false on corruption.
fn stress_free(p: *mut u64) -> bool {
    if p.is_null() {
        return true;
    }
    // SAFETY: `p` is a live stress block stamped by stress_alloc.
    unsafe {
        let words = *p as usize;
        let mut ok =
            words > 0 && words <= 40_001 && alloc::usable_size(p as *const u8) >= words * 8;
        if ok {
            for i in 1..words {
                if *p.add(i) != COOKIE ^ (p as u64) ^ i as u64 {
                    ok = false;
                    break;
                }
            }
        }
        alloc::free(p as *mut u8);
        ok
    }
}

fn stress_member(s: &Stress) -> i32 {
    let mut r = s
        .seed
        .fetch_add(1, Ordering::SeqCst)
        .wrapping_mul(0x2545_f491_4f6c_dd1d);
    let deadline = Instant::now() + Duration::from_millis(s.deadline_ms);
    let mut local: Vec<*mut u64> = Vec::with_capacity(512);
    let mut ops = 0u64;
    while Instant::now() < deadline {
        for _ in 0..256 {
            ops += 1;
            match pick(&mut r) % 4 {
                0 | 1 => {
                    if local.len() < 500 {
                        local.push(stress_alloc(&mut r));
                    }
                }
                2 => {
                    if !local.is_empty() {
                        let i = (pick(&mut r) as usize) % local.len();
                        if !stress_free(local.swap_remove(i)) {
                            s.errors.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
                _ => {
                    // Hand a block to whoever picks this slot next (any member).
                    let slot = &s.transfer[(pick(&mut r) as usize) % TRANSFERS];
                    let mine = local.pop().unwrap_or_else(|| stress_alloc(&mut r));
                    let theirs = slot.swap(mine as usize, Ordering::AcqRel) as *mut u64;
                    if !stress_free(theirs) {
                        s.errors.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        }
    }
    for p in local {
        if !stress_free(p) {
            s.errors.fetch_add(1, Ordering::SeqCst);
        }
    }
    s.ops.fetch_add(ops, Ordering::SeqCst);
    0
}

pub(super) fn alloc_stress(set: &'static Set) -> Result<(), String> {
    let s = leak(Stress {
        transfer: core::array::from_fn(|_| AtomicUsize::new(0)),
        deadline_ms: 1500,
        errors: AtomicU64::new(0),
        ops: AtomicU64::new(0),
        seed: AtomicU64::new(1),
    });
    let before = alloc::stats(set).pages_in_use;
    let ms: Vec<_> = (0..3)
        .map(|_| spawn(set, stress_member, s))
        .collect::<Result<_, _>>()?;
    for m in ms {
        join_ok(m)?;
    }
    for slot in s.transfer.iter() {
        if !stress_free(slot.swap(0, Ordering::AcqRel) as *mut u64) {
            s.errors.fetch_add(1, Ordering::SeqCst);
        }
    }
    alloc::collect();
    let errors = s.errors.load(Ordering::SeqCst);
    println!(
        "# stress: {} operations, {} heaps, pages in use {} -> {}",
        s.ops.load(Ordering::SeqCst),
        alloc::heaps_in_use(set),
        before,
        alloc::stats(set).pages_in_use
    );
    ensure!(errors == 0, "{errors} corrupted blocks");
    ensure!(
        s.ops.load(Ordering::SeqCst) > 10_000,
        "stress made too little progress"
    );
    Ok(())
}
