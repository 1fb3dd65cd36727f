//! The dashboard's autorecovery JSON with a real ReplicationWorker stuck on a ledger: three
//! bookies on a `mem://` cluster, a closed ledger written on all three (E = 3), one bookie
//! stopped for good. No bookie is left to take its copies (the other two already hold the
//! ledger), so every attempt fails the same way: the queue row of the first bookie's
//! endpoint, whose process runs the worker, names the reason, the attempts, when the ledger
//! is tried again and which worker holds it locked meanwhile.

mod common;

use folio_metadata::prelude::*;
use std::time::Duration;

use common::*;
use folio_autorecovery::{AutoRecoveryConfig, Worker};
use folio_client::{Client, ClientConfig, CreateOptions};
use folio_metadata::mem::{MemMetadataStore, unique_name};
use serde_json::Value;

/// The lock holder name the test's worker takes ledgers as.
const HOLDER: &str = "dashboard-test-worker";

/// A bookie whose id is its own address (the client connects to the id).
fn config(dir: &std::path::Path) -> folio_bookie::config::BookieConfig {
    folio_bookie::config::BookieConfig {
        bookie_id: None,
        ..bookie_config(dir, "unused:1")
    }
}

/// The queue row of `ledger` in the autorecovery JSON, once it satisfies `ok`.
async fn row_when(
    addr: std::net::SocketAddr,
    ledger: i64,
    ok: impl Fn(&Value) -> bool,
) -> (Value, Value) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let (code, r) = http(addr, "GET", "/ui/api/autorecovery").await;
        assert_eq!(code, 200, "{r}");
        let row = r["underReplicated"]
            .as_array()
            .and_then(|q| q.iter().find(|u| u["ledgerId"] == ledger))
            .cloned();
        if let Some(row) = row
            && ok(&row)
        {
            return (r, row);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "ledger {ledger} never showed as wanted: {r}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_the_worker_cannot_repair_shows_its_reason_and_retry_time() {
    let cluster = unique_name("dashboard-stuck");
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let slot = folio_http::WorkerSlot::default();
    let a = start_on_mem_with_worker(&cluster, config(dirs[0].path()), slot.clone()).await;
    let b = start_on_mem(&cluster, config(dirs[1].path())).await;
    let c = start_on_mem(&cluster, config(dirs[2].path())).await;
    let meta = std::sync::Arc::new(MemMetadataStore::connect(&cluster));
    let client = Client::connect(
        meta.clone(),
        ClientConfig {
            add_entry_timeout: PATIENCE,
            read_timeout: PATIENCE,
            connect_timeout: PATIENCE,
            ..ClientConfig::default()
        },
    )
    .await
    .unwrap();
    let w = client
        .create_ledger(CreateOptions::default().quorum(3, 3, 3).password("pw"))
        .await
        .unwrap();
    for e in 0..5 {
        w.append(format!("entry {e}").into_bytes()).await.unwrap();
    }
    w.close().await.unwrap();
    let ledger = w.id();

    // C leaves for good; its copies are missing and only A and B are left, both in the
    // ensemble already.
    let lost = c.bookie_id().clone();
    c.shutdown().await.unwrap();
    meta.mark_underreplicated(ledger, std::slice::from_ref(&lost))
        .await
        .unwrap();
    let http_a = a.http_addr().unwrap();
    let (r, row) = row_when(http_a, ledger, |_| true).await;
    assert!(r["worker"].is_null(), "no worker runs yet: {r}");
    assert!(row["stuck"].is_null(), "{row}");
    assert_eq!(row["lockedBy"], Value::Null, "nobody holds it yet: {row}");
    assert!(row.get("lockedBy").is_some(), "the holder was read: {row}");

    // The first backoff is a 32nd of the maximum: about 112 s here, so the ledger stays
    // locked and its reason stays shown while the test reads it.
    let max_backoff = Duration::from_secs(3600);
    let worker = Worker::start(
        client.clone(),
        AutoRecoveryConfig {
            failed_ledger_max_backoff: max_backoff,
            poll_interval: Duration::from_millis(100),
            worker_concurrency: 1,
            ..AutoRecoveryConfig::default()
        },
        HOLDER.into(),
        &folio_env::SystemRng::new(),
    );
    slot.set(worker.status().clone()).unwrap();
    let (r, row) = row_when(http_a, ledger, |u| !u["stuck"].is_null()).await;
    let stuck = &row["stuck"];
    let reason = stuck["reason"].as_str().unwrap_or_else(|| panic!("{row}"));
    assert!(
        reason.contains(&format!("no bookie can take the replica of {lost}")),
        "{row}"
    );
    assert_eq!(stuck["attempts"], 1, "{row}");
    let first_backoff = max_backoff.as_secs() / 32;
    let retry_in = stuck["retryInSeconds"].as_u64().unwrap();
    assert!(retry_in <= first_backoff, "{row}");
    // The same moment as a time of day: within the backoff of now.
    let retry_at = stuck["retryAt"].as_i64().unwrap_or_else(|| panic!("{row}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(
        retry_at <= now + first_backoff as i64 * 1000 + 1000,
        "{row}"
    );
    assert!(
        retry_at + 1000 >= now - PATIENCE.as_millis() as i64,
        "{row}"
    );
    assert_eq!(row["repairing"], false, "{row}");
    // The worker keeps the lock through the backoff, and the row says whose it is.
    assert_eq!(row["lockedBy"], HOLDER, "{row}");
    assert_eq!(r["worker"]["ledgersReplicated"], 0, "{r}");
    // The mark is still there: nothing was repaired.
    assert!(meta.get_underreplicated(ledger).await.is_ok());

    worker.stop().await;
    b.shutdown().await.unwrap();
    a.shutdown().await.unwrap();
}
