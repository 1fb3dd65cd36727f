//! Bookie-level operations on one replica of a ledger, for autorecovery and the admin tools:
//! a bookie's disk space (GetBookieInfo), which entries a bookie holds (BookKeeper's GetListOfEntriesOfLedger), whether it can
//! serve one, and copying an entry as stored from one bookie to another with the
//! recovery-add flag (BookKeeper's `LedgerFragmentReplicator`).
//!
//! The copy sends the entry exactly as its writer packaged it (digest header included)
//! after verifying that digest, so a corrupt replica is never spread, and the copy reads
//! back as the original everywhere. A recovery add is accepted by a fenced ledger, as
//! re-replication must be.

use std::collections::BTreeSet;

use bytes::Bytes;
use folio_proto::availability::AvailabilityOfEntries;
use folio_proto::pb::{self, OperationType};
use folio_proto::v3::request_header;
use folio_proto::{DigestManager, Status};
use folio_types::{BookieId, EntryId, LedgerId};

use crate::client::Client;
use crate::conn::{RpcError, req};
use crate::error::{ClientError, Result};
use crate::reader::rpc_error;

/// Copies to one bookie with deferred sync ([`Client::copy_entry`]): each is acknowledged
/// before it is durable (a Folio bookie stores it without a journal record, so it is
/// written once), and [`Client::force_copies`] makes them durable together. Every request
/// goes over one connection: a bookie that restarted in between lost what was not forced,
/// and the broken connection makes the rest of the copies and the force fail.
#[derive(Debug, Default)]
pub struct DeferredCopies {
    pin: crate::conn::ConnectionPin,
}

/// What one bookie said about an entry it should hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaAnswer {
    /// It returned the entry with a valid digest.
    Present,
    /// It said it has no such entry (or ledger): its copy is missing.
    Missing,
    /// It could not answer (unreachable, timeout, another status, a bad digest).
    Failed(String),
}

/// A bookie's disk space, as its GetBookieInfo answer gives it (over all its ledger
/// directories), in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BookieInfo {
    pub free_disk_space: u64,
    pub total_disk_capacity: u64,
}

/// How long a bookie that is not a Folio bookie and left a GetListOfEntriesOfLedger
/// unanswered is not asked again ([`Client::entries_on_bookie`]).
pub const NO_ENTRY_LISTS_FOR: std::time::Duration = std::time::Duration::from_secs(1800);

impl Client {
    /// Asks `bookie` for its free and total disk space (BookKeeper's `getBookieInfo`, as
    /// `bookieinfo` and disk-weighted placement use it).
    pub async fn bookie_info(&self, bookie: &BookieId) -> Result<BookieInfo> {
        use pb::get_bookie_info_request::Flags;
        let mut r = pb::Request {
            header: request_header(OperationType::GetBookieInfo, 0, None),
            ..Default::default()
        };
        r.get_bookie_info_request = Some(pb::GetBookieInfoRequest {
            requested: Some(Flags::TotalDiskCapacity as i64 | Flags::FreeDiskSpace as i64),
        });
        let inner = self.inner();
        let resp = inner
            .bookies
            .call(bookie, r, inner.config.read_timeout)
            .await
            .map_err(|e| rpc_error(-1, -1, bookie, e))?;
        let info = resp.get_bookie_info_response.unwrap_or_default();
        let size = |v: Option<i64>| v.and_then(|v| u64::try_from(v).ok());
        match (size(info.free_disk_space), size(info.total_disk_capacity)) {
            (Some(free_disk_space), Some(total_disk_capacity)) => Ok(BookieInfo {
                free_disk_space,
                total_disk_capacity,
            }),
            _ => Err(ClientError::BookieUnreachable {
                bookie: bookie.clone(),
                reason: "its bookie info lacks the disk space".into(),
            }),
        }
    }

