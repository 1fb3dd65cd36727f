//! Entry logs: large append-only files that hold entry payloads.
//!
//! Files live in `<ledgerDir>/current/` and are named by a log id unique across all
//! ledger directories. Each record names its ledger and entry and carries a CRC32C, so a
//! read verifies it got what the index promised. A log is rotated when it reaches the
//! size limit; at rotation the file gets a ledgers map (bytes per ledger) that garbage
//! collection will use. Which log an entry goes to is decided by an
//! [`EntryLogPlacement`]: all ledgers share one log (BookKeeper's default), or each
//! ledger has its own (`entryLogPerLedgerEnabled`, [`per_ledger`]: bounded in number,
//! rotated when idle, when evicted or when the ledger is write-closed). Every log file
//! is self-describing, so a store reads the logs of either mode whichever it runs in.
//!
//! Appends happen from `LedgerStore::flush` and from compaction (which copies live
//! entries of old logs, under the store's flush lock), reads from any thread. Only
//! compaction and garbage collection remove a log, and only one that is no longer written.

pub mod format;
pub mod log_file;
pub mod per_ledger;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use folio_env::{File, FileSystem, OpenOptions};
use parking_lot::{Mutex, RwLock};

pub use log_file::Location;
use log_file::LogWriter;
pub use per_ledger::{EntryLogStats, PerLedgerConfig, PerLedgerEntryLog};

use crate::ledger_store::{LedgerStoreError, io_error};

/// Identifies one open entry log being appended to. Entries mapped to the same slot go
/// to the same file.
pub type LogSlot = u64;

/// Decides which entry log an entry of a ledger is appended to.
pub trait EntryLogPlacement: Send + Sync {
    fn slot_for(&self, ledger: i64) -> LogSlot;
}

/// All ledgers share one entry log (BookKeeper's DefaultEntryLogger behaviour).
#[derive(Debug, Default, Clone, Copy)]
pub struct SharedEntryLog;

impl EntryLogPlacement for SharedEntryLog {
    fn slot_for(&self, _ledger: i64) -> LogSlot {
        0
    }
}

/// Read handles of logs no longer written are kept open up to this many; past it they
/// are all closed and reopened on demand. A log per ledger makes thousands of small
/// files, and a handle kept for each would exhaust the process's descriptors.
pub(crate) const MAX_CACHED_READ_HANDLES: usize = 512;

/// The entry log files of all ledger directories.
pub struct EntryLogs {
    fs: Arc<dyn FileSystem>,
    /// `<ledgerDir>/current` for each ledger directory.
    dirs: Vec<PathBuf>,
    size_limit: u64,
    placement: Box<dyn EntryLogPlacement>,
    /// Set with a log per ledger: how many may be open and when an idle one rotates.
    per_ledger: Option<PerLedgerConfig>,
    writers: Mutex<Writers>,
    /// Ledgers write-closed (BP-32) or fenced since the last flush: their logs rotate at
    /// the next one. Apart from `writers`, which a flush holds for long.
    write_closed: Mutex<std::collections::BTreeSet<i64>>,
    stats: EntryLogStats,
    /// Every known log file (open lazily), by log id.
    files: RwLock<HashMap<u64, LogFile>>,
    /// `dbStorage_directIOEntryLogger`: new logs are written with direct I/O; turned off
    /// for good (with a warning) when the file system refuses it.
    direct_io: std::sync::atomic::AtomicBool,
    /// The direct-I/O piece size appends use now ([`EntryLogs::set_direct_piece`]).
    direct_piece: std::sync::atomic::AtomicUsize,
    /// Negative control (`NegativeControls::skip_entry_log_sync`): `sync` writes the
    /// buffers but skips the fdatasync.
    pub(crate) skip_sync_for_tests: std::sync::atomic::AtomicBool,
    /// Negative control (`NegativeControls::skip_rotated_entry_log_sync`): a rotated log
    /// gets its ledgers map but no fdatasync.
    pub(crate) skip_rotation_sync_for_tests: std::sync::atomic::AtomicBool,
}

struct Writers {
    /// Ordered, so that syncs and rotations happen in one order: the simulator's disk
    /// operations (and its crash points) must not depend on a hash seed.
    current: BTreeMap<LogSlot, LogWriter>,
    next_log_id: u64,
    /// With a log per ledger: when each slot was last appended to, and how many logs it
    /// had in this run (see [`per_ledger`]).
    recent: HashMap<LogSlot, per_ledger::Recent>,
}

