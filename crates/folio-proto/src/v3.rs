//! BookKeeper's v3 protocol: protobuf `Request` / `Response` frames (types in [`crate::pb`],
//! generated from `proto/BookkeeperProtocol.proto`).
//!
//! prost does not enforce proto2 `required` fields, nor reject unknown values of enum fields,
//! while protobuf-java (used by released 4.17.x clients) fails the whole parse on either. So
//! the decoders here walk the wire bytes against a table of the required fields and check the
//! required enums, turning such messages into errors; unknown values of *optional* enum fields
//! (the request flags) are dropped, as protobuf-java does. Encoding is prost's, which always
//! writes required fields, even zero-valued ones (EOK, entry 0).

use bytes::{Buf, Bytes, BytesMut};
use prost::Message;

use crate::error::ProtoError;
use crate::pb::{
    self, BkPacketHeader, OperationType, ProtocolVersion, Request, Response, StatusCode,
};
use crate::status::Status;

mod fast;

/// `AddRequest.writeFlags` bit: ack before the entry is durable (`WriteFlag.DEFERRED_SYNC`).
pub const WRITE_FLAG_DEFERRED_SYNC: i32 = 0x1;
/// `BKPacketHeader.priority` the Java client sets on recovery adds and fence/recovery reads.
pub const HIGH_PRIORITY: u32 = 100;

/// The header operation of BP-32's write close (Folio's own message; BookKeeper defines
/// none): `RANGE_ADD_ENTRY` (4), a value BookKeeper's enum has always declared and no
/// BookKeeper version has sent or served. A Java bookie parses it (a value its enum does not
/// know would fail the parse of the required header field and close the connection, with
/// every request in flight on it) and answers EBADREQ, which the Folio client takes for "not
/// supported". docs/formats/write-close.md.
pub const WRITE_CLOSE: OperationType = OperationType::RangeAddEntry;

/// `Request.writeCloseRequest` and `Response.writeCloseResponse`: a field number far from
/// BookKeeper's (100-108, 200), so that no BookKeeper version will reuse it.
pub const WRITE_CLOSE_FIELD: u32 = 1000;

// ---------------------------------------------------------------------------------------------
// Required-field table.

struct Schema {
    name: &'static str,
    required: &'static [(u32, &'static str)],
    /// Length-delimited fields holding messages that have required fields of their own.
    children: &'static [(u32, &'static Schema)],
}

impl Schema {
    fn child(&self, field: u32) -> Option<&'static Schema> {
        self.children
            .iter()
            .find(|(n, _)| *n == field)
            .map(|(_, s)| *s)
    }
}

