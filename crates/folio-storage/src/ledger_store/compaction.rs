//! Entry log compaction (BookKeeper's minor and major compaction): copies the live
//! entries of mostly-dead entry logs into the logs being written and removes the old
//! files, so the space of deleted ledgers comes back.
//!
//! A log's usage is the share of its record bytes that belong to ledgers not deleted, or
//! deleted with the deletion not yet flushed (their entries are still copied), from its
//! ledgers map, or from a scan of its records when it has none. Logs below
//! the threshold are compacted, emptiest first, within the caller's limits.
//!
//! A log that lost entries to an earlier compaction which then stopped short of removing
//! it (a crash, a failed directory sync, a corrupt record in a later batch) would keep
//! the usage of its ledgers map forever, be picked never again and leak its space. The
//! index records such logs, in the same transaction as the relocation
//! ([`crate::index::LedgerIndex::compacted_logs`]); for them the live bytes are what the
//! index still points at in the log, which is exact, so a log the index no longer points
//! into has usage 0 and goes at the next round (garbage collection removes it too). Only
//! those logs pay for an index scan: the ledgers maps stay right for every other log,
//! and reading the whole index every round would cost as much as the index is large.
//! The record is only a hint for the usage; removal is decided by the index alone.
//!
//! The index decides what is live: an entry is copied only if the index points at this
//! very log and offset. Crash safety rests on two orders: per batch of entries, copy,
//! fdatasync, and only then commit the new locations to the index; per log, remove the
//! file only after those commits, and only once the index has no location left in it
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
    /// Record bytes copied at most: a log whose live entries (what the index points at in
    /// it when its turn comes, a ledger deleted but not yet flushed included) exceed what
    /// is left of this budget is skipped.
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
    /// Record bytes of ledgers not deleted (or deleted with the deletion not yet flushed,
    /// since compaction still copies those); for a log an earlier compaction moved
    /// entries out of, the record bytes the index still points at in it.
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

/// What [`LedgerStore::compact_log`] did with a log that did not fail.
enum Outcome {
    /// Compacted, removed, or kept because a flush points into it again.
    Done,
    /// Its live entries exceed the byte budget left: untouched.
    OverBudget,
}

/// Record bytes (header and payload) of the entries at these locations.
fn record_bytes(locations: &[(i64, i64, Location)]) -> u64 {
    locations
        .iter()
        .map(|&(_, _, loc)| RECORD_HEADER_LEN as u64 + u64::from(loc.len))
        .sum()
}

/// A log chosen for compaction.
struct Candidate {
    usage: EntryLogUsage,
    /// The ledgers whose index entries may point into the log.
    ledgers: Vec<i64>,
}

