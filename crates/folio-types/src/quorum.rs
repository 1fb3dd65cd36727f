//! Quorum arithmetic: round-robin striping of entries over an ensemble.
//!
//! Entry `e` of a fragment with ensemble size `E` and write quorum `Qw` goes to the
//! bookies at ensemble positions `e mod E, e+1 mod E, ..., e+Qw-1 mod E`
//! (BookKeeper's `RoundRobinDistributionSchedule`).

/// E, Qw and Qa of a ledger, checked so that `E >= Qw >= Qa >= 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuorumConfig {
    pub ensemble_size: usize,
    pub write_quorum: usize,
    pub ack_quorum: usize,
}

impl QuorumConfig {
    pub fn new(
        ensemble_size: usize,
        write_quorum: usize,
        ack_quorum: usize,
    ) -> Result<Self, String> {
        if ack_quorum == 0 || ack_quorum > write_quorum || write_quorum > ensemble_size {
            return Err(format!(
                "invalid quorum: need ensemble >= write quorum >= ack quorum >= 1, got E={ensemble_size} Qw={write_quorum} Qa={ack_quorum}"
            ));
        }
        Ok(QuorumConfig {
            ensemble_size,
            write_quorum,
            ack_quorum,
        })
    }

    /// The ensemble positions that store `entry_id`, in write order.
    pub fn write_set(&self, entry_id: i64) -> Vec<usize> {
        self.write_positions(entry_id).collect()
    }

    /// [`QuorumConfig::write_set`] without the vector: what a writer walks for every add
    /// and every answer.
    pub fn write_positions(&self, entry_id: i64) -> impl Iterator<Item = usize> + use<> {
        let n = self.ensemble_size;
        let start = entry_id.rem_euclid(n as i64) as usize;
        (0..self.write_quorum).map(move |i| (start + i) % n)
    }

    /// Whether ensemble position `bookie_index` stores `entry_id`.
    pub fn stores(&self, entry_id: i64, bookie_index: usize) -> bool {
        let start = entry_id.rem_euclid(self.ensemble_size as i64) as usize;
        let offset = (bookie_index + self.ensemble_size - start) % self.ensemble_size;
        offset < self.write_quorum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_impossible_quorums() {
        assert!(QuorumConfig::new(3, 2, 2).is_ok());
        assert!(QuorumConfig::new(2, 3, 2).is_err());
        assert!(QuorumConfig::new(3, 2, 3).is_err());
        assert!(QuorumConfig::new(3, 2, 0).is_err());
    }

    #[test]
    fn write_set_wraps_round_robin() {
        let q = QuorumConfig::new(3, 2, 2).unwrap();
        assert_eq!(q.write_set(0), vec![0, 1]);
        assert_eq!(q.write_set(1), vec![1, 2]);
        assert_eq!(q.write_set(2), vec![2, 0]);
        assert_eq!(q.write_set(5), vec![2, 0]);
        for e in 0..12 {
            for b in 0..3 {
                assert_eq!(
                    q.stores(e, b),
                    q.write_set(e).contains(&b),
                    "entry {e} bookie {b}"
                );
            }
        }
    }
}
