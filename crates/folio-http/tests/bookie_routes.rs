//! A bookie's own admin routes over a real socket: `/heartbeat`, `/metrics` (Folio's and
//! BookKeeper's series, every one the shipped Grafana dashboard charts), the state routes and
//! the operator's read-only switch, whose registration follows.

mod common;

use std::time::Duration;

use common::*;
use folio_metadata::mem::unique_name;
use folio_proto::pb::StatusCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_http_endpoint_answers() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = bookie_config(dir.path(), "bookie-g:3181");
    cfg.http_port = Some(0);
    // Groups go through the force-write thread's queue; checkpoints (write-cache flushes)
    // come soon, so the index's entry count and the flush summaries get samples.
    cfg.journal_force_write_thread = true;
    cfg.flush_interval_ms = 50;
    let ledger_dir = cfg.effective_ledger_dirs()[0].clone();
    let node = common::start_alone(cfg).await;
    let http = node.http_addr().expect("http runs");
    let mut c = Client::connect(node.local_addr()).await;
    let add = c.v3_add(1, 0, -1, b"counted");
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Eok as i32);
    // A read that succeeds and one that does not (success="false").
    let read = c.v3_read(1, 0);
    c.send_v3(&read).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Eok as i32);
    let missing = c.v3_read(1, 5);
    c.send_v3(&missing).await;
    assert_ne!(c.recv_v3().await.status, StatusCode::Eok as i32);

    assert_eq!(
        http_text(http, "GET", "/heartbeat").await,
        (200, "OK\n".into())
    );
    // Scraped once a checkpoint has put the entry into the index and recorded its flush
    // (the flush's size is recorded last, after the index commit).
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let (code, body) = loop {
        let (code, body) = http_text(http, "GET", "/metrics").await;
        let flushed = body.lines().any(|l| l == "bookie_entries_count 1")
            && body.lines().any(|l| l.starts_with("bookie_flush_size_sum"));
        if code != 200 || flushed {
            break (code, body);
        }
        assert!(tokio::time::Instant::now() < deadline, "no flush: {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(code, 200);
    assert!(body.contains("folio_bookie_requests_total"), "{body}");
    assert!(
        body.contains("folio_bookie_request_latency_seconds"),
        "{body}"
    );
    assert!(body.contains("folio_bookie_bytes_in_total"), "{body}");
    assert!(body.contains("folio_bookie_pending_adds 0"), "{body}");
    assert!(body.contains("folio_journal_mark_offset"), "{body}");
    assert!(body.contains("folio_bookie_read_only 0"), "{body}");
    // Folio's own latency is a histogram with buckets.
    assert!(
        body.contains("folio_bookie_request_latency_seconds_bucket{"),
        "{body}"
    );
    // BookKeeper's panel queries find their series: op stats as summaries in ms with the
    // success label and BookKeeper's quantiles, the server status, the write cache.
    let series = |name: &str, labels: &[&str]| {
        body.lines().any(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
                && labels.iter().all(|want| l.contains(want))
        })
    };
    let ledger_usage = format!(
        "bookie_ledger_dir_{}_usage",
        ledger_dir
            .display()
            .to_string()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    );
    for (name, labels) in [
        (
            "bookkeeper_server_ADD_ENTRY_REQUEST",
            &["success=\"true\"", "quantile=\"0.99\""][..],
        ),
        (
            "bookkeeper_server_ADD_ENTRY_REQUEST",
            &["quantile=\"0.9999\""],
        ),
        (
            "bookkeeper_server_ADD_ENTRY_REQUEST_count",
            &["success=\"true\""],
        ),
        ("bookkeeper_server_ADD_ENTRY", &["success=\"true\""]),
        (
            "bookkeeper_server_READ_ENTRY_REQUEST",
            &["success=\"false\""],
        ),
        (
            "bookie_journal_JOURNAL_SYNC",
            &["success=\"true\"", "quantile=\"0.99\""],
        ),
        (
            "bookie_journal_JOURNAL_ADD_ENTRY_count",
            &["success=\"true\""],
        ),
        ("bookie_journal_JOURNAL_QUEUE_SIZE", &[]),
        ("bookie_SERVER_STATUS", &[" 1"]),
        ("bookie_write_cache_size", &[]),
        ("bookie_JOURNAL_DIRS", &[" 1"]),
        ("bookie_entrylogger_NUM_OF_WRITE_ACTIVE_LEDGERS", &[]),
        (
            "bookie_entrylogger_NUM_OF_WRITE_LEDGERS_REMOVED_CACHE_EXPIRY",
            &[],
        ),
        (
            "bookie_entrylogger_NUM_OF_WRITE_LEDGERS_REMOVED_CACHE_MAXSIZE",
            &[],
        ),
        (
            "bookie_entrylogger_NUM_LEDGERS_HAVING_MULTIPLE_ENTRYLOGS",
            &[],
        ),
        // The acknowledged add left the force-write queue.
        ("bookie_journal_JOURNAL_FORCE_WRITE_QUEUE_SIZE", &[" 0"]),
        // DbLedgerStorageStats: write-cache flushes, throttled and rejected writes.
        ("bookie_flush", &["success=\"true\"", "quantile=\"0.99\""]),
        ("bookie_flush_count", &["success=\"true\""]),
        ("bookie_flush_size_sum", &["success=\"true\""]),
        // (bookie_throttled_write, a summary, appears with the first throttled write.)
        ("bookie_throttled_write_requests", &[" 0"]),
        // Read-cache figures: nothing read from an entry log yet.
        ("bookie_read_cache_hits", &[" 0"]),
        ("bookie_read_cache_misses", &[" 0"]),
        ("bookie_readahead_batch_count", &[" 0"]),
        ("bookie_readahead_batch_size", &[" 0"]),
        ("bookie_read_cache_size", &[" 0"]),
        ("bookie_read_cache_count", &[" 0"]),
        ("bookie_rejected_write_requests", &[" 0"]),
        // The ledger and entry counts: ledger 1 with its one entry.
        ("bookie_ledgers_count", &[" 1"]),
        ("bookie_entries_count", &[" 1"]),
        // LedgerDirsManager's directory gauges, and Folio's for every directory.
        ("bookie_ledger_num_dirs", &[" 1"]),
        ("bookie_ledger_writable_dirs", &[" 1"]),
        (ledger_usage.as_str(), &[]),
        ("folio_disk_usage_ratio", &["kind=\"journal\""]),
        ("folio_disk_usage_ratio", &["kind=\"ledger\""]),
        // The standard process metrics.
        ("process_cpu_seconds_total", &[]),
        ("process_resident_memory_bytes", &[]),
        ("process_virtual_memory_bytes", &[]),
        ("process_open_fds", &[]),
        ("process_max_fds", &[]),
        ("process_start_time_seconds", &[]),
    ] {
        assert!(
            series(name, labels),
            "no {name} {labels:?} series in {body}"
        );
    }
    // One TYPE line per family, its samples together: a Prometheus server refuses a scrape
    // with a family twice (the request op stats are rendered apart from the exporter's).
    let mut families = Vec::new();
    for line in body.lines().filter(|l| l.starts_with("# TYPE ")) {
        let family = line.split(' ').nth(2).unwrap();
        assert!(!families.contains(&family), "{family} twice in {body}");
        families.push(family);
    }
    assert!(
        families.contains(&"bookkeeper_server_ADD_ENTRY_REQUEST")
            && families.contains(&"folio_bookie_request_latency_seconds"),
        "{families:?}"
    );
    // Every bookie metric the shipped Grafana dashboard charts exists (autorecovery's and
    // GC's appear once those have run, which this bookie does not).
    let dashboard: serde_json::Value =
        serde_json::from_str(include_str!("../../../deploy/grafana-folio-bookies.json")).unwrap();
    let mut charted = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                let metric = ["bookkeeper_server_", "bookie_", "folio_"]
                    .iter()
                    .any(|p| word.starts_with(p))
                    && !word.starts_with("folio_autorecovery_")
                    && !word.starts_with("folio_gc_");
                if metric {
                    charted += 1;
                    assert!(
                        body.lines().any(|l| l.starts_with(word)),
                        "the dashboard charts {word}, which /metrics lacks"
                    );
                }
            }
        }
    }
    assert!(charted >= 10, "{charted}");
    let (code, body) = http_text(http, "GET", "/api/v1/bookie/state").await;
    assert_eq!(code, 200);
    let state: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(state["readOnly"], false);
    assert_eq!(state["running"], true);
    assert_eq!(
        http_text(http, "GET", "/api/v1/bookie/is_ready").await.0,
        200
    );
    let (code, body) = http_text(http, "GET", "/api/v1/bookie/info").await;
    assert_eq!(code, 200);
    let info: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(info["totalSpace"].as_u64().unwrap() > 0);
    assert!(info["freeSpace"].as_u64().unwrap() <= info["totalSpace"].as_u64().unwrap());
    assert_eq!(http_text(http, "GET", "/no/such/route").await.0, 404);
    node.shutdown().await.unwrap();
}

