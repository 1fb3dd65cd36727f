//! `LedgerStore`: the entry logs, the ledger index and the write cache put together;
//! everything a bookie stores except the journal.
//!
//! A put lands in the write cache and is readable at once. Nothing is durable until
//! [`LedgerStore::flush`]: it writes the cached entries to the entry logs in (ledger,
//! entry) order, fdatasyncs them, and only then commits the index durably, so the index
//! never points at bytes a crash could lose. The journal (not here) makes puts durable
//! before that. Reads look in the write cache first, then the read-ahead cache
//! (`crate::read_cache`), then the index and the entry logs; a read
//! that fails on disk is an error, never "no such entry" (DESIGN invariant 5).

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use folio_env::Env;
use folio_types::{IdHashMap, IdHashSet};
use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};

use crate::entry_log::{
    EntryLogPlacement, EntryLogs, Location, PerLedgerConfig, PerLedgerEntryLog, SharedEntryLog,
};
use crate::index::{IndexBatch, LedgerIndex};
use crate::read_cache::ReadCache;
use crate::write_cache::{Generation, WriteCache};

pub use crate::index::LedgerInfo;
pub use compaction::{CompactionFailure, CompactionLimits, CompactionStats, EntryLogUsage};
pub use gc::EntryLogGcStats;

mod compaction;
mod gc;
mod read_ahead;

/// BookKeeper's `logSizeLimit` default (1 GiB).
pub const DEFAULT_ENTRY_LOG_SIZE_LIMIT: u64 = 1 << 30;
/// Default bound on unflushed entry bytes held in memory (64 MiB).
pub const DEFAULT_WRITE_CACHE_BYTES: u64 = 64 << 20;

/// Where and how the ledger store keeps its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerStoreConfig {
    /// Entry logs live in `<dir>/current/`.
    pub ledger_dirs: Vec<PathBuf>,
    /// The index store lives in `<index_dir>/current/`.
    pub index_dir: PathBuf,
    /// Rotate an entry log when it would grow past this size.
    pub entry_log_size_limit: u64,
    /// Bound on unflushed entry bytes held in memory.
    pub write_cache_bytes: u64,
    /// The bookie's journal directories: a mark in one says a checkpoint flushed data
    /// into this store, so its index must exist (see [`LedgerStore::open`]). Empty: only
    /// the entry logs are asked.
    pub journal_dirs: Vec<PathBuf>,
    /// `entryLogPerLedgerEnabled` (false): each ledger gets entry logs of its own
    /// (`entry_log::per_ledger`). Logs of either mode stay readable after a switch.
    pub entry_log_per_ledger: bool,
    /// `maximumNumberOfActiveEntryLogs` (500): with a log per ledger, how many are open
    /// for writing at once.
    pub max_active_entry_logs: usize,
    /// `entrylogMapAccessExpiryTimeInSeconds` (300 s): with a log per ledger, a log not
    /// appended to for this long is rotated at the next flush.
    pub entry_log_access_expiry: std::time::Duration,
    /// `dbStorage_directIOEntryLogger`: entry log records are written with direct I/O,
    /// past the page cache (on by default, unlike BookKeeper: it saves the checkpoint's
    /// copy into the page cache and its write-back, most of a checkpoint's CPU).
    pub entry_log_direct_io: bool,
    /// Bound on entries read ahead from the entry logs (`crate::read_cache`); 0 turns
    /// read-ahead off.
    pub read_ahead_cache_bytes: u64,
    /// `dbStorage_readAheadCacheBatchSize` (100): entries read ahead after a miss, in
    /// one read of at most `read_ahead_batch_bytes`.
    pub read_ahead_batch_size: usize,
    /// `dbStorage_readAheadCacheBatchBytesSize`: the largest read-ahead read.
    pub read_ahead_batch_bytes: usize,
    /// Memory the index keeps of its pages (`crate::index::DEFAULT_INDEX_CACHE_BYTES`).
    pub index_cache_bytes: u64,
    /// Flushes for room ([`LedgerStore::flush_for_room`]) per index commit: the others
    /// stage their locations (`crate::index` `staged.rs`). 1 commits every flush.
    pub index_commit_flushes: usize,
    /// Negative control for tests (false in every real configuration): the read of entry
    /// -1 and `ledger_info` skip the index lookup of a ledger's last entry
    /// (`LedgerStore::learn_last_entry`), so after a restart they answer the info's
    /// stored `last_entry_id`, a lower bound. The simulator's readers must catch it.
    #[doc(hidden)]
    pub skip_last_entry_lookup_for_tests: bool,
}

/// The default read-ahead bound: 16 MiB. Off until 2026-12-04: read-ahead then slowed
/// autorecovery's copies to less than half (a reader with several sequential reads in
/// flight had each of them miss at once and read ahead the same run). Runs are now read
/// once (`read_ahead.rs`), from the page cache without a hand-off, and cached whole; warm
/// catch-up reads of 1 KiB entries cost the bookies 0.83x the CPU (docs/performance.md,
/// "Read-ahead that pays"). A bookie that only writes never fills it.
pub const DEFAULT_READ_AHEAD_CACHE_BYTES: u64 = 16 << 20;
/// BookKeeper's `dbStorage_readAheadCacheBatchSize`.
pub const DEFAULT_READ_AHEAD_BATCH_SIZE: usize = 100;
/// One read-ahead read: 128 KiB (BookKeeper bounds it by the entry count only). A run
/// of 100 entries of 1 KiB fits; entries of 64 KiB and more are read alone: read ahead
/// from the page cache, a bookie of a striped ensemble copies runs of which it serves a
/// third, and catch-up reads of 64 KiB entries ran at 0.7x (docs/performance.md).
pub const DEFAULT_READ_AHEAD_BATCH_BYTES: usize = 128 << 10;