#[derive(Clone)]
struct LogFile {
    path: PathBuf,
    handle: Option<Arc<dyn File>>,
    /// Being appended to (its handle is the writer's and stays cached).
    writing: bool,
}

impl EntryLogs {
    /// Opens (creating `current/` if needed) the entry log directories. Existing files
    /// stay readable; new records always go to new files, so a file with a torn tail
    /// from a crash is never appended to.
    pub fn open(
        fs: Arc<dyn FileSystem>,
        ledger_dirs: &[PathBuf],
        size_limit: u64,
        placement: Box<dyn EntryLogPlacement>,
        per_ledger: Option<PerLedgerConfig>,
    ) -> Result<EntryLogs, LedgerStoreError> {
        if ledger_dirs.is_empty() {
            return Err(LedgerStoreError::Config("no ledger directories".into()));
        }
        for (i, d) in ledger_dirs.iter().enumerate() {
            if ledger_dirs[..i].contains(d) {
                return Err(LedgerStoreError::Config(format!(
                    "ledger directory {} is configured twice",
                    d.display()
                )));
            }
        }
        let mut dirs = Vec::new();
        let mut files = HashMap::new();
        let mut max_id = None;
        for d in ledger_dirs {
            let cur = d.join("current");
            fs.create_dir_all(&cur)
                .map_err(|e| io_error("create directory", &cur, &cur, None, e))?;
            let names = fs
                .list_dir(&cur)
                .map_err(|e| io_error("list directory", &cur, &cur, None, e))?;
            for name in names {
                let Some(id) = log_file::parse_file_name(&name) else {
                    continue;
                };
                let path = cur.join(&name);
                let file = LogFile {
                    path,
                    handle: None,
                    writing: false,
                };
                if let Some(other) = files.insert(id, file) {
                    return Err(LedgerStoreError::Config(format!(
                        "entry log {id:x} exists twice: {} and {}",
                        other.path.display(),
                        cur.join(&name).display()
                    )));
                }
                max_id = max_id.max(Some(id));
            }
            dirs.push(cur);
        }
        Ok(EntryLogs {
            fs,
            dirs,
            size_limit,
            placement,
            per_ledger,
            writers: Mutex::new(Writers {
                current: BTreeMap::new(),
                next_log_id: max_id.map_or(0, |m| m + 1),
                recent: HashMap::new(),
            }),
            write_closed: Mutex::new(Default::default()),
            stats: EntryLogStats::default(),
            files: RwLock::new(files),
            direct_io: std::sync::atomic::AtomicBool::new(false),
            direct_piece: std::sync::atomic::AtomicUsize::new(log_file::DIRECT_PIECE_CATCHING_UP),
            skip_sync_for_tests: std::sync::atomic::AtomicBool::new(false),
            skip_rotation_sync_for_tests: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Writes new logs' records with direct I/O (`dbStorage_directIOEntryLogger`), where
    /// the file system has it.
    pub fn with_direct_io(self, on: bool) -> Self {
        self.direct_io
            .store(on, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// Buffers a record for `ledger`/`entry`, rotating the slot's log first if the record
    /// would take it past the size limit. Not durable until [`EntryLogs::sync`]. A large
    /// payload is kept (not copied) until the log's next write. `crc` is the record's
    /// checksum ([`format::payload_record_crc`]), which the caller may have at hand.
    pub fn append(
        &self,
        ledger: i64,
        entry: i64,
        payload: &Bytes,
        crc: u32,
    ) -> Result<Location, LedgerStoreError> {
        let slot = self.placement.slot_for(ledger);
        let record_len = (format::RECORD_HEADER_LEN + payload.len()) as u64;
        let mut w = self.writers.lock();
        let full = w
            .current
            .get(&slot)
            // A record larger than the limit still goes into a file of its own.
            .is_some_and(|cur| cur.records() > 0 && cur.end() + record_len > self.size_limit);
        if full {
            let old = w.current.remove(&slot).expect("checked above");
            self.retire(old)?;
        }
        if !w.current.contains_key(&slot) {
            if let Some(pl) = &self.per_ledger {
                self.evict_for_new_log(&mut w, pl)?;
            }
            let id = w.next_log_id;
            // Never reuse an id, even if creating the file fails half way (a retry must
            // not trip over a file left behind).
            w.next_log_id += 1;
            let dir = self.dir_for_new_log(&w, id);
            let direct = self.direct_io.load(std::sync::atomic::Ordering::Relaxed);
            let writer = LogWriter::create(&*self.fs, dir, id, direct)?;
            if direct && !writer.is_direct() {
                self.direct_io
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(
                    dir = %dir.display(),
                    "entry log direct I/O unavailable, writing through the page cache"
                );
            }
            self.files.write().insert(
                id,
                LogFile {
                    path: writer.path().to_path_buf(),
                    handle: Some(writer.file()),
                    writing: true,
                },
            );
            w.current.insert(slot, writer);
            if self.per_ledger.is_some() {
                self.note_new_log(&mut w, slot);
            }
        }
        if let Some(pl) = &self.per_ledger {
            let now = pl.clock.now();
            w.recent.entry(slot).or_default().last_access = Some(now);
        }
        let writer = w.current.get_mut(&slot).expect("inserted above");
        writer.set_direct_piece(self.direct_piece.load(std::sync::atomic::Ordering::Relaxed));
        writer.append_shared(ledger, entry, payload, crc)
    }

    /// Sets the size of the pieces direct-I/O appends are written in from now on: smaller
    /// while the write cache has room, so that the journal on the same disk waits less
    /// behind a checkpoint (see `log_file::DIRECT_PIECE_WITH_ROOM`).
    pub fn set_direct_piece(&self, bytes: usize) {
        self.direct_piece
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// The directory for new log `id`: the one with the fewest logs being written
    /// (BookKeeper's rule with a log per ledger), ties going round-robin by id (so a
    /// single shared log still spreads its successive files over the directories).
    fn dir_for_new_log(&self, w: &Writers, id: u64) -> &std::path::Path {
        let n = self.dirs.len();
        let start = (id % n as u64) as usize;
        (0..n)
            .map(|k| &self.dirs[(start + k) % n])
            .min_by_key(|d| w.current.values().filter(|c| c.dir() == *d).count())
            .expect("at least one ledger directory")
    }

    /// Rotates a log that is no longer appended to: its ledgers map and an fdatasync
    /// (so a rotated log is durable before the index commit that follows in the same
    /// flush). Its handle is released when a log per ledger makes logs many.
    fn retire(&self, writer: LogWriter) -> Result<(), LedgerStoreError> {
        let id = writer.log_id();
        if let Some(f) = self.files.write().get_mut(&id) {
            f.writing = false;
            if self.per_ledger.is_some() {
                f.handle = None;
            }
        }
        let skip = self
            .skip_rotation_sync_for_tests
            .load(std::sync::atomic::Ordering::Relaxed);
        writer.close_with(!skip)
    }

    /// Makes every record appended so far durable (rotated files were synced at close).
    pub fn sync(&self) -> Result<(), LedgerStoreError> {
        let skip = self
            .skip_sync_for_tests
            .load(std::sync::atomic::Ordering::Relaxed);
        let mut w = self.writers.lock();
        for writer in w.current.values_mut() {
            if skip {
                writer.write_buffer()?;
            } else {
                writer.sync()?;
            }
        }
        Ok(())
    }

    /// Rotates every open log now (writing its ledgers map), e.g. at shutdown.
    pub fn close_all(&self) -> Result<(), LedgerStoreError> {
        let mut w = self.writers.lock();
        for (_, writer) in std::mem::take(&mut w.current) {
            self.retire(writer)?;
        }
        Ok(())
    }

    fn file(&self, log_id: u64) -> Result<(PathBuf, Arc<dyn File>), LedgerStoreError> {
        let known = self.files.read().get(&log_id).cloned();
        let Some(lf) = known else {
            return Err(LedgerStoreError::Corrupt {
                path: self.dirs[0].join(log_file::file_name(log_id)),
                offset: 0,
                reason: "the index points into an entry log that does not exist".into(),
            });
        };
        if let Some(h) = lf.handle {
            return Ok((lf.path, h));
        }
        let dir = lf.path.parent().unwrap_or(&lf.path).to_path_buf();
        let h = self
            .fs
            .open(&lf.path, OpenOptions::read())
            .map_err(|e| io_error("open entry log", &dir, &lf.path, None, e))?;
        let mut files = self.files.write();
        let cached = files.values().filter(|f| f.handle.is_some()).count();
        if cached >= MAX_CACHED_READ_HANDLES {
            // Readers holding a handle keep their `Arc`; only the cache lets go.
            for f in files.values_mut().filter(|f| !f.writing) {
                f.handle = None;
            }
        }
        if let Some(f) = files.get_mut(&log_id) {
            f.handle = Some(h.clone());
        }
        Ok((lf.path, h))
    }

    /// Reads and verifies the record at `loc`, which the index says is `ledger`/`entry`.
    pub fn read(&self, loc: Location, ledger: i64, entry: i64) -> Result<Bytes, LedgerStoreError> {
        let (path, file) = self.file(loc.log_id)?;
        log_file::read_record(&*file, &path, loc, ledger, entry)
    }

    /// [`EntryLogs::read`] only if it needs neither the disk nor an `open`: the log's read
    /// handle is cached and the record is in the page cache. `None` otherwise, and on
    /// anything `read` would report as an error (see [`log_file::read_record_nowait`]).
    pub fn read_nowait(&self, loc: Location, ledger: i64, entry: i64) -> Option<Bytes> {
        let file = self.files.read().get(&loc.log_id)?.handle.clone()?;
        log_file::read_record_nowait(&*file, loc, ledger, entry)
    }

    /// Reads the record at `loc` and the run of `ledger`'s next entries that follow it
    /// in the same read (see [`log_file::read_run`]).
    pub fn read_run(
        &self,
        loc: Location,
        ledger: i64,
        entry: i64,
        max_bytes: usize,
        max_entries: usize,
    ) -> Result<(Bytes, Vec<log_file::RunEntry>), LedgerStoreError> {
        let (path, file) = self.file(loc.log_id)?;
        log_file::read_run(&*file, &path, loc, ledger, entry, max_bytes, max_entries)
    }

    /// [`EntryLogs::read_run`] only if it needs neither the disk nor an `open` (as
    /// [`EntryLogs::read_nowait`]); the run ends where the page cache's bytes do.
    pub fn read_run_nowait(
        &self,
        loc: Location,
        ledger: i64,
        entry: i64,
        max_bytes: usize,
        max_entries: usize,
    ) -> Option<(Bytes, Vec<log_file::RunEntry>)> {
        let file = self.files.read().get(&loc.log_id)?.handle.clone()?;
        log_file::read_run_nowait(&*file, loc, ledger, entry, max_bytes, max_entries)
    }

    /// The ledgers map of log `log_id`: `Ok(None)` if that log was not rotated.
    pub fn ledgers_map(&self, log_id: u64) -> Result<Option<Vec<(i64, u64)>>, LedgerStoreError> {
        let (path, file) = self.file(log_id)?;
        log_file::read_ledgers_map(&*file, &path)
    }

    /// Rebuilds log `log_id`'s per-ledger byte counts by reading its records (for a log
    /// without a ledgers map).
    pub fn scan(&self, log_id: u64) -> Result<log_file::LogScan, LedgerStoreError> {
        let (path, file) = self.file(log_id)?;
        log_file::scan_records(&*file, &path)
    }

    /// Ids of the entry log files that are not being written (rotated, or left by an
    /// earlier run), ascending. Taken under the writers' lock, so a log created
    /// concurrently is either listed as being written or not at all.
    pub fn rotated_log_ids(&self) -> Vec<u64> {
        let w = self.writers.lock();
        let files = self.files.read();
        let mut ids: Vec<u64> = files
            .keys()
            .filter(|id| !w.current.values().any(|c| c.log_id() == **id))
            .copied()
            .collect();
        ids.sort_unstable();
        ids
    }

    /// The length of log `log_id`'s file.
    pub fn file_len(&self, log_id: u64) -> Result<u64, LedgerStoreError> {
        let (path, file) = self.file(log_id)?;
        file.len().map_err(|e| {
            io_error(
                "stat entry log",
                path.parent().unwrap_or(path.as_path()),
                &path,
                None,
                e,
            )
        })
    }

    /// Removes log `log_id`'s file and syncs its directory; returns the file's length.
    /// The caller (compaction) has made sure the index points nowhere into it. A log
    /// still being written is refused.
    pub fn remove(&self, log_id: u64) -> Result<u64, LedgerStoreError> {
        let len = self.file_len(log_id)?;
        let lf = {
            let w = self.writers.lock();
            let mut files = self.files.write();
            let Some(lf) = files.get(&log_id).cloned() else {
                return Err(LedgerStoreError::Config(format!(
                    "entry log {log_id:x} is not known; nothing to remove"
                )));
            };
            if w.current.values().any(|c| c.log_id() == log_id) {
                return Err(io_error(
                    "remove entry log",
                    &lf.path,
                    &lf.path,
                    None,
                    std::io::Error::other("the log is still being written"),
                ));
            }
            // From here on a read of this log fails ("does not exist") and the reader
            // looks the entry up again (`LedgerStore::get_entry`); a reader that already
            // holds the handle still reads the unlinked file.
            files.remove(&log_id);
            lf
        };
        let dir = lf.path.parent().unwrap_or(&lf.path).to_path_buf();
        if let Err(e) = self.fs.remove_file(&lf.path) {
            self.files.write().insert(log_id, lf.clone());
            return Err(io_error("remove entry log", &dir, &lf.path, None, e));
        }
        self.fs
            .sync_dir(&dir)
            .map_err(|e| io_error("sync directory", &dir, &dir, None, e))?;
        Ok(len)
    }

    /// How many log files have a handle open now (the writers' and the cached readers').
    pub fn open_handles(&self) -> usize {
        self.files
            .read()
            .values()
            .filter(|f| f.handle.is_some())
            .count()
    }

    /// Ids of all entry log files, ascending.
    pub fn log_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.files.read().keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Path of log `log_id`, if it exists.
    pub fn path_of(&self, log_id: u64) -> Option<PathBuf> {
        self.files.read().get(&log_id).map(|f| f.path.clone())
    }

    /// The entry log directories (`<ledgerDir>/current`).
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use folio_env::RealFileSystem;

    fn open(dirs: &[PathBuf], limit: u64) -> EntryLogs {
        EntryLogs::open(
            Arc::new(RealFileSystem),
            dirs,
            limit,
            Box::new(SharedEntryLog),
            None,
        )
        .unwrap()
    }

    #[test]
    fn rotation_writes_ledger_byte_counts() {
        let d = tempfile::tempdir().unwrap();
        let dirs = vec![d.path().to_path_buf()];
        let logs = open(&dirs, 300);
        let payload = Bytes::from(vec![7u8; 50]); // 74-byte records: three fit after the 64-byte header
        let mut locs = Vec::new();
        for e in 0..7 {
            let crc = format::payload_record_crc(e % 2, e, &payload);
            locs.push(logs.append(e % 2, e, &payload, crc).unwrap());
        }
        logs.sync().unwrap();
        let ids = logs.log_ids();
        assert_eq!(ids, vec![0, 1, 2]);
        let rec = (format::RECORD_HEADER_LEN + 50) as u64;
        // Log 0 holds entries 0,1,2 (ledgers 0,1,0); log 1 holds 3,4,5 (1,0,1).
        assert_eq!(
            logs.ledgers_map(0).unwrap(),
            Some(vec![(0, 2 * rec), (1, rec)])
        );
        assert_eq!(
            logs.ledgers_map(1).unwrap(),
            Some(vec![(0, rec), (1, 2 * rec)])
        );
        assert_eq!(logs.ledgers_map(2).unwrap(), None, "log 2 is still open");
        for (e, loc) in locs.iter().enumerate() {
            let e = e as i64;
            assert_eq!(logs.read(*loc, e % 2, e).unwrap(), &payload[..]);
        }
        logs.close_all().unwrap();
        assert_eq!(logs.ledgers_map(2).unwrap(), Some(vec![(0, rec)]));
    }

    #[test]
    fn reopen_continues_with_new_log_ids_across_dirs() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let dirs = vec![a.path().to_path_buf(), b.path().to_path_buf()];
        let loc = {
            let logs = open(&dirs, 1 << 20);
            let loc = logs
                .append(
                    1,
                    0,
                    &Bytes::from_static(b"x"),
                    format::payload_record_crc(1, 0, b"x"),
                )
                .unwrap();
            logs.sync().unwrap();
            loc
        };
        let logs = open(&dirs, 1 << 20);
        assert_eq!(logs.read(loc, 1, 0).unwrap(), &b"x"[..]);
        let loc2 = logs
            .append(
                1,
                1,
                &Bytes::from_static(b"y"),
                format::payload_record_crc(1, 1, b"y"),
            )
            .unwrap();
        assert_eq!(loc2.log_id, 1);
        logs.sync().unwrap();
        assert!(logs.path_of(1).unwrap().starts_with(b.path()));
        assert!(logs.path_of(0).unwrap().starts_with(a.path()));
    }

    #[test]
    fn a_missing_log_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        let logs = open(&[d.path().to_path_buf()], 1 << 20);
        let loc = Location {
            log_id: 9,
            offset: 64,
            len: 1,
        };
        let e = logs.read(loc, 1, 1).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
    }
}
