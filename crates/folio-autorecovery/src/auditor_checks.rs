//! The Auditor's periodic checks that ask more than the metadata: checkAllLedgers, the
//! replicas check and the placement policy check (BookKeeper's `AuditorCheckAllLedgersTask`,
//! `AuditorReplicasCheckTask`, `AuditorPlacementPolicyCheckTask`), each a sweep over the
//! ledgers, and the sans-IO judgements they make of one ledger.
//!
//! Unlike BookKeeper's, the replicas check marks what it finds (BookKeeper's only counts),
//! so a copy silently lost on a bookie that is still up (a wiped disk, a corrupt log) is
//! repaired, not just charted. The placement policy check counts only: moving replicas to
//! mend a placement (BookKeeper's `repairedPlacementPolicyNotAdheringBookieEnabled`) is
//! not built.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use folio_client::ensemble::Racks;
use folio_client::{Client, proto_digest};
use folio_proto::DigestManager;
use folio_types::metadata::LedgerMetadata;
use folio_types::{BookieId, EntryId};

use crate::auditor::AuditorStatus;
use crate::checker::{CheckReport, Damage, check_ledger};
use crate::fragments::fragments;
use crate::stats::Stats;

/// How short of copies a ledger's worst entry is (BookKeeper's replicas check categories;
/// each ledger counts in the worst one only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Shortfall {
    /// Every entry has its write quorum of copies.
    None,
    /// Some entry has fewer than Qw copies (`NUM_LEDGERS_HAVING_LESS_THAN_WQ_REPLICAS_OF_AN_ENTRY`).
    BelowWriteQuorum,
    /// Some entry has fewer than Qa copies (`..._LESS_THAN_AQ_...`).
    BelowAckQuorum,
    /// Some entry has no copy at all (`NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY`): lost.
    NoReplica,
}

/// The worst shortfall among the entries of `meta`'s closed fragments, given what the
/// ledger checker found: a replica judged bad lacks the entries it names, an unavailable
/// bookie every entry striping gives it.
pub fn shortfall(meta: &LedgerMetadata, report: &CheckReport) -> Shortfall {
    let Ok(quorum) = meta.quorum() else {
        return Shortfall::None;
    };
    let mut worst = Shortfall::None;
    for fragment in fragments(meta).into_iter().filter(|f| f.closed) {
        // Copies missing per entry of this fragment.
        let mut missing: BTreeMap<EntryId, usize> = BTreeMap::new();
        for bad in report
            .bad
            .iter()
            .filter(|b| b.fragment_first == fragment.first)
        {
            let entries = match &bad.damage {
                Damage::Unavailable => fragment.entries_of(&quorum, bad.position),
                Damage::Missing(entries) => entries.clone(),
            };
            for e in entries {
                *missing.entry(e).or_default() += 1;
            }
        }
        for lacking in missing.into_values() {
            let copies = quorum.write_quorum.saturating_sub(lacking);
            let this = if copies == 0 {
                Shortfall::NoReplica
            } else if copies < quorum.ack_quorum {
                Shortfall::BelowAckQuorum
            } else if copies < quorum.write_quorum {
                Shortfall::BelowWriteQuorum
            } else {
                Shortfall::None
            };
            worst = worst.max(this);
        }
    }
    worst
}

/// How well an ensemble follows the placement policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Adherence {
    /// Every write set spans as many racks as the cluster allows (Folio's placement aims
    /// at this; BookKeeper's `MEETS_STRICT`).
    Strict,
    /// Every write set spans at least two racks (BookKeeper's rack-aware minimum,
    /// `minNumRacksPerWriteQuorum` 2), not all it could (`MEETS_SOFT`).
    Soft,
    /// A write set on one rack while the cluster has several, or a bookie twice in one
    /// ensemble (`FAIL`).
    Fail,
}

/// How `ensemble` (striped with write quorum `write_quorum`) follows rack-aware placement,
/// `racks` being the racks of the cluster's bookies (empty when placement is not
/// rack-aware: then any ensemble of distinct bookies is strict). A bookie with no rack
/// counts as being on BookKeeper's `/default-rack`.
pub fn adherence(ensemble: &[BookieId], write_quorum: usize, racks: &Racks) -> Adherence {
    let distinct: BTreeSet<&BookieId> = ensemble.iter().collect();
    if distinct.len() != ensemble.len() {
        return Adherence::Fail;
    }
    if racks.is_empty() || ensemble.is_empty() {
        return Adherence::Strict;
    }
    let rack_of = |b: &BookieId| racks.get(b).map_or("/default-rack", String::as_str);
    let cluster_racks = racks.values().map(String::as_str).collect::<BTreeSet<_>>();
    let best = write_quorum.min(cluster_racks.len().max(1));
    let minimum = best.min(2);
    let n = ensemble.len();
    let mut worst = Adherence::Strict;
    for start in 0..n {
        let spanned: BTreeSet<&str> = (0..write_quorum.min(n))
            .map(|k| rack_of(&ensemble[(start + k) % n]))
            .collect();
        let this = if spanned.len() >= best {
            Adherence::Strict
        } else if spanned.len() >= minimum {
            Adherence::Soft
        } else {
            Adherence::Fail
        };
        worst = worst.max(this);
    }
    worst
}

