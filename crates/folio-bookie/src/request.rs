//! The protocol-neutral request and response model the processor works on.
//!
//! v3 protobuf requests and v2 binary requests both convert into [`Request`]; the processor answers
//! with a [`Response`], which the wire layer turns back into the protocol of the request (echoing
//! the v3 txn id and operation, or the v2 opcode, ledger and entry). Keeping this model separate
//! lets the processor be tested without any encoding, and keeps status codes in one place:
//! [`Status`] maps to each protocol's numbers, never sending a v2 client a code it cannot parse.

use bytes::Bytes;
use folio_types::{EntryId, LedgerId};

/// One request, as the processor sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Add(AddRequest),
    Read(ReadRequest),
    ReadLac {
        ledger: LedgerId,
    },
    WriteLac {
        ledger: LedgerId,
        lac: EntryId,
        master_key: Bytes,
        body: Bytes,
    },
    ForceLedger {
        ledger: LedgerId,
    },
    /// BP-32's advisory write close (Folio's own message, docs/formats/write-close.md): the
    /// writer is done with the ledger, so its entry log may rotate at the next checkpoint.
    WriteClose {
        ledger: LedgerId,
        master_key: Bytes,
    },
    /// `requested` is the OR of [`BOOKIE_INFO_TOTAL_DISK_CAPACITY`] and [`BOOKIE_INFO_FREE_DISK_SPACE`].
    GetBookieInfo {
        requested: i64,
    },
    GetListOfEntriesOfLedger {
        ledger: LedgerId,
    },
    /// v2 BATCH_READ_ENTRY: consecutive entries from `start_entry`, at most `max_count` of them
    /// (<= 0: no count limit) and about `max_size` bytes of response (capped by the bookie).
    BatchRead {
        ledger: LedgerId,
        start_entry: EntryId,
        max_count: i32,
        max_size: i64,
        fence: bool,
        master_key: Option<Bytes>,
    },
    /// An auth handshake message; with auth disabled the bookie answers as BookKeeper's
    /// `AuthDisabledPlugin` does.
    Auth(AuthMessage),
    StartTls,
}

