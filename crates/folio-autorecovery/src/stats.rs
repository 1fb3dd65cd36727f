//! Autorecovery's metrics under BookKeeper's names (`ReplicationStats`), so a dashboard
//! built for BookKeeper's autorecovery charts Folio's: `auditor_*` and
//! `replication_worker_*`, prefixed `replication_` when run inside a bookie (as BookKeeper's
//! embedded autorecovery is). Plus what BookKeeper lacks: the current number of
//! under-replicated ledgers and of ledgers whose last repair failed, as gauges.
//!
//! Recorded through the `metrics` facade; whoever serves `/metrics` (the bookie's admin
//! HTTP) exports them.

use std::time::Duration;

/// Names metrics for one scope.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    prefix: String,
}

impl Stats {
    /// `prefix` goes before BookKeeper's scope names (`""` for a standalone process,
    /// `"replication_"` inside a bookie).
    pub fn new(prefix: &str) -> Stats {
        Stats {
            prefix: prefix.to_string(),
        }
    }

    fn name(&self, scope: &str, name: &str) -> String {
        format!("{}{scope}_{name}", self.prefix)
    }

    pub fn auditor_count(&self, name: &str, n: u64) {
        metrics::counter!(self.name("auditor", name)).increment(n);
    }

    pub fn auditor_time(&self, name: &str, d: Duration) {
        metrics::histogram!(self.name("auditor", name)).record(d.as_secs_f64() * 1000.0);
    }

    pub fn auditor_gauge(&self, name: &str, v: u64) {
        metrics::gauge!(self.name("auditor", name)).set(v as f64);
    }

    pub fn worker_count(&self, name: &str, n: u64) {
        metrics::counter!(self.name("replication_worker", name)).increment(n);
    }

    pub fn worker_time(&self, name: &str, d: Duration) {
        metrics::histogram!(self.name("replication_worker", name)).record(d.as_secs_f64() * 1000.0);
    }

    /// The under-replicated ledgers now (Folio's; BookKeeper has no such gauge).
    pub fn under_replicated(&self, n: usize) {
        metrics::gauge!("folio_autorecovery_under_replicated_ledgers").set(n as f64);
    }

    /// The ledgers whose last repair attempt failed, waiting for their backoff.
    pub fn failed_ledgers(&self, n: usize) {
        metrics::gauge!("folio_autorecovery_failed_ledgers").set(n as f64);
    }
}
