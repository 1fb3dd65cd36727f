//! Drives one in-process bookie (real storage on a temp dir, no metadata) over the wire with
//! pipelined v3 adds, to see what the bookie port costs on top of the storage engine.
//!
//! `cargo run --release -p folio-bookie --example bookie_load -- [entries] [entry_size]
//! [connections] [in_flight_per_connection] [dir]`
//! Prints entries/s, MB/s and add latency percentiles (ms).

use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use folio_bookie::config::BookieConfig;
use folio_bookie::node::BookieNode;
use folio_proto::pb::{self, OperationType};
use folio_proto::{DigestManager, DigestType, FrameDecoder, v3};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn arg(i: usize, default: u64) -> u64 {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let entries = arg(1, 100_000);
    let size = arg(2, 1024) as usize;
    let connections = arg(3, 4);
    let in_flight = arg(4, 256) as usize;
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::env::args()
        .nth(5)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());
    let node = BookieNode::start(
        &folio_env::Env::real(),
        BookieConfig {
            data_dir: Some(dir),
            listen_address: "127.0.0.1".into(),
            port: 0,
            ..BookieConfig::default()
        },
        None,
    )
    .await
    .expect("start bookie");
    let addr = node.local_addr();
    let per_conn = entries / connections;
    let payload = Arc::new(vec![b'x'; size]);
    let key = Bytes::copy_from_slice(&folio_proto::master_key(b"pwd"));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..connections {
        let payload = payload.clone();
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            let ledger = c as i64 + 1;
            let dm = DigestManager::new(ledger, DigestType::Crc32c, b"pwd");
            let stream = TcpStream::connect(addr).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let (mut rd, mut wr) = stream.into_split();
            let sent_at = Arc::new(parking_lot::Mutex::new(vec![None; per_conn as usize]));
            let window = Arc::new(tokio::sync::Semaphore::new(in_flight));
            let reader = {
                let sent_at = sent_at.clone();
                let window = window.clone();
                tokio::spawn(async move {
                    let mut lat = Vec::with_capacity(per_conn as usize);
                    let mut dec = FrameDecoder::new();
                    let mut buf = vec![0u8; 1 << 16];
                    let mut got = 0;
                    while got < per_conn {
                        while let Some(f) = dec.next_frame().unwrap() {
                            let r = v3::decode_response(f).unwrap();
                            assert_eq!(r.status, 0, "add failed");
                            let e = r.add_response.unwrap().entry_id as usize;
                            let t: Instant = sent_at.lock()[e].unwrap();
                            lat.push(t.elapsed().as_secs_f64() * 1e3);
                            window.add_permits(1);
                            got += 1;
                        }
                        if got == per_conn {
                            break;
                        }
                        let n = rd.read(&mut buf).await.unwrap();
                        assert!(n > 0, "bookie closed the connection");
                        dec.feed(&buf[..n]);
                    }
                    lat
                })
            };
            let mut out = BytesMut::new();
            for e in 0..per_conn as i64 {
                window.acquire().await.unwrap().forget();
                let body = dm.compute(e, e - 1, (e + 1) * size as i64, &payload);
                let req = pb::Request {
                    header: v3::request_header(OperationType::AddEntry, e as u64 + 1, None),
                    add_request: Some(pb::AddRequest {
                        ledger_id: ledger,
                        entry_id: e,
                        master_key: key.clone(),
                        body,
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                out.clear();
                v3::encode_request_frame(&req, &mut out);
                sent_at.lock()[e as usize] = Some(Instant::now());
                wr.write_all(&out).await.unwrap();
            }
            reader.await.unwrap()
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    let secs = started.elapsed().as_secs_f64();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p) as usize];
    let n = lat.len() as f64;
    println!(
        "{{\"entries\": {}, \"seconds\": {:.3}, \"entries_per_sec\": {:.0}, \"mb_per_sec\": {:.1}, \
         \"latency_ms\": {{\"p50\": {:.3}, \"p99\": {:.3}, \"p999\": {:.3}, \"max\": {:.3}}}}}",
        lat.len(),
        secs,
        n / secs,
        n * size as f64 / secs / 1e6,
        pct(0.5),
        pct(0.99),
        pct(0.999),
        pct(1.0)
    );
    node.shutdown().await.unwrap();
}
