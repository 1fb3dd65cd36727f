//! The ledger index: where each entry is (ledger, entry -> entry log location) and the
//! per-ledger state (fenced, master key, explicit LAC, last entry, deleted).
//!
//! It is a redb database (a copy-on-write B-tree; see docs/formats/index.md for why redb
//! and not fjall, with benchmark figures), opened through [`backend::EnvFileBackend`] on
//! the `Env`'s `FileSystem`, so the simulated disk's crashes and faults reach the index as
//! they reach the journal and the entry logs. Every change is made by [`LedgerIndex::commit`],
//! one durable write transaction, which `LedgerStore::flush` calls after the entry logs
//! are synced, so the index never points at bytes that could vanish in a crash.

pub mod backend;
pub mod codec;
mod staged;
mod tails;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use folio_env::{FileSystem, OpenOptions};
use folio_types::IdHashMap;
use parking_lot::Mutex;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use codec::Block;
pub use codec::LedgerInfo;
use tails::{Lookup, Tails};

use crate::entry_log::Location;
use crate::ledger_store::LedgerStoreError;

/// (ledger, entry) -> location, one key per entry: format version 1, read only to
/// upgrade an index to version 2 (see [`upgrade_from_v1`]).
const ENTRIES_V1: TableDefinition<&[u8], &[u8]> = TableDefinition::new("entries");
/// (ledger, block) -> the locations of the block's entries ([`codec::Block`]): a flush
/// rewrites one value per 32 entries of a ledger instead of inserting one per entry (the
/// per-entry inserts were a sixth of a bookie's CPU under 1 KiB adds, docs/performance.md).
const ENTRY_BLOCKS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("entry_blocks");
/// "entries" -> how many entry locations `entry_blocks` holds (kept by each commit: the
/// table's own length counts blocks).
const COUNTS: TableDefinition<&str, u64> = TableDefinition::new("counts");
/// ledger -> encoded [`LedgerInfo`].
const LEDGERS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("ledgers");
/// entry log id (8 bytes, big-endian) -> nothing: logs out of which compaction has moved
/// entries but which are not yet removed. Their ledgers maps overstate what is live in
/// them, so compaction and garbage collection ask this index instead (see
/// `ledger_store/compaction.rs`). Added without a format version change: an older build
/// ignores the table.
const COMPACTED_LOGS: TableDefinition<&[u8], ()> = TableDefinition::new("compacted_logs");
/// "format_version" -> the index format version this file was written with.
const META: TableDefinition<&str, u32> = TableDefinition::new("meta");
/// The key of the entry count in `counts`.
const ENTRY_COUNT: &str = "entries";

/// The index format version (keys and values of the tables above).
pub const INDEX_FORMAT_VERSION: u32 = 2;
/// The file name of the index database inside the index directory.
pub const INDEX_FILE: &str = "ledger-index.redb";
/// Memory the index keeps of its pages by default: 16 MiB. redb's own default (1 GiB) let
/// a bookie's memory grow by about 1.3 MB a second under 100-byte adds (every location it
/// wrote stayed cached), 349 MB after 150 s against a plateau near 210 MB with 64 MiB. The
/// cached pages are copies of the index file's, which the OS page cache also holds, so a
/// miss costs a `pread` of a cached page: catch-up reads of 400,000 entries of 1 KiB were
/// level with 16 and 64 MiB, while after a side-by-side run's phases the 64 MiB were a
/// third of a bookie's RSS (docs/performance.md).
pub const DEFAULT_INDEX_CACHE_BYTES: u64 = 16 << 20;

/// The changes one flush makes to the index, committed atomically.
#[derive(Debug, Default)]
pub struct IndexBatch {
    pub locations: Vec<(i64, i64, Location)>,
    pub ledgers: Vec<(i64, LedgerInfo)>,
    /// Ledgers whose entry locations are removed (their info stays, marked deleted).
    pub deleted: Vec<i64>,
}

/// One entry moved by compaction: from one entry log location to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Relocation {
    pub ledger: i64,
    pub entry: i64,
    /// Where the index had the entry when compaction read it.
    pub from: Location,
    /// Where compaction wrote (and synced) its copy.
    pub to: Location,
}

/// The ledger index store.
pub struct LedgerIndex {
    db: Database,
    path: PathBuf,
    /// Held across each write transaction that changes `entry_blocks` (see [`Tails`]).
    write: Mutex<WriteState>,
    /// Flushes staged, not yet committed (see [`staged`]); every lookup sees them.
    staged: Mutex<staged::Staged>,
}

impl LedgerIndex {
    fn new(db: Database, path: PathBuf) -> LedgerIndex {
        LedgerIndex {
            db,
            path,
            write: Mutex::default(),
            staged: Mutex::default(),
        }
    }

    /// The staged batches now (cheap: a few `Arc`s).
    fn staged(&self) -> staged::Staged {
        self.staged.lock().clone()
    }

    /// Keeps `batch` (a flush whose entry logs are synced) for a later commit instead of
    /// committing it: from now on every lookup sees it, but it is not durable until
    /// [`LedgerIndex::commit`] (which commits every staged batch with its own) returns.
    ///
    /// A batch that puts an entry of a ledger a staged batch deletes is committed at once,
    /// after them (a commit applies its deletions after its puts; ledger ids are not
    /// reused, so the ledger store never does this, but the index stays exact if it did).
    pub fn stage(&self, batch: IndexBatch) -> Result<(), LedgerStoreError> {
        if self.puts_after_a_staged_deletion(&batch) {
            return self.commit(&batch);
        }
        self.staged
            .lock()
            .push(Arc::new(staged::StagedBatch::new(batch)));
        Ok(())
    }

    /// Whether `batch` puts an entry of a ledger that a staged batch deletes.
    fn puts_after_a_staged_deletion(&self, batch: &IndexBatch) -> bool {
        let staged = self.staged.lock();
        staged.iter().any(|b| {
            b.batch
                .deleted
                .iter()
                .any(|&l| batch.locations.iter().any(|&(x, _, _)| x == l))
        })
    }

    /// How many flushes are staged, and how many locations they hold.
    pub fn staged_flushes(&self) -> (usize, usize) {
        let s = self.staged.lock();
        (s.len(), staged::locations(&s))
    }

    /// Opens (or creates) the index in `dir` (which must exist) on `fs`.
    ///
    /// A new index is made under a temporary name and renamed into place (then the
    /// directory synced) only once redb has initialized it and its first commit is
    /// durable: redb's initialization is not atomic (it sizes the file and syncs before
    /// it writes its header), so a power cut in the middle would otherwise leave a
    /// non-empty file without redb's header, which no restart could open (the crash
    /// tests found it). A crash before the rename leaves only the temporary file, and
    /// the next open starts over. An empty index file (left by an older build's crash
    /// while creating it) counts as none.
    pub fn open(fs: &dyn FileSystem, dir: &Path) -> Result<LedgerIndex, LedgerStoreError> {
        Self::open_with_cache(fs, dir, DEFAULT_INDEX_CACHE_BYTES)
    }

