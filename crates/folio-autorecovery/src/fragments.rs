//! A ledger's fragments and what each bookie of each fragment must hold: the arithmetic
//! the ledger checker and the replicator share. Sans-IO.
//!
//! A fragment is a run of entry ids written to one ensemble (BookKeeper's
//! `LedgerFragment`). Every fragment but the last is *closed*: its writer moved to a new
//! ensemble at an entry id it had confirmed everything before, so its entries are fixed.
//! The last fragment is closed only once the ledger is; until then its end is unknown and
//! nothing in it may be copied (the writer, or a recovery, still decides it).

use folio_proto::availability::AvailabilityOfEntries;
use folio_types::metadata::LedgerMetadata;
use folio_types::quorum::QuorumConfig;
use folio_types::{BookieId, EntryId};

/// One fragment of a ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fragment {
    /// Its first entry id (the key of its ensemble in the metadata).
    pub first: EntryId,
    /// Its last entry id; `first - 1` when it holds no entry. Meaningful only when
    /// `closed`.
    pub last: EntryId,
    pub ensemble: Vec<BookieId>,
    /// Whether its entries are fixed (see the module documentation).
    pub closed: bool,
}

impl Fragment {
    /// The entry ids ensemble position `position` must hold (empty unless closed).
    pub fn entries_of(&self, quorum: &QuorumConfig, position: usize) -> Vec<EntryId> {
        if !self.closed {
            return Vec::new();
        }
        (self.first..=self.last)
            .filter(|&e| quorum.stores(e, position))
            .collect()
    }

    /// The other bookies holding `entry`, in write order: where a copy comes from.
    pub fn sources(&self, quorum: &QuorumConfig, entry: EntryId, position: usize) -> Vec<BookieId> {
        quorum
            .write_set(entry)
            .into_iter()
            .filter(|&p| p != position)
            .map(|p| self.ensemble[p].clone())
            .collect()
    }
}

/// The fragments of `meta`, in entry order.
pub fn fragments(meta: &LedgerMetadata) -> Vec<Fragment> {
    let starts: Vec<(EntryId, &Vec<BookieId>)> =
        meta.ensembles.iter().map(|(s, e)| (*s, e)).collect();
    let mut out = Vec::with_capacity(starts.len());
    for (i, (first, ensemble)) in starts.iter().enumerate() {
        let (last, closed) = match starts.get(i + 1) {
            // A closed ledger may end before a later fragment starts (an ensemble change
            // made for entries that were never acknowledged): clip to its last entry.
            Some((next, _)) if meta.is_closed() => ((*next - 1).min(meta.last_entry_id), true),
            Some((next, _)) => (*next - 1, true),
            None if meta.is_closed() => (meta.last_entry_id, true),
            None => (*first - 1, false),
        };
        out.push(Fragment {
            first: *first,
            last: last.max(*first - 1),
            ensemble: (*ensemble).clone(),
            closed,
        });
    }
    out
}

/// The entries of `wanted` that `held` lacks.
pub fn missing_entries(wanted: &[EntryId], held: &AvailabilityOfEntries) -> Vec<EntryId> {
    wanted
        .iter()
        .copied()
        .filter(|&e| !held.contains(e))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use folio_types::metadata::{DigestType, LedgerState};

    use super::*;

    fn b(n: u16) -> BookieId {
        BookieId::new(format!("127.0.0.1:{n}")).unwrap()
    }

    fn meta(
        ensembles: &[(EntryId, [u16; 3])],
        state: LedgerState,
        last: EntryId,
    ) -> LedgerMetadata {
        let q = QuorumConfig::new(3, 2, 2).unwrap();
        let mut m = LedgerMetadata::new_open(q, vec![b(1), b(2), b(3)], DigestType::Crc32, vec![]);
        m.ensembles = ensembles
            .iter()
            .map(|(s, e)| (*s, e.iter().map(|&n| b(n)).collect()))
            .collect::<BTreeMap<_, _>>();
        m.state = state;
        m.last_entry_id = last;
        m
    }

    #[test]
    fn an_open_ledgers_last_fragment_is_not_closed_and_holds_nothing_to_copy() {
        let m = meta(&[(0, [1, 2, 3]), (10, [1, 2, 4])], LedgerState::Open, -1);
        let f = fragments(&m);
        assert_eq!(f.len(), 2);
        assert!(f[0].closed && f[0].last == 9);
        assert!(!f[1].closed);
        let q = m.quorum().unwrap();
        assert!(f[1].entries_of(&q, 0).is_empty());
        // E3 Qw2: position 0 stores entries whose write set starts at 0 or 2.
        assert_eq!(f[0].entries_of(&q, 0), vec![0, 2, 3, 5, 6, 8, 9]);
    }

    #[test]
    fn a_closed_ledger_clips_fragments_to_its_last_entry() {
        let m = meta(&[(0, [1, 2, 3]), (10, [1, 2, 4])], LedgerState::Closed, 7);
        let f = fragments(&m);
        assert_eq!((f[0].last, f[1].last), (7, 9));
        assert!(f[1].closed);
        assert!(f[1].entries_of(&m.quorum().unwrap(), 2).is_empty());
        let empty = meta(&[(0, [1, 2, 3])], LedgerState::Closed, -1);
        assert_eq!(fragments(&empty)[0].last, -1);
        assert!(
            fragments(&empty)[0]
                .entries_of(&empty.quorum().unwrap(), 0)
                .is_empty()
        );
    }

    #[test]
    fn sources_are_the_other_members_of_the_write_set() {
        let m = meta(&[(0, [1, 2, 3])], LedgerState::Closed, 5);
        let f = &fragments(&m)[0];
        let q = m.quorum().unwrap();
        assert_eq!(f.sources(&q, 4, 1), vec![b(3)]);
        assert_eq!(f.sources(&q, 4, 2), vec![b(2)]);
    }

    #[test]
    fn missing_entries_are_those_the_list_lacks() {
        let held = AvailabilityOfEntries::from_sorted_entries([0, 2, 3]);
        assert_eq!(missing_entries(&[0, 1, 2, 3, 4], &held), vec![1, 4]);
    }
}
