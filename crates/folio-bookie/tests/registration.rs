//! Registration at start on every driver: a bookie restarted right after it was killed finds
//! its previous process's registration, kept by a session the metadata service has not expired
//! yet, and waits for it to go (as BookKeeper does); a registration another live bookie keeps
//! past the bound is a clear error. `mem://` and real ZooKeeper and etcd servers (started by
//! `folio-testsvc`); `sqlite://` across a real SIGKILL is in `crates/folio/tests/bookie_cmd.rs`.
//!
//! A dead previous process is a session cut off from the service by a proxy: its client can no
//! longer renew it, exactly as after a SIGKILL, and the service expires it on its own.

use folio_metadata::prelude::*;
use std::sync::Arc;
use std::time::Duration;

use folio_bookie::registration::{Connector, RegisterError, Registrar, RegistrationState};
use folio_metadata::mem::{MemMetadataStore, unique_name};
use folio_metadata::{BookieMode, BookieServiceInfo, MetadataStore};
use folio_metadata_etcd::{EtcdMetadataStore, EtcdOptions};
use folio_metadata_zk::{ZkMetadataStore, ZkOptions};
use folio_testsvc::{EtcdServer, TcpProxy, ZooKeeperServer};
use folio_types::BookieId;

/// The session timeout of the previous (dead) process: the service expires it this long
/// after it went silent.
const DEAD_TIMEOUT: Duration = Duration::from_secs(4);
/// The restarted bookie's session timeout, which bounds its wait: generous, so that a slow
/// machine still sees the old session expire well within the bound.
const PATIENT_TIMEOUT: Duration = Duration::from_secs(30);

fn connector_of<F, Fut>(f: F) -> Connector
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = folio_metadata::Result<Arc<dyn MetadataStore>>>
        + Send
        + 'static,
{
    let f = Arc::new(f);
    Arc::new(move || {
        let f = f.clone();
        Box::pin(async move { f().await })
    })
}

async fn start(
    store: Arc<dyn MetadataStore>,
    connector: Connector,
    id: &BookieId,
) -> Result<Registrar, RegisterError> {
    Registrar::start(
        store,
        connector,
        id.clone(),
        BookieServiceInfo::default(),
        Arc::new(|| false),
        Duration::from_secs(1),
    )
    .await
}

async fn listed(store: &dyn MetadataStore, id: &BookieId) -> bool {
    store.list_bookies().await.unwrap().writable.contains(id)
}

/// `dead` holds `id`'s registration and is cut off (its process "killed"); the restarted
/// bookie's `fresh` session registers once the service has expired the old one.
async fn a_dead_sessions_registration_is_waited_out(
    dead: &dyn MetadataStore,
    kill: impl FnOnce(),
    fresh: Arc<dyn MetadataStore>,
    connector: Connector,
) {
    let id = BookieId::new(format!("restarted-{}:3181", unique_name("b"))).unwrap();
    let _old = dead
        .register_bookie(&id, BookieMode::Writable, &BookieServiceInfo::default())
        .await
        .unwrap();
    assert!(listed(&*fresh, &id).await);
    kill();
    let registrar = start(fresh.clone(), connector, &id)
        .await
        .expect("the restarted bookie waits for the old registration to expire");
    assert_eq!(
        registrar.state(),
        RegistrationState::Registered(BookieMode::Writable)
    );
    assert!(listed(&*fresh, &id).await);
    registrar.shutdown().await;
}

