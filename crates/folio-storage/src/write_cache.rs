//! The write cache: entries put but not yet flushed to the entry logs, so that they can be
//! read at once and written to the logs later in (ledger, entry) order.
//!
//! It holds two generations, like BookKeeper's DbLedgerStorage: `active` receives puts,
//! and a flush turns it into `flushing`, which stays readable while the flush writes it
//! out and is dropped only once the index points at the flushed copies. The bound
//! (`limit`) covers both generations; `LedgerStore` blocks puts while [`WriteCache::has_room`]
//! says no. This type does no locking itself: `LedgerStore` keeps it under its mutex,
//! together with the ledger state that must change in step with it.
//!
//! Like BookKeeper's WriteCache, entries are copied into large chunks that are used again
//! once their generation is flushed, rather than kept in the buffers they arrived in: a
//! network buffer that a cached entry pinned until the next checkpoint made every read of
//! the socket start a fresh allocation, and fresh memory costs a page fault per page (with
//! the tree below, a fifth of the bookie's CPU per 100-byte entry; docs/performance.md).
//! Entries of 16 KiB and more arrive in a buffer of their own and are kept in it.
//! An entry is a [`Bytes`] slice of its chunk,
//! so reads and the flush still share it without copying; a chunk goes back to the spare
//! list only when nothing holds a slice of it any more. Each ledger's entries are kept in
//! a vector sorted by entry id (they arrive in order), not one tree node per entry; a
//! flushed generation's vectors are kept, emptied, for the next generation's ledgers,
//! since growing them again from empty after every flush cost fresh memory (page faults)
//! and copies at every doubling.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use folio_types::IdHashMap;

use crate::entry_log::format::payload_record_crc;

/// Chunks are `limit / CHUNKS_PER_LIMIT`, within [`MIN_CHUNK`, `MAX_CHUNK`].
const CHUNKS_PER_LIMIT: u64 = 16;
const MIN_CHUNK: usize = 64 * 1024;
const MAX_CHUNK: usize = 1024 * 1024;
/// Entries this large are kept in the buffer they came in. The frame decoder reads a frame
/// of 16 KiB or more into a buffer of its own, so keeping it pins nothing else, while a
/// copy costs a pass over the payload and a second copy of it in memory until the
/// checkpoint (at 64 KiB, 42 MB of chunks beside 29 MB of frames per bookie; heaptrack,
/// docs/performance.md).
const OWN_BUFFER_MIN: usize = 16 * 1024;

/// The entry log record checksum of an entry about to be put, if it is computed now:
/// for an entry of [`OWN_BUFFER_MIN`] or more, so that the journal's record of the add
/// and the flush's entry log record both use it, one pass over the payload instead of
/// three (a pass over a 64 KiB entry is a few µs; the bookie's CPU per such entry fell
/// 2.7%). A smaller entry is checksummed by the journal thread and by the flush, as
/// before: on the connection's task instead, its pass cost that task more than it saved
/// the others (docs/performance.md, "2026-12-07 (01:14)").
pub fn record_crc_at_put(ledger: i64, entry: i64, data: &[u8]) -> Option<u32> {
    (data.len() >= OWN_BUFFER_MIN).then(|| payload_record_crc(ledger, entry, data))
}

/// One ledger's entries in a generation, sorted by entry id.
type EntryList = Vec<(i64, Bytes)>;

/// One generation of entries: per ledger, sorted by entry id.
#[derive(Debug, Default)]
pub struct Generation {
    ledgers: IdHashMap<i64, EntryList>,
    /// [`record_crc_at_put`] of the entries that have one (those of [`OWN_BUFFER_MIN`] or
    /// more), by (ledger, entry): kept apart so that the lists of small entries stay 40
    /// bytes an entry.
    big_crcs: IdHashMap<(i64, i64), u32>,
    /// The chunks this generation's entries were copied into: each handle is the unused
    /// end of its chunk (the last one is still being filled).
    chunks: Vec<BytesMut>,
    bytes: u64,
    count: usize,
}

impl Generation {
    /// Entries held.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Entry bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Ledgers with an entry here.
    pub fn ledger_count(&self) -> usize {
        self.ledgers.len()
    }

