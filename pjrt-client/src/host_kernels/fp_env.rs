//! A thread's floating-point control state (MXCSR on x86_64, FPCR on
//! aarch64), so that host-kernel work done for a program on another thread
//! computes exactly as it would on the program's own thread.
//!
//! XLA:CPU runs programs with flush-to-zero and denormals-are-zero set on its
//! worker threads. A chunk of a host kernel that a waiting caller picks up
//! ([`donation`](super::donation)) or that a spawned thread runs would
//! otherwise use that thread's default state, keep subnormals that the
//! worker flushes, and make the result depend on thread timing. The poster
//! captures [`FpEnv::current`] with the work; whoever runs it calls
//! [`FpEnv::enter`] and gets its own state back when the guard drops.
//!
//! Only the control bits travel (rounding mode, FTZ/DAZ, exception masks);
//! on x86_64 the sticky exception flags (MXCSR bits 0–5) are left as the
//! running thread has them. On other architectures this is a no-op: there
//! [`FpEnv::current`] is a constant, so work runs under the running thread's
//! state (document: such targets may see subnormal differences between
//! donated and non-donated chunks).

/// MXCSR control bits: exception masks (7–12), rounding (13–14), FTZ (15),
/// DAZ (6). The low six bits are sticky status flags, not control.
#[cfg(target_arch = "x86_64")]
const CONTROL_MASK: u32 = !0x3f;

/// A captured floating-point control state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FpEnv(u64);

impl FpEnv {
    /// The calling thread's control state.
    #[inline]
    pub fn current() -> FpEnv {
        FpEnv(read_raw())
    }

    /// The raw register value (MXCSR control bits, FPCR; 0 elsewhere).
    pub fn raw(self) -> u64 {
        self.0
    }

    /// An x86_64 MXCSR control state with flush-to-zero and
    /// denormals-are-zero set on top of `self` (what XLA's workers use);
    /// `self` elsewhere. For tests.
    pub fn with_ftz_daz(self) -> FpEnv {
        #[cfg(target_arch = "x86_64")]
        {
            FpEnv(self.0 | 0x8040)
        }
        #[cfg(target_arch = "aarch64")]
        {
            // FPCR.FZ (bit 24) flushes both inputs and outputs.
            FpEnv(self.0 | (1 << 24))
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            self
        }
    }

    /// Sets this state on the calling thread until the returned guard drops,
    /// which restores the thread's previous state. A no-op (and no register
    /// write) when the thread already has it.
    #[inline]
    pub fn enter(self) -> FpEnvGuard {
        let previous = FpEnv::current();
        if previous != self {
            write_raw(self.0);
        }
        FpEnvGuard {
            previous,
            set: self,
        }
    }
}

/// Restores a thread's floating-point control state on drop (see
/// [`FpEnv::enter`]).
#[must_use = "the state is restored when the guard drops"]
pub struct FpEnvGuard {
    previous: FpEnv,
    set: FpEnv,
}

impl Drop for FpEnvGuard {
    fn drop(&mut self) {
        if self.previous != self.set {
            write_raw(self.previous.0);
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn read_raw() -> u64 {
    let mut v: u32 = 0;
    // SAFETY: `stmxcsr` stores the 32-bit MXCSR into `v`, a live local; it
    // changes no register and no flag.
    unsafe {
        std::arch::asm!("stmxcsr [{}]", in(reg) &mut v, options(nostack, preserves_flags));
    }
    u64::from(v & CONTROL_MASK)
}

#[cfg(target_arch = "x86_64")]
fn write_raw(control: u64) {
    let mut v: u32 = 0;
    // SAFETY: as in `read_raw`.
    unsafe {
        std::arch::asm!("stmxcsr [{}]", in(reg) &mut v, options(nostack, preserves_flags));
    }
    let v = (v & !CONTROL_MASK) | (control as u32 & CONTROL_MASK);
    // SAFETY: `ldmxcsr` loads a value whose control bits came from another
    // thread's MXCSR (or a restore of this thread's own) and whose status
    // bits are this thread's: every such value is valid (reserved bits
    // 16–31 are zero in both). Rust code then runs under that rounding and
    // FTZ/DAZ state, exactly as it already does on XLA's worker threads,
    // which set it; every caller restores the previous state through
    // `FpEnvGuard` before leaving the code that needed it.
    unsafe {
        std::arch::asm!("ldmxcsr [{}]", in(reg) &v, options(nostack, readonly, preserves_flags));
    }
}

#[cfg(target_arch = "aarch64")]
fn read_raw() -> u64 {
    let v: u64;
    // SAFETY: reading FPCR has no side effects.
    unsafe {
        std::arch::asm!("mrs {}, fpcr", out(reg) v, options(nomem, nostack, preserves_flags));
    }
    v
}

#[cfg(target_arch = "aarch64")]
fn write_raw(v: u64) {
    // SAFETY: the value is another thread's FPCR (or this thread's own, on
    // restore), so every bit is valid; as on x86_64, Rust code then runs
    // under the state XLA's workers already use, and the guard restores it.
    unsafe {
        std::arch::asm!("msr fpcr, {}", in(reg) v, options(nomem, nostack, preserves_flags));
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn read_raw() -> u64 {
    0
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn write_raw(_: u64) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enter_sets_and_the_guard_restores() {
        let start = FpEnv::current();
        let ftz = start.with_ftz_daz();
        {
            let _g = ftz.enter();
            assert_eq!(FpEnv::current(), ftz);
            #[cfg(target_arch = "x86_64")]
            {
                // DAZ reads the subnormal input as zero.
                let tiny = std::hint::black_box(1e-39f32);
                assert_eq!(tiny * std::hint::black_box(1.0f32), 0.0);
            }
        }
        assert_eq!(FpEnv::current(), start);
        #[cfg(target_arch = "x86_64")]
        {
            let tiny = std::hint::black_box(1e-39f32);
            assert_eq!(tiny * std::hint::black_box(1.0f32), 1e-39f32);
        }
    }
}
