//! The bookie's garbage collector (BookKeeper's `GarbageCollectorThread`): every
//! `gc_wait_time_ms`, and when asked (`PUT /api/v1/bookie/gc`), it deletes from this bookie
//! the ledgers whose metadata is gone, then removes the entry logs that hold only deleted
//! ledgers.
//!
//! Deleting a ledger that still exists would lose acknowledged entries, so a round is
//! careful in this order: it lists the bookie's own ledgers FIRST, then the ledgers in the
//! metadata store. A ledger is created in the metadata store before any bookie gets its
//! first entry, so a ledger in the local list that is missing from the later metadata list
//! was deleted; each such ledger is still read directly from the metadata store (BookKeeper's
//! `verifyMetadataOnGc`) and deleted only if that read says "no such ledger". Any metadata
//! error (unreachable, session expired, timeout) ends the deletion part of the round: an
//! error never counts as "absent". The deletions are then checkpointed (made durable), and
//! only then can their entry logs go (`folio_storage::Storage::remove_dead_entry_logs`).

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use folio_metadata::{MetadataError, MetadataStore};
use tokio::sync::{Notify, oneshot};

use crate::engine::EngineStorage;
use crate::registration::Connector;

/// How long one metadata call may take before the round gives up (and deletes nothing more).
pub const METADATA_TIMEOUT: Duration = Duration::from_secs(30);
/// Ledger ids asked for per metadata page.
const PAGE: usize = 1000;

/// What [`GcMetadata`] calls return.
pub type MetadataFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, MetadataError>> + Send + 'a>>;

/// What garbage collection asks the metadata store.
pub trait GcMetadata: Send + Sync {
    /// Every ledger id that has metadata.
    fn list_ledgers(&self) -> MetadataFuture<'_, BTreeSet<i64>>;
    /// Reads one ledger's metadata: `Ok(false)` only when the store answers "no such
    /// ledger"; any failure is an `Err`.
    fn ledger_exists(&self, ledger: i64) -> MetadataFuture<'_, bool>;
}

/// The metadata store through a session, replaced through `connector` after it expired.
pub struct StoreMetadata {
    session: parking_lot::Mutex<Option<Arc<dyn MetadataStore>>>,
    connector: Option<Connector>,
    timeout: Duration,
}

impl StoreMetadata {
    pub fn new(store: Arc<dyn MetadataStore>, connector: Option<Connector>) -> Self {
        StoreMetadata {
            session: parking_lot::Mutex::new(Some(store)),
            connector,
            timeout: METADATA_TIMEOUT,
        }
    }

    fn timed_out(&self) -> MetadataError {
        MetadataError::Unreachable {
            address: "metadata store".into(),
            reason: format!("no answer within {} s", self.timeout.as_secs()),
        }
    }

    async fn store(&self) -> Result<Arc<dyn MetadataStore>, MetadataError> {
        if let Some(s) = self.session.lock().clone() {
            return Ok(s);
        }
        let Some(connect) = self.connector.clone() else {
            return Err(MetadataError::SessionExpired);
        };
        let store = tokio::time::timeout(self.timeout, connect())
            .await
            .map_err(|_| self.timed_out())??;
        *self.session.lock() = Some(store.clone());
        Ok(store)
    }

    /// Runs one call with a deadline; an expired session is dropped so the next round
    /// opens a new one.
    async fn call<T, F, Fut>(&self, f: F) -> Result<T, MetadataError>
    where
        F: FnOnce(Arc<dyn MetadataStore>) -> Fut,
        Fut: Future<Output = Result<T, MetadataError>>,
    {
        let store = self.store().await?;
        let r = tokio::time::timeout(self.timeout, f(store.clone()))
            .await
            .map_err(|_| self.timed_out())?;
        if let Err(MetadataError::SessionExpired) = &r {
            let mut current = self.session.lock();
            if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &store)) {
                *current = None;
            }
        }
        r
    }
}

