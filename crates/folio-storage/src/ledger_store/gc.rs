//! Garbage collection of whole entry logs: a log none of whose ledgers is still alive is
//! deleted, file and all (BookKeeper's GarbageCollectorThread `doGcEntryLogs`). Logs that
//! still hold some live entries are compaction's business, not this module's.
//!
//! A log may go only when nothing can read it any more: it is not being written, every
//! ledger it holds is deleted, and each of those deletions has been flushed (so the index
//! holds no location in the log; a deletion not yet flushed leaves the ledger's index
//! entries in place, and a crash would bring them back). A log whose contents are not known
//! for sure (no ledgers map and a scan that stops before the end of the file, i.e. a torn
//! tail or damage) is kept: what lies past the damage could be a live entry.
//!
//! Besides, a log out of which compaction moved entries and that it did not get to remove
//! (a crash, a failed directory sync, a corrupt record in a later batch; the index keeps a
//! record of such logs) goes as soon as the index points nowhere into it, whatever its
//! ledgers: every entry it held is then elsewhere or deleted. The check and the removal are
//! compaction's own (`remove_unreferenced_log`), under the flush lock.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::{LedgerStore, LedgerStoreError};

/// What one [`LedgerStore::remove_dead_entry_logs`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryLogGcStats {
    /// Entry logs looked at (every log but the ones being written).
    pub logs_checked: u64,
    /// Ids of the logs removed, ascending.
    pub logs_removed: Vec<u64>,
    /// Bytes of the files removed.
    pub bytes_reclaimed: u64,
    /// Logs kept because their contents are uncertain (no ledgers map, and records
    /// unreadable before the end of the file).
    pub logs_uncertain: u64,
    /// Logs that could not be examined or removed, with why; each was left in place and
    /// the others were still handled.
    pub failures: Vec<(u64, String)>,
}

/// What a finished log holds.
#[derive(Debug, Clone)]
enum LogContents {
    /// The ledgers with records in the log.
    Ledgers(Vec<i64>),
    /// No ledgers map, and the scan stopped short of the end of the file.
    Uncertain,
}

/// The contents of finished logs, remembered: a log no longer written never changes, so a
/// pass does not read its ledgers map (or scan it) again.
#[derive(Debug, Default)]
pub(crate) struct GcCache {
    logs: Mutex<HashMap<u64, LogContents>>,
}

impl LedgerStore {
    /// Deletes every entry log (not being written) whose ledgers are all deleted, with
    /// those deletions flushed: the file is removed and its directory synced. One log that
    /// cannot be read or removed is reported in `failures` and the others are still
    /// handled.
    pub fn remove_dead_entry_logs(&self) -> Result<EntryLogGcStats, LedgerStoreError> {
        // Compaction removes logs too: one of the two at a time.
        let _no_compaction = self.compaction_lock.lock();
        let mut stats = EntryLogGcStats::default();
        let mut candidates = Vec::new();
        let ids = self.logs.rotated_log_ids();
        // Forget logs compaction removed.
        self.gc.logs.lock().retain(|id, _| ids.contains(id));
        for &id in &ids {
            stats.logs_checked += 1;
            match self.log_contents(id) {
                Ok(LogContents::Ledgers(ledgers)) => {
                    if self.all_deleted_and_flushed(&ledgers) {
                        candidates.push((id, ledgers));
                    }
                }
                Ok(LogContents::Uncertain) => stats.logs_uncertain += 1,
                Err(e) => {
                    tracing::warn!(log = id, "garbage collection cannot read entry log: {e}");
                    stats.failures.push((id, e.to_string()));
                }
            }
        }
        let compacted = self.index.compacted_logs()?;
        if !candidates.is_empty() {
            self.remove_dead(candidates, &compacted, &mut stats);
        }
        self.remove_compacted_leftovers(&ids, &compacted, &mut stats);
        stats.logs_removed.sort_unstable();
        Ok(stats)
    }

