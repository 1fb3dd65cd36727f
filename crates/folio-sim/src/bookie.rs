//! One simulated bookie: the real request [`Processor`] over the bookie's own storage
//! adapter ([`EngineStorage`]) and the production storage engine: the journal engine
//! (`folio_storage::Storage`) over the production `LedgerStore` (entry logs, the redb
//! index, the write cache), all on one [`SimFileSystem`]. A crash image of that disk
//! therefore covers the journal, the entry logs and the index alike.
//!
//! The store is sized so that its machinery runs often in a short run: small entry logs
//! (rolled every few KiB) and a checkpoint whenever a few KiB are unflushed, taken by the
//! simulator on the runtime thread ([`Incarnation::after_request`]), never by the engine's
//! checkpoint thread, so the durable image does not depend on OS thread timing. Garbage
//! collection and compaction are simulator events too ([`Incarnation::compact`],
//! [`Incarnation::collect_garbage`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use folio_bookie::engine::EngineStorage;
use folio_bookie::storage::BookieStorage;
use folio_bookie::{Processor, ProcessorConfig};
use folio_env::sim::{CrashMode, SimFileSystem};
use folio_env::{Env, FileSystem, SystemClock, SystemRng};
use folio_storage::NegativeControls;
use folio_storage::ledger_store::{
    CompactionLimits, CompactionStats, EntryLogGcStats, LedgerStoreConfig,
};
use folio_storage::{JournalConfig, StorageConfig};
use folio_types::{EntryId, LedgerId};

/// How a simulated bookie's storage is configured.
#[derive(Debug, Clone, Copy, Default)]
pub struct BookieKnobs {
    /// Negative control: the journal acknowledges without fsync (`sync_data = false`).
    pub no_sync: bool,
    /// Negative control: fences are acknowledged but not applied
    /// (`EngineStorage::set_ignore_fence_for_tests`).
    pub ignore_fence: bool,
    /// Negative controls of the ledger store and the checkpoint (entry logs unsynced,
    /// index before entry logs, journal files deleted before the flush).
    pub storage: NegativeControls,
    /// Negative control: the ledger store's read of entry -1 skips the index lookup of a
    /// ledger's last entry (`LedgerStoreConfig::skip_last_entry_lookup_for_tests`), so a
    /// restarted bookie answers the stale last entry its ledger info holds.
    pub skip_last_entry_lookup: bool,
    /// An entry log per ledger (`entryLogPerLedgerEnabled`), two open at most so that
    /// logs are evicted; the scenario draws it per start of a bookie from the seed.
    pub per_ledger_logs: bool,
    /// The journal's force-write path (BookKeeper's force-write thread) instead of the
    /// writer's inline fdatasync, stepped by the simulator: a batch's group is written at
    /// once but made durable, and answered, only at a seeded later moment
    /// ([`Incarnation::force_write_step`]), so later groups are written while earlier
    /// ones await their fdatasync, and crashes and checkpoints fall among them. Drawn per
    /// start of a bookie, like `per_ledger_logs`.
    pub force_write: bool,
    /// Entry logs written with direct I/O (`dbStorage_directIOEntryLogger`): whole
    /// aligned blocks, the last partial one rewritten by the next flush, so crashes and
    /// torn writes land on rewrites of blocks that hold synced records. Drawn per start
    /// of a bookie, like `per_ledger_logs`.
    pub direct_entry_logs: bool,
    /// The read-ahead cache on (`read_ahead_cache_bytes`, on by default in a bookie) or
    /// off: reads after compactions, crashes and re-puts must still get the live copy.
    /// Drawn per start of a bookie.
    pub read_ahead: bool,
}

/// Answers waiting for the next force-write step: each request's reply from the
/// processor, and where the simulated network wants it.
pub type AwaitingSync = Vec<(
    tokio::sync::oneshot::Receiver<folio_bookie::Response>,
    tokio::sync::oneshot::Sender<Option<folio_bookie::Response>>,
)>;

