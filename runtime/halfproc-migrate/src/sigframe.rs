//! The `rt_sigreturn` frame that makes the restored process resume with the
//! checkpointed registers, xsave state and signal mask (x86_64 layout of
//! `struct rt_sigframe`: pretcode, `ucontext`, `siginfo`).

use crate::image::{reg, AltStack};

const UC_FP_XSTATE: u64 = 0x1;
const UC_SIGCONTEXT_SS: u64 = 0x2;
const UC_STRICT_RESTORE_SS: u64 = 0x4;
const FP_XSTATE_MAGIC1: u32 = 0x4650_5853;
const FP_XSTATE_MAGIC2: u32 = 0x4650_5845;
/// Offset of `sw_reserved` (struct `_fpx_sw_bytes`) in the fxsave area.
const SW_BYTES: usize = 464;
/// `pretcode` + `ucontext` (304) + `siginfo` (128).
pub const FRAME_SIZE: usize = 8 + 304 + 128;

/// The xsave area as the frame needs it: `sw_reserved` filled in and
/// `FP_XSTATE_MAGIC2` appended after `xstate_size` bytes.
pub fn xsave_image(xstate: &[u8]) -> Vec<u8> {
    let mut x = xstate.to_vec();
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
    let mut size = u32_at(&x, SW_BYTES + 16) as usize;
    if u32_at(&x, SW_BYTES) != FP_XSTATE_MAGIC1 || size == 0 || size > x.len() {
        size = x.len();
        let bv = u64::from_le_bytes(x[512..520].try_into().unwrap_or([0; 8]));
        x[SW_BYTES..SW_BYTES + 4].copy_from_slice(&FP_XSTATE_MAGIC1.to_le_bytes());
        x[SW_BYTES + 4..SW_BYTES + 8].copy_from_slice(&((size + 4) as u32).to_le_bytes());
        x[SW_BYTES + 8..SW_BYTES + 16].copy_from_slice(&bv.to_le_bytes());
        x[SW_BYTES + 16..SW_BYTES + 20].copy_from_slice(&(size as u32).to_le_bytes());
    }
    x.truncate(size);
    x.extend_from_slice(&FP_XSTATE_MAGIC2.to_le_bytes());
    x
}

/// Bytes of an `rt_sigframe` starting at the pretcode slot; the restorer
/// sets `rsp` to the frame address + 8 (the `ucontext`) before `rt_sigreturn`.
/// `fpstate` is the (64-byte aligned) address of [`xsave_image`] in memory.
pub fn frame(regs: &[u64], sigmask: u64, alt: &AltStack, fpstate: u64) -> Vec<u8> {
    let mut f = vec![0u8; FRAME_SIZE];
    let uc = 8;
    let put =
        |f: &mut Vec<u8>, off: usize, v: u64| f[off..off + 8].copy_from_slice(&v.to_le_bytes());
    put(
        &mut f,
        uc,
        UC_FP_XSTATE | UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS,
    );
    // uc_stack: rt_sigreturn installs it with sigaltstack().
    put(&mut f, uc + 16, alt.sp);
    f[uc + 24..uc + 28].copy_from_slice(&(alt.flags as u32).to_le_bytes());
    put(&mut f, uc + 32, alt.size);
    let sc = uc + 40;
    let order = [
        reg::R8,
        reg::R9,
        reg::R10,
        reg::R11,
        reg::R12,
        reg::R13,
        reg::R14,
        reg::R15,
        reg::RDI,
        reg::RSI,
        reg::RBP,
        reg::RBX,
        reg::RDX,
        reg::RAX,
        reg::RCX,
        reg::RSP,
        reg::RIP,
        reg::EFLAGS,
    ];
    for (i, r) in order.iter().enumerate() {
        put(&mut f, sc + i * 8, regs[*r]);
    }
    f[sc + 144..sc + 146].copy_from_slice(&(regs[reg::CS] as u16).to_le_bytes());
    f[sc + 150..sc + 152].copy_from_slice(&(regs[reg::SS] as u16).to_le_bytes());
    put(&mut f, sc + 184, fpstate);
    put(&mut f, uc + 296, sigmask);
    f
}