impl GcMetadata for StoreMetadata {
    fn list_ledgers(&self) -> MetadataFuture<'_, BTreeSet<i64>> {
        Box::pin(async move {
            let all = folio_metadata::collect_ledger_ids(|start| {
                self.call(move |s| async move { s.list_ledgers(start, PAGE).await })
            })
            .await?;
            Ok(all.into_iter().collect())
        })
    }

    fn ledger_exists(&self, ledger: i64) -> MetadataFuture<'_, bool> {
        Box::pin(async move {
            match self
                .call(|s| async move { s.read_ledger(ledger).await })
                .await
            {
                Ok(_) => Ok(true),
                Err(MetadataError::NotFound { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        })
    }
}

/// What one garbage collection round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcRound {
    /// Asked for (HTTP), not periodic.
    pub forced: bool,
    /// When it started and ended, ms since the Unix epoch.
    pub started_ms: u64,
    pub finished_ms: u64,
    /// Ledgers the bookie held when the round started.
    pub local_ledgers: usize,
    /// Ledgers deleted from this bookie (their metadata was gone), ascending.
    pub ledgers_deleted: Vec<i64>,
    /// Entry logs removed (they held only deleted ledgers).
    pub entry_logs_removed: Vec<u64>,
    pub bytes_reclaimed: u64,
    /// The compaction this round ran ("minor" or "major", BookKeeper's names), if any.
    pub compaction: Option<&'static str>,
    /// Entry logs compacted (live entries copied out, the log removed) and the bytes that
    /// freed; `bytes_reclaimed` includes them.
    pub entry_logs_compacted: u64,
    pub compaction_bytes_reclaimed: u64,
    /// Entries compaction copied (rewrote) into other logs: none when every log it
    /// looked at was wholly live or wholly dead (a log per ledger).
    pub compaction_entries_copied: u64,
    /// Why no ledger was deleted (or no more were) this round, if a metadata error or
    /// the lack of a metadata store stopped it.
    pub skipped: Option<String>,
    /// What failed (each failure skipped one step; the round went on with the rest).
    pub errors: Vec<String>,
}

/// A handle on the collector: trigger a round, read what the last one did.
#[derive(Clone)]
pub struct GcHandle(Arc<Shared>);

struct Shared {
    storage: Arc<EngineStorage>,
    metadata: Option<Arc<dyn GcMetadata>>,
    wake: Notify,
    /// Forced rounds asked for, and the count covered by forced rounds that finished.
    force_requests: AtomicU64,
    force_done: AtomicU64,
    /// One round at a time.
    round_lock: tokio::sync::Mutex<()>,
    rounds: AtomicU64,
    last: parking_lot::Mutex<Option<GcRound>>,
    compaction: parking_lot::Mutex<CompactionPolicy>,
    /// When the last minor and major compactions ran (or the collector started).
    last_minor: parking_lot::Mutex<std::time::Instant>,
    last_major: parking_lot::Mutex<std::time::Instant>,
    /// BookKeeper's `suspendMajorGC`/`suspendMinorGC` (admin HTTP): that level of
    /// compaction does not run, not even in a forced round, until resumed; deleting
    /// ledgers and removing dead entry logs go on.
    major_suspended: AtomicBool,
    minor_suspended: AtomicBool,
}

/// When entry logs are compacted: BookKeeper's minor compaction (logs below
/// `minorCompactionThreshold` live data, every `minorCompactionInterval`) and major
/// compaction (below `majorCompactionThreshold`, every `majorCompactionInterval`). A
/// threshold of 0 or an interval of zero turns that level off. A forced round (HTTP) runs
/// the major compaction if it is on, else the minor one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactionPolicy {
    pub minor_threshold: f64,
    pub minor_interval: Duration,
    pub major_threshold: f64,
    pub major_interval: Duration,
}

impl CompactionPolicy {
    /// No compaction at all.
    pub const OFF: CompactionPolicy = CompactionPolicy {
        minor_threshold: 0.0,
        minor_interval: Duration::ZERO,
        major_threshold: 0.0,
        major_interval: Duration::ZERO,
    };

    /// The policy of a bookie's configuration.
    pub fn from_config(c: &crate::config::BookieConfig) -> CompactionPolicy {
        CompactionPolicy {
            minor_threshold: c.minor_compaction_threshold,
            minor_interval: Duration::from_secs(c.minor_compaction_interval_s),
            major_threshold: c.major_compaction_threshold,
            major_interval: Duration::from_secs(c.major_compaction_interval_s),
        }
    }