/// Flushes for room per index commit. With 10,000 ledgers written at once, committing
/// every 16 MiB flush rewrote an index block per 1.6 entries (docs/performance.md, "Ten
/// thousand ledgers written at once"); a journal replays at most this many flushes more
/// (times [`SPARSE_COMMIT_FACTOR`] after sparse flushes).
pub const DEFAULT_INDEX_COMMIT_FLUSHES: usize = 4;
/// A flush holding fewer entries than this per ledger is sparse: thousands of ledgers
/// written at once, a couple of entries each per flush, so that its commit rewrites an
/// index block (32 entries' locations) for every entry or two.
const SPARSE_ENTRIES_PER_LEDGER: usize = 4;
/// After a sparse flush, a commit comes this many times less often (64 flushes by
/// default, though the periodic checkpoint commits sooner): each index block is then
/// rewritten once for many entries. A commit's cost grows with the ledgers it touches, not
/// with its entries (each touched ledger's last block is read, rewritten, and its B-tree
/// leaf copied and synced: half a second of the checkpoint thread at 10,000 ledgers), so
/// fewer of them is what pays. At 10,000 ledgers a factor of 4 took the checkpoint's CPU
/// per entry down by 30% and throughput up 9-10% (docs/performance.md, 2026-12-06
/// (20:00)); 16 halved the commits again and took about 30% more off the checkpoint's CPU
/// (2026-12-07 (04:45)). No cost when few ledgers are written: their flushes are not sparse.
const SPARSE_COMMIT_FACTOR: usize = 16;
/// The most locations staged (40 bytes each, about 10 MiB) after a flush that is not
/// sparse: a flush for room that would stage more commits. A 16 MiB flush of 1 KiB entries
/// holds about 16,000, of 100-byte entries about 130,000, so those commit every other
/// flush, and a bookie written by few ledgers keeps its memory.
const MAX_STAGED_LOCATIONS: usize = 256 << 10;
/// The same bound after a sparse flush (about 40 MiB): room for [`SPARSE_COMMIT_FACTOR`]
/// times [`DEFAULT_INDEX_COMMIT_FLUSHES`] flushes of 1 KiB entries. Taken only by a bookie
/// written by thousands of ledgers at once, where each commit it saves costs more than
/// the memory (about 3 KiB per ledger at 10,000).
const MAX_STAGED_LOCATIONS_SPARSE: usize = 1 << 20;
const _: () = assert!(
    MAX_STAGED_LOCATIONS_SPARSE >= SPARSE_COMMIT_FACTOR * DEFAULT_INDEX_COMMIT_FLUSHES * 16_000,
    "the sparse bound must not cut short the sparse commit factor at 1 KiB entries"
);

impl LedgerStoreConfig {
    /// A configuration with BookKeeper's default sizes.
    pub fn new(ledger_dirs: Vec<PathBuf>, index_dir: PathBuf) -> LedgerStoreConfig {
        LedgerStoreConfig {
            ledger_dirs,
            index_dir,
            entry_log_size_limit: DEFAULT_ENTRY_LOG_SIZE_LIMIT,
            write_cache_bytes: DEFAULT_WRITE_CACHE_BYTES,
            journal_dirs: Vec::new(),
            entry_log_per_ledger: false,
            max_active_entry_logs: crate::entry_log::per_ledger::DEFAULT_MAX_ACTIVE_ENTRY_LOGS,
            entry_log_access_expiry: crate::entry_log::per_ledger::DEFAULT_ACCESS_EXPIRY,
            entry_log_direct_io: true,
            read_ahead_cache_bytes: DEFAULT_READ_AHEAD_CACHE_BYTES,
            index_cache_bytes: crate::index::DEFAULT_INDEX_CACHE_BYTES,
            read_ahead_batch_size: DEFAULT_READ_AHEAD_BATCH_SIZE,
            read_ahead_batch_bytes: DEFAULT_READ_AHEAD_BATCH_BYTES,
            index_commit_flushes: DEFAULT_INDEX_COMMIT_FLUSHES,
            skip_last_entry_lookup_for_tests: false,
        }
    }
}

/// What went wrong in the ledger store, and where.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerStoreError {
    #[error("no space left on device in directory {}: {source}", dir.display())]
    NoSpace {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{op} {}{}: {source}", path.display(), offset.map(|o| format!(" at offset {o}")).unwrap_or_default())]
    Io {
        op: &'static str,
        path: PathBuf,
        offset: Option<u64>,
        #[source]
        source: io::Error,
    },
    /// fdatasync failed: what the OS holds for the file is unknown, so the store stops
    /// accepting writes (see `Poisoned`).
    #[error("fdatasync of {} failed: {source}", path.display())]
    SyncFailed {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("corrupt entry log {} at offset {offset}: {reason}", path.display())]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error("ledger index {}: {reason}", path.display())]
    Index { path: PathBuf, reason: String },
    #[error("invalid ledger store configuration: {0}")]
    Config(String),
    #[error("invalid entry id {entry} for ledger {ledger}")]
    InvalidEntryId { ledger: i64, entry: i64 },
    #[error("ledger store refuses writes after an earlier failure ({0}); restart the bookie")]
    Poisoned(String),
    /// A put waited for write-cache room and the flush that should have made it failed.
    #[error("write cache full and the flush meant to free it failed: {0}")]
    WriteCacheFull(String),
    /// Another process (or another store in this one) has the directory open: its
    /// `LOCK` file is locked.
    #[error("directory {} is in use by another bookie (its LOCK file is locked); stop that one first", dir.display())]
    DirInUse { dir: PathBuf },
    /// The index is missing or empty while the store held data (see
    /// `check_index_not_lost`).
    #[error(
        "index directory {} holds no index, yet {evidence}: the index was lost or moved, and an \
         empty one would answer \"no such entry\" for acknowledged entries; restore the index \
         directory or fix index_dir in the configuration",
        dir.display()
    )]
    IndexMissing { dir: PathBuf, evidence: String },
}

