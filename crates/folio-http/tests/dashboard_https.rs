//! The dashboard and `list_bookie_info` reading other bookies' HTTPS admin endpoints, with
//! certificates made by the test: four bookies on a `mem://` cluster, every admin endpoint
//! HTTPS. A trusts the CA (`http_tls_ca_file`) and reads B's facts; C's certificate comes
//! from another CA, so A's row for C names the TLS failure; D trusts no CA, so its row for B
//! says what to set; E has only the bookie port's trust store (`tlsTrustStore`), and uses it.

mod common;

#[path = "../../folio-client/tests/common/tls_certs.rs"]
mod tls_certs;

use common::*;
use folio_bookie::config::BookieConfig;
use folio_metadata::mem::unique_name;
use serde_json::Value;

const A: &str = "bookie-a:3181";
const B: &str = "bookie-b:3181";
const C: &str = "bookie-c:3181";
const D: &str = "bookie-d:3181";
const E: &str = "bookie-e:3181";

/// A bookie whose admin endpoint serves HTTPS with a certificate for 127.0.0.1 from `ca`,
/// trusting `trust` for its peers.
fn https_config(
    dir: &std::path::Path,
    id: &str,
    ca: &tls_certs::Ca,
    trust: Option<std::path::PathBuf>,
) -> BookieConfig {
    std::fs::create_dir_all(dir).unwrap();
    let leaf = ca.issue(tls_certs::LeafSpec {
        names: &["127.0.0.1"],
        ..Default::default()
    });
    let (chain, key) = leaf.write(dir, "admin");
    BookieConfig {
        http_tls_key_file: Some(key),
        http_tls_certificate_file: Some(chain),
        http_tls_ca_file: trust,
        ..bookie_config(&dir.join("data"), id)
    }
}

/// The row of bookie `id` in a cluster answer.
fn row<'a>(c: &'a Value, id: &str) -> &'a Value {
    c["bookies"]
        .as_array()
        .and_then(|bs| bs.iter().find(|b| b["id"] == id))
        .unwrap_or_else(|| panic!("no {id} in {c}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_peers_are_read_trusting_the_configured_ca_and_refused_otherwise() {
    let cluster = unique_name("dashboard-https");
    let dir = tempfile::tempdir().unwrap();
    let ca = tls_certs::Ca::new("cluster-ca");
    let other = tls_certs::Ca::new("another-ca");
    let ca_file = ca.write(dir.path(), "cluster");
    let nodes = [
        (A, &ca, Some(ca_file.clone())),
        (B, &ca, None),
        (C, &other, None),
        (D, &ca, None),
        (E, &ca, None),
    ];
    let mut started = Vec::new();
    for (id, issuer, trust) in nodes {
        let mut c = https_config(&dir.path().join(id), id, issuer, trust);
        if id == E {
            c.tls_trust_store = Some(ca_file.clone());
        }
        started.push(start_on_mem(&cluster, c).await);
    }
    let (http_a, http_d) = (
        started[0].http_addr().unwrap(),
        started[3].http_addr().unwrap(),
    );

    let (code, c) = https_json(http_a, &ca.pem, "/ui/api/cluster").await;
    assert_eq!(code, 200, "{c}");
    // B's facts came over B's own HTTPS endpoint.
    let b = row(&c, B);
    assert_eq!(b["facts"]["id"], B, "{c}");
    assert!(b["facts"]["rssBytes"].as_u64().unwrap() > 0, "{c}");
    // C's certificate does not chain to the CA A trusts.
    let why = row(&c, C)["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{c}"));
    assert!(why.contains("TLS with 127.0.0.1:"), "{why}");
    assert!(why.to_lowercase().contains("unknown"), "{why}");
    // BookKeeper's list_bookie_info asks the peers the same way.
    let (code, info) = https_json(http_a, &ca.pem, "/api/v1/bookie/list_bookie_info").await;
    assert_eq!(code, 200, "{info}");
    assert!(info[B]["totalSpace"].as_u64().unwrap() > 0, "{info}");
    assert!(info[C]["error"].is_string(), "{info}");

    // D trusts no CA for its peers: its row for B says what to set.
    let (_, c) = https_json(http_d, &ca.pem, "/ui/api/cluster").await;
    let why = row(&c, B)["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{c}"));
    assert!(
        why.contains("is HTTPS") && why.contains("http_tls_ca_file"),
        "{why}"
    );
    // E falls back on tlsTrustStore.
    let (_, c) = https_json(started[4].http_addr().unwrap(), &ca.pem, "/ui/api/cluster").await;
    assert_eq!(row(&c, B)["facts"]["id"], B, "{c}");
    for node in started {
        node.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn an_unreadable_peer_ca_file_is_a_start_up_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = BookieConfig {
        http_tls_ca_file: Some(dir.path().join("missing-ca.pem")),
        ..bookie_config(dir.path(), A)
    };
    let e = start_bookie(&folio_env::Env::real(), config, None)
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(
        e.contains("http_tls_ca_file") && e.contains("missing-ca.pem"),
        "{e}"
    );
}
