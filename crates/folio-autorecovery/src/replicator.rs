//! The fragment replicator (BookKeeper's `LedgerFragmentReplicator`): copies the entries
//! of one bad replica of a closed fragment from the surviving replicas, then, when the
//! copy went to a new bookie, replaces the old one in the ledger's metadata by
//! compare-and-set.
//!
//! The order is what keeps entries safe: every entry is durable on the target before the
//! metadata names the target, so a reader directed there always finds the copy. Copies
//! go with deferred sync ([`CopyOptions::deferred_sync`]): the target acknowledges each
//! before it is durable, and one ForceLedger, on the connection that carried them all,
//! makes them durable before the metadata changes (a replica repaired in place is
//! forced too before the repair counts). The metadata change touches only this fragment's position and only if the
//! old bookie is still there; on a version conflict (a live writer changed its ensemble,
//! closed the ledger, or another repair landed) it re-reads and re-applies, so neither
//! change is lost. A bookie that is up, writable and merely missing entries is repaired
//! in place, with no metadata change.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use folio_client::{Client, ClientError};
use folio_metadata::MetadataStore;
use folio_proto::DigestManager;
use folio_types::metadata::LedgerMetadata;
use folio_types::{BookieId, EntryId, LedgerId};
use tokio::task::JoinSet;

use crate::checker::{BadReplica, Damage};
use crate::fragments::fragments;
use crate::throttle::Throttle;

/// What one repair did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Repaired {
    pub entries: u64,
    pub bytes: u64,
    /// The bookie that now holds the replica (the same one when repaired in place).
    pub target: Option<BookieId>,
}

/// Why a repair did not finish.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    #[error("ledger {0} was deleted")]
    Deleted(LedgerId),
    #[error("no bookie can take the replica of {bookie}: {source}")]
    NoCandidate {
        bookie: BookieId,
        source: ClientError,
    },
    #[error("entry {entry} has no readable copy left (its other replicas: {sources:?}): {source}")]
    Unreadable {
        entry: EntryId,
        sources: Vec<BookieId>,
        source: ClientError,
    },
    #[error("{0}")]
    Client(#[from] ClientError),
    #[error("metadata: {0}")]
    Metadata(#[from] folio_metadata::MetadataError),
}

/// How copies are made.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// Entries being copied at once, a sliding window (BookKeeper's
    /// `rereplicationEntryBatchSize`, 10, which it copies in lock-step batches).
    pub batch_size: usize,
    /// Bytes per second, shared by every copy of this process; `None` = unthrottled
    /// (BookKeeper's `replicationRateByBytes`, -1).
    pub throttle: Option<Arc<Throttle>>,
    /// Copies go with deferred sync and are made durable by one ForceLedger before the
    /// metadata names the target (default on; BookKeeper's worker journals every copy).
    /// A Folio bookie then writes each copied byte once, to its entry log, instead of to
    /// its journal and then its entry log; a BookKeeper bookie journals them anyway.
    pub deferred_sync: bool,
    /// NEGATIVE CONTROL FOR TESTS ONLY, off by default: a replica moved to a new bookie
    /// gets the metadata change without its entries being copied, a replica repaired in
    /// place gets nothing, and the repair of the ledger is not checked after (see
    /// `AutoRecoveryConfig::skip_copy_for_tests`).
    #[doc(hidden)]
    pub skip_copy_for_tests: bool,
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            batch_size: 10,
            throttle: None,
            deferred_sync: true,
            skip_copy_for_tests: false,
        }
    }
}