const fn leaf(name: &'static str, required: &'static [(u32, &'static str)]) -> Schema {
    Schema {
        name,
        required,
        children: &[],
    }
}

static HEADER: Schema = leaf(
    "BKPacketHeader",
    &[(1, "version"), (2, "operation"), (3, "txnId")],
);
static CONTEXT_PAIR: Schema = leaf("ContextPair", &[(1, "key"), (2, "value")]);
static READ_REQUEST: Schema = leaf("ReadRequest", &[(1, "ledgerId"), (2, "entryId")]);
static ADD_REQUEST: Schema = leaf(
    "AddRequest",
    &[
        (1, "ledgerId"),
        (2, "entryId"),
        (3, "masterKey"),
        (4, "body"),
    ],
);
static AUTH_MESSAGE: Schema = leaf("AuthMessage", &[(1, "authPluginName"), (2, "payload")]);
static WRITE_LAC_REQUEST: Schema = leaf(
    "WriteLacRequest",
    &[(1, "ledgerId"), (2, "lac"), (3, "masterKey"), (4, "body")],
);
static READ_LAC_REQUEST: Schema = leaf("ReadLacRequest", &[(1, "ledgerId")]);
static FORCE_LEDGER_REQUEST: Schema = leaf("ForceLedgerRequest", &[(1, "ledgerId")]);
static LIST_ENTRIES_REQUEST: Schema = leaf("GetListOfEntriesOfLedgerRequest", &[(1, "ledgerId")]);
static WRITE_CLOSE_REQUEST: Schema =
    leaf("WriteCloseRequest", &[(1, "ledgerId"), (2, "masterKey")]);

static REQUEST: Schema = Schema {
    name: "Request",
    required: &[(1, "header")],
    children: &[
        (1, &HEADER),
        (100, &READ_REQUEST),
        (101, &ADD_REQUEST),
        (102, &AUTH_MESSAGE),
        (103, &WRITE_LAC_REQUEST),
        (104, &READ_LAC_REQUEST),
        (107, &FORCE_LEDGER_REQUEST),
        (108, &LIST_ENTRIES_REQUEST),
        (200, &CONTEXT_PAIR),
        (WRITE_CLOSE_FIELD, &WRITE_CLOSE_REQUEST),
    ],
};

static READ_RESPONSE: Schema = leaf(
    "ReadResponse",
    &[(1, "status"), (2, "ledgerId"), (3, "entryId")],
);
static ADD_RESPONSE: Schema = leaf(
    "AddResponse",
    &[(1, "status"), (2, "ledgerId"), (3, "entryId")],
);
static WRITE_LAC_RESPONSE: Schema = leaf("WriteLacResponse", &[(1, "status"), (2, "ledgerId")]);
static READ_LAC_RESPONSE: Schema = leaf("ReadLacResponse", &[(1, "status"), (2, "ledgerId")]);
static BOOKIE_INFO_RESPONSE: Schema = leaf("GetBookieInfoResponse", &[(1, "status")]);
static FORCE_LEDGER_RESPONSE: Schema =
    leaf("ForceLedgerResponse", &[(1, "status"), (2, "ledgerId")]);
static LIST_ENTRIES_RESPONSE: Schema = leaf(
    "GetListOfEntriesOfLedgerResponse",
    &[(1, "status"), (2, "ledgerId")],
);
static WRITE_CLOSE_RESPONSE: Schema = leaf("WriteCloseResponse", &[(1, "status"), (2, "ledgerId")]);

static RESPONSE: Schema = Schema {
    name: "Response",
    required: &[(1, "header"), (2, "status")],
    children: &[
        (1, &HEADER),
        (100, &READ_RESPONSE),
        (101, &ADD_RESPONSE),
        (102, &AUTH_MESSAGE),
        (103, &WRITE_LAC_RESPONSE),
        (104, &READ_LAC_RESPONSE),
        (105, &BOOKIE_INFO_RESPONSE),
        (107, &FORCE_LEDGER_RESPONSE),
        (108, &LIST_ENTRIES_RESPONSE),
        (WRITE_CLOSE_FIELD, &WRITE_CLOSE_RESPONSE),
    ],
};

/// Nesting limit for groups in unknown fields (prost itself stops at 100).
const MAX_DEPTH: u32 = 100;

fn malformed(schema: &Schema, reason: &str) -> ProtoError {
    ProtoError::Protobuf {
        message: schema.name,
        reason: reason.to_string(),
    }
}

fn read_varint(p: &mut &[u8], schema: &Schema) -> Result<u64, ProtoError> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let Some((&b, rest)) = p.split_first() else {
            return Err(malformed(schema, "truncated varint"));
        };
        *p = rest;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(malformed(schema, "varint longer than 10 bytes"))
}

fn skip(p: &mut &[u8], n: u64, schema: &Schema) -> Result<(), ProtoError> {
    if (p.len() as u64) < n {
        return Err(malformed(schema, "field runs past the end"));
    }
    p.advance(n as usize);
    Ok(())
}

/// Skips one field of wire type `wt` (the key already read); returns the bytes of a
/// length-delimited field.
fn skip_field<'a>(
    p: &mut &'a [u8],
    field: u32,
    wt: u64,
    schema: &Schema,
    depth: u32,
) -> Result<Option<&'a [u8]>, ProtoError> {
    match wt {
        0 => {
            read_varint(p, schema)?;
        }
        1 => skip(p, 8, schema)?,
        5 => skip(p, 4, schema)?,
        2 => {
            let len = read_varint(p, schema)?;
            if (p.len() as u64) < len {
                return Err(malformed(
                    schema,
                    "length-delimited field runs past the end",
                ));
            }
            let (sub, rest) = p.split_at(len as usize);
            *p = rest;
            return Ok(Some(sub));
        }
        3 => {
            if depth >= MAX_DEPTH {
                return Err(malformed(schema, "groups nested too deeply"));
            }
            loop {
                let key = read_varint(p, schema)?;
                let (f, w) = ((key >> 3) as u32, key & 7);
                if w == 4 {
                    if f != field {
                        return Err(malformed(schema, "mismatched end group"));
                    }
                    break;
                }
                skip_field(p, f, w, schema, depth + 1)?;
            }
        }
        _ => return Err(malformed(schema, "invalid wire type")),
    }
    Ok(None)
}

