//! Time: a monotonic clock for timeouts and a wall clock for timestamps.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The source of time for everything that must run under simulation.
pub trait Clock: Send + Sync + 'static {
    /// Monotonic time, for timeouts and latency.
    fn now(&self) -> Instant;
    /// Wall-clock milliseconds since the Unix epoch, for creation times in metadata.
    fn unix_millis(&self) -> u64;
    /// Blocks the calling thread. Threads of the storage engine (the journal's group
    /// commit wait) sleep through this so that a simulated clock can advance instead.
    fn sleep(&self, d: Duration);
}

/// The operating system's clocks.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn unix_millis(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }

    fn sleep(&self, d: Duration) {
        std::thread::sleep(d)
    }
}
