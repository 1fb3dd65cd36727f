//! v3 protobuf protocol: bytes encoded by hand from the field numbers and wire types of
//! BookkeeperProtocol.proto (in field-number order, as protobuf-java writes them) decode to the
//! right messages, and our encoder produces exactly those bytes.

use bytes::{Bytes, BytesMut};
use folio_proto::pb::{self, OperationType, StatusCode};
use folio_proto::{AnyRequest, AnyResponse, FrameDecoder, ProtoError, v3};

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const KEY: [u8; 20] = [0x5a; 20];

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// Checks decode(bytes) == msg and encode(msg) == bytes, through a framed round trip too.
fn check_request(bytes: &[u8], msg: &pb::Request) {
    assert_eq!(
        &v3::decode_request(Bytes::copy_from_slice(bytes)).unwrap(),
        msg
    );
    assert_eq!(&v3::encode_request(msg)[..], bytes);
    let mut framed = BytesMut::new();
    v3::encode_request_frame(msg, &mut framed);
    assert_eq!(&framed[..4], &(bytes.len() as u32).to_be_bytes());
    let mut d = FrameDecoder::new();
    d.feed(&framed);
    let frame = d.next_frame().unwrap().unwrap();
    match folio_proto::decode_request(frame).unwrap() {
        AnyRequest::V3(r) => assert_eq!(&*r, msg),
        other => panic!("decoded as {other:?}"),
    }
}

fn check_response(bytes: &[u8], msg: &pb::Response) {
    assert_eq!(
        &v3::decode_response(Bytes::copy_from_slice(bytes)).unwrap(),
        msg
    );
    assert_eq!(&v3::encode_response(msg)[..], bytes);
    match folio_proto::decode_response(Bytes::copy_from_slice(bytes)).unwrap() {
        AnyResponse::V3(r) => assert_eq!(&*r, msg),
        other => panic!("decoded as {other:?}"),
    }
}

#[test]
fn add_request_bytes() {
    // header (field 1): version 3, ADD_ENTRY 2, txnId 1
    let header = unhex("0a06 0803 1002 1801");
    // addRequest (field 101 -> key 0xaa 0x06): ledgerId 1, entryId 0, masterKey, body "hello"
    let add = cat(&[&unhex("0801 1000 1a14"), &KEY, &unhex("2205 68656c6c6f")]);
    let bytes = cat(&[&header, &unhex("aa06"), &[add.len() as u8], &add]);
    let msg = pb::Request {
        header: v3::request_header(OperationType::AddEntry, 1, None),
        add_request: Some(pb::AddRequest {
            flag: None,
            ledger_id: 1,
            entry_id: 0,
            master_key: Bytes::copy_from_slice(&KEY),
            body: Bytes::from_static(b"hello"),
            write_flags: None,
        }),
        ..Default::default()
    };
    check_request(&bytes, &msg);
    let add = msg.add_request.as_ref().unwrap();
    assert!(!add.is_recovery_add() && !add.is_deferred_sync());
    assert!(!msg.header.is_high_priority());
}

#[test]
fn recovery_add_with_priority_and_write_flags() {
    // priority 100 (field 4), txnId 2
    let header = unhex("0a08 0803 1002 1802 2064");
    // ... writeFlags 1 (field 5 -> 0x28), flag RECOVERY_ADD (field 100 varint -> 0xa0 0x06)
    let add = cat(&[
        &unhex("0801 1000 1a14"),
        &KEY,
        &unhex("2205 68656c6c6f 2801 a00601"),
    ]);
    let bytes = cat(&[&header, &unhex("aa06"), &[add.len() as u8], &add]);
    let msg = pb::Request {
        header: v3::request_header(OperationType::AddEntry, 2, Some(v3::HIGH_PRIORITY)),
        add_request: Some(pb::AddRequest {
            flag: Some(pb::add_request::Flag::RecoveryAdd as i32),
            ledger_id: 1,
            entry_id: 0,
            master_key: Bytes::copy_from_slice(&KEY),
            body: Bytes::from_static(b"hello"),
            write_flags: Some(v3::WRITE_FLAG_DEFERRED_SYNC),
        }),
        ..Default::default()
    };
    check_request(&bytes, &msg);
    let add = msg.add_request.as_ref().unwrap();
    assert!(add.is_recovery_add() && add.is_deferred_sync());
    assert!(msg.header.is_high_priority());
}