/// Builds the error for a failed file operation: a failed sync `SyncFailed` (also one
/// that reports a full disk: ext4 says ENOSPC from an fsync whose delayed writes found no
/// room, and those pages may be lost, so it poisons like any failed sync), a full disk
/// `NoSpace` naming `dir`, anything else `Io` naming the file and offset.
pub(crate) fn io_error(
    op: &'static str,
    dir: &Path,
    path: &Path,
    offset: Option<u64>,
    e: io::Error,
) -> LedgerStoreError {
    if op.starts_with("sync") {
        LedgerStoreError::SyncFailed {
            path: path.to_path_buf(),
            source: e,
        }
    } else if e.kind() == io::ErrorKind::StorageFull {
        LedgerStoreError::NoSpace {
            dir: dir.to_path_buf(),
            source: e,
        }
    } else {
        LedgerStoreError::Io {
            op,
            path: path.to_path_buf(),
            offset,
            source: e,
        }
    }
}

/// Refuses to create a fresh index when the store held data: an index directory that was
/// lost or moved would otherwise come back empty, and the bookie would answer "no such
/// entry" for entries it acknowledged (invariant 5). The data is shown by an entry log in a
/// ledger directory (written only by a flush, which the index commit follows) or by a
/// journal mark (moved only after a flush, and the journal before it may be deleted). With
/// neither, nothing was ever flushed and replaying the whole journal rebuilds the index.
fn check_index_not_lost(
    env: &Env,
    config: &LedgerStoreConfig,
    logs: &EntryLogs,
    index_dir: &Path,
) -> Result<(), LedgerStoreError> {
    // A zero-length file is what a crash during its creation leaves.
    let file = index_dir.join(crate::index::INDEX_FILE);
    let fresh = !env.fs.exists(&file)
        || env
            .fs
            .open(&file, folio_env::OpenOptions::read())
            .and_then(|f| f.len())
            .map_or(true, |len| len == 0);
    if !fresh {
        return Ok(());
    }
    let evidence = if let Some(id) = logs.log_ids().first() {
        let path = logs.path_of(*id).unwrap_or_default();
        Some(format!(
            "the ledger directories hold {} entry log(s) (such as {})",
            logs.log_ids().len(),
            path.display()
        ))
    } else {
        let mut found = None;
        for d in &config.journal_dirs {
            let current = d.join("current");
            // A mark that cannot be read is the journal's to report, when it replays.
            if let Ok(mark) = crate::journal::read_mark(&*env.fs, &current)
                && mark.file_id > 0
            {
                found = Some(format!(
                    "journal directory {} has a checkpoint mark (file {}, offset {}), so \
                     data was flushed into the ledger store",
                    d.display(),
                    mark.file_id,
                    mark.offset
                ));
                break;
            }
        }
        found
    };
    match evidence {
        None => Ok(()),
        Some(evidence) => Err(LedgerStoreError::IndexMissing {
            dir: config.index_dir.clone(),
            evidence,
        }),
    }
}

/// Called when a put has to wait for room in the write cache. It must not flush on the
/// calling thread (the put holds no lock while calling it, but it is the journal's
/// completion thread); it should wake whatever runs checkpoints.
pub type FlushRequester = Arc<dyn Fn() + Send + Sync>;

/// In-memory state changed by puts and sets, under one mutex so that a flush takes a
/// consistent cut of the cache and the ledger infos.
struct State {
    cache: WriteCache,
    ledgers: IdHashMap<i64, LedgerInfo>,
    /// Ledgers whose info changed since the last flush. A put alone marks only a new
    /// ledger: the `last_entry_id` a flush writes is not rewritten for every later put
    /// (at 10,000 ledgers written at once that was a sixth of a checkpoint's work), so
    /// the index's own entries complete it ([`LedgerStore::learn_last_entry`]).
    dirty: BTreeSet<i64>,
    /// Ledgers whose `last_entry_id` here is known to be at least the index's last entry
    /// of them (looked up once since open).
    last_known: IdHashSet<i64>,
    /// Ledgers deleted since the last flush (their index entries are still there).
    deleted_pending: BTreeSet<i64>,
    poisoned: Option<String>,
    /// Failed flushes so far, and the last one's error: a put waiting for room gives up
    /// (with that error) when a flush fails, instead of blocking forever.
    flush_failures: u64,
    last_flush_error: String,
}

/// What [`LedgerStore::find_in_memory`] found.
enum InMemory {
    Absent,
    Found(Bytes),
    /// Not in memory: `entry` (resolved from -1) is in the index, or nowhere, as the
    /// write cache stood after `flushes` flushes.
    OnDisk {
        entry: i64,
        flushes: u64,
    },
}

/// Entry logs + ledger index + write cache. `Send + Sync`; all methods take `&self`.
pub struct LedgerStore {
    logs: EntryLogs,
    index: LedgerIndex,
    state: Mutex<State>,
    /// Signalled when a flush or delete frees cache room.
    room: Condvar,
    /// One flush at a time; compaction holds it while it commits moved entries.
    flush_lock: Mutex<()>,
    /// One compaction at a time.
    compaction_lock: Mutex<()>,
    /// Test seam: runs inside `flush` after the entry logs are synced, before the index
    /// commit (the flush lock held), to interleave other work with a flush there.
    #[cfg(test)]
    pub(crate) before_index_commit: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
    /// Test seam: runs inside `get_entry` between the index lookup and the entry log read.
    #[cfg(test)]
    pub(crate) before_log_read: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
    flush_requester: RwLock<Option<FlushRequester>>,
    /// The write cache's `unflushed()` and `used()`, mirrored after every change under the
    /// state lock (`mirror_cache`), so that the checks around each add (is a checkpoint
    /// due? would the put wait?) take no lock.
    unflushed: std::sync::atomic::AtomicU64,
    used: std::sync::atomic::AtomicU64,
    /// The write cache's bound (fixed at open).
    cache_limit: u64,
    /// What garbage collection remembers of finished entry logs.
    gc: gc::GcCache,
    /// Entries read ahead of catch-up readers, and how far to read ahead. `read_ahead`
    /// is the bound's being non-zero, fixed at open: with it off (the default) neither
    /// the add path nor the read path takes the cache's lock.
    read_cache: Mutex<ReadCache>,
    read_ahead: bool,
    read_ahead_batch_size: usize,
    read_ahead_batch_bytes: usize,
    /// Runs being read ahead from the disk, which reads inside them wait for.
    runs_in_flight: read_ahead::RunsInFlight,
    /// Negative control (`NegativeControls::index_before_entry_log_sync`).
    index_first_for_tests: std::sync::atomic::AtomicBool,
    /// Negative control (`LedgerStoreConfig::skip_last_entry_lookup_for_tests`).
    skip_last_entry_lookup_for_tests: bool,
    /// `LedgerStoreConfig::index_commit_flushes`, at least 1.
    index_commit_flushes: usize,
    /// Each ledger directory's and the index directory's `LOCK` (dropped last).
    _locks: Vec<folio_env::FileLock>,
}

