// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! Cases: dmread/dmwrite between members' private memory, and bad input.

use super::*;

#[repr(C)]
struct DmMailbox {
    pid: AtomicI32,
    addr: AtomicUsize,
    step: AtomicU32,
}

fn dm_member(mb: &DmMailbox) -> i32 {
    // Private memory of this member: its own stack.
    let mut private = *b"member-private-data!";
    mb.addr
        .store(private.as_mut_ptr() as usize, Ordering::SeqCst);
    mb.pid.store(std::process::id() as i32, Ordering::SeqCst);
    mb.step.store(1, Ordering::SeqCst);
    let t0 = Instant::now();
    while mb.step.load(Ordering::SeqCst) != 2 {
        if t0.elapsed() > Duration::from_secs(10) {
            return 5;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // The creator overwrote it with dmwrite.
    if std::hint::black_box(&private) != b"written-by-creator!!" {
        return 6;
    }
    // And the member reads the creator's private memory.
    let mut buf = [0u8; 8];
    let creator = Set::get().unwrap().creator_pid();
    match halfproc::dmread(creator, &DM_CREATOR as *const u64 as usize, 8, &mut buf) {
        Ok(8) if u64::from_ne_bytes(buf) == 0xc0ffee => 0,
        _ => 7,
    }
}

static DM_CREATOR: u64 = 0xc0ffee;

pub(super) fn dm_members(set: &'static Set) -> Result<(), String> {
    let mb = leak(DmMailbox {
        pid: AtomicI32::new(0),
        addr: AtomicUsize::new(0),
        step: AtomicU32::new(0),
    });
    let m = spawn(set, dm_member, mb)?;
    let t0 = Instant::now();
    while mb.step.load(Ordering::SeqCst) != 1 {
        ensure!(
            t0.elapsed() < Duration::from_secs(10),
            "member never published"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let (pid, addr) = (
        mb.pid.load(Ordering::SeqCst),
        mb.addr.load(Ordering::SeqCst),
    );
    let mut buf = [0u8; 20];
    let n = halfproc::dmread(pid, addr, 20, &mut buf).map_err(|e| format!("dmread: {e}"))?;
    ensure!(
        n == 20 && &buf == b"member-private-data!",
        "dmread got {n} {:?}",
        String::from_utf8_lossy(&buf)
    );
    let n = halfproc::dmwrite(pid, addr, 20, b"written-by-creator!!")
        .map_err(|e| format!("dmwrite: {e}"))?;
    ensure!(n == 20, "dmwrite copied {n}");
    mb.step.store(2, Ordering::SeqCst);
    join_ok(m)
}

pub(super) fn dm_bad_input(set: &'static Set) -> Result<(), String> {
    let mut buf = [0u8; 16];
    // PID 1 is never a member.
    let e = halfproc::dmread(1, 0x1000, 16, &mut buf)
        .err()
        .ok_or("dmread(pid 1) succeeded")?;
    ensure!(e.raw_os_error() == Some(libc::EPERM), "dmread(pid 1): {e}");
    let e = halfproc::dmread(set.creator_pid(), 0x1000, 32, &mut buf)
        .err()
        .ok_or("len > buffer accepted")?;
    ensure!(
        e.kind() == std::io::ErrorKind::InvalidInput,
        "len > buffer: {e}"
    );
    // A remote range running into an unmapped page: partial copy.
    // SAFETY: a fresh private mapping of two pages; the second is unmapped.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    } as *mut u8;
    ensure!(p as isize != -1, "mmap");
    // SAFETY: unmapping the second page of our own mapping.
    unsafe { libc::munmap(p.add(4096) as *mut libc::c_void, 4096) };
    let mut big = vec![0u8; 8192];
    let r = halfproc::dmread(set.creator_pid(), p as usize + 4000, 200, &mut big);
    // SAFETY: unmapping the first page.
    unsafe { libc::munmap(p as *mut libc::c_void, 4096) };
    ensure!(matches!(r, Ok(96)), "partial copy gave {r:?}");
    let e = halfproc::dmread(set.creator_pid(), 16, 16, &mut buf)
        .err()
        .ok_or("read of address 16 succeeded")?;
    ensure!(e.raw_os_error() == Some(libc::EFAULT), "bad address: {e}");
    Ok(())
}