    fn minor_on(&self) -> bool {
        self.minor_threshold > 0.0 && !self.minor_interval.is_zero()
    }

    fn major_on(&self) -> bool {
        self.major_threshold > 0.0 && !self.major_interval.is_zero()
    }
}

impl GcHandle {
    /// A collector over `storage`; without `metadata`, rounds only remove dead entry logs
    /// (no ledger is ever deleted). Rounds run when [`GarbageCollector::start`]ed, or
    /// through [`GcHandle::run_round`].
    pub fn new(storage: Arc<EngineStorage>, metadata: Option<Arc<dyn GcMetadata>>) -> Self {
        GcHandle(Arc::new(Shared {
            storage,
            metadata,
            wake: Notify::new(),
            force_requests: AtomicU64::new(0),
            force_done: AtomicU64::new(0),
            round_lock: tokio::sync::Mutex::new(()),
            rounds: AtomicU64::new(0),
            last: parking_lot::Mutex::new(None),
            compaction: parking_lot::Mutex::new(CompactionPolicy::OFF),
            last_minor: parking_lot::Mutex::new(std::time::Instant::now()),
            last_major: parking_lot::Mutex::new(std::time::Instant::now()),
            major_suspended: AtomicBool::new(false),
            minor_suspended: AtomicBool::new(false),
        }))
    }

    /// The same collector with entry log compaction under `policy` (the default is none).
    /// Call before the handle is cloned or started.
    pub fn with_compaction(self, policy: CompactionPolicy) -> GcHandle {
        match Arc::try_unwrap(self.0) {
            Ok(mut shared) => {
                *shared.compaction.get_mut() = policy;
                GcHandle(Arc::new(shared))
            }
            Err(shared) => {
                tracing::warn!("compaction policy set on a shared collector handle: ignored");
                GcHandle(shared)
            }
        }
    }

    /// Which compaction is due now, if any: a forced round runs the major one (else the
    /// minor one) when it is on; otherwise each level runs once its interval has passed.
    fn compaction_due(&self, forced: bool) -> Option<(&'static str, f64)> {
        let p = *self.0.compaction.lock();
        let now = std::time::Instant::now();
        if p.major_on()
            && !self.0.major_suspended.load(Ordering::Acquire)
            && (forced || now.duration_since(*self.0.last_major.lock()) >= p.major_interval)
        {
            *self.0.last_major.lock() = now;
            *self.0.last_minor.lock() = now;
            return Some(("major", p.major_threshold));
        }
        if p.minor_on()
            && !self.0.minor_suspended.load(Ordering::Acquire)
            && (forced || now.duration_since(*self.0.last_minor.lock()) >= p.minor_interval)
        {
            *self.0.last_minor.lock() = now;
            return Some(("minor", p.minor_threshold));
        }
        None
    }

    /// The compaction policy in force.
    pub fn compaction_policy(&self) -> CompactionPolicy {
        *self.0.compaction.lock()
    }

    /// Replaces the compaction policy while the bookie runs (the admin endpoint's
    /// `server_config`); the next round uses it.
    pub fn set_compaction_policy(&self, policy: CompactionPolicy) {
        *self.0.compaction.lock() = policy;
    }

    /// Suspends (`true`) or resumes (`false`) major and minor compaction; `None` leaves a
    /// level as it is.
    pub fn set_compaction_suspended(&self, major: Option<bool>, minor: Option<bool>) {
        if let Some(m) = major {
            self.0.major_suspended.store(m, Ordering::Release);
        }
        if let Some(m) = minor {
            self.0.minor_suspended.store(m, Ordering::Release);
        }
    }

    /// Whether major and minor compaction are suspended.
    pub fn compaction_suspended(&self) -> (bool, bool) {
        (
            self.0.major_suspended.load(Ordering::Acquire),
            self.0.minor_suspended.load(Ordering::Acquire),
        )
    }

    /// Asks for a round now (BookKeeper's forced GC); returns at once.
    pub fn trigger(&self) {
        self.0.force_requests.fetch_add(1, Ordering::AcqRel);
        self.0.wake.notify_one();
    }