impl LedgerStore {
    /// Opens the store, creating its directories if needed.
    pub fn open(env: &Env, config: LedgerStoreConfig) -> Result<Self, LedgerStoreError> {
        if config.entry_log_per_ledger {
            Self::open_with_placement(env, config, Box::new(PerLedgerEntryLog))
        } else {
            Self::open_with_placement(env, config, Box::new(SharedEntryLog))
        }
    }

    /// Opens the store with a given entry log placement.
    pub fn open_with_placement(
        env: &Env,
        config: LedgerStoreConfig,
        placement: Box<dyn EntryLogPlacement>,
    ) -> Result<Self, LedgerStoreError> {
        if config.entry_log_size_limit <= crate::entry_log::format::HEADER_LEN as u64 {
            return Err(LedgerStoreError::Config(format!(
                "entry_log_size_limit {} is not larger than the entry log header",
                config.entry_log_size_limit
            )));
        }
        if config.entry_log_per_ledger && config.max_active_entry_logs == 0 {
            return Err(LedgerStoreError::Config(
                "max_active_entry_logs must be positive with an entry log per ledger".into(),
            ));
        }
        if config.write_cache_bytes == 0 {
            return Err(LedgerStoreError::Config(
                "write_cache_bytes must be positive".into(),
            ));
        }
        // Lock every directory before reading any (a directory configured twice is
        // reported by `EntryLogs::open`, not as in use).
        let mut lock_dirs: Vec<&PathBuf> = config.ledger_dirs.iter().collect();
        lock_dirs.push(&config.index_dir);
        lock_dirs.sort();
        lock_dirs.dedup();
        let mut locks = Vec::new();
        for d in lock_dirs {
            let lock = crate::dir_lock::lock_dir(&*env.fs, d, crate::dir_lock::LOCK_FILE).map_err(
                |e| match e {
                    crate::dir_lock::LockError::InUse(dir) => LedgerStoreError::DirInUse { dir },
                    crate::dir_lock::LockError::Io(op, path, e) => {
                        io_error(op, &path, &path, None, e)
                    }
                },
            )?;
            locks.push(lock);
        }
        let per_ledger = config.entry_log_per_ledger.then(|| PerLedgerConfig {
            max_active_logs: config.max_active_entry_logs,
            access_expiry: config.entry_log_access_expiry,
            clock: env.clock.clone(),
        });
        let logs = EntryLogs::open(
            env.fs.clone(),
            &config.ledger_dirs,
            config.entry_log_size_limit,
            placement,
            per_ledger,
        )?
        .with_direct_io(config.entry_log_direct_io);
        let index_dir = config.index_dir.join("current");
        check_index_not_lost(env, &config, &logs, &index_dir)?;
        env.fs
            .create_dir_all(&index_dir)
            .map_err(|e| io_error("create directory", &index_dir, &index_dir, None, e))?;
        let index = LedgerIndex::open_with_cache(&*env.fs, &index_dir, config.index_cache_bytes)?;
        let ledgers = index.ledger_infos()?.into_iter().collect();
        let read_cache = ReadCache::new(config.read_ahead_cache_bytes);
        Ok(LedgerStore {
            logs,
            index,
            state: Mutex::new(State {
                cache: WriteCache::new(config.write_cache_bytes),
                ledgers,
                dirty: BTreeSet::new(),
                last_known: IdHashSet::default(),
                deleted_pending: BTreeSet::new(),
                poisoned: None,
                flush_failures: 0,
                last_flush_error: String::new(),
            }),
            room: Condvar::new(),
            flush_lock: Mutex::new(()),
            compaction_lock: Mutex::new(()),
            #[cfg(test)]
            before_index_commit: Mutex::new(None),
            #[cfg(test)]
            before_log_read: Mutex::new(None),
            flush_requester: RwLock::new(None),
            unflushed: std::sync::atomic::AtomicU64::new(0),
            used: std::sync::atomic::AtomicU64::new(0),
            cache_limit: config.write_cache_bytes,
            gc: gc::GcCache::default(),
            read_ahead: read_cache.enabled(),
            read_cache: Mutex::new(read_cache),
            read_ahead_batch_size: config.read_ahead_batch_size,
            read_ahead_batch_bytes: config.read_ahead_batch_bytes,
            runs_in_flight: read_ahead::RunsInFlight::default(),
            index_first_for_tests: std::sync::atomic::AtomicBool::new(false),
            skip_last_entry_lookup_for_tests: config.skip_last_entry_lookup_for_tests,
            index_commit_flushes: config.index_commit_flushes.max(1),
            _locks: locks,
        })
    }

    /// Sets the store's negative controls (see [`crate::negative`]); never outside a test.
    #[doc(hidden)]
    pub fn set_negative_controls_for_tests(&self, c: crate::NegativeControls) {
        use std::sync::atomic::Ordering::Relaxed;
        self.logs
            .skip_sync_for_tests
            .store(c.skip_entry_log_sync, Relaxed);
        self.logs
            .skip_rotation_sync_for_tests
            .store(c.skip_rotated_entry_log_sync, Relaxed);
        self.index_first_for_tests
            .store(c.index_before_entry_log_sync, Relaxed);
    }

