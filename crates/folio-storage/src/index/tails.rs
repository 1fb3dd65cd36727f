//! The last block each recently written ledger had committed, kept as committed, so that
//! a flush's commit reads it here rather than from the B-tree. A writer's next flush
//! mostly touches its ledger's last block again: with 10,000 ledgers written at once, each
//! flush of the write cache holds one or two entries per ledger, and reading each touched
//! block back from redb was a quarter of the index commit's cost (a commit was over a
//! third of a bookie's CPU there; docs/performance.md, "Ledgers written at once").
//!
//! What is cached must be exactly what the index holds, so only a commit that rewrites a
//! block puts it here, every other change of `entry_blocks` drops what it may have made
//! stale, and a failed write transaction drops everything. [`super::LedgerIndex`] holds the
//! lock across each of its write transactions, which redb serializes anyway.

use folio_types::IdHashMap;

/// The bytes kept at most (the encoded blocks; about 330 per ledger half way through a
/// block). Past it the cache starts over, keeping only what later commits write: the
/// ledgers being written come back at their next flush, the closed ones do not.
const MAX_BYTES: usize = 4 << 20;

#[derive(Default)]
pub(super) struct Tails {
    /// ledger -> (block, its encoded value as committed).
    blocks: IdHashMap<i64, (i64, Vec<u8>)>,
    bytes: usize,
}

impl Tails {
    /// The committed value of `ledger`'s block `block`, if it is the ledger's cached one.
    pub(super) fn get(&self, ledger: i64, block: i64) -> Option<&[u8]> {
        match self.blocks.get(&ledger) {
            Some((b, v)) if *b == block => Some(v),
            _ => None,
        }
    }

    /// Keeps `value` as `ledger`'s block `block`, in place of the ledger's other one.
    pub(super) fn put(&mut self, ledger: i64, block: i64, value: Vec<u8>) {
        if self.bytes + value.len() > MAX_BYTES {
            self.clear();
        }
        self.bytes += value.len();
        if let Some((_, old)) = self.blocks.insert(ledger, (block, value)) {
            self.bytes -= old.len();
        }
    }

    /// Drops what is kept of `ledger`.
    pub(super) fn forget(&mut self, ledger: i64) {
        if let Some((_, old)) = self.blocks.remove(&ledger) {
            self.bytes -= old.len();
        }
    }

    pub(super) fn clear(&mut self) {
        self.blocks.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_block_per_ledger_and_bounded() {
        let mut t = Tails::default();
        t.put(1, 0, vec![1; 10]);
        t.put(1, 1, vec![2; 20]);
        assert_eq!(t.get(1, 0), None, "replaced by block 1");
        assert_eq!(t.get(1, 1), Some(&[2u8; 20][..]));
        assert_eq!(t.bytes, 20);
        t.forget(1);
        assert_eq!((t.get(1, 1), t.bytes), (None, 0));
        let big = MAX_BYTES / 2 + 1;
        t.put(2, 0, vec![0; big]);
        t.put(3, 0, vec![0; big]);
        assert_eq!(t.get(2, 0), None, "started over past the bound");
        assert!(t.get(3, 0).is_some());
        assert_eq!(t.bytes, big);
    }
}
