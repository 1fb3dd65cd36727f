//! The async shell of ledger recovery: marks the ledger IN_RECOVERY by CAS, runs the
//! [`Recovery`] state machine over the network, and closes the ledger by CAS. A close
//! by someone else (another recovery, or the writer) found at either CAS is adopted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use folio_metadata::Versioned;
use folio_proto::{DigestManager, Status};
use folio_types::metadata::{LedgerMetadata, LedgerState};
use folio_types::{BookieId, EntryId, LedgerId};
use tokio::sync::mpsc;

use crate::client::Inner;
use crate::conn::{RpcError, req};
use crate::ensemble::with_new_fragment;
use crate::error::{ClientError, Result};
use crate::reader::read_entry;
use crate::recovery::{FenceAnswer, ReadAnswer, Recovery, RecoveryAction, WriteAnswer};

enum Event {
    Fence(usize, FenceAnswer),
    Read(EntryId, usize, ReadAnswer),
    Write(EntryId, BookieId, WriteAnswer),
    Length(Result<u64>),
    EnsembleChanged(Result<ChangeOutcome>),
}

/// What a write-back ensemble change found in the metadata.
enum ChangeOutcome {
    /// The new fragment is recorded.
    Changed(Versioned<LedgerMetadata>),
    /// Someone else closed the ledger meanwhile: adopt their close.
    ClosedByOther(Versioned<LedgerMetadata>),
}

/// How the recovery run ended.
enum RunOutcome {
    Close { last_entry: EntryId, length: u64 },
    Adopted(Versioned<LedgerMetadata>),
}

/// Recovers and closes `ledger`; returns its closed metadata (possibly closed by
/// someone else). A concurrent recovery that changed the metadata under this one (a
/// write-back fragment) makes it start over from the metadata as it is now.
pub(crate) async fn recover(
    inner: &Arc<Inner>,
    ledger: LedgerId,
    digest: &DigestManager,
    master_key: &[u8; 20],
) -> Result<Versioned<LedgerMetadata>> {
    let mut attempt = 0;
    loop {
        match recover_once(inner, ledger, digest, master_key).await {
            Err(ClientError::MetadataConflict { reason, .. })
                if attempt < inner.config.metadata_retries =>
            {
                attempt += 1;
                tracing::debug!(ledger, "recovery starts over: {reason}");
            }
            other => return other,
        }
    }
}

async fn recover_once(
    inner: &Arc<Inner>,
    ledger: LedgerId,
    digest: &DigestManager,
    master_key: &[u8; 20],
) -> Result<Versioned<LedgerMetadata>> {
    let retries = inner.config.metadata_retries.max(1);
    // Step 1: flag the ledger in recovery, so the writer cannot change its ensemble.
    let mut attempt = 0;
    let mut meta = loop {
        let current = inner.read_ledger(ledger).await?;
        current
            .value
            .validate()
            .map_err(|reason| ClientError::MetadataConflict { ledger, reason })?;
        match current.value.state {
            LedgerState::Closed => return Ok(current),
            LedgerState::InRecovery => break current,
            LedgerState::Open => {
                let mut next = current.value.clone();
                next.state = LedgerState::InRecovery;
                match inner
                    .metadata
                    .write_ledger(ledger, &next, current.version)
                    .await
                {
                    Ok(version) => {
                        break Versioned {
                            value: next,
                            version,
                        };
                    }
                    Err(e) if e.is_bad_version() && attempt < retries => attempt += 1,
                    Err(e) => return Err(ClientError::from_metadata(ledger, e)),
                }
            }
        }
    };
    tracing::debug!(ledger, "ledger in recovery");

    let (last_entry, length) = match run(inner, &mut meta, ledger, digest, master_key).await? {
        RunOutcome::Close { last_entry, length } => (last_entry, length),
        RunOutcome::Adopted(closed) => return Ok(closed),
    };

    // Step 4: close by CAS; adopt a close by someone else.
    let mut attempt = 0;
    loop {
        let mut closed = meta.value.clone();
        closed.state = LedgerState::Closed;
        closed.last_entry_id = last_entry;
        closed.length = length;
        match inner
            .metadata
            .write_ledger(ledger, &closed, meta.version)
            .await
        {
            Ok(version) => {
                tracing::debug!(ledger, last_entry, "recovered and closed");
                return Ok(Versioned {
                    value: closed,
                    version,
                });
            }
            Err(e) if e.is_bad_version() && attempt < retries => {
                attempt += 1;
                let current = inner.read_ledger(ledger).await?;
                if current.value.is_closed() {
                    tracing::debug!(
                        ledger,
                        theirs = current.value.last_entry_id,
                        ours = last_entry,
                        "ledger closed by someone else during recovery: adopting their close"
                    );
                    return Ok(current);
                }
                if current.value.ensembles != meta.value.ensembles {
                    return Err(ClientError::MetadataConflict {
                        ledger,
                        reason: "the ensembles changed during recovery".into(),
                    });
                }
                meta = current;
            }
            Err(e) => return Err(ClientError::from_metadata(ledger, e)),
        }
    }
}