/// Which ledgers a replicas sweep reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep {
    /// checkAllLedgers: every ledger, open ones included (their closed fragments, and the
    /// unavailable bookies of their last).
    AllLedgers,
    /// The replicas check: closed ledgers only, as BookKeeper's.
    ClosedLedgers,
}

/// What a replicas sweep found, by ledger.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepCounts {
    pub checked: u64,
    pub marked: u64,
    pub below_write_quorum: u64,
    pub below_ack_quorum: u64,
    pub no_replica: u64,
}

/// Asks the bookies for every swept ledger's replicas (the ledger checker) and marks the
/// bad ones under-replicated with the bookies that lack copies.
pub async fn sweep_replicas(
    client: &Client,
    sweep: Sweep,
    status: &AuditorStatus,
    stats: &Stats,
) -> folio_metadata::Result<SweepCounts> {
    let metadata = client.metadata();
    let set = metadata.list_bookies().await?;
    let available: BTreeSet<BookieId> = set.writable.union(&set.readonly).cloned().collect();
    let mut counts = SweepCounts::default();
    for ledger in client.list_ledgers().await.map_err(internal)? {
        let Some(meta) = read_meta(metadata, ledger).await? else {
            continue;
        };
        if sweep == Sweep::ClosedLedgers && !meta.is_closed() {
            continue;
        }
        let password = meta.password.clone().unwrap_or_default();
        let digest = DigestManager::new(ledger, proto_digest(meta.digest_type), &password);
        counts.checked += 1;
        status.ledgers_checked.fetch_add(1, Ordering::Relaxed);
        stats.auditor_count("NUM_LEDGERS_CHECKED", 1);
        let Ok(report) = check_ledger(client, ledger, &meta, &digest, &available).await else {
            continue;
        };
        match shortfall(&meta, &report) {
            Shortfall::None => {}
            Shortfall::BelowWriteQuorum => counts.below_write_quorum += 1,
            Shortfall::BelowAckQuorum => counts.below_ack_quorum += 1,
            Shortfall::NoReplica => counts.no_replica += 1,
        }
        let bad: Vec<BookieId> = report
            .bad
            .iter()
            .map(|b| b.bookie.clone())
            .chain(report.unavailable_in_open_fragment.iter().cloned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if !bad.is_empty() {
            tracing::info!(ledger, ?bad, ?sweep, "bookies lack copies of the ledger");
            metadata.mark_underreplicated(ledger, &bad).await?;
            counts.marked += 1;
            status.ledgers_marked.fetch_add(1, Ordering::Relaxed);
            stats.auditor_count("NUM_UNDER_REPLICATED_LEDGERS", 1);
        }
    }
    Ok(counts)
}

/// What a placement policy check found, by closed ledger.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlacementCounts {
    pub checked: u64,
    pub not_adhering: u64,
    pub softly_adhering: u64,
}

/// Judges every closed ledger's ensembles against the placement policy, with the racks the
/// auditor's client places by; a ledger counts by its worst ensemble.
pub async fn check_placement(client: &Client) -> folio_metadata::Result<PlacementCounts> {
    let metadata = client.metadata();
    let set = metadata.list_bookies().await?;
    let cluster: BTreeSet<BookieId> = set.writable.union(&set.readonly).cloned().collect();
    let racks = client.racks_of(&cluster).await.map_err(internal)?;
    let mut counts = PlacementCounts::default();
    for ledger in client.list_ledgers().await.map_err(internal)? {
        let Some(meta) = read_meta(metadata, ledger).await? else {
            continue;
        };
        if !meta.is_closed() {
            continue;
        }
        counts.checked += 1;
        let worst = meta
            .ensembles
            .values()
            .map(|ensemble| adherence(ensemble, meta.write_quorum, &racks))
            .max()
            .unwrap_or(Adherence::Strict);
        match worst {
            Adherence::Strict => {}
            Adherence::Soft => counts.softly_adhering += 1,
            Adherence::Fail => {
                tracing::info!(ledger, "ledger does not adhere to the placement policy");
                counts.not_adhering += 1;
            }
        }
    }
    Ok(counts)
}

