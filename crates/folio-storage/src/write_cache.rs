//! The write cache: entries put but not yet flushed to the entry logs, so that they can be
//! read at once and written to the logs later in (ledger, entry) order.
//!
//! It holds two generations, like BookKeeper's DbLedgerStorage: `active` receives puts,
//! and a flush turns it into `flushing`, which stays readable while the flush writes it
//! out and is dropped only once the index points at the flushed copies. The bound
//! (`limit`) covers both generations; `LedgerStore` blocks puts while [`WriteCache::has_room`]
//! says no. This type does no locking itself: `LedgerStore` keeps it under its mutex,
//! together with the ledger state that must change in step with it.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

/// Entries by (ledger, entry), ascending: the order a flush writes them in.
pub type EntryMap = BTreeMap<(i64, i64), Bytes>;

/// Two generations of unflushed entries under one byte bound.
#[derive(Debug)]
pub struct WriteCache {
    limit: u64,
    active: EntryMap,
    active_bytes: u64,
    flushing: Arc<EntryMap>,
    flushing_bytes: u64,
    /// Flushes finished so far (see [`WriteCache::flushes`]).
    flushes: u64,
}

fn bytes_of(m: &EntryMap) -> u64 {
    m.values().map(|b| b.len() as u64).sum()
}

impl WriteCache {
    pub fn new(limit: u64) -> WriteCache {
        WriteCache {
            limit,
            active: EntryMap::new(),
            active_bytes: 0,
            flushing: Arc::new(EntryMap::new()),
            flushing_bytes: 0,
            flushes: 0,
        }
    }

    /// Entry bytes held in both generations.
    pub fn used(&self) -> u64 {
        self.active_bytes + self.flushing_bytes
    }

    /// Entry bytes put since the last flush started: what the next flush writes.
    pub fn unflushed(&self) -> u64 {
        self.active_bytes
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Whether an entry of `len` bytes may be put now. An empty cache takes any entry,
    /// even one larger than the bound, so that such an entry cannot block forever.
    pub fn has_room(&self, len: u64) -> bool {
        Self::room_for(self.used(), self.limit, len)
    }

    /// [`WriteCache::has_room`] from figures read elsewhere (a lock-free mirror).
    pub fn room_for(used: u64, limit: u64, len: u64) -> bool {
        used == 0 || used.saturating_add(len) <= limit
    }

    /// Adds (or replaces) an entry in the active generation.
    pub fn insert(&mut self, ledger: i64, entry: i64, data: Bytes) {
        self.active_bytes += data.len() as u64;
        if let Some(old) = self.active.insert((ledger, entry), data) {
            self.active_bytes -= old.len() as u64;
        }
    }

    /// The newest cached copy of an entry.
    pub fn get(&self, ledger: i64, entry: i64) -> Option<Bytes> {
        self.active
            .get(&(ledger, entry))
            .or_else(|| self.flushing.get(&(ledger, entry)))
            .cloned()
    }

    /// Whether either generation holds the entry.
    pub fn contains(&self, ledger: i64, entry: i64) -> bool {
        self.active.contains_key(&(ledger, entry)) || self.flushing.contains_key(&(ledger, entry))
    }

    /// How many flushes finished: a reader that saw none finish while it read the index
    /// and the logs knows that every put since is still here.
    pub fn flushes(&self) -> u64 {
        self.flushes
    }

    /// Entry ids of `ledger` held in either generation (ascending, may repeat ids the
    /// index also has; the caller merges).
    pub fn entry_ids(&self, ledger: i64) -> Vec<i64> {
        let range = (ledger, i64::MIN)..=(ledger, i64::MAX);
        let mut ids: Vec<i64> = self
            .active
            .range(range.clone())
            .chain(self.flushing.range(range))
            .map(|(&(_, e), _)| e)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Drops a ledger's entries from the active generation (the flushing one is shared
    /// with a running flush; the caller hides deleted ledgers from reads).
    pub fn remove_ledger(&mut self, ledger: i64) {
        let keys: Vec<(i64, i64)> = self
            .active
            .range((ledger, i64::MIN)..=(ledger, i64::MAX))
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            if let Some(b) = self.active.remove(&k) {
                self.active_bytes -= b.len() as u64;
            }
        }
    }

    /// Starts a flush: the active generation joins the flushing one (which is non-empty
    /// only if the previous flush failed), and a snapshot of it is returned to write out.
    pub fn start_flush(&mut self) -> Arc<EntryMap> {
        let active = std::mem::take(&mut self.active);
        self.active_bytes = 0;
        if self.flushing.is_empty() {
            self.flushing = Arc::new(active);
        } else {
            let merged = Arc::make_mut(&mut self.flushing);
            merged.extend(active);
        }
        self.flushing_bytes = bytes_of(&self.flushing);
        self.flushing.clone()
    }

    /// Ends a successful flush: the flushed generation is released.
    pub fn finish_flush(&mut self) {
        self.flushing = Arc::new(EntryMap::new());
        self.flushing_bytes = 0;
        self.flushes += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(n: usize) -> Bytes {
        Bytes::from(vec![n as u8; n])
    }

    #[test]
    fn accounting_replacement_and_room() {
        let mut c = WriteCache::new(10);
        assert!(c.has_room(100), "an empty cache takes an oversized entry");
        c.insert(1, 0, b(4));
        c.insert(1, 0, b(6));
        assert_eq!(c.used(), 6, "a re-put replaces, it does not add");
        assert!(c.has_room(4));
        assert!(!c.has_room(5));
        assert_eq!(c.get(1, 0), Some(b(6)));
        assert_eq!(c.get(1, 1), None);
    }

    #[test]
    fn flushing_generation_stays_readable_and_counted_until_finished() {
        let mut c = WriteCache::new(100);
        c.insert(1, 1, b(3));
        c.insert(1, 0, b(2));
        c.insert(2, 0, b(1));
        let snap = c.start_flush();
        assert_eq!(
            snap.keys().copied().collect::<Vec<_>>(),
            vec![(1, 0), (1, 1), (2, 0)]
        );
        c.insert(1, 2, b(5));
        assert_eq!(c.used(), 11);
        assert_eq!(c.get(1, 1), Some(b(3)));
        assert_eq!(c.entry_ids(1), vec![0, 1, 2]);
        c.finish_flush();
        assert_eq!(c.used(), 5);
        assert_eq!(c.get(1, 1), None);
        assert_eq!(c.entry_ids(1), vec![2]);
    }

    #[test]
    fn a_failed_flush_is_retried_with_the_new_entries() {
        let mut c = WriteCache::new(100);
        c.insert(1, 0, b(2));
        let _first = c.start_flush();
        c.insert(1, 1, b(3));
        c.insert(1, 0, b(4)); // re-put while the first flush is pending
        let second = c.start_flush();
        assert_eq!(second.len(), 2);
        assert_eq!(second.get(&(1, 0)), Some(&b(4)), "the newer copy wins");
        assert_eq!(c.used(), 7);
    }

    #[test]
    fn remove_ledger_frees_its_bytes() {
        let mut c = WriteCache::new(100);
        c.insert(1, 0, b(2));
        c.insert(2, 0, b(3));
        c.remove_ledger(1);
        assert_eq!(c.used(), 3);
        assert_eq!(c.get(1, 0), None);
        assert_eq!(c.get(2, 0), Some(b(3)));
    }
}
