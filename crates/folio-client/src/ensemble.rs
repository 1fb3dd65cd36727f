//! Ensemble placement and ensemble changes, sans-IO: which bookies a new ledger gets,
//! which bookie replaces a failed one, and the metadata a change writes.
//!
//! Placement is random among the writable registered bookies (BookKeeper's default
//! policy without rack information). Rack-aware placement is not built yet.

use std::collections::{BTreeMap, BTreeSet};

use folio_env::Rng;
use folio_types::metadata::{LedgerMetadata, LedgerState};
use folio_types::{BookieId, EntryId, LedgerId};

use crate::error::ClientError;

/// Picks `size` distinct bookies at random from `writable`.
pub fn choose_ensemble(
    size: usize,
    writable: &BTreeSet<BookieId>,
    rng: &dyn Rng,
) -> Result<Vec<BookieId>, ClientError> {
    if writable.len() < size {
        return Err(ClientError::NotEnoughBookies {
            need: size,
            have: writable.len(),
        });
    }
    let mut pool: Vec<BookieId> = writable.iter().cloned().collect();
    let mut chosen = Vec::with_capacity(size);
    for _ in 0..size {
        let i = rng.below(pool.len() as u64) as usize;
        chosen.push(pool.swap_remove(i));
    }
    Ok(chosen)
}

/// The ensemble after replacing the `failed` positions with random writable bookies that
/// are neither in the ensemble nor known to have failed (`excluded`).
pub fn replace_bookies(
    ensemble: &[BookieId],
    failed: &BTreeMap<usize, BookieId>,
    writable: &BTreeSet<BookieId>,
    excluded: &BTreeSet<BookieId>,
    rng: &dyn Rng,
) -> Result<Vec<BookieId>, ClientError> {
    let mut candidates: Vec<BookieId> = writable
        .iter()
        .filter(|b| !ensemble.contains(b) && !excluded.contains(b))
        .cloned()
        .collect();
    if candidates.len() < failed.len() {
        return Err(ClientError::NotEnoughBookies {
            need: ensemble.len(),
            have: ensemble.len() - failed.len() + candidates.len(),
        });
    }
    let mut next = ensemble.to_vec();
    for &p in failed.keys() {
        let i = rng.below(candidates.len() as u64) as usize;
        next[p] = candidates.swap_remove(i);
    }
    Ok(next)
}

/// The metadata with a fragment starting at `fragment_start` using `ensemble`. If the
/// last fragment already starts there (no entry of it was acknowledged), its ensemble is
/// replaced instead. Refuses metadata not in `expected_state` (`Open` for a writer,
/// `InRecovery` for a recovery's write-backs): a recovery or a close by someone else means
/// the writer is fenced, and nothing may be overwritten.
pub fn with_new_fragment(
    ledger: LedgerId,
    meta: &LedgerMetadata,
    expected_state: LedgerState,
    fragment_start: EntryId,
    ensemble: Vec<BookieId>,
) -> Result<LedgerMetadata, ClientError> {
    if meta.state != expected_state {
        return Err(ClientError::Fenced { ledger });
    }
    let Some((last_start, _)) = meta.current_ensemble() else {
        return Err(ClientError::MetadataConflict {
            ledger,
            reason: "the metadata has no ensemble".into(),
        });
    };
    if last_start > fragment_start {
        return Err(ClientError::MetadataConflict {
            ledger,
            reason: format!(
                "the last fragment starts at entry {last_start}, after the new fragment's first entry {fragment_start}"
            ),
        });
    }
    let mut next = meta.clone();
    next.ensembles.insert(fragment_start, ensemble);
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use folio_env::SystemRng;
    use folio_types::metadata::DigestType;
    use folio_types::quorum::QuorumConfig;

    fn b(i: usize) -> BookieId {
        BookieId::new(format!("b{i}:3181")).unwrap()
    }

    fn set(ids: &[usize]) -> BTreeSet<BookieId> {
        ids.iter().map(|&i| b(i)).collect()
    }

    #[test]
    fn ensemble_is_distinct_and_from_the_writable_set() {
        let rng = SystemRng::with_seed(3);
        for _ in 0..50 {
            let e = choose_ensemble(3, &set(&[0, 1, 2, 3, 4]), &rng).unwrap();
            let distinct: BTreeSet<_> = e.iter().cloned().collect();
            assert_eq!(distinct.len(), 3);
            assert!(distinct.is_subset(&set(&[0, 1, 2, 3, 4])));
        }
        assert_eq!(
            choose_ensemble(3, &set(&[0, 1]), &rng).unwrap_err(),
            ClientError::NotEnoughBookies { need: 3, have: 2 }
        );
    }

    #[test]
    fn replacement_avoids_the_ensemble_and_failed_bookies() {
        let rng = SystemRng::with_seed(5);
        let ensemble = vec![b(0), b(1), b(2)];
        let failed: BTreeMap<usize, BookieId> = [(1, b(1))].into_iter().collect();
        for _ in 0..20 {
            let next = replace_bookies(
                &ensemble,
                &failed,
                &set(&[0, 1, 2, 3, 4]),
                &set(&[1, 4]),
                &rng,
            )
            .unwrap();
            assert_eq!(next, vec![b(0), b(3), b(2)]);
        }
        let err = replace_bookies(&ensemble, &failed, &set(&[0, 1, 2]), &set(&[1]), &rng);
        assert_eq!(
            err.unwrap_err(),
            ClientError::NotEnoughBookies { need: 3, have: 2 }
        );
    }

    #[test]
    fn new_fragment_is_added_or_replaces_an_empty_last_fragment() {
        let meta = LedgerMetadata::new_open(
            QuorumConfig::new(3, 2, 2).unwrap(),
            vec![b(0), b(1), b(2)],
            DigestType::Crc32c,
            b"pw".to_vec(),
        );
        let m = with_new_fragment(7, &meta, LedgerState::Open, 5, vec![b(0), b(3), b(2)]).unwrap();
        assert_eq!(m.ensembles.len(), 2);
        assert_eq!(m.ensemble_for_entry(4).unwrap()[1], b(1));
        let m2 = with_new_fragment(7, &m, LedgerState::Open, 5, vec![b(0), b(4), b(2)]).unwrap();
        assert_eq!(m2.ensembles.len(), 2);
        assert_eq!(m2.ensemble_for_entry(5).unwrap()[1], b(4));
        assert!(matches!(
            with_new_fragment(7, &m, LedgerState::Open, 3, vec![b(0), b(4), b(2)]),
            Err(ClientError::MetadataConflict { .. })
        ));
        let mut closed = meta.clone();
        closed.state = LedgerState::InRecovery;
        assert_eq!(
            with_new_fragment(7, &closed, LedgerState::Open, 0, vec![b(0), b(4), b(2)])
                .unwrap_err(),
            ClientError::Fenced { ledger: 7 }
        );
    }
}
