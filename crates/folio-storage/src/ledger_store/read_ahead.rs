//! Read-ahead for catch-up readers: a read that misses every cache also reads the run of
//! the ledger's next entries that follow it in the entry log, and keeps them in the read
//! cache (BookKeeper's DbLedgerStorage read-ahead; see `read_cache.rs`).
//!
//! Three things make it pay where reading each entry alone did not (docs/performance.md,
//! "Read-ahead that pays"):
//! - a run whose bytes are in the page cache is read without waiting
//!   (`LedgerStore::get_entry_nowait`), so the bookie's connection task serves the miss
//!   and the hits after it, with no hand-off to the read pool;
//! - a blocking read inside a run another thread is reading waits for that run instead of
//!   reading it again ([`RunsInFlight`]): the reads a client keeps in flight miss together;
//! - the run is checked against one index range scan, not a lookup per entry.

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

use super::{InMemory, LedgerStore, LedgerStoreError};
use crate::entry_log::Location;
use crate::entry_log::log_file::RunEntry;

/// Runs being read from the disk, as (ledger, first entry, last entry that may be in it).
#[derive(Default)]
pub(super) struct RunsInFlight {
    runs: Mutex<Vec<(i64, i64, i64)>>,
    done: Condvar,
    /// Reads that waited for another's run.
    #[cfg(test)]
    pub(super) waits: std::sync::atomic::AtomicU64,
    /// Test seam: runs inside a blocking run read once the run is registered, before the
    /// disk is read.
    #[cfg(test)]
    pub(super) during_read: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
}

/// A run registered in [`RunsInFlight`]; leaving it (read or failed) wakes the waiters.
struct RunGuard<'a> {
    runs: &'a RunsInFlight,
    run: (i64, i64, i64),
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        let mut runs = self.runs.runs.lock();
        if let Some(i) = runs.iter().position(|r| *r == self.run) {
            runs.swap_remove(i);
        }
        self.runs.done.notify_all();
    }
}

impl LedgerStore {
    /// How many bytes a run read from `loc` reads: the record and `read_ahead_batch_size`
    /// more of its size, within `read_ahead_batch_bytes`.
    fn run_bytes(&self, loc: Location) -> usize {
        let record = (crate::entry_log::format::RECORD_HEADER_LEN + loc.len as usize) as u64;
        record
            .saturating_mul(self.read_ahead_batch_size as u64 + 1)
            .min(self.read_ahead_batch_bytes as u64) as usize
    }

    /// The last entry a run read from `loc` (entry `entry`) can hold, if the ledger's
    /// next entries are as large.
    fn run_end(&self, loc: Location, entry: i64) -> i64 {
        let record = crate::entry_log::format::RECORD_HEADER_LEN + loc.len as usize;
        entry + (self.run_bytes(loc) / record).saturating_sub(1) as i64
    }

    /// With read-ahead, the entry at `loc` read from the page cache with the run after
    /// it, which goes to the read cache; `None` when the record is not all cached.
    pub(super) fn read_run_nowait(
        &self,
        loc: Location,
        ledger: i64,
        entry: i64,
        flushes: u64,
    ) -> Option<Bytes> {
        let (data, run) = self.logs.read_run_nowait(
            loc,
            ledger,
            entry,
            self.run_bytes(loc),
            self.read_ahead_batch_size,
        )?;
        self.keep_run(ledger, run, flushes);
        Some(data)
    }

    /// If another thread is reading a run that may hold `entry`, waits for it and
    /// answers from what it left in memory; `None` when there was no such run or it did
    /// not hold the entry (the caller then reads it itself).
    pub(super) fn wait_for_run(
        &self,
        ledger: i64,
        entry: i64,
    ) -> Result<Option<Bytes>, LedgerStoreError> {
        let covers = |runs: &[(i64, i64, i64)]| {
            runs.iter()
                .any(|&(l, first, last)| l == ledger && first <= entry && entry <= last)
        };
        let mut runs = self.runs_in_flight.runs.lock();
        if !covers(&runs) {
            return Ok(None);
        }
        #[cfg(test)]
        self.runs_in_flight
            .waits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        while covers(&runs) {
            self.runs_in_flight.done.wait(&mut runs);
        }
        drop(runs);
        match self.find_in_memory(ledger, entry)? {
            InMemory::Found(data) => Ok(Some(data)),
            InMemory::Absent | InMemory::OnDisk { .. } => Ok(None),
        }
    }

    /// Reads the entry at `loc` and the run after it from the disk, the run registered
    /// meanwhile so that reads inside it wait for it ([`LedgerStore::wait_for_run`]).
    pub(super) fn read_run_blocking(
        &self,
        loc: Location,
        ledger: i64,
        entry: i64,
        flushes: u64,
    ) -> Result<Bytes, LedgerStoreError> {
        let run = (ledger, entry, self.run_end(loc, entry));
        self.runs_in_flight.runs.lock().push(run);
        let _guard = RunGuard {
            runs: &self.runs_in_flight,
            run,
        };
        #[cfg(test)]
        if let Some(f) = &*self.runs_in_flight.during_read.lock() {
            f();
        }
        let (data, run) = self.logs.read_run(
            loc,
            ledger,
            entry,
            self.run_bytes(loc),
            self.read_ahead_batch_size,
        )?;
        self.keep_run(ledger, run, flushes);
        Ok(data)
    }

    /// Keeps the entries of a run read ahead that the index points at (the log may hold
    /// older copies: a failed flush rewrites its entries elsewhere, a compaction cut short
    /// by a crash leaves both), up to the first that it does not. Nothing is kept if the
    /// ledger was deleted meanwhile or a flush finished since the write cache showed
    /// `flushes` (a put flushed since then would have a newer copy than the index said).
    fn keep_run(&self, ledger: i64, run: Vec<RunEntry>, flushes: u64) {
        let (Some(first), Some(last)) = (run.first(), run.last()) else {
            return;
        };
        // An index error ends the run; the entry asked for was already read.
        let Ok(indexed) = self.index.locations(ledger, first.0, last.0) else {
            return;
        };
        let live: Vec<(i64, Bytes)> = run
            .into_iter()
            .zip(indexed)
            .take_while(|((e, at, _), (ie, iloc))| e == ie && at == iloc)
            .map(|((e, _, record), _)| (e, record))
            .collect();
        let Some(&(first, _)) = live.first() else {
            return;
        };
        let st = self.state.lock();
        if st.cache.flushes() == flushes && st.ledgers.get(&ledger).is_some_and(|i| !i.deleted) {
            // A put since the index lookup has the newer copy, still in the write cache
            // (no flush finished), which reads look at first.
            let records = live
                .into_iter()
                .map(|(e, record)| (!st.cache.contains(ledger, e)).then_some(record))
                .collect();
            self.read_cache.lock().insert_run(ledger, first, records);
        }
    }
}