    /// Whether a forced round was asked for and has not finished yet.
    pub fn is_force_gc_running(&self) -> bool {
        self.0.force_done.load(Ordering::Acquire) < self.0.force_requests.load(Ordering::Acquire)
    }

    /// Rounds finished since start.
    pub fn rounds(&self) -> u64 {
        self.0.rounds.load(Ordering::Acquire)
    }

    /// What the last finished round did.
    pub fn last_round(&self) -> Option<GcRound> {
        self.0.last.lock().clone()
    }

    /// Runs one round now (after the one running, if any) and returns what it did.
    pub async fn run_round(&self, forced: bool) -> GcRound {
        let _one_at_a_time = self.0.round_lock.lock().await;
        let requested = self.0.force_requests.load(Ordering::Acquire);
        let mut round = GcRound {
            forced,
            started_ms: now_ms(),
            ..GcRound::default()
        };
        let storage = self.0.storage.clone();
        match blocking(move || storage.engine().ledgers()).await {
            Ok(local) => {
                round.local_ledgers = local.len();
                self.delete_gone_ledgers(local, &mut round).await;
            }
            Err(e) => round
                .errors
                .push(format!("cannot list this bookie's ledgers: {e}")),
        }
        if !round.ledgers_deleted.is_empty() {
            // Makes the deletions durable: only then may their entry logs go.
            let storage = self.0.storage.clone();
            if let Err(e) = blocking(move || storage.engine().checkpoint()).await {
                round
                    .errors
                    .push(format!("checkpoint after deleting ledgers failed: {e}"));
            }
        }
        let storage = self.0.storage.clone();
        match blocking(move || storage.engine().remove_dead_entry_logs()).await {
            Ok(stats) => {
                round.entry_logs_removed = stats.logs_removed;
                round.bytes_reclaimed = stats.bytes_reclaimed;
                round.errors.extend(
                    stats
                        .failures
                        .into_iter()
                        .map(|(log, why)| format!("entry log {log:x}: {why}")),
                );
            }
            Err(e) => round
                .errors
                .push(format!("removing dead entry logs failed: {e}")),
        }
        if let Some((level, threshold)) = self.compaction_due(forced) {
            round.compaction = Some(level);
            let storage = self.0.storage.clone();
            let limits = folio_storage::ledger_store::CompactionLimits::default();
            match blocking(move || storage.engine().compact(threshold, limits)).await {
                Ok(stats) => {
                    round.entry_logs_compacted = stats.logs_compacted;
                    round.compaction_bytes_reclaimed = stats.bytes_reclaimed;
                    round.compaction_entries_copied = stats.entries_moved;
                    round.bytes_reclaimed += stats.bytes_reclaimed;
                    round.errors.extend(stats.failures.into_iter().map(|f| {
                        format!(
                            "{level} compaction of entry log {:x}: {}",
                            f.log_id, f.error
                        )
                    }));
                }
                Err(e) => round.errors.push(format!("{level} compaction failed: {e}")),
            }
        }
        round.finished_ms = now_ms();
        self.record(&round);
        if forced {
            self.0.force_done.fetch_max(requested, Ordering::AcqRel);
        }
        round
    }

    /// Deletes the ledgers of `local` whose metadata is gone (see the module comment).
    async fn delete_gone_ledgers(&self, local: Vec<i64>, round: &mut GcRound) {
        let Some(metadata) = &self.0.metadata else {
            round.skipped = Some("this bookie runs without a metadata store".into());
            return;
        };
        if local.is_empty() {
            return;
        }
        let listed = match metadata.list_ledgers().await {
            Ok(l) => l,
            Err(e) => {
                round.skipped = Some(format!("listing the ledgers in the metadata store: {e}"));
                return;
            }
        };
        for ledger in local.into_iter().filter(|l| !listed.contains(l)) {
            match metadata.ledger_exists(ledger).await {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => {
                    round.skipped = Some(format!("reading the metadata of ledger {ledger}: {e}"));
                    return;
                }
            }
            let storage = self.0.storage.clone();
            match blocking(move || storage.delete_ledger(ledger)).await {
                Ok(()) => round.ledgers_deleted.push(ledger),
                Err(e) => round
                    .errors
                    .push(format!("cannot delete ledger {ledger}: {e}")),
            }
        }
    }