    /// [`LedgerIndex::open`] keeping at most `cache_bytes` of the index's pages in memory
    /// (redb's cache, pages read and pages a commit is writing; the file stays in the OS
    /// page cache besides).
    pub fn open_with_cache(
        fs: &dyn FileSystem,
        dir: &Path,
        cache_bytes: u64,
    ) -> Result<LedgerIndex, LedgerStoreError> {
        let cache_bytes = usize::try_from(cache_bytes).unwrap_or(usize::MAX);
        let path = dir.join(INDEX_FILE);
        let named = path.clone();
        let io_err = |op: &str, e: std::io::Error| match e.kind() {
            std::io::ErrorKind::StorageFull => LedgerStoreError::NoSpace {
                dir: dir.to_path_buf(),
                source: e,
            },
            _ => LedgerStoreError::Index {
                path: named.clone(),
                reason: format!("{op}: {e}"),
            },
        };
        let exists = fs.exists(&path)
            && fs
                .open(&path, OpenOptions::read())
                .and_then(|f| f.len())
                .map_err(|e| io_err("open", e))?
                > 0;
        if exists {
            let file = fs
                .open(&path, OpenOptions::write_create())
                .map_err(|e| io_err("open", e))?;
            let db = redb::Builder::new()
                .set_cache_size(cache_bytes)
                .create_with_backend(backend::EnvFileBackend::new(file, &path))
                .map_err(|e| index_error(&path, e.into()))?;
            let index = LedgerIndex::new(db, path);
            index.check_version()?;
            return Ok(index);
        }
        let tmp = dir.join(format!("{INDEX_FILE}.new"));
        let file = fs
            .open(
                &tmp,
                OpenOptions {
                    write: true,
                    create: true,
                    truncate: true,
                    ..Default::default()
                },
            )
            .map_err(|e| io_err("create", e))?;
        // redb writes through the handle, whatever the file's name is later.
        let db = redb::Builder::new()
            .set_cache_size(cache_bytes)
            .create_with_backend(backend::EnvFileBackend::new(file, &path))
            .map_err(|e| index_error(&path, e.into()))?;
        let index = LedgerIndex::new(db, path);
        index.check_version()?;
        fs.rename(&tmp, &index.path)
            .map_err(|e| io_err("rename the new index into place", e))?;
        fs.sync_dir(dir)
            .map_err(|e| crate::ledger_store::io_error("sync directory", dir, dir, None, e))?;
        Ok(index)
    }

    fn err(&self, e: impl Into<redb::Error>) -> LedgerStoreError {
        index_error(&self.path, e.into())
    }

    /// Records the format version in a new index; upgrades an index of version 1 (in the
    /// same write transaction, so a crash leaves it as it was or upgraded); refuses any
    /// other version.
    fn check_version(&self) -> Result<(), LedgerStoreError> {
        let w = self.db.begin_write().map_err(|e| self.err(e))?;
        {
            let mut meta = w.open_table(META).map_err(|e| self.err(e))?;
            let found = meta
                .get("format_version")
                .map_err(|e| self.err(e))?
                .map(|v| v.value());
            match found {
                Some(INDEX_FORMAT_VERSION) => {}
                Some(1) => {
                    let entries = upgrade_from_v1(&w).map_err(|e| {
                        self.fault(match e {
                            IndexFault::Corrupt(r) => {
                                IndexFault::Corrupt(format!("upgrading from version 1: {r}"))
                            }
                            redb => redb,
                        })
                    })?;
                    meta.insert("format_version", INDEX_FORMAT_VERSION)
                        .map_err(|e| self.err(e))?;
                    tracing::info!(
                        index = %self.path.display(),
                        entries,
                        "ledger index upgraded from format version 1 to {INDEX_FORMAT_VERSION}"
                    );
                }
                Some(v) => {
                    return Err(LedgerStoreError::Index {
                        path: self.path.clone(),
                        reason: format!(
                            "index format version {v} unsupported (this build reads {INDEX_FORMAT_VERSION})"
                        ),
                    });
                }
                None => {
                    meta.insert("format_version", INDEX_FORMAT_VERSION)
                        .map_err(|e| self.err(e))?;
                }
            }
            // Create the tables so that readers never see "table does not exist".
            w.open_table(ENTRY_BLOCKS).map_err(|e| self.err(e))?;
            w.open_table(COUNTS).map_err(|e| self.err(e))?;
            w.open_table(COMPACTED_LOGS).map_err(|e| self.err(e))?;
            w.open_table(LEDGERS).map_err(|e| self.err(e))?;
        }
        w.commit().map_err(|e| self.err(e))
    }

    fn fault(&self, e: IndexFault) -> LedgerStoreError {
        match e {
            IndexFault::Redb(e) => self.err(e),
            IndexFault::Corrupt(r) => self.corrupt(r),
        }
    }

    fn corrupt(&self, reason: String) -> LedgerStoreError {
        LedgerStoreError::Index {
            path: self.path.clone(),
            reason,
        }
    }

    /// Where entry `entry` of `ledger` is, if the index has it.
    pub fn get(&self, ledger: i64, entry: i64) -> Result<Option<Location>, LedgerStoreError> {
        if let Some(found) = staged::get(&self.staged.lock(), ledger, entry) {
            return Ok(found);
        }
        let r = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = r.open_table(ENTRY_BLOCKS).map_err(|e| self.err(e))?;
        let (block, slot) = codec::block_of(entry);
        let key = codec::block_key(ledger, block);
        let Some(v) = t.get(&key[..]).map_err(|e| self.err(e))? else {
            return Ok(None);
        };
        Block::decode_slot(v.value(), slot)
            .map_err(|r| self.corrupt(format!("entry {ledger}:{entry}: {r}")))
    }

    /// How many entries the index holds as committed (kept by each commit: no scan;
    /// staged flushes are counted once committed).
    pub fn entry_count(&self) -> Result<u64, LedgerStoreError> {
        let r = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = r.open_table(COUNTS).map_err(|e| self.err(e))?;
        Ok(t.get(ENTRY_COUNT)
            .map_err(|e| self.err(e))?
            .map_or(0, |v| v.value()))
    }

    /// The blocks of `ledger` from the one holding `first` to the one holding `last`, as
    /// (ledger, entry, location) of each entry in `first..=last`, in key order; `ledger`
    /// `None` for every ledger's.
    fn scan(
        &self,
        ledger: Option<i64>,
        first: i64,
        last: i64,
        mut each: impl FnMut(i64, i64, Location),
    ) -> Result<(), LedgerStoreError> {
        let staged = self.staged();
        if staged.is_empty() || ledger.is_some_and(|l| !staged::touches(&staged, l)) {
            return self.scan_committed(ledger, first, last, each);
        }
        let mut committed = Vec::new();
        self.scan_committed(ledger, first, last, |l, e, loc| committed.push((l, e, loc)))?;
        for (l, e, loc) in staged::overlay(&staged, committed, ledger, first, last) {
            each(l, e, loc);
        }
        Ok(())
    }

    /// [`LedgerIndex::scan`] of what is committed only.
    fn scan_committed(
        &self,
        ledger: Option<i64>,
        first: i64,
        last: i64,
        mut each: impl FnMut(i64, i64, Location),
    ) -> Result<(), LedgerStoreError> {
        let r = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = r.open_table(ENTRY_BLOCKS).map_err(|e| self.err(e))?;
        let range = match ledger {
            Some(l) => t.range(
                &codec::block_key(l, codec::block_of(first).0)[..]
                    ..=&codec::block_key(l, codec::block_of(last).0)[..],
            ),
            None => t.iter(),
        };
        for kv in range.map_err(|e| self.err(e))? {
            let (k, v) = kv.map_err(|e| self.err(e))?;
            let (ledger, block, b) = self.decode_block(k.value(), v.value())?;
            let base = codec::block_first_entry(block);
            for (slot, loc) in b.iter() {
                let entry = base + slot as i64;
                if (first..=last).contains(&entry) {
                    each(ledger, entry, loc);
                }
            }
        }
        Ok(())
    }

    /// One `entry_blocks` key and value: (ledger, block, the block).
    fn decode_block(&self, k: &[u8], v: &[u8]) -> Result<(i64, i64, Block), LedgerStoreError> {
        let (ledger, block) = codec::decode_block_key(k).map_err(|r| self.corrupt(r))?;
        let b = Block::decode(v)
            .map_err(|r| self.corrupt(format!("ledger {ledger} block {block}: {r}")))?;
        Ok((ledger, block, b))
    }

