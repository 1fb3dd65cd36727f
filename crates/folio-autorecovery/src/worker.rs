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
            skip_copy_for_tests: config.skip_copy_for_tests,
        };
        let shared = Arc::new(Slot {
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
        let outcome = self.handle(ledger).await;
        self.status.in_progress.lock().remove(&ledger);
        match outcome {
            LedgerOutcome::Replicated { entries, bytes } => {
                tracing::info!(ledger, entries, bytes, "ledger re-replicated");
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
                lock.mark_replicated().await?;
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
        let now = Instant::now();
        let mut marks: Vec<UnderreplicatedLedger> = metadata
            .list_underreplicated()
            .await?
            .into_iter()
            .filter(|m| !self.status.backed_off(m.ledger_id, now))
            .filter(|m| !self.status.in_progress.lock().contains(&m.ledger_id))
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
        for mark in marks {
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
        Ok(None)
    }
}

/// A cheap 64-bit mix (splitmix64's finaliser) for shuffling ties.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
