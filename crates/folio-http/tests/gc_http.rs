//! Garbage collection on a whole bookie (real storage in a temp dir, `mem://` metadata, real
//! sockets): ledgers A and B written over the bookie port, A's metadata deleted, a round
//! started over the admin endpoint removes A's entries (and entry logs) and leaves B's byte for
//! byte, also after a restart.

mod common;

use folio_metadata::prelude::*;
use std::time::Duration;

use common::*;
use folio_bookie::config::BookieConfig;
use folio_bookie::node::BookieNode;
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

/// `gc_details` once the first round has finished (a triggered round runs in the
/// background: waited for generously).
async fn first_round_details(addr: std::net::SocketAddr) -> serde_json::Value {
    details_after(addr, 1).await
}

/// `gc_details` once `n` rounds have finished.
async fn details_after(addr: std::net::SocketAddr, n: u64) -> serde_json::Value {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let (_, v) = http(addr, "GET", "/api/v1/bookie/gc_details").await;
            if v[0]["gcRounds"].as_u64() >= Some(n) {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the triggered round never finished")
}

/// A bookie on a cluster of its own, with ledger 1 written to it over the wire.
struct Written {
    dir: tempfile::TempDir,
    meta: MemMetadataStore,
    node: BookieNode,
    addr: std::net::SocketAddr,
    c: Client,
}

async fn bookie_with_ledger_1(name: &str) -> Written {
    let cluster = unique_name(name);
    let dir = tempfile::tempdir().unwrap();
    let meta = MemMetadataStore::connect(&cluster);
    let node = start(&cluster, dir.path()).await;
    let addr = node.http_addr().unwrap();
    let mut c = Client::connect(node.local_addr()).await;
    write(&mut c, &meta, 1).await;
    Written {
        dir,
        meta,
        node,
        addr,
        c,
    }
}

/// BookKeeper's suspend and resume of compaction: while suspended a forced round still
/// deletes ledgers but compacts nothing; resumed, the next forced round compacts again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_is_suspended_and_resumed_over_http() {
    let Written {
        dir: _dir,
        meta,
        node,
        addr,
        mut c,
    } = bookie_with_ledger_1("gc-suspend").await;
    write(&mut c, &meta, 2).await;
    meta.delete_ledger(1, None).await.unwrap();
    let path = "/api/v1/bookie/gc/suspend_compaction";
    let state = |major: &str, minor: &str| serde_json::json!({"isMajorGcSuspended": major, "isMinorGcSuspended": minor});
    assert_eq!(
        http(addr, "GET", path).await,
        (200, state("false", "false"))
    );
    let (code, body) = http_request(addr, "PUT", path, "", "").await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("Empty request body"), "{body}");
    let (code, body) = http_request(addr, "PUT", path, "", "{}").await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("No suspendMajor or suspendMinor"), "{body}");
    let (code, body) = http_request(
        addr,
        "PUT",
        path,
        "",
        r#"{"suspendMajor": true, "suspendMinor": true}"#,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap(),
        serde_json::json!(
            "Suspend majorGC on BookieServer: bookie-gc:3181, Suspend minorGC on BookieServer: bookie-gc:3181"
        )
    );
    assert_eq!(http(addr, "GET", path).await, (200, state("true", "true")));

    http(addr, "PUT", "/api/v1/bookie/gc").await;
    let details = details_after(addr, 1).await;
    let last = &details[0]["lastGc"];
    assert_eq!(last["ledgersDeleted"], serde_json::json!([1]), "{details}");
    assert!(
        last["compaction"].is_null(),
        "compacted while suspended: {details}"
    );

    let resume = "/api/v1/bookie/gc/resume_compaction";
    let (code, body) = http_request(addr, "PUT", resume, "", r#"{"resumeMajor": true}"#).await;
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("Resume majorGC on BookieServer: bookie-gc:3181"),
        "{body}"
    );
    assert_eq!(http(addr, "GET", path).await, (200, state("false", "true")));
    http(addr, "PUT", "/api/v1/bookie/gc").await;
    let details = details_after(addr, 2).await;
    assert_eq!(details[0]["lastGc"]["compaction"], "major", "{details}");
    assert_intact(&mut c, 2).await;
    drop(c);
    node.shutdown().await.unwrap();
}

