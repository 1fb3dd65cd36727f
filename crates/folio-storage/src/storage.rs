//! `Storage`: the engine the bookie calls for every add, fence, LAC and read.
//!
//! A write is applied to the ledger store (so it is readable at once), then queued
//! on the journal; its completion callback runs after the journal's fdatasync covers
//! it. Per-ledger checks (master key, fence) and the queueing happen under one
//! per-ledger lock, so a fence and an add of the same ledger reach the journal in the
//! order they were decided: an add that passed the fence check before a fence is
//! acknowledged before that fence is.

use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::Bytes;
use folio_env::Env;
use folio_types::IdHashMap;
use parking_lot::{Condvar, Mutex};

use crate::checkpoint;
use crate::config::StorageConfig;
use crate::deferred::Deferred;
use crate::error::{BackendError, StorageError};
use crate::journal::{Journal, JournalStats, RecordKind, ReplayRecord, ReplayStats};
use crate::ledger_store::EntryLogGcStats;

/// The completion of a write: runs exactly once. Ok only on the journal's thread,
/// after the fdatasync covering the write returned Ok; Err either there (the write or
/// fdatasync failed) or at once on the calling thread (the write was refused before
/// reaching the journal: bad key, fenced, read-only, bad request). Keep it short (send
/// on a channel); it must not call `Storage::shutdown`.
pub type WriteCallback = Box<dyn FnOnce(Result<(), StorageError>) + Send>;

/// A ledger's state as the ledger store keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredLedger {
    pub fenced: bool,
    pub master_key: Option<Bytes>,
    pub explicit_lac: Option<Bytes>,
}

/// The ledger store under the journal (entry logs, index, write cache): its writes are
/// durable only once `flush` returns Ok. Implemented by `LedgerStore`; a small
/// file-backed store in `mem_store` serves unit tests of stores without entry logs.
pub trait LedgerBackend: Send + Sync + 'static {
    /// Stores an entry; readable at once; idempotent (replay puts entries again).
    fn put_entry(&self, ledger: i64, entry: i64, data: Bytes) -> Result<(), BackendError>;
    /// [`LedgerBackend::put_entry`], returning the entry's record checksum
    /// (`entry_log::format::payload_record_crc`) if the backend computed it on the way,
    /// for the journal's record of the add. Default: `put_entry`, no checksum.
    fn put_entry_crc(
        &self,
        ledger: i64,
        entry: i64,
        data: Bytes,
    ) -> Result<Option<u32>, BackendError> {
        self.put_entry(ledger, entry, data).map(|()| None)
    }
    /// `entry == -1`: the last entry. Ok(None) only when the entry is absent.
    fn get_entry(&self, ledger: i64, entry: i64) -> Result<Option<Bytes>, BackendError>;
    /// `get_entry` only if it cannot wait for the disk; `None` when it would, or when
    /// the entry is absent or the read would fail (the blocking `get_entry` then answers).
    /// Default: always `None`.
    fn get_entry_nowait(&self, _ledger: i64, _entry: i64) -> Option<Bytes> {
        None
    }
    fn ledger(&self, ledger: i64) -> Result<Option<StoredLedger>, BackendError>;
    fn set_master_key(&self, ledger: i64, key: Bytes) -> Result<(), BackendError>;
    fn set_fenced(&self, ledger: i64) -> Result<(), BackendError>;
    fn set_explicit_lac(&self, ledger: i64, body: Bytes) -> Result<(), BackendError>;
    /// Entry ids held for a ledger, ascending.
    fn entry_ids(&self, ledger: i64) -> Result<Vec<i64>, BackendError>;
    /// Makes every write issued before the call durable.
    fn flush(&self) -> Result<(), BackendError>;
    /// Frees the write cache like `flush`, but may leave part of the work for a later
    /// flush (the ledger store stages its index); returns whether what was written before
    /// the call is durable now. Default: a whole flush.
    fn flush_for_room(&self) -> Result<bool, BackendError> {
        self.flush().map(|()| true)
    }
    /// Bytes held in the write cache, not yet flushed.
    fn write_cache_used(&self) -> u64;
    /// The read-ahead cache's figures. Default: a backend without one (all zero).
    fn read_cache_stats(&self) -> crate::read_cache::ReadCacheStats {
        crate::read_cache::ReadCacheStats::default()
    }
    /// Whether a put of `len` bytes would block now, waiting for write-cache room (a
    /// hint, for callers that must not block a thread others share). Default: never.
    fn put_would_wait(&self, _len: u64) -> bool {
        false
    }
    /// Bytes put since the last flush started: what the next flush writes (a checkpoint
    /// is due when it passes `checkpoint_write_cache_bytes`). Stores without a second
    /// generation answer `write_cache_used`.
    fn unflushed_bytes(&self) -> u64 {
        self.write_cache_used()
    }
    /// Deletes a ledger: its entries and state become unreadable at once and leave the
    /// store durably at the next `flush`; the store remembers the ledger as deleted and
    /// drops later puts to it (a replay of its journal records). The default refuses,
    /// for stores that cannot delete.
    fn delete_ledger(&self, ledger: i64) -> Result<(), BackendError> {
        Err(BackendError::Other(
            format!("this ledger store cannot delete ledgers (ledger {ledger})").into(),
        ))
    }
    /// Whether the ledger was deleted (`ledger` then answers None).
    fn is_deleted(&self, _ledger: i64) -> Result<bool, BackendError> {
        Ok(false)
    }
    /// Installs what a put calls when it must wait for write-cache room: it asks the
    /// checkpoint thread for a checkpoint (it must not flush on the calling thread).
    fn set_flush_requester(&self, _requester: Arc<dyn Fn() + Send + Sync>) {}
    /// The ledgers the store holds (deleted ones excluded), ascending. The default
    /// refuses, for stores that cannot list them (garbage collection then does nothing).
    fn ledgers(&self) -> Result<Vec<i64>, BackendError> {
        Err(BackendError::Other(
            "this ledger store cannot list its ledgers".into(),
        ))
    }
    /// How many ledgers the store holds and how many entries are in its index (for
    /// BookKeeper's `ledgers-count` and `entries-count` gauges). The default counts
    /// through `ledgers` and `entry_ids`.
    fn ledger_and_entry_counts(&self) -> Result<(u64, u64), BackendError> {
        let ledgers = self.ledgers()?;
        let mut entries = 0;
        for l in &ledgers {
            entries += self.entry_ids(*l)?.len() as u64;
        }
        Ok((ledgers.len() as u64, entries))
    }
    /// Deletes the files holding only deleted ledgers whose deletion is flushed (see
    /// `LedgerStore::remove_dead_entry_logs`). The default has nothing to remove.
    fn remove_dead_entry_logs(&self) -> Result<EntryLogGcStats, BackendError> {
        Ok(EntryLogGcStats::default())
    }
    /// Compacts entry logs whose usage is below `threshold`, within `limits` (see
    /// `LedgerStore::compact`). The default does nothing, for stores without entry logs.
    fn compact(
        &self,
        _threshold: f64,
        _limits: crate::ledger_store::CompactionLimits,
    ) -> Result<crate::ledger_store::CompactionStats, BackendError> {
        Ok(crate::ledger_store::CompactionStats::default())
    }
    /// Asks for the ledger's entry log to be rotated at the next flush (BP-32 write
    /// close; a fence too). Advisory: the default, for stores without a log per ledger,
    /// does nothing.
    fn mark_write_closed(&self, _ledger: i64) {}
    /// Sets the store's negative controls (see [`crate::negative`]); never outside a
    /// test. The default has none.
    #[doc(hidden)]
    fn set_negative_controls_for_tests(&self, _c: crate::NegativeControls) {}
}

