//! Virtual time for the client: the paused tokio clock, seen through the `Clock` seam.

use std::time::{Duration, Instant};

use folio_env::Clock;

/// Reads tokio's (paused, auto-advancing) clock. Built inside the runtime.
pub struct VirtualClock {
    start: tokio::time::Instant,
}

/// The wall-clock time the simulated cluster starts at (2023-11-14).
pub const EPOCH_MS: u64 = 1_700_000_000_000;

impl VirtualClock {
    pub fn new() -> VirtualClock {
        VirtualClock {
            start: tokio::time::Instant::now(),
        }
    }

    pub fn elapsed_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
}

impl Default for VirtualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn unix_millis(&self) -> u64 {
        EPOCH_MS + self.elapsed_ms()
    }

    fn sleep(&self, d: Duration) {
        // Only storage threads block on the clock, and they use the system clock.
        std::thread::sleep(d)
    }
}
