//! One-pass decoders and encoders for the messages of the data path.
//!
//! Decoders: add and read requests, add and read responses, in the shape every BookKeeper
//! encoder writes them (each field once, no unknown field, every enum value known, every
//! required field present). The full path (prost's decode, then a second walk of the bytes
//! for proto2's required fields) was 5% of a bookie's CPU at 1 KiB adds and 4% of the
//! writer's (docs/performance.md). These read the bytes once, into the same structs.
//!
//! Encoders: an add request and an add response, written field by field in prost's order
//! (byte for byte prost's output, checked in the tests below) without prost's length pass
//! over every optional field of `Request` and `Response`.
//!
//! The decoders answer only what they are sure of: anything else (a repeated, unknown or mistyped
//! field, an enum value the protocol does not know, a missing required field, a truncated
//! or overlong varint) is `None`, and the caller takes the full path, which decides it. So
//! for every input the result is the full path's, or no answer at all (checked against it
//! on generated and mutated frames in the tests below).

use bytes::{BufMut, Bytes, BytesMut};

use crate::pb::{
    AddRequest, AddResponse, BkPacketHeader, OperationType, ProtocolVersion, ReadRequest,
    ReadResponse, Request, Response, StatusCode, add_request, read_request,
};

/// A request with a header and one add or read request.
pub(super) fn request(frame: &Bytes) -> Option<Request> {
    let mut header = None;
    let mut read = None;
    let mut add = None;
    let mut c = Cursor::new(frame, 0, frame.len());
    while let Some((field, wire)) = c.key()? {
        match (field, wire) {
            (1, LEN) if header.is_none() => header = Some(self::header(c.message()?)?),
            (100, LEN) if read.is_none() && add.is_none() => {
                read = Some(read_request(c.message()?)?)
            }
            (101, LEN) if add.is_none() && read.is_none() => add = Some(add_request(c.message()?)?),
            _ => return None,
        }
    }
    if read.is_none() && add.is_none() {
        return None;
    }
    Some(Request {
        header: header?,
        read_request: read,
        add_request: add,
        ..Default::default()
    })
}

/// A response with a header, a status and one add or read response.
pub(super) fn response(frame: &Bytes) -> Option<Response> {
    let mut header = None;
    let mut status = None;
    let mut read = None;
    let mut add = None;
    let mut c = Cursor::new(frame, 0, frame.len());
    while let Some((field, wire)) = c.key()? {
        match (field, wire) {
            (1, LEN) if header.is_none() => header = Some(self::header(c.message()?)?),
            (2, VARINT) if status.is_none() => status = Some(c.known::<StatusCode>()?),
            (100, LEN) if read.is_none() && add.is_none() => {
                read = Some(read_response(c.message()?)?)
            }
            (101, LEN) if add.is_none() && read.is_none() => {
                add = Some(add_response(c.message()?)?)
            }
            _ => return None,
        }
    }
    if read.is_none() && add.is_none() {
        return None;
    }
    Some(Response {
        header: header?,
        status: status?,
        read_response: read,
        add_response: add,
        ..Default::default()
    })
}

fn header(mut c: Cursor<'_>) -> Option<BkPacketHeader> {
    let (mut version, mut operation, mut txn_id, mut priority) = (None, None, None, None);
    while let Some((field, wire)) = c.key()? {
        match (field, wire) {
            (1, VARINT) if version.is_none() => version = Some(c.known::<ProtocolVersion>()?),
            (2, VARINT) if operation.is_none() => operation = Some(c.known::<OperationType>()?),
            (3, VARINT) if txn_id.is_none() => txn_id = Some(c.varint()?),
            (4, VARINT) if priority.is_none() => priority = Some(c.varint()? as u32),
            _ => return None,
        }
    }
    Some(BkPacketHeader {
        version: version?,
        operation: operation?,
        txn_id: txn_id?,
        priority,
    })
}

fn add_request(mut c: Cursor<'_>) -> Option<AddRequest> {
    let (mut flag, mut ledger_id, mut entry_id) = (None, None, None);
    let (mut master_key, mut body, mut write_flags) = (None, None, None);
    while let Some((field, wire)) = c.key()? {
        match (field, wire) {
            (1, VARINT) if ledger_id.is_none() => ledger_id = Some(c.varint()? as i64),
            (2, VARINT) if entry_id.is_none() => entry_id = Some(c.varint()? as i64),
            (3, LEN) if master_key.is_none() => master_key = Some(c.bytes()?),
            (4, LEN) if body.is_none() => body = Some(c.bytes()?),
            (5, VARINT) if write_flags.is_none() => write_flags = Some(c.varint()? as i32),
            (100, VARINT) if flag.is_none() => flag = Some(c.known::<add_request::Flag>()?),
            _ => return None,
        }
    }
    Some(AddRequest {
        flag,
        ledger_id: ledger_id?,
        entry_id: entry_id?,
        master_key: master_key?,
        body: body?,
        write_flags,
    })
}

