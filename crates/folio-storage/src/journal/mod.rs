//! The journal: every add, fence, master key and explicit LAC is appended here and
//! acknowledged once an fdatasync covers it (group commit, see `writer`).
//!
//! There may be several journal directories (BookKeeper's `journalDirectories`);
//! each ledger is hashed onto one, so a ledger's records stay in order. Each
//! directory has its own writer thread, its own files `current/<id>.txn` and its own
//! mark `current/lastMark` (BookKeeper PR 3329: one directory's checkpoint must never
//! move another's mark). At start-up each directory is replayed from its mark.

mod force;
pub mod format;
pub mod reader;
mod reaper;
pub(crate) mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::Bytes;
use folio_env::{Clock, Env, FileLock, FileSystem};
use parking_lot::Mutex;

use force::{ForceQueue, Syncer};
pub use format::{Position, RecordKind};
pub use reader::{FileReplay, ReplayRecord, scan_file};
pub use writer::RequestKind;
use writer::{DirShared, Request, Writer};

use crate::config::JournalConfig;
use crate::error::StorageError;
use crate::storage::WriteCallback;

/// How long the simulator's steps wait (in real time) for a writer thread to go idle.
const IDLE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What start-up replay found, per journal directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Journal files read.
    pub files: u64,
    /// Records applied to the ledger store.
    pub records: u64,
    /// Files whose valid records end before the file does: a torn last group, or
    /// (the usual case) the preallocated zeroes after the last group.
    pub torn_tails: u64,
}

/// What the journal did since it opened, summed over its directories: how well group
/// commit batches (records per group commit) and what preallocation costs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Groups of records written (one positional write each).
    pub group_commits: u64,
    /// fdatasyncs that made a group durable (equals `group_commits` unless
    /// `sync_data` is off, then zero).
    pub group_fdatasyncs: u64,
    /// Records written (adds, fences, master keys, explicit LACs).
    pub records: u64,
    /// Bytes of records written (headers and payloads).
    pub bytes: u64,
    /// fdatasyncs after writing only preallocation zeroes.
    pub prealloc_fdatasyncs: u64,
    /// Bytes of preallocation zeroes written.
    pub prealloc_bytes: u64,
    /// Journal files created (at open and at each roll); each costs an fdatasync of its
    /// header and an fsync of its directory.
    pub files_created: u64,
}

impl JournalStats {
    /// Every fdatasync of a journal file: group commits, zero fills, new-file headers.
    pub fn fdatasyncs(&self) -> u64 {
        self.group_fdatasyncs + self.prealloc_fdatasyncs + self.files_created
    }
}

impl std::ops::Sub for JournalStats {
    type Output = JournalStats;
    /// The counts between two snapshots (`later - earlier`).
    fn sub(self, e: JournalStats) -> JournalStats {
        JournalStats {
            group_commits: self.group_commits - e.group_commits,
            group_fdatasyncs: self.group_fdatasyncs - e.group_fdatasyncs,
            records: self.records - e.records,
            bytes: self.bytes - e.bytes,
            prealloc_fdatasyncs: self.prealloc_fdatasyncs - e.prealloc_fdatasyncs,
            prealloc_bytes: self.prealloc_bytes - e.prealloc_bytes,
            files_created: self.files_created - e.files_created,
        }
    }
}

/// The journal of a bookie: one or more directories with a writer thread each.
pub struct Journal {
    dirs: Vec<Arc<DirShared>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    fs: Arc<dyn FileSystem>,
    clock: Arc<dyn Clock>,
    /// Deletes large journal files before the mark in the background.
    reaper: reaper::Reaper,
    /// With `force_write_by_caller`: each directory's force-write queue and the syncer
    /// that [`Journal::force_write_step`] runs on the caller's thread (else empty).
    stepped: Vec<(Arc<ForceQueue>, Mutex<Syncer>)>,
    /// Each directory's `LOCK`, held while the journal is open (dropped last).
    _locks: Vec<FileLock>,
}

