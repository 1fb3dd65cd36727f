//! Bad input and lost servers: an unreachable ZooKeeper gives an error naming its address
//! (never a hang), a corrupt record gives an error naming the ledger, a bad URI is refused,
//! and an expired session takes its registrations with it.

use folio_metadata::prelude::*;
use std::time::Duration;

use folio_metadata::conformance::outages;
use folio_metadata::{BookieMode, BookieServiceInfo, MetadataError, MetadataStore, SessionState};
use folio_metadata_zk::{ZkMetadataStore, ZkOptions};
use folio_testsvc::{TcpProxy, ZooKeeperServer};
use folio_types::BookieId;
use zookeeper_client as zk;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_an_error_naming_it() {
    let mut server = ZooKeeperServer::start().unwrap();
    let uri = server.metadata_uri("/ledgers");
    server.stop();
    outages::an_unreachable_server_is_an_error_naming_it(
        ZkMetadataStore::connect(&uri),
        &server.connect_string(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_lost_after_connecting_gives_errors_not_hangs() {
    let mut server = ZooKeeperServer::start().unwrap();
    let address = server.connect_string();
    let store = ZkMetadataStore::connect(&server.metadata_uri("/ledgers"))
        .await
        .unwrap();
    outages::a_server_lost_after_connecting_gives_errors_not_hangs(&store, &address, || {
        server.stop()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_ledger_record_is_an_error_naming_the_ledger() {
    let server = ZooKeeperServer::start().unwrap();
    let store = ZkMetadataStore::connect(&server.metadata_uri("/ledgers"))
        .await
        .unwrap();
    store.init_cluster().await.unwrap();
    let c = zk::Client::connect(&server.connect_string()).await.unwrap();
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    c.mkdir("/ledgers/00/0000", &open).await.unwrap();
    c.create(
        "/ledgers/00/0000/L0005",
        b"BookieMetadataFormatVersion\t3\n\xff\xff",
        &open,
    )
    .await
    .unwrap();
    let err = store.read_ledger(5).await.unwrap_err();
    assert!(
        matches!(&err, MetadataError::Corrupt { what, .. } if what == "metadata of ledger 5"),
        "{err:?}"
    );
    assert!(err.to_string().contains("ledger 5"), "{err}");
    // A garbage under-replication mark names its ledger too.
    c.mkdir(
        "/ledgers/underreplication/ledgers/0000/0000/0000/0009",
        &open,
    )
    .await
    .unwrap();
    c.create(
        "/ledgers/underreplication/ledgers/0000/0000/0000/0009/urL0000000009",
        b"replica \"x\"",
        &open,
    )
    .await
    .unwrap();
    let err = store.get_underreplicated(9).await.unwrap_err();
    assert!(err.to_string().contains("ledger 9"), "{err}");
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_uris_and_ids_are_refused_with_the_cause() {
    for uri in [
        "zk://h:notaport/ledgers",
        "zk+flat://h:1/ledgers",
        "zk://h:1/",
        "etcd://h:1/x",
    ] {
        let err = ZkMetadataStore::connect(uri).await.unwrap_err();
        assert!(
            matches!(err, MetadataError::InvalidUri { .. }),
            "{uri}: {err:?}"
        );
        assert!(err.to_string().contains(uri), "{err}");
    }
    let server = ZooKeeperServer::start().unwrap();
    let store = ZkMetadataStore::connect(&server.metadata_uri("/ledgers"))
        .await
        .unwrap();
    let err = store.read_ledger(-3).await.unwrap_err();
    assert!(err.to_string().contains("-3"), "{err}");
    // A bookie registered before the cluster was initialised does not make the cluster
    // look initialised (the root then exists, but no INSTANCEID).
    let reg = store
        .register_bookie(
            &BookieId::new("10.0.0.1:3181").unwrap(),
            BookieMode::Writable,
            &BookieServiceInfo::default(),
        )
        .await
        .unwrap();
    assert!(store.read_cluster().await.unwrap_err().is_not_found());
    let info = store.init_cluster().await.unwrap();
    assert_eq!(store.read_cluster().await.unwrap(), info);
    assert!(store.init_cluster().await.unwrap_err().is_already_exists());
    assert_eq!(store.list_bookies().await.unwrap().writable.len(), 1);
    reg.unregister().await.unwrap();
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_session_loses_its_registrations() {
    let server = ZooKeeperServer::start().unwrap();
    // The bookie reaches ZooKeeper through a proxy the test can cut.
    let proxy = TcpProxy::start(server.addr()).unwrap();
    let options = ZkOptions {
        session_timeout: Duration::from_secs(4),
        ..ZkOptions::default()
    };
    let bookie_store =
        ZkMetadataStore::connect_with(&format!("zk://{}/ledgers", proxy.addr()), options)
            .await
            .unwrap();
    let observer = ZkMetadataStore::connect(&server.metadata_uri("/ledgers"))
        .await
        .unwrap();
    // ZooKeeper expires the session while the bookie is cut off; the bookie learns it
    // when it can talk to ZooKeeper again.
    outages::an_expired_session_loses_its_registrations(
        &bookie_store,
        &observer,
        |cut| if cut { proxy.block() } else { proxy.unblock() },
        false,
    )
    .await;
    observer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_store_removes_its_ephemerals_before_returning() {
    let server = ZooKeeperServer::start().unwrap();
    let uri = server.metadata_uri("/ledgers");
    let a = ZkMetadataStore::connect(&uri).await.unwrap();
    a.init_cluster().await.unwrap();
    let id = BookieId::new("10.0.0.8:3181").unwrap();
    let reg = a
        .register_bookie(&id, BookieMode::Writable, &BookieServiceInfo::default())
        .await
        .unwrap();
    a.close().await.unwrap();
    let b = ZkMetadataStore::connect(&uri).await.unwrap();
    assert!(!b.list_bookies().await.unwrap().writable.contains(&id));
    // The registration handle of a closed store fails cleanly.
    assert!(matches!(
        reg.unregister().await,
        Err(MetadataError::SessionExpired)
    ));
    assert_eq!(*a.session_state().borrow(), SessionState::Closed);
    assert!(matches!(
        a.read_cluster().await,
        Err(MetadataError::SessionExpired)
    ));
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_survive_a_connection_blip() {
    let server = ZooKeeperServer::start().unwrap();
    let proxy = TcpProxy::start(server.addr()).unwrap();
    let direct = ZkMetadataStore::connect(&server.metadata_uri("/ledgers"))
        .await
        .unwrap();
    let watcher = ZkMetadataStore::connect(&format!("zk://{}/ledgers", proxy.addr()))
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
async fn a_registration_survives_a_zookeeper_restart() {
    let mut server = ZooKeeperServer::start().unwrap();
    let uri = server.metadata_uri("/ledgers");
    let options = ZkOptions {
        session_timeout: Duration::from_secs(20),
        ..ZkOptions::default()
    };
    let store = ZkMetadataStore::connect_with(&uri, options).await.unwrap();
    // ZooKeeper persists sessions: a restart shorter than the session timeout keeps them.
    outages::a_registration_survives_a_server_restart(
        &store,
        || server.restart().unwrap(),
        async || folio_metadata_zk::connect(&uri).await,
    )
    .await;
    store.close().await.unwrap();
}