/// An entry log's bytes per ledger (its ledgers map); None for a log not rotated.
type LedgersMap = Option<Vec<(i64, u64)>>;

/// Each entry log file's id and ledgers map.
fn ledgers_maps(dir: &std::path::Path) -> Vec<(u64, LedgersMap)> {
    use folio_env::FileSystem;
    use folio_storage::entry_log::log_file;
    let cur = dir.join("ledgers/current");
    let fs = folio_env::RealFileSystem;
    let mut out = Vec::new();
    for name in fs.list_dir(&cur).unwrap() {
        let Some(id) = log_file::parse_file_name(&name) else {
            continue;
        };
        let path = cur.join(&name);
        let file = fs.open(&path, folio_env::OpenOptions::read()).unwrap();
        out.push((id, log_file::read_ledgers_map(&*file, &path).unwrap()));
    }
    out.sort_by_key(|(id, _)| *id);
    out
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
    let details = first_round_details(addr).await;
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

/// Issue 18: with an entry log per ledger, six ledgers written at the same time and then
/// write-closed each end up in a log of their own at the next checkpoint; after three are
/// deleted, one forced round removes exactly their logs and compaction copies nothing; the
/// other three read back byte for byte, also after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_log_per_ledger_deleted_ledgers_logs_go_whole_and_nothing_is_compacted() {
    let cluster = unique_name("gc-per-ledger");
    let dir = tempfile::tempdir().unwrap();
    let meta = MemMetadataStore::connect(&cluster);
    let start = |dir: std::path::PathBuf| {
        let cluster = cluster.clone();
        async move {
            let mut config = config(&dir);
            config.entry_log_per_ledger_enabled = true;
            // Large enough that no ledger's log rolls: one log per ledger exactly.
            config.entry_log_size_limit = 1 << 20;
            start_on_mem(&cluster, config).await
        }
    };
    let node = start(dir.path().to_path_buf()).await;
    let addr = node.http_addr().unwrap();
    let mut c = Client::connect(node.local_addr()).await;
    let ledgers: Vec<i64> = (11..=16).collect();
    for &l in &ledgers {
        let m = LedgerMetadata::new_open(
            QuorumConfig::new(1, 1, 1).unwrap(),
            vec![BookieId::new("bookie-gc:3181").unwrap()],
            DigestType::Crc32,
            PASSWORD.to_vec(),
        );
        meta.create_ledger(l, &m).await.unwrap();
    }
    // At the same time: every ledger's entry e is sent before any entry e + 1, all
    // pipelined on one connection, so the write cache holds them interleaved.
    for e in 0..ENTRIES {
        for &l in &ledgers {
            let add = c.v3_add(l, e, e - 1, &big_payload(l, e));
            c.send_v3(&add).await;
        }
    }
    for _ in 0..ENTRIES * ledgers.len() as i64 {
        assert_eq!(c.recv_v3().await.status, StatusCode::Eok as i32);
    }
    // BP-32 on the wire: a wrong key and an unknown ledger are refused (and mark nothing),
    // then each ledger is write-closed.
    let wrong = c.v3_write_close(11, &[0xEE; 20]);
    c.send_v3(&wrong).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Eua as i32);
    let unknown = c.v3_write_close(99, &master_key());
    c.send_v3(&unknown).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Enoledger as i32);
    for &l in &ledgers {
        let close = c.v3_write_close(l, &master_key());
        c.send_v3(&close).await;
        let resp = c.recv_v3().await;
        assert_eq!(resp.status, StatusCode::Eok as i32, "ledger {l}");
        assert_eq!(
            resp.write_close_response.map(|w| (w.status, w.ledger_id)),
            Some((StatusCode::Eok as i32, l))
        );
    }
    node.storage().engine().checkpoint().unwrap();
    assert_eq!(log_files(dir.path()), 6, "one log per ledger");
    let mut owners = Vec::new();
    for (id, map) in ledgers_maps(dir.path()) {
        let map = map.expect("the write close rotated the log at the checkpoint");
        assert_eq!(map.len(), 1, "log {id:x}: {map:?}");
        owners.push((map[0].0, id));
    }
    owners.sort_unstable();
    assert_eq!(owners.iter().map(|o| o.0).collect::<Vec<_>>(), ledgers);

    for l in [12, 14, 16] {
        meta.delete_ledger(l, None).await.unwrap();
    }
    let (code, v) = http(addr, "PUT", "/api/v1/bookie/gc").await;
    assert_eq!(code, 200, "{v}");
    let details = first_round_details(addr).await;
    let last = &details[0]["lastGc"];
    assert_eq!(
        last["ledgersDeleted"],
        serde_json::json!([12, 14, 16]),
        "{details}"
    );
    assert_eq!(last["errors"], serde_json::json!([]), "{details}");
    let mut removed: Vec<u64> = last["entryLogsRemoved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    removed.sort_unstable();
    let deleted_logs: Vec<u64> = owners
        .iter()
        .filter(|(l, _)| [12, 14, 16].contains(l))
        .map(|(_, id)| *id)
        .collect();
    assert_eq!(removed, deleted_logs, "{details}");
    assert_eq!(last["compaction"], "major", "{details}");
    assert_eq!(last["entryLogsCompacted"], 0, "{details}");
    assert_eq!(last["compactionEntriesCopied"], 0, "{details}");
    assert_eq!(log_files(dir.path()), 3);
    for l in [12, 14, 16] {
        assert_gone(&mut c, l).await;
    }
    for l in [11, 13, 15] {
        assert_intact(&mut c, l).await;
    }
    drop(c);
    node.shutdown().await.unwrap();

    let node = start(dir.path().to_path_buf()).await;
    let mut c = Client::connect(node.local_addr()).await;
    for l in [11, 13, 15] {
        assert_intact(&mut c, l).await;
    }
    drop(c);
    node.shutdown().await.unwrap();
}

