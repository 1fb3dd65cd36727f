//! Shared pieces of the admin endpoint's tests: the bookie tests' raw-socket client (one
//! copy, theirs), a bookie started with this crate's endpoint, and HTTP/1.1 requests over a
//! plain socket (no client library: the test sees exactly what went over the wire).

#![allow(dead_code)] // each test binary uses a different subset

#[path = "../../../folio-bookie/tests/common/mod.rs"]
mod bookie;

pub use bookie::*;

use folio_bookie::config::BookieConfig;
use folio_bookie::node::{BookieNode, MetadataAccess};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A bookie `id` in `dir` on loopback ports of its own, with an admin endpoint.
pub fn bookie_config(dir: &std::path::Path, id: &str) -> BookieConfig {
    BookieConfig {
        data_dir: Some(dir.to_path_buf()),
        bookie_id: Some(id.to_string()),
        listen_address: "127.0.0.1".into(),
        // The address other bookies' endpoints publish and are asked at.
        advertised_address: Some("127.0.0.1".into()),
        port: 0,
        http_port: Some(0),
        // A nearly full host disk must not make these bookies read-only.
        disk_usage_threshold: 0.999,
        disk_usage_lwm_threshold: 0.998,
        ..BookieConfig::default()
    }
}

/// Each of `paths` answers 503 saying the endpoint runs without a metadata store.
pub async fn assert_need_a_store(addr: std::net::SocketAddr, paths: &[&str]) {
    for path in paths {
        let (code, v) = http(addr, "GET", path).await;
        assert_eq!(code, 503, "{path}: {v}");
        let e = v["error"].as_str().unwrap_or_default();
        assert!(e.contains("without a metadata store"), "{path}: {v}");
    }
}

/// A bookie with this crate's admin endpoint and no metadata store (unregistered).
pub async fn start_alone(config: BookieConfig) -> BookieNode {
    start_bookie(&folio_env::Env::real(), config, None)
        .await
        .unwrap()
}

/// A bookie with this crate's admin endpoint on the in-memory metadata cluster `cluster`.
pub async fn start_on_mem(cluster: &str, config: BookieConfig) -> BookieNode {
    start_on_mem_with_worker(cluster, config, folio_http::WorkerSlot::default()).await
}

/// [`start_on_mem`] with a [`start_bookie_with_worker`] endpoint.
pub async fn start_on_mem_with_worker(
    cluster: &str,
    config: BookieConfig,
    worker: folio_http::WorkerSlot,
) -> BookieNode {
    start_bookie_with_worker(
        &folio_env::Env::real(),
        config,
        Some(MetadataAccess {
            store: std::sync::Arc::new(folio_metadata::mem::MemMetadataStore::connect(cluster)),
            connector: mem_connector(cluster),
            init_cluster_if_missing: true,
        }),
        worker,
    )
    .await
    .unwrap()
}

/// A bookie serving this crate's admin endpoint when `config.http_port` is set. A bad token
/// file fails here, as it fails `folio bookie`.
pub async fn start_bookie(
    env: &folio_env::Env,
    config: BookieConfig,
    metadata: Option<MetadataAccess>,
) -> Result<BookieNode, String> {
    start_bookie_with_worker(env, config, metadata, folio_http::WorkerSlot::default()).await
}

/// [`start_bookie`], its autorecovery page showing the ReplicationWorker put in `worker`.
pub async fn start_bookie_with_worker(
    env: &folio_env::Env,
    config: BookieConfig,
    metadata: Option<MetadataAccess>,
    worker: folio_http::WorkerSlot,
) -> Result<BookieNode, String> {
    let admin = folio_http::BookieAdmin::from_config(&config, None)?.with_worker(worker);
    BookieNode::start_with_admin(env, config, metadata, Some(&admin))
        .await
        .map_err(|e| e.to_string())
}

/// One request to an admin HTTP endpoint: the status code and the body as text.
pub async fn http_text(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, String) {
    http_text_with(addr, method, path, "").await
}

/// One request with `headers` (each line ending in CRLF) added.
pub async fn http_text_with(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
) -> (u16, String) {
    http_request(addr, method, path, headers, "").await
}

/// One request with `headers` and `body`: the status code and the response body.
pub async fn http_request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!(
            "{method} {path} HTTP/1.1\r\nHost: bookie\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut text = String::new();
    tokio::time::timeout(PATIENCE, s.read_to_string(&mut text))
        .await
        .expect("http response")
        .unwrap();
    status_and_body(&text)
}

/// The status code and the body of a whole HTTP/1.1 response.
fn status_and_body(text: &str) -> (u16, String) {
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (code, body.to_string())
}

/// One request to an admin HTTP endpoint: the status code and the JSON body.
pub async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
) -> (u16, serde_json::Value) {
    let (code, body) = http_text(addr, method, path).await;
    let v = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body:?}"));
    (code, v)
}

/// One request over HTTPS to `addr` (certificate for 127.0.0.1, chaining to the PEM CA
/// `ca_pem`): the whole response as text.
pub async fn https_text(addr: std::net::SocketAddr, ca_pem: &str, request: &str) -> String {
    use rustls_pki_types::pem::PemObject;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let client = std::sync::Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(client)
        .connect(name, tcp)
        .await
        .expect("TLS handshake with the admin endpoint");
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut text = String::new();
    tokio::time::timeout(PATIENCE, tls.read_to_string(&mut text))
        .await
        .expect("an answer")
        .ok();
    text
}

/// `GET path` over HTTPS ([`https_text`]): the status and the JSON body.
pub async fn https_json(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    path: &str,
) -> (u16, serde_json::Value) {
    let text = https_text(
        addr,
        ca_pem,
        &format!("GET {path} HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n"),
    )
    .await;
    let (code, body) = status_and_body(&text);
    let v = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {text:?}"));
    (code, v)
}