    fn record(&self, round: &GcRound) {
        metrics::counter!("folio_gc_rounds_total").increment(1);
        if round.skipped.is_some() && self.0.metadata.is_some() {
            metrics::counter!("folio_gc_skipped_rounds_total").increment(1);
        }
        metrics::counter!("folio_gc_ledgers_deleted_total")
            .increment(round.ledgers_deleted.len() as u64);
        metrics::counter!("folio_gc_entry_logs_removed_total")
            .increment(round.entry_logs_removed.len() as u64);
        metrics::counter!("folio_gc_bytes_reclaimed_total").increment(round.bytes_reclaimed);
        metrics::counter!("folio_gc_entry_logs_compacted_total")
            .increment(round.entry_logs_compacted);
        metrics::counter!("folio_gc_errors_total").increment(round.errors.len() as u64);
        if !round.ledgers_deleted.is_empty()
            || !round.entry_logs_removed.is_empty()
            || round.entry_logs_compacted > 0
        {
            tracing::info!(
                ledgers_deleted = ?round.ledgers_deleted,
                entry_logs_removed = ?round.entry_logs_removed,
                entry_logs_compacted = round.entry_logs_compacted,
                compaction = ?round.compaction,
                bytes_reclaimed = round.bytes_reclaimed,
                "garbage collection round"
            );
        }
        if let Some(why) = &round.skipped
            && self.0.metadata.is_some()
        {
            tracing::warn!("garbage collection deleted no (more) ledgers this round: {why}");
        }
        for e in &round.errors {
            tracing::warn!("garbage collection: {e}");
        }
        *self.0.last.lock() = Some(round.clone());
        self.0.rounds.fetch_add(1, Ordering::AcqRel);
    }
}