fn read_request(mut c: Cursor<'_>) -> Option<ReadRequest> {
    let (mut flag, mut ledger_id, mut entry_id) = (None, None, None);
    let (mut master_key, mut previous_lac, mut time_out) = (None, None, None);
    while let Some((field, wire)) = c.key()? {
        match (field, wire) {
            (1, VARINT) if ledger_id.is_none() => ledger_id = Some(c.varint()? as i64),
            (2, VARINT) if entry_id.is_none() => entry_id = Some(c.varint()? as i64),
            (3, LEN) if master_key.is_none() => master_key = Some(c.bytes()?),
            (4, VARINT) if previous_lac.is_none() => previous_lac = Some(c.varint()? as i64),
            (5, VARINT) if time_out.is_none() => time_out = Some(c.varint()? as i64),
            (100, VARINT) if flag.is_none() => flag = Some(c.known::<read_request::Flag>()?),
            _ => return None,
        }
    }
    Some(ReadRequest {
        flag,
        ledger_id: ledger_id?,
        entry_id: entry_id?,
        master_key,
        previous_lac,
        time_out,
    })
}

fn add_response(mut c: Cursor<'_>) -> Option<AddResponse> {
    let (mut status, mut ledger_id, mut entry_id) = (None, None, None);
    while let Some((field, wire)) = c.key()? {
        match (field, wire) {
            (1, VARINT) if status.is_none() => status = Some(c.known::<StatusCode>()?),
            (2, VARINT) if ledger_id.is_none() => ledger_id = Some(c.varint()? as i64),
            (3, VARINT) if entry_id.is_none() => entry_id = Some(c.varint()? as i64),
            _ => return None,
        }
    }
    Some(AddResponse {
        status: status?,
        ledger_id: ledger_id?,
        entry_id: entry_id?,
    })
}

fn read_response(mut c: Cursor<'_>) -> Option<ReadResponse> {
    let (mut status, mut ledger_id, mut entry_id) = (None, None, None);
    let (mut body, mut max_lac, mut lac_update_timestamp) = (None, None, None);
    while let Some((field, wire)) = c.key()? {
        match (field, wire) {
            (1, VARINT) if status.is_none() => status = Some(c.known::<StatusCode>()?),
            (2, VARINT) if ledger_id.is_none() => ledger_id = Some(c.varint()? as i64),
            (3, VARINT) if entry_id.is_none() => entry_id = Some(c.varint()? as i64),
            (4, LEN) if body.is_none() => body = Some(c.bytes()?),
            (5, VARINT) if max_lac.is_none() => max_lac = Some(c.varint()? as i64),
            (6, VARINT) if lac_update_timestamp.is_none() => {
                lac_update_timestamp = Some(c.varint()? as i64)
            }
            _ => return None,
        }
    }
    Some(ReadResponse {
        status: status?,
        ledger_id: ledger_id?,
        entry_id: entry_id?,
        body,
        max_lac,
        lac_update_timestamp,
    })
}

/// Appends `req` as a whole frame (length prefix first) if it is an add request alone;
/// `false` (nothing appended) for anything else.
pub(super) fn encode_add_request_frame(req: &Request, dst: &mut BytesMut) -> bool {
    // Exhaustive, so that a field added to the messages cannot be silently left out here.
    let Request {
        header,
        read_request: None,
        add_request: Some(add),
        auth_request: None,
        write_lac_request: None,
        read_lac_request: None,
        get_bookie_info_request: None,
        start_tls_request: None,
        force_ledger_request: None,
        get_list_of_entries_of_ledger_request: None,
        request_context,
        write_close_request: None,
    } = req
    else {
        return false;
    };
    if !request_context.is_empty() {
        return false;
    }
    let AddRequest {
        flag,
        ledger_id,
        entry_id,
        master_key,
        body,
        write_flags,
    } = add;
    let add_len = field_len(1, *ledger_id as u64)
        + field_len(2, *entry_id as u64)
        + bytes_len(3, master_key.len())
        + bytes_len(4, body.len())
        + write_flags.map_or(0, |w| field_len(5, w as u64))
        + flag.map_or(0, |f| field_len(100, f as u64));
    let header_len = header_len(header);
    let len = bytes_len(1, header_len) + bytes_len(101, add_len);
    let prefix = i32::try_from(len).expect("frame body over 2 GiB cannot be framed");
    dst.reserve(4 + len);
    dst.put_i32(prefix);
    put_header(dst, header, header_len);
    put_key(dst, 101, LEN);
    put_varint(dst, add_len as u64);
    put_field(dst, 1, *ledger_id as u64);
    put_field(dst, 2, *entry_id as u64);
    put_bytes(dst, 3, master_key);
    put_bytes(dst, 4, body);
    if let Some(w) = write_flags {
        put_field(dst, 5, *w as u64);
    }
    if let Some(f) = flag {
        put_field(dst, 100, *f as u64);
    }
    true
}

