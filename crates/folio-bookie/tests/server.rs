//! The bookie port over real sockets on ephemeral ports, with the in-memory storage: pipelining in
//! both protocols, bad input, backpressure, limits, long polls and graceful shutdown.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use folio_bookie::memory::MemoryStorage;
use folio_bookie::server::{BookieServer, ServerConfig, ServerHandle};
use folio_bookie::{Processor, ProcessorConfig};
use folio_proto::pb::{self, OperationType, StatusCode};
use folio_proto::{AnyResponse, Status, v2, v3};

type P = Processor<Arc<MemoryStorage>>;

async fn start(config: ServerConfig) -> (ServerHandle, P, Arc<MemoryStorage>) {
    let storage = Arc::new(MemoryStorage::new());
    let processor = Processor::new(storage.clone(), ProcessorConfig::default());
    let server = BookieServer::bind("127.0.0.1:0", processor.clone(), config)
        .await
        .expect("bind");
    (server.start(), processor, storage)
}

async fn start_default() -> (ServerHandle, P, Arc<MemoryStorage>) {
    start(ServerConfig::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_pipelined_adds_then_reads_back_byte_for_byte() {
    let (server, _, _) = start_default().await;
    let mut c = Client::connect(server.local_addr()).await;
    let n = 200;
    let mut txn_to_entry = HashMap::new();
    for e in 0..n {
        let req = c.v3_add(11, e, e - 1, &payload(e));
        txn_to_entry.insert(req.header.txn_id, e);
        c.send_v3(&req).await;
    }
    for _ in 0..n {
        let resp = c.recv_v3().await;
        assert_eq!(resp.status, StatusCode::Eok as i32);
        assert_eq!(resp.header.operation, OperationType::AddEntry as i32);
        let e = txn_to_entry
            .remove(&resp.header.txn_id)
            .expect("echoed txn id");
        let add = resp.add_response.unwrap();
        assert_eq!((add.ledger_id, add.entry_id), (11, e));
    }
    let mut txn_to_entry = HashMap::new();
    for e in 0..n {
        let req = c.v3_read(11, e);
        txn_to_entry.insert(req.header.txn_id, e);
        c.send_v3(&req).await;
    }
    for _ in 0..n {
        let resp = c.recv_v3().await;
        let e = txn_to_entry
            .remove(&resp.header.txn_id)
            .expect("echoed txn id");
        let read = resp.read_response.unwrap();
        assert_eq!(read.status, StatusCode::Eok as i32);
        assert_eq!(read.entry_id, e);
        assert_eq!(read.body.unwrap(), entry(11, e, e - 1, &payload(e)));
        assert_eq!(read.max_lac, Some(n - 2));
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_pipelined_adds_then_reads_back_byte_for_byte() {
    let (server, _, _) = start_default().await;
    let mut c = Client::connect(server.local_addr()).await;
    let n = 200;
    for e in 0..n {
        c.send_v2(&v2_add(12, e, e - 1, &payload(e))).await;
    }
    let mut acked = Vec::new();
    for _ in 0..n {
        match c.recv_v2().await {
            v2::Response::Add(a) => {
                assert_eq!((a.version, a.status, a.ledger_id), (2, Status::Ok, 12));
                acked.push(a.entry_id);
            }
            other => panic!("{other:?}"),
        }
    }
    acked.sort();
    assert_eq!(acked, (0..n).collect::<Vec<_>>());
    for e in 0..n {
        c.send_v2(&v2_read(12, e)).await;
    }
    let mut seen = 0;
    for _ in 0..n {
        match c.recv_v2().await {
            v2::Response::Read(r) => {
                assert_eq!(r.status, Status::Ok);
                assert_eq!(
                    r.body,
                    entry(12, r.entry_id, r.entry_id - 1, &payload(r.entry_id))
                );
                seen += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(seen, n);
    // A read of a missing entry echoes the request's ids with ENOENTRY and no body.
    c.send_v2(&v2_read(12, 1000)).await;
    match c.recv_v2().await {
        v2::Response::Read(r) => {
            assert_eq!(
                (r.status, r.ledger_id, r.entry_id),
                (Status::NoEntry, 12, 1000)
            );
            assert!(r.body.is_empty());
        }
        other => panic!("{other:?}"),
    }
    server.shutdown().await;
}

/// Reads of entries at and past the size sent uncopied (`v3::UNCOPIED_BODY_BYTES`, two
/// pieces per response) and past the connection's 64 KiB write buffer, pipelined with small
/// ones on one connection in both protocols, come back whole and in their frames.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_and_small_reads_pipelined_come_back_byte_for_byte_in_v2_and_v3() {
    let (server, _, _) = start_default().await;
    let mut c = Client::connect(server.local_addr()).await;
    let sizes = [
        10,
        v3::UNCOPIED_BODY_BYTES - 100,
        v3::UNCOPIED_BODY_BYTES,
        70_000,
        7,
        200_000,
        5_000,
    ];
    let data = |e: usize| vec![b'a' + e as u8; sizes[e]];
    for e in 0..sizes.len() {
        let req = c.v3_add(14, e as i64, e as i64 - 1, &data(e));
        c.send_v3(&req).await;
    }
    for _ in 0..sizes.len() {
        assert_eq!(c.recv_v3().await.status, StatusCode::Eok as i32);
    }
    let expected = |e: i64| entry(14, e, e - 1, &data(e as usize));
    for e in 0..sizes.len() as i64 {
        let req = c.v3_read(14, e);
        c.send_v3(&req).await;
        c.send_v2(&v2_read(14, e)).await;
    }
    // Reads are answered as they finish, not in order: take each frame as it comes.
    let mut seen = (Vec::new(), Vec::new());
    for _ in 0..2 * sizes.len() {
        let frame = c.recv().await.expect("connection closed");
        match folio_proto::decode_response(frame).expect("a response") {
            AnyResponse::V3(resp) => {
                let read = resp.read_response.unwrap();
                assert_eq!(read.status, StatusCode::Eok as i32);
                assert_eq!(read.body.unwrap(), expected(read.entry_id));
                seen.0.push(read.entry_id);
            }
            AnyResponse::V2(v2::Response::Read(r)) => {
                assert_eq!((r.status, r.ledger_id), (Status::Ok, 14));
                assert_eq!(r.body, expected(r.entry_id));
                seen.1.push(r.entry_id);
            }
            other => panic!("{other:?}"),
        }
    }
    seen.0.sort();
    seen.1.sort();
    let all: Vec<i64> = (0..sizes.len() as i64).collect();
    assert_eq!(seen, (all.clone(), all));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_and_v3_frames_mix_on_one_connection() {
    let (server, _, _) = start_default().await;
    let mut c = Client::connect(server.local_addr()).await;
    c.send_v2(&v2_add(13, 0, -1, b"zero")).await;
    assert!(matches!(c.recv_v2().await, v2::Response::Add(a) if a.status == Status::Ok));
    // A v2 client still sends WriteLac as v3 on the same connection.
    let wl = c.v3_write_lac(13, 0);
    c.send_v3(&wl).await;
    let resp = c.recv_v3().await;
    assert_eq!(resp.header.txn_id, wl.header.txn_id);
    assert_eq!(resp.status, StatusCode::Eok as i32);
    c.send_v2(&v2_read(13, 0)).await;
    match c.recv_v2().await {
        v2::Response::Read(r) => assert_eq!(r.body, entry(13, 0, -1, b"zero")),
        other => panic!("{other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_ledger_refuses_adds_over_the_wire() {
    let (server, _, storage) = start_default().await;
    let mut c = Client::connect(server.local_addr()).await;
    let add = c.v3_add(14, 0, -1, b"a");
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Eok as i32);
    let fence = c.v3_fence(14);
    c.send_v3(&fence).await;
    let resp = c.recv_v3().await;
    assert_eq!(resp.status, StatusCode::Eok as i32);
    assert_eq!(
        resp.read_response.unwrap().body.unwrap(),
        entry(14, 0, -1, b"a")
    );
    assert!(storage.is_fenced(14));
    let add = c.v3_add(14, 1, 0, b"b");
    c.send_v3(&add).await;
    let resp = c.recv_v3().await;
    assert_eq!(resp.status, StatusCode::Efenced as i32);
    assert_eq!(
        resp.add_response.unwrap().status,
        StatusCode::Efenced as i32
    );
    // v2 too.
    c.send_v2(&v2_add(14, 1, 0, b"b")).await;
    assert!(matches!(c.recv_v2().await, v2::Response::Add(a) if a.status == Status::Fenced));
    server.shutdown().await;
}

/// Sends `bytes` and expects the server to close the connection without touching storage, while
/// a second connection keeps working.
async fn assert_closes_alone(bytes: &[u8]) {
    let (server, _, _) = start_default().await;
    let mut good = Client::connect(server.local_addr()).await;
    let add = good.v3_add(20, 0, -1, b"before");
    good.send_v3(&add).await;
    assert_eq!(good.recv_v3().await.status, StatusCode::Eok as i32);

    let mut bad = Client::connect(server.local_addr()).await;
    let _ = bad.try_send_raw(bytes).await;
    assert!(bad.closed_by_server().await);

    // The other connection is unaffected, and nothing else was stored.
    let add = good.v3_add(20, 1, 0, b"after");
    good.send_v3(&add).await;
    assert_eq!(good.recv_v3().await.status, StatusCode::Eok as i32);
    let mut ids = Vec::new();
    for ledger in [20, 0, 1, 0x6761_7262] {
        let req = good.v3_read(ledger, -1);
        good.send_v3(&req).await;
        let r = good.recv_v3().await;
        ids.push((ledger, r.status));
    }
    assert_eq!(
        ids,
        vec![
            (20, StatusCode::Eok as i32),
            (0, StatusCode::Enoledger as i32),
            (1, StatusCode::Enoledger as i32),
            (0x6761_7262, StatusCode::Enoledger as i32),
        ]
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_closes_only_its_connection() {
    assert_closes_alone(b"\x00\x00\x00\x10garbage garbage!").await;
    assert_closes_alone(b"GET / HTTP/1.1\r\nHost: bookie\r\n\r\n").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_length_prefixes_close_the_connection() {
    // 2^31: negative as a Java int.
    assert_closes_alone(&[0x80, 0, 0, 0, 1, 2, 3]).await;
    // 6 MiB: over the 5 MiB default, rejected on the prefix alone.
    assert_closes_alone(&(6u32 << 20).to_be_bytes()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_and_undecodable_frames_close_the_connection() {
    // A v2 add too short to hold its master key.
    assert_closes_alone(&[0, 0, 0, 8, 2, 1, 0, 0, 1, 2, 3, 4]).await;
    // A v2 header with an opcode BookKeeper's server does not decode (READ_LAC = 4).
    assert_closes_alone(&[
        0, 0, 0, 20, 2, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0,
    ])
    .await;
    // An unknown v2 version byte: not 0..=2, so parsed as v3, which fails.
    assert_closes_alone(&[0, 0, 0, 4, 9, 1, 0, 0]).await;
    // Protobuf missing its required header.
    assert_closes_alone(&[0, 0, 0, 2, 0x08, 0x01]).await;
    // An empty frame.
    assert_closes_alone(&[0, 0, 0, 0]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_cut_by_eof_is_dropped_without_an_answer() {
    let (server, _, _) = start_default().await;
    let mut c = Client::connect(server.local_addr()).await;
    let req = c.v3_add(21, 0, -1, b"never complete");
    let body = v3::encode_request(&req);
    let mut framed = (body.len() as u32).to_be_bytes().to_vec();
    framed.extend_from_slice(&body[..body.len() / 2]);
    c.send_raw(&framed).await;
    drop(c);
    let mut c = Client::connect(server.local_addr()).await;
    let read = c.v3_read(21, 0);
    c.send_v3(&read).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Enoledger as i32);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_v3_operation_and_bad_version_are_answered_and_the_connection_lives() {
    let (server, _, _) = start_default().await;
    let mut c = Client::connect(server.local_addr()).await;
    let req = pb::Request {
        header: v3::request_header(OperationType::RangeReadEntry, 77, None),
        ..Default::default()
    };
    c.send_v3(&req).await;
    let resp = c.recv_v3().await;
    assert_eq!(
        (resp.header.txn_id, resp.status),
        (77, StatusCode::Ebadreq as i32)
    );
    let mut req = c.v3_read(1, 0);
    req.header.version = pb::ProtocolVersion::VersionOne as i32;
    c.send_v3(&req).await;
    let resp = c.recv_v3().await;
    assert_eq!(resp.status, StatusCode::Ebadversion as i32);
    // Start TLS without TLS: EBADREQ; auth: AuthDisabledPlugin.
    let tls = pb::Request {
        header: v3::request_header(OperationType::StartTls, 78, None),
        start_tls_request: Some(pb::StartTlsRequest {}),
        ..Default::default()
    };
    c.send_v3(&tls).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Ebadreq as i32);
    let auth = pb::Request {
        header: v3::request_header(OperationType::Auth, 79, None),
        auth_request: Some(pb::AuthMessage {
            auth_plugin_name: "AuthDisabledPlugin".into(),
            payload: Bytes::new(),
        }),
        ..Default::default()
    };
    c.send_v3(&auth).await;
    let resp = c.recv_v3().await;
    assert_eq!(resp.status, StatusCode::Eok as i32);
    assert_eq!(
        resp.auth_response.unwrap().auth_plugin_name,
        "AuthDisabledPlugin"
    );
    let add = c.v3_add(22, 0, -1, b"still alive");
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Eok as i32);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_auth_is_answered_as_auth_disabled() {
    let (server, _, _) = start_default().await;
    let mut c = Client::connect(server.local_addr()).await;
    c.send_v2(&v2::Request::Auth(v2::AuthPacket {
        version: 2,
        message: pb::AuthMessage {
            auth_plugin_name: "AuthDisabledPlugin".into(),
            payload: Bytes::new(),
        },
    }))
    .await;
    match c.recv_v2().await {
        v2::Response::Auth(a) => {
            assert_eq!(a.message.auth_plugin_name, "AuthDisabledPlugin");
            assert!(a.message.payload.is_empty());
        }
        other => panic!("{other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_with_too_many_pending_requests_stops_being_read() {
    let (server, processor, storage) = start(ServerConfig {
        max_pending_per_connection: 4,
        ..ServerConfig::default()
    })
    .await;
    storage.hold_completions(true);
    let mut c = Client::connect(server.local_addr()).await;
    let n = 40;
    for e in 0..n {
        let req = c.v3_add(30, e, e - 1, &payload(e));
        c.send_v3(&req).await;
    }
    eventually("four adds reach storage", || processor.pending_adds() == 4).await;
    // The rest wait in the socket: still four after a pause.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(processor.pending_adds(), 4);
    let releaser = {
        let storage = storage.clone();
        tokio::spawn(async move {
            loop {
                storage.release_completions();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    for _ in 0..n {
        assert_eq!(c.recv_v3().await.status, StatusCode::Eok as i32);
        assert!(processor.pending_adds() <= 4);
    }
    releaser.abort();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_are_closed() {
    let (server, _, _) = start(ServerConfig {
        max_connections: 1,
        ..ServerConfig::default()
    })
    .await;
    let mut first = Client::connect(server.local_addr()).await;
    let add = first.v3_add(40, 0, -1, b"x");
    first.send_v3(&add).await;
    assert_eq!(first.recv_v3().await.status, StatusCode::Eok as i32);
    let mut second = Client::connect(server.local_addr()).await;
    assert!(second.closed_by_server().await);
    // The first still works; once it leaves, a new connection is served.
    let read = first.v3_read(40, 0);
    first.send_v3(&read).await;
    assert_eq!(first.recv_v3().await.status, StatusCode::Eok as i32);
    drop(first);
    let mut served = false;
    for _ in 0..600 {
        let mut c = Client::connect(server.local_addr()).await;
        let read = c.v3_read(40, 0);
        if c.try_send_raw(&frame_of(&read)).await.is_ok() && c.recv().await.is_some() {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(served, "the slot of the closed connection was never freed");
    server.shutdown().await;
}

fn frame_of(req: &pb::Request) -> Vec<u8> {
    let mut b = bytes::BytesMut::new();
    v3::encode_request_frame(req, &mut b);
    b.to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_wakes_when_another_connection_moves_the_lac() {
    let (server, _, _) = start_default().await;
    let mut writer = Client::connect(server.local_addr()).await;
    let mut reader = Client::connect(server.local_addr()).await;
    for e in 0..2 {
        let add = writer.v3_add(50, e, e - 1, &payload(e));
        writer.send_v3(&add).await;
        assert_eq!(writer.recv_v3().await.status, StatusCode::Eok as i32);
    }
    // LAC is 0; wait for it to pass 0.
    let poll = reader.v3_long_poll(50, 0, 600_000);
    reader.send_v3(&poll).await;
    let add = writer.v3_add(50, 2, 1, &payload(2));
    writer.send_v3(&add).await;
    assert_eq!(writer.recv_v3().await.status, StatusCode::Eok as i32);
    let resp = reader.recv_v3().await;
    assert_eq!(resp.header.txn_id, poll.header.txn_id);
    let read = resp.read_response.unwrap();
    assert_eq!(read.status, StatusCode::Eok as i32);
    assert_eq!(read.entry_id, 1);
    assert_eq!(read.max_lac, Some(1));
    assert_eq!(read.body.unwrap(), entry(50, 1, 0, &payload(1)));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_times_out_with_the_current_lac() {
    let (server, _, _) = start_default().await;
    let mut c = Client::connect(server.local_addr()).await;
    for e in 0..2 {
        let add = c.v3_add(51, e, e - 1, &payload(e));
        c.send_v3(&add).await;
        assert_eq!(c.recv_v3().await.status, StatusCode::Eok as i32);
    }
    let poll = c.v3_long_poll(51, 0, 100);
    c.send_v3(&poll).await;
    let read = c.recv_v3().await.read_response.unwrap();
    assert_eq!(read.status, StatusCode::Eok as i32);
    assert_eq!(read.max_lac, Some(0));
    assert_eq!(read.body, None);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_pending_requests_then_closes() {
    let (server, processor, storage) = start_default().await;
    let mut c = Client::connect(server.local_addr()).await;
    let add = c.v3_add(60, 0, -1, b"first");
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Eok as i32);
    // A long poll that would wait ten minutes, and an add not yet journaled.
    let poll = c.v3_long_poll(60, 5, 600_000);
    c.send_v3(&poll).await;
    storage.hold_completions(true);
    let add = c.v3_add(60, 1, 0, b"second");
    c.send_v3(&add).await;
    eventually("the add reaches storage", || processor.pending_adds() == 1).await;
    eventually("the long poll waits", || {
        processor.waiting_long_polls() == 1
    })
    .await;
    let shutdown = tokio::spawn(server.shutdown());
    // Nothing is lost: the journaled add is answered, and so is the long poll.
    tokio::time::sleep(Duration::from_millis(50)).await;
    storage.release_completions();
    let mut answered = HashMap::new();
    for _ in 0..2 {
        let r = c.recv_v3().await;
        answered.insert(r.header.txn_id, r.status);
    }
    assert_eq!(
        answered.get(&add.header.txn_id),
        Some(&(StatusCode::Eok as i32))
    );
    assert_eq!(
        answered.get(&poll.header.txn_id),
        Some(&(StatusCode::Eok as i32))
    );
    assert!(c.closed_by_server().await);
    tokio::time::timeout(PATIENCE, shutdown)
        .await
        .expect("shutdown hung")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_batch_read_returns_consecutive_entries() {
    let (server, _, _) = start_default().await;
    let mut c = Client::connect(server.local_addr()).await;
    for e in 0..10 {
        c.send_v2(&v2_add(70, e, e - 1, &payload(e))).await;
        assert!(matches!(c.recv_v2().await, v2::Response::Add(a) if a.status == Status::Ok));
    }
    c.send_v2(&v2::Request::BatchRead(v2::BatchReadRequest {
        version: 2,
        flags: v2::Flags::NONE,
        ledger_id: 70,
        start_entry_id: 3,
        request_id: 4242,
        max_count: 5,
        max_size: 1 << 20,
        master_key: None,
    }))
    .await;
    match c.recv_v2().await {
        v2::Response::BatchRead(b) => {
            assert_eq!(
                (b.status, b.ledger_id, b.start_entry_id, b.request_id),
                (Status::Ok, 70, 3, 4242)
            );
            let expected: Vec<Bytes> = (3..8).map(|e| entry(70, e, e - 1, &payload(e))).collect();
            assert_eq!(b.entries, expected);
        }
        other => panic!("{other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_does_not_wait_forever_for_a_stuck_add() {
    let (server, processor, storage) = start(ServerConfig {
        drain_timeout: Duration::from_millis(200),
        ..ServerConfig::default()
    })
    .await;
    storage.hold_completions(true);
    let mut c = Client::connect(server.local_addr()).await;
    let add = c.v3_add(80, 0, -1, b"never journaled");
    c.send_v3(&add).await;
    eventually("the add reaches storage", || processor.pending_adds() == 1).await;
    tokio::time::timeout(PATIENCE, server.shutdown())
        .await
        .expect("shutdown hung on a pending add");
    // The connection is closed without an answer: the add was never acknowledged.
    assert!(c.closed_by_server().await);
    storage.release_completions();
}

async fn start_with(
    processor: ProcessorConfig,
    config: ServerConfig,
) -> (ServerHandle, P, Arc<MemoryStorage>) {
    let storage = Arc::new(MemoryStorage::new());
    let processor = Processor::new(storage.clone(), processor);
    let server = BookieServer::bind("127.0.0.1:0", processor.clone(), config)
        .await
        .expect("bind");
    (server.start(), processor, storage)
}

/// One client holds thousands of long polls, as many as its connection may, and has the rest
/// refused; another client's reads are still served (with a read budget far below the number
/// of long polls). Closing the first connection frees every long poll it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_holding_thousands_of_long_polls_leaves_reads_to_others_and_frees_them_on_close() {
    const BOUND: usize = 2000;
    const SENT: usize = 2600;
    let (server, processor, _) = start_with(
        ProcessorConfig {
            max_pending_reads: 16,
            max_long_polls_per_connection: BOUND,
            max_long_poll_timeout: Duration::from_secs(600),
            ..ProcessorConfig::default()
        },
        ServerConfig {
            max_pending_per_connection: 4000,
            ..ServerConfig::default()
        },
    )
    .await;
    let mut writer = Client::connect(server.local_addr()).await;
    for e in 0..2 {
        let add = writer.v3_add(70, e, e - 1, &payload(e));
        writer.send_v3(&add).await;
        assert_eq!(writer.recv_v3().await.status, StatusCode::Eok as i32);
    }
    // LAC 0: every poll for "past 0" waits (ten minutes asked for).
    let mut hog = Client::connect(server.local_addr()).await;
    let mut bytes = Vec::new();
    for _ in 0..SENT {
        let poll = hog.v3_long_poll(70, 0, 600_000);
        bytes.extend(frame_of(&poll));
    }
    hog.send_raw(&bytes).await;
    // Exactly the ones past the bound are refused.
    for _ in 0..SENT - BOUND {
        let resp = hog.recv_v3().await;
        assert_eq!(resp.status, StatusCode::Etoomanyrequests as i32, "{resp:?}");
    }
    // The last poll registered still holds its read slot until its request returns, a moment
    // after it counts as waiting: wait for both (were waiting polls to hold slots, the budget
    // of 16 would refuse all but 16 of them, and this would never happen).
    eventually(
        "the bound's worth of long polls waits, holding no read slot",
        || processor.waiting_long_polls() == BOUND && processor.pending_reads() == 0,
    )
    .await;
    // Another client reads, many times more than the read budget, one after the other.
    let mut other = Client::connect(server.local_addr()).await;
    for _ in 0..100 {
        let read = other.v3_read(70, 1);
        other.send_v3(&read).await;
        let resp = other.recv_v3().await;
        let r = resp.read_response.expect("a read response");
        assert_eq!(r.status, StatusCode::Eok as i32);
        assert_eq!(r.body.unwrap(), entry(70, 1, 0, &payload(1)));
    }
    // A long poll of the other client still waits and is woken.
    let poll = other.v3_long_poll(70, 0, 600_000);
    other.send_v3(&poll).await;
    eventually("the other client's long poll waits", || {
        processor.waiting_long_polls() == BOUND + 1
    })
    .await;
    // The hog goes away: its long polls are freed at once, not at their timeout.
    drop(hog);
    eventually("the closed connection's long polls are freed", || {
        processor.waiting_long_polls() == 1
    })
    .await;
    let add = writer.v3_add(70, 2, 1, &payload(2));
    writer.send_v3(&add).await;
    assert_eq!(writer.recv_v3().await.status, StatusCode::Eok as i32);
    let resp = other.recv_v3().await;
    assert_eq!(resp.header.txn_id, poll.header.txn_id);
    let r = resp.read_response.unwrap();
    assert_eq!((r.status, r.entry_id), (StatusCode::Eok as i32, 1));
    assert_eq!(processor.waiting_long_polls(), 0);
    assert_eq!(processor.pending_reads(), 0);
    server.shutdown().await;
}

/// A long poll asking to wait an hour is answered at the bookie's cap with the current LAC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_waits_no_longer_than_the_cap() {
    let (server, processor, _) = start_with(
        ProcessorConfig {
            max_long_poll_timeout: Duration::from_millis(200),
            ..ProcessorConfig::default()
        },
        ServerConfig::default(),
    )
    .await;
    let mut c = Client::connect(server.local_addr()).await;
    for e in 0..2 {
        let add = c.v3_add(71, e, e - 1, &payload(e));
        c.send_v3(&add).await;
        assert_eq!(c.recv_v3().await.status, StatusCode::Eok as i32);
    }
    let poll = c.v3_long_poll(71, 0, 3_600_000);
    c.send_v3(&poll).await;
    // recv_v3 gives up after common::PATIENCE (60 s), far below the hour asked for.
    let resp = c.recv_v3().await;
    assert_eq!(resp.header.txn_id, poll.header.txn_id);
    let r = resp.read_response.unwrap();
    assert_eq!(r.status, StatusCode::Eok as i32);
    assert_eq!(r.max_lac, Some(0));
    assert_eq!(r.body, None);
    assert_eq!(processor.waiting_long_polls(), 0);
    server.shutdown().await;
}
