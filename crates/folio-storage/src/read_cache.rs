//! The read-ahead cache: entries read from an entry log just past the one a reader asked
//! for, kept for the reads that follow (BookKeeper's DbLedgerStorage read cache,
//! `dbStorage_readAheadCacheMaxSizeMb` and `dbStorage_readAheadCacheBatchSize`).
//!
//! A flush writes each ledger's entries in entry order, so a catch-up reader (a Pulsar
//! consumer with a backlog, a replication worker copying a fragment) asks next for what
//! follows on disk. On a miss the store reads one larger piece of the log from the
//! requested record on, and the run of following records of the same ledger with the
//! next entry ids lands here whole: one `pread` and one index scan serve the run.
//!
//! The cache holds runs, not entries: one insertion per run and a lookup of the run that
//! covers an entry (a bookie of a striped ensemble is asked for only some of a run's
//! entries, so per-entry bookkeeping was most of the cost, docs/performance.md). A run's
//! records are kept whole and their checksums verified when served: most of a run may
//! never be asked for. A record that fails the check is dropped and the read goes to the
//! disk, whose read names the damage.
//!
//! Only the copies the index points at are kept (the store checks before inserting), a
//! put of the same entry drops it (`remove`), as does a deleted ledger (`remove_ledger`);
//! the store checks deletion and the write cache before asking. Eviction is first-in
//! first-out by run under a byte bound, as BookKeeper's ring of segments.

use std::collections::{BTreeMap, HashMap, VecDeque};

use bytes::Bytes;

use crate::entry_log::format;

/// One run read ahead: the records of consecutive entries from its first.
#[derive(Debug)]
struct Run {
    /// Which insertion this is (eviction skips a run replaced since).
    seq: u64,
    bytes: u64,
    /// Records still held (`Some`).
    entries: u64,
    /// Whole records (header and payload); `None` once put again or found damaged.
    records: Vec<Option<Bytes>>,
}

/// Runs read ahead under a byte bound.
#[derive(Debug, Default)]
pub struct ReadCache {
    limit: u64,
    used: u64,
    /// ledger -> first entry of a run -> the run.
    ledgers: HashMap<i64, BTreeMap<i64, Run>>,
    /// Insertion order, for eviction: (ledger, first entry, seq) of each run held.
    order: VecDeque<(i64, i64, u64)>,
    seq: u64,
    /// The longest run held: a lookup looks that far back for a run covering an entry.
    longest: i64,
    hits: u64,
    misses: u64,
    /// Records held, over every run.
    entries: u64,
    read_ahead_entries: u64,
    read_ahead_bytes: u64,
}

/// What the read-ahead cache did since the store opened and what it holds: BookKeeper's
/// `DbLedgerStorageStats` read-cache figures (`read-cache-hits`, `read-cache-misses`,
/// `readahead-batch-count` and `-size`, `read-cache-size` and `-count`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReadCacheStats {
    /// Reads served from the cache.
    pub hits: u64,
    /// Reads the cache could not serve that went to an entry log.
    pub misses: u64,
    /// Entries read ahead into the cache, and their record bytes.
    pub read_ahead_entries: u64,
    pub read_ahead_bytes: u64,
    /// Entries held now, and the record bytes of the runs holding them.
    pub entries: u64,
    pub bytes: u64,
}

impl ReadCache {
    /// A cache of at most `limit` record bytes (0: nothing is cached).
    pub fn new(limit: u64) -> ReadCache {
        ReadCache {
            limit,
            ..ReadCache::default()
        }
    }

    pub fn enabled(&self) -> bool {
        self.limit > 0
    }

    /// The runs of `ledger` that may cover `entry`, latest first.
    fn covering(
        runs: &mut BTreeMap<i64, Run>,
        entry: i64,
        longest: i64,
    ) -> impl Iterator<Item = (&i64, &mut Run)> {
        runs.range_mut(entry.saturating_sub(longest - 1).min(entry)..=entry)
            .rev()
            .filter(move |(first, run)| entry - **first < run.records.len() as i64)
    }

