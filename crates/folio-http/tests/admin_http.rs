//! The admin endpoint's cluster routes on a real bookie over a real socket: a bookie without
//! a metadata store says so with a 503, one whose metadata session expired answers 503 once
//! and then serves again from a new session, and the disk routes work either way. The health
//! routes (`/heartbeat`, `is_ready`) answer 503 naming the cause for a bookie whose journal is
//! poisoned or that is not registered.

mod common;

use std::sync::Arc;

use common::{Client, assert_need_a_store, bookie_config, http, http_text, mem_connector};
use folio_bookie::config::BookieConfig;
use folio_bookie::node::MetadataAccess;
use folio_bookie::registration::Connector;
use folio_metadata::MetadataStore;
use folio_metadata::mem::{MemMetadataStore, unique_name};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_metadata_cluster_routes_are_503_and_disk_routes_answer() {
    let dir = tempfile::tempdir().unwrap();
    let node = common::start_alone(bookie_config(dir.path(), "b:1")).await;
    let addr = node.http_addr().unwrap();
    assert_need_a_store(
        addr,
        &[
            "/api/v1/ledger/list",
            "/api/v1/ledger/metadata?ledger_id=1",
            "/api/v1/bookie/list_bookies?type=rw",
        ],
    )
    .await;
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
    let connector = mem_connector(&cluster);
    let node = common::start_bookie(
        &folio_env::Env::real(),
        bookie_config(dir.path(), "bookie-h:3181"),
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

/// `/heartbeat` and `is_ready` for a healthy bookie, then both 503 with `{"error": cause}`.
async fn health(addr: std::net::SocketAddr) -> Vec<(u16, String)> {
    let mut out = Vec::new();
    for path in ["/heartbeat", "/api/v1/bookie/is_ready"] {
        let (code, body) = http_text(addr, "GET", path).await;
        out.push((code, body));
    }
    out
}

fn assert_unhealthy(seen: &[(u16, String)], cause: &str) {
    for (code, body) in seen {
        assert_eq!(*code, 503, "{body}");
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        let error = v["error"].as_str().unwrap_or_default();
        assert!(error.contains(cause), "{body}");
    }
}

/// A bookie whose journal fdatasync failed never takes a write again (invariant 9): its
/// health routes must not say OK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poisoned_journal_makes_heartbeat_and_is_ready_503() {
    use folio_env::sim::{Fault, SimFileSystem};
    let dir = tempfile::tempdir().unwrap();
    // Journal and entry logs on the simulated disk (whose fdatasync can fail), the index
    // (redb) on the real one.
    std::fs::create_dir_all(dir.path().join("index/current")).unwrap();
    let fs = SimFileSystem::new();
    let env = folio_env::Env {
        fs: Arc::new(fs.clone()),
        ..folio_env::Env::real()
    };
    let node = common::start_bookie(&env, bookie_config(dir.path(), "b:2"), None)
        .await
        .unwrap();
    let addr = node.http_addr().unwrap();
    assert_eq!(
        health(addr).await,
        vec![(200, "OK\n".to_string()), (200, "OK\n".to_string())]
    );
    fs.inject(Fault::SyncEio { after_ops: 0 });
    let mut c = Client::connect(node.local_addr()).await;
    let add = c.v3_add(1, 0, -1, b"never acknowledged");
    c.send_v3(&add).await;
    assert_ne!(
        c.recv_v3().await.status,
        folio_proto::pb::StatusCode::Eok as i32
    );
    drop(c);
    assert_unhealthy(&health(addr).await, "fdatasync");
    node.shutdown().await.ok();
}

/// A bookie whose metadata session was lost is not registered (clients do not see it) until
/// it registers again: its health routes say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unregistered_bookie_makes_heartbeat_and_is_ready_503() {
    use folio_bookie::registration::RegistrationState;
    let cluster = unique_name("admin-health");
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(MemMetadataStore::connect(&cluster));
    // New sessions cannot be opened: once lost, the registration stays lost.
    let connector: Connector = Arc::new(|| {
        Box::pin(async {
            Err(folio_metadata::MetadataError::Unreachable {
                address: "mem://nowhere".into(),
                reason: "the test cut the metadata service off".into(),
            })
        })
    });
    let node = common::start_bookie(
        &folio_env::Env::real(),
        bookie_config(dir.path(), "bookie-u:3181"),
        Some(MetadataAccess {
            store: store.clone(),
            connector,
            init_cluster_if_missing: true,
        }),
    )
    .await
    .unwrap();
    let addr = node.http_addr().unwrap();
    assert_eq!(
        health(addr).await,
        vec![(200, "OK\n".to_string()), (200, "OK\n".to_string())]
    );
    let mut state = node.registrar().unwrap().watch();
    store.expire_session();
    tokio::time::timeout(
        common::PATIENCE,
        state.wait_for(|s| *s == RegistrationState::Lost),
    )
    .await
    .expect("the registration is lost")
    .unwrap();
    assert_unhealthy(&health(addr).await, "not registered");
    node.shutdown().await.ok();
}

