//! What a networked driver (`zk://`, `etcd://`) must do when its servers go away, written
//! once so both drivers' tests check the same things: an unreachable server is an error
//! naming it (never a hang), a lost session takes its registrations with it and says so,
//! watches come back after a connection blip, and a registration outlives a server restart
//! shorter than the session timeout.
//!
//! The driver's test owns the real server (folio-testsvc) and passes in what only it can
//! do: stop or restart the server, cut a client off through a proxy (`cut(true)` blocks,
//! `cut(false)` heals), and open new sessions. Every wait is bounded by [`PATIENCE`], so a
//! hang fails the test.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use folio_types::BookieId;
use folio_types::metadata::{DigestType, LedgerMetadata, LedgerState};
use folio_types::quorum::QuorumConfig;

use super::PATIENCE;
use crate::store::*;
use crate::{MetadataError, Result};

fn bookie(s: &str) -> BookieId {
    BookieId::new(s).expect("a valid bookie id")
}

async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} within {PATIENCE:?}"))
}

async fn lists_writable(store: &dyn MetadataStore, id: &BookieId) -> bool {
    store
        .list_bookies()
        .await
        .expect("list_bookies")
        .writable
        .contains(id)
}

/// `connect` is a connection attempt to a server that was stopped, whose address is
/// `address`: it fails with `Unreachable` naming that address.
pub async fn an_unreachable_server_is_an_error_naming_it<T>(
    connect: impl Future<Output = Result<T>>,
    address: &str,
) {
    let err = match within("connect returned", connect).await {
        Ok(_) => panic!("connecting to a stopped server at {address} succeeded"),
        Err(e) => e,
    };
    assert!(
        matches!(&err, MetadataError::Unreachable { address: a, .. } if a == address),
        "{err:?}"
    );
    assert!(err.to_string().contains(address), "{err}");
}

/// `stop` stops the server `store` is connected to (at `address`): a request then fails
/// (unreachable, or the session is gone) instead of hanging.
pub async fn a_server_lost_after_connecting_gives_errors_not_hangs(
    store: &dyn MetadataStore,
    address: &str,
    stop: impl FnOnce(),
) {
    store.init_cluster().await.expect("init_cluster");
    stop();
    let err = within("a read with the server gone returned", store.read_ledger(1))
        .await
        .expect_err("a read with the server gone succeeded");
    match &err {
        MetadataError::Unreachable { address: a, .. } => assert_eq!(a, address),
        MetadataError::SessionExpired => {}
        other => panic!("unexpected error {other:?}"),
    }
}

/// `bookie_store` reaches the server through a proxy that `cut` blocks and heals, and has
/// a session timeout of a few seconds; `observer` is connected directly. Cut off for longer
/// than its session timeout, the bookie's registration vanishes, and its store reports the
/// session expired: while still cut off if `expiry_seen_while_cut_off` (a lease the client
/// times out itself), else once it can reach the server again (ZooKeeper tells a client its
/// session expired when it reconnects).
pub async fn an_expired_session_loses_its_registrations(
    bookie_store: &dyn MetadataStore,
    observer: &dyn MetadataStore,
    cut: impl Fn(bool),
    expiry_seen_while_cut_off: bool,
) {
    bookie_store.init_cluster().await.expect("init_cluster");
    let id = bookie("10.0.0.7:3181");
    let _reg = bookie_store
        .register_bookie(&id, BookieMode::Writable, &BookieServiceInfo::default())
        .await
        .expect("register_bookie");
    assert!(lists_writable(observer, &id).await);
    let mut membership = observer.watch_bookies().await.expect("watch_bookies");
    assert!(membership.borrow().writable.contains(&id));
    let mut state = bookie_store.session_state();

    cut(true);
    within(
        "the registration vanished",
        membership.wait_for(|s| !s.writable.contains(&id)),
    )
    .await
    .expect("the membership watch ended");
    assert!(!lists_writable(observer, &id).await);
    if !expiry_seen_while_cut_off {
        cut(false);
    }
    within(
        "the bookie's store saw its session expire",
        state.wait_for(|s| *s == SessionState::Expired),
    )
    .await
    .expect("the session state channel ended");
    cut(false);
    assert!(matches!(
        bookie_store.read_cluster().await,
        Err(MetadataError::SessionExpired)
    ));
}

/// `watcher` reaches the server through a proxy that `cut` blocks and heals; `direct` is
/// connected directly. Changes made while the watcher is briefly cut off (well within its
/// session timeout) reach its bookie and ledger watches once it is back.
pub async fn watches_survive_a_connection_blip(
    direct: &dyn MetadataStore,
    watcher: &dyn MetadataStore,
    cut: impl Fn(bool),
) {
    direct.init_cluster().await.expect("init_cluster");
    let mut membership = watcher.watch_bookies().await.expect("watch_bookies");
    let m = LedgerMetadata::new_open(
        QuorumConfig::new(1, 1, 1).expect("a valid quorum"),
        vec![bookie("10.0.0.1:3181")],
        DigestType::Crc32,
        vec![],
    );
    let v0 = direct.create_ledger(3, &m).await.expect("create_ledger");
    let mut ledger = watcher.watch_ledger(3).await.expect("watch_ledger");
    cut(true);
    let id = bookie("10.0.0.9:3181");
    let _reg = direct
        .register_bookie(&id, BookieMode::Writable, &BookieServiceInfo::default())
        .await
        .expect("register_bookie");
    let mut closed = m.clone();
    closed.state = LedgerState::Closed;
    let v1 = direct
        .write_ledger(3, &closed, v0)
        .await
        .expect("write_ledger");
    tokio::time::sleep(Duration::from_secs(1)).await;
    cut(false);
    within(
        "the membership watch recovered",
        membership.wait_for(|s| s.writable.contains(&id)),
    )
    .await
    .expect("the membership watch ended");
    within(
        "the ledger watch recovered",
        ledger.wait_for(|v| v.as_ref().is_some_and(|v| v.version == v1)),
    )
    .await
    .expect("the ledger watch ended");
}

/// `store` has a session timeout well above a restart (20 s, say); `restart` restarts its
/// server with the same data, and `connect` opens a new session. A restart shorter than
/// the session timeout keeps the session, and with it the registration; the store works
/// again on that session.
pub async fn a_registration_survives_a_server_restart(
    store: &dyn MetadataStore,
    restart: impl FnOnce(),
    connect: impl AsyncFn() -> Result<Arc<dyn MetadataStore>>,
) {
    store.init_cluster().await.expect("init_cluster");
    let id = bookie("10.0.0.4:3181");
    let _reg = store
        .register_bookie(&id, BookieMode::Writable, &BookieServiceInfo::default())
        .await
        .expect("register_bookie");
    restart();
    let observer = connect().await.expect("connecting after the restart");
    assert!(lists_writable(&*observer, &id).await);
    let mut state = store.session_state();
    within(
        "the store reconnected",
        state.wait_for(|s| *s == SessionState::Connected),
    )
    .await
    .expect("the session state channel ended");
    within("the store answered again", async {
        while store.read_cluster().await.is_err() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    // Still there after several keep-alive periods of the new server.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(lists_writable(&*observer, &id).await);
    assert_eq!(*store.session_state().borrow(), SessionState::Connected);
    observer.close().await.expect("closing the observer");
}