impl Journal {
    /// Locks every directory (`DirInUse` if another process or journal has one open),
    /// replays each from its mark through `apply`, then starts a fresh journal file and
    /// a writer thread in each.
    pub fn open(
        env: &Env,
        cfg: &JournalConfig,
        apply: &mut dyn FnMut(ReplayRecord) -> Result<(), StorageError>,
    ) -> Result<(Journal, ReplayStats), StorageError> {
        if cfg.dirs.is_empty() {
            return Err(StorageError::BadRequest(
                "no journal directory configured".into(),
            ));
        }
        for (i, d) in cfg.dirs.iter().enumerate() {
            if cfg.dirs[..i].contains(d) {
                return Err(StorageError::BadRequest(format!(
                    "journal directory {} is configured twice",
                    d.display()
                )));
            }
        }
        let mut locks = Vec::new();
        for d in &cfg.dirs {
            locks.push(crate::dir_lock::lock_dir(
                &*env.fs,
                d,
                crate::dir_lock::JOURNAL_LOCK_FILE,
            )?);
        }
        let mut stats = ReplayStats::default();
        let mut prepared = Vec::new();
        let poison = Arc::new(writer::PoisonSlot::default());
        for d in &cfg.dirs {
            let current = d.join("current");
            env.fs.create_dir_all(&current).map_err(|e| {
                StorageError::io_dir("create journal directory", current.clone(), e)
            })?;
            let (mark, next_id) = replay_dir(&*env.fs, &current, apply, &mut stats)?;
            prepared.push((
                Arc::new(DirShared::new(current, mark, Arc::clone(&poison))),
                next_id,
            ));
        }
        let mut threads = Vec::new();
        let mut dirs = Vec::new();
        let mut stepped = Vec::new();
        for (i, (shared, next_id)) in prepared.into_iter().enumerate() {
            let mut w = Writer::create(
                Arc::clone(&shared),
                Arc::clone(&env.fs),
                Arc::clone(&env.clock),
                cfg.clone(),
                next_id,
            )?;
            if cfg.force_write_thread && cfg.force_write_by_caller {
                let queue = Arc::new(ForceQueue::default());
                let syncer = w.sync_through(Arc::clone(&queue));
                stepped.push((queue, Mutex::new(syncer)));
            }
            let t = folio_env::metric_label::spawn(
                std::thread::Builder::new().name(format!("journal-{i}")),
                move || w.run(),
            )
            .map_err(|e| StorageError::io("spawn journal thread", shared.dir.clone(), e))?;
            threads.push(t);
            dirs.push(shared);
        }
        Ok((
            Journal {
                dirs,
                threads: Mutex::new(threads),
                fs: Arc::clone(&env.fs),
                clock: Arc::clone(&env.clock),
                reaper: reaper::Reaper::default(),
                stepped,
                _locks: locks,
            },
            stats,
        ))
    }

    /// The directory a ledger's records go to.
    pub fn dir_index(&self, ledger: i64) -> usize {
        dir_for(ledger, self.dirs.len())
    }

    /// Appends a record; `done` runs after the fdatasync covering it (or with the error).
    pub fn append(
        &self,
        kind: RecordKind,
        ledger: i64,
        entry: i64,
        payload: Bytes,
        done: Option<WriteCallback>,
    ) {
        self.submit(
            RequestKind::Record(kind),
            ledger,
            entry,
            payload,
            None,
            done,
        );
    }

    /// [`Journal::append`] of a record whose payload's entry log record checksum
    /// (`entry_log::format::payload_record_crc`) the caller has: the journal's checksum
    /// is made from it rather than from another pass over the payload.
    pub fn append_with_crc(
        &self,
        kind: RecordKind,
        ledger: i64,
        entry: i64,
        payload: Bytes,
        payload_crc: u32,
        done: Option<WriteCallback>,
    ) {
        let kind = RequestKind::Record(kind);
        self.submit(kind, ledger, entry, payload, Some(payload_crc), done);
    }

    /// `done` runs once everything queued before for this ledger's directory is durable.
    pub fn force(&self, ledger: i64, done: WriteCallback) {
        self.submit(
            RequestKind::Force,
            ledger,
            0,
            Bytes::new(),
            None,
            Some(done),
        );
    }

