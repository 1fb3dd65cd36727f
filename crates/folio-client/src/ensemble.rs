//! Ensemble placement and ensemble changes, sans-IO: which bookies a new ledger gets,
//! which bookie replaces a failed one, and the metadata a change writes.
//!
//! Placement is random among the writable registered bookies. With rack information
//! ([`Racks`], from the `rack` property bookies publish), it is rack-aware as
//! BookKeeper's `RackawareEnsemblePlacementPolicy` without enforcement: each bookie is
//! preferably on a rack no other bookie of its write sets is on, and falls back to any
//! bookie when the racks run out.

use std::collections::{BTreeMap, BTreeSet};

use folio_env::Rng;
use folio_types::metadata::{LedgerMetadata, LedgerState};
use folio_types::{BookieId, EntryId, LedgerId};

use crate::error::ClientError;

/// The rack of each bookie that has one. Empty: placement is plain random.
pub type Racks = BTreeMap<BookieId, String>;

pub use folio_types::rack::RACK_PROPERTY;

/// Parses a rack mapping file (the client's counterpart of BookKeeper's
/// `networkTopologyScriptFileName`, as a table instead of a script): one `host:port rack`
/// per line, e.g. `10.0.0.5:3181 /region-a/rack-1`; blank lines and `#` comments are
/// skipped. The error names the line.
pub fn parse_rack_mapping(text: &str) -> Result<Racks, String> {
    let mut racks = Racks::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [bookie, rack] = fields[..] else {
            return Err(format!(
                "line {}: expected \"host:port rack\", got {line:?}",
                n + 1
            ));
        };
        let id = BookieId::new(bookie.to_string())
            .map_err(|e| format!("line {}: bad bookie id {bookie:?}: {e}", n + 1))?;
        if !folio_types::rack::valid_rack(rack) {
            return Err(format!(
                "line {}: rack {rack:?} is not a network location like /region/rack",
                n + 1
            ));
        }
        racks.insert(id, rack.to_string());
    }
    Ok(racks)
}

/// Whether ensemble positions `a` and `b` share a write set (round-robin striping).
fn share_write_set(a: usize, b: usize, ensemble_size: usize, write_quorum: usize) -> bool {
    let d = a.abs_diff(b);
    a != b && d.min(ensemble_size - d) < write_quorum
}

/// Takes a random candidate, preferring one whose rack none of the bookies already at
/// the positions sharing a write set with `position` is on.
fn pick(
    candidates: &mut Vec<BookieId>,
    placed: &[Option<BookieId>],
    position: usize,
    write_quorum: usize,
    racks: &Racks,
    rng: &dyn Rng,
) -> BookieId {
    let n = placed.len();
    let taken: BTreeSet<&String> = placed
        .iter()
        .enumerate()
        .filter(|(q, _)| share_write_set(position, *q, n, write_quorum))
        .filter_map(|(_, b)| b.as_ref().and_then(|b| racks.get(b)))
        .collect();
    let preferred: Vec<usize> = (0..candidates.len())
        .filter(|&i| {
            racks
                .get(&candidates[i])
                .is_some_and(|r| !taken.contains(r))
        })
        .collect();
    let i = if preferred.is_empty() {
        rng.below(candidates.len() as u64) as usize
    } else {
        preferred[rng.below(preferred.len() as u64) as usize]
    };
    candidates.swap_remove(i)
}

/// Picks `size` distinct bookies from `writable`, rack-aware when `racks` says where
/// they are.
pub fn choose_ensemble(
    size: usize,
    write_quorum: usize,
    writable: &BTreeSet<BookieId>,
    racks: &Racks,
    rng: &dyn Rng,
) -> Result<Vec<BookieId>, ClientError> {
    if writable.len() < size {
        return Err(ClientError::NotEnoughBookies {
            need: size,
            have: writable.len(),
            read_only: 0,
        });
    }
    let mut pool: Vec<BookieId> = writable.iter().cloned().collect();
    let mut placed: Vec<Option<BookieId>> = vec![None; size];
    for p in 0..size {
        placed[p] = Some(pick(&mut pool, &placed, p, write_quorum, racks, rng));
    }
    Ok(placed.into_iter().flatten().collect())
}