    /// Removes the candidate logs whose ledgers are still all deleted and flushed.
    /// A log that was partly compacted before (in `compacted`) loses that record too.
    fn remove_dead(
        &self,
        candidates: Vec<(u64, Vec<i64>)>,
        compacted: &[u64],
        stats: &mut EntryLogGcStats,
    ) {
        // A flush in progress has taken its deletions out of `deleted_pending` before
        // committing them: decide again with no flush running, and remove before one can
        // start (deleted ledgers never come back, so the answer cannot change after).
        let _no_flush = self.flush_lock.lock();
        // A staged deletion is flushed but not durable: a crash would bring the ledger's
        // committed locations back, pointing into a removed log. Commit it first.
        if let Err(e) = self.commit_staged_index() {
            tracing::warn!("garbage collection cannot commit the staged index flushes: {e}");
            for (id, _) in candidates {
                stats.failures.push((id, e.to_string()));
            }
            return;
        }
        for (id, ledgers) in candidates {
            if !self.all_deleted_and_flushed(&ledgers) {
                continue;
            }
            // Belt and braces: the index must hold no entry of these ledgers.
            if let Err(why) = self.index_holds_none_of(&ledgers) {
                tracing::error!(log = id, "entry log kept: {why}");
                stats.failures.push((id, why));
                continue;
            }
            match self.logs.remove(id) {
                Ok(bytes) => {
                    tracing::info!(log = id, bytes, ?ledgers, "removed dead entry log");
                    self.gc.logs.lock().remove(&id);
                    if compacted.contains(&id)
                        && let Err(e) = self.index.forget_compacted_log(id)
                    {
                        // Harmless: it only costs an index scan if the id comes back.
                        tracing::warn!(
                            log = id,
                            "cannot forget the removed log's compaction record: {e}"
                        );
                    }
                    stats.logs_removed.push(id);
                    stats.bytes_reclaimed += bytes;
                }
                Err(e) => {
                    tracing::warn!(log = id, "cannot remove dead entry log: {e}");
                    stats.failures.push((id, e.to_string()));
                }
            }
        }
    }

    /// Removes the rotated logs (of `ids`, the ones not being written) that compaction
    /// moved entries out of and the index no longer points into.
    fn remove_compacted_leftovers(
        &self,
        ids: &[u64],
        compacted: &[u64],
        stats: &mut EntryLogGcStats,
    ) {
        let known: Vec<i64> = self.state.lock().ledgers.keys().copied().collect();
        for &id in compacted {
            // Not rotated (being written), removed by the pass above, or unreadable (and
            // reported) there.
            if !ids.contains(&id)
                || stats.logs_removed.contains(&id)
                || stats.failures.iter().any(|(f, _)| *f == id)
            {
                continue;
            }
            let ledgers = match self.log_contents(id) {
                Ok(LogContents::Ledgers(ledgers)) => ledgers,
                // A scan that stopped short may have missed ledgers: look for all.
                Ok(LogContents::Uncertain) => known.clone(),
                Err(e) => {
                    tracing::warn!(log = id, "garbage collection cannot read entry log: {e}");
                    stats.failures.push((id, e.to_string()));
                    continue;
                }
            };
            match self.remove_unreferenced_log(id, &ledgers) {
                Ok(Some(bytes)) => {
                    tracing::info!(log = id, bytes, "removed entry log left by compaction");
                    self.gc.logs.lock().remove(&id);
                    stats.logs_removed.push(id);
                    stats.bytes_reclaimed += bytes;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(log = id, "cannot remove entry log left by compaction: {e}");
                    stats.failures.push((id, e.to_string()));
                }
            }
        }
    }