/// `resp` encoded (no length prefix) if it is an add response alone.
pub(super) fn encode_add_response(resp: &Response) -> Option<Bytes> {
    let Response {
        header,
        status,
        read_response: None,
        add_response: Some(add),
        auth_response: None,
        write_lac_response: None,
        read_lac_response: None,
        get_bookie_info_response: None,
        start_tls_response: None,
        force_ledger_response: None,
        get_list_of_entries_of_ledger_response: None,
        write_close_response: None,
    } = resp
    else {
        return None;
    };
    let AddResponse {
        status: add_status,
        ledger_id,
        entry_id,
    } = add;
    let add_len = field_len(1, *add_status as u64)
        + field_len(2, *ledger_id as u64)
        + field_len(3, *entry_id as u64);
    let header_len = header_len(header);
    let len = bytes_len(1, header_len) + field_len(2, *status as u64) + bytes_len(101, add_len);
    let mut out = BytesMut::with_capacity(len);
    put_header(&mut out, header, header_len);
    put_field(&mut out, 2, *status as u64);
    put_key(&mut out, 101, LEN);
    put_varint(&mut out, add_len as u64);
    put_field(&mut out, 1, *add_status as u64);
    put_field(&mut out, 2, *ledger_id as u64);
    put_field(&mut out, 3, *entry_id as u64);
    debug_assert_eq!(out.len(), len);
    Some(out.freeze())
}

// Field sizes and writers. An `int32` or `int64` field is its value as `u64`, sign extended
// (`-1i32 as u64`): ten bytes when negative, as protobuf and prost write it.

fn header_len(h: &BkPacketHeader) -> usize {
    field_len(1, h.version as u64)
        + field_len(2, h.operation as u64)
        + field_len(3, h.txn_id)
        + h.priority.map_or(0, |p| field_len(4, u64::from(p)))
}

fn put_header(dst: &mut BytesMut, h: &BkPacketHeader, len: usize) {
    put_key(dst, 1, LEN);
    put_varint(dst, len as u64);
    put_field(dst, 1, h.version as u64);
    put_field(dst, 2, h.operation as u64);
    put_field(dst, 3, h.txn_id);
    if let Some(p) = h.priority {
        put_field(dst, 4, u64::from(p));
    }
}

fn varint_len(v: u64) -> usize {
    prost::encoding::encoded_len_varint(v)
}

fn field_len(field: u32, v: u64) -> usize {
    prost::encoding::key_len(field) + varint_len(v)
}

fn bytes_len(field: u32, len: usize) -> usize {
    prost::encoding::key_len(field) + varint_len(len as u64) + len
}

fn put_varint(dst: &mut BytesMut, v: u64) {
    prost::encoding::encode_varint(v, dst);
}

fn put_key(dst: &mut BytesMut, field: u32, wire: u64) {
    put_varint(dst, u64::from(field) << 3 | wire);
}

fn put_field(dst: &mut BytesMut, field: u32, v: u64) {
    put_key(dst, field, VARINT);
    put_varint(dst, v);
}

fn put_bytes(dst: &mut BytesMut, field: u32, b: &[u8]) {
    put_key(dst, field, LEN);
    put_varint(dst, b.len() as u64);
    dst.put_slice(b);
}

const VARINT: u64 = 0;
const LEN: u64 = 2;

/// A window `[pos, end)` of a frame.
struct Cursor<'a> {
    frame: &'a Bytes,
    pos: usize,
    end: usize,
}