impl LedgerStore {
    /// The usage of rotated (or left over) entry log `log_id`: how many of its record
    /// bytes are live (see [`EntryLogUsage::live_bytes`]).
    pub fn entry_log_usage(&self, log_id: u64) -> Result<EntryLogUsage, LedgerStoreError> {
        let (deleted, known) = self.ledger_sets();
        let compacted: HashSet<u64> = self.index.compacted_logs()?.into_iter().collect();
        Ok(self.candidate(log_id, &deleted, &known, &compacted)?.usage)
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
        let compacted: HashSet<u64> = self.index.compacted_logs()?.into_iter().collect();
        let mut stats = CompactionStats::default();
        let mut chosen = Vec::new();
        let rotated = {
            // With the staged flushes committed and no flush running, the logs rotated so
            // far hold no staged location: compaction's lookups and relocations see the
            // committed index whole for them (later flushes write only to open logs).
            let _no_flush = self.flush_lock.lock();
            self.commit_staged_index()?;
            self.logs.rotated_log_ids()
        };
        for log_id in rotated {
            match self.candidate(log_id, &deleted, &known, &compacted) {
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
            let outcome = self.compact_log(&c, &mut budget, &mut stats, observe);
            if matches!(outcome, Ok(Outcome::OverBudget)) {
                continue;
            }
            done += 1;
            if let Err(e) = outcome {
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

    /// The ledgers marked deleted with the deletion flushed (their entries are gone from
    /// the index, so compaction copies none), and every ledger the store knows.
    fn ledger_sets(&self) -> (HashSet<i64>, Vec<i64>) {
        let st = self.state.lock();
        let deleted = st
            .ledgers
            .iter()
            .filter(|(l, i)| i.deleted && !st.deleted_pending.contains(l))
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
        compacted: &HashSet<u64>,
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
        let ledgers: Vec<i64> = if from_map {
            counts.iter().map(|&(l, _)| l).collect()
        } else {
            // A scan stops at the first bad record, so a damaged log may hold ledgers
            // the scan never saw: look for every ledger the store knows.
            let mut all: BTreeSet<i64> = known.iter().copied().collect();
            all.extend(counts.iter().map(|&(l, _)| l));
            all.into_iter().collect()
        };
        let live_bytes = if compacted.contains(&log_id) {
            // Entries moved out of it: the map overstates what is live, the index knows.
            record_bytes(&self.index.locations_in_log(&ledgers, log_id)?)
        } else {
            counts
                .iter()
                .filter(|(l, _)| !deleted.contains(l))
                .map(|&(_, b)| b)
                .sum()
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

    /// Copies a log's live entries, commits their new locations, removes the log; or
    /// does nothing if they do not fit in what is left of `budget`.
    fn compact_log(
        &self,
        c: &Candidate,
        budget: &mut u64,
        stats: &mut CompactionStats,
        observe: &mut dyn FnMut(Step),
    ) -> Result<Outcome, LedgerStoreError> {
        let log_id = c.usage.log_id;
        // The index is the authority on what is live here: an entry written again later
        // points elsewhere, a deleted ledger's entries are gone from it (a deletion not
        // yet flushed still has them, and they are copied).
        let mut live = self.index.locations_in_log(&c.ledgers, log_id)?;
        // Charge what is copied (every record of `live` is appended, even one that a
        // later flush writes again meanwhile), not the usage's estimate.
        let to_copy = record_bytes(&live);
        if to_copy > *budget {
            return Ok(Outcome::OverBudget);
        }
        *budget -= to_copy;
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
        let Some(freed) = self.remove_unreferenced_log(log_id, &c.ledgers)? else {
            return Ok(Outcome::Done);
        };
        stats.bytes_reclaimed += freed.saturating_sub(written);
        if live.is_empty() {
            stats.logs_deleted += 1;
        } else {
            stats.logs_compacted += 1;
        }
        Ok(Outcome::Done)
    }

    /// Removes rotated log `log_id` if the index points nowhere into it (`ledgers` are
    /// all the ledgers that may have entries there), then forgets that entries were moved
    /// out of it; returns the bytes freed, or `None` if the log is kept.
    ///
    /// Checked under the flush lock: a flush that filled this log and rotated it mid-way
    /// holds that lock until its index commit, so its locations here are committed and
    /// visible now, and no flush can add any before the file is gone. The record of a
    /// compacted log is forgotten only after the removal (file and directory entry) is
    /// durable: forgotten first, a crash could leave the log with a ledgers map that
    /// overstates its live bytes and nothing to say so.
    pub(super) fn remove_unreferenced_log(
        &self,
        log_id: u64,
        ledgers: &[i64],
    ) -> Result<Option<u64>, LedgerStoreError> {
        let _no_flush = self.flush_lock.lock();
        // Decided on the committed index: a staged deletion could be forgotten by a crash,
        // and its ledger's committed locations would then point into the removed log.
        self.commit_staged_index()?;
        if let Some(&(ledger, entry, _)) = self.index.locations_in_log(ledgers, log_id)?.first() {
            tracing::info!(
                log_id,
                ledger,
                entry,
                "entry log kept: the index points into it (a flush committed there during compaction, say); a later round takes it"
            );
            return Ok(None);
        }
        let freed = self.logs.remove(log_id)?;
        if let Err(e) = self.index.forget_compacted_log(log_id) {
            // The file is gone; a stale record costs an index scan if the id comes back.
            tracing::warn!(log_id, error = %e, "cannot forget the removed log's compaction record");
        }
        Ok(Some(freed))
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
            let crc = crate::entry_log::format::payload_record_crc(ledger, entry, payload);
            let to = self.logs.append(ledger, entry, payload, crc)?;
            *written += (RECORD_HEADER_LEN + payload.len()) as u64;
            moves.push(Relocation {
                ledger,
                entry,
                from,
                to,
            });
        }
        if self.index_first_for_tests() {
            // The broken order of the negative control.
            let moved = self.index.relocate(&moves)?;
            self.logs.sync()?;
            observe(Step::IndexCommitted);
            return Ok(moved);
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