/// A registration held by a live session (a second bookie with the same id) is not waited
/// out past the bound: the start fails saying so.
async fn a_live_holder_past_the_bound_is_an_error(
    live: &dyn MetadataStore,
    second: Arc<dyn MetadataStore>,
    connector: Connector,
) {
    let id = BookieId::new(format!("twice-{}:3181", unique_name("b"))).unwrap();
    let reg = live
        .register_bookie(&id, BookieMode::Writable, &BookieServiceInfo::default())
        .await
        .unwrap();
    let err = start(second, connector, &id)
        .await
        .err()
        .expect("two live bookies with one id");
    assert!(
        matches!(err, RegisterError::HeldByLiveBookie { .. }),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("bookie {id} is registered by another live bookie")),
        "{msg}"
    );
    // The live one keeps its registration.
    assert!(listed(live, &id).await);
    reg.unregister().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mem_waits_for_an_expiring_session_and_refuses_a_live_one() {
    let cluster = unique_name("reg");
    let connector = {
        let cluster = cluster.clone();
        connector_of(move || {
            let cluster = cluster.clone();
            async move { Ok(Arc::new(MemMetadataStore::connect(&cluster)) as Arc<dyn MetadataStore>) }
        })
    };
    MemMetadataStore::connect(&cluster)
        .init_cluster()
        .await
        .unwrap();
    // A mem:// session never times out by itself: the test expires it, once the restarted
    // bookie is waiting.
    let dead = MemMetadataStore::connect(&cluster);
    let fresh: Arc<dyn MetadataStore> =
        Arc::new(MemMetadataStore::connect(&cluster).with_session_timeout(PATIENT_TIMEOUT));
    let expiring = dead.clone();
    let kill = move || {
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            expiring.expire_session();
        });
    };
    a_dead_sessions_registration_is_waited_out(&dead, kill, fresh, connector.clone()).await;

    let live = MemMetadataStore::connect(&cluster);
    let second: Arc<dyn MetadataStore> = Arc::new(
        MemMetadataStore::connect(&cluster).with_session_timeout(Duration::from_millis(200)),
    );
    a_live_holder_past_the_bound_is_an_error(&live, second, connector).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_waits_for_an_expiring_session_and_refuses_a_live_one() {
    let server = ZooKeeperServer::start().unwrap();
    let uri = server.metadata_uri("/ledgers");
    let zk = |timeout: Duration| ZkOptions {
        session_timeout: timeout,
        ..ZkOptions::default()
    };
    let connector = {
        let uri = uri.clone();
        connector_of(move || {
            let uri = uri.clone();
            async move {
                Ok(
                    Arc::new(ZkMetadataStore::connect_with(&uri, zk(PATIENT_TIMEOUT)).await?)
                        as Arc<dyn MetadataStore>,
                )
            }
        })
    };
    let fresh: Arc<dyn MetadataStore> = Arc::new(
        ZkMetadataStore::connect_with(&uri, zk(PATIENT_TIMEOUT))
            .await
            .unwrap(),
    );
    fresh.init_cluster().await.unwrap();
    let proxy = TcpProxy::start(server.addr()).unwrap();
    let dead =
        ZkMetadataStore::connect_with(&format!("zk://{}/ledgers", proxy.addr()), zk(DEAD_TIMEOUT))
            .await
            .unwrap();
    a_dead_sessions_registration_is_waited_out(&dead, || proxy.block(), fresh, connector.clone())
        .await;

    let live = ZkMetadataStore::connect(&uri).await.unwrap();
    let second: Arc<dyn MetadataStore> = Arc::new(
        ZkMetadataStore::connect_with(&uri, zk(Duration::from_secs(2)))
            .await
            .unwrap(),
    );
    a_live_holder_past_the_bound_is_an_error(&live, second, connector).await;
    live.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_waits_for_an_expiring_lease_and_refuses_a_live_one() {
    let server = EtcdServer::start().unwrap();
    let uri = server.metadata_uri("/ledgers");
    let etcd = |ttl: Duration| EtcdOptions {
        session_ttl: ttl,
        ..EtcdOptions::default()
    };
    let connector = {
        let uri = uri.clone();
        connector_of(move || {
            let uri = uri.clone();
            async move {
                Ok(
                    Arc::new(EtcdMetadataStore::connect_with(&uri, etcd(PATIENT_TIMEOUT)).await?)
                        as Arc<dyn MetadataStore>,
                )
            }
        })
    };
    let fresh: Arc<dyn MetadataStore> = Arc::new(
        EtcdMetadataStore::connect_with(&uri, etcd(PATIENT_TIMEOUT))
            .await
            .unwrap(),
    );
    fresh.init_cluster().await.unwrap();
    let proxy = TcpProxy::start(server.addr()).unwrap();
    let dead = EtcdMetadataStore::connect_with(
        &format!("etcd://{}/ledgers", proxy.addr()),
        etcd(DEAD_TIMEOUT),
    )
    .await
    .unwrap();
    a_dead_sessions_registration_is_waited_out(&dead, || proxy.block(), fresh, connector.clone())
        .await;

    let live = EtcdMetadataStore::connect(&uri).await.unwrap();
    let second: Arc<dyn MetadataStore> = Arc::new(
        EtcdMetadataStore::connect_with(&uri, etcd(Duration::from_secs(2)))
            .await
            .unwrap(),
    );
    a_live_holder_past_the_bound_is_an_error(&live, second, connector).await;
    live.close().await.unwrap();
}
