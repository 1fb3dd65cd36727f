//! v2 binary protocol: frames built by hand from the spec's byte layouts (section 3) decode to
//! the right messages, and our encoder produces exactly those bytes.

use bytes::{Bytes, BytesMut};
use folio_proto::pb::AuthMessage;
use folio_proto::v2::{self, Flags, OpCode, PacketHeader};
use folio_proto::{AnyRequest, AnyResponse, FrameDecoder, ProtoError, Status};

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Length prefix + body, assembled by hand.
fn framed(body: &[u8]) -> Vec<u8> {
    let mut v = (body.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(body);
    v
}

/// Runs a whole hand-built frame through the frame decoder and returns the body.
fn deframe(bytes: &[u8]) -> Bytes {
    let mut d = FrameDecoder::new();
    d.feed(bytes);
    let f = d.next_frame().unwrap().expect("one complete frame");
    assert_eq!(d.buffered(), 0);
    f
}

const KEY: [u8; 20] = [0xAB; 20];

#[test]
fn header_words_match_spec_examples() {
    let cases = [
        (
            0x0201_0000,
            PacketHeader::new(2, OpCode::AddEntry, Flags::NONE),
        ),
        (
            0x0201_0006,
            PacketHeader::new(
                2,
                OpCode::AddEntry,
                Flags::RECOVERY_ADD | Flags::HIGH_PRIORITY,
            ),
        ),
        (
            0x0202_0000,
            PacketHeader::new(2, OpCode::ReadEntry, Flags::NONE),
        ),
        (
            0x0202_0005,
            PacketHeader::new(
                2,
                OpCode::ReadEntry,
                Flags::DO_FENCING | Flags::HIGH_PRIORITY,
            ),
        ),
        (
            0x0207_0000,
            PacketHeader::new(2, OpCode::BatchReadEntry, Flags::NONE),
        ),
        (0x0103_0000, PacketHeader::new(1, OpCode::Auth, Flags::NONE)),
        // Legacy version 0: the word is the opcode.
        (
            0x0000_0002,
            PacketHeader::new(0, OpCode::ReadEntry, Flags::NONE),
        ),
    ];
    for (word, header) in cases {
        assert_eq!(header.to_word(), word, "{header:?}");
        assert_eq!(PacketHeader::from_word(word), Ok(header), "{word:#010x}");
    }
}

#[test]
fn unknown_versions_and_opcodes_are_errors() {
    assert_eq!(
        PacketHeader::from_word(0x0301_0000),
        Err(ProtoError::UnknownV2Version(3))
    );
    assert_eq!(
        PacketHeader::from_word(0xFF01_0000),
        Err(ProtoError::UnknownV2Version(0xFF))
    );
    assert_eq!(
        PacketHeader::from_word(0x0209_0000),
        Err(ProtoError::UnknownV2Opcode(9))
    );
    assert_eq!(
        PacketHeader::from_word(0x0200_0000),
        Err(ProtoError::UnknownV2Opcode(0))
    );
    // Opcodes defined but not carried on the v2 wire.
    for op in [4u8, 5, 6] {
        let body = [2, op, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        assert!(matches!(
            v2::decode_request(Bytes::copy_from_slice(&body)),
            Err(ProtoError::UnsupportedV2Opcode(o, _)) if o == op
        ));
        assert!(matches!(
            v2::decode_response(Bytes::copy_from_slice(&body)),
            Err(ProtoError::UnsupportedV2Opcode(o, _)) if o == op
        ));
    }
}

#[test]
fn add_request_layout() {
    // header | masterKey(20) | entry(ledgerId, entryId, lac, length, digest, payload)
    let entry = unhex(
        "0000000000000007 0000000000000003 0000000000000002 0000000000000010 \
         00000000deadbeef 68656c6c6f",
    );
    let mut body = unhex("02010006");
    body.extend_from_slice(&KEY);
    body.extend_from_slice(&entry);
    let wire = framed(&body);
    assert_eq!(wire.len(), 4 + 4 + 20 + 32 + 8 + 5);

    let req = v2::decode_request(deframe(&wire)).unwrap();
    let expected = v2::Request::Add(v2::AddRequest {
        version: 2,
        flags: Flags(0x0006),
        master_key: KEY,
        ledger_id: 7,
        entry_id: 3,
        entry: Bytes::from(entry),
    });
    assert_eq!(req, expected);
    let v2::Request::Add(add) = &req else {
        unreachable!()
    };
    assert!(add.is_recovery_add() && add.is_high_priority());

    let mut out = BytesMut::new();
    expected.encode_frame(&mut out);
    assert_eq!(&out[..], &wire[..]);
}

#[test]
fn read_request_layouts() {
    // Plain read: len 20.
    let body = unhex("02020000 0000000000000007 ffffffffffffffff");
    let expected = v2::Request::Read(v2::ReadRequest {
        version: 2,
        flags: Flags::NONE,
        ledger_id: 7,
        entry_id: -1,
        master_key: None,
    });
    assert_eq!(
        v2::decode_request(deframe(&framed(&body))).unwrap(),
        expected
    );
    assert_eq!(&expected.to_bytes()[..], &body[..]);

    // Fence + high priority read: len 40 with the master key.
    let mut body = unhex("02020005 0000000000000007 0000000000000000");
    body.extend_from_slice(&KEY);
    let expected = v2::Request::Read(v2::ReadRequest {
        version: 2,
        flags: Flags::DO_FENCING | Flags::HIGH_PRIORITY,
        ledger_id: 7,
        entry_id: 0,
        master_key: Some(KEY),
    });
    let wire = framed(&body);
    assert_eq!(wire.len(), 44);
    let decoded = v2::decode_request(deframe(&wire)).unwrap();
    assert_eq!(decoded, expected);
    let v2::Request::Read(r) = &decoded else {
        unreachable!()
    };
    assert!(r.is_fence() && r.is_high_priority());
    let mut out = BytesMut::new();
    expected.encode_frame(&mut out);
    assert_eq!(&out[..], &wire[..]);

    // Version 1 fencing read: the bookie does not read a master key.
    let body = unhex("01020001 0000000000000007 0000000000000000");
    let v2::Request::Read(r) = v2::decode_request(Bytes::from(body)).unwrap() else {
        panic!("not a read")
    };
    assert_eq!(r.master_key, None);
    assert!(r.is_fence());

    // Fencing read of version 2 without its key is truncated.
    let body = unhex("02020001 0000000000000007 0000000000000000");
    assert!(matches!(
        v2::decode_request(Bytes::from(body)),
        Err(ProtoError::Truncated { .. })
    ));
}

#[test]
fn batch_read_request_layouts() {
    let body = unhex(
        "02070000 0000000000000007 0000000000000005 0000000000000063 00000010 0000000000100000",
    );
    // 4 + 8 + 8 + 8 + 4 + 8 = 40: the spec's "len 36" is wrong (BookieProtoEncoding sizes it
    // as 40, and 60 with the master key).
    assert_eq!(body.len(), 40);
    let expected = v2::Request::BatchRead(v2::BatchReadRequest {
        version: 2,
        flags: Flags::NONE,
        ledger_id: 7,
        start_entry_id: 5,
        request_id: 99,
        max_count: 16,
        max_size: 1 << 20,
        master_key: None,
    });
    assert_eq!(
        v2::decode_request(Bytes::from(body.clone())).unwrap(),
        expected
    );
    assert_eq!(&expected.to_bytes()[..], &body[..]);

    let mut body = unhex(
        "02070001 0000000000000007 0000000000000005 0000000000000063 ffffffff 0000000000000000",
    );
    body.extend_from_slice(&KEY);
    assert_eq!(body.len(), 60);
    let decoded = v2::decode_request(Bytes::from(body.clone())).unwrap();
    let v2::Request::BatchRead(b) = &decoded else {
        panic!("not a batch read")
    };
    assert_eq!((b.max_count, b.master_key), (-1, Some(KEY)));
    assert_eq!(&decoded.to_bytes()[..], &body[..]);
}

/// AuthMessage{authPluginName="AuthDisabledPlugin", payload=empty}, protobuf by hand:
/// field 1 string (0x0a, len 18), field 2 bytes (0x12, len 0).
fn auth_disabled_bytes() -> Vec<u8> {
    let mut v = vec![0x0a, 18];
    v.extend_from_slice(b"AuthDisabledPlugin");
    v.extend_from_slice(&[0x12, 0x00]);
    v
}

fn auth_disabled() -> AuthMessage {
    AuthMessage {
        auth_plugin_name: "AuthDisabledPlugin".into(),
        payload: Bytes::new(),
    }
}

#[test]
fn auth_request_and_response_layout() {
    let mut body = unhex("02030000");
    body.extend(auth_disabled_bytes());
    let expected = v2::AuthPacket {
        version: 2,
        message: auth_disabled(),
    };
    assert_eq!(
        v2::decode_request(Bytes::from(body.clone())).unwrap(),
        v2::Request::Auth(expected.clone())
    );
    assert_eq!(
        v2::decode_response(Bytes::from(body.clone())).unwrap(),
        v2::Response::Auth(expected.clone())
    );
    assert_eq!(
        &v2::Request::Auth(expected.clone()).to_bytes()[..],
        &body[..]
    );
    assert_eq!(&v2::Response::Auth(expected).to_bytes()[..], &body[..]);

    // An AuthMessage without its required payload is rejected, as protobuf-java does.
    let mut body = unhex("02030000");
    body.extend_from_slice(&[0x0a, 1, b'x']);
    assert!(matches!(
        v2::decode_request(Bytes::from(body)),
        Err(ProtoError::MissingRequiredField {
            message: "AuthMessage",
            field: "payload"
        })
    ));
}

#[test]
fn add_response_layout() {
    let body = unhex("02010000 00000068 0000000000000007 0000000000000003");
    let wire = framed(&body);
    assert_eq!(wire.len(), 4 + 24);
    let expected = v2::Response::Add(v2::AddResponse {
        version: 2,
        status: Status::Fenced,
        ledger_id: 7,
        entry_id: 3,
    });
    assert_eq!(v2::decode_response(deframe(&wire)).unwrap(), expected);
    let mut out = BytesMut::new();
    expected.encode_frame(&mut out);
    assert_eq!(&out[..], &wire[..]);
}

#[test]
fn read_response_layout() {
    let entry = unhex("0000000000000007 0000000000000000 ffffffffffffffff 0000000000000001 61");
    let mut body = unhex("02020000 00000000 0000000000000007 0000000000000000");
    body.extend_from_slice(&entry);
    let expected = v2::Response::Read(v2::ReadResponse {
        version: 2,
        status: Status::Ok,
        ledger_id: 7,
        entry_id: 0,
        body: Bytes::from(entry),
    });
    assert_eq!(
        v2::decode_response(Bytes::from(body.clone())).unwrap(),
        expected
    );
    assert_eq!(&expected.to_bytes()[..], &body[..]);

    // Error: empty body, rc ENOENTRY = 2.
    let body = unhex("02020000 00000002 0000000000000007 0000000000000009");
    let expected = v2::Response::Read(v2::ReadResponse {
        version: 2,
        status: Status::NoEntry,
        ledger_id: 7,
        entry_id: 9,
        body: Bytes::new(),
    });
    assert_eq!(
        v2::decode_response(Bytes::from(body.clone())).unwrap(),
        expected
    );
    assert_eq!(&expected.to_bytes()[..], &body[..]);
}

/// A read of 4 KiB or more goes out in two pieces, the entry shared rather than copied,
/// which together are the one-piece body byte for byte; a shorter read is one piece.
#[test]
fn a_large_read_response_is_two_pieces_with_the_entry_uncopied() {
    let entry = Bytes::from(vec![0x61u8; folio_proto::v3::UNCOPIED_BODY_BYTES]);
    let large = v2::Response::Read(v2::ReadResponse {
        version: 2,
        status: Status::Ok,
        ledger_id: 7,
        entry_id: 3,
        body: entry.clone(),
    });
    let (head, tail) = large.to_pieces();
    let tail = tail.expect("a large entry is a piece of its own");
    assert_eq!(
        tail.as_ptr(),
        entry.as_ptr(),
        "the entry is shared, not copied"
    );
    assert_eq!(
        &head[..],
        &unhex("02020000 00000000 0000000000000007 0000000000000003")[..]
    );
    let whole = [&head[..], &tail[..]].concat();
    assert_eq!(&whole[..], &large.to_bytes()[..]);
    assert_eq!(v2::decode_response(Bytes::from(whole)).unwrap(), large);

    let small = v2::Response::Read(v2::ReadResponse {
        version: 2,
        status: Status::Ok,
        ledger_id: 7,
        entry_id: 3,
        body: entry.slice(1..),
    });
    let (one, none) = small.to_pieces();
    assert!(none.is_none());
    assert_eq!(&one[..], &small.to_bytes()[..]);
}

#[test]
fn batch_read_response_layout() {
    let body = unhex(
        "02070000 00000000 0000000000000007 0000000000000005 0000000000000063 \
         00000002 aabb 00000000 00000001 cc",
    );
    let expected = v2::Response::BatchRead(v2::BatchReadResponse {
        version: 2,
        status: Status::Ok,
        ledger_id: 7,
        start_entry_id: 5,
        request_id: 99,
        entries: vec![
            Bytes::from_static(&[0xaa, 0xbb]),
            Bytes::new(),
            Bytes::from_static(&[0xcc]),
        ],
    });
    assert_eq!(
        v2::decode_response(Bytes::from(body.clone())).unwrap(),
        expected
    );
    assert_eq!(&expected.to_bytes()[..], &body[..]);

    // An entry length running past the frame, or negative, is an error.
    for tail in ["00000005 aabb", "ffffffff", "0000"] {
        let mut bad = unhex("02070000 00000000 0000000000000007 0000000000000005 0000000000000063");
        bad.extend(unhex(tail));
        assert!(
            v2::decode_response(Bytes::from(bad)).is_err(),
            "tail {tail} accepted"
        );
    }
}

#[test]
fn unknown_ledger_state_is_sent_as_eio_to_v2_clients() {
    let resp = v2::Response::Add(v2::AddResponse {
        version: 2,
        status: Status::UnknownLedgerState,
        ledger_id: 1,
        entry_id: 2,
    });
    let bytes = resp.to_bytes();
    assert_eq!(&bytes[4..8], &101i32.to_be_bytes());
    // A Folio client still understands 107 if some bookie sends it.
    let body = unhex("02010000 0000006b 0000000000000001 0000000000000002");
    let v2::Response::Add(a) = v2::decode_response(Bytes::from(body)).unwrap() else {
        panic!("not an add")
    };
    assert_eq!(a.status, Status::UnknownLedgerState);
    // Return codes outside the table are errors.
    let body = unhex("02010000 00000003 0000000000000001 0000000000000002");
    assert_eq!(
        v2::decode_response(Bytes::from(body)),
        Err(ProtoError::UnknownV2ReturnCode(3))
    );
}

#[test]
fn responses_echo_the_request_version() {
    let resp = v2::Response::Add(v2::AddResponse {
        version: 0,
        status: Status::Ok,
        ledger_id: 1,
        entry_id: 2,
    });
    assert_eq!(&resp.to_bytes()[..4], &[0, 0, 0, 1]);
}

#[test]
fn truncated_v2_messages_are_errors() {
    let full = unhex("02010000 00000000 0000000000000007 0000000000000003");
    for n in 0..full.len() {
        assert!(
            v2::decode_response(Bytes::copy_from_slice(&full[..n])).is_err(),
            "response prefix of {n} bytes accepted"
        );
    }
    let mut add = unhex("02010000");
    add.extend_from_slice(&KEY);
    add.extend(unhex("0000000000000007 00000000000000"));
    for n in 0..add.len() {
        assert!(
            v2::decode_request(Bytes::copy_from_slice(&add[..n])).is_err(),
            "add prefix of {n} bytes accepted"
        );
    }
}

#[test]
fn top_level_decoder_routes_v2_frames() {
    let body = unhex("02020000 0000000000000007 ffffffffffffffff");
    assert!(matches!(
        folio_proto::decode_request(Bytes::from(body)),
        Ok(AnyRequest::V2(v2::Request::Read(_)))
    ));
    let body = unhex("02010000 00000000 0000000000000007 0000000000000003");
    assert!(matches!(
        folio_proto::decode_response(Bytes::from(body)),
        Ok(AnyResponse::V2(v2::Response::Add(_)))
    ));
}

#[test]
fn java_style_add_frame_for_the_spec_entry() {
    // Frame length 0x45 = 4 + 20 + 32 + 8 + 5.
    // What a v2 Java client sends for ledger 1, entry 0, lac -1, "hello", CRC32, password
    // "pwd": frame length, header word, master key, entry with digest (all from spec 4.6).
    let mut expected = unhex("00000045 02010000 9c31dcb7214645e06dbf8a67daa6cfcdcd13a611");
    expected.extend(unhex(
        "0000000000000001 0000000000000000 ffffffffffffffff 0000000000000005 \
         0000000030a56872 68656c6c6f",
    ));
    let dm = folio_proto::DigestManager::new(1, folio_proto::DigestType::Crc32, b"pwd");
    let req = v2::Request::Add(v2::AddRequest {
        version: v2::CURRENT_PROTOCOL_VERSION,
        flags: Flags::NONE,
        master_key: folio_proto::master_key(b"pwd"),
        ledger_id: 1,
        entry_id: 0,
        entry: dm.compute(0, -1, 5, b"hello"),
    });
    let mut out = BytesMut::new();
    req.encode_frame(&mut out);
    assert_eq!(&out[..], &expected[..]);
    // And the bookie side reads it back, the client side verifies the stored entry.
    let v2::Request::Add(add) = v2::decode_request(deframe(&expected)).unwrap() else {
        panic!("not an add")
    };
    let v = dm.verify(&add.entry, 0).unwrap();
    assert_eq!((&v.payload[..], v.lac, v.length), (&b"hello"[..], -1, 5));
}