/// Steps 2 and 3: fence, read forward, write back. Returns the last entry and length.
async fn run(
    inner: &Arc<Inner>,
    versioned: &mut Versioned<LedgerMetadata>,
    ledger: LedgerId,
    digest: &DigestManager,
    master_key: &[u8; 20],
) -> Result<RunOutcome> {
    let meta = versioned.value.clone();
    let quorum = meta
        .quorum()
        .map_err(|e| ClientError::MetadataConflict { ledger, reason: e })?;
    let Some((fragment_start, ensemble)) = meta.current_ensemble() else {
        return Err(ClientError::MetadataConflict {
            ledger,
            reason: "the metadata has no ensemble".into(),
        });
    };
    // Fence and read the writer's fragment, even when an earlier recovery appended
    // write-back fragments after it (their new bookies hold only what was written back).
    let (read_start, read_ensemble) =
        writer_fragment(&meta).unwrap_or((fragment_start, ensemble.to_vec()));
    let (mut machine, actions) = Recovery::start(
        ledger,
        quorum,
        read_start,
        read_ensemble.clone(),
        digest.clone(),
    );
    if read_start != fragment_start || read_ensemble != ensemble {
        tracing::debug!(
            ledger,
            read_start,
            fragment_start,
            "recovery reads the writer's fragment, writes back to the last"
        );
        machine.set_write_fragment(fragment_start, ensemble.to_vec());
    }
    machine.set_max_ensemble_changes(inner.config.max_ensemble_changes);
    let (tx, mut rx) = mpsc::unbounded_channel::<Event>();
    let mut queue = actions;
    // Bookies that failed a write-back are never chosen as replacements.
    let mut failed_bookies = BTreeSet::new();
    loop {
        for action in std::mem::take(&mut queue) {
            match action {
                RecoveryAction::Close { last_entry, length } => {
                    return Ok(RunOutcome::Close { last_entry, length });
                }
                RecoveryAction::Fail(e) => return Err(e),
                RecoveryAction::ChangeEnsemble {
                    fragment_start,
                    failed,
                } => {
                    failed_bookies.extend(failed.values().cloned());
                    let inner = inner.clone();
                    let tx = tx.clone();
                    let current = versioned.clone();
                    let excluded = failed_bookies.clone();
                    tokio::spawn(async move {
                        let r = change_ensemble(
                            &inner,
                            ledger,
                            current,
                            failed,
                            excluded,
                            fragment_start,
                        )
                        .await;
                        let _ = tx.send(Event::EnsembleChanged(r));
                    });
                }
                other => perform(inner, &meta, ledger, digest, master_key, other, &tx),
            }
        }
        let Some(event) = rx.recv().await else {
            return Err(ClientError::ClientClosed);
        };
        queue = match event {
            Event::Fence(p, a) => machine.on_fence_answer(p, a),
            Event::Read(e, p, a) => machine.on_read_answer(e, p, a),
            Event::Write(e, b, a) => {
                if matches!(a, WriteAnswer::Error(_)) {
                    failed_bookies.insert(b.clone());
                }
                machine.on_write_answer(e, &b, a)
            }
            Event::Length(r) => machine.on_length(r),
            Event::EnsembleChanged(Ok(ChangeOutcome::Changed(m))) => {
                let ensemble = m
                    .value
                    .current_ensemble()
                    .map(|(_, e)| e.to_vec())
                    .unwrap_or_default();
                tracing::info!(
                    ledger,
                    ?ensemble,
                    "recovery changed the write-back ensemble"
                );
                *versioned = m;
                machine.on_ensemble_changed(ensemble)
            }
            Event::EnsembleChanged(Ok(ChangeOutcome::ClosedByOther(m))) => {
                return Ok(RunOutcome::Adopted(m));
            }
            Event::EnsembleChanged(Err(e)) => machine.on_ensemble_change_failed(e),
        };
    }
}

