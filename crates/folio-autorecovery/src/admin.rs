//! The operator's commands over autorecovery's machinery: `recover` (BookKeeper's
//! `BookKeeperAdmin.recoverBookieData`: every replica on the given bookies copied elsewhere,
//! client side, no locks) and decommission (recover a bookie that is leaving, then delete
//! its cookie). Neither loops forever: a ledger that cannot be repaired is reported with
//! its reason and the command goes on with the others.

use std::collections::BTreeSet;

use folio_client::Client;
use folio_types::{BookieId, LedgerId};

use crate::repair::{LedgerOutcome, Scope, repair_ledger};
use crate::replicator::CopyOptions;

/// How `recover` runs.
#[derive(Debug, Clone, Default)]
pub struct RecoverOptions {
    /// Only this ledger (`-l`).
    pub ledger: Option<LedgerId>,
    /// Leave open ledgers alone instead of fencing and closing them (`-sk`).
    pub skip_open: bool,
    pub copy: CopyOptions,
    /// Ledgers repaired at once (0 counts as 1). BookKeeper's recover does one at a time.
    pub concurrency: usize,
}

/// What `recover` did with one ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerReport {
    pub ledger: LedgerId,
    pub outcome: LedgerOutcome,
}

/// What `recover` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoverSummary {
    /// Ledgers that named a source bookie.
    pub ledgers: usize,
    pub entries: u64,
    pub bytes: u64,
    /// The ledgers left as they were, with why.
    pub failed: Vec<(LedgerId, String)>,
}

impl RecoverSummary {
    /// One line naming how many ledgers were left and the first one's reason; `None` when
    /// every ledger was recovered.
    pub fn failure(&self) -> Option<String> {
        let (ledger, reason) = self.failed.first()?;
        Some(format!(
            "{} ledger(s) not recovered (first: ledger {ledger}: {reason})",
            self.failed.len()
        ))
    }
}

/// The ledgers that name any of `bookies`.
pub async fn ledgers_naming(
    client: &Client,
    bookies: &BTreeSet<BookieId>,
) -> folio_client::Result<Vec<LedgerId>> {
    let mut out = Vec::new();
    for ledger in client.list_ledgers().await? {
        match client.ledger_metadata(ledger).await {
            Ok(m) if m.all_bookies().iter().any(|b| bookies.contains(b)) => out.push(ledger),
            Ok(_) | Err(folio_client::ClientError::NoSuchLedger { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Copies every replica held by `sources` to other bookies. `on_ledger` is told the
/// number of ledgers first (`None` ledger report), then each ledger as it ends.
pub async fn recover(
    client: &Client,
    sources: &BTreeSet<BookieId>,
    options: &RecoverOptions,
    on_ledger: &mut (dyn FnMut(usize, Option<&LedgerReport>) + Send),
) -> folio_client::Result<RecoverSummary> {
    let ledgers = match options.ledger {
        Some(l) => vec![l],
        None => ledgers_naming(client, sources).await?,
    };
    let mut summary = RecoverSummary {
        ledgers: ledgers.len(),
        ..RecoverSummary::default()
    };
    on_ledger(ledgers.len(), None);
    let scope = Scope::Drain(sources.clone());
    let mut queue = ledgers.into_iter();
    let mut running = tokio::task::JoinSet::new();
    loop {
        while running.len() < options.concurrency.max(1) {
            let Some(ledger) = queue.next() else { break };
            let (client, scope, copy) = (client.clone(), scope.clone(), options.copy.clone());
            let close_open = !options.skip_open;
            running.spawn(async move {
                let outcome = repair_ledger(&client, ledger, &scope, close_open, &copy).await;
                LedgerReport { ledger, outcome }
            });
        }
        let Some(done) = running.join_next().await else {
            break;
        };
        let report = done.map_err(|e| folio_client::ClientError::MetadataConflict {
            ledger: -1,
            reason: format!("a recover task failed: {e}"),
        })?;
        match &report.outcome {
            LedgerOutcome::Replicated { entries, bytes } => {
                summary.entries += entries;
                summary.bytes += bytes;
            }
            LedgerOutcome::Deleted => {}
            LedgerOutcome::OpenFragmentDamaged(_) => summary
                .failed
                .push((report.ledger, "open ledger skipped (-sk)".to_string())),
            LedgerOutcome::Failed(reason) => summary.failed.push((report.ledger, reason.clone())),
        }
        on_ledger(summary.ledgers, Some(&report));
    }
    Ok(summary)
}

/// Why a decommission was refused.
#[derive(Debug, thiserror::Error)]
pub enum DecommissionError {
    #[error(
        "bookie {0} is still registered as writable: stop it (or make it read-only) before decommissioning it, so no new ledger lands on it"
    )]
    StillWritable(BookieId),
    #[error("{} ledger(s) still name bookie {bookie}; its cookie is kept (first: ledger {}: {})", failed.len(), failed[0].0, failed[0].1)]
    Incomplete {
        bookie: BookieId,
        failed: Vec<(LedgerId, String)>,
    },
    #[error("{0}")]
    Client(#[from] folio_client::ClientError),
    #[error("metadata: {0}")]
    Metadata(#[from] folio_metadata::MetadataError),
}

/// Moves every replica off `bookie`, then deletes its cookie (when `delete_cookie`), so
/// that no ledger names it and it can never rejoin with its old data.
pub async fn decommission(
    client: &Client,
    bookie: &BookieId,
    delete_cookie: bool,
    copy: &CopyOptions,
    on_ledger: &mut (dyn FnMut(usize, Option<&LedgerReport>) + Send),
) -> Result<RecoverSummary, DecommissionError> {
    let metadata = client.metadata();
    if metadata.list_bookies().await?.writable.contains(bookie) {
        return Err(DecommissionError::StillWritable(bookie.clone()));
    }
    let sources = BTreeSet::from([bookie.clone()]);
    let options = RecoverOptions {
        copy: copy.clone(),
        concurrency: 4,
        ..RecoverOptions::default()
    };
    let summary = recover(client, &sources, &options, on_ledger).await?;
    let left = ledgers_naming(client, &sources).await?;
    if !left.is_empty() {
        let mut failed = summary.failed.clone();
        if failed.is_empty() {
            failed = left
                .iter()
                .map(|l| (*l, "still names the bookie".to_string()))
                .collect();
        }
        return Err(DecommissionError::Incomplete {
            bookie: bookie.clone(),
            failed,
        });
    }
    // Marks naming only this bookie are done with: the work they asked for is done.
    for mark in metadata.list_underreplicated().await? {
        if mark.missing_replicas.iter().all(|b| b == bookie) {
            metadata.remove_underreplicated(mark.ledger_id).await?;
        }
    }
    if delete_cookie {
        match metadata.read_cookie(bookie).await {
            Ok(c) => metadata.delete_cookie(bookie, c.version).await?,
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(summary)
}
