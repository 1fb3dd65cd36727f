//! The last block of each recently written ledger, as committed, so that a flush's commit
//! reads it here rather than from the B-tree, and knows without a lookup that the blocks
//! above it do not exist yet. A writer's next flush mostly touches its ledger's last block
//! again and starts new ones after it: with 10,000 ledgers written at once, each commit of
//! the index touches one or two blocks per ledger that already exist and up to a few new
//! ones, and looking each of those up in redb (a B-tree descent that finds nothing for a
//! new block) was most of the commit's loading (a commit was over a third of a bookie's
//! CPU there; docs/performance.md, "Ledgers written at once" and "2026-12-07 (08:30)").
//!
//! What is kept of a ledger must be exactly what the index holds: its highest block and
//! that block's value, or that it has no block at all. It is learned by one lookup of the
//! ledger's last block inside a write transaction, kept in step by that transaction's
//! writes ([`Tails::wrote`]), and dropped by every other change of `entry_blocks` (a
//! deletion forgets its ledger, a relocation or a failed write transaction everything).
//! [`super::LedgerIndex`] holds the lock across each of its write transactions, which
//! redb serializes anyway.

use folio_types::IdHashMap;

/// The bytes kept at most (the encoded blocks, about 330 per ledger half way through a
/// block, plus [`PER_LEDGER`] each). Past it the cache starts over, keeping only what later
/// commits learn: the ledgers being written come back at their next commit, the closed
/// ones do not.
const MAX_BYTES: usize = 4 << 20;
/// What a ledger kept here counts beyond its block's bytes (the map's entry), so that
/// ledgers without blocks count too.
const PER_LEDGER: usize = 48;

/// What the index holds of a block, as far as [`Tails`] knows.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Lookup<'a> {
    /// Nothing is known of the ledger: look the block up.
    Unknown,
    /// The block is the ledger's highest, with this committed value.
    Value(&'a [u8]),
    /// The index has no such block: it is above the ledger's highest, or the ledger has
    /// none.
    Absent,
    /// The block is below the ledger's highest: look it up.
    Below,
}

#[derive(Default)]
pub(super) struct Tails {
    /// ledger -> its highest block and that block's encoded value as committed, or `None`
    /// if the index holds no block of it.
    ledgers: IdHashMap<i64, Option<(i64, Vec<u8>)>>,
    bytes: usize,
}

impl Tails {
    /// Whether anything is known of `ledger` (else [`Tails::learn`] it first).
    pub(super) fn knows(&self, ledger: i64) -> bool {
        self.ledgers.contains_key(&ledger)
    }

    /// What the index holds as `ledger`'s block `block`, as far as known here.
    pub(super) fn lookup(&self, ledger: i64, block: i64) -> Lookup<'_> {
        match self.ledgers.get(&ledger) {
            None => Lookup::Unknown,
            Some(None) => Lookup::Absent,
            Some(Some((last, value))) => match block.cmp(last) {
                std::cmp::Ordering::Equal => Lookup::Value(value),
                std::cmp::Ordering::Greater => Lookup::Absent,
                std::cmp::Ordering::Less => Lookup::Below,
            },
        }
    }

    /// Keeps what a lookup of `ledger`'s last block in the index found, in the write
    /// transaction about to change it: the block and its value, or `None` for no block.
    pub(super) fn learn(&mut self, ledger: i64, last: Option<(i64, Vec<u8>)>) {
        let len = PER_LEDGER + last.as_ref().map_or(0, |(_, v)| v.len());
        if self.bytes + len > MAX_BYTES {
            self.clear();
        }
        self.bytes += len;
        if let Some(old) = self.ledgers.insert(ledger, last) {
            self.bytes -= PER_LEDGER + old.map_or(0, |(_, v)| v.len());
        }
    }

    /// The write transaction wrote `value` as `ledger`'s block `block`: kept if that is
    /// now the ledger's highest block. A ledger not known here stays unknown (what it
    /// holds above `block` was never looked at).
    pub(super) fn wrote(&mut self, ledger: i64, block: i64, value: Vec<u8>) {
        let Some(known) = self.ledgers.get_mut(&ledger) else {
            return;
        };
        let old = match known {
            Some((last, _)) if *last > block => return,
            _ => known.replace((block, value)),
        };
        let new = known.as_ref().map_or(0, |(_, v)| v.len());
        self.bytes = self.bytes + new - old.map_or(0, |(_, v)| v.len());
        if self.bytes > MAX_BYTES {
            self.clear();
        }
    }

    /// Drops what is known of `ledger`.
    pub(super) fn forget(&mut self, ledger: i64) {
        if let Some(old) = self.ledgers.remove(&ledger) {
            self.bytes -= PER_LEDGER + old.map_or(0, |(_, v)| v.len());
        }
    }

    pub(super) fn clear(&mut self) {
        self.ledgers.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ledgers_highest_block_answers_for_the_blocks_above_it() {
        let mut t = Tails::default();
        assert_eq!(t.lookup(1, 0), Lookup::Unknown);
        t.learn(1, None);
        assert_eq!(t.lookup(1, 5), Lookup::Absent, "a ledger without blocks");
        t.wrote(1, 0, vec![1; 10]);
        t.wrote(1, 1, vec![2; 20]);
        assert_eq!(t.lookup(1, 1), Lookup::Value(&[2u8; 20][..]));
        assert_eq!(t.lookup(1, 0), Lookup::Below);
        assert_eq!(t.lookup(1, 2), Lookup::Absent);
        // A lower block written later (an out-of-order add) leaves the highest as it was.
        t.wrote(1, 0, vec![3; 30]);
        assert_eq!(t.lookup(1, 1), Lookup::Value(&[2u8; 20][..]));
        assert_eq!(t.lookup(1, 0), Lookup::Below);
        assert_eq!(t.bytes, PER_LEDGER + 20);
        // A ledger never learned stays unknown whatever is written of it.
        t.wrote(2, 7, vec![0; 10]);
        assert_eq!(t.lookup(2, 8), Lookup::Unknown);
        t.forget(1);
        assert_eq!((t.lookup(1, 3), t.bytes), (Lookup::Unknown, 0));
    }

    #[test]
    fn bounded_by_bytes() {
        let mut t = Tails::default();
        let big = MAX_BYTES / 2;
        t.learn(2, Some((0, vec![0; big])));
        t.learn(3, Some((0, vec![0; big])));
        assert_eq!(
            t.lookup(2, 0),
            Lookup::Unknown,
            "started over past the bound"
        );
        assert!(matches!(t.lookup(3, 0), Lookup::Value(_)));
        assert_eq!(t.bytes, PER_LEDGER + big);
        t.wrote(3, 1, vec![0; MAX_BYTES]);
        assert_eq!(
            t.lookup(3, 1),
            Lookup::Unknown,
            "started over past the bound"
        );
        assert_eq!(t.bytes, 0);
    }
}