/// Checks that every required field of `schema` occurs in `p`, recursing into sub-messages.
/// Each occurrence of a sub-message is checked on its own: a sub-message split over several
/// occurrences (legal protobuf, merged on parse, never produced by BookKeeper's encoders) whose
/// parts each lack a required field is rejected.
fn check_required(mut p: &[u8], schema: &Schema) -> Result<(), ProtoError> {
    let mut seen: u32 = 0;
    while !p.is_empty() {
        let key = read_varint(&mut p, schema)?;
        let (field, wt) = ((key >> 3) as u32, key & 7);
        if field == 0 {
            return Err(malformed(schema, "field number 0"));
        }
        let sub = skip_field(&mut p, field, wt, schema, 0)?;
        if let (Some(sub), Some(child)) = (sub, schema.child(field)) {
            check_required(sub, child)?;
        }
        if let Some(i) = schema.required.iter().position(|(n, _)| *n == field) {
            seen |= 1 << i;
        }
    }
    for (i, (_, name)) in schema.required.iter().enumerate() {
        if seen & (1 << i) == 0 {
            return Err(ProtoError::MissingRequiredField {
                message: schema.name,
                field: name,
            });
        }
    }
    Ok(())
}

fn schema_for(name: &'static str) -> Option<&'static Schema> {
    [&REQUEST, &RESPONSE, &AUTH_MESSAGE]
        .into_iter()
        .find(|s| s.name == name)
}

/// Decodes `M` with prost, then checks required fields (for `Request`, `Response` and
/// `AuthMessage`; other names get prost's checks only).
pub(crate) fn decode_checked<M: Message + Default>(
    buf: Bytes,
    name: &'static str,
) -> Result<M, ProtoError> {
    let msg = M::decode(buf.clone()).map_err(|e| ProtoError::Protobuf {
        message: name,
        reason: e.to_string(),
    })?;
    if let Some(schema) = schema_for(name) {
        check_required(&buf, schema)?;
    }
    Ok(msg)
}

// ---------------------------------------------------------------------------------------------
// Enum checks.

fn check_header(h: &BkPacketHeader) -> Result<(), ProtoError> {
    ProtocolVersion::try_from(h.version).map_err(|_| ProtoError::UnknownEnumValue {
        field: "BKPacketHeader.version",
        value: h.version,
    })?;
    OperationType::try_from(h.operation).map_err(|_| ProtoError::UnknownEnumValue {
        field: "BKPacketHeader.operation",
        value: h.operation,
    })?;
    Ok(())
}

fn check_status(value: i32, field: &'static str) -> Result<(), ProtoError> {
    StatusCode::try_from(value)
        .map(|_| ())
        .map_err(|_| ProtoError::UnknownEnumValue { field, value })
}

/// protobuf-java keeps an unknown value of an optional enum as an unknown field, so the field
/// reads as absent; do the same (prost would keep the raw number).
fn drop_unknown<E: TryFrom<i32>>(flag: &mut Option<i32>) {
    if let Some(v) = *flag
        && E::try_from(v).is_err()
    {
        *flag = None;
    }
}

/// Decodes a v3 `Request` frame body.
pub fn decode_request(frame: Bytes) -> Result<Request, ProtoError> {
    match fast::request(&frame) {
        Some(req) => Ok(req),
        None => decode_request_full(frame),
    }
}

/// [`decode_request`] for any message (what the fast path leaves, and what it is checked
/// against).
fn decode_request_full(frame: Bytes) -> Result<Request, ProtoError> {
    let mut req: Request = decode_checked(frame, "Request")?;
    check_header(&req.header)?;
    if let Some(r) = &mut req.read_request {
        drop_unknown::<pb::read_request::Flag>(&mut r.flag);
    }
    if let Some(a) = &mut req.add_request {
        drop_unknown::<pb::add_request::Flag>(&mut a.flag);
    }
    Ok(req)
}

/// Decodes a v3 `Response` frame body.
pub fn decode_response(frame: Bytes) -> Result<Response, ProtoError> {
    match fast::response(&frame) {
        Some(resp) => Ok(resp),
        None => decode_response_full(frame),
    }
}

/// [`decode_response`] for any message (what the fast path leaves, and what it is checked
/// against).
fn decode_response_full(frame: Bytes) -> Result<Response, ProtoError> {
    let resp: Response = decode_checked(frame, "Response")?;
    check_header(&resp.header)?;
    check_status(resp.status, "Response.status")?;
    let sub_statuses = [
        resp.read_response
            .as_ref()
            .map(|r| (r.status, "ReadResponse.status")),
        resp.add_response
            .as_ref()
            .map(|r| (r.status, "AddResponse.status")),
        resp.write_lac_response
            .as_ref()
            .map(|r| (r.status, "WriteLacResponse.status")),
        resp.read_lac_response
            .as_ref()
            .map(|r| (r.status, "ReadLacResponse.status")),
        resp.get_bookie_info_response
            .as_ref()
            .map(|r| (r.status, "GetBookieInfoResponse.status")),
        resp.force_ledger_response
            .as_ref()
            .map(|r| (r.status, "ForceLedgerResponse.status")),
        resp.get_list_of_entries_of_ledger_response
            .as_ref()
            .map(|r| (r.status, "GetListOfEntriesOfLedgerResponse.status")),
        resp.write_close_response
            .as_ref()
            .map(|r| (r.status, "WriteCloseResponse.status")),
    ];
    for (value, field) in sub_statuses.into_iter().flatten() {
        check_status(value, field)?;
    }
    Ok(resp)
}

/// Serializes a request (frame body, no length prefix).
pub fn encode_request(req: &Request) -> Bytes {
    Bytes::from(req.encode_to_vec())
}

/// Serializes a response (frame body, no length prefix).
pub fn encode_response(resp: &Response) -> Bytes {
    fast::encode_add_response(resp).unwrap_or_else(|| Bytes::from(resp.encode_to_vec()))
}

/// Appends a request as a whole frame.
pub fn encode_request_frame(req: &Request, dst: &mut BytesMut) {
    encode_message_frame(req, dst);
}

/// Appends `msg` as a whole frame, encoded in place after its length prefix: one copy of
/// each field into `dst`, where encoding to a vector and framing that copied every byte
/// (an add's body included) twice, through a second allocation (1-2% of a writer's CPU
/// at 1 KiB, one of the copies per add and bookie).
fn encode_message_frame(msg: &impl Message, dst: &mut BytesMut) {
    let len = msg.encoded_len();
    let prefix = i32::try_from(len).expect("frame body over 2 GiB cannot be framed");
    dst.reserve(crate::frame::LENGTH_PREFIX_SIZE + len);
    dst.extend_from_slice(&prefix.to_be_bytes());
    msg.encode_raw(dst);
}

/// Adds and read responses whose entry is at least this long are framed without copying
/// it ([`encode_request_frame_pieces`], [`encode_response_pieces`]); a shorter entry costs
/// less to copy than to send as a separate piece.
pub const UNCOPIED_BODY_BYTES: usize = 4096;

/// Encodes a request as one frame in one or two pieces, to be written back to back. An add
/// whose body is at least [`UNCOPIED_BODY_BYTES`] long is encoded with the body's bytes
/// last (the `addRequest` field after the others, the `body` field after the other add
/// fields: protobuf parsers take fields in any order, BookKeeper's Java bookie included),
/// so the second piece is the body itself, shared rather than copied: a 64 KiB entry
/// written to three bookies was otherwise copied six times (into the message, then into
/// the frame). Anything else is one piece, as [`encode_request_frame`] makes it.
pub fn encode_request_frame_pieces(req: &Request) -> (Bytes, Option<Bytes>) {
    let Some(add) = req
        .add_request
        .as_ref()
        .filter(|a| a.body.len() >= UNCOPIED_BODY_BYTES)
    else {
        let mut frame = BytesMut::new();
        if !fast::encode_add_request_frame(req, &mut frame) {
            encode_request_frame(req, &mut frame);
        }
        return (frame.freeze(), None);
    };
    // Exhaustive, so that a field added to AddRequest cannot be silently left out here.
    let crate::pb::AddRequest {
        flag,
        ledger_id,
        entry_id,
        master_key,
        body,
        write_flags,
    } = add;
    let mut add_fields = Vec::with_capacity(64 + master_key.len());
    prost::encoding::int64::encode(1, ledger_id, &mut add_fields);
    prost::encoding::int64::encode(2, entry_id, &mut add_fields);
    prost::encoding::bytes::encode(3, master_key, &mut add_fields);
    if let Some(w) = write_flags {
        prost::encoding::int32::encode(5, w, &mut add_fields);
    }
    if let Some(f) = flag {
        prost::encoding::int32::encode(100, f, &mut add_fields);
    }
    let outer = Request {
        add_request: None,
        ..req.clone()
    };
    pieces_with_body_last(&outer, 101, add_fields, 4, body, true)
}

/// The two pieces of a message whose last field (`field`, a sub-message) ends with the
/// bytes field `body_field` holding `body`: the head is `outer`'s own fields, `field`'s key
/// and length, the sub-message's other fields (`inner_fields`, encoded) and `body`'s key and
/// length; the tail is `body` itself, shared. With `length_prefix` the head starts with the
/// frame's 4-byte length.
fn pieces_with_body_last(
    outer: &impl Message,
    field: u32,
    mut inner_fields: Vec<u8>,
    body_field: u32,
    body: &Bytes,
    length_prefix: bool,
) -> (Bytes, Option<Bytes>) {
    use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint};
    encode_key(body_field, WireType::LengthDelimited, &mut inner_fields);
    encode_varint(body.len() as u64, &mut inner_fields);
    let inner_len = inner_fields.len() + body.len();
    let key_len = prost::encoding::key_len(field);
    let frame_len =
        outer.encoded_len() + key_len + encoded_len_varint(inner_len as u64) + inner_len;
    let prefix_len = if length_prefix { 4 } else { 0 };
    let mut head = BytesMut::with_capacity(prefix_len + frame_len - body.len());
    if length_prefix {
        let len = i32::try_from(frame_len).expect("frame body over 2 GiB cannot be framed");
        head.extend_from_slice(&len.to_be_bytes());
    }
    outer
        .encode(&mut head)
        .expect("the buffer was sized for the message");
    encode_key(field, WireType::LengthDelimited, &mut head);
    encode_varint(inner_len as u64, &mut head);
    head.extend_from_slice(&inner_fields);
    debug_assert_eq!(head.len() + body.len(), prefix_len + frame_len);
    (head.freeze(), Some(body.clone()))
}

