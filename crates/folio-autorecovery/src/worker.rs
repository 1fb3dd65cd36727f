//! The ReplicationWorker (BookKeeper's `ReplicationWorker`): takes under-replicated
//! ledgers from the metadata store's queue, one lock each, and repairs them.
//!
//! Unlike BookKeeper's one ledger at a time, a worker runs `worker_concurrency` slots.
//! Picking is by risk: the marks naming the most missing bookies (the entries with the
//! fewest live copies) first, ties in random order so that workers spread. A ledger that
//! cannot be repaired now (no candidate bookie, its only copy gone, a metadata error) is
//! released after a backoff (BookKeeper's `lockReleaseOfFailedLedgerGracePeriod`), its
//! reason kept in [`WorkerStatus`] and logged, and never spun on. A deleted ledger's
//! mark is removed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use folio_client::Client;
use folio_metadata::{UnderreplicatedLedger, UnderreplicationLock};
use folio_types::LedgerId;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::AutoRecoveryConfig;
use crate::repair::{LedgerOutcome, Scope, repair_ledger};
use crate::replicator::CopyOptions;
use crate::stats::Stats;
use crate::throttle::Throttle;

/// A ledger that failed to repair, and when it may be tried again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub attempts: u32,
    pub reason: String,
    /// Time left before the next attempt, when the status was read.
    pub retry_in: Duration,
}

/// What a worker is doing and has done (for the admin endpoint, metrics and logs).
#[derive(Debug, Default)]
pub struct WorkerStatus {
    in_progress: Mutex<BTreeSet<LedgerId>>,
    failures: Mutex<BTreeMap<LedgerId, (u32, String, Instant)>>,
    /// Ledgers repaired (BookKeeper's `NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED`).
    pub ledgers_replicated: AtomicU64,
    pub entries_written: AtomicU64,
    pub bytes_written: AtomicU64,
    /// Failed attempts whose lock release was deferred
    /// (`NUM_DEFER_LEDGER_LOCK_RELEASE_OF_FAILED_LEDGER`).
    pub deferred_releases: AtomicU64,
}

impl WorkerStatus {
    /// The ledgers being repaired now.
    pub fn in_progress(&self) -> BTreeSet<LedgerId> {
        self.in_progress.lock().clone()
    }

    /// The ledgers whose last attempt failed, with why.
    pub fn failures(&self) -> BTreeMap<LedgerId, Failure> {
        let now = Instant::now();
        self.failures
            .lock()
            .iter()
            .map(|(l, (attempts, reason, at))| {
                (
                    *l,
                    Failure {
                        attempts: *attempts,
                        reason: reason.clone(),
                        retry_in: at.saturating_duration_since(now),
                    },
                )
            })
            .collect()
    }

    fn backed_off(&self, ledger: LedgerId, now: Instant) -> bool {
        self.failures
            .lock()
            .get(&ledger)
            .is_some_and(|(_, _, at)| *at > now)
    }
}

/// A running ReplicationWorker. Dropping it does not stop it: call [`Worker::stop`].
pub struct Worker {
    status: Arc<WorkerStatus>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Worker {
    /// Starts a worker taking marks as `holder` (its lock holder name: the host name in
    /// BookKeeper), shuffling ties with randomness from `rng`.
    pub fn start(
        client: Client,
        config: AutoRecoveryConfig,
        holder: String,
        rng: &dyn folio_env::Rng,
    ) -> Worker {
        let status = Arc::new(WorkerStatus::default());
        let (stop, stopped) = watch::channel(false);
        let copy = CopyOptions {
            batch_size: config.entry_batch_size,
            throttle: config
                .replication_rate_bytes
                .map(|r| Arc::new(Throttle::new(r))),
            deferred_sync: config.deferred_sync_copies,
            skip_copy_for_tests: config.skip_copy_for_tests,
        };
        let shared = Arc::new(Slot {
            queue: Mutex::new((None, Default::default())),
            stats: Stats::new(&config.metrics_prefix),
            client,
            config,
            holder,
            copy,
            status: status.clone(),
            seed: AtomicU64::new(rng.next_u64()),
        });
        let tasks = (0..shared.config.worker_concurrency.max(1))
            .map(|_| tokio::spawn(shared.clone().run(stopped.clone())))
            .collect();
        Worker {
            status,
            stop,
            tasks,
        }
    }

    pub fn status(&self) -> &Arc<WorkerStatus> {
        &self.status
    }

    /// Ends the worker at once, as a killed process: every slot is aborted wherever it is
    /// (mid-copy, mid-metadata change). Its locks go with its metadata session.
    pub fn kill(self) {
        for t in &self.tasks {
            t.abort();
        }
    }

    /// Stops taking ledgers and waits for the slots to end (a repair in progress is
    /// abandoned: its lock goes with this session or is released here; the mark stays).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            t.abort();
            let _ = t.await;
        }
    }
}

