//! Stopping and inspecting the target with ptrace: `PTRACE_SEIZE` +
//! `PTRACE_INTERRUPT`, register sets, rseq configuration, and single system
//! calls executed in the target (no parasite code: the target's own
//! `syscall` instruction is single-stepped with chosen registers).

use crate::error::{Error, Result};
use crate::image::reg;
use crate::mem::MemoryReader;
use crate::restorer::{CODE_SIZE, REGION_MAGIC};
use std::io;

const NT_PRSTATUS: libc::c_int = 1;
const NT_X86_XSTATE: libc::c_int = 0x202;
const PTRACE_GET_RSEQ_CONFIGURATION: libc::c_uint = 0x420f;
const PTRACE_EVENT_STOP: i32 = 128;

/// A process we have seized and stopped; detaches (leaving it running) on drop
/// unless [`Frozen::kill`] was called.
pub struct Frozen {
    pid: i32,
    attached: bool,
}

fn ptrace(req: libc::c_uint, pid: i32, addr: usize, data: usize) -> io::Result<libc::c_long> {
    // SAFETY: every request used in this file passes either integers or a
    // pointer to a live buffer of the size the request expects.
    let r = unsafe {
        libc::ptrace(
            req,
            pid,
            addr as *mut libc::c_void,
            data as *mut libc::c_void,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn wait_stop(pid: i32) -> Result<i32> {
    // Look first (WNOWAIT): an exit is left for the process's parent to
    // collect (a node daemon reports it to the program's user); only a stop
    // is consumed.
    loop {
        // SAFETY: zeroed siginfo is a valid out buffer for waitid.
        let mut si: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid with a valid siginfo pointer; nothing is consumed.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut si,
                libc::WEXITED | libc::WSTOPPED | libc::__WALL | libc::WNOWAIT,
            )
        };
        if r != 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::io(format!("waitid({pid})"), e));
        }
        if matches!(
            si.si_code,
            libc::CLD_EXITED | libc::CLD_KILLED | libc::CLD_DUMPED
        ) {
            return Err(Error::Restore(format!(
                "pid {pid} exited while being frozen"
            )));
        }
        break;
    }
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if r == pid {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(Error::io(format!("waitpid({pid})"), e));
        }
    }
    if !libc::WIFSTOPPED(status) {
        return Err(Error::Restore(format!(
            "pid {pid} exited while being frozen (status {status:#x})"
        )));
    }
    Ok(status)
}

impl Frozen {
    /// Seizes `pid` and stops it in a `PTRACE_EVENT_STOP`.
    pub fn seize(pid: i32) -> Result<Frozen> {
        ptrace(libc::PTRACE_SEIZE, pid, 0, 0).map_err(|e| {
            if e.raw_os_error() == Some(libc::ESRCH) {
                Error::Gone(pid)
            } else {
                Error::io(format!("PTRACE_SEIZE pid {pid}"), e)
            }
        })?;
        let mut f = Frozen {
            pid,
            attached: true,
        };
        for _ in 0..16 {
            ptrace(libc::PTRACE_INTERRUPT, pid, 0, 0)
                .map_err(|e| Error::io("PTRACE_INTERRUPT", e))?;
            let status = wait_stop(pid)?;
            if status >> 16 == PTRACE_EVENT_STOP {
                f.leave_restorer(status)?;
                return Ok(f);
            }
            // A signal-delivery stop raced with us: deliver it and retry.
            let sig = libc::WSTOPSIG(status);
            ptrace(libc::PTRACE_CONT, pid, 0, sig as usize)
                .map_err(|e| Error::io("PTRACE_CONT", e))?;
        }
        f.detach();
        Err(Error::Restore(format!(
            "pid {pid} kept receiving signals; not frozen"
        )))
    }

