//! Autorecovery settings, with BookKeeper's names and defaults (`bk_server.conf`).

use std::time::Duration;

/// What the Auditor and the ReplicationWorker do and how often.
#[derive(Debug, Clone)]
pub struct AutoRecoveryConfig {
    /// Seconds between a single bookie disappearing and the audit that marks its ledgers,
    /// when the metadata store holds no value (`lostBookieRecoveryDelay`, 0). The Auditor
    /// writes it to the store if absent.
    pub lost_bookie_recovery_delay: u32,
    /// The periodic bookie check (`auditorPeriodicBookieCheckInterval`, 86400 s); zero
    /// turns it off.
    pub bookie_check_interval: Duration,
    /// The periodic check of every ledger's replicas on the bookies
    /// (`auditorPeriodicCheckInterval`, 604800 s); zero turns it off. Unlike BookKeeper's,
    /// what it finds is marked, so a copy lost on a bookie that is still up is repaired.
    pub check_all_ledgers_interval: Duration,
    /// The periodic replicas check of closed ledgers (`auditorReplicasCheckInterval`,
    /// 0: off). Its gauges count ledgers with an entry short of Qw, of Qa, or of any copy;
    /// unlike BookKeeper's, it also marks what it finds.
    pub replicas_check_interval: Duration,
    /// The periodic placement policy check of closed ledgers
    /// (`auditorPeriodicPlacementPolicyCheckInterval`, 0: off); counts only.
    pub placement_policy_check_interval: Duration,
    /// How long an open ledger whose last fragment lost a bookie is left to its writer
    /// before the worker fences and closes it (`openLedgerRereplicationGracePeriod`, 30 s).
    pub open_ledger_grace_period: Duration,
    /// The longest a ledger that failed to repair waits before it is tried again
    /// (`lockReleaseOfFailedLedgerGracePeriod`, 300 s); the first failures wait less.
    pub failed_ledger_max_backoff: Duration,
    /// The wait after a client error such as too few bookies (`rwRereplicateBackoffMs`, 5 s).
    pub rereplicate_backoff: Duration,
    /// Entries being copied at once, a sliding window (`rereplicationEntryBatchSize`, 10).
    pub entry_batch_size: usize,
    /// Bytes per second over all copies of this process (`replicationRateByBytes`, -1 =
    /// unlimited: `None`).
    pub replication_rate_bytes: Option<u64>,
    /// Copies go with deferred sync, made durable by one ForceLedger per replica before
    /// the metadata changes (Folio's; BookKeeper journals every copy): a Folio target
    /// then writes each copied byte once instead of twice. See `CopyOptions`.
    pub deferred_sync_copies: bool,
    /// Ledgers one worker repairs at once. BookKeeper repairs one per worker; several
    /// keep every bookie busy while one ledger waits on a slow copy.
    pub worker_concurrency: usize,
    /// How often a worker looks for new marks, and the Auditor for a changed delay,
    /// when nothing wakes it sooner.
    pub poll_interval: Duration,
    /// Put before the metric names: `""` for `folio autorecovery`, `"replication_"` inside
    /// a bookie (BookKeeper's names in both cases).
    pub metrics_prefix: String,
    /// NEGATIVE CONTROL FOR TESTS ONLY, off by default: the replicator changes the
    /// metadata without copying the entries (and copies nothing in place) and trusts that (no check after the repair,
    /// which would find the holes and fill them in place): a broken autorecovery that
    /// loses copies, so that a test can show its checker catches it. Never set it outside
    /// a test.
    #[doc(hidden)]
    pub skip_copy_for_tests: bool,
}

impl Default for AutoRecoveryConfig {
    fn default() -> Self {
        AutoRecoveryConfig {
            lost_bookie_recovery_delay: 0,
            bookie_check_interval: Duration::from_secs(86_400),
            check_all_ledgers_interval: Duration::from_secs(604_800),
            replicas_check_interval: Duration::ZERO,
            placement_policy_check_interval: Duration::ZERO,
            open_ledger_grace_period: Duration::from_secs(30),
            failed_ledger_max_backoff: Duration::from_secs(300),
            rereplicate_backoff: Duration::from_secs(5),
            entry_batch_size: 10,
            replication_rate_bytes: None,
            deferred_sync_copies: true,
            worker_concurrency: 4,
            poll_interval: Duration::from_secs(1),
            metrics_prefix: String::new(),
            skip_copy_for_tests: false,
        }
    }
}

impl AutoRecoveryConfig {
    /// BookKeeper's backoff for the `failures`-th failed attempt at one ledger: 9375 ms
    /// doubled for each of the first five failures, then the maximum.
    pub fn failed_ledger_backoff(&self, failures: u32) -> Duration {
        let max = self.failed_ledger_max_backoff;
        if failures == 0 {
            return Duration::ZERO;
        }
        if failures > 5 {
            return max;
        }
        let base = max.as_millis() as u64 / 32;
        Duration::from_millis(base << (failures - 1)).min(max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_ledgers_back_off_as_bookkeeper_does() {
        let c = AutoRecoveryConfig::default();
        assert_eq!(c.failed_ledger_backoff(1), Duration::from_millis(9375));
        assert_eq!(c.failed_ledger_backoff(2), Duration::from_millis(18750));
        assert_eq!(c.failed_ledger_backoff(5), Duration::from_millis(150_000));
        assert_eq!(c.failed_ledger_backoff(6), Duration::from_secs(300));
        assert_eq!(c.failed_ledger_backoff(60), Duration::from_secs(300));
    }
}
