// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Cases: the shared-arena allocator (basics, bad input, cross-member
//! frees, returning memory, SharedVec, foreign/double frees, K&R baseline).

use super::*;

pub(super) fn alloc_basics(set: &'static Set) -> Result<(), String> {
    for size in [
        0usize,
        1,
        15,
        16,
        17,
        100,
        1000,
        8192,
        8193,
        100_000,
        3 << 20,
    ] {
        let p = alloc::malloc(size);
        ensure!(
            !p.is_null() && set.contains(p as usize),
            "malloc({size}) = {p:p}"
        );
        ensure!(p as usize % 16 == 0, "malloc({size}) misaligned");
        // SAFETY: p is a live block of at least `size` bytes.
        unsafe {
            ensure!(
                alloc::usable_size(p) >= size,
                "usable_size too small for {size}"
            );
            p.write_bytes(0x5a, size);
            alloc::free(p);
        }
    }
    let c = alloc::calloc(100, 40);
    ensure!(!c.is_null(), "calloc(100, 40) failed");
    // SAFETY: 4000 bytes were allocated.
    let zeroed = unsafe { core::slice::from_raw_parts(c, 4000) };
    ensure!(zeroed.iter().all(|&b| b == 0), "calloc not zeroed");
    // SAFETY: c is live.
    unsafe { alloc::free(c) };
    let mut p = alloc::malloc(10);
    // SAFETY: p is live; realloc preserves the prefix.
    unsafe {
        for i in 0..10 {
            *p.add(i) = i as u8;
        }
        for size in [20, 200, 5000, 70_000, 300_000, 50] {
            p = alloc::realloc(p, size);
            ensure!(!p.is_null(), "realloc to {size} failed");
            for i in 0..10 {
                ensure!(*p.add(i) == i as u8, "realloc to {size} lost byte {i}");
            }
        }
        ensure!(alloc::realloc(p, 0).is_null(), "realloc(p, 0) should free");
    }
    for align in [32usize, 64, 256, 4096, 65536, 1 << 20] {
        for size in [1usize, 100, 10_000] {
            let p = alloc::aligned_alloc(align, size);
            ensure!(
                !p.is_null() && p as usize % align == 0,
                "aligned_alloc({align}, {size}) = {p:p}"
            );
            // SAFETY: live block.
            unsafe { alloc::free(p) };
        }
    }
    Ok(())
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub(super) fn alloc_bad_input(set: &'static Set) -> Result<(), String> {
    ensure!(
        alloc::calloc(usize::MAX, 2).is_null() && errno() == libc::ENOMEM,
        "calloc overflow"
    );
    ensure!(
        alloc::malloc(usize::MAX).is_null() && errno() == libc::ENOMEM,
        "malloc(SIZE_MAX)"
    );
    ensure!(
        alloc::malloc(set.size() as usize + 1).is_null() && errno() == libc::ENOMEM,
        "malloc > arena"
    );
    ensure!(
        alloc::aligned_alloc(3, 16).is_null() && errno() == libc::EINVAL,
        "aligned_alloc(3)"
    );
    let p = alloc::malloc(8);
    // SAFETY: p is live; an impossible size must fail and leave p alone.
    unsafe {
        ensure!(
            alloc::realloc(p, usize::MAX).is_null() && errno() == libc::ENOMEM,
            "realloc overflow"
        );
        *p = 1;
        alloc::free(p);
    }
    Ok(())
}

#[repr(C)]
struct Handoff {
    slots: [AtomicUsize; 256],
    sizes: [AtomicUsize; 256],
    mode: AtomicU32,
}

fn handoff_member(h: &Handoff) -> i32 {
    if h.mode.load(Ordering::SeqCst) == 0 {
        // Allocate for the creator to free.
        for (i, s) in h.slots.iter().enumerate() {
            let size = 8 + (i * 37) % 3000;
            let p = alloc::malloc(size);
            if p.is_null() {
                return 1;
            }
            // SAFETY: live block of `size` bytes.
            unsafe { p.write_bytes(i as u8, size) };
            h.sizes[i].store(size, Ordering::SeqCst);
            s.store(p as usize, Ordering::SeqCst);
        }
    } else {
        // Free what the creator allocated, after checking it.
        for (i, s) in h.slots.iter().enumerate() {
            let p = s.swap(0, Ordering::SeqCst) as *mut u8;
            let size = h.sizes[i].load(Ordering::SeqCst);
            // SAFETY: the creator handed us a live block of `size` bytes.
            unsafe {
                if core::slice::from_raw_parts(p, size)
                    .iter()
                    .any(|&b| b != !(i as u8))
                {
                    return 2;
                }
                alloc::free(p);
            }
        }
    }
    0
}

pub(super) fn alloc_cross_member_free(set: &'static Set) -> Result<(), String> {
    let h: &Handoff = leak(Handoff {
        slots: core::array::from_fn(|_| AtomicUsize::new(0)),
        sizes: core::array::from_fn(|_| AtomicUsize::new(0)),
        mode: AtomicU32::new(0),
    });
    for _round in 0..3 {
        h.mode.store(0, Ordering::SeqCst);
        join_ok(spawn(set, handoff_member, h)?)?;
        for (i, s) in h.slots.iter().enumerate() {
            let p = s.swap(0, Ordering::SeqCst) as *mut u8;
            let size = h.sizes[i].load(Ordering::SeqCst);
            // SAFETY: the member handed us a live block of `size` bytes.
            unsafe {
                ensure!(
                    core::slice::from_raw_parts(p, size)
                        .iter()
                        .all(|&b| b == i as u8),
                    "block {i} corrupted"
                );
                alloc::free(p);
            }
        }
        h.mode.store(1, Ordering::SeqCst);
        for (i, s) in h.slots.iter().enumerate() {
            let size = 8 + (i * 53) % 5000;
            let p = alloc::malloc(size);
            // SAFETY: live block.
            unsafe { p.write_bytes(!(i as u8), size) };
            h.sizes[i].store(size, Ordering::SeqCst);
            s.store(p as usize, Ordering::SeqCst);
        }
        join_ok(spawn(set, handoff_member, h)?)?;
    }
    // Our own heap collects the remote frees and can reuse the blocks.
    alloc::collect();
    Ok(())
}

fn resident_pages(p: *const u8, len: usize) -> usize {
    let mut v = vec![0u8; len.div_ceil(4096)];
    // SAFETY: `p` is page-aligned and mapped for `len` bytes; `v` has one
    // byte per page.
    let r = unsafe { libc::mincore(p as *mut libc::c_void, len, v.as_mut_ptr()) };
    assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
    v.iter().filter(|&&b| b & 1 != 0).count()
}

#[repr(C)]
struct Big {
    addr: AtomicUsize,
}

fn big_free_member(b: &Big) -> i32 {
    let p = b.addr.load(Ordering::SeqCst) as *mut u8;
    // SAFETY: the creator handed us this live block.
    unsafe { alloc::free(p) };
    0
}

pub(super) fn alloc_returns_memory(set: &'static Set) -> Result<(), String> {
    const LEN: usize = 8 << 20;
    let p = alloc::malloc(LEN);
    ensure!(!p.is_null(), "malloc(8 MiB) failed");
    // SAFETY: live block of LEN bytes.
    unsafe { p.write_bytes(1, LEN) };
    let r = resident_pages(p, LEN);
    ensure!(r == LEN / 4096, "only {r} pages resident after touching");
    let before = alloc::stats(set).pages_released;
    // Freed by another member: released for everyone.
    let b = leak(Big {
        addr: AtomicUsize::new(p as usize),
    });
    join_ok(spawn(set, big_free_member, b)?)?;
    let r = resident_pages(p, LEN);
    ensure!(
        r == 0,
        "{r} pages still resident in the creator after a member freed them"
    );
    ensure!(
        alloc::stats(set).pages_released >= before + (LEN / alloc::arena::PAGE_SIZE) as u64,
        "stats"
    );
    // Small blocks: once all are freed and collected, their pages go back.
    let ptrs: Vec<_> = (0..20_000).map(|_| alloc::malloc(64) as usize).collect();
    let in_use = alloc::stats(set).pages_in_use;
    for &q in &ptrs {
        // SAFETY: live blocks.
        unsafe { alloc::free(q as *mut u8) };
    }
    alloc::collect();
    let after = alloc::stats(set).pages_in_use;
    ensure!(
        after + 15 <= in_use,
        "small pages not returned: {in_use} -> {after}"
    );
    Ok(())
}

fn vec_member(out: &AtomicUsize) -> i32 {
    let mut v: SharedVec<u64> = SharedVec::new_in(SharedAlloc);
    v.extend(0..10_000u64);
    let sum = v.iter().sum::<u64>();
    // Hand the vector's buffer to the creator.
    out.store(SharedVec::leak(v).as_ptr() as usize, Ordering::SeqCst);
    if sum == 49_995_000 {
        0
    } else {
        1
    }
}

pub(super) fn shared_vec_member(set: &'static Set) -> Result<(), String> {
    let out = leak(AtomicUsize::new(0));
    join_ok(spawn(set, vec_member, out)?)?;
    let p = out.load(Ordering::SeqCst) as *mut u64;
    ensure!(set.contains(p as usize), "vector buffer outside the range");
    // SAFETY: the member leaked a 10_000-element buffer to us.
    let s = unsafe { core::slice::from_raw_parts(p, 10_000) };
    ensure!(s[9_999] == 9_999, "contents");
    // SAFETY: leaked block of the shared allocator.
    unsafe { alloc::free(p as *mut u8) };
    Ok(())
}

fn free_stack_ptr(_: &AtomicI32) -> i32 {
    let mut x = 0u64;
    // SAFETY: deliberately wrong: must abort, not corrupt.
    unsafe { alloc::free(&mut x as *mut u64 as *mut u8) };
    0
}
fn double_free(_: &AtomicI32) -> i32 {
    let p = alloc::malloc(32);
    // SAFETY: deliberately wrong: must abort in debug builds.
    unsafe {
        alloc::free(p);
        alloc::free(p);
    }
    0
}
fn interior_free(_: &AtomicI32) -> i32 {
    let p = alloc::malloc(64);
    // SAFETY: deliberately wrong: must abort in debug builds.
    unsafe { alloc::free(p.add(8)) };
    0
}

pub(super) fn foreign_free_detected(set: &'static Set) -> Result<(), String> {
    let z = leak(AtomicI32::new(0));
    // stderr of these members carries the expected abort messages.
    let s = spawn(set, free_stack_ptr, z)?
        .join()
        .map_err(|e| e.to_string())?;
    ensure!(
        s == ExitStatus::Signaled(libc::SIGABRT),
        "free(stack pointer): {s}"
    );
    if cfg!(debug_assertions) {
        let s = spawn(set, double_free, z)?
            .join()
            .map_err(|e| e.to_string())?;
        ensure!(s == ExitStatus::Signaled(libc::SIGABRT), "double free: {s}");
        let s = spawn(set, interior_free, z)?
            .join()
            .map_err(|e| e.to_string())?;
        ensure!(
            s == ExitStatus::Signaled(libc::SIGABRT),
            "interior free: {s}"
        );
    }
    Ok(())
}

#[repr(C)]
struct KrShared {
    kr: AtomicUsize,
}

fn kr_member(k: &KrShared) -> i32 {
    // SAFETY: the creator stored a live &'static KrAllocator.
    let kr = unsafe { &*(k.kr.load(Ordering::SeqCst) as *const halfproc::alloc::kr::KrAllocator) };
    let mut v = Vec::new();
    for i in 0..2000usize {
        let p = kr.malloc(16 + i % 1000);
        if p.is_null() {
            return 1;
        }
        // SAFETY: live block.
        unsafe { p.write_bytes(7, 16 + i % 1000) };
        v.push(p);
    }
    for p in v {
        // SAFETY: blocks of this allocator.
        unsafe { kr.free(p) };
    }
    0
}

pub(super) fn kr_baseline(set: &'static Set) -> Result<(), String> {
    let kr = halfproc::alloc::kr::KrAllocator::new(set).map_err(|e| e.to_string())?;
    let k = leak(KrShared {
        kr: AtomicUsize::new(kr as *const _ as usize),
    });
    let ms: Vec<_> = (0..2)
        .map(|_| spawn(set, kr_member, k))
        .collect::<Result<_, _>>()?;
    kr_member(k);
    for m in ms {
        join_ok(m)?;
    }
    Ok(())
}