#[test]
fn fencing_read_request_bytes() {
    let header = unhex("0a08 0803 1001 1805 2064");
    // readRequest (field 100 -> 0xa2 0x06): ledgerId 7, entryId -1 (10-byte varint), key, FENCE
    let read = cat(&[
        &unhex("0807 10ffffffffffffffffff01 1a14"),
        &KEY,
        &unhex("a00601"),
    ]);
    let bytes = cat(&[&header, &unhex("a206"), &[read.len() as u8], &read]);
    let msg = pb::Request {
        header: v3::request_header(OperationType::ReadEntry, 5, Some(100)),
        read_request: Some(pb::ReadRequest {
            flag: Some(pb::read_request::Flag::FenceLedger as i32),
            ledger_id: 7,
            entry_id: -1,
            master_key: Some(Bytes::copy_from_slice(&KEY)),
            previous_lac: None,
            time_out: None,
        }),
        ..Default::default()
    };
    check_request(&bytes, &msg);
    let r = msg.read_request.as_ref().unwrap();
    assert!(r.is_fence_ledger() && !r.is_entry_piggyback());
}

#[test]
fn long_poll_read_and_context_bytes() {
    let header = unhex("0a06 0803 1001 1809");
    // ledgerId 7, entryId -1, previousLAC 4 (field 4 -> 0x20), timeOut 1000 (field 5 -> 0x28,
    // varint 0xe8 0x07), flag ENTRY_PIGGYBACK 2
    let read = unhex("0807 10ffffffffffffffffff01 2004 28e807 a00602");
    // requestContext (field 200 -> 0xc2 0x0c): key "k", value "v"
    let ctx = unhex("c20c06 0a016b 120176");
    let bytes = cat(&[&header, &unhex("a206"), &[read.len() as u8], &read, &ctx]);
    let msg = pb::Request {
        header: v3::request_header(OperationType::ReadEntry, 9, None),
        read_request: Some(pb::ReadRequest {
            flag: Some(pb::read_request::Flag::EntryPiggyback as i32),
            ledger_id: 7,
            entry_id: -1,
            master_key: None,
            previous_lac: Some(4),
            time_out: Some(1000),
        }),
        request_context: vec![pb::ContextPair {
            key: "k".into(),
            value: "v".into(),
        }],
        ..Default::default()
    };
    check_request(&bytes, &msg);
    assert!(msg.read_request.as_ref().unwrap().is_entry_piggyback());
    assert!(!msg.read_request.as_ref().unwrap().is_fence_ledger());
}

#[test]
fn other_requests_bytes() {
    // writeLacRequest (103 -> 0xba 0x06): ledgerId 7, lac 3, masterKey, body
    let wl = cat(&[&unhex("0807 1003 1a14"), &KEY, &unhex("2202 0102")]);
    let bytes = cat(&[&unhex("0a06 0803 1006 1803 ba06"), &[wl.len() as u8], &wl]);
    check_request(
        &bytes,
        &pb::Request {
            header: v3::request_header(OperationType::WriteLac, 3, None),
            write_lac_request: Some(pb::WriteLacRequest {
                ledger_id: 7,
                lac: 3,
                master_key: Bytes::copy_from_slice(&KEY),
                body: Bytes::from_static(&[1, 2]),
            }),
            ..Default::default()
        },
    );
    // readLacRequest (104 -> 0xc2 0x06)
    check_request(
        &unhex("0a06 0803 1007 1804 c206 02 0807"),
        &pb::Request {
            header: v3::request_header(OperationType::ReadLac, 4, None),
            read_lac_request: Some(pb::ReadLacRequest { ledger_id: 7 }),
            ..Default::default()
        },
    );
    // getBookieInfoRequest (105 -> 0xca 0x06): requested = 3
    check_request(
        &unhex("0a06 0803 1008 1805 ca06 02 0803"),
        &pb::Request {
            header: v3::request_header(OperationType::GetBookieInfo, 5, None),
            get_bookie_info_request: Some(pb::GetBookieInfoRequest { requested: Some(3) }),
            ..Default::default()
        },
    );
    // startTLSRequest (106 -> 0xd2 0x06), empty
    check_request(
        &unhex("0a06 0803 1009 1806 d206 00"),
        &pb::Request {
            header: v3::request_header(OperationType::StartTls, 6, None),
            start_tls_request: Some(pb::StartTlsRequest {}),
            ..Default::default()
        },
    );
    // forceLedgerRequest (107 -> 0xda 0x06)
    check_request(
        &unhex("0a06 0803 100a 1807 da06 02 0807"),
        &pb::Request {
            header: v3::request_header(OperationType::ForceLedger, 7, None),
            force_ledger_request: Some(pb::ForceLedgerRequest { ledger_id: 7 }),
            ..Default::default()
        },
    );
    // getListOfEntriesOfLedgerRequest (108 -> 0xe2 0x06)
    check_request(
        &unhex("0a06 0803 100b 1808 e206 02 0807"),
        &pb::Request {
            header: v3::request_header(OperationType::GetListOfEntriesOfLedger, 8, None),
            get_list_of_entries_of_ledger_request: Some(pb::GetListOfEntriesOfLedgerRequest {
                ledger_id: 7,
            }),
            ..Default::default()
        },
    );
    // authRequest (102 -> 0xb2 0x06)
    check_request(
        &unhex("0a06 0803 1005 180a b206 05 0a0150 1200"),
        &pb::Request {
            header: v3::request_header(OperationType::Auth, 10, None),
            auth_request: Some(pb::AuthMessage {
                auth_plugin_name: "P".into(),
                payload: Bytes::new(),
            }),
            ..Default::default()
        },
    );
}