/// Encodes a response's frame body (no length prefix) in one or two pieces, to be written
/// back to back: a read whose entry is at least [`UNCOPIED_BODY_BYTES`] long is encoded
/// with the entry last (the `readResponse` field after the others, its `body` after the
/// other read fields, which protobuf parsers take in any order), so the second piece is the
/// entry itself, shared with the buffer it was read into rather than copied into the
/// message (at 64 KiB that copy was a third of the bookie's CPU per read; docs/performance.md).
/// Anything else is one piece, as [`encode_response`] makes it.
pub fn encode_response_pieces(resp: &Response) -> (Bytes, Option<Bytes>) {
    let Some((read, body)) = resp.read_response.as_ref().and_then(|r| {
        r.body
            .as_ref()
            .filter(|b| b.len() >= UNCOPIED_BODY_BYTES)
            .map(|b| (r, b))
    }) else {
        return (encode_response(resp), None);
    };
    // Exhaustive, so that a field added to ReadResponse cannot be silently left out here.
    let crate::pb::ReadResponse {
        status,
        ledger_id,
        entry_id,
        body: _,
        max_lac,
        lac_update_timestamp,
    } = read;
    let mut read_fields = Vec::with_capacity(48);
    prost::encoding::int32::encode(1, status, &mut read_fields);
    prost::encoding::int64::encode(2, ledger_id, &mut read_fields);
    prost::encoding::int64::encode(3, entry_id, &mut read_fields);
    if let Some(m) = max_lac {
        prost::encoding::int64::encode(5, m, &mut read_fields);
    }
    if let Some(t) = lac_update_timestamp {
        prost::encoding::int64::encode(6, t, &mut read_fields);
    }
    let outer = Response {
        read_response: None,
        ..resp.clone()
    };
    pieces_with_body_last(&outer, 100, read_fields, 4, body, false)
}