    fn get(&self, ledger: i64, entry: i64) -> Option<&Bytes> {
        let v = self.ledgers.get(&ledger)?;
        v.binary_search_by_key(&entry, |(e, _)| *e)
            .ok()
            .map(|i| &v[i].1)
    }

    /// The entry log record checksum of an entry held here (`data` is its payload).
    pub fn record_crc(&self, ledger: i64, entry: i64, data: &[u8]) -> u32 {
        let kept = (data.len() >= OWN_BUFFER_MIN)
            .then(|| self.big_crcs.get(&(ledger, entry)))
            .flatten();
        match kept {
            Some(crc) => *crc,
            None => payload_record_crc(ledger, entry, data),
        }
    }

    /// Adds or replaces; entries of a ledger usually arrive in order, so this is a push.
    /// A ledger new to this generation takes an empty list from `spare` if there is one.
    /// `crc`: the entry's [`record_crc_at_put`].
    fn put(
        &mut self,
        ledger: i64,
        entry: i64,
        data: Bytes,
        crc: Option<u32>,
        spare: &mut Vec<EntryList>,
    ) {
        if let Some(crc) = crc {
            self.big_crcs.insert((ledger, entry), crc);
        }
        let v = self
            .ledgers
            .entry(ledger)
            .or_insert_with(|| spare.pop().unwrap_or_default());
        self.bytes += data.len() as u64;
        match v.last() {
            Some((last, _)) if *last >= entry => {
                match v.binary_search_by_key(&entry, |(e, _)| *e) {
                    Ok(i) => {
                        let old = std::mem::replace(&mut v[i].1, data);
                        self.bytes -= old.len() as u64;
                        // A large entry replaced by a small one: its checksum goes too.
                        if crc.is_none() && old.len() >= OWN_BUFFER_MIN {
                            self.big_crcs.remove(&(ledger, entry));
                        }
                    }
                    Err(i) => {
                        v.insert(i, (entry, data));
                        self.count += 1;
                    }
                }
            }
            _ => {
                v.push((entry, data));
                self.count += 1;
            }
        }
    }

    fn remove_ledger(&mut self, ledger: i64) {
        if let Some(v) = self.ledgers.remove(&ledger) {
            self.count -= v.len();
            self.bytes -= v.iter().map(|(_, b)| b.len() as u64).sum::<u64>();
        }
        if !self.big_crcs.is_empty() {
            self.big_crcs.retain(|(l, _), _| *l != ledger);
        }
    }

    /// Every entry in (ledger, entry) order: the order a flush writes them in.
    pub fn iter(&self) -> impl Iterator<Item = (i64, i64, &Bytes)> {
        // Sorted with their vectors, so that each ledger is not looked up again.
        let mut ledgers: Vec<(i64, &EntryList)> =
            self.ledgers.iter().map(|(l, v)| (*l, v)).collect();
        ledgers.sort_unstable_by_key(|(l, _)| *l);
        ledgers
            .into_iter()
            .flat_map(|(l, v)| v.iter().map(move |(e, data)| (l, *e, data)))
    }
}

/// Two generations of unflushed entries under one byte bound.
#[derive(Debug)]
pub struct WriteCache {
    limit: u64,
    chunk: usize,
    active: Generation,
    flushing: Arc<Generation>,
    /// Chunks whose entries are all gone, ready to be filled again.
    spare: Vec<BytesMut>,
    /// A flushed generation's per-ledger lists, emptied, for ledgers of the next ones.
    spare_lists: Vec<EntryList>,
    /// Flushes finished so far (see [`WriteCache::flushes`]).
    flushes: u64,
}

impl WriteCache {
    pub fn new(limit: u64) -> WriteCache {
        WriteCache {
            limit,
            chunk: ((limit / CHUNKS_PER_LIMIT) as usize).clamp(MIN_CHUNK, MAX_CHUNK),
            active: Generation::default(),
            flushing: Arc::new(Generation::default()),
            spare: Vec::new(),
            spare_lists: Vec::new(),
            flushes: 0,
        }
    }

    /// Entry bytes held in both generations.
    pub fn used(&self) -> u64 {
        self.active.bytes + self.flushing.bytes
    }

