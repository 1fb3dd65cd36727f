//! Between frames and the processor's model: decodes one frame body (v3 or v2, detected per
//! frame) into a [`Request`] plus what the response must echo, and encodes a [`Response`] back in
//! the request's protocol.
//!
//! v3 responses echo the request's txn id and operation (VERSION_THREE); v2 responses echo the
//! request's version, opcode, ledger id and entry id (the v2 client matches on those). Requests
//! that decode but cannot be served (a v3 header version other than VERSION_THREE, an operation
//! BookKeeper's server does not dispatch, a missing sub-request) are answered with an error
//! status; frames that do not decode at all leave the stream unusable and close the connection,
//! as BookKeeper's decoder exception does.

use bytes::Bytes;
use folio_proto::pb::{self, BkPacketHeader, OperationType, ProtocolVersion, StatusCode};
use folio_proto::{AnyRequest, v2, v3};
use folio_types::{EntryId, LedgerId};

use crate::request::{AddRequest, AuthMessage, ReadRequest, Request, Response, Status};

/// What a response must repeat from its request.
#[derive(Debug, Clone, PartialEq)]
pub enum Echo {
    V3(BkPacketHeader),
    V2 {
        version: u8,
        ledger: LedgerId,
        entry: EntryId,
        /// Batch reads are matched by request id.
        request_id: i64,
    },
}

/// The outcome of decoding one frame.
#[derive(Debug)]
pub enum Decoded {
    /// A request for the processor.
    Request(Request, Echo),
    /// A request answered without the processor (frame body of the response).
    Answer(Bytes),
    /// The frame is not a request we can read; the connection must close. Says why.
    Close(String),
}

/// Decodes one frame body.
pub fn decode(frame: Bytes) -> Decoded {
    match folio_proto::decode_request(frame) {
        Err(e) => Decoded::Close(e.to_string()),
        Ok(AnyRequest::V3(req)) => decode_v3(*req),
        Ok(AnyRequest::V2(req)) => decode_v2(req),
    }
}

/// Short operation name for logs and metrics labels.
pub fn op_name(request: &Request) -> &'static str {
    OP_NAMES[op_index(request)]
}

/// Folio's op names, in [`op_index`]'s order.
pub const OP_NAMES: [&str; 11] = [
    "add",
    "read",
    "read_lac",
    "write_lac",
    "force_ledger",
    "write_close",
    "get_bookie_info",
    "get_list_of_entries",
    "batch_read",
    "auth",
    "start_tls",
];

/// The op's place in [`OP_NAMES`] (the per-op metric handles are kept in that order).
pub fn op_index(request: &Request) -> usize {
    match request {
        Request::Add(_) => 0,
        Request::Read(_) => 1,
        Request::ReadLac { .. } => 2,
        Request::WriteLac { .. } => 3,
        Request::ForceLedger { .. } => 4,
        Request::WriteClose { .. } => 5,
        Request::GetBookieInfo { .. } => 6,
        Request::GetListOfEntriesOfLedger { .. } => 7,
        Request::BatchRead { .. } => 8,
        Request::Auth(_) => 9,
        Request::StartTls => 10,
    }
}

fn v3_status_only(header: &BkPacketHeader, status: StatusCode) -> Decoded {
    Decoded::Answer(v3::encode_response(&pb::Response::status_only(
        header, status,
    )))
}

