//! Moving ledgers' metadata from one bookie id to another (BookKeeper's
//! `updateBookieInLedger`, `UpdateLedgerOp`): for a bookie whose data now answers under a
//! new id (a host re-addressed, a bookie given a custom id), every ensemble naming the old
//! id names the new one. No entry moves: the data must already be at the new id.
//!
//! Each change goes through the replicator's compare-and-set, re-read on conflict, so a
//! live writer's own ensemble change is never lost. An ensemble that already names the
//! new id keeps the old one: one bookie twice in an ensemble would hold two positions'
//! entries with one disk (BookKeeper skips those too).

use std::time::Duration;

use folio_client::{Client, ClientError};
use folio_types::{BookieId, LedgerId};

use crate::replicator::{RepairError, replace_in_metadata};

/// How `update_bookie_in_ledgers` runs.
#[derive(Debug, Clone)]
pub struct RenameOptions {
    /// Ledgers updated per second at most (BookKeeper's `-updatespersec`, 5); 0: no limit.
    pub updates_per_sec: u32,
    /// Stop after this many ledgers updated (`-limit`); `None`: all.
    pub limit: Option<usize>,
}

impl Default for RenameOptions {
    fn default() -> Self {
        RenameOptions {
            updates_per_sec: 5,
            limit: None,
        }
    }
}

/// What `update_bookie_in_ledgers` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenameSummary {
    /// Ledgers whose metadata now names `to` where it named `from`.
    pub updated: Vec<LedgerId>,
    /// Ledgers that still name `from` in an ensemble that already holds `to`.
    pub skipped: Vec<LedgerId>,
}

/// Replaces `from` with `to` in every ensemble of every ledger; `on_ledger` is told each
/// ledger updated. Refused while `from` is registered: a running bookie under the old id
/// would keep serving (and taking) entries nobody then reads.
pub async fn update_bookie_in_ledgers(
    client: &Client,
    from: &BookieId,
    to: &BookieId,
    options: &RenameOptions,
    mut on_ledger: impl FnMut(LedgerId),
) -> Result<RenameSummary, ClientError> {
    if from == to {
        return Err(ClientError::InvalidArgument(format!(
            "source and destination are both {from}"
        )));
    }
    let set = client.metadata().list_bookies().await?;
    if set.writable.contains(from) || set.readonly.contains(from) {
        return Err(ClientError::InvalidArgument(format!(
            "bookie {from} is registered (running): stop it before its ledgers name {to}"
        )));
    }
    let pause =
        (options.updates_per_sec > 0).then(|| Duration::from_secs(1) / options.updates_per_sec);
    let mut summary = RenameSummary::default();
    for ledger in client.list_ledgers().await? {
        if options.limit.is_some_and(|l| summary.updated.len() >= l) {
            break;
        }
        let meta = match client.ledger_metadata(ledger).await {
            Ok(m) => m,
            Err(ClientError::NoSuchLedger { .. }) => continue,
            Err(e) => return Err(e),
        };
        let mut changed = false;
        let mut skipped = false;
        for (first, ensemble) in &meta.ensembles {
            let Some(position) = ensemble.iter().position(|b| b == from) else {
                continue;
            };
            if ensemble.contains(to) {
                skipped = true;
                continue;
            }
            match replace_in_metadata(
                client.metadata().as_ref(),
                ledger,
                *first,
                position,
                from,
                to,
            )
            .await
            {
                Ok(()) => changed = true,
                Err(RepairError::Deleted(_)) => break,
                Err(RepairError::Client(e)) => return Err(e),
                Err(RepairError::Metadata(e)) => return Err(e.into()),
                Err(e) => {
                    return Err(ClientError::MetadataConflict {
                        ledger,
                        reason: e.to_string(),
                    });
                }
            }
        }
        if skipped {
            summary.skipped.push(ledger);
        }
        if changed {
            summary.updated.push(ledger);
            on_ledger(ledger);
            if let Some(p) = pause {
                tokio::time::sleep(p).await;
            }
        }
    }
    Ok(summary)
}