/// Custom metadata key recording the writer's last fragment, `<first entry>|<bookie>,...`,
/// set by the first recovery that changes the ensemble. The ensemble itself is recorded
/// because a write-back fragment starting at the same entry replaces the writer's in the
/// ensembles map (simulator seed 507).
pub(crate) const WRITER_FRAGMENT_KEY: &str = "folio.recovery.writer-fragment";

fn encode_writer_fragment(start: EntryId, ensemble: &[BookieId]) -> Vec<u8> {
    let bookies: Vec<&str> = ensemble.iter().map(|b| b.as_str()).collect();
    format!("{start}|{}", bookies.join(",")).into_bytes()
}

/// The writer's last fragment (first entry and ensemble) when a recovery changed the
/// ensemble after it; `None` when the last fragment is the writer's.
fn writer_fragment(meta: &LedgerMetadata) -> Option<(EntryId, Vec<BookieId>)> {
    let raw = meta.custom_metadata.get(WRITER_FRAGMENT_KEY)?;
    let (start, bookies) = std::str::from_utf8(raw).ok()?.split_once('|')?;
    let start: EntryId = start.parse().ok()?;
    let ensemble = bookies
        .split(',')
        .map(|b| BookieId::new(b).ok())
        .collect::<Option<Vec<_>>>()?;
    (ensemble.len() == meta.ensemble_size).then_some((start, ensemble))
}

/// Records a write-back fragment in the metadata of the ledger in recovery.
async fn change_ensemble(
    inner: &Inner,
    ledger: LedgerId,
    mut meta: Versioned<LedgerMetadata>,
    failed: BTreeMap<usize, BookieId>,
    excluded: BTreeSet<BookieId>,
    fragment_start: EntryId,
) -> Result<ChangeOutcome> {
    let retries = inner.config.metadata_retries.max(1);
    let mut attempt = 0;
    loop {
        let Some((_, ensemble)) = meta.value.current_ensemble() else {
            return Err(ClientError::MetadataConflict {
                ledger,
                reason: "the metadata has no ensemble".into(),
            });
        };
        let next = inner
            .replacements(ensemble, meta.value.write_quorum, &failed, &excluded)
            .await?;
        let mut value = with_new_fragment(
            ledger,
            &meta.value,
            LedgerState::InRecovery,
            fragment_start,
            next,
        )
        .map_err(|_| ClientError::MetadataConflict {
            ledger,
            reason: format!("the ledger is {} during recovery", meta.value.state),
        })?;
        // The first write-back fragment records which fragment was the writer's, so that
        // a later recovery still fences and reads there.
        if writer_fragment(&meta.value).is_none()
            && let Some((writer_start, writer_ensemble)) = meta.value.current_ensemble()
        {
            value.custom_metadata.insert(
                WRITER_FRAGMENT_KEY.to_string(),
                encode_writer_fragment(writer_start, writer_ensemble),
            );
        }
        match inner
            .metadata
            .write_ledger(ledger, &value, meta.version)
            .await
        {
            Ok(version) => return Ok(ChangeOutcome::Changed(Versioned { value, version })),
            Err(e) if e.is_bad_version() && attempt < retries => {
                attempt += 1;
                let current = inner.read_ledger(ledger).await?;
                if current.value.is_closed() {
                    return Ok(ChangeOutcome::ClosedByOther(current));
                }
                if current.value.ensembles != meta.value.ensembles {
                    return Err(ClientError::MetadataConflict {
                        ledger,
                        reason: "the ensembles changed during recovery".into(),
                    });
                }
                meta = current;
            }
            Err(e) => return Err(ClientError::from_metadata(ledger, e)),
        }
    }
}