fn decode_v3(req: pb::Request) -> Decoded {
    let header = req.header;
    if header.version != ProtocolVersion::VersionThree as i32 {
        return v3_status_only(&header, StatusCode::Ebadversion);
    }
    let high_priority = header.is_high_priority();
    let request = match OperationType::try_from(header.operation) {
        Ok(OperationType::AddEntry) => req.add_request.map(|a| {
            Request::Add(AddRequest {
                ledger: a.ledger_id,
                entry: a.entry_id,
                recovery: a.is_recovery_add(),
                deferred_sync: a.is_deferred_sync(),
                master_key: a.master_key,
                body: a.body,
                high_priority,
            })
        }),
        Ok(OperationType::ReadEntry) => req.read_request.map(|r| {
            Request::Read(ReadRequest {
                ledger: r.ledger_id,
                entry: r.entry_id,
                fence: r.is_fence_ledger(),
                piggyback: r.is_entry_piggyback(),
                master_key: r.master_key,
                previous_lac: r.previous_lac,
                timeout_ms: r.time_out,
            })
        }),
        Ok(OperationType::Auth) => req.auth_request.map(|a| {
            Request::Auth(AuthMessage {
                plugin_name: a.auth_plugin_name,
                payload: a.payload,
            })
        }),
        Ok(OperationType::WriteLac) => req.write_lac_request.map(|w| Request::WriteLac {
            ledger: w.ledger_id,
            lac: w.lac,
            master_key: w.master_key,
            body: w.body,
        }),
        Ok(OperationType::ReadLac) => req.read_lac_request.map(|r| Request::ReadLac {
            ledger: r.ledger_id,
        }),
        Ok(OperationType::GetBookieInfo) => {
            req.get_bookie_info_request.map(|g| Request::GetBookieInfo {
                requested: g.requested.unwrap_or(0),
            })
        }
        Ok(OperationType::StartTls) => req.start_tls_request.map(|_| Request::StartTls),
        Ok(OperationType::ForceLedger) => req.force_ledger_request.map(|f| Request::ForceLedger {
            ledger: f.ledger_id,
        }),
        Ok(OperationType::GetListOfEntriesOfLedger) => req
            .get_list_of_entries_of_ledger_request
            .map(|g| Request::GetListOfEntriesOfLedger {
                ledger: g.ledger_id,
            }),
        // BP-32's write close rides on RANGE_ADD_ENTRY (`v3::WRITE_CLOSE`), which BookKeeper
        // never served: only with its own sub-request; a bare RANGE_ADD_ENTRY is EBADREQ.
        Ok(op) if op == v3::WRITE_CLOSE => req.write_close_request.map(|w| Request::WriteClose {
            ledger: w.ledger_id,
            master_key: w.master_key,
        }),
        // RANGE_READ_ENTRY and BATCH_READ_ENTRY have no v3 server case.
        _ => None,
    };
    match request {
        Some(request) => Decoded::Request(request, Echo::V3(header)),
        None => v3_status_only(&header, StatusCode::Ebadreq),
    }
}

fn decode_v2(req: v2::Request) -> Decoded {
    match req {
        v2::Request::Add(a) => Decoded::Request(
            Request::Add(AddRequest {
                ledger: a.ledger_id,
                entry: a.entry_id,
                recovery: a.is_recovery_add(),
                high_priority: a.is_high_priority(),
                deferred_sync: false,
                master_key: Bytes::copy_from_slice(&a.master_key),
                body: a.entry,
            }),
            Echo::V2 {
                version: a.version,
                ledger: a.ledger_id,
                entry: a.entry_id,
                request_id: 0,
            },
        ),
        v2::Request::Read(r) => Decoded::Request(
            Request::Read(ReadRequest {
                fence: r.is_fence(),
                master_key: r.master_key.map(|k| Bytes::copy_from_slice(&k)),
                ..ReadRequest::entry(r.ledger_id, r.entry_id)
            }),
            Echo::V2 {
                version: r.version,
                ledger: r.ledger_id,
                entry: r.entry_id,
                request_id: 0,
            },
        ),
        v2::Request::BatchRead(b) => Decoded::Request(
            Request::BatchRead {
                ledger: b.ledger_id,
                start_entry: b.start_entry_id,
                max_count: b.max_count,
                max_size: b.max_size,
                fence: b.flags.contains(v2::Flags::DO_FENCING),
                master_key: b.master_key.map(|k| Bytes::copy_from_slice(&k)),
            },
            Echo::V2 {
                version: b.version,
                ledger: b.ledger_id,
                entry: b.start_entry_id,
                request_id: b.request_id,
            },
        ),
        v2::Request::Auth(a) => Decoded::Request(
            Request::Auth(AuthMessage {
                plugin_name: a.message.auth_plugin_name,
                payload: a.message.payload,
            }),
            Echo::V2 {
                version: a.version,
                ledger: -1,
                entry: -1,
                request_id: 0,
            },
        ),
    }
}