impl<'a> Cursor<'a> {
    fn new(frame: &'a Bytes, pos: usize, end: usize) -> Cursor<'a> {
        Cursor { frame, pos, end }
    }

    /// A varint as prost reads one: at most ten bytes, the tenth at most 1.
    fn varint(&mut self) -> Option<u64> {
        let bytes = &self.frame[self.pos..self.end];
        let mut v = 0u64;
        for (i, &b) in bytes.iter().take(10).enumerate() {
            if i == 9 && b > 1 {
                return None;
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.pos += i + 1;
                return Some(v);
            }
        }
        None
    }

    /// The next field's number and wire type; `Some(None)` at the end of the window.
    fn key(&mut self) -> Option<Option<(u32, u64)>> {
        if self.pos == self.end {
            return Some(None);
        }
        let key = self.varint()?;
        let field = u32::try_from(key >> 3).ok()?;
        Some(Some((field, key & 7)))
    }

    /// A length-delimited field's window.
    fn message(&mut self) -> Option<Cursor<'a>> {
        let len = usize::try_from(self.varint()?).ok()?;
        let start = self.pos;
        if self.end - start < len {
            return None;
        }
        self.pos += len;
        Some(Cursor::new(self.frame, start, start + len))
    }

    /// A bytes field: a slice of the frame, not a copy.
    fn bytes(&mut self) -> Option<Bytes> {
        let m = self.message()?;
        Some(self.frame.slice(m.pos..m.end))
    }

    /// An enum field: a value `E` knows (an unknown one is the full path's to decide).
    fn known<E: TryFrom<i32>>(&mut self) -> Option<i32> {
        let v = self.varint()? as i32;
        E::try_from(v).ok()?;
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use prost::Message;

    fn full_request(frame: &Bytes) -> Option<Request> {
        super::super::decode_request_full(frame.clone()).ok()
    }

    fn full_response(frame: &Bytes) -> Option<Response> {
        super::super::decode_response_full(frame.clone()).ok()
    }

    fn any_header() -> impl Strategy<Value = BkPacketHeader> {
        (
            prop_oneof![Just(3), Just(2), -2..5i32],
            prop_oneof![Just(1), Just(2), -1..14i32],
            any::<u64>(),
            proptest::option::of(any::<u32>()),
        )
            .prop_map(|(version, operation, txn_id, priority)| BkPacketHeader {
                version,
                operation,
                txn_id,
                priority,
            })
    }

    fn bytes(max: usize) -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
    }

    fn id() -> impl Strategy<Value = i64> {
        prop_oneof![0..1000i64, any::<i64>()]
    }

    fn any_request() -> impl Strategy<Value = Request> {
        let add = (
            proptest::option::of(-1..3i32),
            id(),
            id(),
            bytes(24),
            bytes(300),
            proptest::option::of(any::<i32>()),
        )
            .prop_map(
                |(flag, ledger_id, entry_id, master_key, body, write_flags)| AddRequest {
                    flag,
                    ledger_id,
                    entry_id,
                    master_key,
                    body,
                    write_flags,
                },
            );
        let read = (
            proptest::option::of(-1..4i32),
            id(),
            id(),
            proptest::option::of(bytes(24)),
            proptest::option::of(id()),
            proptest::option::of(any::<i64>()),
        )
            .prop_map(
                |(flag, ledger_id, entry_id, master_key, previous_lac, time_out)| ReadRequest {
                    flag,
                    ledger_id,
                    entry_id,
                    master_key,
                    previous_lac,
                    time_out,
                },
            );
        (
            any_header(),
            proptest::option::of(add),
            proptest::option::of(read),
            any::<bool>(),
        )
            .prop_map(|(header, add_request, read_request, lac)| Request {
                header,
                add_request,
                read_request,
                // Now and then a field the fast path leaves to the full one.
                read_lac_request: lac.then_some(crate::pb::ReadLacRequest { ledger_id: 7 }),
                ..Default::default()
            })
    }

    fn any_response() -> impl Strategy<Value = Response> {
        let status = || prop_oneof![Just(0), Just(402), -1..600i32];
        let add = (status(), id(), id()).prop_map(|(status, ledger_id, entry_id)| AddResponse {
            status,
            ledger_id,
            entry_id,
        });
        let read = (
            status(),
            id(),
            id(),
            proptest::option::of(bytes(300)),
            proptest::option::of(id()),
            proptest::option::of(any::<i64>()),
        )
            .prop_map(
                |(status, ledger_id, entry_id, body, max_lac, lac_update_timestamp)| ReadResponse {
                    status,
                    ledger_id,
                    entry_id,
                    body,
                    max_lac,
                    lac_update_timestamp,
                },
            );
        (
            any_header(),
            status(),
            proptest::option::of(add),
            proptest::option::of(read),
        )
            .prop_map(|(header, status, add_response, read_response)| Response {
                header,
                status,
                add_response,
                read_response,
                ..Default::default()
            })
    }