/// What ReadLac answers: the explicit LAC body and the last entry, each if present,
/// and the highest LAC either carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LacRead {
    pub explicit_lac: Option<Bytes>,
    pub last_entry: Option<Bytes>,
    /// max(LAC field at offset 16 of the last entry, LAC at offset 8 of the explicit
    /// LAC body); None when neither exists.
    pub lac: Option<i64>,
}

/// Bytes of the entry header a stored entry must have (ledger, entry, LAC, length).
const ENTRY_HEADER_LEN: usize = 32;
const SHARDS: usize = 16;

/// A shard of ledger states, locked (see `Storage::with_ledger`).
type LedgerGuard<'a> = parking_lot::MutexGuard<'a, IdHashMap<i64, LedgerState>>;

#[derive(Debug, Clone)]
struct LedgerState {
    master_key: Option<MasterKey>,
    fenced: bool,
}

/// A ledger's master key as every add checks it. BookKeeper's clients send 20 bytes (the
/// SHA-1 of "ledger" and the password), so such a key is kept inline in the ledger's
/// state: checking it then reads no second allocation, which at 10,000 ledgers written at
/// once was a cache miss per add (docs/performance.md, "Ten thousand ledgers written at
/// once"). A key of any other length is kept as it came.
#[derive(Debug, Clone)]
enum MasterKey {
    Sha1([u8; 20]),
    Other(Bytes),
}

impl MasterKey {
    fn new(key: &[u8]) -> MasterKey {
        match <[u8; 20]>::try_from(key) {
            Ok(k) => MasterKey::Sha1(k),
            Err(_) => MasterKey::Other(Bytes::copy_from_slice(key)),
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            MasterKey::Sha1(k) => k,
            MasterKey::Other(k) => k,
        }
    }
}

pub(crate) struct Inner {
    pub(crate) journal: Journal,
    pub(crate) store: Arc<dyn LedgerBackend>,
    shards: Vec<Mutex<IdHashMap<i64, LedgerState>>>,
    pub(crate) checkpoint_lock: Mutex<()>,
    pub(crate) stop: Mutex<bool>,
    /// Set by the ledger store's flush requester: checkpoint now.
    pub(crate) checkpoint_requested: std::sync::atomic::AtomicBool,
    /// Times the checkpoint thread woke up (tests: it must sleep between checkpoints).
    pub(crate) checkpoint_wakeups: std::sync::atomic::AtomicU64,
    /// Checkpoints completed since open.
    pub(crate) checkpoints: std::sync::atomic::AtomicU64,
    /// Negative control (`NegativeControls::delete_journal_before_flush`).
    pub(crate) delete_journal_before_flush_for_tests: std::sync::atomic::AtomicBool,
    /// Negative control (`NegativeControls::deferred_force_skips_flush`).
    deferred_force_skips_flush_for_tests: std::sync::atomic::AtomicBool,
    /// Negative control (`NegativeControls::marks_past_a_staged_index`).
    pub(crate) marks_past_a_staged_index_for_tests: std::sync::atomic::AtomicBool,
    /// Deferred-sync recovery adds not yet flushed, and the forces waiting for them.
    pub(crate) deferred: Deferred,
    /// A force waiting for a flush leaves the checkpoint to the caller (the simulator).
    force_checkpoints_by_caller: std::sync::atomic::AtomicBool,
    pub(crate) stop_cv: Condvar,
    pub(crate) config: StorageConfig,
    pub(crate) env: Env,
}