#[test]
fn add_response_bytes_include_zero_required_fields() {
    // status EOK (field 2 = 0) and entryId 0 must be on the wire: they are required.
    let bytes = unhex("0a06 0803 1002 1801 1000 aa06 06 0800 1001 1800");
    let req_header = v3::request_header(OperationType::AddEntry, 1, Some(100));
    let msg = pb::Response {
        header: v3::response_header(&req_header),
        status: StatusCode::Eok as i32,
        add_response: Some(pb::AddResponse {
            status: StatusCode::Eok as i32,
            ledger_id: 1,
            entry_id: 0,
        }),
        ..Default::default()
    };
    check_response(&bytes, &msg);
}

#[test]
fn read_response_bytes() {
    // readResponse (100 -> 0xa2 0x06): status EOK, ledger 7, entry 0, body aabb, maxLAC 5,
    // lacUpdateTimestamp 300 (field 6 -> 0x30, varint 0xac 0x02)
    let rr = unhex("0800 1007 1800 2202aabb 2805 30ac02");
    let bytes = cat(&[
        &unhex("0a06 0803 1001 1805 1000 a206"),
        &[rr.len() as u8],
        &rr,
    ]);
    check_response(&bytes, &read_response(Bytes::from_static(&[0xaa, 0xbb])));
}

/// The read response the read-response tests pin: txn 5, EOK, ledger 7, entry 0, `body`,
/// maxLAC 5, lacUpdateTimestamp 300.
fn read_response(body: Bytes) -> pb::Response {
    pb::Response {
        header: v3::response_header(&v3::request_header(OperationType::ReadEntry, 5, None)),
        status: StatusCode::Eok as i32,
        read_response: Some(pb::ReadResponse {
            status: StatusCode::Eok as i32,
            ledger_id: 7,
            entry_id: 0,
            body: Some(body),
            max_lac: Some(5),
            lac_update_timestamp: Some(300),
        }),
        ..Default::default()
    }
}