/// BookKeeper's `config/server_config`: GET shows the configuration under BookKeeper's
/// names; a PUT of the compaction keys changes what the next round does (here: compaction
/// off, then on again), and a key that cannot change at run time is refused, naming it,
/// with nothing applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_config_changes_compaction_while_the_bookie_runs() {
    let Written {
        dir,
        meta: _meta,
        node,
        addr,
        mut c,
    } = bookie_with_ledger_1("gc-config").await;
    let path = "/api/v1/config/server_config";
    let (code, shown) = http(addr, "GET", path).await;
    assert_eq!(code, 200, "{shown}");
    let want = config(dir.path());
    assert_eq!(
        shown["majorCompactionThreshold"],
        want.major_compaction_threshold.to_string(),
        "{shown}"
    );
    assert_eq!(shown["gcWaitTime"], "3600000", "{shown}");
    assert_eq!(shown["bookieId"], "bookie-gc:3181", "{shown}");

    // All or nothing: the compaction key is not applied with the refused one.
    let body = r#"{"majorCompactionThreshold": "0", "bookiePort": 4000}"#;
    let (code, answer) = http_request(addr, "PUT", path, "", body).await;
    assert_eq!(code, 400, "{answer}");
    assert!(
        answer.contains("bookiePort cannot change while the bookie runs"),
        "{answer}"
    );
    let (code, answer) =
        http_request(addr, "PUT", path, "", r#"{"majorCompactionTreshold": 0}"#).await;
    assert_eq!(code, 400, "{answer}");
    assert!(
        answer.contains("did you mean majorCompactionThreshold"),
        "{answer}"
    );
    assert_eq!(http(addr, "GET", path).await.1, shown);

    let off = r#"{"majorCompactionThreshold": "0", "minorCompactionThreshold": 0}"#;
    let (code, answer) = http_request(addr, "PUT", path, "", off).await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer.trim(), "\"Success set server config.\"");
    assert_eq!(
        http(addr, "GET", path).await.1["majorCompactionThreshold"],
        "0.0"
    );
    http(addr, "PUT", "/api/v1/bookie/gc").await;
    let details = details_after(addr, 1).await;
    assert!(
        details[0]["lastGc"]["compaction"].is_null(),
        "compacted with compaction off: {details}"
    );

    let on = r#"{"majorCompactionThreshold": 0.8}"#;
    let (code, answer) = http_request(addr, "PUT", path, "", on).await;
    assert_eq!(code, 200, "{answer}");
    http(addr, "PUT", "/api/v1/bookie/gc").await;
    let details = details_after(addr, 2).await;
    assert_eq!(details[0]["lastGc"]["compaction"], "major", "{details}");
    assert_intact(&mut c, 1).await;
    drop(c);
    node.shutdown().await.unwrap();
}
