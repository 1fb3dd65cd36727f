//! The ledger checker (BookKeeper's `LedgerChecker`): which replicas of a ledger's closed
//! fragments are missing entries, asked of the bookies themselves.
//!
//! BookKeeper reads the first and last entry of each fragment on each bookie (plus a
//! sample). Folio asks each bookie once per ledger for the list of entries it holds
//! (GetListOfEntriesOfLedger) and compares it with every entry striping assigns to it, so
//! a copy lost in the middle of a fragment is found too. An entry the list lacks is then
//! read directly before the replica is judged, so a list that lags behind a write cache
//! never condemns a good copy. A bookie that is not registered is bad without any I/O; any
//! error reading a copy marks it bad (as BookKeeper does): repairing a good copy costs a
//! copy, missing a bad one could cost the entry.

use std::collections::{BTreeMap, BTreeSet};

use folio_client::{Client, ReplicaAnswer};
use folio_proto::DigestManager;
use folio_types::metadata::LedgerMetadata;
use folio_types::{BookieId, EntryId, LedgerId};

use crate::fragments::{Fragment, fragments, missing_entries};

/// Why a replica needs repair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// The bookie is not registered (gone, or never came back).
    Unavailable,
    /// The bookie is up but lacks these entries it should hold (or could not serve them).
    Missing(Vec<EntryId>),
}

/// One replica to repair: ensemble position `position` of the fragment starting at
/// `fragment_first`, held by `bookie`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadReplica {
    pub fragment_first: EntryId,
    pub position: usize,
    pub bookie: BookieId,
    pub damage: Damage,
}

/// What the checker found in one ledger.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Replicas of closed fragments to repair.
    pub bad: Vec<BadReplica>,
    /// Bookies of the last fragment of a ledger that is not closed that are not
    /// registered: only a recovery (fence and close) makes that fragment repairable.
    pub unavailable_in_open_fragment: BTreeSet<BookieId>,
}

impl CheckReport {
    pub fn is_clean(&self) -> bool {
        self.bad.is_empty() && self.unavailable_in_open_fragment.is_empty()
    }
}

/// Checks every replica of `meta`'s fragments. `available` is the set of registered
/// bookies (writable and read-only).
pub async fn check_ledger(
    client: &Client,
    ledger: LedgerId,
    meta: &LedgerMetadata,
    digest: &DigestManager,
    available: &BTreeSet<BookieId>,
) -> folio_client::Result<CheckReport> {
    let quorum = meta
        .quorum()
        .map_err(|reason| folio_client::ClientError::MetadataConflict { ledger, reason })?;
    let mut report = CheckReport::default();
    // One list per bookie for the whole ledger; `None` when the bookie could not give one.
    let mut lists = BTreeMap::new();
    for fragment in fragments(meta) {
        for (position, bookie) in fragment.ensemble.iter().enumerate() {
            if !available.contains(bookie) {
                if fragment.closed {
                    report
                        .bad
                        .push(bad(&fragment, position, Damage::Unavailable));
                } else {
                    report.unavailable_in_open_fragment.insert(bookie.clone());
                }
                continue;
            }
            let wanted = fragment.entries_of(&quorum, position);
            if wanted.is_empty() {
                continue;
            }
            if !lists.contains_key(bookie) {
                let list = client.entries_on_bookie(bookie, ledger).await.ok();
                lists.insert(bookie.clone(), list);
            }
            let suspects = match &lists[bookie] {
                Some(held) => missing_entries(&wanted, held),
                // No list: fall back to BookKeeper's probe of the first and last entry.
                None => {
                    let mut ends = vec![wanted[0]];
                    ends.extend(wanted.last().filter(|&&l| l != wanted[0]));
                    ends
                }
            };
            // The first suspect that cannot be read condemns the replica: every suspect is
            // then copied (re-adding an entry a bookie has is harmless), so a wiped
            // bookie costs one probe, not one per entry.
            for (i, &entry) in suspects.iter().enumerate() {
                if client.probe_entry(bookie, digest, entry).await != ReplicaAnswer::Present {
                    let missing = suspects[i..].to_vec();
                    report
                        .bad
                        .push(bad(&fragment, position, Damage::Missing(missing)));
                    break;
                }
            }
        }
    }
    Ok(report)
}

fn bad(fragment: &Fragment, position: usize, damage: Damage) -> BadReplica {
    BadReplica {
        fragment_first: fragment.first,
        position,
        bookie: fragment.ensemble[position].clone(),
        damage,
    }
}