/// The ensemble after replacing the `failed` positions with writable bookies that are
/// neither in the ensemble nor known to have failed (`excluded`), rack-aware when
/// `racks` says where they are.
pub fn replace_bookies(
    ensemble: &[BookieId],
    write_quorum: usize,
    failed: &BTreeMap<usize, BookieId>,
    writable: &BTreeSet<BookieId>,
    excluded: &BTreeSet<BookieId>,
    racks: &Racks,
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
            read_only: 0,
        });
    }
    let mut placed: Vec<Option<BookieId>> = ensemble
        .iter()
        .enumerate()
        .map(|(p, b)| (!failed.contains_key(&p)).then(|| b.clone()))
        .collect();
    for &p in failed.keys() {
        placed[p] = Some(pick(&mut candidates, &placed, p, write_quorum, racks, rng));
    }
    let next: Vec<BookieId> = placed.into_iter().flatten().collect();
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
    #[test]
    fn a_rack_mapping_file_maps_bookies_and_names_bad_lines() {
        let text = "# racks\n127.0.0.1:3181 /r1\n\n  127.0.0.1:3182   /eu/r2  # two\n";
        let racks = super::parse_rack_mapping(text).unwrap();
        assert_eq!(racks.len(), 2);
        assert_eq!(
            racks[&folio_types::BookieId::new("127.0.0.1:3182".to_string()).unwrap()],
            "/eu/r2"
        );
        let e = super::parse_rack_mapping("a:1 /r1\nb:2\n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        let e = super::parse_rack_mapping("a:1 r1\n").unwrap_err();
        assert!(e.contains("line 1") && e.contains("r1"), "{e}");
    }

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
            let e = choose_ensemble(3, 2, &set(&[0, 1, 2, 3, 4]), &Racks::new(), &rng).unwrap();
            let distinct: BTreeSet<_> = e.iter().cloned().collect();
            assert_eq!(distinct.len(), 3);
            assert!(distinct.is_subset(&set(&[0, 1, 2, 3, 4])));
        }
        assert_eq!(
            choose_ensemble(3, 2, &set(&[0, 1]), &Racks::new(), &rng).unwrap_err(),
            ClientError::NotEnoughBookies {
                need: 3,
                have: 2,
                read_only: 0
            }
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
                2,
                &failed,
                &set(&[0, 1, 2, 3, 4]),
                &set(&[1, 4]),
                &Racks::new(),
                &rng,
            )
            .unwrap();
            assert_eq!(next, vec![b(0), b(3), b(2)]);
        }
        let err = replace_bookies(
            &ensemble,
            2,
            &failed,
            &set(&[0, 1, 2]),
            &set(&[1]),
            &Racks::new(),
            &rng,
        );
        assert_eq!(
            err.unwrap_err(),
            ClientError::NotEnoughBookies {
                need: 3,
                have: 2,
                read_only: 0
            }
        );
    }

    fn racks(assign: &[(usize, &str)]) -> Racks {
        assign.iter().map(|&(i, r)| (b(i), r.to_string())).collect()
    }

    #[test]
    fn rack_aware_ensembles_spread_every_write_set_over_racks() {
        // Six bookies on three racks, two each.
        let r = racks(&[(0, "a"), (1, "a"), (2, "b"), (3, "b"), (4, "c"), (5, "c")]);
        let all = set(&[0, 1, 2, 3, 4, 5]);
        for seed in 0..100 {
            let rng = SystemRng::with_seed(seed);
            let e = choose_ensemble(3, 3, &all, &r, &rng).unwrap();
            let used: BTreeSet<&String> = e.iter().map(|x| &r[x]).collect();
            assert_eq!(used.len(), 3, "seed {seed}: {e:?}");
            // E=4, Qw=2: each pair of neighbours (cyclically) on two racks.
            let e = choose_ensemble(4, 2, &all, &r, &rng).unwrap();
            for p in 0..4 {
                assert_ne!(r[&e[p]], r[&e[(p + 1) % 4]], "seed {seed}: {e:?}");
            }
        }
        // Not enough racks: still an ensemble (placement is not enforced).
        let one_rack = racks(&[(0, "a"), (1, "a"), (2, "a")]);
        let rng = SystemRng::with_seed(1);
        assert_eq!(
            choose_ensemble(3, 3, &set(&[0, 1, 2]), &one_rack, &rng)
                .unwrap()
                .len(),
            3
        );
    }

    #[test]
    fn rack_aware_replacement_avoids_the_racks_of_its_write_sets() {
        let r = racks(&[(0, "a"), (1, "b"), (2, "c"), (3, "a"), (4, "b"), (5, "c")]);
        let ensemble = vec![b(0), b(1), b(2)];
        let failed: BTreeMap<usize, BookieId> = [(2, b(2))].into_iter().collect();
        for seed in 0..50 {
            let rng = SystemRng::with_seed(seed);
            let next = replace_bookies(
                &ensemble,
                3,
                &failed,
                &set(&[0, 1, 2, 3, 4, 5]),
                &set(&[2]),
                &r,
                &rng,
            )
            .unwrap();
            assert_eq!(next[2], b(5), "seed {seed}: the only bookie on a free rack");
        }
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