    /// Every (ledger, entry, location) the index holds, in key order (tools: the local
    /// consistency check reads each one back).
    pub fn all_locations(&self) -> Result<Vec<(i64, i64, Location)>, LedgerStoreError> {
        let mut out = Vec::new();
        self.scan(None, i64::MIN, i64::MAX, |l, e, loc| out.push((l, e, loc)))?;
        Ok(out)
    }

    /// The entry ids the index holds for `ledger`, ascending.
    pub fn entry_ids(&self, ledger: i64) -> Result<Vec<i64>, LedgerStoreError> {
        let mut ids = Vec::new();
        self.scan(Some(ledger), i64::MIN, i64::MAX, |_, e, _| ids.push(e))?;
        Ok(ids)
    }

    /// The highest entry id the index has of `ledger`, from the ledger's last block (and
    /// the staged batches).
    pub fn last_entry(&self, ledger: i64) -> Result<Option<i64>, LedgerStoreError> {
        let committed = self.last_entry_committed(ledger)?;
        Ok(staged::last_entry(&self.staged(), ledger, committed))
    }

    /// [`LedgerIndex::last_entry`] of what is committed only.
    fn last_entry_committed(&self, ledger: i64) -> Result<Option<i64>, LedgerStoreError> {
        let r = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = r.open_table(ENTRY_BLOCKS).map_err(|e| self.err(e))?;
        let lo = codec::block_key(ledger, i64::MIN);
        let hi = codec::block_key(ledger, i64::MAX);
        let blocks = t.range(&lo[..]..=&hi[..]).map_err(|e| self.err(e))?;
        for kv in blocks.rev() {
            let (k, v) = kv.map_err(|e| self.err(e))?;
            let (_, block, b) = self.decode_block(k.value(), v.value())?;
            if let Some((slot, _)) = b.iter().last() {
                return Ok(Some(codec::block_first_entry(block) + slot as i64));
            }
        }
        Ok(None)
    }

    /// Where the index has `ledger`'s entries `first..=last`, in entry order, from one
    /// range scan (a run read ahead is checked against it: one lookup, not one per entry).
    pub fn locations(
        &self,
        ledger: i64,
        first: i64,
        last: i64,
    ) -> Result<Vec<(i64, Location)>, LedgerStoreError> {
        let mut out = Vec::new();
        if first <= last {
            self.scan(Some(ledger), first, last, |_, e, loc| out.push((e, loc)))?;
        }
        Ok(out)
    }

    /// The entries of `ledgers` that the index places in entry log `log_id`, as
    /// (ledger, entry, location), read in one transaction (compaction's live entries of
    /// that log).
    pub fn locations_in_log(
        &self,
        ledgers: &[i64],
        log_id: u64,
    ) -> Result<Vec<(i64, i64, Location)>, LedgerStoreError> {
        let mut out = Vec::new();
        for &ledger in ledgers {
            self.scan(Some(ledger), i64::MIN, i64::MAX, |l, e, loc| {
                if loc.log_id == log_id {
                    out.push((l, e, loc));
                }
            })?;
        }
        Ok(out)
    }

    /// Points each moved entry at its new location, in one durable write transaction,
    /// but only where the index still holds the old location: an entry written again
    /// since (a later flush) or removed (a deleted ledger) keeps what it has. Returns how
    /// many entries now point at their new location. Every log an entry moved out of is
    /// recorded in the same transaction as compacted (see [`LedgerIndex::compacted_logs`]).
    pub fn relocate(&self, moves: &[Relocation]) -> Result<u64, LedgerStoreError> {
        // Compaction is rare: what is cached of the blocks is dropped rather than kept
        // in step (held until the transaction ends, so no commit caches meanwhile).
        let mut state = self.write.lock();
        let WriteState { tails, blocks } = &mut *state;
        tails.clear();
        // Empty unless a transaction failed half way.
        blocks.clear();
        let w = self.db.begin_write().map_err(|e| self.err(e))?;
        let mut moved = 0;
        {
            let mut entries = w.open_table(ENTRY_BLOCKS).map_err(|e| self.err(e))?;
            let mut compacted = w.open_table(COMPACTED_LOGS).map_err(|e| self.err(e))?;
            for m in moves {
                let (block, slot) = codec::block_of(m.entry);
                let b = blocks
                    .load(&entries, m.ledger, block, None)
                    .map_err(|e| self.fault(e))?;
                // Only an entry still where compaction read it moves (never one
                // written again since, nor one removed).
                if b.get(slot) != Some(m.from) {
                    continue;
                }
                b.set(slot, m.to);
                compacted
                    .insert(&m.from.log_id.to_be_bytes()[..], ())
                    .map_err(|e| self.err(e))?;
                moved += 1;
            }
            blocks.store(&mut entries, None).map_err(|e| self.err(e))?;
        }
        w.commit().map_err(|e| self.err(e))?;
        drop(state);
        Ok(moved)
    }

    /// The entry logs out of which [`LedgerIndex::relocate`] moved entries and which
    /// [`LedgerIndex::forget_compacted_log`] has not forgotten since, ascending.
    pub fn compacted_logs(&self) -> Result<Vec<u64>, LedgerStoreError> {
        let r = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = r.open_table(COMPACTED_LOGS).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for kv in t.iter().map_err(|e| self.err(e))? {
            let (k, _) = kv.map_err(|e| self.err(e))?;
            let id: [u8; 8] = k.value().try_into().map_err(|_| {
                self.corrupt(format!("compacted log key of {} bytes", k.value().len()))
            })?;
            out.push(u64::from_be_bytes(id));
        }
        Ok(out)
    }

    /// Forgets that entries were moved out of log `log_id` (it was removed), durably.
    pub fn forget_compacted_log(&self, log_id: u64) -> Result<(), LedgerStoreError> {
        let w = self.db.begin_write().map_err(|e| self.err(e))?;
        {
            let mut t = w.open_table(COMPACTED_LOGS).map_err(|e| self.err(e))?;
            t.remove(&log_id.to_be_bytes()[..])
                .map_err(|e| self.err(e))?;
        }
        w.commit().map_err(|e| self.err(e))
    }

    /// Every ledger's info, ascending by ledger id.
    pub fn ledger_infos(&self) -> Result<Vec<(i64, LedgerInfo)>, LedgerStoreError> {
        let r = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = r.open_table(LEDGERS).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for kv in t.iter().map_err(|e| self.err(e))? {
            let (k, v) = kv.map_err(|e| self.err(e))?;
            let ledger = codec::decode_ledger_key(k.value()).map_err(|r| self.corrupt(r))?;
            let info = codec::decode_ledger_info(v.value())
                .map_err(|r| self.corrupt(format!("ledger {ledger}: {r}")))?;
            out.push((ledger, info));
        }
        Ok(out)
    }

    /// Applies the staged batches and `batch` in one write transaction and makes them
    /// durable before returning (in two, the staged ones first, if `batch` puts entries
    /// of a ledger a staged batch deletes: a transaction applies its deletions last). If
    /// it fails, the staged batches stay staged.
    pub fn commit(&self, batch: &IndexBatch) -> Result<(), LedgerStoreError> {
        if !batch.locations.is_empty() && self.puts_after_a_staged_deletion(batch) {
            self.commit(&IndexBatch::default())?;
        }
        let mut state = self.write.lock();
        // Stage and commit are the ledger store's flush's (one at a time): none is
        // staged while this commits, so the ones committed are the first `n`.
        let staged = self.staged();
        // Applied in place, oldest first: copying them into one batch took a fresh
        // allocation of every staged location per commit (page faults; docs/performance.md).
        let all: Vec<&IndexBatch> = staged.iter().map(|b| &b.batch).chain([batch]).collect();
        let done = self.commit_caching(&all, &mut state);
        match &done {
            Ok(()) => {
                self.staged.lock().drain(..staged.len());
            }
            // What this transaction cached may not be what the index holds.
            Err(_) => {
                state.tails.clear();
                state.blocks.clear();
            }
        }
        done
    }