/// A running incarnation of a bookie: its disk and its processor.
pub struct Incarnation {
    pub fs: SimFileSystem,
    pub storage: Arc<EngineStorage>,
    pub processor: Processor<Arc<EngineStorage>>,
    force_write: bool,
    /// With `force_write`: answers of written groups not yet made durable, and whether a
    /// step is scheduled for them.
    pub awaiting_sync: parking_lot::Mutex<(AwaitingSync, bool)>,
}

const JOURNAL_DIR: &str = "/journal";
const STORE_DIR: &str = "/ledgers";
const INDEX_DIR: &str = "/index";

/// Entry logs roll past this size: a run of a few hundred small entries per bookie rolls
/// several, so rotation, ledgers maps and compaction of finished logs all happen.
const ENTRY_LOG_SIZE_LIMIT: u64 = 4 * 1024;
/// A checkpoint is taken after a request that leaves this much unflushed.
const CHECKPOINT_BYTES: u64 = 2 * 1024;
/// Far above what a run puts between two checkpoints (replay included), so that a put
/// never waits for room: that wait would ask the engine's checkpoint thread, whose
/// timing the seed does not fix.
const WRITE_CACHE_BYTES: u64 = 16 << 20;

/// Ids of scratch ledgers ([`Incarnation::write_scratch_ledger`]): far above any id the
/// workload's metadata store hands out.
pub const SCRATCH_LEDGER_BASE: i64 = 1 << 40;

/// The journal, ledger and index directories of every simulated bookie (where its
/// cookies are).
pub fn dirs() -> (PathBuf, PathBuf, PathBuf) {
    (
        PathBuf::from(JOURNAL_DIR),
        PathBuf::from(STORE_DIR),
        PathBuf::from(INDEX_DIR),
    )
}

fn storage_config(knobs: BookieKnobs) -> StorageConfig {
    StorageConfig {
        journal: JournalConfig {
            dirs: vec![PathBuf::from(JOURNAL_DIR)],
            // Requests delivered at the same virtual instant are handed to the journal
            // together while its writer is held (net.rs, `Incarnation::held`), then
            // waited for, so group commit needs no timer.
            max_group_wait: Duration::ZERO,
            flush_when_queue_empty: true,
            // No bound but the bytes: everything queued while held is one group, however
            // the OS schedules the journal thread, so the number of disk operations
            // (where a scheduled disk fault strikes, what a crash keeps) is the seed's.
            max_group_entries: 0,
            prealloc_size: 4096,
            max_file_size: 64 * 1024,
            // The writer fdatasyncs inline, or (`force_write`) leaves its groups to the
            // force-write path, which the simulator steps itself: a real force-write
            // thread would race the writer's zero fills, and the disk-operation order
            // would depend on OS thread timing.
            force_write_thread: knobs.force_write,
            force_write_by_caller: knobs.force_write,
            sync_data: !knobs.no_sync,
            ..JournalConfig::default()
        },
        // No checkpoint thread activity: checkpoints are simulator events, taken on the
        // runtime thread (after requests, and at seeded moments), so the durable image
        // does not depend on OS thread timing.
        flush_interval: Duration::ZERO,
        checkpoint_write_cache_bytes: u64::MAX,
    }
}

fn store_config(knobs: BookieKnobs) -> LedgerStoreConfig {
    let mut c = LedgerStoreConfig::new(vec![PathBuf::from(STORE_DIR)], PathBuf::from(INDEX_DIR));
    c.journal_dirs = vec![PathBuf::from(JOURNAL_DIR)];
    c.entry_log_size_limit = ENTRY_LOG_SIZE_LIMIT;
    c.write_cache_bytes = WRITE_CACHE_BYTES;
    c.entry_log_direct_io = knobs.direct_entry_logs;
    c.read_ahead_cache_bytes = if knobs.read_ahead { 64 << 20 } else { 0 };
    c.skip_last_entry_lookup_for_tests = knobs.skip_last_entry_lookup;
    if knobs.per_ledger_logs {
        c.entry_log_per_ledger = true;
        c.max_active_entry_logs = 2;
        // The store reads the system clock (see `open`): an expiry a run could reach
        // would make rotations depend on real time, and a seed's replay with them. Logs
        // rotate by eviction, size, fences and at shutdown instead.
        c.entry_log_access_expiry = Duration::from_secs(24 * 3600);
    }
    c
}