    /// Start of the restorer code page `rip` is in, if it is in one: a copy
    /// made by [`crate::restore`] that has not yet run its `rt_sigreturn`
    /// (see `restorer::REGION_MAGIC`, the first word after that page).
    fn restorer_code(&self, rip: u64) -> Option<u64> {
        let code = rip & !(CODE_SIZE - 1);
        let mut b = [0u8; 16];
        let local = libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        };
        let remote = libc::iovec {
            iov_base: (code + CODE_SIZE) as *mut libc::c_void,
            iov_len: b.len(),
        };
        // SAFETY: reads 16 bytes of the (stopped, traced) target into `b`.
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        let word = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        (n == 16 && word(0) == REGION_MAGIC && word(8) > CODE_SIZE).then_some(code)
    }

    /// A copy made by [`crate::restore`] runs the restorer blob for a
    /// moment after `restore` returned (the status pipe is closed just
    /// before its `rt_sigreturn`). Stopped there, its registers are the
    /// blob's, not the program's: dumped, the next copy would resume in its
    /// own blob with them and `rt_sigreturn` to the same frame forever.
    /// Runs it on, from system call stop to system call stop, until its
    /// `rt_sigreturn` has put the program's registers back. `status`: the
    /// stop we hold; a group stop there (restored with
    /// [`crate::RestoreOptions::stopped`], not continued yet) is refused.
    fn leave_restorer(&self, status: i32) -> Result<()> {
        let Some(code) = self.restorer_code(self.regs()?[reg::RIP]) else {
            return Ok(());
        };
        let pid = self.pid;
        if libc::WSTOPSIG(status) != libc::SIGTRAP {
            return Err(Error::Restore(format!(
                "pid {pid} is stopped inside its restorer (restored stopped, not continued yet)"
            )));
        }
        ptrace(
            libc::PTRACE_SETOPTIONS,
            pid,
            0,
            libc::PTRACE_O_TRACESYSGOOD as usize,
        )
        .map_err(|e| Error::io("PTRACE_SETOPTIONS", e))?;
        // Two stops per system call; the blob's ops after the status pipe
        // is closed are a few, but a pid caught earlier has more to do.
        for _ in 0..1_000_000 {
            ptrace(libc::PTRACE_SYSCALL, pid, 0, 0).map_err(|e| Error::io("PTRACE_SYSCALL", e))?;
            let st = wait_stop(pid)?;
            if st >> 8 != libc::SIGTRAP | 0x80 {
                return Err(Error::Restore(format!(
                    "pid {pid}: stop {st:#x} while finishing its restorer"
                )));
            }
            let rip = self.regs()?[reg::RIP];
            if !(code..code + CODE_SIZE).contains(&rip) {
                return Ok(());
            }
        }
        Err(Error::Restore(format!(
            "pid {pid} does not leave its restorer"
        )))
    }

    /// Pid of the frozen process.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    fn getregset(&self, nt: libc::c_int, buf: &mut [u8]) -> Result<usize> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        ptrace(
            libc::PTRACE_GETREGSET,
            self.pid,
            nt as usize,
            &mut iov as *mut _ as usize,
        )
        .map_err(|e| Error::io(format!("PTRACE_GETREGSET {nt:#x}"), e))?;
        Ok(iov.iov_len)
    }

    /// `user_regs_struct` (NT_PRSTATUS), FS/GS base included.
    pub fn regs(&self) -> Result<Vec<u64>> {
        let mut b = vec![0u8; reg::COUNT * 8];
        let n = self.getregset(NT_PRSTATUS, &mut b)?;
        if n != b.len() {
            return Err(Error::Image(format!("NT_PRSTATUS has {n} bytes")));
        }
        Ok(b.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect())
    }

    /// Writes back a `user_regs_struct`.
    pub fn set_regs(&self, regs: &[u64]) -> Result<()> {
        let mut b: Vec<u8> = regs.iter().flat_map(|r| r.to_le_bytes()).collect();
        let mut iov = libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        };
        ptrace(
            libc::PTRACE_SETREGSET,
            self.pid,
            NT_PRSTATUS as usize,
            &mut iov as *mut _ as usize,
        )
        .map_err(|e| Error::io("PTRACE_SETREGSET NT_PRSTATUS", e))?;
        Ok(())
    }

    /// The full xsave area (NT_X86_XSTATE, standard format).
    pub fn xstate(&self) -> Result<Vec<u8>> {
        let mut b = vec![0u8; 64 * 1024];
        let n = self.getregset(NT_X86_XSTATE, &mut b)?;
        b.truncate(n);
        Ok(b)
    }

    /// The rseq registration, if any (`PTRACE_GET_RSEQ_CONFIGURATION`).
    pub fn rseq(&self) -> Result<Option<crate::image::Rseq>> {
        let mut conf = [0u8; 32];
        match ptrace(
            PTRACE_GET_RSEQ_CONFIGURATION,
            self.pid,
            32,
            conf.as_mut_ptr() as usize,
        ) {
            Ok(_) => {}
            Err(e)
                if e.raw_os_error() == Some(libc::EIO)
                    || e.raw_os_error() == Some(libc::EINVAL) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(Error::io("PTRACE_GET_RSEQ_CONFIGURATION", e)),
        }
        let ptr = u64::from_le_bytes(conf[0..8].try_into().unwrap_or([0; 8]));
        let len = u32::from_le_bytes(conf[8..12].try_into().unwrap_or([0; 4]));
        let sig = u32::from_le_bytes(conf[12..16].try_into().unwrap_or([0; 4]));
        Ok((ptr != 0).then_some(crate::image::Rseq { ptr, len, sig }))
    }

    /// The robust futex list registration, if any (`get_robust_list`: we
    /// trace the target, which is the access the call checks).
    pub fn robust_list(&self) -> Result<Option<crate::image::RobustList>> {
        let (mut head, mut len) = (0u64, 0usize);
        // SAFETY: get_robust_list writes one pointer and one size_t into
        // the two live locals.
        let r = unsafe {
            libc::syscall(
                libc::SYS_get_robust_list,
                self.pid,
                &mut head as *mut u64,
                &mut len as *mut usize,
            )
        };
        if r != 0 {
            return Err(Error::io("get_robust_list", io::Error::last_os_error()));
        }
        Ok((head != 0).then_some(crate::image::RobustList {
            head,
            len: len as u64,
        }))
    }

    /// The blocked-signal mask (`PTRACE_GETSIGMASK`): the one a syscall
    /// like `sigsuspend` will restore when it returns, if it is in one.
    pub fn sigmask(&self) -> Result<u64> {
        let mut mask = 0u64;
        ptrace(
            libc::PTRACE_GETSIGMASK,
            self.pid,
            8,
            &mut mask as *mut u64 as usize,
        )
        .map_err(|e| Error::io("PTRACE_GETSIGMASK", e))?;
        Ok(mask)
    }

    /// Sets the blocked-signal mask (`PTRACE_SETSIGMASK`; the kernel never
    /// blocks SIGKILL and SIGSTOP, and drops a pending `sigsuspend` mask
    /// restore: call it with what [`Frozen::sigmask`] returned to put the
    /// process back as the kernel would have on its way out).
    pub fn set_sigmask(&self, mask: u64) -> Result<()> {
        let mut m = mask;
        ptrace(
            libc::PTRACE_SETSIGMASK,
            self.pid,
            8,
            &mut m as *mut u64 as usize,
        )
        .map_err(|e| Error::io("PTRACE_SETSIGMASK", e))?;
        Ok(())
    }

    /// Copies queued siginfos (128 bytes each) of the private queue, or with
    /// `shared` of the process-wide one, from position `off` into `out`
    /// (`PTRACE_PEEKSIGINFO`); returns how many (fewer at the queue's end).
    pub fn peek_siginfo(&self, shared: bool, off: u64, out: &mut [[u8; 128]]) -> Result<usize> {
        #[repr(C)]
        struct Args {
            off: u64,
            flags: u32,
            nr: i32,
        }
        let mut args = Args {
            off,
            flags: if shared {
                libc::PTRACE_PEEKSIGINFO_SHARED
            } else {
                0
            },
            nr: out.len() as i32,
        };
        let n = ptrace(
            libc::PTRACE_PEEKSIGINFO,
            self.pid,
            &mut args as *mut Args as usize,
            out.as_mut_ptr() as usize,
        )
        .map_err(|e| Error::io("PTRACE_PEEKSIGINFO", e))?;
        Ok(n as usize)
    }

    /// Executes one system call in the target at `syscall_insn` (address of a
    /// `0f 05` in an executable mapping) and returns its result. The caller
    /// restores the original registers afterwards with [`Frozen::set_regs`].
    pub fn inject(&self, base: &[u64], syscall_insn: u64, nr: u64, args: &[u64]) -> Result<i64> {
        let mut r = base.to_vec();
        let slots = [reg::RDI, reg::RSI, reg::RDX, reg::R10, reg::R8, reg::R9];
        for (slot, a) in slots.iter().zip(args) {
            r[*slot] = *a;
        }
        r[reg::RAX] = nr;
        // No syscall-restart fix-up on resume: we are not in a syscall now.
        r[reg::ORIG_RAX] = u64::MAX;
        r[reg::RIP] = syscall_insn;
        self.set_regs(&r)?;
        ptrace(libc::PTRACE_SINGLESTEP, self.pid, 0, 0)
            .map_err(|e| Error::io("PTRACE_SINGLESTEP", e))?;
        let status = wait_stop(self.pid)?;
        if libc::WSTOPSIG(status) != libc::SIGTRAP {
            return Err(Error::Restore(format!(
                "injected syscall {nr}: stopped by signal {} instead of the single-step trap",
                libc::WSTOPSIG(status)
            )));
        }
        let after = self.regs()?;
        if after[reg::RIP] != syscall_insn + 2 {
            return Err(Error::Restore(format!(
                "injected syscall {nr}: rip {:#x} after step",
                after[reg::RIP]
            )));
        }
        Ok(after[reg::RAX] as i64)
    }

    /// Executes `call` (system call `nr`, see [`Frozen::inject`]), which must
    /// return 0 having written a `what` of `N` 64-bit words at `scratch`,
    /// and reads those words back through `reader`.
    #[allow(clippy::too_many_arguments)]
    pub fn inject_and_read<const N: usize>(
        &self,
        reader: &dyn MemoryReader,
        base: &[u64],
        syscall_insn: u64,
        nr: i64,
        args: &[u64],
        scratch: u64,
        (call, what): (&str, &str),
    ) -> Result<[u64; N]> {
        let r = self.inject(base, syscall_insn, nr as u64, args)?;
        if r != 0 {
            return Err(Error::Restore(format!("{call} in target returned {r}")));
        }
        let mut b = vec![0u8; N * 8];
        reader
            .read(scratch, &mut b)
            .map_err(|e| Error::io(format!("read {what}"), e))?;
        let mut w = [0u64; N];
        for (i, c) in b.chunks_exact(8).enumerate() {
            w[i] = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
        }
        Ok(w)
    }

    /// Kills the process (SIGKILL) and reaps it if it is our child.
    pub fn kill(mut self) {
        // SAFETY: plain syscalls on a pid we traced.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            let mut st = 0;
            libc::waitpid(self.pid, &mut st, libc::__WALL);
        }
        self.attached = false;
    }

    /// Detaches, letting the process continue.
    pub fn detach(&mut self) {
        if self.attached {
            let _ = ptrace(libc::PTRACE_DETACH, self.pid, 0, 0);
            self.attached = false;
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        self.detach();
    }
}

/// Adjusts registers of a task stopped inside an interrupted system call so
/// that, resumed elsewhere, it restarts the call (as the kernel would).
pub fn restart_fixup(regs: &mut [u64]) {
    const ERESTARTSYS: i64 = 512;
    const ERESTARTNOINTR: i64 = 513;
    const ERESTARTNOHAND: i64 = 514;
    const ERESTART_RESTARTBLOCK: i64 = 516;
    if (regs[reg::ORIG_RAX] as i64) < 0 {
        return;
    }
    match -(regs[reg::RAX] as i64) {
        ERESTARTSYS | ERESTARTNOINTR | ERESTARTNOHAND => {
            regs[reg::RAX] = regs[reg::ORIG_RAX];
            regs[reg::RIP] -= 2;
        }
        ERESTART_RESTARTBLOCK => {
            regs[reg::RAX] = libc::SYS_restart_syscall as u64;
            regs[reg::RIP] -= 2;
        }
        _ => {}
    }
}