struct Slot {
    /// The last listing of marks, in pick order, and when it was made.
    queue: Mutex<(
        Option<Instant>,
        std::collections::VecDeque<UnderreplicatedLedger>,
    )>,
    stats: Stats,
    client: Client,
    config: AutoRecoveryConfig,
    holder: String,
    copy: CopyOptions,
    status: Arc<WorkerStatus>,
    seed: AtomicU64,
}

impl Slot {
    async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            if *stop.borrow() {
                return;
            }
            let wait = match self.step().await {
                Ok(true) => Duration::ZERO,
                Ok(false) => self.config.poll_interval,
                Err(e) => {
                    tracing::warn!("replication worker: {e}");
                    self.config.rereplicate_backoff
                }
            };
            if !wait.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.changed() => return,
                }
            }
        }
    }

    /// Takes and handles one ledger; `false` if there was nothing to take.
    async fn step(&self) -> folio_metadata::Result<bool> {
        let metadata = self.client.metadata();
        if !metadata.is_autorecovery_enabled().await? {
            return Ok(false);
        }
        let Some((mark, lock)) = self.pick().await? else {
            return Ok(false);
        };
        let ledger = mark.ledger_id;
        self.status.in_progress.lock().insert(ledger);
        let started = Instant::now();
        let outcome = self.handle(ledger).await;
        self.stats.worker_time("rereplicate", started.elapsed());
        self.status.in_progress.lock().remove(&ledger);
        match outcome {
            LedgerOutcome::Replicated { entries, bytes } => {
                tracing::info!(ledger, entries, bytes, "ledger re-replicated");
                let s = &self.stats;
                s.worker_count("NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED", 1);
                s.worker_count("NUM_ENTRIES_READ", entries);
                s.worker_count("NUM_BYTES_READ", bytes);
                s.worker_count("NUM_ENTRIES_WRITTEN", entries);
                s.worker_count("NUM_BYTES_WRITTEN", bytes);
                self.status.failures.lock().remove(&ledger);
                self.status
                    .ledgers_replicated
                    .fetch_add(1, Ordering::Relaxed);
                self.status
                    .entries_written
                    .fetch_add(entries, Ordering::Relaxed);
                self.status
                    .bytes_written
                    .fetch_add(bytes, Ordering::Relaxed);
                finish(metadata.as_ref(), &mark, lock).await?;
            }
            LedgerOutcome::Deleted => {
                tracing::info!(
                    ledger,
                    "ledger deleted while under-replicated; mark removed"
                );
                self.status.failures.lock().remove(&ledger);
                lock.mark_replicated().await?;
            }
            LedgerOutcome::OpenFragmentDamaged(_) => unreachable!("handle closes open ledgers"),
            LedgerOutcome::Failed(reason) => self.defer(ledger, reason, lock),
        }
        self.stats.failed_ledgers(self.status.failures.lock().len());
        Ok(true)
    }

    /// Repairs one locked ledger. An open ledger whose last fragment lost a bookie is left
    /// to its writer for the grace period (the lock held meanwhile), then fenced and closed.
    async fn handle(&self, ledger: LedgerId) -> LedgerOutcome {
        let first = repair_ledger(&self.client, ledger, &Scope::Check, false, &self.copy).await;
        let LedgerOutcome::OpenFragmentDamaged(lost) = first else {
            return first;
        };
        tracing::info!(ledger, ?lost, grace = ?self.config.open_ledger_grace_period, "open ledger lost a bookie of its last fragment; waiting for its writer");
        tokio::time::sleep(self.config.open_ledger_grace_period).await;
        repair_ledger(&self.client, ledger, &Scope::Check, true, &self.copy).await
    }

    /// Records a failure and releases the lock after the backoff, from a task of its own
    /// so this slot goes on with other ledgers.
    fn defer(&self, ledger: LedgerId, reason: String, lock: Box<dyn UnderreplicationLock>) {
        let attempts = {
            let mut failures = self.status.failures.lock();
            let attempts = failures.get(&ledger).map_or(0, |f| f.0) + 1;
            let backoff = self.config.failed_ledger_backoff(attempts);
            failures.insert(ledger, (attempts, reason.clone(), Instant::now() + backoff));
            attempts
        };
        let backoff = self.config.failed_ledger_backoff(attempts);
        tracing::warn!(
            ledger,
            attempts,
            ?backoff,
            "cannot re-replicate the ledger now: {reason}"
        );
        self.status
            .deferred_releases
            .fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            tokio::time::sleep(backoff).await;
            let _ = lock.release().await;
        });
    }

    /// The most urgent mark nobody holds, locked.
    async fn pick(
        &self,
    ) -> folio_metadata::Result<Option<(UnderreplicatedLedger, Box<dyn UnderreplicationLock>)>>
    {
        let metadata = self.client.metadata();
        loop {
            let Some(mark) = self.next_candidate().await? else {
                return Ok(None);
            };
            if self.status.in_progress.lock().contains(&mark.ledger_id) {
                continue;
            }
            match metadata
                .try_lock_underreplicated(mark.ledger_id, &self.holder)
                .await
            {
                Ok(Some(lock)) => return Ok(Some((mark, lock))),
                Ok(None) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The next mark to try, from a listing the slots share: listing every mark (and
    /// reading each) is the expensive part of a pick on a large queue, so it is done at most
    /// once a poll interval, or when the listing is used up.
    async fn next_candidate(&self) -> folio_metadata::Result<Option<UnderreplicatedLedger>> {
        {
            let mut q = self.queue.lock();
            let fresh =
                q.0.is_some_and(|at| at.elapsed() < self.config.poll_interval);
            if let Some(m) = q.1.pop_front() {
                return Ok(Some(m));
            }
            if fresh {
                return Ok(None);
            }
            q.0 = Some(Instant::now());
        }
        let now = Instant::now();
        let mut marks: Vec<UnderreplicatedLedger> = self
            .client
            .metadata()
            .list_underreplicated()
            .await?
            .into_iter()
            .filter(|m| !self.status.backed_off(m.ledger_id, now))
            .collect();
        let seed = self
            .seed
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        // More missing replicas first (fewer live copies); random among equals.
        marks.sort_by_key(|m| {
            (
                std::cmp::Reverse(m.missing_replicas.len()),
                mix(seed ^ m.ledger_id as u64),
            )
        });
        let mut q = self.queue.lock();
        q.1 = marks.into();
        Ok(q.1.pop_front())
    }
}

/// Ends the repair of `seen` (the mark as it was when picked): removes the mark, unless
/// the Auditor added bookies to it meanwhile (a new loss), in which case it stays and the
/// ledger is repaired again. The store makes that decision atomically: `mark_replicated`
/// deletes the mark only at the version seen when the lock was taken, as BookKeeper's
/// `markLedgerReplicated` does. The read after it only reports what happened.
pub(crate) async fn finish(
    metadata: &dyn folio_metadata::MetadataStore,
    seen: &UnderreplicatedLedger,
    lock: Box<dyn UnderreplicationLock>,
) -> folio_metadata::Result<()> {
    let ledger = seen.ledger_id;
    lock.mark_replicated().await?;
    match metadata.get_underreplicated(ledger).await {
        Ok(now) => {
            tracing::info!(ledger, missing = ?now.missing_replicas, "ledger re-marked during its repair; repairing it again");
            Ok(())
        }
        Err(e) if e.is_not_found() => Ok(()),
        // The repair is done and the mark handled; a failed report is not a failed repair.
        Err(e) => {
            tracing::debug!(ledger, error = %e, "reading the mark after its repair");
            Ok(())
        }
    }
}

/// A cheap 64-bit mix (splitmix64's finaliser) for shuffling ties.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use folio_metadata::prelude::*;

    use folio_metadata::mem::{MemCluster, unique_name};
    use folio_types::BookieId;

    use super::finish;

    fn b(n: u16) -> BookieId {
        BookieId::new(format!("127.0.0.1:{n}")).unwrap()
    }

    #[tokio::test]
    async fn a_mark_that_grew_during_the_repair_stays() {
        let store = MemCluster::new(unique_name("finish")).connect();
        store.init_cluster().await.unwrap();
        store.mark_underreplicated(7, &[b(1)]).await.unwrap();
        let seen = store.get_underreplicated(7).await.unwrap();
        let lock = store
            .try_lock_underreplicated(7, "w")
            .await
            .unwrap()
            .unwrap();
        // The Auditor re-marks it with a second lost bookie while the worker repairs.
        store.mark_underreplicated(7, &[b(2)]).await.unwrap();
        finish(&store, &seen, lock).await.unwrap();
        let left = store.get_underreplicated(7).await.unwrap();
        assert_eq!(left.missing_replicas, BTreeSet::from([b(1), b(2)]));
        // It can be taken again (the lock was released); unchanged this time, the mark goes.
        let lock = store
            .try_lock_underreplicated(7, "w")
            .await
            .unwrap()
            .unwrap();
        finish(&store, &left, lock).await.unwrap();
        assert!(
            store
                .get_underreplicated(7)
                .await
                .unwrap_err()
                .is_not_found()
        );
    }
}
