//! BookKeeper's wire protocol for Folio, sans-IO (no sockets, no runtime), so that the
//! unmodified Java BookKeeper client can talk to Folio bookies and Folio's client to either.
//!
//! * [`frame`]: the 4-byte big-endian length framing shared by both protocols, an incremental
//!   [`FrameDecoder`] with a maximum frame size (5 MiB by default), and per-frame protocol
//!   detection ([`detect_protocol`]).
//! * [`v3`] and [`pb`]: the protobuf protocol (`BookkeeperProtocol.proto`, field for field),
//!   with decoders that enforce proto2 `required` fields and enum values as protobuf-java does.
//! * [`v2`]: the binary protocol (header word, add / read / batch read / auth layouts).
//! * [`digest`]: "entry with digest" and LAC bodies for CRC32, CRC32C, HMAC-SHA1 and dummy
//!   digests ([`DigestManager`]), and the master key.
//! * [`availability`]: the entry-list encoding of GetListOfEntriesOfLedger responses.
//! * [`status`]: v3 status codes, v2 return codes and the protocol-neutral [`Status`].
//! * `tls_key` (feature `tls-keys`): TLS private keys from PEM, encrypted PKCS#8 included.
//!
//! [`decode_request`] / [`decode_response`] combine detection and decoding for one frame.

pub mod availability;
pub mod digest;
pub mod error;
pub mod frame;
pub mod status;
#[cfg(feature = "tls-keys")]
pub mod tls_key;
pub mod v2;
pub mod v3;

/// Types generated from `proto/BookkeeperProtocol.proto`.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/folio.bookkeeper.rs"));
}

use bytes::Bytes;

pub use digest::{DigestManager, DigestType, EntryHeader, VerifiedEntry, master_key};
pub use error::{DigestError, ProtoError};
pub use frame::{
    DEFAULT_MAX_FRAME_SIZE, FrameDecoder, WireProtocol, detect_protocol, encode_frame,
};
pub use status::Status;

/// A request frame in either protocol.
#[derive(Debug, Clone, PartialEq)]
pub enum AnyRequest {
    V2(v2::Request),
    V3(Box<pb::Request>),
}

/// A response frame in either protocol.
#[derive(Debug, Clone, PartialEq)]
pub enum AnyResponse {
    V2(v2::Response),
    V3(Box<pb::Response>),
}

/// Detects the protocol of a request frame body and decodes it.
pub fn decode_request(frame: Bytes) -> Result<AnyRequest, ProtoError> {
    match detect_protocol(&frame)? {
        WireProtocol::V2 => v2::decode_request(frame).map(AnyRequest::V2),
        WireProtocol::V3 => v3::decode_request(frame).map(|r| AnyRequest::V3(Box::new(r))),
    }
}

/// Detects the protocol of a response frame body and decodes it.
pub fn decode_response(frame: Bytes) -> Result<AnyResponse, ProtoError> {
    match detect_protocol(&frame)? {
        WireProtocol::V2 => v2::decode_response(frame).map(AnyResponse::V2),
        WireProtocol::V3 => v3::decode_response(frame).map(|r| AnyResponse::V3(Box::new(r))),
    }
}