/// Encodes the response to a request decoded with `echo` (frame body, no length prefix).
pub fn encode(echo: &Echo, response: Response) -> Bytes {
    match echo {
        Echo::V3(header) => v3::encode_response(&to_v3(header, response)),
        Echo::V2 {
            version,
            ledger,
            entry,
            request_id,
        } => to_v2(*version, *ledger, *entry, *request_id, response).to_bytes(),
    }
}

/// [`encode`] in one or two pieces written back to back: a read's entry of 4 KiB or more
/// is the second piece, not copied into the message (v3 `encode_response_pieces`, v2
/// `Response::to_pieces`).
pub fn encode_pieces(echo: &Echo, response: Response) -> (Bytes, Option<Bytes>) {
    match echo {
        Echo::V3(header) => v3::encode_response_pieces(&to_v3(header, response)),
        Echo::V2 {
            version,
            ledger,
            entry,
            request_id,
        } => to_v2(*version, *ledger, *entry, *request_id, response).to_pieces(),
    }
}

fn to_v3(header: &BkPacketHeader, response: Response) -> pb::Response {
    let status = response.status().to_v3() as i32;
    let mut out = pb::Response {
        header: v3::response_header(header),
        status,
        ..Default::default()
    };
    match response {
        Response::Add { ledger, entry, .. } => {
            out.add_response = Some(pb::AddResponse {
                status,
                ledger_id: ledger,
                entry_id: entry,
            })
        }
        Response::Read {
            ledger,
            entry,
            body,
            max_lac,
            ..
        } => {
            out.read_response = Some(pb::ReadResponse {
                status,
                ledger_id: ledger,
                entry_id: entry,
                body,
                max_lac,
                lac_update_timestamp: None,
            })
        }
        Response::ReadLac {
            ledger,
            lac_body,
            last_entry_body,
            ..
        } => {
            out.read_lac_response = Some(pb::ReadLacResponse {
                status,
                ledger_id: ledger,
                lac_body,
                last_entry_body,
            })
        }
        Response::WriteLac { ledger, .. } => {
            out.write_lac_response = Some(pb::WriteLacResponse {
                status,
                ledger_id: ledger,
            })
        }
        Response::ForceLedger { ledger, .. } => {
            out.force_ledger_response = Some(pb::ForceLedgerResponse {
                status,
                ledger_id: ledger,
            })
        }
        Response::WriteClose { ledger, .. } => {
            out.write_close_response = Some(pb::WriteCloseResponse {
                status,
                ledger_id: ledger,
            })
        }
        Response::BookieInfo {
            total_disk_capacity,
            free_disk_space,
            ..
        } => {
            out.get_bookie_info_response = Some(pb::GetBookieInfoResponse {
                status,
                total_disk_capacity,
                free_disk_space,
            })
        }
        Response::ListOfEntries {
            ledger,
            availability,
            ..
        } => {
            out.get_list_of_entries_of_ledger_response =
                Some(pb::GetListOfEntriesOfLedgerResponse {
                    status,
                    ledger_id: ledger,
                    availability_of_entries_of_ledger: availability,
                })
        }
        Response::Auth { message, .. } => {
            out.auth_response = Some(pb::AuthMessage {
                auth_plugin_name: message.plugin_name,
                payload: message.payload,
            })
        }
        Response::StartTls { status: s } => {
            if s == Status::Ok {
                out.start_tls_response = Some(pb::StartTlsResponse {});
            }
        }
        // Batch reads exist only on the v2 wire; the decoder never produces one from v3.
        Response::BatchRead { .. } => {
            out.status = StatusCode::Ebadreq as i32;
        }
    }
    out
}

