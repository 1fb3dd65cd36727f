//! Entry log compaction (BookKeeper's minor and major compaction): copies the live
//! entries of mostly-dead entry logs into the logs being written and removes the old
//! files, so the space of deleted ledgers comes back.
//!
//! A log's usage is the share of its record bytes that belong to ledgers not deleted
//! (from its ledgers map, or from a scan of its records when it has none). Logs below
//! the threshold are compacted, emptiest first, within the caller's limits. The index
//! decides what is live: an entry is copied only if the index points at this very log
//! and offset. Crash safety rests on two orders: per batch of entries, copy, fdatasync,
//! and only then commit the new locations to the index; per log, remove the file only
//! after those commits, and only once the index has no location left in it
//! (docs/formats/entry-log.md, "Compaction"). A log that fails (a corrupt record, say)
//! stays in place and the others are still compacted.

use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;

use super::{LedgerStore, LedgerStoreError};
use crate::entry_log::Location;
use crate::entry_log::format::{HEADER_LEN, RECORD_HEADER_LEN};
use crate::index::Relocation;

/// Entries are copied and committed in batches of about this many record bytes, each
/// under the flush lock: a flush (a checkpoint) waits for one batch at most, never for
/// the copy of a whole log of up to 1 GiB.
const BATCH_BYTES: u64 = 4 << 20;

/// Bounds on the work of one [`LedgerStore::compact`] call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionLimits {
    /// Live bytes (records of ledgers not deleted, by the logs' ledgers maps) copied at
    /// most; a log whose live bytes exceed what is left of this budget is skipped.
    pub max_bytes: u64,
    /// Logs compacted (or removed) at most.
    pub max_logs: usize,
}

impl CompactionLimits {
    /// No bound.
    pub const UNLIMITED: CompactionLimits = CompactionLimits {
        max_bytes: u64::MAX,
        max_logs: usize::MAX,
    };
}

impl Default for CompactionLimits {
    fn default() -> Self {
        Self::UNLIMITED
    }
}

/// A log whose compaction failed; it stays in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionFailure {
    pub log_id: u64,
    /// The log's file, if the store still knows it.
    pub path: Option<PathBuf>,
    /// What went wrong (a corrupt record names the file and offset).
    pub error: String,
}

/// What one [`LedgerStore::compact`] call did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactionStats {
    /// Logs whose live entries were copied and whose file was then removed.
    pub logs_compacted: u64,
    /// Logs removed without copying anything (no live entry was left in them).
    pub logs_deleted: u64,
    /// Bytes of the removed files minus the bytes of the records written for copies.
    pub bytes_reclaimed: u64,
    /// Entries whose index location now points at their copy.
    pub entries_moved: u64,
    /// Logs whose compaction failed (or whose usage could not be read).
    pub failures: Vec<CompactionFailure>,
}

/// How much of an entry log is still live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryLogUsage {
    pub log_id: u64,
    /// Record bytes of ledgers not deleted.
    pub live_bytes: u64,
    /// Record bytes of all ledgers.
    pub total_bytes: u64,
    /// Whether the counts come from the log's ledgers map (else from a scan).
    pub from_map: bool,
}

impl EntryLogUsage {
    /// live / total bytes; a log without records has usage 0.
    pub fn usage(&self) -> f64 {
        if self.total_bytes == 0 {
            0.0
        } else {
            self.live_bytes as f64 / self.total_bytes as f64
        }
    }
}

/// Points in a compaction that tests observe (crash images, races with flushes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// A batch of live entries was read from the old log; no lock is held.
    BatchRead,
    /// A batch's new locations were committed to the index; the flush lock is held.
    IndexCommitted,
}

/// A log chosen for compaction.
struct Candidate {
    usage: EntryLogUsage,
    /// The ledgers whose index entries may point into the log.
    ledgers: Vec<i64>,
}

impl LedgerStore {
    /// The usage of rotated (or left over) entry log `log_id`: how many of its record
    /// bytes belong to ledgers not deleted.
    pub fn entry_log_usage(&self, log_id: u64) -> Result<EntryLogUsage, LedgerStoreError> {
        let (deleted, _) = self.ledger_sets();
        Ok(self.candidate(log_id, &deleted, &[])?.usage)
    }