    /// The ledgers of finished log `id`, from the cache, its ledgers map or a scan.
    fn log_contents(&self, id: u64) -> Result<LogContents, LedgerStoreError> {
        if let Some(c) = self.gc.logs.lock().get(&id) {
            return Ok(c.clone());
        }
        let contents = match self.logs.ledgers_map(id)? {
            Some(map) => LogContents::Ledgers(map.into_iter().map(|(l, _)| l).collect()),
            None => {
                // Not rotated (the bookie stopped while writing it): read its records.
                let scan = self.logs.scan(id)?;
                let len = self.logs.file_len(id)?;
                if scan.end == len || scan.padded {
                    LogContents::Ledgers(scan.ledgers.into_iter().map(|(l, _)| l).collect())
                } else {
                    tracing::info!(
                        log = id,
                        valid_up_to = scan.end,
                        len,
                        "entry log without ledgers map has unreadable records; garbage \
                         collection keeps it"
                    );
                    LogContents::Uncertain
                }
            }
        };
        self.gc.logs.lock().insert(id, contents.clone());
        Ok(contents)
    }

    /// Whether every ledger is known, deleted, and its deletion flushed. A ledger the
    /// store does not know counts as alive.
    fn all_deleted_and_flushed(&self, ledgers: &[i64]) -> bool {
        let st = self.state.lock();
        ledgers.iter().all(|l| {
            st.ledgers.get(l).is_some_and(|i| i.deleted) && !st.deleted_pending.contains(l)
        })
    }

