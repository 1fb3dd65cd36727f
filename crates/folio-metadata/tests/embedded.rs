//! Driver-specific behaviour of the embedded stores beyond the conformance suite:
//! connecting by URI, clear errors for unusable database paths, and `mem://`
//! sessions expired by hand.

use folio_metadata::mem::{MemCluster, MemMetadataStore};
use folio_metadata::prelude::*;
use folio_metadata::{
    BookieMode, BookieServiceInfo, MetadataError, MetadataStore, SessionState, connect_embedded,
};
use folio_types::BookieId;

#[tokio::test]
async fn connect_embedded_opens_sqlite_and_mem_and_refuses_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let uri = format!("sqlite://{}", dir.path().join("metadata.db").display());
    let s = connect_embedded(&uri).await.unwrap();
    assert_eq!(s.uri(), uri);
    let info = s.init_cluster().await.unwrap();
    // A second connection to the same file sees the same cluster.
    let s2 = connect_embedded(&uri).await.unwrap();
    assert_eq!(s2.read_cluster().await.unwrap(), info);

    let m = connect_embedded("mem://embedded-test").await.unwrap();
    m.init_cluster().await.unwrap();
    let m2 = connect_embedded("mem://embedded-test").await.unwrap();
    assert!(
        m2.init_cluster().await.unwrap_err().is_already_exists(),
        "mem:// names must share one cluster"
    );

    for uri in [
        "zk://localhost:2181/ledgers",
        "etcd://localhost:2379/ledgers",
    ] {
        match connect_embedded(uri).await {
            Err(MetadataError::Unsupported { what, .. }) => {
                assert!(what.contains("folio-metadata-"), "{what}")
            }
            other => panic!("{uri}: expected Unsupported, got {other:?}"),
        }
    }
    match connect_embedded("sqlite://relative.db").await {
        Err(MetadataError::InvalidUri { reason, .. }) => {
            assert!(reason.contains("absolute"), "{reason}")
        }
        other => panic!("expected InvalidUri, got {other:?}"),
    }
}

#[tokio::test]
async fn unusable_sqlite_paths_are_errors_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir").join("metadata.db");
    let err = connect_embedded(&format!("sqlite://{}", missing.display()))
        .await
        .unwrap_err();
    assert!(matches!(err, MetadataError::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains("no-such-dir"), "{err}");

    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, vec![0x5a; 8192]).unwrap();
    let err = connect_embedded(&format!("sqlite://{}", junk.display()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("junk.db"), "{err}");
}

#[tokio::test]
async fn uninitialised_cluster_reads_as_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let s = connect_embedded(&format!("sqlite://{}", dir.path().join("m.db").display()))
        .await
        .unwrap();
    let err = s.read_cluster().await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(err.to_string().contains("not initialised"), "{err}");
}

#[tokio::test]
async fn an_expired_mem_session_loses_its_registration_and_says_so() {
    let cluster = MemCluster::new("expiry");
    let a = cluster.connect();
    let b: MemMetadataStore = cluster.connect();
    let id = BookieId::new("bookie-1:3181").unwrap();
    let _reg = a
        .register_bookie(&id, BookieMode::Writable, &BookieServiceInfo::default())
        .await
        .unwrap();
    let mut state = a.session_state();
    assert_eq!(*state.borrow(), SessionState::Connected);
    a.expire_session();
    state.changed().await.unwrap();
    assert_eq!(*state.borrow(), SessionState::Expired);
    assert!(!b.list_bookies().await.unwrap().writable.contains(&id));
    assert_eq!(
        a.generate_ledger_id().await.unwrap_err(),
        MetadataError::SessionExpired
    );
}

#[tokio::test]
async fn dropping_every_handle_of_a_mem_session_ends_it() {
    let cluster = MemCluster::new("drop");
    let b = cluster.connect();
    let id = BookieId::new("bookie-2:3181").unwrap();
    {
        let a = cluster.connect();
        let _reg = a
            .register_bookie(&id, BookieMode::Writable, &BookieServiceInfo::default())
            .await
            .unwrap();
        drop(a);
        // The registration handle keeps the session alive.
        assert!(b.list_bookies().await.unwrap().writable.contains(&id));
    }
    assert!(!b.list_bookies().await.unwrap().writable.contains(&id));
}

#[tokio::test]
async fn a_deterministic_mem_cluster_replays_ids_and_times() {
    let run = |seed| async move {
        let cluster = MemCluster::deterministic("sim", seed, std::sync::Arc::new(|| 1_000));
        let s = cluster.connect();
        let info = s.init_cluster().await.unwrap();
        s.mark_underreplicated(3, &[BookieId::new("b:1").unwrap()])
            .await
            .unwrap();
        (
            info.instance_id,
            s.get_underreplicated(3).await.unwrap().ctime,
        )
    };
    let (a, ctime) = run(7).await;
    assert_eq!(
        ctime,
        Some(1_000),
        "the mark's ctime must come from the given clock"
    );
    assert_eq!(
        run(7).await.0,
        a,
        "the same seed must give the same instance id"
    );
    assert_ne!(
        run(8).await.0,
        a,
        "another seed must give another instance id"
    );
    let parts: Vec<_> = a.split('-').map(str::len).collect();
    assert_eq!(parts, [8, 4, 4, 4, 12], "not a UUID: {a}");
    assert_eq!(&a[14..15], "4", "not a version 4 UUID: {a}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_session_expired_behind_its_back_notices_and_stops() {
    use folio_metadata::sqlite::{SqliteMetadataStore, SqliteOptions};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("metadata.db");
    let opts = SqliteOptions {
        session_timeout: std::time::Duration::from_secs(10),
        poll_interval: std::time::Duration::from_millis(50),
        ..SqliteOptions::default()
    };
    let a = SqliteMetadataStore::open(&db, opts.clone()).await.unwrap();
    let b = SqliteMetadataStore::open(&db, opts).await.unwrap();
    a.init_cluster().await.unwrap();
    let id = BookieId::new("stalled:3181").unwrap();
    let _reg = a
        .register_bookie(&id, BookieMode::Writable, &BookieServiceInfo::default())
        .await
        .unwrap();
    let mut state = a.session_state();

    // Expire every session but b's, as a stall past the timeout would.
    let raw = rusqlite::Connection::open(&db).unwrap();
    raw.busy_timeout(std::time::Duration::from_secs(30))
        .unwrap();
    raw.execute(
        "UPDATE sessions SET expires_at = 0 WHERE id <> (SELECT max(id) FROM sessions)",
        [],
    )
    .unwrap();
    drop(raw);

    tokio::time::timeout(
        std::time::Duration::from_secs(60),
        state.wait_for(|s| *s == SessionState::Expired),
    )
    .await
    .expect("the session never noticed it expired")
    .unwrap();
    assert!(!b.list_bookies().await.unwrap().writable.contains(&id));
    assert_eq!(
        a.generate_ledger_id().await.unwrap_err(),
        MetadataError::SessionExpired
    );
    // The surviving session is unaffected.
    b.generate_ledger_id().await.unwrap();
}
