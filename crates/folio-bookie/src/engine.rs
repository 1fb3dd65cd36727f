//! The real disk under the bookie: `folio_storage::Storage` (journal + checkpoints) over
//! `folio_storage::ledger_store::LedgerStore` (entry logs, index, write cache), adapted to
//! [`BookieStorage`].
//!
//! The storage crate drives its `LedgerStore` itself (its `impl LedgerBackend`);
//! [`EngineStorage`] answers the processor's questions with the engine's (absent ledger vs
//! absent entry, the LAC, disk space). It is the one adapter: the bookie and the
//! simulator (`folio-sim`, through [`EngineStorage::open_with`]) both run it.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use folio_env::Env;
use folio_storage::ledger_store::{LedgerStore, LedgerStoreConfig, LedgerStoreError};
use folio_storage::{JournalConfig, Storage, StorageConfig};
use folio_types::{EntryId, LedgerId};

use crate::config::BookieConfig;
use crate::storage::{BookieStorage, StorageError, WriteCallback};

/// The storage engine's configuration from the bookie's.
pub fn storage_config(config: &BookieConfig) -> (StorageConfig, LedgerStoreConfig) {
    if !config.journal_sync_data {
        tracing::warn!(
            "journal_sync_data (journalSyncData) is false: adds are acknowledged without an \
             fdatasync, and a power loss loses acknowledged entries"
        );
    }
    let journal = JournalConfig {
        dirs: config.effective_journal_dirs(),
        max_group_wait: Duration::from_millis(config.journal_max_group_wait_ms),
        max_group_bytes: config.journal_buffered_writes_threshold,
        max_group_entries: config.journal_buffered_entries_threshold,
        flush_when_queue_empty: config.journal_flush_when_queue_empty,
        max_file_size: config.journal_max_size_mb * 1024 * 1024,
        prealloc_size: config.journal_pre_alloc_size_mb * 1024 * 1024,
        remove_pages_from_cache: config.journal_remove_pages_from_cache,
        direct_io: config.journal_direct_io,
        force_write_thread: config.journal_force_write_thread,
        sync_data: config.journal_sync_data,
        ..JournalConfig::default()
    };
    let storage = StorageConfig {
        journal,
        flush_interval: Duration::from_millis(config.flush_interval_ms),
        // A quarter, not BookKeeper's half: the memory a bookie holds in steady state is
        // what accumulates between checkpoints (entries, their index batch, redb's dirty
        // pages: about 2.3x the entry bytes at 100 B), so an earlier checkpoint keeps it
        // smaller, and three quarters of the bound stay for a burst while a slow flush runs.
        checkpoint_write_cache_bytes: config.write_cache_bytes / 4,
    };
    let ledger_dirs = config.effective_ledger_dirs();
    let index_dir = config
        .effective_index_dir()
        .unwrap_or_else(|| PathBuf::from("index"));
    let mut store = LedgerStoreConfig::new(ledger_dirs, index_dir);
    store.journal_dirs = config.effective_journal_dirs();
    store.entry_log_size_limit = config.entry_log_size_limit;
    store.entry_log_per_ledger = config.entry_log_per_ledger_enabled;
    store.max_active_entry_logs = config.max_active_entry_logs;
    store.entry_log_access_expiry = Duration::from_secs(config.entry_log_access_expiry_s);
    store.entry_log_direct_io = config.entry_log_direct_io;
    store.read_ahead_cache_bytes = config.read_ahead_cache_bytes;
    store.read_ahead_batch_size = config.read_ahead_batch_size;
    store.write_cache_bytes = config.write_cache_bytes;
    store.index_cache_bytes = config.index_cache_bytes;
    store.index_commit_flushes = config.index_commit_flushes;
    (storage, store)
}