    /// Applies `batches` as one: every batch's puts in order, then every deletion (a
    /// ledger is never written after its deletion, so applying them all last is the
    /// same), then the ledgers' infos in order (a later one wins).
    fn commit_caching(
        &self,
        batches: &[&IndexBatch],
        state: &mut WriteState,
    ) -> Result<(), LedgerStoreError> {
        let WriteState { tails, blocks } = state;
        // Empty unless a transaction failed half way.
        blocks.clear();
        let w = self.db.begin_write().map_err(|e| self.err(e))?;
        {
            let mut entries = w.open_table(ENTRY_BLOCKS).map_err(|e| self.err(e))?;
            let mut counts = w.open_table(COUNTS).map_err(|e| self.err(e))?;
            let mut count = counts
                .get(ENTRY_COUNT)
                .map_err(|e| self.err(e))?
                .map_or(0, |v| v.value());
            // Each block touched is read once and written once, in key order.
            for &(ledger, entry, loc) in batches.iter().flat_map(|b| &b.locations) {
                let (block, slot) = codec::block_of(entry);
                let b = blocks
                    .load(&entries, ledger, block, Some(&mut *tails))
                    .map_err(|e| self.fault(e))?;
                if b.set(slot, loc) {
                    count += 1;
                }
            }
            blocks
                .store(&mut entries, Some(&mut *tails))
                .map_err(|e| self.err(e))?;
            // After the puts, as before: a ledger deleted in this batch keeps none.
            for &ledger in batches.iter().flat_map(|b| &b.deleted) {
                tails.forget(ledger);
                let lo = codec::block_key(ledger, i64::MIN);
                let hi = codec::block_key(ledger, i64::MAX);
                let mut removed = 0u64;
                let mut bad = None;
                entries
                    .retain_in(&lo[..]..=&hi[..], |_, v| {
                        match Block::count_encoded(v) {
                            Ok(n) => removed += u64::from(n),
                            Err(r) => bad = Some(r),
                        }
                        false
                    })
                    .map_err(|e| self.err(e))?;
                if let Some(r) = bad {
                    return Err(self.corrupt(format!("ledger {ledger}: {r}")));
                }
                count = count.saturating_sub(removed);
            }
            counts.insert(ENTRY_COUNT, count).map_err(|e| self.err(e))?;
            let mut ledgers = w.open_table(LEDGERS).map_err(|e| self.err(e))?;
            for (ledger, info) in batches.iter().flat_map(|b| &b.ledgers) {
                ledgers
                    .insert(
                        &codec::ledger_key(*ledger)[..],
                        &codec::encode_ledger_info(info)[..],
                    )
                    .map_err(|e| self.err(e))?;
            }
        }
        // redb's default durability is Immediate: durable once commit returns.
        w.commit().map_err(|e| self.err(e))
    }
}

/// What the index's write transactions keep between them (under one lock).
#[derive(Default)]
struct WriteState {
    tails: Tails,
    /// Empty between transactions; kept for its room.
    blocks: Blocks,
}

/// What reading the index's blocks can meet: redb's error or a value that does not decode.
enum IndexFault {
    Redb(redb::Error),
    Corrupt(String),
}

fn redb_fault(e: impl Into<redb::Error>) -> IndexFault {
    IndexFault::Redb(e.into())
}

type BlockTable<'t> = redb::Table<'t, &'static [u8], &'static [u8]>;

/// The blocks one write transaction changes: each read once, changed in memory, and
/// written once at the end, in key order. Kept between transactions (under the index's
/// write lock) and emptied after each: with 10,000 ledgers written at once a commit
/// touches 10,000 blocks of about 800 bytes, and a map built afresh per commit was a
/// fresh, page-faulted allocation of all of them every time (docs/performance.md).
#[derive(Default)]
struct Blocks {
    /// The touched blocks, in the order first touched.
    touched: Vec<((i64, i64), Block)>,
    /// (ledger, block) -> its place in `touched`.
    at: IdHashMap<(i64, i64), usize>,
    /// The last one looked up: a flush's locations come ledger by ledger, entry by entry,
    /// so runs of them fall in one block.
    last: Option<((i64, i64), usize)>,
    /// `touched`'s keys sorted, for writing in key order.
    order: Vec<((i64, i64), usize)>,
    /// The most blocks a recent transaction touched, decaying by a sixteenth per
    /// transaction: the room kept follows it, so that a small commit between large ones
    /// (a periodic checkpoint's) does not give back what the next large one needs.
    recent_most: usize,
    /// Lookups made in the B-tree (tests count them).
    #[cfg(test)]
    lookups: usize,
}

impl Blocks {
    /// The block, on first use: with `tails`, decoded from the ledger's highest block as
    /// committed if it is that one, or empty without a lookup if it is above it (a ledger
    /// `tails` knows nothing of has its last block looked up first, and kept there);
    /// otherwise read from `t` (empty if absent). One left as it was is written again as
    /// it was (compaction's moves that no longer apply: rare).
    fn load(
        &mut self,
        t: &BlockTable<'_>,
        ledger: i64,
        block: i64,
        tails: Option<&mut Tails>,
    ) -> Result<&mut Block, IndexFault> {
        use std::collections::hash_map::Entry;
        let key = (ledger, block);
        let i = match self.last {
            Some((k, i)) if k == key => i,
            _ => {
                let i = match self.at.entry(key) {
                    Entry::Occupied(o) => *o.get(),
                    Entry::Vacant(v) => {
                        let corrupt = |r: String| {
                            IndexFault::Corrupt(format!("ledger {ledger} block {block}: {r}"))
                        };
                        let known = match tails {
                            Some(tails) => {
                                if !tails.knows(ledger) {
                                    #[cfg(test)]
                                    {
                                        self.lookups += 1;
                                    }
                                    tails.learn(ledger, last_block(t, ledger)?);
                                }
                                tails.lookup(ledger, block)
                            }
                            None => Lookup::Unknown,
                        };
                        let b = match known {
                            Lookup::Value(value) => Block::decode(value).map_err(corrupt)?,
                            Lookup::Absent => Block::default(),
                            // Unknown only if what was just learned was dropped for room.
                            Lookup::Below | Lookup::Unknown => {
                                #[cfg(test)]
                                {
                                    self.lookups += 1;
                                }
                                match t
                                    .get(&codec::block_key(ledger, block)[..])
                                    .map_err(redb_fault)?
                                {
                                    Some(g) => Block::decode(g.value()).map_err(corrupt)?,
                                    None => Block::default(),
                                }
                            }
                        };
                        self.touched.push((key, b));
                        *v.insert(self.touched.len() - 1)
                    }
                };
                self.last = Some((key, i));
                i
            }
        };
        Ok(&mut self.touched[i].1)
    }

    /// Writes every block that holds a location, in key order; with `tails`, keeps there
    /// each ledger's highest block (the caller drops them if its transaction fails).
    /// Empties `self` for the next transaction, whether or not this one failed.
    fn store(
        &mut self,
        t: &mut BlockTable<'_>,
        mut tails: Option<&mut Tails>,
    ) -> Result<(), redb::Error> {
        self.order.clear();
        self.order
            .extend(self.touched.iter().enumerate().map(|(i, (k, _))| (*k, i)));
        self.order.sort_unstable();
        let mut result = Ok(());
        for &((ledger, block), i) in &self.order {
            let b = &self.touched[i].1;
            if !b.is_empty() {
                let value = b.encode();
                if let Err(e) = t.insert(&codec::block_key(ledger, block)[..], &value[..]) {
                    result = Err(e.into());
                    break;
                }
                if let Some(tails) = tails.as_deref_mut() {
                    tails.wrote(ledger, block, value);
                }
            }
        }
        self.clear();
        result
    }