    /// The entry's payload, if read ahead and its record checks out.
    pub fn get(&mut self, ledger: i64, entry: i64) -> Option<Bytes> {
        let runs = self.ledgers.get_mut(&ledger)?;
        for (first, run) in Self::covering(runs, entry, self.longest) {
            let slot = &mut run.records[(entry - first) as usize];
            let Some(record) = slot.clone() else {
                continue;
            };
            match format::decode_record(record, ledger, entry) {
                Ok(payload) => {
                    self.hits += 1;
                    return Some(payload);
                }
                Err(_) => {
                    *slot = None;
                    run.entries -= 1;
                    self.entries -= 1;
                }
            }
        }
        None
    }

    /// Reads served from the cache so far.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// A read the cache could not serve went to an entry log.
    pub fn note_miss(&mut self) {
        self.misses += 1;
    }

    pub fn stats(&self) -> ReadCacheStats {
        ReadCacheStats {
            hits: self.hits,
            misses: self.misses,
            read_ahead_entries: self.read_ahead_entries,
            read_ahead_bytes: self.read_ahead_bytes,
            entries: self.entries,
            bytes: self.used,
        }
    }

    /// Record bytes held.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Keeps a run of `ledger`'s records for entries `first`, `first + 1`, ... (`None`
    /// for one not to serve), evicting the oldest runs past the bound.
    pub fn insert_run(&mut self, ledger: i64, first: i64, records: Vec<Option<Bytes>>) {
        let bytes: u64 = records.iter().flatten().map(|r| r.len() as u64).sum();
        if records.is_empty() || bytes > self.limit {
            return;
        }
        self.seq += 1;
        self.longest = self.longest.max(records.len() as i64);
        let entries = records.iter().flatten().count() as u64;
        self.read_ahead_entries += entries;
        self.read_ahead_bytes += bytes;
        let run = Run {
            seq: self.seq,
            bytes,
            entries,
            records,
        };
        if let Some(old) = self.ledgers.entry(ledger).or_default().insert(first, run) {
            self.used -= old.bytes;
            self.entries -= old.entries;
            self.order.retain(|&o| o != (ledger, first, old.seq));
        }
        self.order.push_back((ledger, first, self.seq));
        self.used += bytes;
        self.entries += entries;
        while self.used > self.limit {
            let Some((l, f, seq)) = self.order.pop_front() else {
                break;
            };
            let Some(runs) = self.ledgers.get_mut(&l) else {
                continue;
            };
            if runs.get(&f).is_some_and(|r| r.seq == seq) {
                let gone = runs.remove(&f).expect("just seen");
                self.used -= gone.bytes;
                self.entries -= gone.entries;
                if runs.is_empty() {
                    self.ledgers.remove(&l);
                }
            }
        }
    }

    /// Drops one entry (put again: the new copy is the one to read).
    pub fn remove(&mut self, ledger: i64, entry: i64) {
        let Some(runs) = self.ledgers.get_mut(&ledger) else {
            return;
        };
        for (first, run) in Self::covering(runs, entry, self.longest) {
            if run.records[(entry - first) as usize].take().is_some() {
                run.entries -= 1;
                self.entries -= 1;
            }
        }
    }