fn to_v2(
    version: u8,
    ledger: LedgerId,
    entry: EntryId,
    request_id: i64,
    response: Response,
) -> v2::Response {
    let status = response.status();
    match response {
        Response::Add { .. } => v2::Response::Add(v2::AddResponse {
            version,
            status,
            ledger_id: ledger,
            entry_id: entry,
        }),
        Response::BatchRead { entries, .. } => v2::Response::BatchRead(v2::BatchReadResponse {
            version,
            status,
            ledger_id: ledger,
            start_entry_id: entry,
            request_id,
            entries,
        }),
        Response::Auth { message, .. } => v2::Response::Auth(v2::AuthPacket {
            version,
            message: pb::AuthMessage {
                auth_plugin_name: message.plugin_name,
                payload: message.payload,
            },
        }),
        // Reads, and anything else (the v2 decoder produces only add, read, batch read, auth).
        other => v2::Response::Read(v2::ReadResponse {
            version,
            status,
            ledger_id: ledger,
            entry_id: entry,
            body: match other {
                Response::Read {
                    body: Some(body), ..
                } if status == Status::Ok => body,
                _ => Bytes::new(),
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    fn v3_frame(req: &pb::Request) -> Bytes {
        v3::encode_request(req)
    }

    #[test]
    fn v3_bad_version_and_unknown_operation_are_answered() {
        let mut header = v3::request_header(OperationType::ReadEntry, 42, None);
        header.version = ProtocolVersion::VersionTwo as i32;
        let req = pb::Request {
            header,
            read_request: Some(pb::ReadRequest {
                ledger_id: 1,
                entry_id: 0,
                ..Default::default()
            }),
            ..Default::default()
        };
        let Decoded::Answer(body) = decode(v3_frame(&req)) else {
            panic!("expected an answer")
        };
        let resp = v3::decode_response(body).unwrap();
        assert_eq!(resp.status, StatusCode::Ebadversion as i32);
        assert_eq!(resp.header.txn_id, 42);
        assert_eq!(resp.header.operation, OperationType::ReadEntry as i32);

        let req = pb::Request {
            header: v3::request_header(OperationType::RangeReadEntry, 7, None),
            ..Default::default()
        };
        let Decoded::Answer(body) = decode(v3_frame(&req)) else {
            panic!("expected an answer")
        };
        let resp = v3::decode_response(body).unwrap();
        assert_eq!(resp.status, StatusCode::Ebadreq as i32);
        assert_eq!(resp.header.txn_id, 7);
        // An add without its sub-request.
        let req = pb::Request {
            header: v3::request_header(OperationType::AddEntry, 8, None),
            ..Default::default()
        };
        assert!(matches!(decode(v3_frame(&req)), Decoded::Answer(_)));
        // RANGE_ADD_ENTRY without a write close (what BookKeeper's bookie sees of any
        // RANGE_ADD_ENTRY) is still EBADREQ; with one it is a write close, answered in kind.
        let req = pb::Request {
            header: v3::request_header(v3::WRITE_CLOSE, 9, None),
            ..Default::default()
        };
        let Decoded::Answer(body) = decode(v3_frame(&req)) else {
            panic!("expected an answer")
        };
        assert_eq!(
            v3::decode_response(body).unwrap().status,
            StatusCode::Ebadreq as i32
        );
        let req = pb::Request {
            header: v3::request_header(v3::WRITE_CLOSE, 10, None),
            write_close_request: Some(pb::WriteCloseRequest {
                ledger_id: 3,
                master_key: Bytes::from_static(&[1; 20]),
            }),
            ..Default::default()
        };
        let Decoded::Request(request, echo) = decode(v3_frame(&req)) else {
            panic!("expected a request")
        };
        assert_eq!(
            request,
            Request::WriteClose {
                ledger: 3,
                master_key: Bytes::from_static(&[1; 20])
            }
        );
        let resp = v3::decode_response(encode(
            &echo,
            Response::WriteClose {
                status: Status::Unauthorized,
                ledger: 3,
            },
        ))
        .unwrap();
        assert_eq!(resp.header.operation, v3::WRITE_CLOSE as i32);
        assert_eq!(resp.status, StatusCode::Eua as i32);
        assert_eq!(
            resp.write_close_response,
            Some(pb::WriteCloseResponse {
                status: StatusCode::Eua as i32,
                ledger_id: 3
            })
        );
    }

    #[test]
    fn garbage_and_truncated_frames_close() {
        for frame in [
            Bytes::from_static(b""),
            Bytes::from_static(b"\x0a\xff\xff"),
            Bytes::from_static(b"\x02\x01\x00\x00short"),
            Bytes::from_static(b"\x07\x01\x00\x00"),
            Bytes::from_static(b"\x02\x09\x00\x00"),
        ] {
            match decode(frame.clone()) {
                Decoded::Close(why) => assert!(!why.is_empty()),
                other => panic!("{frame:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn v2_read_response_echoes_request_ids() {
        let req = v2::Request::Read(v2::ReadRequest {
            version: 2,
            flags: v2::Flags::NONE,
            ledger_id: 5,
            entry_id: -1,
            master_key: None,
        });
        let Decoded::Request(request, echo) = decode(req.to_bytes()) else {
            panic!()
        };
        assert_eq!(request, Request::Read(ReadRequest::entry(5, -1)));
        let body = encode(
            &echo,
            Response::Read {
                status: Status::Ok,
                ledger: 5,
                entry: 3,
                body: Some(Bytes::from_static(b"entry")),
                max_lac: Some(3),
            },
        );
        let mut framed = BytesMut::new();
        folio_proto::encode_frame(&body, &mut framed);
        match v2::decode_response(body).unwrap() {
            v2::Response::Read(r) => {
                assert_eq!((r.ledger_id, r.entry_id, r.status), (5, -1, Status::Ok));
                assert_eq!(&r.body[..], b"entry");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn v3_response_copies_the_status_into_the_top_level() {
        let header = v3::request_header(OperationType::AddEntry, 99, Some(100));
        let body = encode(
            &Echo::V3(header),
            Response::Add {
                status: Status::Fenced,
                ledger: 1,
                entry: 2,
            },
        );
        let resp = v3::decode_response(body).unwrap();
        assert_eq!(resp.status, StatusCode::Efenced as i32);
        assert_eq!(resp.header.priority, None);
        let add = resp.add_response.unwrap();
        assert_eq!(
            (add.status, add.ledger_id, add.entry_id),
            (StatusCode::Efenced as i32, 1, 2)
        );
    }

    proptest::proptest! {
        /// Whatever a peer sends, decoding answers, refuses or closes; it never panics, and an
        /// answer or a request's response always encodes.
        #[test]
        fn any_frame_decodes_without_panic(frame in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            match decode(Bytes::from(frame)) {
                Decoded::Request(request, echo) => {
                    let response = Response::error_for(&request, Status::BadRequest);
                    proptest::prop_assert!(!encode(&echo, response).is_empty());
                }
                Decoded::Answer(body) => proptest::prop_assert!(!body.is_empty()),
                Decoded::Close(why) => proptest::prop_assert!(!why.is_empty()),
            }
        }

        /// Valid v2 headers with random tails: same guarantee, through the v2 decoder.
        #[test]
        fn v2_headers_with_random_tails(op in 0u8..10, flags in proptest::num::u16::ANY,
                                        tail in proptest::collection::vec(proptest::num::u8::ANY, 0..80)) {
            let mut frame = vec![2u8, op, (flags >> 8) as u8, flags as u8];
            frame.extend(tail);
            if let Decoded::Request(request, echo) = decode(Bytes::from(frame)) {
                let response = Response::error_for(&request, Status::Io);
                proptest::prop_assert!(!encode(&echo, response).is_empty());
            }
        }
    }
}
