//! The dashboard's JSON under `/ui/api/` and its embedded pages, over real HTTP from real
//! bookies on a `mem://` cluster: two live bookies (the second one's facts are fetched over
//! its own admin endpoint), one that only has a cookie (gone), a closed ledger with two
//! fragments marked under-replicated, an open one.

mod common;

use common::*;
use folio_bookie::node::BookieNode;
use folio_metadata::mem::{MemMetadataStore, unique_name};
use folio_metadata::prelude::*;
use folio_types::BookieId;
use folio_types::metadata::{DigestType, LedgerMetadata, LedgerState};
use folio_types::quorum::QuorumConfig;
use serde_json::json;

const A: &str = "bookie-a:3181";
const B: &str = "bookie-b:3181";
const GONE: &str = "bookie-gone:3181";

async fn start(cluster: &str, dir: &std::path::Path, id: &str) -> BookieNode {
    start_on_mem(cluster, bookie_config(dir, id)).await
}

fn bookie(id: &str) -> BookieId {
    BookieId::new(id).unwrap()
}

/// Ledger 1: closed, entries 0..=9 in two fragments (A,B then A,GONE), custom metadata;
/// marked under-replicated for GONE. Ledger 2: open on A,B.
async fn ledgers(meta: &MemMetadataStore) {
    let mut closed = LedgerMetadata::new_open(
        QuorumConfig::new(2, 2, 1).unwrap(),
        vec![bookie(A), bookie(B)],
        DigestType::Crc32c,
        b"pwd".to_vec(),
    );
    closed.ensembles.insert(5, vec![bookie(A), bookie(GONE)]);
    closed.state = LedgerState::Closed;
    closed.last_entry_id = 9;
    closed.length = 100;
    closed.ctime = Some(1_700_000_000_000);
    closed
        .custom_metadata
        .insert("application".into(), b"orders".to_vec());
    meta.create_ledger(1, &closed).await.unwrap();
    let open = LedgerMetadata::new_open(
        QuorumConfig::new(2, 2, 2).unwrap(),
        vec![bookie(A), bookie(B)],
        DigestType::Crc32c,
        b"pwd".to_vec(),
    );
    meta.create_ledger(2, &open).await.unwrap();
    meta.mark_underreplicated(1, &[bookie(GONE)]).await.unwrap();
}