/// A request with an Authorization header (`None`: without one), JSON body.
async fn http_auth(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    authorization: Option<&str>,
) -> (u16, serde_json::Value) {
    let headers = authorization.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    let (code, body) = common::http_text_with(addr, method, path, &headers).await;
    let v = serde_json::from_str(&body).unwrap_or_else(|_| serde_json::json!(body));
    (code, v)
}

fn error_of(v: &serde_json::Value) -> &str {
    v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_endpoint_listens_on_loopback_unless_configured() {
    let dir = tempfile::tempdir().unwrap();
    // The bookie port on every interface does not take the admin endpoint with it.
    let c = BookieConfig {
        listen_address: "0.0.0.0".into(),
        ..bookie_config(dir.path(), "b:1")
    };
    assert_eq!(c.http_listen_address, "127.0.0.1");
    let node = common::start_alone(c).await;
    let addr = node.http_addr().unwrap();
    assert!(addr.ip().is_loopback(), "{addr}");
    assert_eq!(http_text(addr, "GET", "/heartbeat").await.0, 200);
    node.shutdown().await.unwrap();

    // BookKeeper's httpServerHost sets it.
    let dir = tempfile::tempdir().unwrap();
    let c = BookieConfig::from_toml(
        "httpServerHost = \"0.0.0.0\"",
        std::path::Path::new("h.toml"),
    )
    .unwrap();
    assert_eq!(c.http_listen_address, "0.0.0.0");
    let c = BookieConfig {
        http_listen_address: c.http_listen_address,
        ..bookie_config(dir.path(), "b:2")
    };
    let node = common::start_alone(c).await;
    let addr = node.http_addr().unwrap();
    assert!(addr.ip().is_unspecified(), "{addr}");
    let local = std::net::SocketAddr::from(([127, 0, 0, 1], addr.port()));
    assert_eq!(http_text(local, "GET", "/heartbeat").await.0, 200);
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_mutations_and_ledger_reads_need_it_and_status_routes_stay_open() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    let c = BookieConfig {
        http_auth_token_file: Some(token_file),
        http_ledger_read_enabled: true,
        ..bookie_config(&dir.path().join("data"), "b:1")
    };
    let node = common::start_alone(c).await;
    let addr = node.http_addr().unwrap();
    for (method, path) in [
        ("PUT", "/api/v1/bookie/gc"),
        ("PUT", "/api/v1/autorecovery/trigger_audit"),
        ("POST", "/api/v1/bookie/gc"),
        ("DELETE", "/api/v1/ledger/list"),
        ("DELETE", "/api/v1/ledger/delete?ledger_id=1"),
        ("PUT", "/api/v1/config/server_config"),
        ("GET", "/api/v1/ledger/read?ledger_id=1"),
        // The sanity test writes to the bookie.
        ("GET", "/api/v1/bookie/sanity"),
    ] {
        let (code, v) = http_auth(addr, method, path, None).await;
        assert_eq!(code, 401, "{method} {path}: {v}");
        let e = error_of(&v);
        assert!(
            e.contains("Authorization: Bearer") && e.contains(path.split('?').next().unwrap()),
            "{e}"
        );
        let (code, v) = http_auth(addr, method, path, Some("Bearer s3cret-tokeX")).await;
        assert_eq!(code, 401, "{v}");
        assert!(error_of(&v).contains("wrong bearer token"), "{v}");
        assert!(!v.to_string().contains("s3cret"), "never echoed: {v}");
        let (code, v) = http_auth(addr, method, path, Some("Bearer s3cret")).await;
        assert_eq!(code, 401, "a prefix is not the token: {v}");
        let (code, v) = http_auth(addr, method, path, Some("Basic czNjcmV0")).await;
        assert_eq!(code, 401, "{v}");
        assert!(error_of(&v).contains("not a bearer token"), "{v}");
    }
    // The right token passes the guard.
    let good = Some("Bearer s3cret-token");
    let (code, v) = http_auth(addr, "PUT", "/api/v1/bookie/gc", good).await;
    assert_eq!(code, 200, "{v}");
    let (code, v) = http_auth(addr, "GET", "/api/v1/ledger/read?ledger_id=1", good).await;
    assert_eq!(
        code, 503,
        "no metadata store here, but past the token check: {v}"
    );
    assert!(error_of(&v).contains("without a metadata store"), "{v}");
    let (code, v) = http_auth(addr, "DELETE", "/api/v1/ledger/delete?ledger_id=1", good).await;
    assert_eq!(code, 503, "past the token check: {v}");
    let (code, v) = http_auth(addr, "GET", "/api/v1/bookie/sanity", good).await;
    assert_eq!(code, 501, "past the token check, no client here: {v}");
    // Read-only status routes need no token.
    for path in [
        "/heartbeat",
        "/metrics",
        "/api/v1/bookie/state",
        "/api/v1/bookie/is_ready",
        "/api/v1/bookie/info",
        "/api/v1/bookie/gc",
        "/api/v1/bookie/last_log_mark",
        "/api/v1/config/server_config",
    ] {
        let (code, body) = http_text(addr, "GET", path).await;
        assert_eq!(code, 200, "{path}: {body}");
    }
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_reads_are_off_unless_enabled() {
    let dir = tempfile::tempdir().unwrap();
    let node = common::start_alone(bookie_config(dir.path(), "b:1")).await;
    let addr = node.http_addr().unwrap();
    let (code, v) = http(addr, "GET", "/api/v1/ledger/read?ledger_id=1").await;
    assert_eq!(code, 403, "{v}");
    assert!(error_of(&v).contains("http_ledger_read_enabled"), "{v}");
    // Without a token configured, mutations need none.
    let (code, v) = http(addr, "PUT", "/api/v1/bookie/gc").await;
    assert_eq!(code, 200, "{v}");
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_or_missing_token_file_is_a_start_up_error() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty-token");
    std::fs::write(&empty, " \n").unwrap();
    for (file, says) in [
        (empty, "is empty"),
        (dir.path().join("no-such-file"), "cannot read"),
    ] {
        let c = BookieConfig {
            http_auth_token_file: Some(file.clone()),
            ..bookie_config(&dir.path().join("data"), "b:1")
        };
        let e = match common::start_bookie(&folio_env::Env::real(), c, None).await {
            Ok(_) => panic!("started with token file {}", file.display()),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains("http_auth_token_file")
                && e.contains(says)
                && e.contains(&*file.to_string_lossy()),
            "{e}"
        );
    }
}

#[path = "../../folio-client/tests/common/tls_certs.rs"]
mod tls_certs;

/// HTTPS on the admin endpoint: a client trusting the CA gets its answers (the token check
/// works the same over it); a plaintext request gets no HTTP answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_endpoint_serves_https_with_pem_files() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let ca = tls_certs::Ca::new("admin-ca");
    let leaf = ca.issue(tls_certs::LeafSpec {
        names: &["127.0.0.1"],
        ..Default::default()
    });
    let (chain, key) = leaf.write(dir.path(), "admin");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "tok").unwrap();
    let c = BookieConfig {
        http_tls_key_file: Some(key),
        http_tls_certificate_file: Some(chain),
        http_auth_token_file: Some(token_file),
        ..bookie_config(&dir.path().join("data"), "b:1")
    };
    let node = common::start_alone(c).await;
    let addr = node.http_addr().unwrap();

    let https = |request: String| {
        let pem = ca.pem.clone();
        async move { common::https_text(addr, &pem, &request).await }
    };
    let get = |path: &str, auth: &str| {
        format!("GET {path} HTTP/1.1\r\nHost: b\r\n{auth}Connection: close\r\n\r\n")
    };
    let put = |path: &str, auth: &str| {
        format!(
            "PUT {path} HTTP/1.1\r\nHost: b\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
        )
    };
    let text = https(get("/heartbeat", "")).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let text = https(put("/api/v1/bookie/gc", "")).await;
    assert!(text.starts_with("HTTP/1.1 401"), "{text}");
    let text = https(put("/api/v1/bookie/gc", "Authorization: Bearer tok\r\n")).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    // Plaintext HTTP to the HTTPS port gets no HTTP answer.
    let mut plain = tokio::net::TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(get("/heartbeat", "").as_bytes())
        .await
        .unwrap();
    let mut text = String::new();
    let _ = tokio::time::timeout(common::PATIENCE, plain.read_to_string(&mut text)).await;
    assert!(!text.starts_with("HTTP/1.1 200"), "{text}");
    // The endpoint still serves TLS clients after that.
    let text = https(get("/api/v1/bookie/state", "")).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    node.shutdown().await.unwrap();
}

#[test]
fn https_needs_both_files() {
    let c = BookieConfig {
        data_dir: Some("/d".into()),
        http_tls_key_file: Some("/k.pem".into()),
        ..BookieConfig::default()
    };
    let e = c.validate().unwrap_err().to_string();
    assert!(
        e.contains("http_tls_key_file") && e.contains("http_tls_certificate_file"),
        "{e}"
    );
}