fn perform(
    inner: &Arc<Inner>,
    meta: &LedgerMetadata,
    ledger: LedgerId,
    digest: &DigestManager,
    master_key: &[u8; 20],
    action: RecoveryAction,
    tx: &mpsc::UnboundedSender<Event>,
) {
    let inner = inner.clone();
    let digest = digest.clone();
    let key = *master_key;
    let tx = tx.clone();
    match action {
        RecoveryAction::FenceRead { position, bookie } => {
            tokio::spawn(async move {
                let r = inner
                    .bookies
                    .call(
                        &bookie,
                        req::read(ledger, -1, Some(&key)),
                        inner.config.read_timeout,
                    )
                    .await;
                let answer = match r {
                    // Fenced; an answer without a body means the bookie holds no entry.
                    Ok(resp) => match resp
                        .read_response
                        .and_then(|r| r.body)
                        .filter(|b| !b.is_empty())
                    {
                        None => FenceAnswer::Empty,
                        Some(body) => match digest.verify_any_entry(&body) {
                            Ok(v) => FenceAnswer::LastEntry {
                                entry: v.entry_id,
                                lac: v.lac,
                                length: v.length.max(0) as u64,
                            },
                            Err(e) => FenceAnswer::Error(e.to_string()),
                        },
                    },
                    Err(RpcError::Status(Status::NoEntry | Status::NoLedger)) => FenceAnswer::Empty,
                    Err(RpcError::Status(Status::Unauthorized)) => FenceAnswer::Unauthorized,
                    Err(e) => FenceAnswer::Error(e.to_string()),
                };
                let _ = tx.send(Event::Fence(position, answer));
            });
        }
        RecoveryAction::RecoveryRead {
            entry,
            position,
            bookie,
        } => {
            tokio::spawn(async move {
                let r = inner
                    .bookies
                    .call(
                        &bookie,
                        req::read(ledger, entry, Some(&key)),
                        inner.config.read_timeout,
                    )
                    .await;
                let answer = match r {
                    Ok(resp) => {
                        let body = resp.read_response.and_then(|r| r.body).unwrap_or_default();
                        match digest.verify(&body, entry) {
                            Ok(v) => ReadAnswer::Entry {
                                payload: v.payload,
                                length: v.length.max(0) as u64,
                            },
                            // A bad copy is an error, never a negative.
                            Err(e) => ReadAnswer::Error(e.to_string()),
                        }
                    }
                    Err(RpcError::Status(Status::NoEntry | Status::NoLedger)) => {
                        ReadAnswer::NoEntry
                    }
                    Err(RpcError::Status(Status::Unauthorized)) => ReadAnswer::Unauthorized,
                    Err(e) => ReadAnswer::Error(e.to_string()),
                };
                let _ = tx.send(Event::Read(entry, position, answer));
            });
        }
        RecoveryAction::WriteBack {
            entry,
            bookie,
            body,
            ..
        } => {
            tokio::spawn(async move {
                let r = inner
                    .bookies
                    .call(
                        &bookie,
                        req::add(ledger, entry, &key, body, true),
                        inner.config.add_entry_timeout,
                    )
                    .await;
                let answer = match r {
                    Ok(_) => WriteAnswer::Ok,
                    Err(RpcError::Status(Status::Unauthorized)) => WriteAnswer::Unauthorized,
                    Err(e) => WriteAnswer::Error(e.to_string()),
                };
                let _ = tx.send(Event::Write(entry, bookie, answer));
            });
        }
        RecoveryAction::ReadLength { entry } => {
            let meta = meta.clone();
            tokio::spawn(async move {
                let r = read_entry(&inner, &meta, &digest, entry)
                    .await
                    .map(|v| v.length.max(0) as u64);
                let _ = tx.send(Event::Length(r));
            });
        }
        RecoveryAction::Close { .. }
        | RecoveryAction::Fail(_)
        | RecoveryAction::ChangeEnsemble { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use folio_types::metadata::DigestType;
    use folio_types::quorum::QuorumConfig;

    use super::*;

    #[test]
    fn the_writer_fragment_round_trips_and_bad_values_are_ignored() {
        let bookies: Vec<BookieId> = (1..=3)
            .map(|i| BookieId::new(format!("10.0.0.{i}:3181")).unwrap())
            .collect();
        let mut meta = LedgerMetadata::new_open(
            QuorumConfig::new(3, 2, 2).unwrap(),
            bookies.clone(),
            DigestType::Crc32,
            b"pw".to_vec(),
        );
        assert_eq!(writer_fragment(&meta), None);
        meta.custom_metadata.insert(
            WRITER_FRAGMENT_KEY.into(),
            encode_writer_fragment(7, &bookies),
        );
        assert_eq!(writer_fragment(&meta), Some((7, bookies.clone())));
        meta.custom_metadata.insert(
            WRITER_FRAGMENT_KEY.into(),
            encode_writer_fragment(7, &bookies[..2]),
        );
        assert_eq!(writer_fragment(&meta), None, "wrong ensemble size");
        meta.custom_metadata
            .insert(WRITER_FRAGMENT_KEY.into(), b"x|y".to_vec());
        assert_eq!(writer_fragment(&meta), None);
    }
}