    /// Compacts the entry logs that are not being written and whose usage is below
    /// `threshold` (BookKeeper: minor 0.2, major 0.8), emptiest first, within `limits`:
    /// copies their live entries to the logs being written, makes the copies durable,
    /// points the index at them, then removes the old files. A log that fails is left
    /// in place and reported in [`CompactionStats::failures`]; the others go on, unless
    /// the failure concerns the whole store (a failed fdatasync, which also stops the
    /// store taking writes, or a full disk). Reads keep working throughout.
    pub fn compact(
        &self,
        threshold: f64,
        limits: CompactionLimits,
    ) -> Result<CompactionStats, LedgerStoreError> {
        self.compact_observed(threshold, limits, &mut |_| {})
    }

    /// [`LedgerStore::compact`], calling `observe` at each [`Step`].
    pub(crate) fn compact_observed(
        &self,
        threshold: f64,
        limits: CompactionLimits,
        observe: &mut dyn FnMut(Step),
    ) -> Result<CompactionStats, LedgerStoreError> {
        if !(0.0..=1.0).contains(&threshold) {
            return Err(LedgerStoreError::Config(format!(
                "compaction threshold {threshold} is not between 0 and 1"
            )));
        }
        let _one_at_a_time = self.compaction_lock.lock();
        Self::check_poisoned(&self.state.lock())?;
        let (deleted, known) = self.ledger_sets();
        let mut stats = CompactionStats::default();
        let mut chosen = Vec::new();
        for log_id in self.logs.rotated_log_ids() {
            match self.candidate(log_id, &deleted, &known) {
                Ok(c) if c.usage.usage() < threshold => chosen.push(c),
                Ok(_) => {}
                Err(e) => stats.failures.push(self.failure(log_id, &e)),
            }
        }
        chosen.sort_by(|a, b| {
            a.usage
                .usage()
                .total_cmp(&b.usage.usage())
                .then(a.usage.log_id.cmp(&b.usage.log_id))
        });
        let mut budget = limits.max_bytes;
        let mut done = 0;
        for c in chosen {
            if done >= limits.max_logs {
                break;
            }
            if c.usage.live_bytes > budget {
                continue;
            }
            budget -= c.usage.live_bytes;
            done += 1;
            if let Err(e) = self.compact_log(&c, &mut stats, observe) {
                let log_id = c.usage.log_id;
                tracing::warn!(log_id, error = %e, "entry log compaction failed; the log stays");
                stats.failures.push(self.failure(log_id, &e));
                if matches!(
                    e,
                    LedgerStoreError::SyncFailed { .. }
                        | LedgerStoreError::Poisoned(_)
                        | LedgerStoreError::NoSpace { .. }
                ) {
                    break;
                }
            }
        }
        tracing::info!(
            threshold,
            logs_compacted = stats.logs_compacted,
            logs_deleted = stats.logs_deleted,
            bytes_reclaimed = stats.bytes_reclaimed,
            entries_moved = stats.entries_moved,
            failures = stats.failures.len(),
            "entry log compaction done"
        );
        Ok(stats)
    }

    /// The ledgers marked deleted, and every ledger the store knows.
    fn ledger_sets(&self) -> (HashSet<i64>, Vec<i64>) {
        let st = self.state.lock();
        let deleted = st
            .ledgers
            .iter()
            .filter(|(_, i)| i.deleted)
            .map(|(&l, _)| l)
            .collect();
        (deleted, st.ledgers.keys().copied().collect())
    }

    fn failure(&self, log_id: u64, e: &LedgerStoreError) -> CompactionFailure {
        CompactionFailure {
            log_id,
            path: self.logs.path_of(log_id),
            error: e.to_string(),
        }
    }

    /// Reads a log's usage and the ledgers that may have entries in it.
    fn candidate(
        &self,
        log_id: u64,
        deleted: &HashSet<i64>,
        known: &[i64],
    ) -> Result<Candidate, LedgerStoreError> {
        let (counts, from_map) = if self.logs.file_len(log_id)? < HEADER_LEN as u64 {
            // Created just before a crash, its header never synced: it holds no record
            // the index could point at.
            (Vec::new(), false)
        } else {
            match self.logs.ledgers_map(log_id)? {
                Some(map) => (map, true),
                None => (self.logs.scan(log_id)?.ledgers, false),
            }
        };
        let total_bytes = counts.iter().map(|&(_, b)| b).sum();
        let live_bytes = counts
            .iter()
            .filter(|(l, _)| !deleted.contains(l))
            .map(|&(_, b)| b)
            .sum();
        let ledgers = if from_map {
            counts.iter().map(|&(l, _)| l).collect()
        } else {
            // A scan stops at the first bad record, so a damaged log may hold ledgers
            // the scan never saw: look for every ledger the store knows.
            let mut all: BTreeSet<i64> = known.iter().copied().collect();
            all.extend(counts.iter().map(|&(l, _)| l));
            all.into_iter().collect()
        };
        Ok(Candidate {
            usage: EntryLogUsage {
                log_id,
                live_bytes,
                total_bytes,
                from_map,
            },
            ledgers,
        })
    }

