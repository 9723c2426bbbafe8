//! The restorer blob: position-independent x86_64 code that runs from a
//! region outside every address range it rebuilds. It executes a table of
//! system calls prepared by [`crate::restore`] (unmap everything, map every
//! VMA, read the pages, reopen fds, set limits and handlers, ...), checking
//! each result, and ends in `rt_sigreturn` on a crafted frame. On a failed
//! call it writes `[op index, result]` (16 bytes) to a status pipe and exits
//! with 127; the restoring tool reads that pipe to name the failing step.
//!
//! The code is copied byte for byte, so it may not reference anything
//! outside itself: no calls, no absolute addresses, no memory but the table.
//! [`child_enter`] (Rust, in the forked child) maps the region and jumps in.

/// One system call of the table (64 bytes, read by the blob).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Op {
    pub nr: u64,
    pub args: [u64; 6],
    /// [`ANY_OK`], [`IGNORE`], or the exact expected return value.
    pub expect: u64,
}

/// First word of the restorer's stack page in a restored process, followed
/// by the length of the region: `checkpoint` skips such a region (the blob
/// stays mapped after `rt_sigreturn`, it cannot unmap the code it runs).
pub const REGION_MAGIC: u64 = 0x6870_7265_7374_6f72; // "hprestor"
/// Size of the code page at the start of the region.
pub const CODE_SIZE: u64 = 4096;

/// Pseudo system call number: copy `args[2]` bytes from `args[1]` to
/// `args[0]` with `rep movsb` in the blob itself (result: the length).
/// Never a real system call number. Used to fill pages from contents the
/// child inherited, at memory-copy speed, where `process_vm_writev` would
/// pin every target page first; both ranges must be mapped (the plan only
/// copies from the contents it moved in into runs inside VMAs it mapped
/// writable), since a fault here would kill the child without a report.
pub const COPY: u64 = u64::MAX - 2;
/// Any non-error result (not in `-4095..=-1`) is accepted.
pub const ANY_OK: u64 = u64::MAX;
/// The result is not checked.
pub const IGNORE: u64 = u64::MAX - 1;

impl Op {
    /// A call that must not fail.
    pub fn new(nr: libc::c_long, args: &[u64], expect: u64) -> Op {
        let mut a = [0u64; 6];
        a[..args.len()].copy_from_slice(args);
        Op {
            nr: nr as u64,
            args: a,
            expect,
        }
    }
}

core::arch::global_asm!(
    ".pushsection .text.halfproc_migrate_restorer,\"ax\",@progbits",
    ".globl halfproc_migrate_restorer_start",
    ".globl halfproc_migrate_restorer_end",
    ".p2align 4",
    // rdi = ops, rsi = count, rdx = ucontext (new rsp), rcx = status fd, r8 = error slot
    "halfproc_migrate_restorer_start:",
    "mov r12, rdi",
    "mov r13, rsi",
    "mov r14, rdx",
    "mov r15, rcx",
    "mov rbp, r8",
    "xor ebx, ebx",
    "2:",
    "cmp rbx, r13",
    "jae 5f",
    "mov rax, [r12]",
    "cmp rax, -3", // COPY
    "jne 7f",
    "mov rdi, [r12 + 8]",
    "mov rsi, [r12 + 16]",
    "mov rcx, [r12 + 24]",
    "mov rax, rcx",
    "cld",
    "rep movsb",
    "jmp 8f",
    "7:",
    "mov rdi, [r12 + 8]",
    "mov rsi, [r12 + 16]",
    "mov rdx, [r12 + 24]",
    "mov r10, [r12 + 32]",
    "mov r8, [r12 + 40]",
    "mov r9, [r12 + 48]",
    "syscall",
    "8:",
    "mov rcx, [r12 + 56]",
    "cmp rcx, -2",
    "je 4f",
    "cmp rcx, -1",
    "jne 3f",
    "cmp rax, -4095",
    "jae 6f",
    "jmp 4f",
    "3:",
    "cmp rax, rcx",
    "jne 6f",
    "4:",
    "add r12, 64",
    "inc rbx",
    "jmp 2b",
    "5:",
    "mov rsp, r14",
    "mov eax, 15",
    "syscall",
    "ud2",
    "6:",
    "mov [rbp], rbx",
    "mov [rbp + 8], rax",
    "mov eax, 1",
    "mov rdi, r15",
    "mov rsi, rbp",
    "mov edx, 16",
    "syscall",
    "mov eax, 231",
    "mov edi, 127",
    "syscall",
    "ud2",
    "halfproc_migrate_restorer_end:",
    ".popsection",
);

extern "C" {
    static halfproc_migrate_restorer_start: u8;
    static halfproc_migrate_restorer_end: u8;
}