    /// Entry bytes put since the last flush started: what the next flush writes.
    pub fn unflushed(&self) -> u64 {
        self.active.bytes
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

    /// Adds (or replaces) an entry in the active generation, copying it into a chunk
    /// unless it is [`OWN_BUFFER_MIN`] or larger (such an entry keeps its own buffer).
    /// `crc` is [`record_crc_at_put`] of the entry, computed by the caller outside its
    /// lock.
    pub fn insert(&mut self, ledger: i64, entry: i64, data: Bytes, crc: Option<u32>) {
        debug_assert_eq!(crc, record_crc_at_put(ledger, entry, &data));
        let data = if data.len() >= OWN_BUFFER_MIN {
            data
        } else {
            self.copy_in(&data)
        };
        self.active
            .put(ledger, entry, data, crc, &mut self.spare_lists);
    }

    fn copy_in(&mut self, data: &[u8]) -> Bytes {
        let fits = self
            .active
            .chunks
            .last()
            .is_some_and(|c| c.capacity() - c.len() >= data.len());
        if !fits {
            let fresh = self
                .spare
                .pop()
                .unwrap_or_else(|| BytesMut::with_capacity(self.chunk));
            self.active.chunks.push(fresh);
        }
        let chunk = self.active.chunks.last_mut().expect("pushed above");
        chunk.extend_from_slice(data);
        chunk.split().freeze()
    }

    /// The newest cached copy of an entry.
    pub fn get(&self, ledger: i64, entry: i64) -> Option<Bytes> {
        self.active
            .get(ledger, entry)
            .or_else(|| self.flushing.get(ledger, entry))
            .cloned()
    }

    /// Whether either generation holds the entry.
    pub fn contains(&self, ledger: i64, entry: i64) -> bool {
        self.active.get(ledger, entry).is_some() || self.flushing.get(ledger, entry).is_some()
    }

    /// How many flushes finished: a reader that saw none finish while it read the index
    /// and the logs knows that every put since is still here.
    pub fn flushes(&self) -> u64 {
        self.flushes
    }

    /// Entry ids of `ledger` held in either generation (ascending, may repeat ids the
    /// index also has; the caller merges).
    pub fn entry_ids(&self, ledger: i64) -> Vec<i64> {
        let mut ids: Vec<i64> = [&self.active, &*self.flushing]
            .into_iter()
            .filter_map(|g| g.ledgers.get(&ledger))
            .flatten()
            .map(|(e, _)| *e)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Drops a ledger's entries from the active generation (the flushing one is shared
    /// with a running flush; the caller hides deleted ledgers from reads).
    pub fn remove_ledger(&mut self, ledger: i64) {
        self.active.remove_ledger(ledger);
    }

    /// Starts a flush: the active generation joins the flushing one (which is non-empty
    /// only if the previous flush failed), and a snapshot of it is returned to write out.
    /// The caller drops the snapshot before [`WriteCache::finish_flush`], so that the
    /// generation's chunks can be used again.
    pub fn start_flush(&mut self) -> Arc<Generation> {
        // The next generation is sized for as many ledgers as this one held: with thousands
        // of ledgers written at once it would otherwise grow (and rehash) from empty after
        // every flush.
        let next = Generation {
            ledgers: IdHashMap::with_capacity_and_hasher(
                self.active.ledgers.len(),
                Default::default(),
            ),
            ..Generation::default()
        };
        let active = std::mem::replace(&mut self.active, next);
        if self.flushing.is_empty() {
            self.flushing = Arc::new(active);
        } else {
            let merged = Arc::make_mut(&mut self.flushing);
            let Generation {
                ledgers,
                big_crcs,
                chunks,
                ..
            } = active;
            for (l, entries) in ledgers {
                for (e, data) in entries {
                    let crc = big_crcs.get(&(l, e)).copied();
                    merged.put(l, e, data, crc, &mut Vec::new());
                }
            }
            merged.chunks.extend(chunks);
        }
        self.flushing.clone()
    }

    /// Ends a successful flush: the flushed generation is released, and its chunks that
    /// no reader still holds a slice of are kept for the next puts (as many as the bound
    /// can fill).
    pub fn finish_flush(&mut self) {
        let flushed = std::mem::replace(&mut self.flushing, Arc::new(Generation::default()));
        self.flushes += 1;
        // A snapshot still held (only by a caller that kept it) just frees normally.
        let Ok(Generation {
            ledgers, chunks, ..
        }) = Arc::try_unwrap(flushed)
        else {
            return;
        };
        // The lists go first: their entries hold slices of the chunks. At most as many are
        // kept as this generation had ledgers, so that the spare ones follow the latest
        // generation (a burst over thousands of ledgers is not kept for ever after).
        let lists = ledgers.len();
        self.spare_lists.truncate(lists);
        for (_, mut list) in ledgers {
            if self.spare_lists.len() >= lists {
                break;
            }
            list.clear();
            self.spare_lists.push(list);
        }
        let keep = (self.limit / self.chunk as u64) as usize + 1;
        for mut c in chunks {
            if self.spare.len() >= keep {
                break;
            }
            if c.try_reclaim(self.chunk) {
                self.spare.push(c);
            }
        }
    }
}

impl Clone for Generation {
    /// Only for `Arc::make_mut` when a failed flush's generation is merged while its
    /// snapshot is still shared: the entries are shared slices, the chunks stay with the
    /// original.
    fn clone(&self) -> Self {
        Generation {
            ledgers: self.ledgers.clone(),
            big_crcs: self.big_crcs.clone(),
            chunks: Vec::new(),
            bytes: self.bytes,
            count: self.count,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `WriteCache::insert` with the checksum its caller computes.
    fn insert(c: &mut WriteCache, ledger: i64, entry: i64, data: Bytes) {
        let crc = record_crc_at_put(ledger, entry, &data);
        c.insert(ledger, entry, data, crc);
    }

    /// Every entry's checksum as the flush takes it is the entry's own.
    fn assert_checksums(g: &Generation) {
        for (l, e, data) in g.iter() {
            assert_eq!(
                g.record_crc(l, e, data),
                payload_record_crc(l, e, data),
                "ledger {l} entry {e}"
            );
        }
    }

    /// A large entry's checksum, computed as it is put, is kept for the flush; it follows
    /// the entry through replacements, a failed flush's merge and a ledger's removal.
    #[test]
    fn large_entries_keep_their_checksums_for_the_flush() {
        let mut c = WriteCache::new(1 << 24);
        let big = |v: u8| Bytes::from(vec![v; OWN_BUFFER_MIN]);
        insert(&mut c, 1, 0, big(1));
        insert(&mut c, 1, 1, b(10));
        assert_eq!(c.active.big_crcs.len(), 1, "only the large entry's is kept");
        insert(&mut c, 1, 0, b(5));
        assert!(c.active.big_crcs.is_empty(), "replaced by a small entry");
        insert(&mut c, 1, 0, big(2));
        assert_checksums(&c.active);
        // The flush fails (its snapshot still held): its generation is merged into the next.
        let first = c.start_flush();
        insert(&mut c, 1, 0, big(3));
        insert(&mut c, 2, 0, big(4));
        insert(&mut c, 3, 0, big(5));
        c.remove_ledger(3);
        let second = c.start_flush();
        assert_eq!(second.big_crcs.len(), 2, "ledgers 1 and 2");
        assert_checksums(&second);
        assert_checksums(&first);
    }

    fn b(n: usize) -> Bytes {
        Bytes::from(vec![n as u8; n])
    }

    fn keys(g: &Generation) -> Vec<(i64, i64)> {
        g.iter().map(|(l, e, _)| (l, e)).collect()
    }

    #[test]
    fn accounting_replacement_and_room() {
        let mut c = WriteCache::new(10);
        assert!(c.has_room(100), "an empty cache takes an oversized entry");
        insert(&mut c, 1, 0, b(4));
        insert(&mut c, 1, 0, b(6));
        assert_eq!(c.used(), 6, "a re-put replaces, it does not add");
        assert!(c.has_room(4));
        assert!(!c.has_room(5));
        assert_eq!(c.get(1, 0), Some(b(6)));
        assert_eq!(c.get(1, 1), None);
    }

    #[test]
    fn flushing_generation_stays_readable_and_counted_until_finished() {
        let mut c = WriteCache::new(100);
        insert(&mut c, 2, 0, b(1));
        insert(&mut c, 1, 1, b(3));
        insert(&mut c, 1, 0, b(2));
        let snap = c.start_flush();
        assert_eq!(keys(&snap), vec![(1, 0), (1, 1), (2, 0)]);
        assert_eq!((snap.len(), snap.bytes()), (3, 6));
        drop(snap);
        insert(&mut c, 1, 2, b(5));
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
        insert(&mut c, 1, 0, b(2));
        let _first = c.start_flush();
        insert(&mut c, 1, 1, b(3));
        insert(&mut c, 1, 0, b(4)); // re-put while the first flush is pending
        let second = c.start_flush();
        assert_eq!(second.len(), 2);
        assert_eq!(second.get(1, 0), Some(&b(4)), "the newer copy wins");
        assert_eq!(c.used(), 7);
    }

    #[test]
    fn remove_ledger_frees_its_bytes() {
        let mut c = WriteCache::new(100);
        insert(&mut c, 1, 0, b(2));
        insert(&mut c, 2, 0, b(3));
        c.remove_ledger(1);
        assert_eq!(c.used(), 3);
        assert_eq!(c.get(1, 0), None);
        assert_eq!(c.get(2, 0), Some(b(3)));
    }

    #[test]
    fn entries_out_of_order_are_kept_sorted() {
        let mut c = WriteCache::new(1 << 20);
        for e in [5, 1, 9, 3, 7, 0, 9] {
            insert(&mut c, 4, e, b(e as usize + 1));
        }
        assert_eq!(c.entry_ids(4), vec![0, 1, 3, 5, 7, 9]);
        let snap = c.start_flush();
        assert_eq!(
            snap.iter()
                .map(|(_, e, d)| (e, d.len()))
                .collect::<Vec<_>>(),
            vec![(0, 1), (1, 2), (3, 4), (5, 6), (7, 8), (9, 10)]
        );
    }

    /// Entries are copied out of the buffers they came in, and a flushed generation's
    /// chunks are filled again, except one a reader still holds an entry of.
    #[test]
    fn chunks_are_used_again_once_nothing_holds_their_entries() {
        let mut c = WriteCache::new(1 << 20); // 64 KiB chunks: 65 entries of 1000 B each
        let arrived = Bytes::from(vec![7u8; 1000]);
        insert(&mut c, 1, 0, arrived.clone());
        assert!(arrived.is_unique(), "the arriving buffer is not kept");
        for e in 1..100 {
            insert(&mut c, 1, e, b(1000));
        }
        let second_chunk = c.get(1, 65).unwrap().as_ptr();
        let held = c.get(1, 0).unwrap(); // a reader holds an entry of the first chunk
        drop(c.start_flush());
        c.finish_flush();
        assert_eq!(c.spare.len(), 1, "only the chunk nobody holds comes back");
        insert(&mut c, 2, 0, b(10));
        assert_eq!(c.get(2, 0).unwrap().as_ptr(), second_chunk, "filled again");
        assert_eq!(
            held.as_ref(),
            &[7u8; 1000][..],
            "a held entry is never overwritten"
        );
        // The flushed generation's list comes back for a ledger of the next one.
        assert!(
            c.active.ledgers[&2].capacity() >= 100,
            "ledger 2 took ledger 1's list: capacity {}",
            c.active.ledgers[&2].capacity()
        );
        // Spare lists follow the latest generation: one that held a single ledger leaves
        // one, however many an earlier one left.
        for l in 10..20 {
            insert(&mut c, l, 0, b(10));
        }
        drop(c.start_flush());
        c.finish_flush();
        assert_eq!(c.spare_lists.len(), 11, "ledger 2 and ledgers 10-19");
        insert(&mut c, 30, 0, b(10));
        drop(c.start_flush());
        c.finish_flush();
        assert_eq!(
            c.spare_lists.len(),
            1,
            "kept as many as the last generation's ledgers"
        );
        // Large entries keep their own buffer; one just below the bound is copied.
        let big = Bytes::from(vec![1u8; OWN_BUFFER_MIN]);
        insert(&mut c, 3, 1, big.clone());
        assert_eq!(c.get(3, 1).unwrap().as_ptr(), big.as_ptr());
        let below = Bytes::from(vec![2u8; OWN_BUFFER_MIN - 1]);
        insert(&mut c, 3, 2, below.clone());
        assert_ne!(c.get(3, 2).unwrap().as_ptr(), below.as_ptr());
        assert_eq!(c.get(3, 2).unwrap(), below);
    }
}