    fn submit(
        &self,
        kind: RequestKind,
        ledger: i64,
        entry: i64,
        payload: Bytes,
        payload_crc: Option<u32>,
        done: Option<WriteCallback>,
    ) {
        let req = Request {
            kind,
            ledger,
            entry,
            payload,
            payload_crc,
            done,
            enqueued: self.clock.now(),
        };
        self.dirs[self.dir_index(ledger)].submit(req);
    }

    /// Why the journal takes no more writes, if it does not (a failed write or fsync).
    pub fn read_only_reason(&self) -> Option<String> {
        self.dirs[0].poison.get().map(|p| p.reason())
    }

    /// Why the journal takes no more writes *for good* (a failed fsync, invariant 9): not
    /// a write refused by a full disk, which [`Journal::resume_after_space_freed`] undoes.
    pub fn fatal_reason(&self) -> Option<String> {
        self.dirs[0]
            .poison
            .get()
            .filter(|p| !p.no_space)
            .map(|p| p.reason())
    }

    /// Takes writes again if all that stopped them was a full disk (a write refused with
    /// ENOSPC, cut back off the file, or a checkpoint whose entry-log writes were refused);
    /// the caller has seen space freed. A poison for good (a failed fsync) stays: returns
    /// whether writes resumed.
    pub fn resume_after_space_freed(&self) -> bool {
        self.dirs[0].poison.update(|p| match p.as_ref() {
            Some(poison) if poison.no_space => {
                tracing::info!(
                    "space freed: the journal takes writes again (stopped by: {})",
                    poison.reason()
                );
                *p = None;
                true
            }
            _ => false,
        })
    }

    /// Stops all writes (invariant 9) because something outside the journal failed in
    /// a way that may have lost data, e.g. an fsync of the ledger store during a
    /// checkpoint. The first reason is kept (one for good replaces a full disk's).
    pub(crate) fn poison(&self, op: &'static str, path: PathBuf, e: &std::io::Error) {
        self.record_poison(writer::Poison::new(op, path, e));
    }

    /// Stops all writes until space is freed: a checkpoint's ledger-store flush was
    /// refused by a full disk (the store keeps what it could not write for the next flush,
    /// and no fsync failed).
    pub(crate) fn poison_no_space(&self, op: &'static str, path: PathBuf, e: &std::io::Error) {
        self.record_poison(writer::Poison::no_space(op, path, e));
    }

    fn record_poison(&self, poison: writer::Poison) {
        self.dirs[0].poison.update(|p| {
            let before = p.as_ref().map(|p| p.no_space);
            writer::Poison::record(p, &poison);
            if before != p.as_ref().map(|p| p.no_space) {
                tracing::error!("storage read-only: {}", poison.reason());
            }
        })
    }

    /// The error a write gets when the journal is poisoned.
    pub(crate) fn poison_error(&self, ledger: i64) -> Option<StorageError> {
        self.dirs[self.dir_index(ledger)]
            .poison
            .get()
            .map(|p| p.later_error())
    }

    /// Per directory, the end of the last durable group: the candidate marks.
    pub fn synced_positions(&self) -> Vec<Position> {
        self.dirs.iter().map(|d| d.synced()).collect()
    }

    /// Counters since open, summed over the directories.
    pub fn stats(&self) -> JournalStats {
        let mut s = JournalStats::default();
        for d in &self.dirs {
            d.counters.sum_into(&mut s);
        }
        s
    }

    /// Written groups waiting for the force-write thread's fdatasync, summed over the
    /// directories (0 without `force_write_thread`).
    pub fn force_write_queue_len(&self) -> u64 {
        self.dirs
            .iter()
            .map(|d| {
                d.force_write_queued
                    .load(std::sync::atomic::Ordering::Relaxed)
            })
            .sum()
    }

    /// Per directory, the persisted marks.
    pub fn marks(&self) -> Vec<Position> {
        self.dirs.iter().map(|d| *d.persisted_mark.lock()).collect()
    }