/// Appends a response as a whole frame.
pub fn encode_response_frame(resp: &Response, dst: &mut BytesMut) {
    encode_message_frame(resp, dst);
}

/// The header a bookie puts on its response: VERSION_THREE, the request's operation and txnId,
/// no priority.
pub fn response_header(request: &BkPacketHeader) -> BkPacketHeader {
    BkPacketHeader {
        version: ProtocolVersion::VersionThree as i32,
        operation: request.operation,
        txn_id: request.txn_id,
        priority: None,
    }
}

/// A request header as the Java client writes it.
pub fn request_header(
    operation: OperationType,
    txn_id: u64,
    priority: Option<u32>,
) -> BkPacketHeader {
    BkPacketHeader {
        version: ProtocolVersion::VersionThree as i32,
        operation: operation as i32,
        txn_id,
        priority,
    }
}

impl Response {
    /// A response with only the top-level status (what a bookie sends for an unknown or
    /// unsupported operation, or a bad version).
    pub fn status_only(request: &BkPacketHeader, status: StatusCode) -> Response {
        Response {
            header: response_header(request),
            status: status as i32,
            ..Default::default()
        }
    }
}

impl Response {
    /// An add response: the per-op status is copied to the top level, as the Java bookie does.
    pub fn for_add(
        request: &BkPacketHeader,
        status: StatusCode,
        ledger_id: i64,
        entry_id: i64,
    ) -> Response {
        Response {
            header: response_header(request),
            status: status as i32,
            add_response: Some(pb::AddResponse {
                status: status as i32,
                ledger_id,
                entry_id,
            }),
            ..Default::default()
        }
    }