/// The storage engine of a bookie.
pub struct Storage {
    inner: Arc<Inner>,
    checkpointer: Mutex<Option<JoinHandle<()>>>,
    replay: ReplayStats,
}

impl Storage {
    /// Opens the engine over `store`: replays each journal directory from its mark
    /// into the store, starts the journal writers and the checkpoint thread.
    pub fn open(
        env: &Env,
        config: StorageConfig,
        store: Arc<dyn LedgerBackend>,
    ) -> Result<Storage, StorageError> {
        // Replay can put more than the write cache holds, and no checkpoint thread runs
        // yet: flush the store as the cache fills (marks do not move, so this is only
        // durability ahead of time), and let a put that still finds the cache full ask
        // for a flush on a helper thread.
        let weak_store = Arc::downgrade(&store);
        store.set_flush_requester(Arc::new(move || {
            if let Some(s) = weak_store.upgrade() {
                let flush = folio_env::metric_label::carry(move || {
                    if let Err(e) = s.flush() {
                        tracing::error!("ledger store flush during replay failed: {e}");
                    }
                });
                std::thread::spawn(flush);
            }
        }));
        let threshold = config.checkpoint_write_cache_bytes;
        let mut apply = |r: ReplayRecord| {
            if store.write_cache_used() >= threshold {
                store.flush()?;
            }
            apply_record(&*store, r)
        };
        let (journal, replay) = Journal::open(env, &config.journal, &mut apply)?;
        tracing::info!(?replay, "journal replayed");
        let inner = Arc::new(Inner {
            journal,
            store,
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            checkpoint_lock: Mutex::new(()),
            stop: Mutex::new(false),
            checkpoint_requested: std::sync::atomic::AtomicBool::new(false),
            checkpoints: std::sync::atomic::AtomicU64::new(0),
            checkpoint_wakeups: std::sync::atomic::AtomicU64::new(0),
            delete_journal_before_flush_for_tests: std::sync::atomic::AtomicBool::new(false),
            deferred_force_skips_flush_for_tests: std::sync::atomic::AtomicBool::new(false),
            marks_past_a_staged_index_for_tests: std::sync::atomic::AtomicBool::new(false),
            deferred: Deferred::default(),
            force_checkpoints_by_caller: std::sync::atomic::AtomicBool::new(false),
            stop_cv: Condvar::new(),
            config,
            env: env.clone(),
        });
        let weak = Arc::downgrade(&inner);
        inner.store.set_flush_requester(Arc::new(move || {
            if let Some(i) = weak.upgrade() {
                checkpoint::request(&i);
            }
        }));
        let i = Arc::clone(&inner);
        let checkpointer = Some(
            folio_env::metric_label::spawn(
                std::thread::Builder::new().name("checkpoint".into()),
                move || checkpoint::run_thread(&i),
            )
            .map_err(|e| StorageError::io("spawn checkpoint thread", "checkpoint", e))?,
        );
        Ok(Storage {
            inner,
            checkpointer: Mutex::new(checkpointer),
            replay,
        })
    }

    /// Sets the engine's and its ledger store's negative controls (see
    /// [`crate::negative`]); never outside a test.
    #[doc(hidden)]
    pub fn set_negative_controls_for_tests(&self, c: crate::NegativeControls) {
        self.inner.delete_journal_before_flush_for_tests.store(
            c.delete_journal_before_flush,
            std::sync::atomic::Ordering::Relaxed,
        );
        self.inner.deferred_force_skips_flush_for_tests.store(
            c.deferred_force_skips_flush,
            std::sync::atomic::Ordering::Relaxed,
        );
        self.inner.marks_past_a_staged_index_for_tests.store(
            c.marks_past_a_staged_index,
            std::sync::atomic::Ordering::Relaxed,
        );
        self.inner.store.set_negative_controls_for_tests(c);
    }

    /// Bytes put into the ledger store since its last flush started (what the next
    /// checkpoint writes), for callers that decide when to checkpoint themselves.
    pub fn unflushed_bytes(&self) -> u64 {
        self.inner.store.unflushed_bytes()
    }

    /// What start-up replay found.
    pub fn replay_stats(&self) -> &ReplayStats {
        &self.replay
    }

    /// Whether an add of `len` bytes would block now, its ledger store waiting for
    /// write-cache room (a hint; see `add_entry`).
    pub fn add_would_block(&self, len: usize) -> bool {
        self.inner.store.put_would_wait(len as u64)
    }

    /// Adds an entry (`data` = the entry with digest; its first 16 bytes must carry
    /// `ledger` and `entry`). The first add of a ledger records its master key; a later
    /// mismatch is `Unauthorized`. A fenced ledger takes only recovery adds.
    ///
    /// Returns whether the entry passed those checks and is stored (readable, not yet
    /// durable: `done` says when it is): from then on the LAC it carries may be served,
    /// as BookKeeper's ledger storage does before its journal has the entry.
    pub fn add_entry(
        &self,
        ledger: i64,
        entry: i64,
        master_key: &[u8],
        data: Bytes,
        recovery: bool,
        done: WriteCallback,
    ) -> bool {
        match self.put_checked(ledger, entry, master_key, data.clone(), recovery) {
            Ok((crc, guard)) => {
                let journal = &self.inner.journal;
                // A large entry's checksum, computed as it was put, spares the journal a pass.
                match crc {
                    Some(crc) => journal.append_with_crc(
                        RecordKind::Add,
                        ledger,
                        entry,
                        data,
                        crc,
                        Some(done),
                    ),
                    None => journal.append(RecordKind::Add, ledger, entry, data, Some(done)),
                }
                drop(guard);
                checkpoint::request_if_due(&self.inner);
                true
            }
            Err(e) => {
                done(Err(e));
                false
            }
        }
    }