/// A PUT with a JSON body to the admin endpoint.
async fn http_put_json(addr: std::net::SocketAddr, path: &str, body: &str) -> (u16, String) {
    common::http_request(
        addr,
        "PUT",
        path,
        "Content-Type: application/json\r\n",
        body,
    )
    .await
}

fn read_only_of(body: &str) -> Option<bool> {
    serde_json::from_str::<serde_json::Value>(body).ok()?["readOnly"].as_bool()
}

/// BookKeeper's manual read-only switch: ordinary adds are refused, recovery adds are not,
/// the registration moves to read-only and back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_turns_a_bookie_read_only_and_back() {
    let cluster = unique_name("node");
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = bookie_config(dir.path(), "bookie-ro:3181");
    cfg.http_port = Some(0);
    let node = start_on_mem(&cluster, cfg).await;
    let http = node.http_addr().expect("http runs");
    let mut c = Client::connect(node.local_addr()).await;
    let add = c.v3_add(3, 0, -1, b"before");
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Eok as i32);

    let (code, body) = http_put_json(
        http,
        "/api/v1/bookie/state/readonly",
        "{\"readOnly\": true}",
    )
    .await;
    assert_eq!(
        (code, read_only_of(&body) == Some(true)),
        (200, true),
        "{body}"
    );
    let add = c.v3_add(3, 1, 0, b"refused");
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Ereadonly as i32);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while registered(&cluster).await != (vec![], vec!["bookie-ro:3181".into()]) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never registered read-only"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, body) = http_text(http, "GET", "/api/v1/bookie/state/readonly").await;
    assert_eq!((code, read_only_of(&body)), (200, Some(true)), "{body}");
    let (code, body) =
        http_put_json(http, "/api/v1/bookie/state/readonly", "{\"readonly\": 1}").await;
    assert_eq!(code, 400, "{body}");

    let (code, body) = http_put_json(
        http,
        "/api/v1/bookie/state/readonly",
        "{\"readOnly\": false}",
    )
    .await;
    assert_eq!(
        (code, read_only_of(&body) == Some(false)),
        (200, true),
        "{body}"
    );
    let add = c.v3_add(3, 1, 0, b"after");
    c.send_v3(&add).await;
    assert_eq!(c.recv_v3().await.status, StatusCode::Eok as i32);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while registered(&cluster).await != (vec!["bookie-ro:3181".into()], vec![]) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never writable again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node.shutdown().await.unwrap();
}
