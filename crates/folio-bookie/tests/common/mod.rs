//! Shared pieces of the server tests: a raw-socket client that speaks v3 and v2 through
//! folio-proto's codecs, entry builders, and a server on an ephemeral port.

#![allow(dead_code)] // each test binary uses a different subset

use folio_metadata::prelude::*;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use folio_proto::pb::{self, OperationType};
use folio_proto::{DigestManager, DigestType, FrameDecoder, v2, v3};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Generous: the machine is slow and shared. Only a hang trips it.
pub const PATIENCE: Duration = Duration::from_secs(60);

pub const PASSWORD: &[u8] = b"pwd";

pub fn master_key() -> [u8; 20] {
    folio_proto::master_key(PASSWORD)
}

/// The entry with digest a BookKeeper client sends for `payload`.
pub fn entry(ledger: i64, entry: i64, lac: i64, payload: &[u8]) -> Bytes {
    DigestManager::new(ledger, DigestType::Crc32, PASSWORD).compute(
        entry,
        lac,
        (entry + 1) * payload.len() as i64,
        payload,
    )
}

pub fn payload(entry: i64) -> Vec<u8> {
    format!("entry {entry} ")
        .repeat(1 + (entry as usize % 7))
        .into_bytes()
}

pub struct Client {
    stream: TcpStream,
    decoder: FrameDecoder,
    txn: u64,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Client {
        let stream = tokio::time::timeout(PATIENCE, TcpStream::connect(addr))
            .await
            .expect("connect timed out")
            .expect("connect");
        Client {
            stream,
            decoder: FrameDecoder::with_max_frame_size(64 << 20),
            txn: 0,
        }
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Like send_raw but tolerates the server having closed already.
    pub async fn try_send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await
    }

    pub async fn send_v3(&mut self, req: &pb::Request) {
        let mut b = BytesMut::new();
        v3::encode_request_frame(req, &mut b);
        self.send_raw(&b).await;
    }

    pub async fn send_v2(&mut self, req: &v2::Request) {
        let mut b = BytesMut::new();
        req.encode_frame(&mut b);
        self.send_raw(&b).await;
    }

    /// The next frame body, or None when the server closed the connection.
    pub async fn recv(&mut self) -> Option<Bytes> {
        let mut buf = [0u8; 64 * 1024];
        loop {
            if let Some(frame) = self.decoder.next_frame().expect("server sent a bad frame") {
                return Some(frame);
            }
            let n = tokio::time::timeout(PATIENCE, self.stream.read(&mut buf))
                .await
                .expect("no response from the server")
                .unwrap_or(0); // a reset counts as closed
            if n == 0 {
                return None;
            }
            self.decoder.feed(&buf[..n]);
        }
    }

    pub async fn recv_v3(&mut self) -> pb::Response {
        v3::decode_response(self.recv().await.expect("connection closed")).expect("v3 response")
    }

    pub async fn recv_v2(&mut self) -> v2::Response {
        v2::decode_response(self.recv().await.expect("connection closed")).expect("v2 response")
    }

    /// True once the server has closed the connection (reading what it still sends).
    pub async fn closed_by_server(&mut self) -> bool {
        while self.recv().await.is_some() {}
        true
    }

    pub fn next_txn(&mut self) -> u64 {
        self.txn += 1;
        self.txn
    }