    /// Persists directory `i`'s mark atomically if it moves forward, then deletes the
    /// journal files wholly before it. Callers hold the checkpoint lock.
    pub fn persist_mark(&self, i: usize, mark: Position) -> Result<(), StorageError> {
        let d = &self.dirs[i];
        let mut persisted = d.persisted_mark.lock();
        if mark <= *persisted {
            return Ok(());
        }
        let path = d.dir.join(format::MARK_FILE);
        self.fs
            .write_file_atomic(&path, &format::encode_mark(mark))
            .map_err(|e| StorageError::io("write journal mark", path.clone(), e))?;
        *persisted = mark;
        drop(persisted);
        let names = self
            .fs
            .list_dir(&d.dir)
            .map_err(|e| StorageError::io_dir("list journal directory", d.dir.clone(), e))?;
        // Large files go to the reaper (truncated a step at a time, see `reaper`). While
        // it is still busy with earlier ones, nothing is deleted here (it may be working
        // on any of these files); a later checkpoint deletes them.
        if self.reaper.busy() {
            return Ok(());
        }
        let mut large = Vec::new();
        for id in names.iter().filter_map(|n| format::parse_file_name(n)) {
            if id < mark.file_id {
                let p = d.dir.join(format::file_name(id));
                let len = self
                    .fs
                    .open(&p, folio_env::OpenOptions::read())
                    .and_then(|f| f.len())
                    .map_err(|e| StorageError::io("delete journal file", p.clone(), e))?;
                if len > reaper::STEP {
                    large.push(p);
                    continue;
                }
                self.fs
                    .remove_file(&p)
                    .map_err(|e| StorageError::io("delete journal file", p.clone(), e))?;
                tracing::debug!(file = %p.display(), "deleted journal file before the mark");
            }
        }
        if !large.is_empty() {
            self.reaper.start(Arc::clone(&self.fs), large);
        }
        Ok(())
    }

    /// Holds every directory's writer thread (it starts no new group; one already taken
    /// goes on) or releases them: requests queued while held are written as one group per
    /// directory (within the group bounds). For the simulator, so that several requests
    /// share a group deterministically. Shutdown overrides a hold.
    #[doc(hidden)]
    pub fn hold_writers(&self, held: bool) {
        for d in &self.dirs {
            d.hold(held);
        }
    }

    /// With `force_write_by_caller`: waits until every writer thread is idle (what was
    /// queued is written), then makes every written group durable and runs its callbacks,
    /// on this thread, as the force-write thread would. Returns the number of groups.
    #[doc(hidden)]
    pub fn force_write_step(&self) -> usize {
        let mut groups = 0;
        for (d, (queue, syncer)) in self.dirs.iter().zip(&self.stepped) {
            if !d.wait_idle(IDLE_WAIT) {
                tracing::error!(dir = %d.dir.display(), "the journal writer did not go idle");
            }
            let jobs = queue.take_all();
            let n = jobs.len();
            syncer.lock().complete(jobs);
            d.force_write_queued
                .fetch_sub(n as u64, std::sync::atomic::Ordering::Relaxed);
            groups += n;
        }
        groups
    }

    /// Waits (in real time, up to 10 s per directory) until every writer thread waits for
    /// work with nothing it could take; false if one did not. For the simulator.
    #[doc(hidden)]
    pub fn wait_writers_idle(&self) -> bool {
        self.dirs.iter().all(|d| d.wait_idle(IDLE_WAIT))
    }

    /// Stops the writer threads after they write what is queued (and, with
    /// `force_write_by_caller`, makes it durable, as the force-write thread does when it
    /// is closed).
    pub fn shutdown(&self) {
        self.reaper.shutdown();
        for d in &self.dirs {
            d.shutdown();
        }
        for t in self.threads.lock().drain(..) {
            if t.join().is_err() {
                tracing::error!("a journal writer thread panicked");
            }
        }
        self.force_write_step();
    }

