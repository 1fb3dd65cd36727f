//! Status codes: the v3 `StatusCode` enum, the v2 integer return codes, and [`Status`], the
//! protocol-neutral outcome the bookie and client reason about, with conversions between the
//! three. The one trap: v2 code 107 (`EUNKNOWNLEDGERSTATE`) has no mapping in the Java v2 client
//! (4.17.4 and HEAD), which throws on it, so [`Status::to_v2_rc`] sends `EIO` instead.

use crate::error::ProtoError;
use crate::pb::StatusCode;

/// The v2 return codes (`BookieProtocol.E*`).
pub mod v2_rc {
    pub const EOK: i32 = 0;
    pub const ENOLEDGER: i32 = 1;
    pub const ENOENTRY: i32 = 2;
    pub const EBADREQ: i32 = 100;
    pub const EIO: i32 = 101;
    pub const EUA: i32 = 102;
    pub const EBADVERSION: i32 = 103;
    pub const EFENCED: i32 = 104;
    pub const EREADONLY: i32 = 105;
    pub const ETOOMANYREQUESTS: i32 = 106;
    /// Defined, but the Java v2 client cannot decode it: never send it to a v2 client.
    pub const EUNKNOWNLEDGERSTATE: i32 = 107;
}

/// Outcome of a bookie operation, independent of the protocol that carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// EOK.
    Ok,
    /// ENOLEDGER: the ledger is not on this bookie.
    NoLedger,
    /// ENOENTRY: the entry is not on this bookie.
    NoEntry,
    /// EBADREQ: malformed or unsupported request.
    BadRequest,
    /// EIO: I/O error (also a failed fence or TLS failure).
    Io,
    /// EUA: unauthorized (master key mismatch, authentication).
    Unauthorized,
    /// EBADVERSION: header version is not the one expected.
    BadVersion,
    /// EFENCED: add to a fenced ledger.
    Fenced,
    /// EREADONLY: the bookie is read-only.
    ReadOnly,
    /// ETOOMANYREQUESTS: rejected by back-pressure.
    TooManyRequests,
    /// EUNKNOWNLEDGERSTATE: the bookie does not know whether it had the ledger's data.
    UnknownLedgerState,
}

impl Status {
    /// Every status, in BookKeeper's table order.
    pub const ALL: [Status; 11] = [
        Status::Ok,
        Status::NoLedger,
        Status::NoEntry,
        Status::BadRequest,
        Status::Io,
        Status::Unauthorized,
        Status::BadVersion,
        Status::Fenced,
        Status::ReadOnly,
        Status::TooManyRequests,
        Status::UnknownLedgerState,
    ];

    /// The v3 status code.
    pub fn to_v3(self) -> StatusCode {
        match self {
            Status::Ok => StatusCode::Eok,
            Status::NoLedger => StatusCode::Enoledger,
            Status::NoEntry => StatusCode::Enoentry,
            Status::BadRequest => StatusCode::Ebadreq,
            Status::Io => StatusCode::Eio,
            Status::Unauthorized => StatusCode::Eua,
            Status::BadVersion => StatusCode::Ebadversion,
            Status::Fenced => StatusCode::Efenced,
            Status::ReadOnly => StatusCode::Ereadonly,
            Status::TooManyRequests => StatusCode::Etoomanyrequests,
            Status::UnknownLedgerState => StatusCode::Eunknownledgerstate,
        }
    }

    /// From a v3 status code.
    pub fn from_v3(code: StatusCode) -> Status {
        match code {
            StatusCode::Eok => Status::Ok,
            StatusCode::Enoledger => Status::NoLedger,
            StatusCode::Enoentry => Status::NoEntry,
            StatusCode::Ebadreq => Status::BadRequest,
            StatusCode::Eio => Status::Io,
            StatusCode::Eua => Status::Unauthorized,
            StatusCode::Ebadversion => Status::BadVersion,
            StatusCode::Efenced => Status::Fenced,
            StatusCode::Ereadonly => Status::ReadOnly,
            StatusCode::Etoomanyrequests => Status::TooManyRequests,
            StatusCode::Eunknownledgerstate => Status::UnknownLedgerState,
        }
    }

    /// From the raw `i32` of a v3 status field.
    pub fn from_v3_value(value: i32) -> Result<Status, ProtoError> {
        StatusCode::try_from(value)
            .map(Status::from_v3)
            .map_err(|_| ProtoError::UnknownEnumValue {
                field: "StatusCode",
                value,
            })
    }

    /// The v2 return code exactly as BookKeeper numbers it (107 included). Use
    /// [`Status::to_v2_rc`] for what to put on the wire.
    pub fn v2_code(self) -> i32 {
        match self {
            Status::Ok => v2_rc::EOK,
            Status::NoLedger => v2_rc::ENOLEDGER,
            Status::NoEntry => v2_rc::ENOENTRY,
            Status::BadRequest => v2_rc::EBADREQ,
            Status::Io => v2_rc::EIO,
            Status::Unauthorized => v2_rc::EUA,
            Status::BadVersion => v2_rc::EBADVERSION,
            Status::Fenced => v2_rc::EFENCED,
            Status::ReadOnly => v2_rc::EREADONLY,
            Status::TooManyRequests => v2_rc::ETOOMANYREQUESTS,
            Status::UnknownLedgerState => v2_rc::EUNKNOWNLEDGERSTATE,
        }
    }

    /// The v2 return code safe to send to a Java v2 client: `UnknownLedgerState` becomes `EIO`
    /// because the client has no mapping for 107 and would throw.
    pub fn to_v2_rc(self) -> i32 {
        match self {
            Status::UnknownLedgerState => v2_rc::EIO,
            other => other.v2_code(),
        }
    }

    /// From a v2 return code (107 accepted: a Folio client can understand it).
    pub fn from_v2_rc(rc: i32) -> Result<Status, ProtoError> {
        Status::ALL
            .into_iter()
            .find(|s| s.v2_code() == rc)
            .ok_or(ProtoError::UnknownV2ReturnCode(rc))
    }

    /// True for EOK.
    pub fn is_ok(self) -> bool {
        self == Status::Ok
    }
}

impl From<StatusCode> for Status {
    fn from(code: StatusCode) -> Self {
        Status::from_v3(code)
    }
}

impl From<Status> for StatusCode {
    fn from(status: Status) -> Self {
        status.to_v3()
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.to_v3().as_str_name())
    }
}