    /// A recovery add with DEFERRED_SYNC (an entry a re-replicating client copies here):
    /// stored without a journal record, and `done` runs at once. It is durable only once
    /// a [`Storage::force_ledger`] of its ledger, asked after `done` ran, completed Ok:
    /// that force waits for a flush of the ledger store (see `deferred`). A process that
    /// stops before then may lose it, as the client that asked for deferred sync allowed.
    /// Returns whether it is stored, as [`Storage::add_entry`].
    pub fn add_recovery_entry_deferred(
        &self,
        ledger: i64,
        entry: i64,
        master_key: &[u8],
        data: Bytes,
        done: WriteCallback,
    ) -> bool {
        match self.put_checked(ledger, entry, master_key, data, true) {
            Ok((_, guard)) => {
                drop(guard);
                self.inner.deferred.put_done(ledger);
                checkpoint::request_if_due(&self.inner);
                done(Ok(()));
                true
            }
            Err(e) => {
                done(Err(e));
                false
            }
        }
    }

    /// Fences a ledger (creating its state with `master_key` if absent). `done` runs
    /// once the fence is durable; a restart never un-fences.
    pub fn fence(&self, ledger: i64, master_key: &[u8], done: WriteCallback) {
        if let Some(e) = self.inner.journal.poison_error(ledger) {
            return done(Err(e));
        }
        let r = self.with_ledger(ledger, master_key, |inner, st| {
            if st.fenced {
                return Ok(false);
            }
            inner.store.set_fenced(ledger)?;
            st.fenced = true;
            Ok(true)
        });
        if r.is_ok() {
            // A fenced ledger's writer is done (seed 001): with a log per ledger its log
            // rotates at the next checkpoint. Recovery's adds, if any, open a new one.
            self.inner.store.mark_write_closed(ledger);
        }
        match r {
            Ok((true, guard)) => {
                self.inner
                    .journal
                    .append(RecordKind::Fence, ledger, 0, Bytes::new(), Some(done));
                drop(guard);
            }
            // Already fenced: the fence record is queued or durable; complete after the
            // next fdatasync of the ledger's directory so it is durable either way.
            Ok((false, guard)) => {
                self.inner.journal.force(ledger, done);
                drop(guard);
            }
            Err(e) => done(Err(e)),
        }
    }

    /// Records a ledger's master key if it has none (first key wins); `Unauthorized` if
    /// it has another. `done` runs once the key is durable.
    pub fn set_master_key(&self, ledger: i64, master_key: &[u8], done: WriteCallback) {
        if let Some(e) = self.inner.journal.poison_error(ledger) {
            return done(Err(e));
        }
        match self.with_ledger(ledger, master_key, |_, _| Ok(())) {
            Ok(((), guard)) => {
                self.inner.journal.force(ledger, done);
                drop(guard);
            }
            Err(e) => done(Err(e)),
        }
    }

    /// Stores an explicit LAC body (WriteLac); `done` runs once it is durable.
    pub fn write_lac(&self, ledger: i64, master_key: &[u8], body: Bytes, done: WriteCallback) {
        if let Some(e) = self.inner.journal.poison_error(ledger) {
            return done(Err(e));
        }
        let r = self.with_ledger(ledger, master_key, |inner, _| {
            inner.store.set_explicit_lac(ledger, body.clone())?;
            Ok(())
        });
        match r {
            Ok(((), guard)) => {
                self.inner
                    .journal
                    .append(RecordKind::ExplicitLac, ledger, 0, body, Some(done));
                drop(guard);
            }
            Err(e) => done(Err(e)),
        }
    }

    /// `done` runs once every write queued before for the ledger is durable: its journal
    /// records, and its deferred-sync recovery adds, for which it asks for a checkpoint
    /// and waits for its flush.
    pub fn force_ledger(&self, ledger: i64, done: WriteCallback) {
        use std::sync::atomic::Ordering::Relaxed;
        if self
            .inner
            .deferred_force_skips_flush_for_tests
            .load(Relaxed)
            || !self.inner.deferred.is_pending(ledger)
        {
            // Nothing deferred (every force but a copier's): the journal's force alone.
            return self.inner.journal.force(ledger, done);
        }
        let (journal_done, flush_done) = both(done);
        self.inner.journal.force(ledger, journal_done);
        if let Err(flush_done) = self.inner.deferred.wait(ledger, flush_done) {
            return flush_done(Ok(()));
        }
        if !self.inner.force_checkpoints_by_caller.load(Relaxed) {
            checkpoint::request(&self.inner);
        }
    }

