//! An entry log per ledger (BookKeeper's `entryLogPerLedgerEnabled`,
//! `EntryLogManagerForEntryLogPerLedger`): each ledger's entries go to a log of its own,
//! so that deleting a ledger frees its logs whole, with nothing for compaction to copy.
//!
//! Open logs are bounded (`maximumNumberOfActiveEntryLogs`): a ledger that needs a new
//! log when the bound is reached evicts the least recently appended one. A log not
//! appended to for `entrylogMapAccessExpiryTimeInSeconds` is rotated at the next flush,
//! and so is the log of a ledger that was write-closed (BP-32) or fenced. Every rotation
//! writes the ledgers map and fdatasyncs the file before the flush commits the index, as
//! a size rotation does. Time comes from the `Clock` seam only.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use folio_env::Clock;

use super::{EntryLogPlacement, EntryLogs, LogSlot, Writers};
use crate::ledger_store::LedgerStoreError;

/// BookKeeper's `maximumNumberOfActiveEntryLogs` default.
pub const DEFAULT_MAX_ACTIVE_ENTRY_LOGS: usize = 500;
/// BookKeeper's `entrylogMapAccessExpiryTimeInSeconds` default.
pub const DEFAULT_ACCESS_EXPIRY: Duration = Duration::from_secs(300);
/// BookKeeper's `entryLogPerLedgerCounterLimitsMultFactor` (10): how many expiry times a
/// ledger is remembered for, to count the ledgers that needed several logs.
const COUNTER_MULT_FACTOR: u32 = 10;

/// Each ledger its own log: the slot is the ledger id.
#[derive(Debug, Default, Clone, Copy)]
pub struct PerLedgerEntryLog;

impl EntryLogPlacement for PerLedgerEntryLog {
    fn slot_for(&self, ledger: i64) -> LogSlot {
        ledger as u64
    }
}

/// The bounds of a log per ledger.
#[derive(Clone)]
pub struct PerLedgerConfig {
    /// `maximumNumberOfActiveEntryLogs` (500, at least 1).
    pub max_active_logs: usize,
    /// `entrylogMapAccessExpiryTimeInSeconds` (300 s).
    pub access_expiry: Duration,
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for PerLedgerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerLedgerConfig")
            .field("max_active_logs", &self.max_active_logs)
            .field("access_expiry", &self.access_expiry)
            .finish_non_exhaustive()
    }
}

/// What a slot did recently (kept for `COUNTER_MULT_FACTOR` expiry times).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Recent {
    pub(super) last_access: Option<Instant>,
    /// Logs the slot had since it was first remembered.
    pub(super) logs: u32,
}

/// Counters under BookKeeper's entry logger names (scope `entrylogger`).
#[derive(Debug, Default)]
pub struct EntryLogStats {
    /// `NUM_OF_WRITE_LEDGERS_REMOVED_CACHE_EXPIRY`.
    pub removed_by_expiry: AtomicU64,
    /// `NUM_OF_WRITE_LEDGERS_REMOVED_CACHE_MAXSIZE`.
    pub removed_by_max_size: AtomicU64,
    /// Logs rotated because their ledger was write-closed or fenced (Folio's own).
    pub removed_by_write_close: AtomicU64,
    /// `NUM_LEDGERS_HAVING_MULTIPLE_ENTRYLOGS` (among the ledgers remembered).
    pub ledgers_with_multiple_logs: AtomicU64,
    /// `NUM_OF_WRITE_ACTIVE_LEDGERS`: logs being written now.
    pub active_logs: AtomicU64,
}

impl EntryLogs {
    /// Whether each ledger has its own log.
    pub fn per_ledger(&self) -> bool {
        self.per_ledger.is_some()
    }

    /// The entry logger's counters.
    pub fn stats(&self) -> &EntryLogStats {
        &self.stats
    }