/// The machine code of the blob.
pub fn code() -> &'static [u8] {
    // SAFETY: both symbols are labels of the global_asm block above, in one
    // section, start before end; the bytes between them are immutable code.
    unsafe {
        let s = &raw const halfproc_migrate_restorer_start;
        let e = &raw const halfproc_migrate_restorer_end;
        std::slice::from_raw_parts(s, e.offset_from(s) as usize)
    }
}

/// The forked child: map `R`, copy the blob in, jump to it.
///
/// # Safety
///
/// Must be called only in a freshly forked child; `r..r+r_len` must be free.
pub(crate) unsafe fn child_enter(
    r: u64,
    r_len: u64,
    code: &[u8],
    p: &crate::restore_plan::Plan,
    data_base: u64,
    status_fd: u64,
    status_w: i32,
) -> ! {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE;
    // SAFETY: anonymous mapping at a free address (MAP_FIXED_NOREPLACE
    // refuses to clobber anything).
    let got = unsafe {
        libc::mmap(
            r as *mut _,
            r_len as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if got as u64 != r {
        // SAFETY: we are the forked child, which is to exit.
        unsafe { crate::restore::fail_in_child(status_w, u64::MAX, -(libc::EEXIST as i64)) }
    }
    // SAFETY: `R` is ours and large enough for code + stack + data (sized by
    // the parent from the same plan); the sources are live in this process;
    // the pid slots are 8-byte aligned words of the op table inside the data.
    unsafe {
        std::ptr::copy_nonoverlapping(code.as_ptr(), r as *mut u8, code.len());
        std::ptr::copy_nonoverlapping(p.data.as_ptr(), data_base as *mut u8, p.data.len());
        // The new thread id for the plan's copy into the C library's word.
        (p.tid_slot as *mut u32).write(libc::syscall(libc::SYS_gettid) as u32);
        let marker = (r + CODE_SIZE) as *mut u64;
        marker.write(REGION_MAGIC);
        marker.add(1).write(r_len);
        // Our pid, which the plan could not know, into the re-queues' args.
        let me = libc::syscall(libc::SYS_getpid) as u64;
        for &slot in &p.pid_slots {
            (slot as *mut u64).write(me);
        }
        libc::mprotect(
            r as *mut _,
            CODE_SIZE as usize,
            libc::PROT_READ | libc::PROT_EXEC,
        );
    }
    let stack_top = r + CODE_SIZE + crate::restore::STACK_SIZE - 64;
    // SAFETY: jumps to the blob on its own stack with the register arguments
    // it documents; it never returns (rt_sigreturn or exit_group).
    unsafe {
        core::arch::asm!(
            "mov rsp, {stk}",
            "jmp {entry}",
            stk = in(reg) stack_top,
            entry = in(reg) r,
            in("rdi") p.ops_addr,
            in("rsi") p.nops,
            in("rdx") p.uc_addr,
            in("rcx") status_fd,
            in("r8") p.err_slot,
            options(noreturn)
        )
    }
}

/// Forks the process that becomes the restored one, with the original's
/// process id `pid` when it is free and we may choose it (`clone3` with
/// `set_tid`, as CRIU does), else with a new one. With `member` (on the
/// kernel backend, see [`crate::restore_check::restored_in_set`]) with
/// `CLONE_HALFPROC` too, so the copy joins the caller's set like the
/// original was, and `dmread` reaches it for the next migration; without,
/// a plain fork, which a member's child is outside any set.
///
/// The same id matters to the program, not only to its user: the C
/// library records a thread's id in the locks it holds (an rwlock's
/// writer, a recursive or error-checking mutex's owner) and compares it
/// with its own copy of the id, which the restore sets to the new one. A
/// copy moved under another id while holding such a lock no longer owns
/// it: `pthread_rwlock_unlock` takes the reader's path and leaves the lock
/// write-locked, and the next read lock waits forever (see
/// docs/migration.md, "The same pid").
///
/// # Safety
///
/// As for `fork` in a multi-threaded process: the child may only make raw
/// system calls and copy bytes (`clone3` runs no `pthread_atfork` handlers).
pub(crate) unsafe fn spawn(pid: i32, member: bool) -> crate::error::Result<i32> {
    if pid > 0 {
        // SAFETY: per the contract.
        match unsafe { halfproc_sys::task::fork_with_pid(pid, member) } {
            Ok(child) => return Ok(child),
            // In use (the original still there: a migration that keeps it
            // until the copy exists), not ours to choose, beyond pid_max
            // here (another machine's pid), no clone3: a new id.
            Err(e)
                if matches!(
                    e.errno(),
                    libc::EEXIST | libc::EPERM | libc::EINVAL | libc::ENOSYS
                ) => {}
            Err(e) => return Err(crate::error::Error::Restore(format!("{e}"))),
        }
    }
    if member {
        // SAFETY: per the contract.
        return unsafe { halfproc_sys::task::clone_member() }
            .map_err(|e| crate::error::Error::Restore(format!("{e}")));
    }
    // SAFETY: per the contract.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(crate::error::Error::last("fork"));
    }
    Ok(pid)
}
