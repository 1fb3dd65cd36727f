//! Quorum coverage: when a set of answers from bookies is enough to conclude something
//! about *every* ack quorum.
//!
//! An ack quorum is any `Qa` bookies of a write set. A property "covers" a write set of
//! `Qw` bookies when every `Qa`-subset of it has a member with the property, which is
//! the same as: at least `Qw - Qa + 1` members have it (fewer than `Qa` lack it).
//!
//! Two uses, both from the TLA+ findings (see `recovery`):
//! * fencing is complete when the fenced bookies cover every write set of the current
//!   ensemble (with round-robin striping there are `E` of them, one starting at each
//!   position: BookKeeper's `RoundRobinQuorumCoverageSet`);
//! * an entry is absent when explicit NoSuchEntry answers cover its own write set
//!   (`Qw - Qa + 1` negatives). Errors and timeouts never count.

use folio_types::quorum::QuorumConfig;

/// How many members of a write set must have a property for it to cover every ack quorum.
pub fn coverage_threshold(q: &QuorumConfig) -> usize {
    q.write_quorum - q.ack_quorum + 1
}

/// Whether the ensemble positions marked in `has` (indexed by position, length `E`) cover
/// every ack quorum of every write set of the ensemble.
pub fn covers_ensemble(q: &QuorumConfig, has: &[bool]) -> bool {
    debug_assert_eq!(has.len(), q.ensemble_size);
    let need = coverage_threshold(q);
    (0..q.ensemble_size).all(|start| {
        (0..q.write_quorum)
            .filter(|i| has[(start + i) % q.ensemble_size])
            .count()
            >= need
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition itself: every Qa-subset of every write set has a member in `has`.
    fn brute_force(q: &QuorumConfig, has: &[bool]) -> bool {
        (0..q.ensemble_size).all(|start| {
            let ws: Vec<usize> = (0..q.write_quorum)
                .map(|i| (start + i) % q.ensemble_size)
                .collect();
            // all subsets of ws of size Qa
            (0u32..(1 << ws.len()))
                .filter(|m| m.count_ones() as usize == q.ack_quorum)
                .all(|m| {
                    ws.iter()
                        .enumerate()
                        .any(|(i, &p)| m & (1 << i) != 0 && has[p])
                })
        })
    }

    #[test]
    fn threshold_rule_equals_the_definition_for_all_small_configurations() {
        for e in 1..=6 {
            for w in 1..=e {
                for a in 1..=w {
                    let q = QuorumConfig::new(e, w, a).unwrap();
                    for mask in 0u32..(1 << e) {
                        let has: Vec<bool> = (0..e).map(|i| mask & (1 << i) != 0).collect();
                        assert_eq!(
                            covers_ensemble(&q, &has),
                            brute_force(&q, &has),
                            "E={e} Qw={w} Qa={a} has={has:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn examples_from_the_seeds() {
        // E=3, Qw=2, Qa=2: any single bookie covers nothing; any two cover... only if
        // every write set {0,1},{1,2},{2,0} has one: {0,1} misses nothing? {0,1} covers
        // {0,1} and {1,2} and {2,0}.
        let q = QuorumConfig::new(3, 2, 2).unwrap();
        assert!(!covers_ensemble(&q, &[true, false, false]));
        assert!(covers_ensemble(&q, &[true, true, false]));
        // E=3, Qw=3, Qa=2: two fenced bookies are enough (the 2614 scenario).
        let q = QuorumConfig::new(3, 3, 2).unwrap();
        assert_eq!(coverage_threshold(&q), 2);
        assert!(covers_ensemble(&q, &[true, true, false]));
        assert!(!covers_ensemble(&q, &[false, true, false]));
    }
}
