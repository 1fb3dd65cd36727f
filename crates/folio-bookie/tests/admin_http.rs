//! The admin endpoint's cluster routes on a real bookie over a real socket: a bookie without
//! a metadata store says so with a 503, one whose metadata session expired answers 503 once
//! and then serves again from a new session, and the disk routes work either way.

mod common;

use std::sync::Arc;

use common::http;
use folio_bookie::config::BookieConfig;
use folio_bookie::node::{BookieNode, MetadataAccess};
use folio_bookie::registration::Connector;
use folio_metadata::MetadataStore;
use folio_metadata::mem::{MemMetadataStore, unique_name};

fn config(dir: &std::path::Path, id: &str) -> BookieConfig {
    BookieConfig {
        data_dir: Some(dir.to_path_buf()),
        bookie_id: Some(id.to_string()),
        listen_address: "127.0.0.1".into(),
        port: 0,
        http_port: Some(0),
        disk_usage_threshold: 0.999,
        disk_usage_lwm_threshold: 0.998,
        ..BookieConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_metadata_cluster_routes_are_503_and_disk_routes_answer() {
    let dir = tempfile::tempdir().unwrap();
    let node = BookieNode::start(&folio_env::Env::real(), config(dir.path(), "b:1"), None)
        .await
        .unwrap();
    let addr = node.http_addr().unwrap();
    for path in [
        "/api/v1/ledger/list",
        "/api/v1/ledger/metadata?ledger_id=1",
        "/api/v1/bookie/list_bookies?type=rw",
    ] {
        let (code, v) = http(addr, "GET", path).await;
        assert_eq!(code, 503, "{path}: {v}");
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .contains("without a metadata store"),
            "{v}"
        );
    }
    // A bad parameter is refused before the store is asked.
    let (code, v) = http(addr, "GET", "/api/v1/ledger/metadata?ledger_id=-1").await;
    assert_eq!(code, 400, "{v}");
    let (code, v) = http(addr, "GET", "/api/v1/bookie/last_log_mark").await;
    assert_eq!(code, 200);
    let key = dir.path().join("journal").display().to_string();
    assert!(v[&key]["logFileOffset"].is_u64(), "{v}");
    // Garbage collection runs without metadata too (it then only removes dead entry logs).
    let (code, v) = http(addr, "PUT", "/api/v1/bookie/gc").await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v, serde_json::json!("Triggered GC on BookieServer: b:1"));
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_session_is_a_503_then_a_new_session_serves() {
    let cluster = unique_name("admin-http");
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(MemMetadataStore::connect(&cluster));
    let connector: Connector = {
        let cluster = cluster.clone();
        Arc::new(move || {
            let cluster = cluster.clone();
            Box::pin(async move {
                Ok(Arc::new(MemMetadataStore::connect(&cluster)) as Arc<dyn MetadataStore>)
            })
        })
    };
    let node = BookieNode::start(
        &folio_env::Env::real(),
        config(dir.path(), "bookie-h:3181"),
        Some(MetadataAccess {
            store: store.clone(),
            connector,
            init_cluster_if_missing: true,
        }),
    )
    .await
    .unwrap();
    let addr = node.http_addr().unwrap();
    let (code, v) = http(addr, "GET", "/api/v1/bookie/list_bookies?type=rw").await;
    assert_eq!((code, v), (200, serde_json::json!({"bookie-h:3181": null})));
    let (code, v) = http(addr, "GET", "/api/v1/ledger/metadata?ledger_id=5").await;
    assert_eq!(code, 404, "{v}");
    let (code, v) = http(addr, "GET", "/api/v1/ledger/list").await;
    assert_eq!((code, v), (200, serde_json::json!({})));

    // The session the endpoint started with ends.
    store.close().await.unwrap();
    let (code, v) = http(addr, "GET", "/api/v1/ledger/list").await;
    assert_eq!(code, 503, "{v}");
    let (code, v) = http(addr, "GET", "/api/v1/ledger/list").await;
    assert_eq!(
        (code, v),
        (200, serde_json::json!({})),
        "a new session serves"
    );
    node.shutdown().await.unwrap();
}
