//! One simulated bookie: the real request [`Processor`] over the real journal engine
//! ([`Storage`]) with [`MemLedgerStore`] as its ledger store, all on a [`SimFileSystem`].
//!
//! The bookie crate's own adapter (`EngineStorage`) opens the redb-indexed `LedgerStore`,
//! whose index bypasses the `FileSystem` seam, so a crash image of the simulated disk would
//! not capture it. [`JournalStorage`] is the same adaptation over any `LedgerBackend`; it
//! also carries the simulator's one protocol-breaking switch (`ignore_fence`, off by
//! default), used only by the negative-control tests.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use folio_bookie::storage::{BookieStorage, StorageError, WriteCallback};
use folio_bookie::{Processor, ProcessorConfig};
use folio_env::sim::{CrashMode, SimFileSystem};
use folio_env::{Env, FileSystem, SystemClock, SystemRng};
use folio_storage::mem_store::MemLedgerStore;
use folio_storage::{JournalConfig, Storage, StorageConfig};
use folio_types::{EntryId, LedgerId};

/// The processor's storage: the journal engine, adapted as `folio_bookie::engine` does.
pub struct JournalStorage {
    storage: Arc<Storage>,
    /// Negative control: acknowledge a fence without fencing (breaks the protocol).
    ignore_fence: bool,
    /// Set when the bookie has been crashed: its storage must not answer any more.
    dead: AtomicBool,
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

impl JournalStorage {
    fn exists(&self, ledger: LedgerId) -> Result<bool, StorageError> {
        self.storage.ledger_exists(ledger).map_err(engine_error)
    }
}

impl BookieStorage for JournalStorage {
    fn add_entry(
        &self,
        ledger: LedgerId,
        entry: EntryId,
        master_key: Bytes,
        body: Bytes,
        recovery: bool,
        done: WriteCallback,
    ) {
        self.storage
            .add_entry(ledger, entry, &master_key, body, recovery, completion(done))
    }

    fn fence(&self, ledger: LedgerId, master_key: Bytes, done: WriteCallback) {
        if self.ignore_fence {
            // Only records the master key, as the first add would.
            self.storage
                .set_master_key(ledger, &master_key, completion(done));
            return;
        }
        self.storage.fence(ledger, &master_key, completion(done))
    }

