//! A byte-rate limit shared by every copy of one process (BookKeeper's
//! `replicationRateByBytes`), so re-replication leaves the bookies room for their clients.

use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// How far ahead of the rate a burst may run.
const BURST: Duration = Duration::from_secs(1);

/// Lets `rate` bytes per second through, with at most one second of burst.
#[derive(Debug)]
pub struct Throttle {
    rate: u64,
    /// When the bytes taken so far are paid for at `rate`.
    next_free: Mutex<Instant>,
}

impl Throttle {
    /// `rate` bytes per second (at least 1).
    pub fn new(rate: u64) -> Throttle {
        Throttle {
            rate: rate.max(1),
            next_free: Mutex::new(Instant::now()),
        }
    }

    /// Accounts `bytes` and waits until the rate allows them.
    pub async fn take(&self, bytes: u64) {
        let wait_until = {
            let mut sent = self.next_free.lock();
            let now = Instant::now();
            // Idle time earns at most one second of burst.
            let floor = now.checked_sub(BURST).unwrap_or(now);
            *sent = (*sent).max(floor) + Duration::from_secs_f64(bytes as f64 / self.rate as f64);
            sent.checked_sub(BURST).unwrap_or(now)
        };
        tokio::time::sleep_until(wait_until).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn throttled_bytes_take_their_time() {
        let t = Throttle::new(1000);
        let start = Instant::now();
        // The first second's worth passes at once (burst), the next waits for its second.
        t.take(1000).await;
        t.take(1000).await;
        t.take(1000).await;
        let waited = start.elapsed();
        assert!(waited >= Duration::from_secs(2), "{waited:?}");
        assert!(waited < Duration::from_secs(4), "{waited:?}");
    }
}