    /// Forgets every block, keeping the room they took unless it is far more than recent
    /// transactions needed (a burst over many ledgers is not kept for good).
    fn clear(&mut self) {
        let used = self.touched.len();
        if used == 0 {
            return;
        }
        self.touched.clear();
        self.at.clear();
        self.order.clear();
        self.last = None;
        self.recent_most = used.max(self.recent_most - self.recent_most / 16);
        let keep = 2 * self.recent_most.max(64);
        if self.touched.capacity() > 2 * keep {
            self.touched.shrink_to(keep);
            self.at.shrink_to(keep);
            self.order.shrink_to(keep);
        }
    }
}

/// The last block of `ledger` in `t` and its value, if it has one: what [`Tails`] learns.
fn last_block(t: &BlockTable<'_>, ledger: i64) -> Result<Option<(i64, Vec<u8>)>, IndexFault> {
    let lo = codec::block_key(ledger, i64::MIN);
    let hi = codec::block_key(ledger, i64::MAX);
    let Some(kv) = t.range(&lo[..]..=&hi[..]).map_err(redb_fault)?.next_back() else {
        return Ok(None);
    };
    let (k, v) = kv.map_err(redb_fault)?;
    let (_, block) = codec::decode_block_key(k.value()).map_err(IndexFault::Corrupt)?;
    Ok(Some((block, v.value().to_vec())))
}

/// Rewrites a version 1 index's `entries` (a key per entry) as `entry_blocks` and drops
/// it, inside the caller's write transaction; returns how many entries moved. v1's keys
/// come in (ledger, entry) order, so each block's entries arrive together.
fn upgrade_from_v1(w: &redb::WriteTransaction) -> Result<u64, IndexFault> {
    let mut count = 0u64;
    {
        let old = w.open_table(ENTRIES_V1).map_err(redb_fault)?;
        let mut new = w.open_table(ENTRY_BLOCKS).map_err(redb_fault)?;
        let mut current: Option<((i64, i64), Block)> = None;
        let mut put = |key: (i64, i64), b: &Block| {
            new.insert(&codec::block_key(key.0, key.1)[..], &b.encode()[..])
                .map(drop)
                .map_err(redb_fault)
        };
        for kv in old.iter().map_err(redb_fault)? {
            let (k, v) = kv.map_err(redb_fault)?;
            let (ledger, entry) =
                codec::decode_entry_key(k.value()).map_err(IndexFault::Corrupt)?;
            let loc = codec::decode_location(v.value())
                .map_err(|r| IndexFault::Corrupt(format!("entry {ledger}:{entry}: {r}")))?;
            let (block, slot) = codec::block_of(entry);
            if let Some((key, b)) = current.take_if(|(key, _)| *key != (ledger, block)) {
                put(key, &b)?;
            }
            current
                .get_or_insert_with(|| ((ledger, block), Block::default()))
                .1
                .set(slot, loc);
            count += 1;
        }
        if let Some((key, b)) = current.take() {
            put(key, &b)?;
        }
        let mut counts = w.open_table(COUNTS).map_err(redb_fault)?;
        counts.insert(ENTRY_COUNT, count).map_err(redb_fault)?;
    }
    w.delete_table(ENTRIES_V1).map_err(redb_fault)?;
    Ok(count)
}