    /// BP-32's write close of `ledger` on `bookies`, best effort, on a task of its own
    /// (returns at once): after re-replicating a closed ledger, so that the target's log
    /// for it rotates at its next checkpoint.
    pub fn write_close_in_background(
        &self,
        ledger: LedgerId,
        master_key: [u8; 20],
        bookies: BTreeSet<BookieId>,
    ) {
        crate::write_close::send_to(self.inner_arc(), ledger, master_key, bookies);
    }

    /// The entries of `ledger` that `bookie` holds, as its GetListOfEntriesOfLedger answer
    /// says. A bookie that does not know the ledger at all answers with an empty list.
    ///
    /// A BookKeeper bookie with DbLedgerStorage leaves this request unanswered, so every
    /// ask would cost the read timeout. When the request times out on a bookie whose
    /// registration does not say it is a Folio bookie (`folio_types::service`), the bookie
    /// is not asked again for [`NO_ENTRY_LISTS_FOR`]: this fails at once meanwhile, and the
    /// caller checks that bookie's replicas as BookKeeper does (first and last entries). A
    /// Folio bookie, or one whose registration cannot be read just then, is always asked:
    /// a lost message must not weaken the check of its replicas.
    pub async fn entries_on_bookie(
        &self,
        bookie: &BookieId,
        ledger: LedgerId,
    ) -> Result<AvailabilityOfEntries> {
        let inner = self.inner();
        let now = inner.clock.now();
        if inner
            .no_entry_lists
            .lock()
            .get(bookie)
            .is_some_and(|until| now < *until)
        {
            return Err(ClientError::BookieUnreachable {
                bookie: bookie.clone(),
                reason: "it left GetListOfEntriesOfLedger unanswered recently".into(),
            });
        }
        let mut r = pb::Request {
            header: request_header(OperationType::GetListOfEntriesOfLedger, 0, None),
            ..Default::default()
        };
        r.get_list_of_entries_of_ledger_request =
            Some(pb::GetListOfEntriesOfLedgerRequest { ledger_id: ledger });
        match inner
            .bookies
            .call(bookie, r, inner.config.read_timeout)
            .await
        {
            Ok(resp) => {
                let body = resp
                    .get_list_of_entries_of_ledger_response
                    .and_then(|r| r.availability_of_entries_of_ledger)
                    .unwrap_or_default();
                AvailabilityOfEntries::decode(&body).map_err(|e| ClientError::BookieUnreachable {
                    bookie: bookie.clone(),
                    reason: format!("bad list of entries of ledger {ledger}: {e}"),
                })
            }
            Err(RpcError::Status(Status::NoLedger)) => Ok(
                AvailabilityOfEntries::from_sorted_entries(std::iter::empty()),
            ),
            Err(RpcError::Timeout) => {
                // Only a registration read and found without Folio's property says "not a
                // Folio bookie": one that cannot be read (the metadata store unreachable,
                // the bookie between two sessions) says nothing, and the bookie is asked
                // again next time. (Taking it for a BookKeeper bookie once left a Folio
                // bookie's replicas checked by their ends only for half an hour, and a
                // hole in the middle of a fragment unrepaired: simulator seed 30.)
                let not_folio = match inner.metadata.bookie_service_info(bookie).await {
                    Ok(info) => !info
                        .properties
                        .contains_key(folio_types::service::FOLIO_VERSION_PROPERTY),
                    Err(_) => false,
                };
                if not_folio {
                    tracing::info!(
                        %bookie,
                        "GetListOfEntriesOfLedger unanswered by a bookie that is not a Folio \
                         bookie (BookKeeper's DbLedgerStorage does not answer it): its \
                         replicas are checked by their first and last entries for the next \
                         {} s",
                        NO_ENTRY_LISTS_FOR.as_secs()
                    );
                    inner
                        .no_entry_lists
                        .lock()
                        .insert(bookie.clone(), inner.clock.now() + NO_ENTRY_LISTS_FOR);
                }
                Err(rpc_error(ledger, -1, bookie, RpcError::Timeout))
            }
            Err(e) => Err(rpc_error(ledger, -1, bookie, e)),
        }
    }

