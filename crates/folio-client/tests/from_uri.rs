//! `Client::from_uri` reaches every driver through the one registry: a whole cluster on a
//! real ZooKeeper and on a real etcd (bookies registered there, a ledger written, closed,
//! and read back byte for byte by a second client made from the URI alone), and on sqlite.

mod common;

use common::{Cluster, patient, test_config};
use folio_client::{Client, CreateOptions, OpenOptions};
use folio_metadata::registry::{self, ConnectOptions};

async fn round_trip(uri: &str) {
    let metadata = registry::connect(uri, ConnectOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{uri}: {e}"));
    let cluster = Cluster::start_on_store(3, metadata).await;
    let writer = Client::from_uri(uri, test_config()).await.unwrap();
    let ledger = patient(writer.create_ledger(CreateOptions::default()))
        .await
        .unwrap();
    let id = ledger.id();
    for i in 0..20u32 {
        patient(ledger.append(format!("entry {i} on {uri}").into_bytes()))
            .await
            .unwrap();
    }
    patient(ledger.close()).await.unwrap();

    let reader = Client::from_uri(uri, test_config()).await.unwrap();
    let opened = patient(reader.open_ledger(
        id,
        &CreateOptions::default().password,
        OpenOptions::no_recovery(),
    ))
    .await
    .unwrap();
    assert_eq!(opened.last_add_confirmed(), 19);
    let entries = patient(opened.read(0, 19)).await.unwrap();
    assert_eq!(entries.len(), 20);
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e.payload.as_ref(), format!("entry {i} on {uri}").as_bytes());
    }
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_from_a_zk_etcd_or_sqlite_uri_writes_and_reads() {
    folio_metadata_zk::register();
    folio_metadata_etcd::register();
    let zk = folio_testsvc::ZooKeeperServer::start().expect("ZooKeeper");
    round_trip(&zk.metadata_uri("/from-uri")).await;
    let etcd = folio_testsvc::EtcdServer::start().expect("etcd");
    round_trip(&etcd.metadata_uri("/from-uri")).await;
    let dir = tempfile::tempdir().unwrap();
    round_trip(&format!("sqlite://{}", dir.path().join("m.db").display())).await;
}
