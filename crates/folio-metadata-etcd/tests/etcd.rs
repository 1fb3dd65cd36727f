//! The etcd driver against a real etcd: BookKeeper's key schema (spec §6), leases for
//! registrations, compare-and-set on mod revisions, the under-replication queue and the
//! Auditor election, and bad input (unreachable server, corrupt record, bad URI).

use folio_metadata::prelude::*;
use std::time::Duration;

use etcd_client::GetOptions;
use folio_metadata::conformance::outages;
use folio_metadata::{BookieMode, BookieServiceInfo, MetadataError, MetadataStore, SessionState};
use folio_metadata_etcd::{EtcdMetadataStore, EtcdOptions, ledger_uuid};
use folio_testsvc::{EtcdServer, TcpProxy};
use folio_types::BookieId;
use folio_types::metadata::{DigestType, LedgerMetadata};
use folio_types::quorum::QuorumConfig;

/// Far above the driver's own 10 s request timeout: only a hang trips it.
const HANG: Duration = Duration::from_secs(60);

fn bookie(s: &str) -> BookieId {
    BookieId::new(s).unwrap()
}

fn metadata() -> LedgerMetadata {
    let mut m = LedgerMetadata::new_open(
        QuorumConfig::new(2, 2, 1).unwrap(),
        vec![bookie("10.0.0.1:3181"), bookie("10.0.0.2:3181")],
        DigestType::Crc32,
        b"pw".to_vec(),
    );
    m.c_token = 7;
    m
}