    /// Asks for `ledger`'s log to be rotated at the next flush (BP-32 write close, or a
    /// fence: no more entries are expected). Nothing with a shared log.
    pub fn mark_write_closed(&self, ledger: i64) {
        if self.per_ledger.is_some() {
            self.write_closed.lock().insert(ledger);
        }
    }

    /// Before a new log is opened: if the bound is reached, rotates the least recently
    /// appended log (BookKeeper evicts it from its cache).
    pub(super) fn evict_for_new_log(
        &self,
        w: &mut Writers,
        pl: &PerLedgerConfig,
    ) -> Result<(), LedgerStoreError> {
        while w.current.len() >= pl.max_active_logs.max(1) {
            let lru = w
                .current
                .keys()
                .copied()
                .min_by_key(|s| (w.recent.get(s).and_then(|r| r.last_access), *s))
                .expect("the bound is at least 1");
            let writer = w.current.remove(&lru).expect("a key of current");
            tracing::debug!(
                slot = lru,
                log = writer.log_id(),
                "entry log evicted: too many active"
            );
            self.stats.removed_by_max_size.fetch_add(1, Relaxed);
            self.retire(writer)?;
        }
        Ok(())
    }

    /// After a new log was opened for `slot`: counts it.
    pub(super) fn note_new_log(&self, w: &mut Writers, slot: LogSlot) {
        let r = w.recent.entry(slot).or_default();
        r.logs += 1;
        if r.logs == 2 {
            self.stats.ledgers_with_multiple_logs.fetch_add(1, Relaxed);
        }
        self.stats
            .active_logs
            .store(w.current.len() as u64, Relaxed);
    }

    /// Rotates, once a flush has appended its entries, the logs of write-closed ledgers
    /// and the logs idle for longer than the access expiry; forgets slots idle for
    /// `COUNTER_MULT_FACTOR` expiry times. The caller syncs the other logs next, then
    /// commits the index.
    pub fn rotate_idle_and_closed(&self) -> Result<(), LedgerStoreError> {
        let Some(pl) = &self.per_ledger else {
            return Ok(());
        };
        let closed = std::mem::take(&mut *self.write_closed.lock());
        let now = pl.clock.now();
        let idle = |r: Option<&Recent>, d: Duration| {
            r.and_then(|r| r.last_access)
                .is_some_and(|t| now.saturating_duration_since(t) >= d)
        };
        let mut w = self.writers.lock();
        let mut due: Vec<(LogSlot, bool)> = Vec::new();
        for &slot in w.current.keys() {
            if closed.contains(&(slot as i64)) {
                due.push((slot, true));
            } else if idle(w.recent.get(&slot), pl.access_expiry) {
                due.push((slot, false));
            }
        }
        due.sort_unstable();
        for (slot, write_closed) in due {
            let writer = w.current.remove(&slot).expect("a key of current");
            let counter = if write_closed {
                &self.stats.removed_by_write_close
            } else {
                &self.stats.removed_by_expiry
            };
            counter.fetch_add(1, Relaxed);
            tracing::debug!(
                slot,
                log = writer.log_id(),
                write_closed,
                "entry log rotated"
            );
            self.retire(writer)?;
        }
        let forget = pl.access_expiry.saturating_mul(COUNTER_MULT_FACTOR);
        let Writers {
            current, recent, ..
        } = &mut *w;
        recent.retain(|s, r| {
            let keep = current.contains_key(s) || !idle(Some(r), forget);
            if !keep {
                if r.logs >= 2 {
                    self.stats.ledgers_with_multiple_logs.fetch_sub(1, Relaxed);
                }
                // BookKeeper's `ENTRYLOGS_PER_LEDGER`, recorded as its counter cache forgets
                // the ledger (a summary, as BookKeeper's op stats).
                metrics::histogram!("bookie_entrylogger_ENTRYLOGS_PER_LEDGER", "success" => "true")
                    .record(f64::from(r.logs));
            }
            keep
        });
        self.stats.active_logs.store(current.len() as u64, Relaxed);
        Ok(())
    }
}
