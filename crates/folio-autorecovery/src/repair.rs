//! Repairing one ledger: find its bad replicas, close it first if its open fragment lost a
//! bookie, copy every bad replica of its closed fragments, and check again. Shared by the
//! ReplicationWorker (bad replicas found by the ledger checker) and by `recover` and
//! decommission (every replica on the given bookies, whether they are up or not).

use std::collections::BTreeSet;

use folio_client::{Client, ClientError, OpenOptions, proto_digest};
use folio_proto::{DigestManager, master_key};
use folio_types::metadata::LedgerMetadata;
use folio_types::{BookieId, LedgerId};

use crate::checker::{BadReplica, CheckReport, Damage, check_ledger};
use crate::fragments::fragments;
use crate::replicator::{CopyOptions, RepairError, Repaired, repair_replica};

/// Which replicas to repair.
#[derive(Debug, Clone)]
pub enum Scope {
    /// Those the ledger checker finds bad (the ReplicationWorker).
    Check,
    /// Every replica held by these bookies, up or not (recover, decommission).
    Drain(BTreeSet<BookieId>),
}

/// How a repair of one ledger ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerOutcome {
    /// Every replica is where it should be; what was copied to get there.
    Replicated { entries: u64, bytes: u64 },
    /// The ledger no longer exists.
    Deleted,
    /// The ledger is open and its last fragment lost a bookie: it must be fenced and
    /// closed first, which `close_open` did not allow.
    OpenFragmentDamaged(BTreeSet<BookieId>),
    /// Something could not be repaired now (the reason says what); retry later.
    Failed(String),
}

/// Repairs `ledger`. With `close_open`, an open ledger whose last fragment lost a bookie
/// is opened with recovery (fenced and closed: its writer, if alive, fails) so that its
/// last fragment can be copied too.
pub async fn repair_ledger(
    client: &Client,
    ledger: LedgerId,
    scope: &Scope,
    close_open: bool,
    copy: &CopyOptions,
) -> LedgerOutcome {
    let (mut entries, mut bytes) = (0, 0);
    // A pass that repaired something checks again; three passes cover a recovery, a
    // repair and the final check.
    for _ in 0..3 {
        let meta = match client.metadata().read_ledger(ledger).await {
            Ok(m) => m.value,
            Err(e) if e.is_not_found() => return LedgerOutcome::Deleted,
            Err(e) => return LedgerOutcome::Failed(format!("reading its metadata: {e}")),
        };
        let password = meta.password.clone().unwrap_or_default();
        let digest = DigestManager::new(ledger, proto_digest(meta.digest_type), &password);
        let set = match client.metadata().list_bookies().await {
            Ok(s) => s,
            Err(e) => return LedgerOutcome::Failed(format!("listing bookies: {e}")),
        };
        let writable = set.writable.clone();
        let available: BTreeSet<BookieId> = set.writable.into_iter().chain(set.readonly).collect();
        let report = match scope {
            Scope::Check => match check_ledger(client, ledger, &meta, &digest, &available).await {
                Ok(r) => r,
                Err(e) => return LedgerOutcome::Failed(format!("checking it: {e}")),
            },
            Scope::Drain(sources) => drain_report(&meta, sources),
        };
        if report.is_clean() {
            return LedgerOutcome::Replicated { entries, bytes };
        }
        if !report.unavailable_in_open_fragment.is_empty() {
            if !close_open {
                return LedgerOutcome::OpenFragmentDamaged(report.unavailable_in_open_fragment);
            }
            tracing::info!(ledger, lost = ?report.unavailable_in_open_fragment, "fencing and closing the ledger to repair its last fragment");
            match client
                .open_ledger(ledger, &password, OpenOptions::recovery())
                .await
            {
                Ok(_) => continue,
                Err(ClientError::NoSuchLedger { .. }) => return LedgerOutcome::Deleted,
                Err(e) => return LedgerOutcome::Failed(format!("recovering it: {e}")),
            }
        }
        let unavailable: BTreeSet<BookieId> = meta
            .all_bookies()
            .into_iter()
            .filter(|b| !available.contains(b))
            .collect();
        let not_targets = match scope {
            Scope::Drain(sources) => sources.clone(),
            Scope::Check => BTreeSet::new(),
        };
        let key = master_key(&password);
        let mut failures = Vec::new();
        for bad in &report.bad {
            match repair_replica(
                client,
                ledger,
                &meta,
                &digest,
                &key,
                bad,
                &unavailable,
                &not_targets,
                &writable,
                copy,
            )
            .await
            {
                Ok(Repaired {
                    entries: e,
                    bytes: b,
                    ..
                }) => {
                    entries += e;
                    bytes += b;
                }
                Err(RepairError::Deleted(_)) => return LedgerOutcome::Deleted,
                Err(e) => failures.push(format!(
                    "fragment {} replica {}: {e}",
                    bad.fragment_first, bad.bookie
                )),
            }
        }
        if !failures.is_empty() {
            return LedgerOutcome::Failed(failures.join("; "));
        }
        if copy.skip_copy_for_tests {
            // The negative control trusts its non-copies: no check after (which would
            // find the holes and fill them in place).
            return LedgerOutcome::Replicated { entries, bytes };
        }
    }
    LedgerOutcome::Failed("still under-replicated after three repair passes".into())
}

/// Every replica on `sources`, as bad replicas of closed fragments or as unavailable
/// bookies of the open one.
fn drain_report(meta: &LedgerMetadata, sources: &BTreeSet<BookieId>) -> CheckReport {
    let mut report = CheckReport::default();
    for f in fragments(meta) {
        for (position, bookie) in f.ensemble.iter().enumerate() {
            if !sources.contains(bookie) {
                continue;
            }
            if f.closed {
                report.bad.push(BadReplica {
                    fragment_first: f.first,
                    position,
                    bookie: bookie.clone(),
                    damage: Damage::Unavailable,
                });
            } else {
                report.unavailable_in_open_fragment.insert(bookie.clone());
            }
        }
    }
    report
}