/// The running collector: a task that runs a round every interval and on each trigger.
pub struct GarbageCollector {
    handle: GcHandle,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl GarbageCollector {
    /// Starts the periodic rounds (the first one `interval` from now, as BookKeeper's).
    pub fn start(handle: GcHandle, interval: Duration) -> GarbageCollector {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let h = handle.clone();
        let task = tokio::spawn(async move {
            loop {
                let forced = tokio::select! {
                    _ = &mut stopped => return,
                    _ = tokio::time::sleep(interval) => false,
                    _ = h.0.wake.notified() => true,
                };
                h.run_round(forced).await;
            }
        });
        GarbageCollector { handle, stop, task }
    }

    pub fn handle(&self) -> &GcHandle {
        &self.handle
    }

    /// Stops the rounds, waiting for the one running (if any) to finish.
    pub async fn shutdown(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, folio_storage::StorageError> + Send + 'static,
) -> Result<T, String> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(e) => Err(format!("storage task failed: {e}")),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BookieConfig;
    use crate::storage::{BookieStorage, StorageError};
    use bytes::Bytes;
    use folio_metadata::mem::{MemMetadataStore, unique_name};
    use folio_metadata::prelude::*;
    use folio_types::BookieId;
    use folio_types::metadata::{DigestType, LedgerMetadata};
    use folio_types::quorum::QuorumConfig;

    const PATIENCE: Duration = Duration::from_secs(60);
    const KEY: [u8; 20] = [3; 20];

    fn open_storage(dir: &std::path::Path) -> Arc<EngineStorage> {
        let config = BookieConfig {
            data_dir: Some(dir.to_path_buf()),
            // About seven entries per entry log, so a ledger gets logs of its own.
            entry_log_size_limit: 4096,
            disk_usage_threshold: 0.999,
            disk_usage_lwm_threshold: 0.998,
            ..BookieConfig::default()
        };
        Arc::new(EngineStorage::open(&folio_env::Env::real(), &config).unwrap())
    }

    /// An entry as a client sends it: ledger, entry, LAC and length, then the payload.
    fn body(ledger: i64, e: i64) -> Bytes {
        let mut payload = format!("ledger {ledger} entry {e} ").into_bytes();
        payload.resize(500, b'a' + (e % 26) as u8);
        let mut b = Vec::new();
        for v in [ledger, e, e - 1, payload.len() as i64] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        b.extend_from_slice(&payload);
        Bytes::from(b)
    }

    async fn add(s: &EngineStorage, ledger: i64, e: i64) {
        let (tx, rx) = oneshot::channel();
        s.add_entry(
            ledger,
            e,
            Bytes::copy_from_slice(&KEY),
            body(ledger, e),
            false,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        tokio::time::timeout(PATIENCE, rx)
            .await
            .expect("add timed out")
            .unwrap()
            .unwrap();
    }

    async fn write_ledger(s: &EngineStorage, meta: &MemMetadataStore, ledger: i64) {
        let m = LedgerMetadata::new_open(
            QuorumConfig::new(1, 1, 1).unwrap(),
            vec![BookieId::new("bookie-gc:3181").unwrap()],
            DigestType::Crc32,
            b"pwd".to_vec(),
        );
        meta.create_ledger(ledger, &m).await.unwrap();
        for e in 0..10 {
            add(s, ledger, e).await;
        }
    }

    fn assert_intact(s: &EngineStorage, ledger: i64) {
        for e in 0..10 {
            assert_eq!(
                s.read_entry(ledger, e).unwrap(),
                body(ledger, e),
                "ledger {ledger} entry {e}"
            );
        }
    }

    fn assert_gone(s: &EngineStorage, ledger: i64) {
        assert_eq!(s.read_entry(ledger, 0), Err(StorageError::NoLedger(ledger)));
        assert_eq!(
            s.last_add_confirmed(ledger),
            Err(StorageError::NoLedger(ledger))
        );
    }

    /// The store, but one ledger never shows up in listings (a listing racing a create,
    /// or paging past it); its direct read still finds it.
    struct HidesFromListing {
        inner: StoreMetadata,
        hidden: i64,
    }

    impl GcMetadata for HidesFromListing {
        fn list_ledgers(&self) -> MetadataFuture<'_, BTreeSet<i64>> {
            Box::pin(async move {
                let mut all = self.inner.list_ledgers().await?;
                all.remove(&self.hidden);
                Ok(all)
            })
        }
        fn ledger_exists(&self, ledger: i64) -> MetadataFuture<'_, bool> {
            self.inner.ledger_exists(ledger)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_round_deletes_only_the_ledgers_whose_metadata_is_gone() {
        let tmp = tempfile::tempdir().unwrap();
        let s = open_storage(tmp.path());
        let meta = Arc::new(MemMetadataStore::connect(&unique_name("gc")));
        for l in [1, 2, 3] {
            write_ledger(&s, &meta, l).await;
        }
        // In the entry logs (a ledger deleted while still in the write cache never gets
        // there at all).
        s.engine().checkpoint().unwrap();
        meta.delete_ledger(1, None).await.unwrap();
        let gc = GcHandle::new(
            s.clone(),
            Some(Arc::new(HidesFromListing {
                inner: StoreMetadata::new(meta.clone(), None),
                hidden: 3,
            })),
        );
        // Served before: the LAC cache must forget the ledger too.
        assert_eq!(s.last_add_confirmed(1), Ok(8));

        let round = gc.run_round(false).await;
        assert_eq!(round.local_ledgers, 3);
        assert_eq!(round.ledgers_deleted, vec![1], "{round:?}");
        assert_eq!(round.skipped, None);
        assert!(round.errors.is_empty(), "{round:?}");
        assert!(!round.entry_logs_removed.is_empty(), "{round:?}");
        assert!(round.bytes_reclaimed > 0);
        assert_eq!(gc.rounds(), 1);
        assert_eq!(gc.last_round(), Some(round));
        assert_gone(&s, 1);
        assert_intact(&s, 2);
        assert_intact(&s, 3);

        // Nothing more to do.
        let round = gc.run_round(false).await;
        assert!(round.ledgers_deleted.is_empty() && round.entry_logs_removed.is_empty());

        // Byte for byte after a restart too.
        drop(gc);
        drop(s);
        let s = open_storage(tmp.path());
        assert_gone(&s, 1);
        assert_intact(&s, 2);
        assert_intact(&s, 3);
    }

    /// A ledger deleted from logs it shares with live ledgers: no log is wholly dead, so
    /// only compaction gets the space back; a forced round runs the major compaction, a
    /// periodic one only once its interval has passed, and with compaction off nothing moves.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_forced_round_compacts_the_logs_a_deleted_ledger_shared() {
        let tmp = tempfile::tempdir().unwrap();
        let s = open_storage(tmp.path());
        let meta = Arc::new(MemMetadataStore::connect(&unique_name("gc-compact")));
        for l in [1, 2, 3] {
            write_ledger(&s, &meta, l).await;
        }
        s.engine().checkpoint().unwrap();
        meta.delete_ledger(2, None).await.unwrap();
        let metadata = || -> Option<Arc<dyn GcMetadata>> {
            Some(Arc::new(StoreMetadata::new(meta.clone(), None)))
        };

        // Compaction off: ledger 2 goes, its logs (shared with 1 and 3) stay.
        let gc_off = GcHandle::new(s.clone(), metadata()).with_compaction(CompactionPolicy::OFF);
        let round = gc_off.run_round(true).await;
        drop(gc_off);
        assert_eq!(round.ledgers_deleted, vec![2], "{round:?}");
        assert!(round.entry_logs_removed.is_empty(), "{round:?}");
        assert_eq!((round.compaction, round.entry_logs_compacted), (None, 0));
        let log_files = || -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(tmp.path().join("ledgers/current"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".log"))
                .collect();
            v.sort();
            v
        };
        let logs_before = log_files();

        let policy = CompactionPolicy {
            minor_threshold: 0.2,
            minor_interval: Duration::from_secs(3600),
            major_threshold: 0.8,
            major_interval: Duration::from_secs(86_400),
        };
        // Periodic round, intervals not passed: no compaction.
        let gc = GcHandle::new(s.clone(), metadata()).with_compaction(policy);
        let round = gc.run_round(false).await;
        assert_eq!((round.compaction, round.entry_logs_compacted), (None, 0));
        // Forced: the major compaction copies 1's and 3's entries out of the shared logs.
        let round = gc.run_round(true).await;
        assert_eq!(round.compaction, Some("major"), "{round:?}");
        assert!(round.errors.is_empty(), "{round:?}");
        assert!(round.entry_logs_compacted >= 2, "{round:?}");
        assert!(round.compaction_bytes_reclaimed > 0, "{round:?}");
        assert!(
            log_files().len() < logs_before.len(),
            "entry logs before {logs_before:?}, after {:?}",
            log_files()
        );
        assert_intact(&s, 1);
        assert_intact(&s, 3);
        assert_gone(&s, 2);

        drop(gc);
        drop(s);
        let s = open_storage(tmp.path());
        assert_intact(&s, 1);
        assert_intact(&s, 3);
        assert_gone(&s, 2);
    }

