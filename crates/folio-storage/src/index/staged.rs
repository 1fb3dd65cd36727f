//! Flushes staged for the index: batches whose entries are already in synced entry logs
//! but whose locations are not yet committed to the B-tree. A later commit writes them all
//! in one transaction; meanwhile every lookup of [`super::LedgerIndex`] sees them over what
//! is committed, so reads cannot tell a staged flush from a committed one.
//!
//! Why: each commit rewrites one block per ledger it touches. With 10,000 ledgers written
//! at once a 16 MiB flush holds one or two entries per ledger, so committing every flush
//! rewrote a block (a redb leaf rebuild) per 1.6 entries; staging a few flushes and
//! committing them together writes each block once for all of them (docs/performance.md,
//! "Ten thousand ledgers written at once"). Keeping staged locations costs about 40 bytes
//! an entry, where keeping the entries in the write cache longer would cost the entries.
//!
//! What staged is not, is durable: a crash forgets it. The ledger store's callers keep the
//! journal (and a ForceLedger's wait) from counting a staged flush as durable; see
//! `LedgerStore::flush_for_room`.

use std::sync::Arc;

use super::IndexBatch;
use crate::entry_log::Location;

/// One staged flush, its locations sorted by (ledger, entry), one per entry (the last put).
pub(super) struct StagedBatch {
    pub(super) batch: IndexBatch,
}

impl StagedBatch {
    pub(super) fn new(mut batch: IndexBatch) -> StagedBatch {
        // Stable, so that of two locations of one entry the later stays (dedup_by hands
        // the later as `a`, the kept earlier as `b`).
        batch.locations.sort_by_key(|&(l, e, _)| (l, e));
        batch.locations.dedup_by(|a, b| {
            let same = (a.0, a.1) == (b.0, b.1);
            if same {
                b.2 = a.2;
            }
            same
        });
        StagedBatch { batch }
    }

    /// This batch's locations of `ledger`, ascending by entry.
    fn of_ledger(&self, ledger: i64) -> &[(i64, i64, Location)] {
        let l = &self.batch.locations;
        let lo = l.partition_point(|&(x, _, _)| x < ledger);
        let hi = l.partition_point(|&(x, _, _)| x <= ledger);
        &l[lo..hi]
    }

    fn deletes(&self, ledger: i64) -> bool {
        self.batch.deleted.contains(&ledger)
    }
}

/// The staged batches, oldest first.
pub(super) type Staged = Vec<Arc<StagedBatch>>;

/// What the staged batches say of one entry: `None` if none of them touches it, else
/// its location after them (`Some(None)`: its ledger was deleted).
pub(super) fn get(
    staged: &[Arc<StagedBatch>],
    ledger: i64,
    entry: i64,
) -> Option<Option<Location>> {
    for b in staged.iter().rev() {
        // Within a batch, deletions apply after the puts (as a commit applies them).
        if b.deletes(ledger) {
            return Some(None);
        }
        let of = b.of_ledger(ledger);
        if let Ok(i) = of.binary_search_by_key(&entry, |&(_, e, _)| e) {
            return Some(Some(of[i].2));
        }
    }
    None
}

/// The last entry of `ledger` after the staged batches, given `committed`, the last one
/// committed.
pub(super) fn last_entry(
    staged: &[Arc<StagedBatch>],
    ledger: i64,
    committed: Option<i64>,
) -> Option<i64> {
    let mut last = committed;
    for b in staged {
        if let Some(&(_, e, _)) = b.of_ledger(ledger).last() {
            last = last.max(Some(e));
        }
        if b.deletes(ledger) {
            last = None;
        }
    }
    last
}

/// Whether any staged batch puts or deletes an entry of `ledger`.
pub(super) fn touches(staged: &[Arc<StagedBatch>], ledger: i64) -> bool {
    staged
        .iter()
        .any(|b| b.deletes(ledger) || !b.of_ledger(ledger).is_empty())
}

/// `committed` ((ledger, entry, location) in key order, as the B-tree has them for the
/// range `first..=last` of `ledger`, or of every ledger with `ledger` `None`) with the
/// staged batches applied over it, in key order.
pub(super) fn overlay(
    staged: &[Arc<StagedBatch>],
    committed: Vec<(i64, i64, Location)>,
    ledger: Option<i64>,
    first: i64,
    last: i64,
) -> Vec<(i64, i64, Location)> {
    if staged.is_empty() {
        return committed;
    }
    let mut view: std::collections::BTreeMap<(i64, i64), Location> = committed
        .into_iter()
        .map(|(l, e, loc)| ((l, e), loc))
        .collect();
    for b in staged {
        let puts = match ledger {
            Some(l) => b.of_ledger(l),
            None => &b.batch.locations[..],
        };
        for &(l, e, loc) in puts {
            if (first..=last).contains(&e) {
                view.insert((l, e), loc);
            }
        }
        for &d in &b.batch.deleted {
            if ledger.is_none_or(|l| l == d) {
                view.retain(|&(l, _), _| l != d);
            }
        }
    }
    view.into_iter().map(|((l, e), loc)| (l, e, loc)).collect()
}

/// How many locations the staged batches hold.
pub(super) fn locations(staged: &[Arc<StagedBatch>]) -> usize {
    staged.iter().map(|b| b.batch.locations.len()).sum()
}