    /// A frame changed the ways a bad peer or a bad wire would: a byte overwritten, the
    /// frame cut short, or bytes dropped from its middle.
    fn mutate(frame: &[u8], at: usize, byte: u8, how: u8) -> Bytes {
        let mut f = frame.to_vec();
        if f.is_empty() {
            return Bytes::new();
        }
        let at = at % f.len();
        match how % 3 {
            0 => f[at] = byte,
            1 => f.truncate(at),
            _ => {
                f.drain(at..(at + 1 + byte as usize % 4).min(f.len()));
            }
        }
        Bytes::from(f)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn a_request_decodes_as_the_full_path_decodes_it(req in any_request()) {
            let frame = Bytes::from(req.encode_to_vec());
            let fast = request(&frame);
            let full = full_request(&frame);
            if fast.is_some() {
                prop_assert_eq!(&fast, &full);
            }
            // The data path's requests are the fast path's: an add or read alone, with
            // every enum value known.
            let plain = req.read_lac_request.is_none()
                && (req.add_request.is_some() != req.read_request.is_some())
                && full.is_some()
                && req.add_request.as_ref().is_none_or(|a| a.flag.is_none_or(|f| f == 1))
                && req.read_request.as_ref().is_none_or(|r| r.flag.is_none_or(|f| f == 1 || f == 2));
            prop_assert_eq!(fast.is_some(), plain);
        }

        #[test]
        fn a_response_decodes_as_the_full_path_decodes_it(resp in any_response()) {
            let frame = Bytes::from(resp.encode_to_vec());
            let fast = response(&frame);
            let full = full_response(&frame);
            if fast.is_some() {
                prop_assert_eq!(&fast, &full);
            }
            let plain = (resp.add_response.is_some() != resp.read_response.is_some())
                && full.is_some();
            prop_assert_eq!(fast.is_some(), plain);
        }

        #[test]
        fn a_damaged_request_gets_the_full_paths_answer_or_none(
            req in any_request(), at in any::<usize>(), byte in any::<u8>(), how in any::<u8>()
        ) {
            let frame = mutate(&req.encode_to_vec(), at, byte, how);
            if let Some(fast) = request(&frame) {
                prop_assert_eq!(Some(fast), full_request(&frame));
            }
        }

        #[test]
        fn a_damaged_response_gets_the_full_paths_answer_or_none(
            resp in any_response(), at in any::<usize>(), byte in any::<u8>(), how in any::<u8>()
        ) {
            let frame = mutate(&resp.encode_to_vec(), at, byte, how);
            if let Some(fast) = response(&frame) {
                prop_assert_eq!(Some(fast), full_response(&frame));
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn an_add_request_frame_is_prosts_byte_for_byte(req in any_request()) {
            let mut fast = BytesMut::new();
            let mut full = BytesMut::new();
            super::super::encode_message_frame(&req, &mut full);
            let alone = req.add_request.is_some()
                && req.read_request.is_none()
                && req.read_lac_request.is_none();
            prop_assert_eq!(encode_add_request_frame(&req, &mut fast), alone);
            if alone {
                prop_assert_eq!(&fast[..], &full[..]);
            } else {
                prop_assert!(fast.is_empty());
            }
        }

        #[test]
        fn an_add_response_is_prosts_byte_for_byte(resp in any_response()) {
            let fast = encode_add_response(&resp);
            let alone = resp.add_response.is_some() && resp.read_response.is_none();
            prop_assert_eq!(fast.is_some(), alone);
            if let Some(fast) = fast {
                prop_assert_eq!(&fast[..], &resp.encode_to_vec()[..]);
            }
        }
    }

    #[test]
    fn a_repeated_field_is_left_to_the_full_path() {
        let req = Request {
            header: BkPacketHeader {
                version: 3,
                operation: 2,
                txn_id: 9,
                priority: None,
            },
            add_request: Some(AddRequest {
                ledger_id: 1,
                entry_id: 2,
                master_key: Bytes::from_static(b"k"),
                body: Bytes::from_static(b"b"),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut twice = req.encode_to_vec();
        // The header again, with another txn id: prost keeps the last (merging messages).
        let again = Request {
            add_request: None,
            header: BkPacketHeader {
                txn_id: 10,
                ..req.header
            },
            ..req.clone()
        };
        twice.extend(again.encode_to_vec());
        let twice = Bytes::from(twice);
        assert_eq!(request(&twice), None);
        assert_eq!(full_request(&twice).unwrap().header.txn_id, 10);
        assert_eq!(request(&Bytes::from(req.encode_to_vec())), Some(req));
    }
}
