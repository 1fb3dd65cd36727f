//! The read-ahead cache: entries read from an entry log just past the one a reader asked
//! for, kept for the reads that follow (BookKeeper's DbLedgerStorage read cache,
//! `dbStorage_readAheadCacheMaxSizeMb` and `dbStorage_readAheadCacheBatchSize`).
//!
//! A flush writes each ledger's entries in entry order, so a catch-up reader (a Pulsar
//! consumer with a backlog, a replication worker copying a fragment) asks next for what
//! follows on disk. On a miss the store reads one larger piece of the log from the
//! requested record on, and every following record of the same ledger with the next
//! entry id, checked as any read is (length, CRC32C, ledger and entry), lands here: one
//! `pread` and one index lookup serve the whole run. That matters most when entry logs
//! are written with direct I/O and the page cache no longer holds them.
//!
//! Only the copy the index points at is kept (a log may hold older ones), and a put of
//! the same entry drops it (`remove`), as does a deleted ledger (`remove_ledger`); the
//! store checks deletion and the write cache before asking.
//! Eviction is first-in first-out under a byte bound, as BookKeeper's ring of segments.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

/// Read-ahead entries under a byte bound.
#[derive(Debug, Default)]
pub struct ReadCache {
    limit: u64,
    used: u64,
    entries: HashMap<(i64, i64), Bytes>,
    /// Insertion order, for eviction; may name entries already removed.
    order: VecDeque<(i64, i64)>,
    hits: u64,
}

impl ReadCache {
    /// A cache of at most `limit` payload bytes (0: nothing is cached).
    pub fn new(limit: u64) -> ReadCache {
        ReadCache {
            limit,
            ..ReadCache::default()
        }
    }

    pub fn enabled(&self) -> bool {
        self.limit > 0
    }

    /// The entry, if read ahead.
    pub fn get(&mut self, ledger: i64, entry: i64) -> Option<Bytes> {
        let hit = self.entries.get(&(ledger, entry)).cloned();
        if hit.is_some() {
            self.hits += 1;
        }
        hit
    }

    /// Reads served from the cache so far.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// Payload bytes held.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Keeps an entry read ahead, evicting the oldest ones past the bound.
    pub fn insert(&mut self, ledger: i64, entry: i64, data: Bytes) {
        let len = data.len() as u64;
        if len > self.limit {
            return;
        }
        if let Some(old) = self.entries.insert((ledger, entry), data) {
            self.used -= old.len() as u64;
        } else {
            self.order.push_back((ledger, entry));
        }
        self.used += len;
        while self.used > self.limit {
            let Some(key) = self.order.pop_front() else {
                break;
            };
            if let Some(old) = self.entries.remove(&key) {
                self.used -= old.len() as u64;
            }
        }
    }

    /// Drops one entry (put again: the new copy is the one to read).
    pub fn remove(&mut self, ledger: i64, entry: i64) {
        if let Some(old) = self.entries.remove(&(ledger, entry)) {
            self.used -= old.len() as u64;
        }
    }

    /// Drops every entry of a deleted ledger.
    pub fn remove_ledger(&mut self, ledger: i64) {
        let mut freed = 0;
        self.entries.retain(|&(l, _), d| {
            let keep = l != ledger;
            if !keep {
                freed += d.len() as u64;
            }
            keep
        });
        self.used -= freed;
        self.order.retain(|&(l, _)| l != ledger);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(n: usize) -> Bytes {
        Bytes::from(vec![7u8; n])
    }

    #[test]
    fn evicts_the_oldest_past_the_bound_and_counts_hits() {
        let mut c = ReadCache::new(100);
        for e in 0..5 {
            c.insert(1, e, b(30));
        }
        assert_eq!(c.used(), 90);
        assert_eq!(c.get(1, 0), None);
        assert_eq!(c.get(1, 1), None);
        assert_eq!(c.get(1, 4).map(|d| d.len()), Some(30));
        assert_eq!(c.hits(), 1);
        // Replacing an entry does not count its bytes twice.
        c.insert(1, 4, b(10));
        assert_eq!(c.used(), 70);
        // Larger than the whole bound: not kept, nothing evicted for it.
        c.insert(2, 0, b(101));
        assert_eq!(c.get(2, 0), None);
        assert_eq!(c.used(), 70);
    }

    #[test]
    fn a_deleted_ledger_leaves_at_once_and_a_zero_bound_keeps_nothing() {
        let mut c = ReadCache::new(1000);
        c.insert(1, 0, b(10));
        c.insert(2, 0, b(20));
        c.insert(1, 1, b(30));
        c.remove_ledger(1);
        assert_eq!(c.get(1, 0), None);
        assert_eq!(c.get(1, 1), None);
        assert_eq!(c.used(), 20);
        let mut off = ReadCache::new(0);
        assert!(!off.enabled());
        off.insert(1, 0, b(1));
        assert_eq!(off.get(1, 0), None);
    }
}