/// Maps a redb error to ours; a full disk becomes `NoSpace` naming the index directory.
fn index_error(path: &Path, e: redb::Error) -> LedgerStoreError {
    match e {
        redb::Error::Io(io) if io.kind() == std::io::ErrorKind::StorageFull => {
            LedgerStoreError::NoSpace {
                dir: path.parent().unwrap_or(path).to_path_buf(),
                source: io,
            }
        }
        redb::Error::Backend(b) => match b.downcast::<std::io::Error>() {
            Ok(io) if io.kind() == std::io::ErrorKind::StorageFull => LedgerStoreError::NoSpace {
                dir: path.parent().unwrap_or(path).to_path_buf(),
                source: *io,
            },
            Ok(io) => LedgerStoreError::Index {
                path: path.to_path_buf(),
                reason: io.to_string(),
            },
            Err(other) => LedgerStoreError::Index {
                path: path.to_path_buf(),
                reason: other.to_string(),
            },
        },
        other => LedgerStoreError::Index {
            path: path.to_path_buf(),
            reason: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use folio_env::FileSystem;

    fn loc(n: u64) -> Location {
        Location {
            log_id: n,
            offset: 64 + n,
            len: n as u32,
        }
    }

    #[test]
    fn commit_get_scan_and_reopen() {
        let d = tempfile::tempdir().unwrap();
        {
            let idx = LedgerIndex::open(&folio_env::RealFileSystem, d.path()).unwrap();
            assert_eq!(idx.get(1, 0).unwrap(), None);
            let info = LedgerInfo {
                fenced: true,
                master_key: Some(Bytes::from_static(b"k")),
                last_entry_id: Some(2),
                ..Default::default()
            };
            idx.commit(&IndexBatch {
                locations: vec![
                    (1, 2, loc(2)),
                    (1, 0, loc(0)),
                    (2, 0, loc(5)),
                    (0, 9, loc(9)),
                ],
                ledgers: vec![(1, info.clone())],
                deleted: vec![],
            })
            .unwrap();
            assert_eq!(idx.get(1, 2).unwrap(), Some(loc(2)));
            assert_eq!(idx.entry_ids(1).unwrap(), vec![0, 2]);
            assert_eq!(idx.ledger_infos().unwrap(), vec![(1, info)]);
        }
        let idx = LedgerIndex::open(&folio_env::RealFileSystem, d.path()).unwrap();
        assert_eq!(idx.get(2, 0).unwrap(), Some(loc(5)));
        assert_eq!(idx.entry_ids(0).unwrap(), vec![9]);
        assert_eq!(idx.ledger_infos().unwrap()[0].1.last_entry_id, Some(2));
    }

    #[test]
    fn a_commits_blocks_are_kept_for_the_next_and_given_back_after_a_burst() {
        let d = tempfile::tempdir().unwrap();
        let idx = LedgerIndex::open(&folio_env::RealFileSystem, d.path()).unwrap();
        // One location in block 0 of each of `ledgers` ledgers, in ledger order reversed
        // (the blocks are still written in key order: the model test checks contents).
        let batch = |ledgers: i64, base: u64| IndexBatch {
            locations: (0..ledgers)
                .rev()
                .map(|l| (l, 0, loc(base + l as u64)))
                .collect(),
            ..Default::default()
        };
        let room = || idx.write.lock().blocks.touched.capacity();
        idx.commit(&batch(1000, 0)).unwrap();
        let kept = room();
        assert!(kept >= 1000, "{kept}");
        idx.commit(&batch(1000, 5000)).unwrap();
        assert_eq!(
            room(),
            kept,
            "the next commit reuses the room, not a new map"
        );
        assert!(idx.write.lock().blocks.touched.is_empty());
        // One small commit keeps the room (the next may be large again); many give it back.
        idx.commit(&batch(10, 9000)).unwrap();
        assert_eq!(room(), kept, "one small commit keeps the room");
        for _ in 0..40 {
            idx.commit(&batch(10, 9000)).unwrap();
        }
        assert!(
            room() < 1000,
            "after many small commits the room shrinks: {}",
            room()
        );
        for l in 0..1000 {
            let base = if l < 10 { 9000 } else { 5000 };
            assert_eq!(idx.get(l, 0).unwrap(), Some(loc(base + l as u64)));
        }
    }

    /// A commit looks a ledger's last block up once; after that, its blocks above the
    /// last are known to be new without a lookup, also after a lower block is written out
    /// of order, and a deletion or a relocation makes it look again.
    #[test]
    fn a_known_ledgers_new_blocks_are_not_looked_up() {
        let d = tempfile::tempdir().unwrap();
        let idx = LedgerIndex::open(&folio_env::RealFileSystem, d.path()).unwrap();
        let lookups = || idx.write.lock().blocks.lookups;
        let commit = |entries: std::ops::Range<i64>| {
            let locations = entries.map(|e| (1, e, loc(e as u64))).collect();
            idx.commit(&IndexBatch {
                locations,
                ..Default::default()
            })
            .unwrap();
        };
        commit(0..10);
        assert_eq!(lookups(), 1, "the ledger's last block, once");
        commit(10..100);
        assert_eq!(lookups(), 1, "block 0 as committed, blocks 1-3 new");
        // Entry 200 (block 6), then entry 150 (block 4, below it: looked up), then 201.
        commit(200..201);
        commit(150..151);
        assert_eq!(lookups(), 2);
        commit(201..202);
        assert_eq!(lookups(), 2, "block 6 is still the last");
        let ids: Vec<i64> = (0..100).chain([150, 200, 201]).collect();
        assert_eq!(idx.entry_ids(1).unwrap(), ids);
        // A relocation drops what is known: the next commit looks again.
        idx.relocate(&[Relocation {
            ledger: 1,
            entry: 0,
            from: loc(0),
            to: loc(7000),
        }])
        .unwrap();
        let before = lookups();
        commit(202..203);
        assert_eq!(lookups(), before + 1);
        // So does a deletion, after which the ledger has no block.
        idx.commit(&IndexBatch {
            deleted: vec![1],
            ..Default::default()
        })
        .unwrap();
        commit(0..1);
        assert_eq!(lookups(), before + 2);
        assert_eq!(idx.entry_ids(1).unwrap(), vec![0]);
        assert_eq!(idx.get(1, 0).unwrap(), Some(loc(0)));
    }

    #[test]
    fn delete_removes_only_that_ledgers_entries() {
        let d = tempfile::tempdir().unwrap();
        let idx = LedgerIndex::open(&folio_env::RealFileSystem, d.path()).unwrap();
        idx.commit(&IndexBatch {
            locations: vec![(1, 0, loc(0)), (1, 1, loc(1)), (2, 0, loc(2))],
            ..Default::default()
        })
        .unwrap();
        idx.commit(&IndexBatch {
            deleted: vec![1],
            ledgers: vec![(
                1,
                LedgerInfo {
                    deleted: true,
                    ..Default::default()
                },
            )],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(idx.entry_ids(1).unwrap(), Vec::<i64>::new());
        assert_eq!(idx.get(2, 0).unwrap(), Some(loc(2)));
        assert!(idx.ledger_infos().unwrap()[0].1.deleted);
    }

    #[test]
    fn relocate_moves_only_entries_still_at_their_old_location() {
        let d = tempfile::tempdir().unwrap();
        let idx = LedgerIndex::open(&folio_env::RealFileSystem, d.path()).unwrap();
        idx.commit(&IndexBatch {
            locations: vec![
                (1, 0, loc(1)),
                (1, 1, loc(1)),
                (1, 2, loc(2)),
                (2, 0, loc(1)),
            ],
            ..Default::default()
        })
        .unwrap();
        let in_one: Vec<(i64, i64)> = idx
            .locations_in_log(&[1, 2], 1)
            .unwrap()
            .into_iter()
            .map(|(l, e, _)| (l, e))
            .collect();
        assert_eq!(in_one, vec![(1, 0), (1, 1), (2, 0)]);
        let mv = |entry, from, to| Relocation {
            ledger: 1,
            entry,
            from,
            to,
        };
        // Entry 1 was written again elsewhere (loc 7) after compaction read it.
        idx.commit(&IndexBatch {
            locations: vec![(1, 1, loc(7))],
            ..Default::default()
        })
        .unwrap();
        let moved = idx
            .relocate(&[
                mv(0, loc(1), loc(9)),
                mv(1, loc(1), loc(9)),
                mv(3, loc(1), loc(9)),
            ])
            .unwrap();
        assert_eq!(moved, 1);
        assert_eq!(idx.get(1, 0).unwrap(), Some(loc(9)));
        assert_eq!(
            idx.get(1, 1).unwrap(),
            Some(loc(7)),
            "the newer location stays"
        );
        assert_eq!(
            idx.get(1, 3).unwrap(),
            None,
            "an absent entry is not created"
        );
        assert!(idx.locations_in_log(&[1], 1).unwrap().is_empty());
        assert_eq!(
            idx.locations_in_log(&[1, 2], 1).unwrap(),
            vec![(2, 0, loc(1))]
        );
        // Log 1 lost an entry to compaction: recorded with the move, until forgotten.
        assert_eq!(idx.compacted_logs().unwrap(), vec![1]);
    }

    #[test]
    fn a_log_is_recorded_as_compacted_only_when_an_entry_moves_out_of_it() {
        let d = tempfile::tempdir().unwrap();
        {
            let idx = LedgerIndex::open(&folio_env::RealFileSystem, d.path()).unwrap();
            idx.commit(&IndexBatch {
                locations: vec![(1, 0, loc(3)), (1, 1, loc(4))],
                ..Default::default()
            })
            .unwrap();
            let mv = |entry, from, to| Relocation {
                ledger: 1,
                entry,
                from,
                to,
            };
            // Entry 1 is not at loc(5): nothing moves out of log 5.
            let moved = idx
                .relocate(&[mv(0, loc(3), loc(9)), mv(1, loc(5), loc(9))])
                .unwrap();
            assert_eq!(moved, 1);
            assert_eq!(idx.compacted_logs().unwrap(), vec![3]);
            idx.relocate(&[mv(1, loc(4), loc(9))]).unwrap();
            assert_eq!(idx.compacted_logs().unwrap(), vec![3, 4]);
        }
        let idx = LedgerIndex::open(&folio_env::RealFileSystem, d.path()).unwrap();
        assert_eq!(idx.compacted_logs().unwrap(), vec![3, 4], "durable");
        idx.forget_compacted_log(3).unwrap();
        idx.forget_compacted_log(77).unwrap();
        assert_eq!(idx.compacted_logs().unwrap(), vec![4]);
    }

    /// Index files written before the index went through the `FileSystem` seam were
    /// opened by redb's own `FileBackend` (`Database::create(path)`): the bytes are the
    /// same, so such a file opens through `EnvFileBackend` with everything in it.
    #[test]
    fn an_index_written_by_redbs_own_file_backend_opens_through_the_seam() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join(INDEX_FILE);
        let info = LedgerInfo {
            fenced: true,
            master_key: Some(Bytes::from_static(b"key")),
            last_entry_id: Some(1),
            ..Default::default()
        };
        {
            // What `LedgerIndex::open` did before: redb opens the real file itself.
            let db = Database::create(&path).unwrap();
            let old = LedgerIndex::new(db, path.clone());
            old.check_version().unwrap();
            old.commit(&IndexBatch {
                locations: vec![(7, 0, loc(3)), (7, 1, loc(4))],
                ledgers: vec![(7, info.clone())],
                deleted: vec![],
            })
            .unwrap();
            old.relocate(&[Relocation {
                ledger: 7,
                entry: 1,
                from: loc(4),
                to: loc(9),
            }])
            .unwrap();
        }
        let idx = LedgerIndex::open(&folio_env::RealFileSystem, d.path()).unwrap();
        assert_eq!(idx.get(7, 0).unwrap(), Some(loc(3)));
        assert_eq!(idx.get(7, 1).unwrap(), Some(loc(9)));
        assert_eq!(idx.entry_ids(7).unwrap(), vec![0, 1]);
        assert_eq!(idx.ledger_infos().unwrap(), vec![(7, info)]);
        assert_eq!(idx.compacted_logs().unwrap(), vec![4]);
        // And it stays writable.
        idx.commit(&IndexBatch {
            locations: vec![(7, 2, loc(5))],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(idx.entry_ids(7).unwrap(), vec![0, 1, 2]);
    }

    /// On the simulated disk a commit is durable exactly when redb's syncs say: a crash
    /// image after `commit` returned has it, one taken before the commit does not, and a
    /// torn image of a commit in progress opens to one of the two states (redb's
    /// recovery), never to an error.
    #[test]
    fn commits_on_the_simulated_disk_survive_crashes_and_torn_ones_roll_back() {
        use folio_env::sim::{CrashMode, SimFileSystem};
        let fs = SimFileSystem::new();
        let dir = Path::new("/index");
        fs.create_dir_all(dir).unwrap();
        let idx = LedgerIndex::open(&fs, dir).unwrap();
        idx.commit(&IndexBatch {
            locations: vec![(1, 0, loc(1))],
            ..Default::default()
        })
        .unwrap();
        let before = fs.crash(CrashMode::Clean);
        fs.capture_every_op(CrashMode::Torn { seed: 7 });
        idx.commit(&IndexBatch {
            locations: vec![(1, 1, loc(2))],
            ..Default::default()
        })
        .unwrap();
        let during = fs.take_captures();
        let after = fs.crash(CrashMode::Clean);
        assert!(!during.is_empty());
        let reopen =
            |img: &SimFileSystem| LedgerIndex::open(img, dir).unwrap().entry_ids(1).unwrap();
        assert_eq!(reopen(&before), vec![0]);
        assert_eq!(reopen(&after), vec![0, 1]);
        for (ops, img) in &during {
            let ids = reopen(img);
            assert!(ids == vec![0] || ids == vec![0, 1], "at op {ops}: {ids:?}");
        }
    }

    /// A power cut anywhere inside the creation of a new index leaves a disk on which
    /// the index opens (empty), never a file redb cannot read. (redb sizes and syncs its
    /// file before it writes its header: created in place, an image after that sync
    /// failed with "Not a redb database".)
    /// A commit that fails leaves none of its blocks cached: the next commit to the same
    /// block reads what the index holds, so the failed commit's locations never appear.
    /// (It fails here after its blocks are written, on a corrupt block of a ledger it
    /// deletes; redb itself refuses every write after an I/O error.)
    #[test]
    fn a_failed_commit_leaves_nothing_of_it_for_the_next() {
        let d = tempfile::tempdir().unwrap();
        let idx = LedgerIndex::open(&folio_env::RealFileSystem, d.path()).unwrap();
        let batch = |entries: std::ops::Range<i64>| IndexBatch {
            locations: entries.map(|e| (1, e, loc(e as u64))).collect(),
            ..Default::default()
        };
        idx.commit(&batch(0..3)).unwrap();
        let w = idx.db.begin_write().unwrap();
        w.open_table(ENTRY_BLOCKS)
            .unwrap()
            .insert(&codec::block_key(2, 0)[..], &b"garbage"[..])
            .unwrap();
        w.commit().unwrap();
        let failing = IndexBatch {
            deleted: vec![2],
            ..batch(3..5)
        };
        let e = idx.commit(&failing).unwrap_err().to_string();
        assert!(e.contains("ledger 2"), "{e}");
        idx.commit(&batch(5..6)).unwrap();
        assert_eq!(idx.entry_ids(1).unwrap(), vec![0, 1, 2, 5]);
    }

    #[test]
    fn a_crash_while_the_index_is_created_leaves_one_that_opens() {
        use folio_env::sim::{CrashMode, SimFileSystem};
        for mode in [CrashMode::Clean, CrashMode::Torn { seed: 3 }] {
            let fs = SimFileSystem::new();
            let dir = Path::new("/index");
            fs.create_dir_all(dir).unwrap();
            fs.capture_every_op(mode);
            drop(LedgerIndex::open(&fs, dir).unwrap());
            let images = fs.take_captures();
            assert!(images.len() > 3, "{} operations", images.len());
            for (ops, img) in images {
                let idx = LedgerIndex::open(&img, dir)
                    .unwrap_or_else(|e| panic!("{mode:?}, crash before op {ops}: {e}"));
                assert_eq!(idx.ledger_infos().unwrap(), vec![]);
            }
        }
    }

    /// Writes a format version 1 index (a key per entry in `entries`) as the build before
    /// blocks did, on `fs`.
    fn write_v1(
        fs: &dyn FileSystem,
        dir: &Path,
        entries: &[(i64, i64, Location)],
        ledgers: &[(i64, LedgerInfo)],
    ) {
        let path = dir.join(INDEX_FILE);
        let file = fs.open(&path, OpenOptions::write_create()).unwrap();
        let db = redb::Builder::new()
            .create_with_backend(backend::EnvFileBackend::new(file, &path))
            .unwrap();
        let w = db.begin_write().unwrap();
        {
            let mut meta = w.open_table(META).unwrap();
            meta.insert("format_version", 1).unwrap();
            let mut t = w.open_table(ENTRIES_V1).unwrap();
            for &(l, e, loc) in entries {
                t.insert(
                    &codec::entry_key(l, e)[..],
                    &codec::encode_location(loc)[..],
                )
                .unwrap();
            }
            let mut t = w.open_table(LEDGERS).unwrap();
            for (l, i) in ledgers {
                t.insert(
                    &codec::ledger_key(*l)[..],
                    &codec::encode_ledger_info(i)[..],
                )
                .unwrap();
            }
            w.open_table(COMPACTED_LOGS).unwrap();
        }
        w.commit().unwrap();
        fs.sync_dir(dir).unwrap();
    }

    /// Entries of three ledgers across block boundaries, negative ids and a gap included.
    fn v1_entries() -> Vec<(i64, i64, Location)> {
        let mut v = Vec::new();
        for l in [-4, 1, 2] {
            for e in (-40..100).filter(|e| e % 7 != 3) {
                v.push((l, e, loc((l * 1000 + e + 5000) as u64)));
            }
        }
        v
    }

    #[test]
    fn a_version_1_index_is_upgraded_with_every_entry_and_stays_upgraded() {
        let d = tempfile::tempdir().unwrap();
        let fs = folio_env::RealFileSystem;
        let info = LedgerInfo {
            fenced: true,
            last_entry_id: Some(99),
            ..Default::default()
        };
        let want = v1_entries();
        write_v1(&fs, d.path(), &want, &[(1, info.clone())]);
        for _ in 0..2 {
            let idx = LedgerIndex::open(&fs, d.path()).unwrap();
            assert_eq!(idx.all_locations().unwrap(), want);
            assert_eq!(idx.entry_count().unwrap(), want.len() as u64);
            for &(l, e, at) in &want {
                assert_eq!(idx.get(l, e).unwrap(), Some(at), "{l}:{e}");
            }
            assert_eq!(idx.get(1, 3).unwrap(), None);
            assert_eq!(idx.ledger_infos().unwrap(), vec![(1, info.clone())]);
            let r = idx.db.begin_read().unwrap();
            let version = r.open_table(META).unwrap().get("format_version").unwrap();
            assert_eq!(version.map(|v| v.value()), Some(INDEX_FORMAT_VERSION));
            assert!(
                r.open_table(ENTRIES_V1).is_err(),
                "the version 1 table is gone"
            );
        }
    }

    /// A power cut anywhere in the upgrade leaves an index that opens with every entry:
    /// the upgrade is one write transaction.
    #[test]
    fn a_crash_during_the_upgrade_from_version_1_loses_no_entry() {
        use folio_env::sim::{CrashMode, SimFileSystem};
        let want = v1_entries();
        for mode in [CrashMode::Clean, CrashMode::Torn { seed: 5 }] {
            let fs = SimFileSystem::new();
            let dir = Path::new("/index");
            fs.create_dir_all(dir).unwrap();
            write_v1(&fs, dir, &want, &[]);
            fs.capture_every_op(mode);
            drop(LedgerIndex::open(&fs, dir).unwrap());
            let images = fs.take_captures();
            assert!(images.len() > 2, "{} operations", images.len());
            for (ops, img) in images {
                let idx = LedgerIndex::open(&img, dir)
                    .unwrap_or_else(|e| panic!("{mode:?}, crash before op {ops}: {e}"));
                let got = idx.all_locations().unwrap();
                assert!(got == want, "{mode:?}, op {ops}: {} entries", got.len());
            }
        }
    }

    #[test]
    fn an_index_of_an_unknown_version_is_refused_naming_it() {
        let d = tempfile::tempdir().unwrap();
        write_v1(&folio_env::RealFileSystem, d.path(), &[], &[]);
        {
            let idx = LedgerIndex::open(&folio_env::RealFileSystem, d.path()).unwrap();
            let w = idx.db.begin_write().unwrap();
            w.open_table(META)
                .unwrap()
                .insert("format_version", 9)
                .unwrap();
            w.commit().unwrap();
        }
        let e = LedgerIndex::open(&folio_env::RealFileSystem, d.path())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("version 9 unsupported") && e.contains(INDEX_FILE),
            "{e}"
        );
    }

    /// Random commits, deletes and relocations, checked after each against a map of what
    /// the index must hold: every lookup, scan and count.
    #[test]
    fn the_index_holds_what_a_plain_map_holds_through_random_changes() {
        use std::collections::BTreeMap;
        let d = tempfile::tempdir().unwrap();
        let mut idx = LedgerIndex::open(&folio_env::RealFileSystem, d.path()).unwrap();
        let mut model: BTreeMap<(i64, i64), Location> = BTreeMap::new();
        // What is committed (the model without the staged batches): what a reopen finds.
        let mut committed = model.clone();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for round in 0..300 {
            // Half the batches are staged, the others committed with every staged one.
            let apply = |idx: &LedgerIndex,
                         batch: IndexBatch,
                         stage: bool,
                         model: &BTreeMap<(i64, i64), Location>,
                         committed: &mut BTreeMap<(i64, i64), Location>| {
                if stage {
                    idx.stage(batch).unwrap();
                    if idx.staged_flushes().0 == 0 {
                        // Committed after all (a put after a staged deletion).
                        *committed = model.clone();
                    }
                } else {
                    idx.commit(&batch).unwrap();
                    *committed = model.clone();
                }
            };
            match next(12) {
                0 => {
                    let l = next(4) as i64;
                    model.retain(|&(ml, _), _| ml != l);
                    let batch = IndexBatch {
                        deleted: vec![l],
                        ..Default::default()
                    };
                    apply(&idx, batch, next(2) == 0, &model, &mut committed);
                }
                10 => {
                    // A restart: what was staged is gone.
                    drop(idx);
                    idx = LedgerIndex::open(&folio_env::RealFileSystem, d.path()).unwrap();
                    model = committed.clone();
                }
                1 | 2 => {
                    // Compaction commits what is staged before it moves entries (the
                    // model is then what is committed, as after the relocation below).
                    idx.commit(&IndexBatch::default()).unwrap();
                    let mut moves = Vec::new();
                    let held: Vec<_> = model.iter().map(|(&k, &v)| (k, v)).collect();
                    for _ in 0..next(40) {
                        // Mostly moves that apply (an entry where the index has it), and
                        // some that no longer do (another location, or no such entry).
                        let ((ledger, entry), from) = if held.is_empty() || next(4) == 0 {
                            ((next(4) as i64, next(200) as i64 - 40), loc(next(50)))
                        } else if next(3) == 0 {
                            let (key, _) = held[next(held.len() as u64) as usize];
                            (key, held[next(held.len() as u64) as usize].1)
                        } else {
                            held[next(held.len() as u64) as usize]
                        };
                        moves.push(Relocation {
                            ledger,
                            entry,
                            from,
                            to: loc(1000 + round),
                        });
                    }
                    let mut moved = 0;
                    for m in &moves {
                        if let Some(at) = model.get_mut(&(m.ledger, m.entry))
                            && *at == m.from
                        {
                            *at = m.to;
                            moved += 1;
                        }
                    }
                    assert_eq!(idx.relocate(&moves).unwrap(), moved, "round {round}");
                    committed = model.clone();
                }
                _ => {
                    let mut locations = Vec::new();
                    let l = next(4) as i64;
                    let start = next(200) as i64 - 40;
                    for i in 0..next(80) as i64 {
                        let e = if next(5) == 0 {
                            next(200) as i64 - 40
                        } else {
                            start + i
                        };
                        let at = loc(next(900));
                        locations.push((l, e, at));
                        model.insert((l, e), at);
                    }
                    let batch = IndexBatch {
                        locations,
                        ..Default::default()
                    };
                    apply(&idx, batch, next(2) == 0, &model, &mut committed);
                }
            }
            let all: Vec<_> = model.iter().map(|(&(l, e), &at)| (l, e, at)).collect();
            assert_eq!(idx.all_locations().unwrap(), all, "round {round}");
            assert_eq!(
                idx.entry_count().unwrap(),
                committed.len() as u64,
                "round {round}"
            );
            for l in 0..4 {
                let ids: Vec<i64> = model.keys().filter(|k| k.0 == l).map(|k| k.1).collect();
                assert_eq!(idx.entry_ids(l).unwrap(), ids, "round {round}");
                let (first, last) = (next(200) as i64 - 40, next(200) as i64 - 40);
                let want: Vec<_> = model
                    .range((l, first)..=(l, last.max(first)))
                    .filter(|_| first <= last)
                    .map(|(&(_, e), &at)| (e, at))
                    .collect();
                assert_eq!(
                    idx.locations(l, first, last).unwrap(),
                    want,
                    "round {round}"
                );
                let log = next(50);
                let want: Vec<_> = all
                    .iter()
                    .filter(|&&(ml, _, at)| ml == l && at.log_id == log)
                    .copied()
                    .collect();
                assert_eq!(
                    idx.locations_in_log(&[l], log).unwrap(),
                    want,
                    "round {round}"
                );
                let e = next(200) as i64 - 40;
                assert_eq!(idx.get(l, e).unwrap(), model.get(&(l, e)).copied());
                assert_eq!(
                    idx.last_entry(l).unwrap(),
                    ids.last().copied(),
                    "round {round}"
                );
            }
        }
        drop(idx);
        let idx = LedgerIndex::open(&folio_env::RealFileSystem, d.path()).unwrap();
        assert_eq!(
            idx.entry_count().unwrap(),
            model.len() as u64,
            "after reopening"
        );
    }

    #[test]
    fn a_garbage_index_file_is_an_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        folio_env::RealFileSystem
            .write_file_atomic(&d.path().join(INDEX_FILE), &[0x5a; 8192])
            .unwrap();
        let e = LedgerIndex::open(&folio_env::RealFileSystem, d.path())
            .err()
            .unwrap();
        assert!(e.to_string().contains(INDEX_FILE), "{e}");
    }
}