#[test]
fn other_responses_bytes() {
    let hdr = |op: OperationType| v3::response_header(&v3::request_header(op, 1, None));
    // status ENOENTRY 403 = varint 0x93 0x03; readLacResponse (104 -> 0xc2 0x06)
    check_response(
        &unhex("0a06 0803 1007 1801 109303 c206 0b 089303 1007 1a0101 220102"),
        &pb::Response {
            header: hdr(OperationType::ReadLac),
            status: StatusCode::Enoentry as i32,
            read_lac_response: Some(pb::ReadLacResponse {
                status: StatusCode::Enoentry as i32,
                ledger_id: 7,
                lac_body: Some(Bytes::from_static(&[1])),
                last_entry_body: Some(Bytes::from_static(&[2])),
            }),
            ..Default::default()
        },
    );
    // getBookieInfoResponse (105 -> 0xca 0x06): total 1000 (0xe8 0x07), free 10
    check_response(
        &unhex("0a06 0803 1008 1801 1000 ca06 07 0800 10e807 180a"),
        &pb::Response {
            header: hdr(OperationType::GetBookieInfo),
            status: StatusCode::Eok as i32,
            get_bookie_info_response: Some(pb::GetBookieInfoResponse {
                status: StatusCode::Eok as i32,
                total_disk_capacity: Some(1000),
                free_disk_space: Some(10),
            }),
            ..Default::default()
        },
    );
    // writeLacResponse (103), forceLedgerResponse (107), startTLSResponse (106), list (108)
    check_response(
        &unhex("0a06 0803 1006 1801 1000 ba06 04 0800 1007"),
        &pb::Response {
            header: hdr(OperationType::WriteLac),
            status: 0,
            write_lac_response: Some(pb::WriteLacResponse {
                status: 0,
                ledger_id: 7,
            }),
            ..Default::default()
        },
    );
    check_response(
        &unhex("0a06 0803 100a 1801 1000 da06 04 0800 1007"),
        &pb::Response {
            header: hdr(OperationType::ForceLedger),
            status: 0,
            force_ledger_response: Some(pb::ForceLedgerResponse {
                status: 0,
                ledger_id: 7,
            }),
            ..Default::default()
        },
    );
    check_response(
        &unhex("0a06 0803 1009 1801 1000 d206 00"),
        &pb::Response {
            header: hdr(OperationType::StartTls),
            status: 0,
            start_tls_response: Some(pb::StartTlsResponse {}),
            ..Default::default()
        },
    );
    check_response(
        &unhex("0a06 0803 100b 1801 1000 e206 07 0800 1007 1a0100"),
        &pb::Response {
            header: hdr(OperationType::GetListOfEntriesOfLedger),
            status: 0,
            get_list_of_entries_of_ledger_response: Some(pb::GetListOfEntriesOfLedgerResponse {
                status: 0,
                ledger_id: 7,
                availability_of_entries_of_ledger: Some(Bytes::from_static(&[0])),
            }),
            ..Default::default()
        },
    );
    // authResponse (102 -> 0xb2 0x06): AuthDisabledPlugin, empty payload
    let mut auth = vec![0x0a, 18];
    auth.extend_from_slice(b"AuthDisabledPlugin");
    auth.extend_from_slice(&[0x12, 0x00]);
    let bytes = cat(&[
        &unhex("0a06 0803 1005 1801 1000 b206"),
        &[auth.len() as u8],
        &auth,
    ]);
    check_response(
        &bytes,
        &pb::Response {
            header: hdr(OperationType::Auth),
            status: 0,
            auth_response: Some(pb::AuthMessage {
                auth_plugin_name: "AuthDisabledPlugin".into(),
                payload: Bytes::new(),
            }),
            ..Default::default()
        },
    );
}

#[test]
fn status_only_response_for_unsupported_operation() {
    // RANGE_READ_ENTRY (3) decodes (it is a known operation) and gets EBADREQ (404 = 0x94 0x03).
    let req = v3::decode_request(Bytes::from(unhex("0a06 0803 1003 182a"))).unwrap();
    assert_eq!(req.header.operation, OperationType::RangeReadEntry as i32);
    let resp = pb::Response::status_only(&req.header, StatusCode::Ebadreq);
    assert_eq!(
        &v3::encode_response(&resp)[..],
        &unhex("0a06 0803 1003 182a 109403")[..]
    );
}

#[test]
fn missing_required_fields_are_errors() {
    let cases: [(&str, &str, &str); 6] = [
        // header without txnId
        ("0a04 0803 1002", "BKPacketHeader", "txnId"),
        // no header at all
        ("c206 02 0807", "Request", "header"),
        // addRequest without body
        (
            "0a06 0803 1002 1801 aa06 06 0801 1000 1a00",
            "AddRequest",
            "body",
        ),
        // readRequest without entryId
        ("0a06 0803 1001 1801 a206 02 0807", "ReadRequest", "entryId"),
        // context pair without value
        ("0a06 0803 1001 1801 c20c 03 0a016b", "ContextPair", "value"),
        // writeLacRequest without masterKey
        (
            "0a06 0803 1006 1801 ba06 06 0807 1003 2200",
            "WriteLacRequest",
            "masterKey",
        ),
    ];
    for (hex, message, field) in cases {
        assert_eq!(
            v3::decode_request(Bytes::from(unhex(hex))),
            Err(ProtoError::MissingRequiredField { message, field }),
            "{hex}"
        );
    }
    let resp_cases: [(&str, &str, &str); 3] = [
        ("0a06 0803 1002 1801", "Response", "status"),
        (
            "0a06 0803 1002 1801 1000 aa06 04 0800 1001",
            "AddResponse",
            "entryId",
        ),
        (
            "0a06 0803 1002 1801 1000 b206 03 0a0150",
            "AuthMessage",
            "payload",
        ),
    ];
    for (hex, message, field) in resp_cases {
        assert_eq!(
            v3::decode_response(Bytes::from(unhex(hex))),
            Err(ProtoError::MissingRequiredField { message, field }),
            "{hex}"
        );
    }
}