impl Incarnation {
    /// Runs `f` (which queues journal records) with the journal's writer held, so that
    /// everything it queues is one group commit once released, whatever the OS
    /// scheduling: several requests at once share an fdatasync deterministically.
    pub fn held<R>(&self, f: impl FnOnce() -> R) -> R {
        let engine = self.storage.engine();
        engine.hold_journal(true);
        let r = f();
        engine.hold_journal(false);
        r
    }

    /// Opens (replaying the journal) a bookie on `fs`.
    pub fn open(fs: SimFileSystem, knobs: BookieKnobs, seed: u64) -> Result<Self, String> {
        let env = Env {
            clock: Arc::new(SystemClock),
            fs: Arc::new(fs.clone()),
            rng: Arc::new(SystemRng::with_seed(seed)),
        };
        for d in [STORE_DIR, INDEX_DIR] {
            fs.create_dir_all(Path::new(d))
                .map_err(|e| format!("create {d}: {e}"))?;
        }
        let storage = EngineStorage::open_with(&env, storage_config(knobs), store_config(knobs))
            .map_err(|e| format!("open the storage engine: {e}"))?;
        storage.set_ignore_fence_for_tests(knobs.ignore_fence);
        // A ForceLedger of deferred-sync copies waits for a checkpoint the simulator takes
        // (`checkpoint_for_forces`), on its thread with the journal idle, as its others.
        storage.engine().set_force_checkpoints_by_caller(true);
        storage.set_negative_controls_for_tests(knobs.storage);
        let storage = Arc::new(storage);
        let processor = Processor::new(storage.clone(), ProcessorConfig::default());
        Ok(Incarnation {
            fs,
            storage,
            processor,
            force_write: knobs.force_write,
            awaiting_sync: parking_lot::Mutex::new((Vec::new(), false)),
        })
    }

    /// Power loss: the disk a restart would find (torn as `mode` says). This incarnation
    /// answers nothing more; its journal threads are stopped.
    pub fn crash(&self, mode: CrashMode) -> SimFileSystem {
        let image = self.fs.crash(mode);
        // Groups awaiting their fdatasync were lost with the power: their requests get
        // no answer (the halt below syncs them on the old disk, which nobody reads).
        self.awaiting_sync.lock().0.clear();
        self.storage.halt();
        image
    }

    /// Whether this incarnation's journal runs the stepped force-write path.
    pub fn force_write(&self) -> bool {
        self.force_write
    }

    /// With `force_write`: makes every written group durable and runs its callbacks, on
    /// this thread (after the journal's writer is idle). Returns the number of groups.
    pub fn force_write_step(&self) -> usize {
        if !self.force_write || self.is_dead() {
            return 0;
        }
        self.storage.engine().force_write_step()
    }

    /// Waits (in real time, up to 10 s) until the journal thread is idle; false if it
    /// did not get there. After a group's callbacks the journal thread still works (it
    /// tops up the preallocated zeroes and syncs them): left running, that work would
    /// race the next simulated step (a crash image, a checkpoint, the operation count of
    /// a scheduled disk fault), and the run would depend on OS thread timing. A force
    /// request queued behind it is answered only once it is done, and itself touches
    /// no file (it has no record and nothing is dirty).
    pub fn quiesce(&self) -> bool {
        if self.is_dead() {
            return true;
        }
        if self.force_write {
            // A force request would wait for the next step; the writer's own idleness is
            // what matters (what it queues for the step touches no file until then).
            return self.storage.engine().wait_journal_idle();
        }
        let (tx, rx) = std::sync::mpsc::channel();
        self.storage.engine().force_journal(
            0,
            Box::new(move |_| {
                let _ = tx.send(());
            }),
        );
        rx.recv_timeout(Duration::from_secs(10)).is_ok()
    }

    /// A checkpoint (ledger store flush: entry logs, then the index; then the journal
    /// marks and the deletion of journal files before them), on the caller's thread.
    pub fn checkpoint(&self) -> Result<(), String> {
        self.storage
            .engine()
            .checkpoint()
            .map_err(|e| e.to_string())
    }