    /// Copies a log's live entries, commits their new locations, removes the log.
    fn compact_log(
        &self,
        c: &Candidate,
        stats: &mut CompactionStats,
        observe: &mut dyn FnMut(Step),
    ) -> Result<(), LedgerStoreError> {
        let log_id = c.usage.log_id;
        // The index is the authority on what is live here: an entry written again later
        // points elsewhere, a deleted ledger's entries are gone from it.
        let mut live = self.index.locations_in_log(&c.ledgers, log_id)?;
        live.sort_by_key(|&(_, _, loc)| loc.offset);
        let mut written = 0u64;
        for batch in batches(&live) {
            // The old log is no longer written: read it without holding any lock.
            let mut payloads = Vec::with_capacity(batch.len());
            for &(ledger, entry, loc) in batch {
                payloads.push(self.logs.read(loc, ledger, entry)?);
            }
            observe(Step::BatchRead);
            let _no_flush = self.flush_lock.lock();
            match self.copy_batch(batch, &payloads, &mut written, observe) {
                Ok(moved) => stats.entries_moved += moved,
                Err(e) => {
                    if matches!(e, LedgerStoreError::SyncFailed { .. }) {
                        // As after a failed flush: what the OS kept is unknown.
                        let mut st = self.state.lock();
                        if st.poisoned.is_none() {
                            st.poisoned = Some(e.to_string());
                        }
                    }
                    return Err(e);
                }
            }
        }
        // Remove the file only once the index points nowhere into it, checked under the
        // flush lock: a flush that filled this log and rotated it mid-way holds that lock
        // until its index commit, so its locations here (which `live` could not see) are
        // committed and visible now, and no flush can add any before the file is gone.
        let _no_flush = self.flush_lock.lock();
        if let Some(&(ledger, entry, _)) = self.index.locations_in_log(&c.ledgers, log_id)?.first()
        {
            tracing::info!(
                log_id,
                ledger,
                entry,
                "entry log kept: the index points into it again (a flush committed there during compaction); a later compaction takes it"
            );
            return Ok(());
        }
        let freed = self.logs.remove(log_id)?;
        stats.bytes_reclaimed += freed.saturating_sub(written);
        if live.is_empty() {
            stats.logs_deleted += 1;
        } else {
            stats.logs_compacted += 1;
        }
        Ok(())
    }

    /// Appends one batch of copies, makes them durable, then points the index at them
    /// (where it still holds the old location). The caller holds the flush lock.
    fn copy_batch(
        &self,
        batch: &[(i64, i64, Location)],
        payloads: &[bytes::Bytes],
        written: &mut u64,
        observe: &mut dyn FnMut(Step),
    ) -> Result<u64, LedgerStoreError> {
        Self::check_poisoned(&self.state.lock())?;
        let mut moves = Vec::with_capacity(batch.len());
        for (&(ledger, entry, from), payload) in batch.iter().zip(payloads) {
            let to = self.logs.append(ledger, entry, payload)?;
            *written += (RECORD_HEADER_LEN + payload.len()) as u64;
            moves.push(Relocation {
                ledger,
                entry,
                from,
                to,
            });
        }
        // The copies must be durable before the index points at them.
        self.logs.sync()?;
        let moved = self.index.relocate(&moves)?;
        observe(Step::IndexCommitted);
        Ok(moved)
    }
}

/// Splits the live entries into batches of about [`BATCH_BYTES`] record bytes.
fn batches(live: &[(i64, i64, Location)]) -> Vec<&[(i64, i64, Location)]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (i, &(_, _, loc)) in live.iter().enumerate() {
        bytes += RECORD_HEADER_LEN as u64 + u64::from(loc.len);
        if bytes >= BATCH_BYTES {
            out.push(&live[start..=i]);
            (start, bytes) = (i + 1, 0);
        }
    }
    if start < live.len() {
        out.push(&live[start..]);
    }
    out
}

#[cfg(test)]
mod tests;