    /// `Err` naming the first ledger the index still has an entry of (or the index error).
    fn index_holds_none_of(&self, ledgers: &[i64]) -> Result<(), String> {
        for &l in ledgers {
            match self.index.entry_ids(l) {
                Ok(ids) if ids.is_empty() => {}
                Ok(ids) => {
                    return Err(format!(
                        "ledger {l} is deleted but the index still holds {} of its entries",
                        ids.len()
                    ));
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{LedgerStore, LedgerStoreConfig};
    use bytes::Bytes;
    use folio_env::Env;

    /// 200-byte payloads make 224-byte records: four fit in a 1 KiB log after its header.
    const LIMIT: u64 = 1024;

    fn config(dir: &std::path::Path) -> LedgerStoreConfig {
        LedgerStoreConfig {
            ledger_dirs: vec![dir.join("ledgers")],
            index_dir: dir.join("index"),
            entry_log_size_limit: LIMIT,
            write_cache_bytes: 1 << 20,
            journal_dirs: Vec::new(),
            entry_log_per_ledger: false,
            max_active_entry_logs: 500,
            entry_log_access_expiry: std::time::Duration::from_secs(300),
            entry_log_direct_io: false,
            read_ahead_cache_bytes: crate::ledger_store::DEFAULT_READ_AHEAD_CACHE_BYTES,
            read_ahead_batch_size: crate::ledger_store::DEFAULT_READ_AHEAD_BATCH_SIZE,
            read_ahead_batch_bytes: crate::ledger_store::DEFAULT_READ_AHEAD_BATCH_BYTES,
            index_cache_bytes: crate::index::DEFAULT_INDEX_CACHE_BYTES,
            index_commit_flushes: crate::ledger_store::DEFAULT_INDEX_COMMIT_FLUSHES,
            skip_last_entry_lookup_for_tests: false,
        }
    }

    fn open(dir: &std::path::Path) -> LedgerStore {
        LedgerStore::open(&Env::real(), config(dir)).unwrap()
    }

    fn payload(ledger: i64, entry: i64) -> Bytes {
        let mut b = format!("ledger {ledger} entry {entry} ").into_bytes();
        b.resize(200, b'a' + (entry % 26) as u8);
        Bytes::from(b)
    }

    fn put(s: &LedgerStore, ledger: i64, entries: std::ops::Range<i64>) {
        for e in entries {
            s.put_entry(ledger, e, payload(ledger, e)).unwrap();
        }
        s.flush().unwrap();
    }

    fn assert_readable(s: &LedgerStore, ledger: i64, entries: std::ops::Range<i64>) {
        for e in entries {
            assert_eq!(
                s.get_entry(ledger, e).unwrap(),
                Some(payload(ledger, e)),
                "ledger {ledger} entry {e}"
            );
        }
    }

    /// Log 0: ledger 1 only; log 1: ledgers 1 and 2; log 2: ledger 2 only; log 3 (being
    /// written): ledger 3.
    fn four_logs(s: &LedgerStore) {
        put(s, 1, 0..6);
        put(s, 2, 0..6);
        put(s, 3, 0..1);
        assert_eq!(s.entry_log_ids(), vec![0, 1, 2, 3]);
        assert_eq!(s.logs.rotated_log_ids(), vec![0, 1, 2]);
        let ledgers = |id| -> Vec<i64> {
            s.entry_log_ledgers(id)
                .unwrap()
                .unwrap()
                .into_iter()
                .map(|(l, _)| l)
                .collect()
        };
        assert_eq!(ledgers(0), vec![1]);
        assert_eq!(ledgers(1), vec![1, 2]);
        assert_eq!(ledgers(2), vec![2]);
    }

    /// A read that found the entry in the index, then lost the race with the ledger's
    /// deletion and the removal of its log, answers "no such entry" (the ledger is gone),
    /// not a corrupt-log error; an entry of a live ledger is still read.
    #[test]
    fn a_read_racing_the_deletion_of_its_ledger_finds_nothing_not_corruption() {
        let tmp = tempfile::tempdir().unwrap();
        let s = std::sync::Arc::new(open(tmp.path()));
        four_logs(&s);
        let weak = std::sync::Arc::downgrade(&s);
        let once = std::sync::atomic::AtomicBool::new(false);
        *s.before_log_read.lock() = Some(Box::new(move || {
            if once.swap(true, std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            let s = weak.upgrade().unwrap();
            s.delete_ledger(1).unwrap();
            s.flush().unwrap();
            let stats = s.remove_dead_entry_logs().unwrap();
            assert_eq!(stats.logs_removed, vec![0], "{stats:?}");
        }));
        assert_eq!(s.get_entry(1, 0).unwrap(), None);
        *s.before_log_read.lock() = None;
        assert_readable(&s, 2, 0..6);
    }

    #[test]
    fn a_log_of_deleted_ledgers_goes_after_the_flush_and_a_shared_one_stays() {
        let tmp = tempfile::tempdir().unwrap();
        let s = open(tmp.path());
        four_logs(&s);
        let log0 = s.entry_log_path(0).unwrap();
        assert_eq!(
            s.remove_dead_entry_logs().unwrap().logs_removed,
            Vec::<u64>::new()
        );

        s.delete_ledger(1).unwrap();
        // Not flushed yet: the index still points into log 0 and a crash would bring
        // ledger 1 back, so the log must stay.
        let stats = s.remove_dead_entry_logs().unwrap();
        assert_eq!(stats.logs_removed, Vec::<u64>::new());
        assert!(log0.exists());

        s.flush().unwrap();
        let log0_len = std::fs::metadata(&log0).unwrap().len();
        let stats = s.remove_dead_entry_logs().unwrap();
        assert_eq!(stats.logs_removed, vec![0]);
        assert_eq!(stats.logs_checked, 3, "every log but the one being written");
        assert_eq!(stats.bytes_reclaimed, log0_len);
        assert!(stats.failures.is_empty(), "{:?}", stats.failures);
        assert!(!log0.exists());
        assert_eq!(s.entry_log_ids(), vec![1, 2, 3]);
        // The shared log stays; ledger 2 reads back byte for byte, ledger 1 is gone.
        assert_readable(&s, 2, 0..6);
        assert_readable(&s, 3, 0..1);
        assert_eq!(s.get_entry(1, 0).unwrap(), None);
        assert_eq!(s.get_entry(1, 5).unwrap(), None);
        // Nothing more to do on a second pass.
        assert_eq!(
            s.remove_dead_entry_logs().unwrap().logs_removed,
            Vec::<u64>::new()
        );

        drop(s);
        let s = open(tmp.path());
        assert_eq!(s.entry_log_ids(), vec![1, 2, 3]);
        assert_readable(&s, 2, 0..6);
        assert_readable(&s, 3, 0..1);
        assert_eq!(s.get_entry(1, 0).unwrap(), None);
        assert_eq!(
            s.remove_dead_entry_logs().unwrap().logs_removed,
            Vec::<u64>::new()
        );
        assert_readable(&s, 2, 0..6);
    }

    #[test]
    fn an_unreadable_log_is_reported_and_kept_and_the_others_still_go() {
        let tmp = tempfile::tempdir().unwrap();
        let s = open(tmp.path());
        four_logs(&s);
        // Damage log 2's ledgers map (the last bytes of the file).
        let log2 = s.entry_log_path(2).unwrap();
        {
            use std::os::unix::fs::FileExt;
            let len = std::fs::metadata(&log2).unwrap().len();
            let f = std::fs::OpenOptions::new().write(true).open(&log2).unwrap();
            f.write_all_at(&[0xff; 4], len - 4).unwrap();
        }
        for l in [1, 2] {
            s.delete_ledger(l).unwrap();
        }
        s.flush().unwrap();
        for _ in 0..2 {
            let stats = s.remove_dead_entry_logs().unwrap();
            assert_eq!(stats.failures.len(), 1, "{stats:?}");
            assert_eq!(stats.failures[0].0, 2);
            assert!(
                stats.failures[0].1.contains("ledgers map"),
                "{:?}",
                stats.failures
            );
            assert!(log2.exists());
            assert_readable(&s, 3, 0..1);
        }
        assert_eq!(s.entry_log_ids(), vec![2, 3], "logs 0 and 1 went");
    }

    #[test]
    fn the_log_being_written_is_never_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let s = open(tmp.path());
        four_logs(&s);
        for l in [1, 2, 3] {
            s.delete_ledger(l).unwrap();
        }
        s.flush().unwrap();
        let stats = s.remove_dead_entry_logs().unwrap();
        assert_eq!(stats.logs_removed, vec![0, 1, 2]);
        assert!(stats.failures.is_empty(), "{:?}", stats.failures);
        assert_eq!(s.entry_log_ids(), vec![3]);
        assert!(s.entry_log_path(3).unwrap().exists());
        assert!(s.logs.remove(3).is_err(), "refused while written");
        // New entries of another ledger go on into log 3 and read back.
        put(&s, 4, 0..2);
        assert_readable(&s, 4, 0..2);
        assert_eq!(s.entry_log_ids(), vec![3]);
        // Once rotated, log 3 still holds live ledger 4: kept.
        s.close().unwrap();
        assert_eq!(
            s.remove_dead_entry_logs().unwrap().logs_removed,
            Vec::<u64>::new()
        );
        assert_readable(&s, 4, 0..2);
    }

    #[test]
    fn a_log_without_ledgers_map_is_scanned_and_a_damaged_one_kept() {
        let tmp = tempfile::tempdir().unwrap();
        {
            let s = open(tmp.path());
            put(&s, 1, 0..2);
        } // dropped without rotating: log 0 has no ledgers map
        let torn = {
            let s = open(tmp.path());
            assert_eq!(s.entry_log_ledgers(0).unwrap(), None);
            put(&s, 2, 0..2);
            s.entry_log_path(1).unwrap()
        };
        // A torn tail after log 1's records.
        {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&torn)
                .unwrap();
            f.write_all(&[0x17; 40]).unwrap();
        }
        let s = open(tmp.path());
        put(&s, 3, 0..1);
        assert_eq!(s.entry_log_ids(), vec![0, 1, 2]);
        s.delete_ledger(1).unwrap();
        s.delete_ledger(2).unwrap();
        s.flush().unwrap();
        let stats = s.remove_dead_entry_logs().unwrap();
        assert_eq!(stats.logs_removed, vec![0], "log 0 scanned whole");
        assert_eq!(stats.logs_uncertain, 1, "log 1 has unreadable bytes: kept");
        assert!(torn.exists());
        assert_readable(&s, 3, 0..1);
    }
}