/// Why the engine could not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot open the ledger store: {0}")]
    LedgerStore(#[from] LedgerStoreError),
    #[error("cannot open the journal: {0}")]
    Storage(#[from] folio_storage::StorageError),
}

/// The engine, open, as the processor's storage.
pub struct EngineStorage {
    storage: Arc<Storage>,
    /// The ledger store under `storage`, for its entry logger counters.
    store: Arc<LedgerStore>,
    env: Env,
    ledger_dirs: Vec<PathBuf>,
    journal_dirs: Vec<PathBuf>,
    /// Set by [`EngineStorage::check_disk_usage`] while a disk is over its threshold.
    disk_full: AtomicBool,
    /// The operator's read-only switch (admin HTTP), independent of the disk checker's.
    manual_read_only: AtomicBool,
    lacs: Arc<LacCache>,
    /// Set by [`EngineStorage::halt`]: the process is gone, nothing is answered.
    halted: AtomicBool,
    /// NEGATIVE CONTROL FOR TESTS ONLY, off by default and set only through
    /// [`EngineStorage::set_ignore_fence_for_tests`] (no configuration reaches it): a fence
    /// is acknowledged without fencing, which breaks the protocol, so that the
    /// simulator can show its checker catches a zombie writer.
    ignore_fence: AtomicBool,
}

/// The LAC known per ledger, so that the LAC piggybacked on every read costs no read of the
/// ledger's last entry. Filled from storage on first use; raised (never lowered) as writes
/// are stored, before the processor looks for long polls to wake, so a woken one sees it.
#[derive(Default)]
struct LacCache {
    map: parking_lot::Mutex<folio_types::IdHashMap<LedgerId, EntryId>>,
}

impl LacCache {
    /// Bound on ledgers remembered; past it the cache starts over (it is only a cache).
    const MAX_LEDGERS: usize = 1 << 20;

    fn get(&self, ledger: LedgerId) -> Option<EntryId> {
        self.map.lock().get(&ledger).copied()
    }

    /// Records a LAC read from storage (a lower bound of the truth at some moment).
    fn learn(&self, ledger: LedgerId, lac: EntryId) -> EntryId {
        let mut map = self.map.lock();
        if map.len() >= Self::MAX_LEDGERS {
            map.clear();
        }
        let known = map.entry(ledger).or_insert(lac);
        *known = (*known).max(lac);
        *known
    }

    fn forget(&self, ledger: LedgerId) {
        self.map.lock().remove(&ledger);
    }

    /// A write carrying `lac` is stored. Only raises a known LAC: an unknown one is read from
    /// storage (which has the write) when next asked.
    fn raise(&self, ledger: LedgerId, lac: EntryId) {
        if let Some(known) = self.map.lock().get_mut(&ledger) {
            *known = (*known).max(lac);
        }
    }
}

impl EngineStorage {
    /// Opens the ledger store and the journal (replaying it) under `config`'s directories.
    pub fn open(env: &Env, config: &BookieConfig) -> Result<EngineStorage, OpenError> {
        let (storage_config, store_config) = storage_config(config);
        Self::open_with(env, storage_config, store_config)
    }

    /// Opens the engine from the storage crate's own configurations, for a caller that
    /// sizes them itself (the simulator: small entry logs and write cache, no timers).
    pub fn open_with(
        env: &Env,
        storage_config: StorageConfig,
        store_config: LedgerStoreConfig,
    ) -> Result<EngineStorage, OpenError> {
        let ledger_dirs = store_config.ledger_dirs.clone();
        let journal_dirs = storage_config.journal.dirs.clone();
        let store = Arc::new(LedgerStore::open(env, store_config)?);
        let storage = Storage::open(env, storage_config, store.clone())?;
        Ok(EngineStorage {
            storage: Arc::new(storage),
            store,
            env: env.clone(),
            ledger_dirs,
            journal_dirs,
            disk_full: AtomicBool::new(false),
            manual_read_only: AtomicBool::new(false),
            lacs: Arc::default(),
            halted: AtomicBool::new(false),
            ignore_fence: AtomicBool::new(false),
        })
    }

    /// The entry logger's counters (`entrylogger` scope; a log per ledger only).
    pub fn entry_log_stats(&self) -> &folio_storage::entry_log::EntryLogStats {
        self.store.entry_log_stats()
    }

    /// See the `ignore_fence` field: a negative control, never set outside a test.
    #[doc(hidden)]
    pub fn set_ignore_fence_for_tests(&self, on: bool) {
        self.ignore_fence.store(on, Ordering::Release);
    }

    /// The process died (the simulator's crash): the journal stops and every later
    /// question is answered with an error, reads included, as a dead bookie answers none.
    pub fn halt(&self) {
        self.halted.store(true, Ordering::Release);
        self.storage.shutdown();
    }

    /// Whether [`EngineStorage::halt`] was called.
    pub fn is_halted(&self) -> bool {
        self.halted.load(Ordering::Acquire)
    }

    /// See [`folio_storage::NegativeControls`]: never outside a test.
    #[doc(hidden)]
    pub fn set_negative_controls_for_tests(&self, c: folio_storage::NegativeControls) {
        self.storage.set_negative_controls_for_tests(c);
    }

    fn check_alive(&self) -> Result<(), StorageError> {
        if self.halted.load(Ordering::Acquire) {
            return Err(StorageError::Io("the bookie has stopped".into()));
        }
        Ok(())
    }

    /// Checks every journal and ledger disk: one used above `threshold` makes the bookie
    /// read-only (BookKeeper's diskUsageThreshold); all back below `lwm` makes it writable
    /// again (diskUsageLwmThreshold). A disk can fill between two checks: then a journal
    /// write or a checkpoint's entry-log write is refused (ENOSPC) and the engine stops
    /// taking writes by itself; that too ends below `lwm`. A failed fsync never does
    /// (invariant 9). Returns the highest usage seen and whether the bookie is now
    /// read-only for a full disk.
    pub fn check_disk_usage(&self, threshold: f64, lwm: f64) -> Result<(f64, bool), StorageError> {
        let mut highest: f64 = 0.0;
        for dir in self.journal_dirs.iter().chain(&self.ledger_dirs) {
            let s =
                self.env.fs.space(dir).map_err(|e| {
                    StorageError::Io(format!("disk space of {}: {e}", dir.display()))
                })?;
            if s.total > 0 {
                highest = highest.max(1.0 - s.free as f64 / s.total as f64);
            }
        }
        let was_full = self.disk_full.load(Ordering::Acquire);
        // Stopped by a refused write (not for good): the disk was full, whatever it says now.
        let refused =
            self.storage.fatal_reason().is_none() && self.storage.read_only_reason().is_some();
        let full = if was_full || refused {
            highest >= lwm
        } else {
            highest > threshold
        };
        self.disk_full.store(full, Ordering::Release);
        if !full && refused && self.storage.resume_after_space_freed() {
            tracing::info!(
                usage = highest,
                lwm,
                "disk usage under the low-water mark: the journal takes writes again"
            );
        }
        Ok((highest, full))
    }

    /// The engine itself (checkpoint, shutdown, journal numbers).
    pub fn engine(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// Clean stop: a checkpoint (so a restart replays little), then the journal stops after
    /// syncing what is queued.
    pub fn shutdown(&self) -> Result<(), folio_storage::StorageError> {
        let checkpoint = self.storage.checkpoint();
        self.storage.shutdown();
        checkpoint
    }

    /// Deletes a ledger from this bookie (garbage collection, once its metadata is gone):
    /// see `folio_storage::Storage::delete_ledger`.
    pub fn delete_ledger(&self, ledger: LedgerId) -> Result<(), folio_storage::StorageError> {
        self.storage.delete_ledger(ledger)?;
        self.lacs.forget(ledger);
        Ok(())
    }

    fn exists(&self, ledger: LedgerId) -> Result<bool, StorageError> {
        self.storage.ledger_exists(ledger).map_err(engine_error)
    }
}

fn engine_error(e: folio_storage::StorageError) -> StorageError {
    use folio_storage::StorageError as E;
    match e {
        E::Unauthorized { ledger } => StorageError::Unauthorized(ledger),
        E::Fenced { ledger } => StorageError::Fenced(ledger),
        E::ReadOnly { .. } | E::NoSpace { .. } => StorageError::ReadOnly,
        other => StorageError::Io(other.to_string()),
    }
}

fn completion(done: WriteCallback) -> folio_storage::WriteCallback {
    Box::new(move |result| done(result.map_err(engine_error)))
}

impl EngineStorage {
    /// An add through `put` (the engine's journaled or deferred add): runs `put` where it
    /// may wait for write-cache room, and raises the known LAC as soon as the entry is
    /// stored, before it is durable here. The LAC an entry carries is the writer's, who
    /// had every entry up to it acknowledged by an ack quorum: it is true of the ledger
    /// whatever becomes of this copy, so a long poll may be woken with it now rather than
    /// a journal group later (BookKeeper's ledger storage does the same).
    fn add_with(
        &self,
        ledger: LedgerId,
        body: &Bytes,
        done: WriteCallback,
        put: impl FnOnce(folio_storage::WriteCallback) -> bool,
    ) {
        let lac = body
            .get(16..24)
            .map(|b| i64::from_be_bytes(b.try_into().expect("8 bytes")));
        let would_block = self.storage.add_would_block(body.len());
        let add = || {
            if put(completion(done))
                && let Some(lac) = lac
            {
                self.lacs.raise(ledger, lac);
            }
        };
        // Adds run on the connection's task. One that must wait for write-cache room
        // (a flush is behind) would hold a runtime worker, and with both workers held no
        // connection is served, reads included: tell tokio, which moves this worker's
        // other tasks to another thread first (multi-threaded runtimes only).
        if would_block
            && tokio::runtime::Handle::try_current()
                .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
        {
            tokio::task::block_in_place(add)
        } else {
            add()
        }
    }
}

impl BookieStorage for EngineStorage {
    fn add_entry(
        &self,
        ledger: LedgerId,
        entry: EntryId,
        master_key: Bytes,
        body: Bytes,
        recovery: bool,
        done: WriteCallback,
    ) {
        self.add_with(ledger, &body.clone(), done, |done| {
            self.storage
                .add_entry(ledger, entry, &master_key, body, recovery, done)
        })
    }

    fn add_recovery_entry_deferred(
        &self,
        ledger: LedgerId,
        entry: EntryId,
        master_key: Bytes,
        body: Bytes,
        done: WriteCallback,
    ) {
        self.add_with(ledger, &body.clone(), done, |done| {
            self.storage
                .add_recovery_entry_deferred(ledger, entry, &master_key, body, done)
        })
    }

    fn fence(&self, ledger: LedgerId, master_key: Bytes, done: WriteCallback) {
        if self.ignore_fence.load(Ordering::Acquire) {
            // Only records the master key, as the first add would.
            self.storage
                .set_master_key(ledger, &master_key, completion(done));
            return;
        }
        self.storage.fence(ledger, &master_key, completion(done))
    }

    fn read_entry(&self, ledger: LedgerId, entry: EntryId) -> Result<Bytes, StorageError> {
        self.check_alive()?;
        match self
            .storage
            .read_entry(ledger, entry)
            .map_err(engine_error)?
        {
            Some(body) => Ok(body),
            None if self.exists(ledger)? => Err(StorageError::NoEntry { ledger, entry }),
            None => Err(StorageError::NoLedger(ledger)),
        }
    }

    fn read_entry_nowait(&self, ledger: LedgerId, entry: EntryId) -> Option<Bytes> {
        self.check_alive().ok()?;
        self.storage.read_entry_nowait(ledger, entry)
    }

    fn known_lac(&self, ledger: LedgerId) -> Option<EntryId> {
        self.check_alive().ok()?;
        self.lacs.get(ledger)
    }

    fn last_add_confirmed(&self, ledger: LedgerId) -> Result<EntryId, StorageError> {
        self.check_alive()?;
        if let Some(lac) = self.lacs.get(ledger) {
            return Ok(lac);
        }
        if !self.exists(ledger)? {
            return Err(StorageError::NoLedger(ledger));
        }
        let lac = self.storage.read_lac(ledger).map_err(engine_error)?;
        Ok(self.lacs.learn(ledger, lac.lac.unwrap_or(-1)))
    }

    fn explicit_lac(&self, ledger: LedgerId) -> Result<Option<Bytes>, StorageError> {
        self.check_alive()?;
        if !self.exists(ledger)? {
            return Err(StorageError::NoLedger(ledger));
        }
        self.storage.explicit_lac(ledger).map_err(engine_error)
    }

    fn write_lac(
        &self,
        ledger: LedgerId,
        lac: EntryId,
        master_key: Bytes,
        body: Bytes,
        done: WriteCallback,
    ) {
        let lacs = self.lacs.clone();
        let done: WriteCallback = Box::new(move |result| {
            if result.is_ok() {
                lacs.raise(ledger, lac);
            }
            done(result)
        });
        // The engine reads the LAC back from the body (offset 8) after a restart, as
        // BookKeeper does.
        self.storage
            .write_lac(ledger, &master_key, body, completion(done))
    }

    fn force_ledger(&self, ledger: LedgerId, done: WriteCallback) {
        self.storage.force_ledger(ledger, completion(done))
    }

    fn write_close(&self, ledger: LedgerId, master_key: &[u8]) -> Result<(), StorageError> {
        self.check_alive()?;
        match self.storage.write_close(ledger, master_key) {
            Ok(true) => Ok(()),
            Ok(false) => Err(StorageError::NoLedger(ledger)),
            Err(e) => Err(engine_error(e)),
        }
    }

    fn entry_ids(&self, ledger: LedgerId) -> Result<Vec<EntryId>, StorageError> {
        self.check_alive()?;
        if !self.exists(ledger)? {
            return Err(StorageError::NoLedger(ledger));
        }
        self.storage.entry_ids(ledger).map_err(engine_error)
    }

    fn is_read_only(&self) -> bool {
        self.disk_full.load(Ordering::Acquire)
            || self.manual_read_only.load(Ordering::Acquire)
            || self.storage.is_read_only()
    }

    fn set_manual_read_only(&self, read_only: bool) -> Result<(), StorageError> {
        self.manual_read_only.store(read_only, Ordering::Release);
        Ok(())
    }

    fn space(&self) -> Result<folio_env::DiskSpace, StorageError> {
        // Summed over the ledger directories, as BookKeeper's GetBookieInfo does.
        let mut total = folio_env::DiskSpace { free: 0, total: 0 };
        for dir in &self.ledger_dirs {
            let s =
                self.env.fs.space(dir).map_err(|e| {
                    StorageError::Io(format!("disk space of {}: {e}", dir.display()))
                })?;
            total.free += s.free;
            total.total += s.total;
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use folio_env::sim::SimFileSystem;
    use std::sync::atomic::AtomicU64;
    use std::time::Duration;

    fn body(ledger: i64, entry: i64, len: usize) -> Bytes {
        let mut b = Vec::with_capacity(32 + len);
        for v in [ledger, entry, -1, len as i64] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        b.resize(32 + len, 7);
        Bytes::from(b)
    }

    /// An `Env` whose journal and entry logs are on a simulated disk (whose fdatasync can
    /// be made slow) under `data_dir`; the index (redb) stays on the real one.
    fn sim_disk(data_dir: &std::path::Path) -> (SimFileSystem, Env) {
        std::fs::create_dir_all(data_dir.join("index/current")).unwrap();
        let fs = SimFileSystem::new();
        let env = Env {
            fs: Arc::new(fs.clone()),
            ..Env::real()
        };
        (fs, env)
    }

    /// The LAC an add carries is served once the entry is stored, before the journal has
    /// made it durable (what lets a long poll wake a journal group earlier); an add refused
    /// for its master key raises nothing.
    #[test]
    fn an_added_lac_is_served_before_the_add_is_durable_and_a_refused_one_never() {
        let tmp = tempfile::tempdir().unwrap();
        let (fs, env) = sim_disk(tmp.path());
        let config = BookieConfig {
            data_dir: Some(tmp.path().to_path_buf()),
            disk_usage_threshold: 0.999,
            disk_usage_lwm_threshold: 0.998,
            ..BookieConfig::default()
        };
        let s = EngineStorage::open(&env, &config).unwrap();
        let with_lac = |entry: i64, lac: i64| {
            let mut b = body(1, entry, 100).to_vec();
            b[16..24].copy_from_slice(&lac.to_be_bytes());
            Bytes::from(b)
        };
        let key = Bytes::from_static(&[1; 20]);
        let add = |entry, lac, key: &Bytes| {
            let (tx, rx) = std::sync::mpsc::channel();
            s.add_entry(
                1,
                entry,
                key.clone(),
                with_lac(entry, lac),
                false,
                Box::new(move |r| {
                    let _ = tx.send(r);
                }),
            );
            rx
        };
        for (e, lac) in [(0, -1), (1, 0)] {
            add(e, lac, &key)
                .recv_timeout(Duration::from_secs(60))
                .unwrap()
                .unwrap();
        }
        assert_eq!(s.last_add_confirmed(1).unwrap(), 0);
        // Every fdatasync now takes 3 s: entry 2 is stored long before it is durable.
        fs.set_sync_delay(Duration::from_secs(3));
        let durable = add(2, 1, &key);
        assert!(
            durable.try_recv().is_err(),
            "the add completed at once: the test proves nothing"
        );
        assert_eq!(s.last_add_confirmed(1).unwrap(), 1, "LAC 1 not served yet");
        durable
            .recv_timeout(Duration::from_secs(60))
            .unwrap()
            .unwrap();
        fs.set_sync_delay(Duration::ZERO);
        let refused = add(3, 2, &Bytes::from_static(&[2; 20]));
        assert!(matches!(
            refused.recv_timeout(Duration::from_secs(60)).unwrap(),
            Err(StorageError::Unauthorized(1))
        ));
        assert_eq!(s.last_add_confirmed(1).unwrap(), 1, "a refused add's LAC");
        s.shutdown().unwrap();
    }

    /// While a flush holds the write cache full, adds wait; they must not take the
    /// runtime's workers with them (then no connection is served at all): a task that
    /// only ticks keeps ticking while two adds wait on a two-worker runtime.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn adds_waiting_for_cache_room_leave_the_runtime_running() {
        let tmp = tempfile::tempdir().unwrap();
        let (fs, env) = sim_disk(tmp.path());
        let config = BookieConfig {
            data_dir: Some(tmp.path().to_path_buf()),
            write_cache_bytes: 64 * 1024,
            flush_interval_ms: 3_600_000,
            disk_usage_threshold: 0.999,
            disk_usage_lwm_threshold: 0.998,
            ..BookieConfig::default()
        };
        let s = Arc::new(EngineStorage::open(&env, &config).unwrap());
        // Every fdatasync on the simulated disk (the flush's too) now takes 3 s.
        fs.set_sync_delay(Duration::from_secs(3));
        let key = Bytes::from_static(&[1; 20]);
        // 60 KiB: past the checkpoint threshold (half the cache), so a flush starts and
        // holds these entries (readable, counted) until its fdatasync returns.
        for e in 0..2 {
            s.add_entry(
                1,
                e,
                key.clone(),
                body(1, e, 30 * 1024),
                false,
                Box::new(|_| {}),
            );
        }
        let ticks = Arc::new(AtomicU64::new(0));
        let t = ticks.clone();
        let probe = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                t.fetch_add(1, Ordering::Relaxed);
            }
        });
        let mut adds = Vec::new();
        for e in 2..4 {
            let (s, key) = (s.clone(), key.clone());
            adds.push(tokio::spawn(async move {
                s.add_entry(1, e, key, body(1, e, 30 * 1024), false, Box::new(|_| {}));
            }));
        }
        // Not a worker: this thread may sleep. The adds wait for the 3 s flush.
        std::thread::sleep(Duration::from_millis(300));
        let before = ticks.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(1000));
        let ticked = ticks.load(Ordering::Relaxed) - before;
        assert!(
            adds.iter().any(|a| !a.is_finished()),
            "the adds did not wait: the test proves nothing"
        );
        assert!(
            ticked >= 10,
            "only {ticked} ticks of 10 ms in 1 s while adds waited for cache room"
        );
        for a in adds {
            a.await.unwrap();
        }
        probe.abort();
        fs.set_sync_delay(Duration::ZERO);
        s.shutdown().unwrap();
    }

    /// A read the connection's task answers itself (`Processor::read_without_blocking`) is
    /// answered exactly as the read threads would answer it, and only a plain read of an
    /// entry the bookie holds is: fence reads, long polls, unknown ledgers and entries, a
    /// deleted ledger and a halted bookie are left to the read threads.
    #[test]
    fn a_read_answered_without_blocking_is_the_read_threads_answer() {
        use crate::processor::{Processor, ProcessorConfig};
        use crate::request::{ReadRequest, Request, Response};
        let tmp = tempfile::tempdir().unwrap();
        let config = BookieConfig {
            data_dir: Some(tmp.path().to_path_buf()),
            disk_usage_threshold: 0.999,
            disk_usage_lwm_threshold: 0.998,
            ..BookieConfig::default()
        };
        let s = Arc::new(EngineStorage::open(&Env::real(), &config).unwrap());
        for e in 0..20 {
            add(&s, e).unwrap();
        }
        let p = Processor::new(s.clone(), ProcessorConfig::default());
        let answer = |request: Request| {
            let (tx, rx) = std::sync::mpsc::channel();
            let timer = p.process(request, Box::new(move |r| tx.send(r).unwrap()));
            assert!(timer.is_none());
            rx.recv_timeout(Duration::from_secs(60)).unwrap()
        };
        let read = |entry| Request::Read(ReadRequest::entry(1, entry));
        let check = |label: &str| {
            for e in [0, 7, 19, -1] {
                // The read threads' answer first: it learns the ledger's LAC, which a read
                // without blocking only takes from memory.
                let threads = answer(read(e));
                let inline = p.read_without_blocking(&read(e));
                assert_eq!(inline, Some(threads), "{label}: entry {e}");
                assert!(matches!(inline, Some(Response::Read { body: Some(_), .. })));
            }
        };
        check("in the write cache");
        s.storage.checkpoint().unwrap();
        check("flushed to the entry log, in the page cache");
        assert_eq!(p.read_without_blocking(&read(20)), None, "no such entry");
        assert_eq!(
            p.read_without_blocking(&Request::Read(ReadRequest::entry(2, 0))),
            None
        );
        let mut fence = ReadRequest::entry(1, 3);
        fence.fence = true;
        fence.master_key = Some(Bytes::from_static(&[1; 20]));
        assert_eq!(p.read_without_blocking(&Request::Read(fence)), None);
        let mut poll = ReadRequest::entry(1, -1);
        poll.previous_lac = Some(5);
        poll.timeout_ms = Some(1000);
        assert_eq!(p.read_without_blocking(&Request::Read(poll)), None);
        assert_eq!(
            p.read_without_blocking(&Request::ReadLac { ledger: 1 }),
            None
        );
        // The simulator's crash: a dead bookie answers nothing, on no path.
        s.halt();
        assert_eq!(p.read_without_blocking(&read(3)), None, "a halted bookie");
        drop(p);
        drop(s);
        let s = Arc::new(EngineStorage::open(&Env::real(), &config).unwrap());
        let p = Processor::new(s.clone(), ProcessorConfig::default());
        let (tx, rx) = std::sync::mpsc::channel();
        p.process(read(3), Box::new(move |r| tx.send(r).unwrap()));
        rx.recv_timeout(Duration::from_secs(60)).unwrap();
        assert!(
            p.read_without_blocking(&read(3)).is_some(),
            "after a restart"
        );
        s.delete_ledger(1).unwrap();
        assert_eq!(p.read_without_blocking(&read(3)), None, "a deleted ledger");
        s.shutdown().unwrap();
    }

    /// Adds one entry and waits for its completion.
    fn add(s: &EngineStorage, entry: i64) -> Result<(), StorageError> {
        let (tx, rx) = std::sync::mpsc::channel();
        s.add_entry(
            1,
            entry,
            Bytes::from_static(&[1; 20]),
            body(1, entry, 100),
            false,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the add never completed")
    }

    /// The disk checker's rule, with the usage from the simulated disk (its capacity and
    /// what is on it): read-only above the threshold, writable again only below the
    /// low-water mark; a journal write refused for lack of space ends below the mark too;
    /// a failed fdatasync never ends (invariant 9).
    #[test]
    fn full_disk_read_only_ends_below_the_low_water_mark_a_failed_fsync_never() {
        use folio_env::FileSystem as _;
        use folio_env::sim::Fault;
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("index/current")).unwrap();
        let fs = SimFileSystem::with_capacity(10 << 20);
        let env = Env {
            fs: Arc::new(fs.clone()),
            ..Env::real()
        };
        let config = BookieConfig {
            data_dir: Some(tmp.path().to_path_buf()),
            journal_pre_alloc_size_mb: 0,
            ..BookieConfig::default()
        };
        let (threshold, lwm) = (0.5, 0.3);
        let s = EngineStorage::open(&env, &config).unwrap();
        let check = |s: &EngineStorage| s.check_disk_usage(threshold, lwm).unwrap().1;
        assert!(!check(&s));
        add(&s, 0).unwrap();
        // Something else fills the disk past the threshold...
        let filler = tmp.path().join("filler");
        let f = fs
            .open(&filler, folio_env::OpenOptions::write_create())
            .unwrap();
        f.set_len(6 << 20).unwrap();
        assert!(check(&s));
        assert!(s.is_read_only());
        // ... and frees some: still above the low-water mark, still read-only.
        f.set_len(4 << 20).unwrap();
        assert!(check(&s), "read-only until under the low-water mark");
        assert!(s.is_read_only());
        f.set_len(1 << 20).unwrap();
        assert!(!check(&s));
        assert!(!s.is_read_only());
        add(&s, 1).unwrap();

        // The disk fills between two checks: the journal's write is refused.
        fs.inject(Fault::WriteEnospc { after_ops: 0 });
        assert!(add(&s, 2).is_err());
        assert!(s.is_read_only());
        fs.clear_faults();
        assert!(!check(&s), "space is there again");
        assert!(
            !s.is_read_only(),
            "the refused write no longer stops the bookie"
        );
        add(&s, 3).unwrap();

        // A failed fdatasync: read-only for good, whatever the disk usage.
        fs.inject(Fault::SyncEio { after_ops: 0 });
        assert!(add(&s, 4).is_err());
        assert!(!check(&s));
        assert!(
            s.is_read_only(),
            "never writable again after a failed fsync"
        );
        assert!(add(&s, 5).is_err());
        assert_eq!(s.read_entry(1, 3).unwrap(), body(1, 3, 100));
    }
}
