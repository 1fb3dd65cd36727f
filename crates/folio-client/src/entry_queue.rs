//! A map from entry id to what a writer keeps of an entry in flight, ordered by entry id.
//!
//! A writer adds entries in id order and acknowledges them in id order, so its entries in
//! flight are a queue: added at the back, removed at the front. A `BTreeMap` did the same
//! job, but one that empties gives its node back and allocates it again at the next add:
//! with thousands of ledgers written at once, one or two entries in flight each, that was
//! an allocation and a free per entry in each of the writer's two maps (docs/performance.md,
//! "Ledgers written at once"). This keeps its room. An adv ledger's caller may add ids out
//! of order; those are inserted in place.

use std::collections::VecDeque;

use folio_types::EntryId;

#[derive(Debug)]
pub(crate) struct EntryQueue<V> {
    /// Sorted by entry id, ids unique.
    items: VecDeque<(EntryId, V)>,
}

impl<V> Default for EntryQueue<V> {
    fn default() -> Self {
        EntryQueue {
            items: VecDeque::new(),
        }
    }
}

impl<V> EntryQueue<V> {
    fn position(&self, entry: EntryId) -> Result<usize, usize> {
        // The common cases first: the oldest (an acknowledgement) and past the newest.
        match (self.items.front(), self.items.back()) {
            (Some((first, _)), _) if *first == entry => Ok(0),
            (_, Some((last, _))) if *last < entry => Err(self.items.len()),
            (None, _) => Err(0),
            _ => self.items.binary_search_by_key(&entry, |(e, _)| *e),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn contains_key(&self, entry: &EntryId) -> bool {
        self.position(*entry).is_ok()
    }

    pub(crate) fn get_mut(&mut self, entry: &EntryId) -> Option<&mut V> {
        let i = self.position(*entry).ok()?;
        Some(&mut self.items[i].1)
    }

    /// Adds or replaces `entry`'s value; returns the value replaced.
    pub(crate) fn insert(&mut self, entry: EntryId, value: V) -> Option<V> {
        match self.position(entry) {
            Ok(i) => Some(std::mem::replace(&mut self.items[i].1, value)),
            Err(i) => {
                self.items.insert(i, (entry, value));
                None
            }
        }
    }

    pub(crate) fn remove(&mut self, entry: &EntryId) -> Option<V> {
        let i = self.position(*entry).ok()?;
        self.items.remove(i).map(|(_, v)| v)
    }

    /// The oldest entry.
    pub(crate) fn first(&self) -> Option<(EntryId, &V)> {
        self.items.front().map(|(e, v)| (*e, v))
    }

    /// In entry id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (EntryId, &V)> {
        self.items.iter().map(|(e, v)| (*e, v))
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = EntryId> + '_ {
        self.items.iter().map(|(e, _)| *e)
    }

    /// Removes everything, in entry id order (the room stays).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = (EntryId, V)> + '_ {
        self.items.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use folio_env::Rng;
    use std::collections::BTreeMap;

    /// Random adds (mostly in order, some out of order as an adv ledger's caller may),
    /// replacements, lookups and removals (mostly the oldest) agree with a `BTreeMap`.
    #[test]
    fn behaves_as_an_ordered_map() {
        let mut q = EntryQueue::default();
        let mut m = BTreeMap::new();
        let rng = folio_env::SystemRng::with_seed(0x2545_f491_4f6c_dd1d);
        let next = |n: u64| rng.below(n);
        let mut top = 0i64;
        for step in 0..20_000 {
            match next(10) {
                0..4 => {
                    top += 1 + next(3) as i64;
                    assert_eq!(q.insert(top, step), m.insert(top, step));
                }
                4 => {
                    let e = next(top as u64 + 2) as i64;
                    assert_eq!(q.insert(e, step), m.insert(e, step), "insert {e}");
                }
                5..8 => {
                    let oldest = m.keys().next().copied().unwrap_or(0);
                    assert_eq!(q.remove(&oldest), m.remove(&oldest));
                }
                8 => {
                    let e = next(top as u64 + 2) as i64;
                    assert_eq!(q.remove(&e), m.remove(&e), "remove {e}");
                }
                _ => {
                    let e = next(top as u64 + 2) as i64;
                    assert_eq!(q.contains_key(&e), m.contains_key(&e));
                    assert_eq!(q.get_mut(&e), m.get_mut(&e));
                }
            }
            assert_eq!(q.len(), m.len());
            assert_eq!(q.first(), m.iter().next().map(|(e, v)| (*e, v)));
        }
        assert!(q.iter().eq(m.iter().map(|(e, v)| (*e, v))));
        assert!(q.keys().eq(m.keys().copied()));
        let drained: Vec<_> = q.drain().collect();
        assert_eq!(drained, m.into_iter().collect::<Vec<_>>());
        assert_eq!(q.len(), 0);
    }
}
