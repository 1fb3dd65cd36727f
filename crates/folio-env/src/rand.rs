//! Randomness, seeded by the OS in production and by the simulator's seed under test.

use parking_lot::Mutex;

/// A source of random numbers.
pub trait Rng: Send + Sync + 'static {
    fn next_u64(&self) -> u64;

    /// A number in `0..n` (`n > 0`).
    fn below(&self, n: u64) -> u64 {
        assert!(n > 0, "Rng::below(0)");
        self.next_u64() % n
    }
}

/// A generator seeded from the OS (or from a given seed, for reproducible runs).
pub struct SystemRng(Mutex<fastrand::Rng>);

impl SystemRng {
    pub fn new() -> Self {
        SystemRng(Mutex::new(fastrand::Rng::new()))
    }

    pub fn with_seed(seed: u64) -> Self {
        SystemRng(Mutex::new(fastrand::Rng::with_seed(seed)))
    }
}

impl Default for SystemRng {
    fn default() -> Self {
        Self::new()
    }
}

impl Rng for SystemRng {
    fn next_u64(&self) -> u64 {
        self.0.lock().u64(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_generators_repeat() {
        let a = SystemRng::with_seed(7);
        let b = SystemRng::with_seed(7);
        let xs: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..5).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert!(a.below(10) < 10);
    }
}