#[test]
fn unknown_enum_values_in_required_fields_are_errors() {
    // operation 99
    assert_eq!(
        v3::decode_request(Bytes::from(unhex("0a06 0803 1063 1801"))),
        Err(ProtoError::UnknownEnumValue {
            field: "BKPacketHeader.operation",
            value: 99
        })
    );
    // version 4
    assert_eq!(
        v3::decode_request(Bytes::from(unhex("0a06 0804 1002 1801"))),
        Err(ProtoError::UnknownEnumValue {
            field: "BKPacketHeader.version",
            value: 4
        })
    );
    // status 7
    assert_eq!(
        v3::decode_response(Bytes::from(unhex("0a06 0803 1002 1801 1007"))),
        Err(ProtoError::UnknownEnumValue {
            field: "Response.status",
            value: 7
        })
    );
    // addResponse.status 1
    assert_eq!(
        v3::decode_response(Bytes::from(unhex(
            "0a06 0803 1002 1801 1000 aa06 06 0801 1001 1800"
        ))),
        Err(ProtoError::UnknownEnumValue {
            field: "AddResponse.status",
            value: 1
        })
    );
}

#[test]
fn unknown_optional_flag_values_read_as_absent() {
    // ReadRequest.flag = 9: protobuf-java keeps it as an unknown field; the flag reads unset.
    let req = v3::decode_request(Bytes::from(unhex(
        "0a06 0803 1001 1801 a206 07 0807 1000 a00609",
    )))
    .unwrap();
    let r = req.read_request.unwrap();
    assert_eq!(r.flag, None);
    assert!(!r.is_fence_ledger());
}

#[test]
fn unknown_fields_are_skipped() {
    // field 15 varint, field 16 fixed64, field 17 fixed32, a group (field 18) around a varint.
    let bytes = unhex("0a06 0803 1001 1801 7801 81010000000000000000 8d0100000000 9301 0801 9401");
    let req = v3::decode_request(Bytes::from(bytes)).unwrap();
    assert_eq!(req.header.txn_id, 1);
}

#[test]
fn garbage_is_an_error() {
    for hex in ["ff", "0a", "0a10 0803", "0aff", "07", "0a06 0803 1002 18"] {
        assert!(
            v3::decode_request(Bytes::from(unhex(hex))).is_err(),
            "{hex} accepted"
        );
        assert!(
            v3::decode_response(Bytes::from(unhex(hex))).is_err(),
            "{hex} accepted"
        );
    }
    assert_eq!(
        folio_proto::decode_request(Bytes::new()),
        Err(ProtoError::EmptyFrame)
    );
}

#[test]
fn response_constructors_and_effective_status() {
    let req = v3::request_header(OperationType::AddEntry, 12, Some(100));
    let ok = pb::Response::for_add(&req, StatusCode::Eok, 3, 4);
    assert_eq!(ok.header.txn_id, 12);
    assert_eq!(ok.header.operation, OperationType::AddEntry as i32);
    assert_eq!(ok.header.priority, None);
    assert_eq!(ok.effective_status(), Ok(folio_proto::Status::Ok));
    let fenced = pb::Response::for_add(&req, StatusCode::Efenced, 3, 4);
    assert_eq!(fenced.status, StatusCode::Efenced as i32);
    assert_eq!(fenced.effective_status(), Ok(folio_proto::Status::Fenced));
    // Top-level EOK with a failing sub-response: the sub-response wins.
    let mut mixed = pb::Response::for_read(&req, StatusCode::Enoentry, 3, 4, None, Some(2));
    mixed.status = StatusCode::Eok as i32;
    assert_eq!(mixed.effective_status(), Ok(folio_proto::Status::NoEntry));
    // Top-level error without sub-response.
    let bad = pb::Response::status_only(&req, StatusCode::Ebadversion);
    assert_eq!(bad.effective_status(), Ok(folio_proto::Status::BadVersion));
    // Round trip through the wire.
    let back = v3::decode_response(v3::encode_response(&mixed)).unwrap();
    assert_eq!(back, mixed);
}