    /// With the journal idle: the checkpoint a ForceLedger of deferred-sync copies waits
    /// for, if one does. Returns whether one was taken and how it went.
    pub fn checkpoint_for_forces(&self) -> Option<Result<(), String>> {
        if self.is_dead() || !self.storage.engine().forces_wait_for_flush() {
            return None;
        }
        Some(self.checkpoint())
    }

    /// After each request (its journal work done): a checkpoint when enough is
    /// unflushed, as the engine's own threshold would ask for one: one that may stage
    /// the index (and then leave the journal's marks), as the engine's thread takes.
    /// Returns whether one was taken and how it went.
    pub fn after_request(&self) -> Option<Result<(), String>> {
        if self.is_dead()
            || self.is_read_only()
            || self.storage.engine().unflushed_bytes() < CHECKPOINT_BYTES
        {
            return None;
        }
        Some(
            self.storage
                .engine()
                .checkpoint_for_room()
                .map_err(|e| e.to_string()),
        )
    }

    /// Entry log compaction at `threshold` (what the bookie's compaction rounds run).
    pub fn compact(&self, threshold: f64) -> Result<CompactionStats, String> {
        self.storage
            .engine()
            .compact(threshold, CompactionLimits::UNLIMITED)
            .map_err(|e| e.to_string())
    }

    /// Garbage collection of entry logs holding only deleted ledgers.
    pub fn collect_garbage(&self) -> Result<EntryLogGcStats, String> {
        self.storage
            .engine()
            .remove_dead_entry_logs()
            .map_err(|e| e.to_string())
    }

    /// Writes `entries` entries of `len` bytes of a scratch ledger straight into this
    /// bookie's storage (no client, nothing recorded as acknowledged) and waits for the
    /// journal. Deleted later ([`Incarnation::delete_ledger`]), as garbage collection
    /// deletes a ledger whose metadata is gone, its records become dead bytes in entry
    /// logs shared with live ledgers: work for compaction (which must then move the live
    /// entries) and garbage collection, which the workload's ledgers alone never give.
    pub fn write_scratch_ledger(
        &self,
        ledger: i64,
        entries: i64,
        len: usize,
    ) -> Result<(), String> {
        let key = Bytes::from_static(&[0x5c; 20]);
        for entry in 0..entries {
            let mut body = Vec::with_capacity(32 + len);
            for v in [ledger, entry, entry - 1, len as i64] {
                body.extend_from_slice(&v.to_be_bytes());
            }
            body.resize(32 + len, entry as u8);
            let (tx, rx) = std::sync::mpsc::channel();
            // Held: a new ledger's first add journals two records (its master key, then
            // the entry), one group either way.
            self.held(|| {
                self.storage.engine().add_entry(
                    ledger,
                    entry,
                    &key,
                    Bytes::from(body),
                    false,
                    Box::new(move |r| {
                        let _ = tx.send(r);
                    }),
                )
            });
            // Stepped at once: scratch ledgers are outside the clients' view.
            if self.force_write {
                self.quiesce();
                self.force_write_step();
            }
            let done = rx.recv_timeout(Duration::from_secs(10));
            // The journal's work after the callbacks must not race the next add (see
            // `quiesce`): the disk operations stay in the seed's order.
            self.quiesce();
            match done {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(format!("scratch add {ledger}:{entry}: {e}")),
                Err(_) => return Err(format!("scratch add {ledger}:{entry} never completed")),
            }
        }
        Ok(())
    }

    /// Deletes a ledger from this bookie, as its garbage collector does once the
    /// ledger's metadata is gone (durable at the next checkpoint).
    pub fn delete_ledger(&self, ledger: LedgerId) -> Result<(), String> {
        self.storage
            .delete_ledger(ledger)
            .map_err(|e| e.to_string())
    }

    /// What this bookie holds for an entry, as its storage reads it after a restart.
    pub fn read_entry(&self, ledger: LedgerId, entry: EntryId) -> Result<Bytes, String> {
        self.storage
            .read_entry(ledger, entry)
            .map_err(|e| e.to_string())
    }

    pub fn is_read_only(&self) -> bool {
        self.storage.is_read_only()
    }

    pub fn is_dead(&self) -> bool {
        self.storage.is_halted()
    }
}