async fn raw_get(store: &EtcdMetadataStore, key: &str) -> Option<etcd_client::KeyValue> {
    let mut c = store.etcd_client().unwrap();
    c.get(key, None)
        .await
        .unwrap()
        .take_kvs()
        .into_iter()
        .next()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_follow_bookkeepers_etcd_schema() {
    let server = EtcdServer::start().unwrap();
    let store = EtcdMetadataStore::connect(&server.metadata_uri("/ledgers"))
        .await
        .unwrap();
    let info = store.init_cluster().await.unwrap();
    assert!(matches!(
        store.init_cluster().await,
        Err(MetadataError::AlreadyExists { .. })
    ));
    for key in [
        "/ledgers",
        "/ledgers/cookies",
        "/ledgers/bookies",
        "/ledgers/bookies/writable",
        "/ledgers/bookies/readonly",
        "/ledgers/ledgers",
        "/ledgers/buckets",
        "/ledgers/underreplication",
    ] {
        let kv = raw_get(&store, key)
            .await
            .unwrap_or_else(|| panic!("{key} missing"));
        assert!(kv.value().is_empty(), "{key}");
    }
    assert_eq!(
        raw_get(&store, "/ledgers/layout").await.unwrap().value(),
        b"2\norg.apache.bookkeeper.metadata.etcd.EtcdLedgerManagerFactory:0"
    );
    assert_eq!(
        raw_get(&store, "/ledgers/instanceid")
            .await
            .unwrap()
            .value(),
        info.instance_id.as_bytes()
    );

    // Registration: a key on the store's lease.
    let mut reg = store
        .register_bookie(
            &bookie("10.0.0.1:3181"),
            BookieMode::Writable,
            &BookieServiceInfo::default(),
        )
        .await
        .unwrap();
    let kv = raw_get(&store, "/ledgers/bookies/writable/10.0.0.1:3181")
        .await
        .unwrap();
    assert_eq!(kv.lease(), store.lease_id());
    reg.set_mode(BookieMode::ReadOnly).await.unwrap();
    assert!(
        raw_get(&store, "/ledgers/bookies/writable/10.0.0.1:3181")
            .await
            .is_none()
    );
    let kv = raw_get(&store, "/ledgers/bookies/readonly/10.0.0.1:3181")
        .await
        .unwrap();
    assert_eq!(kv.lease(), store.lease_id());
    let set = store.list_bookies().await.unwrap();
    assert!(set.writable.is_empty());
    assert!(set.readonly.contains(&bookie("10.0.0.1:3181")));

    // Ledger metadata at S/ledgers/<UUID(0, id)>, the shared serializer's bytes; the
    // version is the key's mod revision.
    let m = metadata();
    let v = store.create_ledger(1, &m).await.unwrap();
    let kv = raw_get(
        &store,
        "/ledgers/ledgers/00000000-0000-0000-0000-000000000001",
    )
    .await
    .unwrap();
    assert_eq!(
        kv.value(),
        folio_metadata::format::encode_ledger_metadata(&m).unwrap()
    );
    assert_eq!(kv.mod_revision(), v.raw());
    assert_eq!(
        ledger_uuid(0x1234_5678_9abc),
        "00000000-0000-0000-0000-123456789abc"
    );

    // Ledger ids: (bucket << 56) | version of S/buckets/<bucket>.
    let id = store.generate_ledger_id().await.unwrap();
    let bucket = (id >> 56) as u64;
    assert!(bucket < 128, "{id:#x}");
    let kv = raw_get(&store, &format!("/ledgers/buckets/{bucket:03}"))
        .await
        .unwrap();
    assert_eq!(kv.version(), id & 0x00ff_ffff_ffff_ffff);

    // Cookies under S/cookies.
    store
        .write_cookie(&bookie("10.0.0.1:3181"), b"cookie", None)
        .await
        .unwrap();
    assert_eq!(
        raw_get(&store, "/ledgers/cookies/10.0.0.1:3181")
            .await
            .unwrap()
            .value(),
        b"cookie"
    );

    // Under-replication: marks and locks keyed by the ledger UUID, locks on the lease.
    store
        .mark_underreplicated(9, &[bookie("10.0.0.2:3181")])
        .await
        .unwrap();
    let mark_key = "/ledgers/underreplication/ledgers/00000000-0000-0000-0000-000000000009";
    let text =
        String::from_utf8(raw_get(&store, mark_key).await.unwrap().value().to_vec()).unwrap();
    assert!(
        text.starts_with("replica: \"10.0.0.2:3181\"\nctime: "),
        "{text:?}"
    );
    let lock = store
        .try_lock_underreplicated(9, "worker-1")
        .await
        .unwrap()
        .unwrap();
    let kv = raw_get(
        &store,
        "/ledgers/underreplication/locks/00000000-0000-0000-0000-000000000009",
    )
    .await
    .unwrap();
    assert_eq!(kv.lease(), store.lease_id());
    assert_eq!(kv.value(), b"bookieId: \"worker-1\"\n");
    lock.mark_replicated().await.unwrap();
    assert!(raw_get(&store, mark_key).await.is_none());

    // Closing revokes the lease: the registration goes with it.
    let other = EtcdMetadataStore::connect(&server.metadata_uri("/ledgers"))
        .await
        .unwrap();
    store.close().await.unwrap();
    let mut c = other.etcd_client().unwrap();
    for dir in ["/ledgers/bookies/writable/", "/ledgers/bookies/readonly/"] {
        let left = c
            .get(dir, Some(GetOptions::new().with_prefix()))
            .await
            .unwrap();
        assert!(left.kvs().is_empty(), "{:?}", left.kvs());
    }
    drop(reg);
    other.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_and_set_uses_mod_revisions() {
    let server = EtcdServer::start().unwrap();
    let store = EtcdMetadataStore::connect(&server.metadata_uri("/ledgers"))
        .await
        .unwrap();
    store.init_cluster().await.unwrap();
    let m = metadata();
    let v1 = store.create_ledger(5, &m).await.unwrap();
    // A retried create of the same ledger (same cToken) succeeds; another one does not.
    assert_eq!(store.create_ledger(5, &m).await.unwrap(), v1);
    let mut other = m.clone();
    other.c_token = 8;
    assert!(matches!(
        store.create_ledger(5, &other).await,
        Err(MetadataError::AlreadyExists { .. })
    ));
    let mut closed = m.clone();
    closed.state = folio_types::metadata::LedgerState::Closed;
    let v2 = store.write_ledger(5, &closed, v1).await.unwrap();
    assert_ne!(v1, v2);
    assert!(matches!(
        store.write_ledger(5, &m, v1).await,
        Err(MetadataError::BadVersion { .. })
    ));
    assert!(matches!(
        store.write_ledger(6, &m, v1).await,
        Err(MetadataError::NotFound { .. })
    ));
    assert!(matches!(
        store.delete_ledger(5, Some(v1)).await,
        Err(MetadataError::BadVersion { .. })
    ));
    store.delete_ledger(5, Some(v2)).await.unwrap();
    assert!(matches!(
        store.read_ledger(5).await,
        Err(MetadataError::NotFound { .. })
    ));
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_auditor_election_fails_over() {
    let server = EtcdServer::start().unwrap();
    let uri = server.metadata_uri("/ledgers");
    let a = EtcdMetadataStore::connect(&uri).await.unwrap();
    a.init_cluster().await.unwrap();
    let b = EtcdMetadataStore::connect(&uri).await.unwrap();
    let ca = a
        .join_auditor_election(&bookie("10.0.0.1:3181"))
        .await
        .unwrap();
    let mut la = ca.leadership();
    tokio::time::timeout(HANG, la.wait_for(|l| *l))
        .await
        .expect("first candidate never elected")
        .unwrap();
    let cb = b
        .join_auditor_election(&bookie("10.0.0.2:3181"))
        .await
        .unwrap();
    let mut lb = cb.leadership();
    assert_eq!(
        a.current_auditor().await.unwrap(),
        Some(bookie("10.0.0.1:3181"))
    );
    assert!(!*lb.borrow());
    // The Auditor's session ends: the other candidate takes over.
    a.close().await.unwrap();
    tokio::time::timeout(HANG, lb.wait_for(|l| *l))
        .await
        .expect("second candidate never elected")
        .unwrap();
    assert_eq!(
        b.current_auditor().await.unwrap(),
        Some(bookie("10.0.0.2:3181"))
    );
    assert!(!*la.borrow());
    cb.resign().await.unwrap();
    assert_eq!(b.current_auditor().await.unwrap(), None);
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_an_error_naming_it() {
    let mut server = EtcdServer::start().unwrap();
    let uri = server.metadata_uri("/ledgers");
    server.stop();
    outages::an_unreachable_server_is_an_error_naming_it(
        EtcdMetadataStore::connect(&uri),
        &server.endpoint(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_lost_after_connecting_gives_errors_not_hangs() {
    let mut server = EtcdServer::start().unwrap();
    let address = server.endpoint();
    let store = EtcdMetadataStore::connect(&server.metadata_uri("/ledgers"))
        .await
        .unwrap();
    outages::a_server_lost_after_connecting_gives_errors_not_hangs(&store, &address, || {
        server.stop()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_record_is_an_error_naming_the_ledger() {
    let server = EtcdServer::start().unwrap();
    let store = EtcdMetadataStore::connect(&server.metadata_uri("/ledgers"))
        .await
        .unwrap();
    store.init_cluster().await.unwrap();
    let mut c = store.etcd_client().unwrap();
    c.put(
        "/ledgers/ledgers/00000000-0000-0000-0000-000000000005",
        b"BookieMetadataFormatVersion\t3\n\xff".to_vec(),
        None,
    )
    .await
    .unwrap();
    let err = store.read_ledger(5).await.unwrap_err();
    assert!(
        matches!(&err, MetadataError::Corrupt { what, .. } if what == "metadata of ledger 5"),
        "{err:?}"
    );
    c.put(
        "/ledgers/underreplication/ledgers/00000000-0000-0000-0000-000000000006",
        b"replica: 'unterminated".to_vec(),
        None,
    )
    .await
    .unwrap();
    let err = store.get_underreplicated(6).await.unwrap_err();
    assert!(err.to_string().contains("ledger 6"), "{err}");
    for uri in ["etcd://h:notaport/x", "etcd://h:1/", "zk://h:1/x"] {
        let err = EtcdMetadataStore::connect(uri).await.unwrap_err();
        assert!(
            matches!(err, MetadataError::InvalidUri { .. }),
            "{uri}: {err:?}"
        );
    }
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_loses_its_registrations() {
    let server = EtcdServer::start().unwrap();
    let proxy = TcpProxy::start(server.addr()).unwrap();
    let options = EtcdOptions {
        session_ttl: Duration::from_secs(3),
        ..EtcdOptions::default()
    };
    let bookie_store =
        EtcdMetadataStore::connect_with(&format!("etcd://{}/ledgers", proxy.addr()), options)
            .await
            .unwrap();
    let observer = EtcdMetadataStore::connect(&server.metadata_uri("/ledgers"))
        .await
        .unwrap();
    // Cut off, the bookie's keep-alives stop, the lease expires, etcd deletes the
    // registration, and the bookie's store reports its session expired by itself.
    outages::an_expired_session_loses_its_registrations(
        &bookie_store,
        &observer,
        |cut| if cut { proxy.block() } else { proxy.unblock() },
        true,
    )
    .await;
    observer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_survive_a_connection_blip() {
    let server = EtcdServer::start().unwrap();
    let proxy = TcpProxy::start(server.addr()).unwrap();
    let direct = EtcdMetadataStore::connect(&server.metadata_uri("/ledgers"))
        .await
        .unwrap();
    let watcher = EtcdMetadataStore::connect(&format!("etcd://{}/ledgers", proxy.addr()))
        .await
        .unwrap();
    outages::watches_survive_a_connection_blip(&direct, &watcher, |cut| {
        if cut { proxy.block() } else { proxy.unblock() }
    })
    .await;
    watcher.close().await.unwrap();
    direct.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_revoked_behind_the_stores_back_is_an_expired_session() {
    let server = EtcdServer::start().unwrap();
    let store = EtcdMetadataStore::connect(&server.metadata_uri("/ledgers"))
        .await
        .unwrap();
    store.init_cluster().await.unwrap();
    let id = bookie("10.0.0.3:3181");
    let _reg = store
        .register_bookie(&id, BookieMode::Writable, &BookieServiceInfo::default())
        .await
        .unwrap();
    let mut raw = etcd_client::Client::connect([server.endpoint()], None)
        .await
        .unwrap();
    raw.lease_revoke(store.lease_id()).await.unwrap();
    // The registration went with the lease.
    let left = raw
        .get("/ledgers/bookies/writable/10.0.0.3:3181", None)
        .await
        .unwrap();
    assert!(left.kvs().is_empty());
    let mut state = store.session_state();
    tokio::time::timeout(HANG, state.wait_for(|s| *s == SessionState::Expired))
        .await
        .expect("the store never noticed its lease was gone")
        .unwrap();
    let err = store
        .register_bookie(&id, BookieMode::Writable, &BookieServiceInfo::default())
        .await
        .unwrap_err();
    assert_eq!(err, MetadataError::SessionExpired);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_survives_an_etcd_restart() {
    let mut server = EtcdServer::start().unwrap();
    let uri = server.metadata_uri("/ledgers");
    let options = EtcdOptions {
        session_ttl: Duration::from_secs(20),
        ..EtcdOptions::default()
    };
    let store = EtcdMetadataStore::connect_with(&uri, options)
        .await
        .unwrap();
    // etcd persists leases: a restart shorter than the TTL keeps the lease (the keep-alive
    // task reconnects).
    outages::a_registration_survives_a_server_restart(
        &store,
        || server.restart().unwrap(),
        async || folio_metadata_etcd::connect(&uri).await,
    )
    .await;
    store.close().await.unwrap();
}