/// A ledger's metadata; `None` once it is deleted.
async fn read_meta(
    metadata: &std::sync::Arc<dyn folio_metadata::MetadataStore>,
    ledger: folio_types::LedgerId,
) -> folio_metadata::Result<Option<LedgerMetadata>> {
    match metadata.read_ledger(ledger).await {
        Ok(m) => Ok(Some(m.value)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

fn internal(e: folio_client::ClientError) -> folio_metadata::MetadataError {
    folio_metadata::MetadataError::Internal(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::BadReplica;
    use folio_types::metadata::{DigestType, LedgerState};

    fn b(n: u16) -> BookieId {
        BookieId::new(format!("10.0.0.{n}:3181")).unwrap()
    }

    fn closed(e: usize, qw: usize, qa: usize, last: EntryId) -> LedgerMetadata {
        let ensemble: Vec<BookieId> = (1..=e as u16).map(b).collect();
        let mut m = LedgerMetadata::new_open(
            folio_types::quorum::QuorumConfig::new(e, qw, qa).unwrap(),
            ensemble,
            DigestType::Crc32,
            b"pw".to_vec(),
        );
        m.state = LedgerState::Closed;
        m.last_entry_id = last;
        m
    }

    fn missing(position: usize, entries: Vec<EntryId>) -> BadReplica {
        BadReplica {
            fragment_first: 0,
            position,
            bookie: b(position as u16 + 1),
            damage: Damage::Missing(entries),
        }
    }

    #[test]
    fn a_ledger_counts_by_its_worst_entry() {
        let m = closed(3, 3, 2, 9);
        let clean = CheckReport::default();
        assert_eq!(shortfall(&m, &clean), Shortfall::None);
        let one = CheckReport {
            bad: vec![missing(0, vec![4])],
            ..Default::default()
        };
        assert_eq!(shortfall(&m, &one), Shortfall::BelowWriteQuorum);
        // Entry 4 lost twice: one copy left, below Qa = 2; entry 5 lost once.
        let two = CheckReport {
            bad: vec![missing(0, vec![4, 5]), missing(1, vec![4])],
            ..Default::default()
        };
        assert_eq!(shortfall(&m, &two), Shortfall::BelowAckQuorum);
        let three = CheckReport {
            bad: vec![
                missing(0, vec![4]),
                missing(1, vec![4]),
                missing(2, vec![4]),
            ],
            ..Default::default()
        };
        assert_eq!(shortfall(&m, &three), Shortfall::NoReplica);
    }

    #[test]
    fn an_unavailable_bookie_lacks_every_entry_striping_gives_it() {
        // E3 Qw2: position 0 holds entries 0, 2, 3, 5, ...; with positions 0 and 1 gone,
        // entry 0 (write set {0, 1}) has no copy left.
        let m = closed(3, 2, 2, 5);
        let gone = |position: usize| BadReplica {
            fragment_first: 0,
            position,
            bookie: b(position as u16 + 1),
            damage: Damage::Unavailable,
        };
        let one = CheckReport {
            bad: vec![gone(0)],
            ..Default::default()
        };
        assert_eq!(shortfall(&m, &one), Shortfall::BelowAckQuorum);
        let two = CheckReport {
            bad: vec![gone(0), gone(1)],
            ..Default::default()
        };
        assert_eq!(shortfall(&m, &two), Shortfall::NoReplica);
    }

    #[test]
    fn placement_is_judged_per_write_set_against_the_racks_the_cluster_has() {
        let racks: Racks = [
            (b(1), "/r1".to_string()),
            (b(2), "/r1".to_string()),
            (b(3), "/r2".to_string()),
            (b(4), "/r3".to_string()),
        ]
        .into_iter()
        .collect();
        // Not rack-aware: distinct bookies are enough; a bookie twice never is.
        assert_eq!(
            adherence(&[b(1), b(2)], 2, &Racks::new()),
            Adherence::Strict
        );
        assert_eq!(adherence(&[b(1), b(1)], 2, &Racks::new()), Adherence::Fail);
        // Three racks, Qw 3: all three racks is strict, two is soft, one write set on a
        // single rack fails.
        assert_eq!(adherence(&[b(1), b(3), b(4)], 3, &racks), Adherence::Strict);
        assert_eq!(adherence(&[b(1), b(2), b(3)], 3, &racks), Adherence::Soft);
        assert_eq!(adherence(&[b(1), b(2), b(3)], 2, &racks), Adherence::Fail);
        assert_eq!(adherence(&[b(1), b(3), b(2)], 2, &racks), Adherence::Fail);
        assert_eq!(
            adherence(&[b(1), b(3), b(2), b(4)], 2, &racks),
            Adherence::Strict
        );
        // One rack in the whole cluster: nothing better is possible.
        let one_rack: Racks = [(b(1), "/r1".to_string()), (b(2), "/r1".to_string())]
            .into_iter()
            .collect();
        assert_eq!(adherence(&[b(1), b(2)], 2, &one_rack), Adherence::Strict);
    }
}
