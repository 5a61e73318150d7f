//! What the tests and benchmarks of radix's crates share: a seeded generator
//! of random blocks, activations and corrupted bytes.

/// A small deterministic generator (xorshift64*): a failing case is
/// reproduced by its seed alone, and the same seed gives the same values on
/// every machine.
///
/// ```
/// let mut a = radix_quant::testing::Rng(7);
/// let mut b = radix_quant::testing::Rng(7);
/// assert_eq!(a.next(), b.next());
/// assert!((-1.0..1.0).contains(&a.unit()));
/// ```
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits. The seed must not be 0 (xorshift's one
    /// fixed point).
    #[allow(clippy::should_implement_trait)] // not an iterator: it never ends
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [-1, 1), on a grid of 2^-23.
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// While it lives, this thread treats subnormal f32 inputs as zero and
/// flushes subnormal results to zero (MXCSR's DAZ and FTZ bits), as XLA's
/// CPU threads do where they run custom calls; the thread's previous mode
/// comes back when it drops. For tests that kernels give the same results
/// on such threads.
#[cfg(target_arch = "x86_64")]
#[derive(Debug)]
pub struct FlushSubnormals {
    previous: u32,
}

#[cfg(target_arch = "x86_64")]
impl FlushSubnormals {
    /// Sets DAZ (bit 6) and FTZ (bit 15) on this thread.
    #[allow(clippy::new_without_default)] // a mode change, not a value
    pub fn new() -> FlushSubnormals {
        // `_mm_getcsr`/`_mm_setcsr` are deprecated in favour of inline
        // assembly, which would say the same thing at more length.
        #[allow(deprecated)]
        // SAFETY: reading and writing MXCSR changes only this thread's
        // floating-point modes; every x86-64 CPU has it.
        unsafe {
            let previous = std::arch::x86_64::_mm_getcsr();
            std::arch::x86_64::_mm_setcsr(previous | 1 << 6 | 1 << 15);
            FlushSubnormals { previous }
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Drop for FlushSubnormals {
    fn drop(&mut self) {
        #[allow(deprecated)]
        // SAFETY: as in `new`.
        unsafe {
            std::arch::x86_64::_mm_setcsr(self.previous)
        };
    }
}