/// `GetBookieInfoRequest.Flags.TOTAL_DISK_CAPACITY`.
pub const BOOKIE_INFO_TOTAL_DISK_CAPACITY: i64 = 0x01;
/// `GetBookieInfoRequest.Flags.FREE_DISK_SPACE`.
pub const BOOKIE_INFO_FREE_DISK_SPACE: i64 = 0x02;
/// The plugin name a BookKeeper bookie with auth disabled answers with.
pub const AUTH_DISABLED_PLUGIN: &str = "AuthDisabledPlugin";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddRequest {
    pub ledger: LedgerId,
    pub entry: EntryId,
    /// 20 bytes: SHA-1("ledger" ‖ password).
    pub master_key: Bytes,
    /// The whole "entry with digest" (spec §4.1), stored as is.
    pub body: Bytes,
    /// RECOVERY_ADD: bypasses the fence (a recovering reader re-replicates the tail).
    pub recovery: bool,
    /// v3 `priority > 0` or v2 FLAG_HIGH_PRIORITY: accepted by a read-only bookie.
    pub high_priority: bool,
    /// v3 `writeFlags` DEFERRED_SYNC: the client makes the entry durable with a later
    /// ForceLedger. Honoured for recovery adds (re-replicating copies, stored without a
    /// journal record); other adds are journaled as usual.
    pub deferred_sync: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRequest {
    pub ledger: LedgerId,
    /// `-1` reads the last entry stored.
    pub entry: EntryId,
    /// FENCE_LEDGER: fence the ledger durably before answering.
    pub fence: bool,
    /// Mandatory with `fence`.
    pub master_key: Option<Bytes>,
    /// ENTRY_PIGGYBACK: a long poll that also returns entry `previous_lac + 1`.
    pub piggyback: bool,
    /// Long poll: wait until the LAC passes this value...
    pub previous_lac: Option<EntryId>,
    /// ...or this many milliseconds pass.
    pub timeout_ms: Option<i64>,
}

impl ReadRequest {
    /// A plain read of one entry.
    pub fn entry(ledger: LedgerId, entry: EntryId) -> Self {
        ReadRequest {
            ledger,
            entry,
            fence: false,
            master_key: None,
            piggyback: false,
            previous_lac: None,
            timeout_ms: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthMessage {
    pub plugin_name: String,
    pub payload: Bytes,
}

/// The outcome of a request: folio-proto's protocol-neutral status, which maps to v3 status codes
/// and v2 return codes (never sending a v2 client the 107 it cannot parse).
pub use folio_proto::Status;

/// One answer. Each variant carries what its protocol response needs; the wire layer adds the
/// echoed header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    Add {
        status: Status,
        ledger: LedgerId,
        entry: EntryId,
    },
    Read {
        status: Status,
        ledger: LedgerId,
        /// The request's entry id, except for a piggybacked long poll that returns an entry:
        /// then `previous_lac + 1`.
        entry: EntryId,
        body: Option<Bytes>,
        /// The LAC the bookie knows for the ledger (v3 `maxLAC`).
        max_lac: Option<EntryId>,
    },
    ReadLac {
        status: Status,
        ledger: LedgerId,
        lac_body: Option<Bytes>,
        last_entry_body: Option<Bytes>,
    },
    WriteLac {
        status: Status,
        ledger: LedgerId,
    },
    ForceLedger {
        status: Status,
        ledger: LedgerId,
    },
    WriteClose {
        status: Status,
        ledger: LedgerId,
    },
    BookieInfo {
        status: Status,
        total_disk_capacity: Option<i64>,
        free_disk_space: Option<i64>,
    },
    ListOfEntries {
        status: Status,
        ledger: LedgerId,
        /// The §2.6 encoding.
        availability: Option<Bytes>,
    },
    BatchRead {
        status: Status,
        ledger: LedgerId,
        start_entry: EntryId,
        entries: Vec<Bytes>,
    },
    Auth {
        status: Status,
        message: AuthMessage,
    },
    StartTls {
        status: Status,
    },
}

impl Response {
    pub fn status(&self) -> Status {
        match self {
            Response::Add { status, .. }
            | Response::Read { status, .. }
            | Response::ReadLac { status, .. }
            | Response::WriteLac { status, .. }
            | Response::ForceLedger { status, .. }
            | Response::WriteClose { status, .. }
            | Response::BookieInfo { status, .. }
            | Response::ListOfEntries { status, .. }
            | Response::BatchRead { status, .. }
            | Response::Auth { status, .. }
            | Response::StartTls { status } => *status,
        }
    }

    /// The answer `status` to `request` with no payload: used for refusals (too many requests,
    /// bad version) that never reach the operation's own logic.
    pub fn error_for(request: &Request, status: Status) -> Response {
        match request {
            Request::Add(a) => Response::Add {
                status,
                ledger: a.ledger,
                entry: a.entry,
            },
            Request::Read(r) => Response::Read {
                status,
                ledger: r.ledger,
                entry: r.entry,
                body: None,
                max_lac: None,
            },
            Request::ReadLac { ledger } => Response::ReadLac {
                status,
                ledger: *ledger,
                lac_body: None,
                last_entry_body: None,
            },
            Request::WriteLac { ledger, .. } => Response::WriteLac {
                status,
                ledger: *ledger,
            },
            Request::ForceLedger { ledger } => Response::ForceLedger {
                status,
                ledger: *ledger,
            },
            Request::WriteClose { ledger, .. } => Response::WriteClose {
                status,
                ledger: *ledger,
            },
            Request::GetBookieInfo { .. } => Response::BookieInfo {
                status,
                total_disk_capacity: None,
                free_disk_space: None,
            },
            Request::GetListOfEntriesOfLedger { ledger } => Response::ListOfEntries {
                status,
                ledger: *ledger,
                availability: None,
            },
            Request::BatchRead {
                ledger,
                start_entry,
                ..
            } => Response::BatchRead {
                status,
                ledger: *ledger,
                start_entry: *start_entry,
                entries: Vec::new(),
            },
            Request::Auth(_) => Response::Auth {
                status,
                message: AuthMessage {
                    plugin_name: AUTH_DISABLED_PLUGIN.to_string(),
                    payload: Bytes::new(),
                },
            },
            Request::StartTls => Response::StartTls { status },
        }
    }
}
