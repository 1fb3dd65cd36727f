//! Errors of the codecs: every malformed input ends here with a message naming the cause, never
//! in a panic. A decode error means the connection is unusable (framing is lost), as in
//! BookKeeper, where a decoder exception closes the channel.

use thiserror::Error;

/// Why a frame or message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProtoError {
    /// The length prefix announces a frame larger than the configured maximum.
    #[error(
        "frame of {len} bytes (plus 4-byte length prefix) exceeds the maximum frame size {max}"
    )]
    FrameTooLarge { len: u64, max: usize },
    /// A frame with no bytes cannot be either protocol.
    #[error("empty frame")]
    EmptyFrame,
    /// A message ended before a field it must contain.
    #[error("truncated {what}: need {needed} bytes, have {got}")]
    Truncated {
        what: &'static str,
        needed: usize,
        got: usize,
    },
    /// v2 header carries a protocol version other than 0, 1 or 2.
    #[error("unknown v2 protocol version {0}")]
    UnknownV2Version(u8),
    /// v2 header carries an opcode BookKeeper does not define.
    #[error("unknown v2 opcode {0}")]
    UnknownV2Opcode(u8),
    /// v2 opcode defined by BookKeeper but never used on the v2 wire (the Java server rejects it too).
    #[error("v2 opcode {0} ({1}) is not supported on the v2 wire")]
    UnsupportedV2Opcode(u8, &'static str),
    /// v2 response carries a return code outside BookKeeper's table.
    #[error("unknown v2 return code {0}")]
    UnknownV2ReturnCode(i32),
    /// v2 batch-read response: an entry length is negative or runs past the frame.
    #[error("bad entry length {len} in v2 batch read response with {remaining} bytes left")]
    BadBatchEntryLength { len: i32, remaining: usize },
    /// `availabilityOfEntriesOfLedger` bytes that do not describe a set of entries.
    #[error("bad availabilityOfEntriesOfLedger: {0}")]
    BadAvailability(String),
    /// The protobuf bytes are not a valid encoding of the message.
    #[error("invalid protobuf {message}: {reason}")]
    Protobuf {
        message: &'static str,
        reason: String,
    },
    /// A proto2 `required` field is absent (protobuf-java rejects such messages).
    #[error("{message} is missing required field {field}")]
    MissingRequiredField {
        message: &'static str,
        field: &'static str,
    },
    /// A required enum field holds a value the enum does not define (protobuf-java treats it as
    /// missing, hence a parse failure).
    #[error("{field} has unknown enum value {value}")]
    UnknownEnumValue { field: &'static str, value: i32 },
}

/// Why an entry or LAC body failed verification (BookKeeper's `BKDigestMatchException`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DigestError {
    /// Shorter than header plus digest for the ledger's digest type.
    #[error("entry of {got} bytes is shorter than the {needed} bytes of header and digest")]
    TooShort { needed: usize, got: usize },
    /// The digest field does not match the bytes.
    #[error("digest mismatch for ledger {ledger_id} entry {entry_id}")]
    Mismatch { ledger_id: i64, entry_id: i64 },
    /// The (authenticated) ledger id is not the ledger we read.
    #[error("ledger id mismatch: expected {expected}, entry says {actual}")]
    LedgerIdMismatch { expected: i64, actual: i64 },
    /// The (authenticated) entry id is not the entry we asked for.
    #[error("entry id mismatch: expected {expected}, entry says {actual}")]
    EntryIdMismatch { expected: i64, actual: i64 },
}