    /// Lists fine, but every direct read fails as an unreachable store does.
    struct ReadsFail(StoreMetadata);

    impl GcMetadata for ReadsFail {
        fn list_ledgers(&self) -> MetadataFuture<'_, BTreeSet<i64>> {
            self.0.list_ledgers()
        }
        fn ledger_exists(&self, _ledger: i64) -> MetadataFuture<'_, bool> {
            Box::pin(async {
                Err(MetadataError::Unreachable {
                    address: "zk://192.0.2.1:2181".into(),
                    reason: "connection refused".into(),
                })
            })
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn with_the_metadata_store_failing_nothing_is_deleted() {
        let tmp = tempfile::tempdir().unwrap();
        let s = open_storage(tmp.path());
        let cluster = unique_name("gc-fail");
        let meta = Arc::new(MemMetadataStore::connect(&cluster));
        for l in [1, 2] {
            write_ledger(&s, &meta, l).await;
        }
        meta.delete_ledger(1, None).await.unwrap();

        // The direct read fails: ledger 1 is not in the listing, yet stays.
        let gc = GcHandle::new(
            s.clone(),
            Some(Arc::new(ReadsFail(StoreMetadata::new(meta.clone(), None)))),
        );
        let round = gc.run_round(false).await;
        assert!(round.ledgers_deleted.is_empty(), "{round:?}");
        assert!(
            round.skipped.as_deref().unwrap().contains("unreachable"),
            "{round:?}"
        );
        assert_intact(&s, 1);
        assert_intact(&s, 2);

        // The session expired and there is no way to open another: the listing fails.
        let dead = Arc::new(MemMetadataStore::connect(&cluster));
        dead.close().await.unwrap();
        let gc = GcHandle::new(s.clone(), Some(Arc::new(StoreMetadata::new(dead, None))));
        let round = gc.run_round(false).await;
        assert!(round.ledgers_deleted.is_empty(), "{round:?}");
        assert!(
            round.skipped.as_deref().unwrap().contains("expired"),
            "{round:?}"
        );
        assert_intact(&s, 1);

        // A later round with the store back deletes it.
        let gc = GcHandle::new(
            s.clone(),
            Some(Arc::new(StoreMetadata::new(meta.clone(), None))),
        );
        let round = gc.run_round(false).await;
        assert_eq!(round.ledgers_deleted, vec![1], "{round:?}");
        assert_gone(&s, 1);
        assert_intact(&s, 2);
    }