    /// A force waiting for a flush does not ask the checkpoint thread for one: the caller
    /// takes it ([`Storage::checkpoint`] when [`Storage::forces_wait_for_flush`]). The
    /// simulator's way: its checkpoints run on its own thread with the journal idle, so
    /// that the disk's image does not depend on OS thread timing.
    #[doc(hidden)]
    pub fn set_force_checkpoints_by_caller(&self, by_caller: bool) {
        self.inner
            .force_checkpoints_by_caller
            .store(by_caller, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a ForceLedger waits for the next flush of the ledger store.
    pub fn forces_wait_for_flush(&self) -> bool {
        self.inner.deferred.has_waiters()
    }

    /// The journal's part of [`Storage::force_ledger`] alone: `done` runs once every
    /// journal record queued before is durable (the simulator's wait for an idle journal).
    #[doc(hidden)]
    pub fn force_journal(&self, ledger: i64, done: WriteCallback) {
        self.inner.journal.force(ledger, done);
    }

    /// Holds or releases the journal's writer threads ([`Journal::hold_writers`]): the
    /// simulator's way to put several requests into one group commit.
    #[doc(hidden)]
    pub fn hold_journal(&self, held: bool) {
        self.inner.journal.hold_writers(held);
    }

    /// See [`Journal::force_write_step`] (the simulator, `force_write_by_caller`).
    #[doc(hidden)]
    pub fn force_write_step(&self) -> usize {
        self.inner.journal.force_write_step()
    }

    /// See [`Journal::wait_writers_idle`] (the simulator).
    #[doc(hidden)]
    pub fn wait_journal_idle(&self) -> bool {
        self.inner.journal.wait_writers_idle()
    }

    /// An entry (`entry == -1`: the last one). Ok(None) only when it is absent.
    pub fn read_entry(&self, ledger: i64, entry: i64) -> Result<Option<Bytes>, StorageError> {
        Ok(self.inner.store.get_entry(ledger, entry)?)
    }

    /// [`Storage::read_entry`] only if it cannot wait for the disk (the entry is in
    /// memory or the page cache): `None` when it would, and when the entry is absent or
    /// the read would fail, for `read_entry` to answer.
    pub fn read_entry_nowait(&self, ledger: i64, entry: i64) -> Option<Bytes> {
        self.inner.store.get_entry_nowait(ledger, entry)
    }

    /// Whether the bookie holds any state for the ledger.
    pub fn ledger_exists(&self, ledger: i64) -> Result<bool, StorageError> {
        if self.inner.shards[shard_of(ledger)]
            .lock()
            .contains_key(&ledger)
        {
            return Ok(true);
        }
        Ok(self.inner.store.ledger(ledger)?.is_some())
    }

    pub fn is_fenced(&self, ledger: i64) -> Result<bool, StorageError> {
        if let Some(st) = self.inner.shards[shard_of(ledger)].lock().get(&ledger) {
            return Ok(st.fenced);
        }
        Ok(self.inner.store.ledger(ledger)?.is_some_and(|l| l.fenced))
    }

    /// BP-32's advisory write close: the writer is done with `ledger`, so with a log per
    /// ledger its log rotates at the next checkpoint (instead of after the access
    /// expiry). Nothing is written to the journal: losing the mark in a crash costs only
    /// the early rotation. `Ok(false)` if the bookie holds nothing of the ledger;
    /// `Unauthorized` if `master_key` is not the ledger's.
    pub fn write_close(&self, ledger: i64, master_key: &[u8]) -> Result<bool, StorageError> {
        let cached = self.inner.shards[shard_of(ledger)]
            .lock()
            .get(&ledger)
            .map(|st| st.master_key.as_ref().map(|k| k.as_slice() == master_key));
        let matches = match cached {
            Some(m) => m,
            None => match self.inner.store.ledger(ledger)? {
                Some(l) => l.master_key.map(|k| k.as_ref() == master_key),
                None => return Ok(false),
            },
        };
        if matches == Some(false) {
            return Err(StorageError::Unauthorized { ledger });
        }
        self.inner.store.mark_write_closed(ledger);
        Ok(true)
    }

    /// The master key recorded for a ledger.
    pub fn master_key(&self, ledger: i64) -> Result<Option<Bytes>, StorageError> {
        Ok(self.inner.store.ledger(ledger)?.and_then(|l| l.master_key))
    }

    /// The explicit LAC body last written, if any.
    pub fn explicit_lac(&self, ledger: i64) -> Result<Option<Bytes>, StorageError> {
        Ok(self
            .inner
            .store
            .ledger(ledger)?
            .and_then(|l| l.explicit_lac))
    }

    /// ReadLac: explicit LAC and last entry, and the LAC they carry.
    pub fn read_lac(&self, ledger: i64) -> Result<LacRead, StorageError> {
        let explicit_lac = self.explicit_lac(ledger)?;
        let last_entry = self.inner.store.get_entry(ledger, -1)?;
        let from_entry = last_entry.as_deref().and_then(|e| be_i64_at(e, 16));
        let from_body = explicit_lac.as_deref().and_then(|b| be_i64_at(b, 8));
        let lac = from_entry.max(from_body);
        Ok(LacRead {
            explicit_lac,
            last_entry,
            lac,
        })
    }

    /// Entry ids held for a ledger, ascending.
    pub fn entry_ids(&self, ledger: i64) -> Result<Vec<i64>, StorageError> {
        Ok(self.inner.store.entry_ids(ledger)?)
    }

    /// Deletes a ledger (BookKeeper's bookie does this from garbage collection, once the
    /// ledger's metadata is gone): the ledger store forgets its entries and state at
    /// once, and its per-ledger state here (master key, fence) is dropped. Nothing is
    /// journaled: the deletion becomes durable at the next checkpoint (which flushes
    /// the store). A crash before that checkpoint resurrects the ledger's entries from
    /// the journal and the entry logs; garbage collection deletes them again later,
    /// and since clients never read a deleted ledger, nothing is lost or shown. After
    /// the deletion, writes to the ledger are refused (ledger ids are never reused).
    pub fn delete_ledger(&self, ledger: i64) -> Result<(), StorageError> {
        let mut map = self.inner.shards[shard_of(ledger)].lock();
        self.inner.store.delete_ledger(ledger)?;
        map.remove(&ledger);
        tracing::info!(ledger, "ledger deleted");
        Ok(())
    }

    /// The ledgers the bookie holds (deleted ones excluded), ascending: what garbage
    /// collection compares with the metadata store.
    pub fn ledgers(&self) -> Result<Vec<i64>, StorageError> {
        Ok(self.inner.store.ledgers()?)
    }

    /// Deletes the entry logs that hold only deleted ledgers, once those deletions are
    /// flushed (run [`Storage::checkpoint`] after [`Storage::delete_ledger`] to make them
    /// so). Never touches a log being written.
    pub fn remove_dead_entry_logs(&self) -> Result<EntryLogGcStats, StorageError> {
        Ok(self.inner.store.remove_dead_entry_logs()?)
    }

    /// Compacts the ledger store's entry logs whose usage is below `threshold`, within
    /// `limits` (BookKeeper's minor/major compaction; see `LedgerStore::compact`). A
    /// store without entry logs does nothing.
    pub fn compact(
        &self,
        threshold: f64,
        limits: crate::ledger_store::CompactionLimits,
    ) -> Result<crate::ledger_store::CompactionStats, StorageError> {
        Ok(self.inner.store.compact(threshold, limits)?)
    }

    /// Runs a checkpoint now: flush the ledger store, then move the journal marks.
    pub fn checkpoint(&self) -> Result<(), StorageError> {
        checkpoint::checkpoint(&self.inner, checkpoint::Durability::Whole).map(drop)
    }

    /// The checkpoint the engine's own thread takes when the write cache passes its
    /// threshold: it frees the write cache, but may stage the ledger store's index and
    /// then leave the journal's marks where they are (see `checkpoint.rs`).
    pub fn checkpoint_for_room(&self) -> Result<(), StorageError> {
        checkpoint::checkpoint(&self.inner, checkpoint::Durability::MayStage).map(drop)
    }

    /// Bytes in the ledger store's write cache, not yet flushed to an entry log.
    pub fn write_cache_used(&self) -> u64 {
        self.inner.store.write_cache_used()
    }

    /// The ledger store's read-ahead cache figures.
    pub fn read_cache_stats(&self) -> crate::read_cache::ReadCacheStats {
        self.inner.store.read_cache_stats()
    }

    /// What the journal did since open (group commits, records, fdatasyncs, zero
    /// fills), summed over the journal directories.
    pub fn journal_stats(&self) -> JournalStats {
        self.inner.journal.stats()
    }

    /// Written journal groups waiting for the force-write thread's fdatasync.
    pub fn journal_force_write_queue_len(&self) -> u64 {
        self.inner.journal.force_write_queue_len()
    }

    /// Ledgers the ledger store holds (not deleted), and entries its index holds (entries
    /// still only in the write cache not counted, as BookKeeper's location index).
    pub fn ledger_and_entry_counts(&self) -> Result<(u64, u64), StorageError> {
        Ok(self.inner.store.ledger_and_entry_counts()?)
    }

    /// Times the checkpoint thread woke up since open: once per interval or request
    /// (and once a second with no interval), never in a busy loop.
    pub fn checkpoint_thread_wakeups(&self) -> u64 {
        self.inner
            .checkpoint_wakeups
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Checkpoints completed since open (each flushed the ledger store and persisted
    /// the journal marks).
    pub fn checkpoints(&self) -> u64 {
        self.inner
            .checkpoints
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Why the engine takes no more writes (a journal write or fsync failed), if so.
    pub fn read_only_reason(&self) -> Option<String> {
        self.inner.journal.read_only_reason()
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only_reason().is_some()
    }

    /// Why the engine takes no more writes for good (a failed fsync or checkpoint,
    /// invariant 9), if so; not a write refused by a full disk.
    pub fn fatal_reason(&self) -> Option<String> {
        self.inner.journal.fatal_reason()
    }

    /// Takes writes again if only a full disk stopped them (see
    /// `Journal::resume_after_space_freed`); the caller has seen space freed. Never
    /// after a failed fsync. Returns whether writes resumed.
    pub fn resume_after_space_freed(&self) -> bool {
        self.inner.journal.resume_after_space_freed()
    }

    /// The persisted journal marks, per journal directory.
    pub fn journal_marks(&self) -> Vec<crate::journal::Position> {
        self.inner.journal.marks()
    }

    /// Stops the checkpoint thread and the journal writers (which first write and
    /// sync what is queued), then runs a last checkpoint so the next start has little
    /// to replay. Dropping a `Storage` without `shutdown` stops the threads the same way
    /// but skips the checkpoint (the next start replays more; nothing is lost).
    pub fn shutdown(&self) {
        self.stop();
        if !self.is_read_only()
            && let Err(e) = checkpoint::checkpoint(&self.inner, checkpoint::Durability::Whole)
        {
            tracing::error!("final checkpoint failed: {e}");
        }
        self.inner
            .deferred
            .fail_all("the bookie stopped before a flush covered the deferred-sync adds");
    }

    fn stop(&self) {
        *self.inner.stop.lock() = true;
        self.inner.stop_cv.notify_all();
        if let Some(t) = self.checkpointer.lock().take()
            && t.join().is_err()
        {
            tracing::error!("the checkpoint thread panicked");
        }
        self.inner.journal.shutdown();
    }

    /// An add's checks and its write-cache put: the entry itself, a poisoned journal, the
    /// master key and, unless `recovery`, the fence. The guard returned lets the caller
    /// queue its journal record, if it writes one, before another writer of the ledger can.
    fn put_checked(
        &self,
        ledger: i64,
        entry: i64,
        master_key: &[u8],
        data: Bytes,
        recovery: bool,
    ) -> Result<(Option<u32>, LedgerGuard<'_>), StorageError> {
        check_entry(ledger, entry, &data)?;
        if let Some(e) = self.inner.journal.poison_error(ledger) {
            return Err(e);
        }
        self.with_ledger(ledger, master_key, |inner, st| {
            if st.fenced && !recovery {
                return Err(StorageError::Fenced { ledger });
            }
            Ok(inner.store.put_entry_crc(ledger, entry, data)?)
        })
    }

    /// Runs `f` with the ledger's state locked, after checking `master_key` (or
    /// recording it, journaled, for a new ledger). Returns the shard guard so the
    /// caller queues its journal record before another writer of the ledger can.
    fn with_ledger<T>(
        &self,
        ledger: i64,
        master_key: &[u8],
        f: impl FnOnce(&Inner, &mut LedgerState) -> Result<T, StorageError>,
    ) -> Result<(T, LedgerGuard<'_>), StorageError> {
        let inner = &*self.inner;
        let mut map = inner.shards[shard_of(ledger)].lock();
        let st = match map.entry(ledger) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                if inner.store.is_deleted(ledger)? {
                    return Err(StorageError::BadRequest(format!(
                        "ledger {ledger} was deleted; ledger ids are not reused"
                    )));
                }
                let loaded = inner.store.ledger(ledger)?;
                v.insert(LedgerState {
                    master_key: loaded
                        .as_ref()
                        .and_then(|l| l.master_key.as_deref())
                        .map(MasterKey::new),
                    fenced: loaded.is_some_and(|l| l.fenced),
                })
            }
        };
        match &st.master_key {
            Some(k) if k.as_slice() != master_key => {
                return Err(StorageError::Unauthorized { ledger });
            }
            Some(_) => {}
            None => {
                let key = Bytes::copy_from_slice(master_key);
                inner.store.set_master_key(ledger, key.clone())?;
                inner
                    .journal
                    .append(RecordKind::MasterKey, ledger, 0, key.clone(), None);
                st.master_key = Some(MasterKey::new(master_key));
            }
        }
        let t = f(inner, st)?;
        Ok((t, map))
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        self.stop();
    }
}

fn shard_of(ledger: i64) -> usize {
    (ledger as u64 % SHARDS as u64) as usize
}

fn be_i64_at(b: &[u8], at: usize) -> Option<i64> {
    b.get(at..at + 8)
        .map(|s| i64::from_be_bytes(s.try_into().expect("8 bytes")))
}

fn check_entry(ledger: i64, entry: i64, data: &[u8]) -> Result<(), StorageError> {
    if ledger < 0 || entry < 0 {
        return Err(StorageError::BadRequest(format!(
            "invalid ledger {ledger} / entry {entry} for an add"
        )));
    }
    if data.len() < ENTRY_HEADER_LEN {
        return Err(StorageError::BadRequest(format!(
            "entry {ledger}/{entry} is {} bytes, shorter than the {ENTRY_HEADER_LEN}-byte entry header",
            data.len()
        )));
    }
    let (l, e) = (be_i64_at(data, 0), be_i64_at(data, 8));
    if l != Some(ledger) || e != Some(entry) {
        return Err(StorageError::BadRequest(format!(
            "entry bytes name ledger {l:?} entry {e:?}, request says {ledger}/{entry}"
        )));
    }
    Ok(())
}

/// Re-applies one journal record to the ledger store at start-up.
fn apply_record(store: &dyn LedgerBackend, r: ReplayRecord) -> Result<(), StorageError> {
    match r.kind {
        RecordKind::Add => store.put_entry(r.ledger, r.entry, r.payload)?,
        RecordKind::MasterKey => {
            // First key wins, as when it was written.
            let has_key = store
                .ledger(r.ledger)?
                .is_some_and(|l| l.master_key.is_some());
            if !has_key {
                store.set_master_key(r.ledger, r.payload)?;
            }
        }
        RecordKind::Fence => store.set_fenced(r.ledger)?,
        RecordKind::ExplicitLac => store.set_explicit_lac(r.ledger, r.payload)?,
    }
    Ok(())
}

/// The production ledger store (entry logs + redb index + write cache).
impl LedgerBackend for crate::ledger_store::LedgerStore {
    fn put_entry(&self, ledger: i64, entry: i64, data: Bytes) -> Result<(), BackendError> {
        Ok(crate::ledger_store::LedgerStore::put_entry(
            self, ledger, entry, data,
        )?)
    }

    fn put_entry_crc(
        &self,
        ledger: i64,
        entry: i64,
        data: Bytes,
    ) -> Result<Option<u32>, BackendError> {
        Ok(crate::ledger_store::LedgerStore::put_entry_crc(
            self, ledger, entry, data,
        )?)
    }

    fn get_entry(&self, ledger: i64, entry: i64) -> Result<Option<Bytes>, BackendError> {
        Ok(crate::ledger_store::LedgerStore::get_entry(
            self, ledger, entry,
        )?)
    }

    fn get_entry_nowait(&self, ledger: i64, entry: i64) -> Option<Bytes> {
        crate::ledger_store::LedgerStore::get_entry_nowait(self, ledger, entry)
    }

    fn ledger(&self, ledger: i64) -> Result<Option<StoredLedger>, BackendError> {
        Ok(self
            .info_as_held(ledger)
            .filter(|i| !i.deleted)
            .map(|i| StoredLedger {
                fenced: i.fenced,
                master_key: i.master_key,
                explicit_lac: i.explicit_lac,
            }))
    }

    fn set_master_key(&self, ledger: i64, key: Bytes) -> Result<(), BackendError> {
        Ok(crate::ledger_store::LedgerStore::set_master_key(
            self, ledger, key,
        )?)
    }

    fn set_fenced(&self, ledger: i64) -> Result<(), BackendError> {
        Ok(crate::ledger_store::LedgerStore::set_fenced(self, ledger)?)
    }

    fn set_explicit_lac(&self, ledger: i64, body: Bytes) -> Result<(), BackendError> {
        Ok(crate::ledger_store::LedgerStore::set_explicit_lac(
            self, ledger, body,
        )?)
    }

    fn entry_ids(&self, ledger: i64) -> Result<Vec<i64>, BackendError> {
        Ok(crate::ledger_store::LedgerStore::entry_ids(self, ledger)?)
    }

    fn flush(&self) -> Result<(), BackendError> {
        Ok(crate::ledger_store::LedgerStore::flush(self)?)
    }

    fn flush_for_room(&self) -> Result<bool, BackendError> {
        Ok(crate::ledger_store::LedgerStore::flush_for_room(self)?)
    }

    fn write_cache_used(&self) -> u64 {
        crate::ledger_store::LedgerStore::write_cache_used(self)
    }
    fn read_cache_stats(&self) -> crate::read_cache::ReadCacheStats {
        crate::ledger_store::LedgerStore::read_cache_stats(self)
    }
    fn unflushed_bytes(&self) -> u64 {
        crate::ledger_store::LedgerStore::unflushed_bytes(self)
    }
    fn put_would_wait(&self, len: u64) -> bool {
        crate::ledger_store::LedgerStore::put_would_wait(self, len)
    }

    fn set_flush_requester(&self, requester: Arc<dyn Fn() + Send + Sync>) {
        crate::ledger_store::LedgerStore::set_flush_requester(self, requester)
    }

    fn delete_ledger(&self, ledger: i64) -> Result<(), BackendError> {
        Ok(crate::ledger_store::LedgerStore::delete_ledger(
            self, ledger,
        )?)
    }

    fn is_deleted(&self, ledger: i64) -> Result<bool, BackendError> {
        Ok(self.info_as_held(ledger).is_some_and(|i| i.deleted))
    }

    fn ledgers(&self) -> Result<Vec<i64>, BackendError> {
        Ok(crate::ledger_store::LedgerStore::ledgers(self)?)
    }

    fn ledger_and_entry_counts(&self) -> Result<(u64, u64), BackendError> {
        Ok((self.ledger_count(), self.entry_count()?))
    }

    fn remove_dead_entry_logs(&self) -> Result<EntryLogGcStats, BackendError> {
        Ok(crate::ledger_store::LedgerStore::remove_dead_entry_logs(
            self,
        )?)
    }

    fn compact(
        &self,
        threshold: f64,
        limits: crate::ledger_store::CompactionLimits,
    ) -> Result<crate::ledger_store::CompactionStats, BackendError> {
        Ok(crate::ledger_store::LedgerStore::compact(
            self, threshold, limits,
        )?)
    }

    fn mark_write_closed(&self, ledger: i64) {
        crate::ledger_store::LedgerStore::mark_write_closed(self, ledger)
    }

    fn set_negative_controls_for_tests(&self, c: crate::NegativeControls) {
        crate::ledger_store::LedgerStore::set_negative_controls_for_tests(self, c)
    }
}

impl From<crate::ledger_store::LedgerStoreError> for BackendError {
    fn from(e: crate::ledger_store::LedgerStoreError) -> Self {
        match e {
            crate::ledger_store::LedgerStoreError::NoSpace { dir, source } => {
                BackendError::NoSpace {
                    dir,
                    detail: source.to_string(),
                }
            }
            other => BackendError::Other(Box::new(other)),
        }
    }
}

/// Two callbacks that together complete `done` once: with the first error, else Ok.
fn both(done: WriteCallback) -> (WriteCallback, WriteCallback) {
    type Pending = (Option<WriteCallback>, u8, Result<(), StorageError>);
    let state: Arc<Mutex<Pending>> = Arc::new(Mutex::new((Some(done), 2, Ok(()))));
    let half = || -> WriteCallback {
        let state = Arc::clone(&state);
        Box::new(move |r| {
            let mut s = state.lock();
            if s.2.is_ok() {
                s.2 = r;
            }
            s.1 -= 1;
            if s.1 == 0 {
                let done = s.0.take().expect("completed once");
                let r = std::mem::replace(&mut s.2, Ok(()));
                drop(s);
                done(r);
            }
        })
    };
    (half(), half())
}