    /// The `current/` directories, in configuration order.
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.dir.clone()).collect()
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Hashes a ledger onto one of `n` journal directories.
pub fn dir_for(ledger: i64, n: usize) -> usize {
    let h = (ledger as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((h >> 32) % n as u64) as usize
}

/// Reads the mark of a journal directory's `current/` (absent = the beginning). Public
/// for tools (`folio shell lastmark`); reading it while a bookie runs is safe, the mark
/// is replaced atomically.
pub fn read_mark(fs: &dyn FileSystem, dir: &Path) -> Result<Position, StorageError> {
    let path = dir.join(format::MARK_FILE);
    if !fs.exists(&path) {
        return Ok(Position::default());
    }
    let bytes = fs
        .read_file(&path)
        .map_err(|e| StorageError::io("read journal mark", path.clone(), e))?;
    format::decode_mark(&bytes).map_err(|reason| StorageError::CorruptJournal {
        file: path,
        offset: 0,
        reason,
    })
}

/// The ids of the journal files in a journal directory's `current/`, ascending.
pub fn list_files(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<u64>, StorageError> {
    let names = fs
        .list_dir(dir)
        .map_err(|e| StorageError::io_dir("list journal directory", dir.to_path_buf(), e))?;
    let mut ids: Vec<u64> = names
        .iter()
        .filter_map(|n| format::parse_file_name(n))
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Replays one directory from its mark; returns the mark and the next file id.
///
/// The files from the mark's on must be consecutive ids (the writer only ever starts
/// `id + 1`, and only files wholly before the mark are deleted), so a missing one is
/// lost data, not a deletion. Every file but the newest must be complete; a torn tail
/// of the newest is dropped and cut off (`seal_file`) before the writer starts the next
/// file, so that the next start finds it complete too.
fn replay_dir(
    fs: &dyn FileSystem,
    dir: &Path,
    apply: &mut dyn FnMut(ReplayRecord) -> Result<(), StorageError>,
    stats: &mut ReplayStats,
) -> Result<(Position, u64), StorageError> {
    let mark = read_mark(fs, dir)?;
    let ids = list_files(fs, dir)?;
    if mark.file_id > 0 && !ids.contains(&mark.file_id) {
        return Err(StorageError::CorruptJournal {
            file: dir.join(format::file_name(mark.file_id)),
            offset: mark.offset,
            reason: "the journal file named by the mark is missing".into(),
        });
    }
    let live: Vec<u64> = ids
        .iter()
        .copied()
        .filter(|&id| id >= mark.file_id)
        .collect();
    check_consecutive(dir, mark, &live)?;
    for (i, &id) in live.iter().enumerate() {
        let start = if id == mark.file_id { mark.offset } else { 0 };
        let newest = i + 1 == live.len();
        let tail = if newest {
            reader::Tail::MayBeTorn
        } else {
            reader::Tail::Complete
        };
        let path = dir.join(format::file_name(id));
        let r = reader::replay_file(fs, &path, id, start, tail, apply)?;
        if r.needs_seal {
            reader::seal_file(fs, &path, id, r.end)?;
        }
        stats.files += 1;
        stats.records += r.records;
        stats.torn_tails += u64::from(r.torn_tail.is_some());
    }
    let next = ids.last().copied().unwrap_or(0).max(mark.file_id) + 1;
    Ok((mark, next))
}

/// Checks that the journal files to replay (`live`, ascending, from the mark's file on)
/// have no gap. Without a mark nothing was ever deleted, so they start at id 1.
fn check_consecutive(dir: &Path, mark: Position, live: &[u64]) -> Result<(), StorageError> {
    let first = if mark.file_id > 0 { mark.file_id } else { 1 };
    for (expect, &id) in (first..).zip(live) {
        if id != expect {
            let rule = if mark.file_id == 0 {
                "there is no mark, so no file was ever deleted and every id from 1 on must be there"
                    .to_string()
            } else {
                format!(
                    "every file from the mark's file {} on must be there",
                    mark.file_id
                )
            };
            return Err(StorageError::CorruptJournal {
                file: dir.join(format::file_name(expect)),
                offset: 0,
                reason: format!(
                    "journal file {expect} is missing, yet file {id} exists ({rule}): \
                     acknowledged records may have been lost"
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