    /// A metadata store that answers from the state it had when the listing began (as a
    /// lagging ZooKeeper follower can), while a client creates ledger `created` (metadata,
    /// then its first entries on this bookie) during the listing.
    struct CreateDuringListing {
        inner: StoreMetadata,
        meta: Arc<MemMetadataStore>,
        storage: Arc<EngineStorage>,
        created: i64,
        seen: parking_lot::Mutex<BTreeSet<i64>>,
    }

    impl GcMetadata for CreateDuringListing {
        fn list_ledgers(&self) -> MetadataFuture<'_, BTreeSet<i64>> {
            Box::pin(async move {
                let stale = self.inner.list_ledgers().await?;
                *self.seen.lock() = stale.clone();
                write_ledger(&self.storage, &self.meta, self.created).await;
                Ok(stale)
            })
        }
        fn ledger_exists(&self, ledger: i64) -> MetadataFuture<'_, bool> {
            let known = self.seen.lock().contains(&ledger);
            Box::pin(async move { Ok(known) })
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_ledger_created_while_a_round_runs_is_not_deleted() {
        let tmp = tempfile::tempdir().unwrap();
        let s = open_storage(tmp.path());
        let meta = Arc::new(MemMetadataStore::connect(&unique_name("gc-race")));
        for l in [1, 2] {
            write_ledger(&s, &meta, l).await;
        }
        meta.delete_ledger(1, None).await.unwrap();
        let gc = GcHandle::new(
            s.clone(),
            Some(Arc::new(CreateDuringListing {
                inner: StoreMetadata::new(meta.clone(), None),
                meta: meta.clone(),
                storage: s.clone(),
                created: 9,
                seen: parking_lot::Mutex::new(BTreeSet::new()),
            })),
        );
        let round = gc.run_round(false).await;
        assert_eq!(round.ledgers_deleted, vec![1], "{round:?}");
        assert_gone(&s, 1);
        assert_intact(&s, 2);
        assert_intact(&s, 9);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_trigger_runs_a_forced_round_in_the_background() {
        let tmp = tempfile::tempdir().unwrap();
        let s = open_storage(tmp.path());
        let meta = Arc::new(MemMetadataStore::connect(&unique_name("gc-trigger")));
        write_ledger(&s, &meta, 4).await;
        meta.delete_ledger(4, None).await.unwrap();
        let handle = GcHandle::new(
            s.clone(),
            Some(Arc::new(StoreMetadata::new(meta.clone(), None))),
        );
        // Periodic rounds far apart: only the trigger runs one.
        let gc = GarbageCollector::start(handle.clone(), Duration::from_secs(3600));
        assert!(!handle.is_force_gc_running());
        handle.trigger();
        assert!(handle.is_force_gc_running());
        tokio::time::timeout(PATIENCE, async {
            while handle.is_force_gc_running() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the forced round never finished");
        let round = handle.last_round().unwrap();
        assert!(round.forced);
        assert_eq!(round.ledgers_deleted, vec![4]);
        assert_gone(&s, 4);
        gc.shutdown().await;
    }
}
