//! Garbage collection on a whole bookie (real storage in a temp dir, `mem://` metadata, real
//! sockets): ledgers A and B written over the bookie port, A's metadata deleted, a round
//! started over the admin endpoint removes A's entries (and entry logs) and leaves B's byte for
//! byte, also after a restart.

mod common;

use std::time::Duration;

use common::*;
use folio_bookie::config::BookieConfig;
use folio_bookie::node::BookieNode;
use folio_metadata::MetadataStore;
use folio_metadata::mem::{MemMetadataStore, unique_name};
use folio_proto::pb::StatusCode;
use folio_types::BookieId;
use folio_types::metadata::{DigestType, LedgerMetadata};
use folio_types::quorum::QuorumConfig;

fn config(dir: &std::path::Path) -> BookieConfig {
    BookieConfig {
        data_dir: Some(dir.to_path_buf()),
        bookie_id: Some("bookie-gc:3181".into()),
        listen_address: "127.0.0.1".into(),
        port: 0,
        http_port: Some(0),
        // A few entries per entry log, so a ledger gets logs of its own.
        entry_log_size_limit: 8192,
        // Only the test starts rounds.
        gc_wait_time_ms: 3_600_000,
        disk_usage_threshold: 0.999,
        disk_usage_lwm_threshold: 0.998,
        ..BookieConfig::default()
    }
}

async fn start(cluster: &str, dir: &std::path::Path) -> BookieNode {
    start_on_mem(cluster, config(dir)).await
}

fn big_payload(ledger: i64, e: i64) -> Vec<u8> {
    let mut p = format!("ledger {ledger} entry {e} ").into_bytes();
    p.resize(1000, b'a' + (e % 26) as u8);
    p
}

const ENTRIES: i64 = 30;

async fn write(c: &mut Client, meta: &MemMetadataStore, ledger: i64) {
    let m = LedgerMetadata::new_open(
        QuorumConfig::new(1, 1, 1).unwrap(),
        vec![BookieId::new("bookie-gc:3181").unwrap()],
        DigestType::Crc32,
        PASSWORD.to_vec(),
    );
    meta.create_ledger(ledger, &m).await.unwrap();
    for e in 0..ENTRIES {
        let add = c.v3_add(ledger, e, e - 1, &big_payload(ledger, e));
        c.send_v3(&add).await;
        assert_eq!(c.recv_v3().await.status, StatusCode::Eok as i32);
    }
}

async fn assert_intact(c: &mut Client, ledger: i64) {
    for e in 0..ENTRIES {
        let req = c.v3_read(ledger, e);
        c.send_v3(&req).await;
        let read = c.recv_v3().await.read_response.unwrap();
        assert_eq!(
            read.status,
            StatusCode::Eok as i32,
            "ledger {ledger} entry {e}"
        );
        assert_eq!(
            read.body.unwrap(),
            entry(ledger, e, e - 1, &big_payload(ledger, e)),
            "ledger {ledger} entry {e}"
        );
    }
}

async fn assert_gone(c: &mut Client, ledger: i64) {
    let req = c.v3_read(ledger, 0);
    c.send_v3(&req).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Enoledger as i32);
}

fn log_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir.join("ledgers/current"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".log")
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_triggered_round_removes_a_deleted_ledger_and_keeps_the_live_one() {
    let cluster = unique_name("gc-node");
    let dir = tempfile::tempdir().unwrap();
    let meta = MemMetadataStore::connect(&cluster);
    let node = start(&cluster, dir.path()).await;
    let addr = node.http_addr().unwrap();
    let mut c = Client::connect(node.local_addr()).await;
    write(&mut c, &meta, 1).await; // A
    write(&mut c, &meta, 2).await; // B
    meta.delete_ledger(1, None).await.unwrap();

    let (code, v) = http(addr, "GET", "/api/v1/bookie/gc").await;
    assert_eq!(
        (code, v),
        (200, serde_json::json!({"is_in_force_gc": "false"}))
    );
    let (code, v) = http(addr, "GET", "/api/v1/bookie/gc_details").await;
    assert_eq!(code, 200);
    assert_eq!(v[0]["gcRounds"], 0, "{v}");
    assert!(v[0]["lastGc"].is_null(), "{v}");
    // Entry logs are flushed by the round's checkpoint; count them before it.
    node.storage().engine().checkpoint().unwrap();
    let logs_before = log_files(dir.path());

    let (code, v) = http(addr, "PUT", "/api/v1/bookie/gc").await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        v,
        serde_json::json!("Triggered GC on BookieServer: bookie-gc:3181")
    );
    // The round runs in the background: wait (generously) for it to finish.
    let details = tokio::time::timeout(PATIENCE, async {
        loop {
            let (_, v) = http(addr, "GET", "/api/v1/bookie/gc_details").await;
            if v[0]["gcRounds"].as_u64() >= Some(1) {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the triggered round never finished");
    let last = &details[0]["lastGc"];
    assert_eq!(last["forced"], true, "{details}");
    assert_eq!(last["ledgersDeleted"], serde_json::json!([1]), "{details}");
    assert_eq!(last["errors"], serde_json::json!([]), "{details}");
    let removed = last["entryLogsRemoved"].as_array().unwrap().len();
    assert!(removed > 0, "{details}");
    assert!(last["bytesReclaimed"].as_u64().unwrap() > 0, "{details}");
    assert_eq!(log_files(dir.path()), logs_before - removed);
    let (code, v) = http(addr, "GET", "/api/v1/bookie/gc").await;
    assert_eq!(
        (code, v),
        (200, serde_json::json!({"is_in_force_gc": "false"}))
    );

    assert_gone(&mut c, 1).await;
    assert_intact(&mut c, 2).await;
    drop(c);
    node.shutdown().await.unwrap();

    let node = start(&cluster, dir.path()).await;
    let mut c = Client::connect(node.local_addr()).await;
    assert_gone(&mut c, 1).await;
    assert_intact(&mut c, 2).await;
    drop(c);
    node.shutdown().await.unwrap();
}