    /// Drops every entry of a deleted ledger.
    pub fn remove_ledger(&mut self, ledger: i64) {
        if let Some(runs) = self.ledgers.remove(&ledger) {
            self.used -= runs.values().map(|r| r.bytes).sum::<u64>();
            self.entries -= runs.values().map(|r| r.entries).sum::<u64>();
            // Otherwise a cache that never fills would keep the order of every run
            // inserted for deleted ledgers.
            self.order.retain(|&(l, _, _)| l != ledger);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ledger: i64, entry: i64, n: usize) -> Bytes {
        let mut out = Vec::new();
        format::encode_record(&mut out, ledger, entry, &vec![entry as u8; n]);
        Bytes::from(out)
    }

    fn run(ledger: i64, first: i64, len: i64, n: usize) -> Vec<Option<Bytes>> {
        (first..first + len)
            .map(|e| Some(record(ledger, e, n)))
            .collect()
    }

    const REC: u64 = format::RECORD_HEADER_LEN as u64 + 10;

    #[test]
    fn serves_the_entries_of_a_run_and_evicts_the_oldest_run_past_the_bound() {
        let mut c = ReadCache::new(5 * REC);
        c.insert_run(1, 0, run(1, 0, 3, 10));
        assert_eq!(c.used(), 3 * REC);
        assert_eq!(c.get(1, 1), Some(Bytes::from(vec![1u8; 10])));
        assert_eq!(c.get(1, 3), None, "past the run");
        assert_eq!(c.get(2, 1), None, "another ledger");
        assert_eq!(c.hits(), 1);
        // A second run past the bound: the first goes whole.
        c.insert_run(1, 10, run(1, 10, 3, 10));
        assert_eq!(c.used(), 3 * REC);
        assert_eq!(c.get(1, 0), None);
        assert_eq!(c.get(1, 12), Some(Bytes::from(vec![12u8; 10])));
        // The same run read again replaces it, its bytes not counted twice.
        c.insert_run(1, 10, run(1, 10, 2, 10));
        assert_eq!(c.used(), 2 * REC);
        assert_eq!(c.get(1, 11).map(|p| p.len()), Some(10));
        assert_eq!(c.get(1, 12), None);
        // Larger than the whole bound: not kept, nothing evicted for it.
        c.insert_run(2, 0, run(2, 0, 6, 10));
        assert_eq!(c.get(2, 0), None);
        assert_eq!(c.used(), 2 * REC);
        c.note_miss();
        // Three runs read ahead (3 + 3 + 2 entries); the one left holds 2.
        let st = c.stats();
        assert_eq!(
            (
                st.hits,
                st.misses,
                st.read_ahead_entries,
                st.entries,
                st.bytes
            ),
            (3, 1, 8, 2, 2 * REC)
        );
        assert_eq!(st.read_ahead_bytes, 8 * REC);
    }

    #[test]
    fn a_put_a_deleted_ledger_and_a_damaged_record_leave_at_once() {
        let mut c = ReadCache::new(1000 * REC);
        c.insert_run(1, 0, run(1, 0, 5, 10));
        // Overlapping runs: a put drops the entry from each.
        c.insert_run(1, 2, run(1, 2, 5, 10));
        c.insert_run(2, 0, run(2, 0, 2, 10));
        c.remove(1, 3);
        assert_eq!(
            c.stats().entries,
            5 + 5 + 2 - 2,
            "3 was in both runs of ledger 1"
        );
        assert_eq!(c.get(1, 3), None);
        assert_eq!(c.get(1, 4).map(|p| p[0]), Some(4));
        let mut damaged = record(1, 20, 10).to_vec();
        *damaged.last_mut().unwrap() ^= 1;
        c.insert_run(
            1,
            20,
            vec![Some(Bytes::from(damaged)), Some(record(1, 21, 10))],
        );
        assert_eq!(c.get(1, 20), None, "the checksum is verified when served");
        assert_eq!(
            c.stats().entries,
            10 + 1,
            "the damaged record is no longer held"
        );
        assert_eq!(c.get(1, 21).map(|p| p[0]), Some(21));
        c.remove_ledger(1);
        assert_eq!(c.stats().entries, 2, "ledger 2's run");
        assert_eq!(c.get(1, 0), None);
        assert_eq!(c.get(1, 21), None);
        assert_eq!(c.used(), 2 * REC);
        assert_eq!(c.order.len(), 1, "only ledger 2's run is left to evict");
        assert_eq!(c.get(2, 1).map(|p| p[0]), Some(1));
        let mut off = ReadCache::new(0);
        assert!(!off.enabled());
        off.insert_run(1, 0, run(1, 0, 1, 1));
        assert_eq!(off.get(1, 0), None);
    }
}