/// The second piece of a large message: it must be there, and be `body` itself (shared,
/// not a copy).
fn shared_tail(tail: Option<Bytes>, body: &Bytes) -> Bytes {
    let tail = tail.expect("a large body is a piece of its own");
    assert_eq!(
        tail.as_ptr(),
        body.as_ptr(),
        "the body is shared, not copied"
    );
    tail
}

/// An add with a large body is framed in two pieces, the body last and not copied: the
/// bytes are pinned (header, the add's other fields, then the body's key and length, then
/// the body), and both our decoder and the canonical encoding agree on the message.
#[test]
fn a_large_add_is_framed_with_its_body_last_and_uncopied() {
    let body = Bytes::from(vec![0x42u8; v3::UNCOPIED_BODY_BYTES]);
    let msg = pb::Request {
        header: v3::request_header(OperationType::AddEntry, 2, Some(v3::HIGH_PRIORITY)),
        add_request: Some(pb::AddRequest {
            flag: Some(pb::add_request::Flag::RecoveryAdd as i32),
            ledger_id: 1,
            entry_id: 0,
            master_key: Bytes::copy_from_slice(&KEY),
            body: body.clone(),
            write_flags: Some(v3::WRITE_FLAG_DEFERRED_SYNC),
        }),
        ..Default::default()
    };
    let (head, tail) = v3::encode_request_frame_pieces(&msg);
    let tail = shared_tail(tail, &body);
    let header = unhex("0a08 0803 1002 1802 2064");
    // ledgerId 1, entryId 0, masterKey, writeFlags 1, flag RECOVERY_ADD, then body (key
    // 0x22, length 4096 = varint 80 20).
    let add_head = cat(&[
        &unhex("0801 1000 1a14"),
        &KEY,
        &unhex("2801 a00601 22 8020"),
    ]);
    let add_len = add_head.len() + body.len(); // 4130 = varint a2 20
    assert_eq!(add_len, 4130);
    let frame_body_len = header.len() + 2 + 2 + add_len;
    let expected_head = cat(&[
        &(frame_body_len as u32).to_be_bytes(),
        &header,
        &unhex("aa06 a220"),
        &add_head,
    ]);
    assert_eq!(&head[..], &expected_head[..]);
    let whole = cat(&[&head, &tail]);
    let mut d = FrameDecoder::new();
    d.feed(&whole);
    let frame = d.next_frame().unwrap().unwrap();
    assert!(d.next_frame().unwrap().is_none(), "exactly one frame");
    assert_eq!(v3::decode_request(frame.clone()).unwrap(), msg);
    // Same message as the canonical (field-number order) encoding, only reordered.
    assert_eq!(frame.len(), v3::encode_request(&msg).len());

    // Below the threshold: one piece, byte for byte the canonical frame.
    let small = pb::Request {
        add_request: Some(pb::AddRequest {
            body: Bytes::from(vec![1u8; v3::UNCOPIED_BODY_BYTES - 1]),
            ..msg.add_request.clone().unwrap()
        }),
        ..msg.clone()
    };
    let (one, none) = v3::encode_request_frame_pieces(&small);
    assert!(none.is_none());
    let mut framed = BytesMut::new();
    v3::encode_request_frame(&small, &mut framed);
    assert_eq!(&one[..], &framed[..]);
    // The frame is encoded in place: its length prefix, then the canonical encoding.
    let canonical = v3::encode_request(&small);
    assert_eq!(&framed[..4], &(canonical.len() as u32).to_be_bytes());
    assert_eq!(&framed[4..], &canonical[..]);
}

/// A response frame, encoded in place after its length prefix, is its length and the
/// canonical encoding, appended after what the buffer already holds.
#[test]
fn a_response_frame_is_its_length_then_the_canonical_encoding() {
    let msg = read_response(Bytes::from(vec![7u8; 1000]));
    let mut framed = BytesMut::from(&b"before"[..]);
    v3::encode_response_frame(&msg, &mut framed);
    let canonical = v3::encode_response(&msg);
    assert_eq!(&framed[..6], b"before");
    assert_eq!(&framed[6..10], &(canonical.len() as u32).to_be_bytes());
    assert_eq!(&framed[10..], &canonical[..]);
}