    fn read_entry(&self, ledger: LedgerId, entry: EntryId) -> Result<Bytes, StorageError> {
        if self.dead.load(Ordering::Acquire) {
            return Err(StorageError::Io("bookie crashed".into()));
        }
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

    fn last_add_confirmed(&self, ledger: LedgerId) -> Result<EntryId, StorageError> {
        if !self.exists(ledger)? {
            return Err(StorageError::NoLedger(ledger));
        }
        let lac = self.storage.read_lac(ledger).map_err(engine_error)?;
        Ok(lac.lac.unwrap_or(-1))
    }

    fn explicit_lac(&self, ledger: LedgerId) -> Result<Option<Bytes>, StorageError> {
        if !self.exists(ledger)? {
            return Err(StorageError::NoLedger(ledger));
        }
        self.storage.explicit_lac(ledger).map_err(engine_error)
    }

    fn write_lac(
        &self,
        ledger: LedgerId,
        _lac: EntryId,
        master_key: Bytes,
        body: Bytes,
        done: WriteCallback,
    ) {
        self.storage
            .write_lac(ledger, &master_key, body, completion(done))
    }

    fn force_ledger(&self, ledger: LedgerId, done: WriteCallback) {
        self.storage.force_ledger(ledger, completion(done))
    }

    fn entry_ids(&self, ledger: LedgerId) -> Result<Vec<EntryId>, StorageError> {
        if !self.exists(ledger)? {
            return Err(StorageError::NoLedger(ledger));
        }
        self.storage.entry_ids(ledger).map_err(engine_error)
    }

    fn is_read_only(&self) -> bool {
        self.storage.is_read_only()
    }

    fn space(&self) -> Result<folio_env::DiskSpace, StorageError> {
        Ok(folio_env::DiskSpace {
            free: 1 << 40,
            total: 1 << 40,
        })
    }
}

/// How a simulated bookie's storage is configured.
#[derive(Debug, Clone, Copy, Default)]
pub struct BookieKnobs {
    /// Negative control: the journal acknowledges without fsync (`sync_data = false`).
    pub no_sync: bool,
    /// Negative control: fences are acknowledged but not applied.
    pub ignore_fence: bool,
}

/// A running incarnation of a bookie: its disk and its processor.
pub struct Incarnation {
    pub fs: SimFileSystem,
    pub storage: Arc<JournalStorage>,
    pub processor: Processor<Arc<JournalStorage>>,
}

const JOURNAL_DIR: &str = "/journal";
const STORE_DIR: &str = "/ledgers";

/// The journal and ledger directories of every simulated bookie (where its cookies are).
pub fn dirs() -> (PathBuf, PathBuf) {
    (PathBuf::from(JOURNAL_DIR), PathBuf::from(STORE_DIR))
}

fn storage_config(knobs: BookieKnobs) -> StorageConfig {
    StorageConfig {
        journal: JournalConfig {
            dirs: vec![PathBuf::from(JOURNAL_DIR)],
            // Every request is handed to the journal alone and waited for (see net.rs), so
            // group commit would only add real-time waits.
            max_group_wait: Duration::ZERO,
            flush_when_queue_empty: true,
            // One record a group: a request that journals two records (a new ledger's
            // master key, then the entry) would otherwise be one group or two depending
            // on when the journal thread wakes, and the number of disk operations (where
            // a scheduled disk fault strikes, what a crash keeps) with it.
            max_group_entries: 1,
            prealloc_size: 4096,
            max_file_size: 64 * 1024,
            // The writer fdatasyncs inline: a force-write thread would race the writer's
            // zero fills, and the disk-operation order would depend on OS thread timing.
            force_write_thread: false,
            sync_data: !knobs.no_sync,
            ..JournalConfig::default()
        },
        // No checkpoint thread activity: checkpoints are simulator events, taken on the
        // runtime thread at seeded moments, so the durable image does not depend on
        // OS thread timing.
        flush_interval: Duration::ZERO,
        checkpoint_write_cache_bytes: u64::MAX,
    }
}

impl Incarnation {
    /// Opens (replaying the journal) a bookie on `fs`.
    pub fn open(fs: SimFileSystem, knobs: BookieKnobs, seed: u64) -> Result<Self, String> {
        let env = Env {
            clock: Arc::new(SystemClock),
            fs: Arc::new(fs.clone()),
            rng: Arc::new(SystemRng::with_seed(seed)),
        };
        fs.create_dir_all(Path::new(STORE_DIR))
            .map_err(|e| format!("create {STORE_DIR}: {e}"))?;
        let store = MemLedgerStore::open(env.fs.clone(), &Path::new(STORE_DIR).join("store"))
            .map_err(|e| format!("open ledger store: {e}"))?;
        let storage = Storage::open(&env, storage_config(knobs), Arc::new(store))
            .map_err(|e| format!("open journal engine: {e}"))?;
        let storage = Arc::new(JournalStorage {
            storage: Arc::new(storage),
            ignore_fence: knobs.ignore_fence,
            dead: AtomicBool::new(false),
        });
        let processor = Processor::new(storage.clone(), ProcessorConfig::default());
        Ok(Incarnation {
            fs,
            storage,
            processor,
        })
    }

    /// Power loss: the disk a restart would find (torn as `mode` says). This incarnation
    /// answers nothing more; its journal threads are stopped.
    pub fn crash(&self, mode: CrashMode) -> SimFileSystem {
        let image = self.fs.crash(mode);
        self.storage.dead.store(true, Ordering::Release);
        self.storage.storage.shutdown();
        image
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
        let (tx, rx) = std::sync::mpsc::channel();
        self.storage.storage.force_ledger(
            0,
            Box::new(move |_| {
                let _ = tx.send(());
            }),
        );
        rx.recv_timeout(Duration::from_secs(10)).is_ok()
    }

    /// A checkpoint (ledger store flush, journal mark), on the caller's thread.
    pub fn checkpoint(&self) -> Result<(), String> {
        self.storage.storage.checkpoint().map_err(|e| e.to_string())
    }

    pub fn is_read_only(&self) -> bool {
        self.storage.is_read_only()
    }

    pub fn is_dead(&self) -> bool {
        self.storage.dead.load(Ordering::Acquire)
    }
}