    /// Whether the index is committed before the entry logs are synced (a negative
    /// control; false in every real run).
    pub(crate) fn index_first_for_tests(&self) -> bool {
        self.index_first_for_tests
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sets the callback a put runs when it must wait for room (see [`FlushRequester`]).
    pub fn set_flush_requester(&self, requester: FlushRequester) {
        *self.flush_requester.write() = Some(requester);
    }

    fn check_poisoned(st: &State) -> Result<(), LedgerStoreError> {
        match &st.poisoned {
            Some(why) => Err(LedgerStoreError::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// Stores an entry (the whole "entry with digest" bytes, opaque). Readable at once,
    /// durable after the next [`LedgerStore::flush`]. Putting the same entry again (journal
    /// replay) replaces it. Entries of a deleted ledger are dropped. Blocks while the
    /// write cache is full, until a flush (or a delete) frees room; if a flush fails
    /// meanwhile, returns `WriteCacheFull` with that flush's error.
    pub fn put_entry(&self, ledger: i64, entry: i64, data: Bytes) -> Result<(), LedgerStoreError> {
        self.put_entry_crc(ledger, entry, data).map(drop)
    }

    /// [`LedgerStore::put_entry`], returning the entry's record checksum
    /// (`entry_log::format::payload_record_crc`) if it was computed on the way (see
    /// `write_cache::record_crc_at_put`; `None` also for an entry dropped, a deleted
    /// ledger's).
    pub fn put_entry_crc(
        &self,
        ledger: i64,
        entry: i64,
        data: Bytes,
    ) -> Result<Option<u32>, LedgerStoreError> {
        if entry < 0 {
            return Err(LedgerStoreError::InvalidEntryId { ledger, entry });
        }
        let len = data.len() as u64;
        // Outside the lock, which every put of the bookie takes.
        let crc = crate::write_cache::record_crc_at_put(ledger, entry, &data);
        let mut st = self.state.lock();
        let mut asked = false;
        let mut waited_since = None;
        let failures_before = st.flush_failures;
        loop {
            Self::check_poisoned(&st)?;
            if st.flush_failures != failures_before {
                crate::bk_stats::write_rejected(waited_since);
                return Err(LedgerStoreError::WriteCacheFull(
                    st.last_flush_error.clone(),
                ));
            }
            if st.ledgers.get(&ledger).is_some_and(|i| i.deleted) {
                tracing::debug!(ledger, entry, "dropping a put to a deleted ledger");
                return Ok(None);
            }
            if st.cache.has_room(len) {
                break;
            }
            waited_since.get_or_insert_with(std::time::Instant::now);
            let requester = self.flush_requester.read().clone();
            match requester {
                Some(f) if !asked => {
                    asked = true;
                    MutexGuard::unlocked(&mut st, || f());
                }
                _ => self.room.wait(&mut st),
            }
        }
        if let Some(t) = waited_since {
            crate::bk_stats::write_throttled(t);
            tracing::debug!(
                ledger,
                entry,
                waited_ms = t.elapsed().as_secs_f64() * 1e3,
                "put waited for write cache room"
            );
        }
        st.cache.insert(ledger, entry, data, crc);
        if self.read_ahead {
            self.read_cache.lock().remove(ledger, entry);
        }
        self.mirror_cache(&st);
        let st = &mut *st;
        match st.ledgers.entry(ledger) {
            std::collections::hash_map::Entry::Occupied(mut o) => {
                let info = o.get_mut();
                info.last_entry_id = info.last_entry_id.max(Some(entry));
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(LedgerInfo {
                    last_entry_id: Some(entry),
                    ..LedgerInfo::default()
                });
                st.dirty.insert(ledger);
            }
        }
        Ok(crc)
    }

    /// Where a read finds an entry before going to the index: absent, in memory, or
    /// (with the entry id resolved and the write cache's flush count seen) on disk.
    fn find_in_memory(&self, ledger: i64, entry: i64) -> Result<InMemory, LedgerStoreError> {
        if entry < -1 {
            return Err(LedgerStoreError::InvalidEntryId { ledger, entry });
        }
        if entry == -1 {
            self.learn_last_entry(ledger)?;
        }
        let (entry, flushes) = {
            let st = self.state.lock();
            let Some(info) = st.ledgers.get(&ledger) else {
                return Ok(InMemory::Absent);
            };
            if info.deleted {
                return Ok(InMemory::Absent);
            }
            let entry = if entry == -1 {
                match info.last_entry_id {
                    Some(last) => last,
                    None => return Ok(InMemory::Absent),
                }
            } else {
                entry
            };
            if let Some(data) = st.cache.get(ledger, entry) {
                return Ok(InMemory::Found(data));
            }
            (entry, st.cache.flushes())
        };
        // Checked after the deletion check above; `delete_ledger` empties it of the
        // ledger under the state lock.
        if self.read_ahead
            && let Some(data) = self.read_cache.lock().get(ledger, entry)
        {
            return Ok(InMemory::Found(data));
        }
        Ok(InMemory::OnDisk { entry, flushes })
    }

    /// [`LedgerStore::get_entry`] only if it cannot wait for the disk: the entry is in
    /// the write cache or the read-ahead cache, or the entry log's bytes are in the page
    /// cache (with read-ahead, the run after the entry too, which goes to the read-ahead
    /// cache). `None` when the read would block, and also when the entry is absent or the
    /// read would fail: the blocking path then answers, with its error. The index lookup
    /// is made here: redb keeps the pages it reads in its own cache, and the index file is
    /// small next to the entry logs.
    pub fn get_entry_nowait(&self, ledger: i64, entry: i64) -> Option<Bytes> {
        match self.find_in_memory(ledger, entry).ok()? {
            InMemory::Found(data) => Some(data),
            InMemory::Absent => None,
            InMemory::OnDisk { entry, flushes } => {
                let loc = self.index.get(ledger, entry).ok()??;
                let data = if self.read_ahead {
                    self.read_run_nowait(loc, ledger, entry, flushes)
                } else {
                    self.logs.read_nowait(loc, ledger, entry)
                }?;
                self.read_cache.lock().note_miss();
                Some(data)
            }
        }
    }

    /// Reads an entry; `entry == -1` means the last entry stored. `Ok(None)` only when
    /// the entry is absent; a failed or corrupt read is `Err`.
    pub fn get_entry(&self, ledger: i64, entry: i64) -> Result<Option<Bytes>, LedgerStoreError> {
        let (entry, flushes) = match self.find_in_memory(ledger, entry)? {
            InMemory::Found(data) => return Ok(Some(data)),
            InMemory::Absent => return Ok(None),
            InMemory::OnDisk { entry, flushes } => (entry, flushes),
        };
        let read_ahead = self.read_ahead;
        if read_ahead && let Some(data) = self.wait_for_run(ledger, entry)? {
            return Ok(Some(data));
        }
        // The flush that removed the entry from the cache committed the index first.
        let found = self.index.get(ledger, entry)?;
        #[cfg(test)]
        if let Some(f) = &*self.before_log_read.lock() {
            f();
        }
        if found.is_some() {
            self.read_cache.lock().note_miss();
        }
        match found {
            None => Ok(None),
            Some(loc) => match self.read_from_log(loc, ledger, entry, read_ahead, flushes) {
                Ok(data) => Ok(Some(data)),
                // Compaction may have moved the entry and removed its old log between
                // the lookup and the read: the index then has the new location.
                Err(e) => match self.index.get(ledger, entry)? {
                    Some(moved) if moved != loc => self.logs.read(moved, ledger, entry).map(Some),
                    // Or the ledger was deleted meanwhile and garbage collection removed
                    // the log: the entry is gone, which is not an error of the disk.
                    None if self
                        .state
                        .lock()
                        .ledgers
                        .get(&ledger)
                        .is_some_and(|i| i.deleted) =>
                    {
                        Ok(None)
                    }
                    _ => Err(e),
                },
            },
        }
    }

    /// Reads the entry at `loc`, and with `read_ahead` the run of the ledger's next
    /// entries after it, which go to the read cache (see `read_ahead.rs`).
    fn read_from_log(
        &self,
        loc: Location,
        ledger: i64,
        entry: i64,
        read_ahead: bool,
        flushes: u64,
    ) -> Result<Bytes, LedgerStoreError> {
        if read_ahead {
            self.read_run_blocking(loc, ledger, entry, flushes)
        } else {
            self.logs.read(loc, ledger, entry)
        }
    }

    /// Reads served by the read-ahead cache since the store opened.
    pub fn read_ahead_hits(&self) -> u64 {
        self.read_cache.lock().hits()
    }

    /// The read-ahead cache's figures (for metrics).
    pub fn read_cache_stats(&self) -> crate::read_cache::ReadCacheStats {
        self.read_cache.lock().stats()
    }

    /// The ledger's state, if the store knows the ledger (a deleted one included).
    pub fn ledger_info(&self, ledger: i64) -> Result<Option<LedgerInfo>, LedgerStoreError> {
        self.learn_last_entry(ledger)?;
        Ok(self.info_as_held(ledger))
    }

    /// The ledger's state as held in memory, its `last_entry_id` possibly below the last
    /// entry (see [`LedgerStore::learn_last_entry`]): for what needs only its fence, keys
    /// and deletion, without a lookup of the index.
    pub(crate) fn info_as_held(&self, ledger: i64) -> Option<LedgerInfo> {
        self.state.lock().ledgers.get(&ledger).cloned()
    }

    /// Raises `ledger`'s `last_entry_id` in memory to the index's last entry of it, once
    /// per ledger since open. The info's value on disk may be older than the entries the
    /// index has (a flush rewrites the info only when more than it changed), and after a
    /// restart the journal's replay raises it only for the entries it replays. The maximum
    /// of the two is the ledger's last entry: the index holds only entries that were put,
    /// and every put since open raised the value in memory. The read of entry -1 (a
    /// reader's or a recovery's last entry) depends on it.
    fn learn_last_entry(&self, ledger: i64) -> Result<(), LedgerStoreError> {
        {
            let st = self.state.lock();
            if !st.ledgers.contains_key(&ledger) || st.last_known.contains(&ledger) {
                return Ok(());
            }
        }
        if self.skip_last_entry_lookup_for_tests {
            // The negative control: the info's stored value, as if it were the last entry.
            self.state.lock().last_known.insert(ledger);
            return Ok(());
        }
        let last = self.index.last_entry(ledger)?;
        let mut st = self.state.lock();
        if let Some(info) = st.ledgers.get_mut(&ledger) {
            info.last_entry_id = info.last_entry_id.max(last);
        }
        st.last_known.insert(ledger);
        Ok(())
    }

    fn update_info(
        &self,
        ledger: i64,
        f: impl FnOnce(&mut LedgerInfo),
    ) -> Result<(), LedgerStoreError> {
        let mut st = self.state.lock();
        Self::check_poisoned(&st)?;
        f(st.ledgers.entry(ledger).or_default());
        st.dirty.insert(ledger);
        Ok(())
    }

    pub fn set_master_key(&self, ledger: i64, key: Bytes) -> Result<(), LedgerStoreError> {
        self.update_info(ledger, |i| i.master_key = Some(key))
    }

    pub fn set_fenced(&self, ledger: i64) -> Result<(), LedgerStoreError> {
        self.update_info(ledger, |i| i.fenced = true)
    }

    pub fn set_explicit_lac(&self, ledger: i64, body: Bytes) -> Result<(), LedgerStoreError> {
        self.update_info(ledger, |i| i.explicit_lac = Some(body))
    }

    /// Marks the ledger deleted: its entries become unreadable at once and leave the
    /// index at the next flush; its info stays, marked deleted. (Their bytes in the entry
    /// logs are reclaimed by garbage collection, using the logs' ledgers maps.)
    pub fn delete_ledger(&self, ledger: i64) -> Result<(), LedgerStoreError> {
        let mut st = self.state.lock();
        Self::check_poisoned(&st)?;
        st.ledgers.entry(ledger).or_default().deleted = true;
        st.cache.remove_ledger(ledger);
        if self.read_ahead {
            self.read_cache.lock().remove_ledger(ledger);
        }
        self.mirror_cache(&st);
        st.dirty.insert(ledger);
        st.deleted_pending.insert(ledger);
        self.room.notify_all();
        drop(st);
        // With a log per ledger, the deleted ledger's open log rotates at the next flush,
        // so the garbage collection after it can remove it whole.
        self.logs.mark_write_closed(ledger);
        Ok(())
    }

    /// Entry ids held for a ledger, ascending (for GetListOfEntriesOfLedger).
    pub fn entry_ids(&self, ledger: i64) -> Result<Vec<i64>, LedgerStoreError> {
        let cached = {
            let st = self.state.lock();
            match st.ledgers.get(&ledger) {
                Some(i) if !i.deleted => st.cache.entry_ids(ledger),
                _ => return Ok(Vec::new()),
            }
        };
        let mut ids = self.index.entry_ids(ledger)?;
        ids.extend(cached);
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// The ledgers the store holds (not deleted), ascending.
    pub fn ledgers(&self) -> Result<Vec<i64>, LedgerStoreError> {
        let st = self.state.lock();
        let mut ids: Vec<i64> = st
            .ledgers
            .iter()
            .filter(|(_, i)| !i.deleted)
            .map(|(&l, _)| l)
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// How many ledgers the store holds (not deleted).
    pub fn ledger_count(&self) -> u64 {
        self.state
            .lock()
            .ledgers
            .values()
            .filter(|i| !i.deleted)
            .count() as u64
    }

    /// How many entries the index holds (those only in the write cache not counted).
    pub fn entry_count(&self) -> Result<u64, LedgerStoreError> {
        self.index.entry_count()
    }

    /// Makes every put/set issued before this call durable (entry logs fdatasync'd, then
    /// the index committed durably, with any flush staged before), then releases the write
    /// cache memory they used.
    pub fn flush(&self) -> Result<(), LedgerStoreError> {
        self.flush_with(false).map(|_| ())
    }

    /// Releases the write cache memory of every put issued before this call as
    /// [`LedgerStore::flush`] does, but may only stage the index's part (the entry logs
    /// synced, the locations kept in memory and readable, see `index/staged.rs`): one
    /// flush in `index_commit_flushes` commits, with every one staged before it. Returns
    /// whether it committed, i.e. whether what was put before is now durable. A staged
    /// flush is not: whoever counts on it (the journal's mark, a ForceLedger) must wait
    /// for a flush that commits.
    pub fn flush_for_room(&self) -> Result<bool, LedgerStoreError> {
        self.flush_with(true)
    }

    /// Flushes for room per index commit, and the most locations staged, this flush being
    /// `entries`: more of both when it is sparse (see [`SPARSE_ENTRIES_PER_LEDGER`]),
    /// unless every flush is to commit.
    fn staging_bounds(&self, entries: &Generation) -> (usize, usize) {
        let sparse = entries.len() < SPARSE_ENTRIES_PER_LEDGER * entries.ledger_count();
        if sparse && self.index_commit_flushes > 1 {
            (
                self.index_commit_flushes * SPARSE_COMMIT_FACTOR,
                MAX_STAGED_LOCATIONS_SPARSE,
            )
        } else {
            (self.index_commit_flushes, MAX_STAGED_LOCATIONS)
        }
    }

    fn flush_with(&self, may_stage: bool) -> Result<bool, LedgerStoreError> {
        let _one_at_a_time = self.flush_lock.lock();
        let (entries, batch_ledgers, deleted) = {
            let mut st = self.state.lock();
            Self::check_poisoned(&st)?;
            let entries = st.cache.start_flush();
            self.mirror_cache(&st);
            let dirty = std::mem::take(&mut st.dirty);
            let ledgers: Vec<(i64, LedgerInfo)> = dirty
                .iter()
                .filter_map(|&l| Some((l, st.ledgers.get(&l)?.clone())))
                .collect();
            let deleted = std::mem::take(&mut st.deleted_pending);
            (entries, ledgers, deleted)
        };
        let (flushes, locations) = self.index.staged_flushes();
        let (commit_every, max_staged) = self.staging_bounds(&entries);
        let stage =
            may_stage && flushes + 1 < commit_every && locations + entries.len() <= max_staged;
        let started = std::time::Instant::now();
        let result = self.write_out(&entries, batch_ledgers.clone(), &deleted, stage);
        crate::bk_stats::flushed(&entries, started, result.is_ok());
        tracing::debug!(
            entries = entries.len(),
            flush_ms = started.elapsed().as_secs_f64() * 1e3,
            "ledger store flush"
        );
        // The write cache uses the flushed generation's chunks again only once nothing
        // holds them.
        drop(entries);
        let mut st = self.state.lock();
        match result {
            Ok(()) => {
                st.cache.finish_flush();
                self.mirror_cache(&st);
                self.room.notify_all();
                Ok(!stage)
            }
            Err(e) => {
                // Keep what was not committed for the next flush; the cache keeps the
                // flushing generation, so nothing becomes unreadable.
                st.dirty.extend(batch_ledgers.iter().map(|(l, _)| *l));
                st.deleted_pending.extend(deleted);
                if matches!(e, LedgerStoreError::SyncFailed { .. }) {
                    st.poisoned = Some(e.to_string());
                }
                st.flush_failures += 1;
                st.last_flush_error = e.to_string();
                self.room.notify_all();
                Err(e)
            }
        }
    }

    fn write_out(
        &self,
        entries: &Generation,
        ledgers: Vec<(i64, LedgerInfo)>,
        deleted: &BTreeSet<i64>,
        stage: bool,
    ) -> Result<(), LedgerStoreError> {
        if entries.is_empty()
            && ledgers.is_empty()
            && deleted.is_empty()
            && (stage || self.index.staged_flushes().0 == 0)
        {
            // Nothing to commit, but idle and write-closed logs still rotate (their
            // records were synced and committed by earlier flushes).
            return self.logs.rotate_idle_and_closed();
        }
        let mut locations = Vec::with_capacity(entries.len());
        for (i, (ledger, entry, data)) in entries.iter().enumerate() {
            if deleted.contains(&ledger) {
                continue;
            }
            if i % 64 == 0 {
                self.logs.set_direct_piece(self.direct_piece_now());
            }
            let crc = entries.record_crc(ledger, entry, data);
            locations.push((ledger, entry, self.logs.append(ledger, entry, data, crc)?));
        }
        // With a log per ledger: the logs of write-closed and idle ledgers rotate now,
        // after this flush's entries are in them and before the index points at them
        // (each rotation fdatasyncs its file).
        self.logs.rotate_idle_and_closed()?;
        let batch = IndexBatch {
            locations,
            ledgers,
            deleted: deleted.iter().copied().collect(),
        };
        if self.index_first_for_tests() {
            // The broken order of the negative control.
            self.index.commit(&batch)?;
            return self.logs.sync();
        }
        self.logs.sync()?;
        #[cfg(test)]
        if let Some(f) = &*self.before_index_commit.lock() {
            f();
        }
        if stage {
            return self.index.stage(batch);
        }
        self.index.commit(&batch)
    }

    /// Commits the flushes staged for the index, if any. The caller holds the flush lock:
    /// what it then decides from the index (which logs nothing points into, which
    /// deletions are committed) stays true until it releases it.
    fn commit_staged_index(&self) -> Result<(), LedgerStoreError> {
        if self.index.staged_flushes().0 > 0 {
            self.index.commit(&IndexBatch::default())?;
        }
        Ok(())
    }

    /// The pieces a flush writes its direct-I/O entry logs in: small while the write cache
    /// is at most half full, so that the journal's writes on the same disk wait behind less
    /// of the checkpoint; large once adds are filling it faster than the flush writes.
    fn direct_piece_now(&self) -> usize {
        let used = self.used.load(std::sync::atomic::Ordering::Relaxed);
        if used <= self.cache_limit / 2 {
            crate::entry_log::log_file::DIRECT_PIECE_WITH_ROOM
        } else {
            crate::entry_log::log_file::DIRECT_PIECE_CATCHING_UP
        }
    }

    /// Bytes currently held in the write cache (for metrics and flush triggering).
    pub fn write_cache_used(&self) -> u64 {
        self.state.lock().cache.used()
    }

    /// Flushes, then rotates the open entry logs so they get their ledgers maps. The
    /// store stays usable (new entries go to new logs).
    pub fn close(&self) -> Result<(), LedgerStoreError> {
        self.flush()?;
        let _one_at_a_time = self.flush_lock.lock();
        self.logs.close_all()
    }

    /// Whether a put of `len` bytes would wait for write-cache room now (a hint: the
    /// answer may be stale by the time the put runs).
    pub fn put_would_wait(&self, len: u64) -> bool {
        let used = self.used.load(std::sync::atomic::Ordering::Relaxed);
        !WriteCache::room_for(used, self.cache_limit, len)
    }

    /// Updates the lock-free mirror of the write cache's figures; called with the state
    /// lock held after every change to the cache.
    fn mirror_cache(&self, st: &State) {
        use std::sync::atomic::Ordering::Relaxed;
        self.unflushed.store(st.cache.unflushed(), Relaxed);
        self.used.store(st.cache.used(), Relaxed);
    }

    /// Bytes put since the last flush started (the write cache's active generation):
    /// what the next flush writes. A flush is due when this passes its threshold,
    /// whether or not one is running.
    pub fn unflushed_bytes(&self) -> u64 {
        self.unflushed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Ids of the entry log files, ascending (for garbage collection and tools).
    pub fn entry_log_ids(&self) -> Vec<u64> {
        self.logs.log_ids()
    }

    /// Bytes per ledger in entry log `log_id`, from its ledgers map; `Ok(None)` for a log
    /// that was not rotated (still open, or the bookie stopped before rotating it).
    pub fn entry_log_ledgers(
        &self,
        log_id: u64,
    ) -> Result<Option<Vec<(i64, u64)>>, LedgerStoreError> {
        self.logs.ledgers_map(log_id)
    }

    /// Bytes per ledger in entry log `log_id`, rebuilt by reading its records (for a log
    /// without a ledgers map; stops at a torn tail).
    pub fn scan_entry_log(
        &self,
        log_id: u64,
    ) -> Result<crate::entry_log::log_file::LogScan, LedgerStoreError> {
        self.logs.scan(log_id)
    }

    /// Asks for the ledger's entry log to be rotated at the next flush: BP-32's write
    /// close, also sent by a fence (no more entries expected). Nothing with a shared log;
    /// a later entry of the ledger simply opens a new log.
    pub fn mark_write_closed(&self, ledger: i64) {
        self.logs.mark_write_closed(ledger);
    }

    /// Whether each ledger has entry logs of its own (`entryLogPerLedgerEnabled`).
    pub fn entry_log_per_ledger(&self) -> bool {
        self.logs.per_ledger()
    }

    /// The entry logger's counters (BookKeeper's `entrylogger` scope).
    pub fn entry_log_stats(&self) -> &crate::entry_log::EntryLogStats {
        self.logs.stats()
    }

    /// The file of entry log `log_id`.
    pub fn entry_log_path(&self, log_id: u64) -> Option<PathBuf> {
        self.logs.path_of(log_id)
    }
}

#[cfg(test)]
mod per_ledger_tests;
#[cfg(test)]
mod tests;