/// A read response with a large entry is encoded in two pieces, the entry last and not
/// copied: the bytes are pinned (header and status, then readResponse's other fields, then
/// the body's key and length, then the entry), and the decoder reads the same message as
/// from the canonical encoding.
#[test]
fn a_large_read_response_is_encoded_with_its_entry_last_and_uncopied() {
    let entry = Bytes::from(vec![0x42u8; v3::UNCOPIED_BODY_BYTES]);
    let msg = read_response(entry.clone());
    let (head, tail) = v3::encode_response_pieces(&msg);
    let tail = shared_tail(tail, &entry);
    // status EOK, ledger 7, entry 0, maxLAC 5, lacUpdateTimestamp 300, then the body's key
    // (0x22) and length (4096 = varint 80 20).
    let read_head = unhex("0800 1007 1800 2805 30ac02 22 8020");
    let read_len = read_head.len() + entry.len(); // 4110 = varint 8e 20
    assert_eq!(read_len, 4110);
    let expected_head = cat(&[&unhex("0a06 0803 1001 1805 1000 a206 8e20"), &read_head]);
    assert_eq!(&head[..], &expected_head[..]);
    let whole = Bytes::from(cat(&[&head, &tail]));
    assert_eq!(v3::decode_response(whole.clone()).unwrap(), msg);
    assert_eq!(whole.len(), v3::encode_response(&msg).len());

    // Below the threshold, or with no entry: one piece, the canonical encoding.
    for body in [Some(entry.slice(1..)), None] {
        let small = pb::Response {
            read_response: Some(pb::ReadResponse {
                body,
                ..msg.read_response.clone().unwrap()
            }),
            ..msg.clone()
        };
        let (one, none) = v3::encode_response_pieces(&small);
        assert!(none.is_none());
        assert_eq!(&one[..], &v3::encode_response(&small)[..]);
    }
}

/// BP-32's write close (Folio's own, docs/formats/write-close.md): header operation
/// RANGE_ADD_ENTRY (4), `Request.writeCloseRequest` / `Response.writeCloseResponse` field
/// 1000 (key varint 0xc2 0x3e: 1000 << 3 | 2 = 8002). These bytes are the contract with
/// every released Folio client and bookie; they must never change.
#[test]
fn write_close_bytes_are_pinned() {
    assert_eq!(v3::WRITE_CLOSE as i32, 4);
    assert_eq!(v3::WRITE_CLOSE, OperationType::RangeAddEntry);
    assert_eq!(v3::WRITE_CLOSE_FIELD, 1000);
    // header: version 3, operation 4, txnId 7; writeCloseRequest: ledgerId 5, masterKey.
    let body = cat(&[&unhex("0805 1214"), &KEY]);
    let bytes = cat(&[
        &unhex("0a06 0803 1004 1807 c23e"),
        &[body.len() as u8],
        &body,
    ]);
    assert_eq!(body.len(), 24);
    let msg = pb::Request {
        header: v3::request_header(v3::WRITE_CLOSE, 7, None),
        write_close_request: Some(pb::WriteCloseRequest {
            ledger_id: 5,
            master_key: Bytes::copy_from_slice(&KEY),
        }),
        ..Default::default()
    };
    check_request(&bytes, &msg);
    // Response: header, status EOK, writeCloseResponse { status EOK, ledgerId 5 }.
    let bytes = unhex("0a06 0803 1004 1807 1000 c23e 04 0800 1005");
    let resp = pb::Response {
        header: v3::request_header(v3::WRITE_CLOSE, 7, None),
        status: StatusCode::Eok as i32,
        write_close_response: Some(pb::WriteCloseResponse {
            status: StatusCode::Eok as i32,
            ledger_id: 5,
        }),
        ..Default::default()
    };
    check_response(&bytes, &resp);
    // Both fields of each message are required, as in seed 001.
    let no_key = unhex("0a06 0803 1004 1807 c23e 02 0805");
    let e = v3::decode_request(Bytes::from(no_key)).unwrap_err();
    assert!(e.to_string().contains("masterKey"), "{e}");
    let no_ledger = unhex("0a06 0803 1004 1807 1000 c23e 02 0800");
    let e = v3::decode_response(Bytes::from(no_ledger)).unwrap_err();
    assert!(e.to_string().contains("ledgerId"), "{e}");
}