/// Repairs `bad` (a replica of a closed fragment of `ledger`, described by `meta`).
/// `unavailable` are bookies not to copy to or from; `not_targets` are not copied to
/// either (bookies being drained) but may still serve their copies.
#[allow(clippy::too_many_arguments)]
pub async fn repair_replica(
    client: &Client,
    ledger: LedgerId,
    meta: &LedgerMetadata,
    digest: &DigestManager,
    master_key: &[u8],
    bad: &BadReplica,
    unavailable: &BTreeSet<BookieId>,
    not_targets: &BTreeSet<BookieId>,
    writable: &BTreeSet<BookieId>,
    options: &CopyOptions,
) -> Result<Repaired, RepairError> {
    let quorum = meta
        .quorum()
        .map_err(|reason| ClientError::MetadataConflict { ledger, reason })?;
    let Some(fragment) = fragments(meta)
        .into_iter()
        .find(|f| f.first == bad.fragment_first && f.closed)
    else {
        return Err(ClientError::MetadataConflict {
            ledger,
            reason: format!("no closed fragment starts at entry {}", bad.fragment_first),
        }
        .into());
    };
    if fragment.ensemble.get(bad.position) != Some(&bad.bookie) {
        // Someone else already moved this replica.
        return Ok(Repaired::default());
    }
    let in_place = matches!(bad.damage, Damage::Missing(_))
        && writable.contains(&bad.bookie)
        && !not_targets.contains(&bad.bookie);
    let (target, entries) = if in_place {
        let Damage::Missing(entries) = &bad.damage else {
            unreachable!()
        };
        (bad.bookie.clone(), entries.clone())
    } else {
        let mut excluded: BTreeSet<BookieId> = unavailable.union(not_targets).cloned().collect();
        excluded.insert(bad.bookie.clone());
        let target = client
            .replacement_bookie(
                &fragment.ensemble,
                quorum.write_quorum,
                bad.position,
                &excluded,
            )
            .await
            .map_err(|source| RepairError::NoCandidate {
                bookie: bad.bookie.clone(),
                source,
            })?;
        (target, fragment.entries_of(&quorum, bad.position))
    };
    let mut done = Repaired {
        target: Some(target.clone()),
        ..Repaired::default()
    };
    // The negative control: no copy, to a new bookie or in place.
    let to_copy: &[EntryId] = if options.skip_copy_for_tests {
        &[]
    } else {
        &entries
    };
    // A sliding window of `batch_size` copies in flight (BookKeeper copies in lock-step
    // batches and so waits for each batch's slowest copy with nothing else queued on the
    // target's journal): a copy starts as soon as any earlier one is done.
    let window = options.batch_size.max(1);
    let deferred = options
        .deferred_sync
        .then(|| Arc::new(folio_client::DeferredCopies::default()));
    let mut copies = JoinSet::new();
    let mut next = to_copy.iter().copied();
    loop {
        while copies.len() < window {
            let Some(entry) = next.next() else { break };
            let mut sources: Vec<BookieId> = fragment
                .sources(&quorum, entry, bad.position)
                .into_iter()
                .filter(|b| !unavailable.contains(b) && *b != bad.bookie)
                .collect();
            // A bookie being drained while still up (decommission) is the last resort for
            // its own entries: with Qw = 1 it holds the only copy.
            if !in_place && !unavailable.contains(&bad.bookie) {
                sources.push(bad.bookie.clone());
            }
            let (client, digest, key, target, deferred) = (
                client.clone(),
                digest.clone(),
                master_key.to_vec(),
                target.clone(),
                deferred.clone(),
            );
            copies.spawn(async move {
                let r = client
                    .copy_entry(&digest, &key, entry, &sources, &target, deferred.as_deref())
                    .await;
                (entry, sources, r)
            });
        }
        let Some(joined) = copies.join_next().await else {
            break;
        };
        let (entry, sources, result) = joined.map_err(|e| ClientError::MetadataConflict {
            ledger,
            reason: format!("copy task failed: {e}"),
        })?;
        let bytes = result.map_err(|source| RepairError::Unreadable {
            entry,
            sources,
            source,
        })?;
        done.entries += 1;
        done.bytes += bytes as u64;
        if let Some(t) = &options.throttle {
            t.take(bytes as u64).await;
        }
    }
    if let Some(deferred) = &deferred
        && done.entries > 0
    {
        client.force_copies(ledger, &target, deferred).await?;
    }
    if !in_place {
        replace_in_metadata(
            client.metadata().as_ref(),
            ledger,
            bad.fragment_first,
            bad.position,
            &bad.bookie,
            &target,
        )
        .await?;
    }
    tracing::info!(
        ledger,
        fragment = bad.fragment_first,
        from = %bad.bookie,
        to = %target,
        entries = done.entries,
        "replica repaired"
    );
    // BP-32: the target holds a closed ledger's entries it will never get more of (an open
    // ledger's writer sends its own write close to every bookie when it closes).
    if meta.is_closed()
        && done.entries > 0
        && let Ok(key) = <[u8; 20]>::try_from(master_key)
    {
        client.write_close_in_background(ledger, key, BTreeSet::from([target.clone()]));
    }
    Ok(done)
}

/// Sets position `position` of the fragment starting at `fragment_first` from `old` to
/// `new` by compare-and-set, re-reading on every conflict. Does nothing if the position no
/// longer holds `old` (another repair moved it).
pub async fn replace_in_metadata(
    metadata: &dyn MetadataStore,
    ledger: LedgerId,
    fragment_first: EntryId,
    position: usize,
    old: &BookieId,
    new: &BookieId,
) -> Result<(), RepairError> {
    // Conflicts come from live writers and other repairs; each retry re-reads, so this
    // only gives up if the ledger changes under it this many times in a row.
    for attempt in 0..100u32 {
        let current = match metadata.read_ledger(ledger).await {
            Ok(m) => m,
            Err(e) if e.is_not_found() => return Err(RepairError::Deleted(ledger)),
            Err(e) => return Err(e.into()),
        };
        let mut next = current.value.clone();
        match next.ensembles.get_mut(&fragment_first) {
            Some(ensemble) if ensemble.get(position) == Some(old) => {
                ensemble[position] = new.clone();
            }
            _ => return Ok(()),
        }
        match metadata.write_ledger(ledger, &next, current.version).await {
            Ok(_) => return Ok(()),
            Err(e) if e.is_bad_version() => {
                tracing::debug!(
                    ledger,
                    attempt,
                    "ledger changed during the repair; re-reading"
                );
                tokio::time::sleep(Duration::from_millis(10 * u64::from(attempt.min(20)))).await;
            }
            Err(e) if e.is_not_found() => return Err(RepairError::Deleted(ledger)),
            Err(e) => return Err(e.into()),
        }
    }
    Err(ClientError::MetadataConflict {
        ledger,
        reason: "the metadata kept changing during the repair".into(),
    }
    .into())
}
