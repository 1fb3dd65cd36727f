//! The client's one error type. Every variant names what was involved (the ledger, and
//! where it matters the entry and the bookie), so that a message printed by the `folio`
//! command says the cause in one line: `ledger 7 is fenced`, `no such ledger 7`,
//! `not enough bookies: need 3, have 2`.

use folio_metadata::MetadataError;
use folio_proto::Status;
use folio_types::{BookieId, EntryId, LedgerId};

/// Errors of every client operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The ledger was fenced (opened with recovery by someone else), or its metadata shows
    /// it is being recovered or was closed by someone else: this writer may not add to it.
    #[error("ledger {ledger} is fenced")]
    Fenced { ledger: LedgerId },

    /// The ledger's metadata does not exist.
    #[error("no such ledger {ledger}")]
    NoSuchLedger { ledger: LedgerId },

    /// No bookie of the entry's write set has it.
    #[error("no such entry {entry} in ledger {ledger}")]
    NoSuchEntry { ledger: LedgerId, entry: EntryId },

    /// Too few writable bookies to build or repair an ensemble. `read_only` counts the
    /// registered bookies that are read-only (a full disk, or started so): an operator
    /// seeing "have 0" needs to know whether the bookies are gone or only refusing writes.
    #[error("not enough bookies: need {need}, have {have} writable{}", read_only_suffix(*.read_only))]
    NotEnoughBookies {
        need: usize,
        have: usize,
        read_only: usize,
    },

    /// An operation did not complete in time.
    #[error("timed out: {what}")]
    Timeout { what: String },

    /// An entry (or LAC) read back does not match its digest.
    #[error("digest mismatch for ledger {ledger} entry {entry} from bookie {bookie}")]
    DigestMismatch {
        ledger: LedgerId,
        entry: EntryId,
        bookie: BookieId,
    },

    /// The password does not match the ledger's (client-side check or a bookie's EUA).
    #[error("unauthorized access{}{}", ledger_suffix(*.ledger), bookie_suffix(.bookie))]
    Unauthorized {
        ledger: LedgerId,
        bookie: Option<BookieId>,
    },

    /// The ledger is closed (or this handle was closed): no more appends.
    #[error("ledger {ledger} is closed")]
    LedgerClosed { ledger: LedgerId },

    /// The metadata changed in a way this operation cannot reconcile.
    #[error("metadata conflict on ledger {ledger}: {reason}")]
    MetadataConflict { ledger: LedgerId, reason: String },

    /// A read asked for an entry beyond the LAC without asking for unconfirmed reads.
    #[error("entry {entry} of ledger {ledger} is beyond the last add confirmed {lac}")]
    ReadBeyondLac {
        ledger: LedgerId,
        entry: EntryId,
        lac: EntryId,
    },

    /// A bookie answered with an error status.
    #[error("bookie {bookie} answered {status} for ledger {ledger} entry {entry}")]
    BookieError {
        ledger: LedgerId,
        entry: EntryId,
        bookie: BookieId,
        status: Status,
    },

    /// A bookie cannot be reached (connection refused or lost).
    #[error("bookie {bookie} is unreachable: {reason}")]
    BookieUnreachable { bookie: BookieId, reason: String },

    /// The writer replaced bookies more often than allowed.
    #[error("ledger {ledger}: too many ensemble changes (limit {limit})")]
    TooManyEnsembleChanges { ledger: LedgerId, limit: u32 },

    /// Recovery could not complete: fencing did not cover every ack quorum, an entry
    /// could be proven neither present nor absent (errors or timeouts instead of explicit
    /// answers), or a write-back did not reach the ack quorum. The ledger is left in
    /// recovery; retry the open.
    #[error("recovery of ledger {ledger} failed: {reason}")]
    RecoveryFailed { ledger: LedgerId, reason: String },

    /// An adv ledger was given an entry id it already has, or one at or below its LAC.
    #[error("entry {entry} of ledger {ledger} was already added")]
    DuplicateEntry { ledger: LedgerId, entry: EntryId },

    /// A caller error (bad quorum sizes, negative entry id, empty range...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The metadata store failed.
    #[error(transparent)]
    Metadata(#[from] MetadataError),

    /// The client was shut down.
    #[error("the client is closed")]
    ClientClosed,
}

/// " to ledger L", or nothing for a request about no ledger (id -1: bookie info, StartTLS).
fn ledger_suffix(ledger: LedgerId) -> String {
    if ledger < 0 {
        String::new()
    } else {
        format!(" to ledger {ledger}")
    }
}

fn read_only_suffix(read_only: usize) -> String {
    match read_only {
        0 => String::new(),
        n => format!(" ({n} more registered read-only)"),
    }
}

fn bookie_suffix(bookie: &Option<BookieId>) -> String {
    match bookie {
        Some(b) => format!(" at bookie {b}"),
        None => String::new(),
    }
}

impl ClientError {
    /// [`ClientError::NotEnoughBookies`] with the read-only bookies of `bookies` counted
    /// (placement sees only the writable ones); any other error as it is.
    pub(crate) fn counting_read_only(self, bookies: &folio_metadata::BookieSet) -> ClientError {
        match self {
            ClientError::NotEnoughBookies { need, have, .. } => ClientError::NotEnoughBookies {
                need,
                have,
                read_only: bookies.readonly.len(),
            },
            other => other,
        }
    }

    /// Maps a metadata error about `ledger`, turning "not found" into [`ClientError::NoSuchLedger`].
    pub(crate) fn from_metadata(ledger: LedgerId, e: MetadataError) -> ClientError {
        if e.is_not_found() {
            ClientError::NoSuchLedger { ledger }
        } else {
            ClientError::Metadata(e)
        }
    }

    /// True for [`ClientError::Fenced`].
    pub fn is_fenced(&self) -> bool {
        matches!(self, ClientError::Fenced { .. })
    }
}

/// The result of every client operation.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_ledger_entry_and_bookie() {
        let b = BookieId::new("10.0.0.1:3181").unwrap();
        assert_eq!(
            ClientError::Fenced { ledger: 7 }.to_string(),
            "ledger 7 is fenced"
        );
        assert_eq!(
            ClientError::NoSuchLedger { ledger: 7 }.to_string(),
            "no such ledger 7"
        );
        assert_eq!(
            ClientError::NotEnoughBookies {
                need: 3,
                have: 2,
                read_only: 0
            }
            .to_string(),
            "not enough bookies: need 3, have 2 writable"
        );
        assert_eq!(
            ClientError::NotEnoughBookies {
                need: 3,
                have: 0,
                read_only: 3
            }
            .to_string(),
            "not enough bookies: need 3, have 0 writable (3 more registered read-only)"
        );
        let m = ClientError::DigestMismatch {
            ledger: 7,
            entry: 3,
            bookie: b.clone(),
        }
        .to_string();
        assert!(m.contains("ledger 7") && m.contains("entry 3") && m.contains("10.0.0.1:3181"));
        let u = ClientError::Unauthorized {
            ledger: 7,
            bookie: Some(b),
        };
        assert!(u.to_string().ends_with("at bookie 10.0.0.1:3181"));
        assert!(u.to_string().contains("to ledger 7"), "{u}");
        // A request about no ledger (bookie info) names none.
        let u = ClientError::Unauthorized {
            ledger: -1,
            bookie: None,
        };
        assert_eq!(u.to_string(), "unauthorized access");
        assert_eq!(
            ClientError::from_metadata(9, MetadataError::not_found("ledger 9")),
            ClientError::NoSuchLedger { ledger: 9 }
        );
    }
}