    pub fn v3_add(&mut self, ledger: i64, entry_id: i64, lac: i64, data: &[u8]) -> pb::Request {
        let txn = self.next_txn();
        pb::Request {
            header: v3::request_header(OperationType::AddEntry, txn, None),
            add_request: Some(pb::AddRequest {
                ledger_id: ledger,
                entry_id,
                master_key: Bytes::copy_from_slice(&master_key()),
                body: entry(ledger, entry_id, lac, data),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub fn v3_read(&mut self, ledger: i64, entry_id: i64) -> pb::Request {
        let txn = self.next_txn();
        pb::Request {
            header: v3::request_header(OperationType::ReadEntry, txn, None),
            read_request: Some(pb::ReadRequest {
                ledger_id: ledger,
                entry_id,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// BP-32's write close of `ledger` with `key` (docs/formats/write-close.md).
    pub fn v3_write_close(&mut self, ledger: i64, key: &[u8]) -> pb::Request {
        let txn = self.next_txn();
        pb::Request {
            header: v3::request_header(v3::WRITE_CLOSE, txn, None),
            write_close_request: Some(pb::WriteCloseRequest {
                ledger_id: ledger,
                master_key: Bytes::copy_from_slice(key),
            }),
            ..Default::default()
        }
    }

    pub fn v3_fence(&mut self, ledger: i64) -> pb::Request {
        let mut r = self.v3_read(ledger, -1);
        let rr = r.read_request.as_mut().unwrap();
        rr.flag = Some(pb::read_request::Flag::FenceLedger as i32);
        rr.master_key = Some(Bytes::copy_from_slice(&master_key()));
        r.header.priority = Some(v3::HIGH_PRIORITY);
        r
    }

    pub fn v3_long_poll(&mut self, ledger: i64, previous_lac: i64, timeout_ms: i64) -> pb::Request {
        let mut r = self.v3_read(ledger, -1);
        let rr = r.read_request.as_mut().unwrap();
        rr.flag = Some(pb::read_request::Flag::EntryPiggyback as i32);
        rr.previous_lac = Some(previous_lac);
        rr.time_out = Some(timeout_ms);
        r
    }

    pub fn v3_write_lac(&mut self, ledger: i64, lac: i64) -> pb::Request {
        let txn = self.next_txn();
        pb::Request {
            header: v3::request_header(OperationType::WriteLac, txn, None),
            write_lac_request: Some(pb::WriteLacRequest {
                ledger_id: ledger,
                lac,
                master_key: Bytes::copy_from_slice(&master_key()),
                body: DigestManager::new(ledger, DigestType::Crc32, PASSWORD).compute_lac(lac),
            }),
            ..Default::default()
        }
    }

    pub fn v3_read_lac(&mut self, ledger: i64) -> pb::Request {
        let txn = self.next_txn();
        pb::Request {
            header: v3::request_header(OperationType::ReadLac, txn, None),
            read_lac_request: Some(pb::ReadLacRequest { ledger_id: ledger }),
            ..Default::default()
        }
    }
}

pub fn v2_add(ledger: i64, entry_id: i64, lac: i64, data: &[u8]) -> v2::Request {
    v2::Request::Add(v2::AddRequest {
        version: 2,
        flags: v2::Flags::NONE,
        master_key: master_key(),
        ledger_id: ledger,
        entry_id,
        entry: entry(ledger, entry_id, lac, data),
    })
}

pub fn v2_read(ledger: i64, entry_id: i64) -> v2::Request {
    v2::Request::Read(v2::ReadRequest {
        version: 2,
        flags: v2::Flags::NONE,
        ledger_id: ledger,
        entry_id,
        master_key: None,
    })
}

/// Polls `cond` until it holds (panics after PATIENCE): for states reached asynchronously.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Opens a new session on the in-memory metadata cluster `cluster` at each call (as a real
/// connector opens one after a session expired).
pub fn mem_connector(cluster: &str) -> folio_bookie::registration::Connector {
    use folio_metadata::MetadataStore;
    let cluster = cluster.to_string();
    std::sync::Arc::new(move || {
        let cluster = cluster.clone();
        Box::pin(async move {
            Ok(
                std::sync::Arc::new(folio_metadata::mem::MemMetadataStore::connect(&cluster))
                    as std::sync::Arc<dyn MetadataStore>,
            )
        })
    })
}

/// The bookies registered on `cluster` now: (writable, read-only) ids.
pub async fn registered(cluster: &str) -> (Vec<String>, Vec<String>) {
    use folio_metadata::MetadataStore;
    let observer = folio_metadata::mem::MemMetadataStore::connect(cluster);
    let set = observer.list_bookies().await.unwrap();
    let names = |s: &std::collections::BTreeSet<folio_types::BookieId>| {
        s.iter().map(|b| b.to_string()).collect()
    };
    let out = (names(&set.writable), names(&set.readonly));
    observer.close().await.unwrap();
    out
}
