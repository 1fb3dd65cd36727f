//! The run's randomness: one seeded generator per consumer, all derived from the seed.

use folio_env::Rng;
use parking_lot::Mutex;

/// A seeded generator, usable as the client's `Rng` seam.
pub struct SimRng(Mutex<fastrand::Rng>);

impl SimRng {
    pub fn new(seed: u64) -> SimRng {
        SimRng(Mutex::new(fastrand::Rng::with_seed(seed)))
    }

    /// A child generator with its own stream, so that consumers do not perturb each other.
    pub fn fork(&self) -> SimRng {
        SimRng::new(self.next_u64())
    }

    /// True with probability `num / den`.
    pub fn chance(&self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    /// A number in `lo..=hi`.
    pub fn range(&self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

impl Rng for SimRng {
    fn next_u64(&self) -> u64 {
        self.0.lock().u64(..)
    }
}