fn ids(v: &serde_json::Value) -> Vec<i64> {
    v["ledgers"]
        .as_array()
        .unwrap_or_else(|| panic!("no ledgers in {v}"))
        .iter()
        .map(|l| l["ledgerId"].as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_json_describes_bookies_ledgers_and_autorecovery() {
    let cluster = unique_name("dashboard");
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start(&cluster, da.path(), A).await;
    let b = start(&cluster, db.path(), B).await;
    let meta = MemMetadataStore::connect(&cluster);
    meta.write_cookie(&bookie(GONE), b"cookie of a bookie that left", None)
        .await
        .unwrap();
    ledgers(&meta).await;
    let http_a = a.http_addr().unwrap();

    // Cluster: every bookie with a cookie or a registration, with its state and its facts.
    let (code, c) = http(http_a, "GET", "/ui/api/cluster").await;
    assert_eq!(code, 200, "{c}");
    assert!(
        c["metadataUri"].as_str().unwrap().starts_with("mem://"),
        "{c}"
    );
    let instance = meta.read_cluster().await.unwrap().instance_id;
    assert_eq!(c["instanceId"], json!(instance), "{c}");
    assert_eq!(c["clusterInfo"]["unavailableBookiesCount"], 1, "{c}");
    let bookies = c["bookies"].as_array().unwrap();
    let states: Vec<(&str, &str)> = bookies
        .iter()
        .map(|b| (b["id"].as_str().unwrap(), b["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        vec![(A, "writable"), (B, "writable"), (GONE, "gone")],
        "{c}"
    );
    for live in &bookies[..2] {
        let facts = &live["facts"];
        // B's facts came over B's own endpoint: its id says so.
        assert_eq!(facts["id"], live["id"], "{live}");
        assert_eq!(facts["version"], env!("CARGO_PKG_VERSION"), "{live}");
        assert_eq!(facts["readOnly"], false, "{live}");
        assert!(facts["rssBytes"].as_u64().unwrap() > 0, "{live}");
        let kinds: Vec<&str> = facts["directories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["journal", "ledger", "index"], "{live}");
        let usage = facts["directories"][0]["usage"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&usage), "{live}");
        assert!(facts["metrics"].is_object(), "{live}");
    }
    assert!(bookies[2].get("facts").is_none(), "{c}");

    // Ledgers: newest first, paged, searchable by id, state and custom metadata.
    let (code, l) = http(http_a, "GET", "/ui/api/ledgers").await;
    assert_eq!(
        (code, ids(&l), l["total"].clone()),
        (200, vec![2, 1], json!(2)),
        "{l}"
    );
    let first = &l["ledgers"][1];
    assert_eq!(first["state"], "CLOSED", "{l}");
    assert_eq!(
        (
            &first["ensembleSize"],
            &first["writeQuorumSize"],
            &first["ackQuorumSize"]
        ),
        (&json!(2), &json!(2), &json!(1)),
        "{l}"
    );
    assert_eq!(
        first["customMetadata"],
        json!({"application": "orders"}),
        "{l}"
    );
    let (_, l) = http(http_a, "GET", "/ui/api/ledgers?search=ORDERS").await;
    assert_eq!(ids(&l), vec![1], "{l}");
    let (_, l) = http(http_a, "GET", "/ui/api/ledgers?search=open").await;
    assert_eq!(ids(&l), vec![2], "{l}");
    let (_, l) = http(http_a, "GET", "/ui/api/ledgers?search=nothing-like-it").await;
    assert_eq!((ids(&l), l["total"].clone()), (vec![], json!(0)), "{l}");
    let (_, l) = http(http_a, "GET", "/ui/api/ledgers?page=1&page_size=1").await;
    assert_eq!((ids(&l), l["total"].clone()), (vec![1], json!(2)), "{l}");
    let (code, l) = http(http_a, "GET", "/ui/api/ledgers?page=-1").await;
    assert_eq!(code, 400, "{l}");

    // One ledger: its fragments on the entry ids, the bookies' states, the mark.
    let (code, d) = http(http_a, "GET", "/ui/api/ledger?ledger_id=1").await;
    assert_eq!(code, 200, "{d}");
    assert_eq!(
        d["fragments"],
        json!([
            {"firstEntry": 0, "lastEntry": 4, "bookies": [
                {"id": A, "state": "writable"}, {"id": B, "state": "writable"}]},
            {"firstEntry": 5, "lastEntry": 9, "bookies": [
                {"id": A, "state": "writable"}, {"id": GONE, "state": "gone"}]},
        ]),
        "{d}"
    );
    assert_eq!(d["lac"], 9, "{d}");
    assert_eq!(d["underReplicated"], true, "{d}");
    assert_eq!(d["missingReplicas"], json!([GONE]), "{d}");
    assert_eq!(d["entryReads"]["enabled"], false, "{d}");
    let (code, d) = http(http_a, "GET", "/ui/api/ledger?ledger_id=2").await;
    assert_eq!(code, 200, "{d}");
    assert_eq!(d["fragments"][0]["lastEntry"], json!(null), "open: {d}");
    assert_eq!(d["underReplicated"], false, "{d}");
    // This endpoint has no client to ask the bookies for an open ledger's LAC: it says so.
    assert!(d["lac"].is_null(), "{d}");
    assert!(d["lacError"].as_str().unwrap().contains("no client"), "{d}");
    let (code, d) = http(http_a, "GET", "/ui/api/ledger?ledger_id=99").await;
    assert_eq!(code, 404, "{d}");

    // Autorecovery: the switch, no Auditor here, the delay, the queue with its reason.
    meta.set_lost_bookie_recovery_delay(30).await.unwrap();
    let (code, r) = http(http_a, "GET", "/ui/api/autorecovery").await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(r["auditor"], json!(null), "{r}");
    assert_eq!(r["lostBookieRecoveryDelaySeconds"], 30, "{r}");
    assert_eq!(r["enabled"], true, "{r}");
    assert_eq!(
        r["underReplicated"][0]["missingReplicas"],
        json!([{"id": GONE, "state": "gone"}]),
        "{r}"
    );
    assert_eq!(r["underReplicated"][0]["ledgerId"], 1, "{r}");

    // A registered bookie whose endpoint does not answer: its row says why, the rest stand.
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let info = folio_metadata::BookieServiceInfo {
        endpoints: vec![folio_metadata::Endpoint {
            id: "http".into(),
            host: "127.0.0.1".into(),
            port: dead_port,
            protocol: "http".into(),
            auth: Vec::new(),
            extensions: Vec::new(),
        }],
        properties: Default::default(),
    };
    let silent = meta
        .register_bookie(
            &bookie("bookie-silent:3181"),
            folio_metadata::BookieMode::Writable,
            &info,
        )
        .await
        .unwrap();
    let (_, c) = http(http_a, "GET", "/ui/api/cluster").await;
    let row = c["bookies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["id"] == "bookie-silent:3181")
        .unwrap_or_else(|| panic!("{c}"))
        .clone();
    assert_eq!(row["state"], "writable", "{c}");
    let why = row["error"].as_str().unwrap_or_else(|| panic!("{c}"));
    assert!(
        why.contains(&format!("cannot connect to 127.0.0.1:{dead_port}")),
        "{why}"
    );
    assert!(
        c["bookies"][1]["facts"]["id"] == B,
        "the others still answer: {c}"
    );
    silent.unregister().await.unwrap();

    // B stops: A's cluster view turns it gone (it unregistered; its cookie stays).
    b.shutdown().await.unwrap();
    let (_, c) = http(http_a, "GET", "/ui/api/cluster").await;
    assert_eq!(c["bookies"][1]["id"], B, "{c}");
    assert_eq!(c["bookies"][1]["state"], "gone", "{c}");
    a.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_are_embedded_and_the_json_needs_a_metadata_store() {
    let dir = tempfile::tempdir().unwrap();
    let node = common::start_alone(bookie_config(dir.path(), A)).await;
    let addr = node.http_addr().unwrap();
    for path in ["/", "/ui", "/ui/"] {
        let (code, body) = http_text(addr, "GET", path).await;
        assert_eq!(code, 200, "{path}");
        assert!(
            body.contains("<script src=\"/ui/app.js\">"),
            "{path}: {body}"
        );
    }
    let (code, js) = http_text(addr, "GET", "/ui/app.js").await;
    assert_eq!(code, 200);
    assert!(js.contains("/ui/api/cluster"), "{js}");
    let (code, css) = http_text(addr, "GET", "/ui/app.css").await;
    assert_eq!(code, 200);
    assert!(css.contains("prefers-color-scheme: dark"), "{css}");
    // Nothing is fetched from elsewhere at run time.
    for (name, text) in [("app.js", &js), ("app.css", &css)] {
        assert!(
            !text.contains("http://") && !text.contains("https://"),
            "{name}"
        );
    }
    // The bookie's own facts need no metadata; the cluster's do, and say so.
    let (code, v) = http(addr, "GET", "/ui/api/bookie").await;
    assert_eq!((code, &v["id"]), (200, &json!(A)), "{v}");
    assert_need_a_store(
        addr,
        &[
            "/ui/api/cluster",
            "/ui/api/ledgers",
            "/ui/api/ledger?ledger_id=1",
            "/ui/api/autorecovery",
        ],
    )
    .await;
    node.shutdown().await.unwrap();
}