    /// A read response; `body` is the stored entry (absent on error), `max_lac` the bookie's
    /// known LAC for the ledger.
    pub fn for_read(
        request: &BkPacketHeader,
        status: StatusCode,
        ledger_id: i64,
        entry_id: i64,
        body: Option<Bytes>,
        max_lac: Option<i64>,
    ) -> Response {
        Response {
            header: response_header(request),
            status: status as i32,
            read_response: Some(pb::ReadResponse {
                status: status as i32,
                ledger_id,
                entry_id,
                body,
                max_lac,
                lac_update_timestamp: None,
            }),
            ..Default::default()
        }
    }

    /// The status a client acts on (BookKeeper's client logic): the sub-response's status when
    /// the top-level status is EOK and a sub-response is present, else the top-level status.
    pub fn effective_status(&self) -> Result<Status, ProtoError> {
        let top = Status::from_v3_value(self.status)?;
        if top != Status::Ok {
            return Ok(top);
        }
        let sub = [
            self.read_response.as_ref().map(|r| r.status),
            self.add_response.as_ref().map(|r| r.status),
            self.write_lac_response.as_ref().map(|r| r.status),
            self.read_lac_response.as_ref().map(|r| r.status),
            self.get_bookie_info_response.as_ref().map(|r| r.status),
            self.force_ledger_response.as_ref().map(|r| r.status),
            self.get_list_of_entries_of_ledger_response
                .as_ref()
                .map(|r| r.status),
            self.write_close_response.as_ref().map(|r| r.status),
        ]
        .into_iter()
        .flatten()
        .next();
        match sub {
            Some(v) => Status::from_v3_value(v),
            None => Ok(top),
        }
    }
}

impl pb::ReadRequest {
    /// Flag FENCE_LEDGER is set.
    pub fn is_fence_ledger(&self) -> bool {
        self.flag == Some(pb::read_request::Flag::FenceLedger as i32)
    }
    /// Flag ENTRY_PIGGYBACK is set (long-poll LAC read returning the next entry).
    pub fn is_entry_piggyback(&self) -> bool {
        self.flag == Some(pb::read_request::Flag::EntryPiggyback as i32)
    }
}

impl pb::AddRequest {
    /// Flag RECOVERY_ADD is set: accepted on a fenced ledger.
    pub fn is_recovery_add(&self) -> bool {
        self.flag == Some(pb::add_request::Flag::RecoveryAdd as i32)
    }
    /// writeFlags has DEFERRED_SYNC.
    pub fn is_deferred_sync(&self) -> bool {
        self.write_flags.unwrap_or(0) & WRITE_FLAG_DEFERRED_SYNC != 0
    }
}

impl BkPacketHeader {
    /// The server treats priority > 0 as high priority.
    pub fn is_high_priority(&self) -> bool {
        self.priority.unwrap_or(0) > 0
    }
}