    /// Asks `bookie` for `entry` and checks its digest: present, missing, or no answer.
    pub async fn probe_entry(
        &self,
        bookie: &BookieId,
        digest: &DigestManager,
        entry: EntryId,
    ) -> ReplicaAnswer {
        match self.read_stored(bookie, digest, entry).await {
            Ok(_) => ReplicaAnswer::Present,
            Err(ClientError::NoSuchEntry { .. }) => ReplicaAnswer::Missing,
            Err(e) => ReplicaAnswer::Failed(e.to_string()),
        }
    }

    /// Copies `entry` to `target` from the first of `sources` that returns it with a valid
    /// digest, as a recovery add under `master_key`; returns the bytes copied. Fails if no
    /// source has a good copy or the target does not take it.
    pub async fn copy_entry(
        &self,
        digest: &DigestManager,
        master_key: &[u8],
        entry: EntryId,
        sources: &[BookieId],
        target: &BookieId,
        deferred: Option<&DeferredCopies>,
    ) -> Result<usize> {
        let ledger = digest.ledger_id();
        let mut last = None;
        let mut body = None;
        for source in sources {
            match self.read_stored(source, digest, entry).await {
                Ok(b) => {
                    body = Some(b);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let Some(body) = body else {
            return Err(last.unwrap_or(ClientError::NoSuchEntry { ledger, entry }));
        };
        let len = body.len();
        let inner = self.inner();
        let timeout = inner.config.add_entry_timeout;
        match deferred {
            None => {
                let add = req::add(ledger, entry, master_key, body, true);
                inner.bookies.call(target, add, timeout).await
            }
            Some(d) => {
                let add = req::add_deferred(ledger, entry, master_key, body);
                inner
                    .bookies
                    .call_pinned(target, add, timeout, &d.pin)
                    .await
            }
        }
        .map_err(|e| rpc_error(ledger, entry, target, e))?;
        Ok(len)
    }

    /// Makes the copies made to `target` through `deferred` durable (ForceLedger, on
    /// their connection); only then may the metadata name `target` for them.
    pub async fn force_copies(
        &self,
        ledger: LedgerId,
        target: &BookieId,
        deferred: &DeferredCopies,
    ) -> Result<()> {
        let inner = self.inner();
        inner
            .bookies
            .call_pinned(
                target,
                req::force_ledger(ledger),
                inner.config.add_entry_timeout,
                &deferred.pin,
            )
            .await
            .map_err(|e| rpc_error(ledger, -1, target, e))?;
        Ok(())
    }

    /// The stored bytes of `entry` on `bookie`, digest verified.
    async fn read_stored(
        &self,
        bookie: &BookieId,
        digest: &DigestManager,
        entry: EntryId,
    ) -> Result<Bytes> {
        let ledger = digest.ledger_id();
        let inner = self.inner();
        let resp = inner
            .bookies
            .call(
                bookie,
                req::read(ledger, entry, None),
                inner.config.read_timeout,
            )
            .await
            .map_err(|e| rpc_error(ledger, entry, bookie, e))?;
        let body = resp.read_response.and_then(|r| r.body).unwrap_or_default();
        digest
            .verify(&body, entry)
            .map_err(|_| ClientError::DigestMismatch {
                ledger,
                entry,
                bookie: bookie.clone(),
            })?;
        Ok(body)
    }

    /// A writable bookie to take position `position` of `ensemble` (a fragment's), neither
    /// in that ensemble nor in `excluded`, rack-aware when the client is.
    pub async fn replacement_bookie(
        &self,
        ensemble: &[BookieId],
        write_quorum: usize,
        position: usize,
        excluded: &BTreeSet<BookieId>,
    ) -> Result<BookieId> {
        let failed = std::collections::BTreeMap::from([(position, ensemble[position].clone())]);
        let next = self
            .inner()
            .replacements(ensemble, write_quorum, &failed, excluded)
            .await?;
        Ok(next[position].clone())
    }
}
