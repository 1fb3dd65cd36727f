//! Where racks come from: the `rack` a bookie publishes in its registration (whole
//! bookies, `BookieNode`, configured with `rack`), or the client's rack mapping file,
//! which wins over the registration. Four bookies on two racks, E=2: every ensemble (one
//! write set) must span both racks; random placement would put both on one rack a third
//! of the time.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::*;
use folio_bookie::config::BookieConfig;
use folio_bookie::node::{BookieNode, MetadataAccess};
use folio_bookie::registration::Connector;
use folio_client::{Client, ClientConfig, CreateOptions, DigestType};
use folio_metadata::MetadataStore;
use folio_metadata::mem::{MemMetadataStore, unique_name};
use folio_types::BookieId;

const LEDGERS: usize = 12;

/// The racks (as given) of the ensembles of `LEDGERS` new E2/Qw2/Qa2 ledgers.
async fn ensemble_racks(
    client: &Client,
    rack_of: impl Fn(&BookieId) -> String,
) -> Vec<BTreeSet<String>> {
    let mut out = Vec::new();
    for _ in 0..LEDGERS {
        let opts = CreateOptions::default()
            .quorum(2, 2, 2)
            .digest(DigestType::Crc32c)
            .password("pw");
        let w = patient(client.create_ledger(opts)).await.unwrap();
        patient(w.append("x")).await.unwrap();
        patient(w.close()).await.unwrap();
        let e = client.ledger_metadata(w.id()).await.unwrap().ensembles[&0].clone();
        out.push(e.iter().map(&rack_of).collect());
    }
    out
}

fn mem_connector(cluster: &str) -> Connector {
    let cluster = cluster.to_string();
    Arc::new(move || {
        let cluster = cluster.clone();
        Box::pin(async move {
            Ok(Arc::new(MemMetadataStore::connect(&cluster)) as Arc<dyn MetadataStore>)
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racks_published_by_bookies_spread_every_write_set_over_both_racks() {
    let cluster = unique_name("racks");
    let racks = ["/dc/r1", "/dc/r1", "/dc/r2", "/dc/r2"];
    let mut nodes = Vec::new();
    let mut dirs = Vec::new();
    for rack in racks {
        let dir = tempfile::tempdir().unwrap();
        let config = BookieConfig {
            data_dir: Some(dir.path().to_path_buf()),
            listen_address: "127.0.0.1".into(),
            port: 0,
            journal_max_group_wait_ms: 1,
            disk_usage_threshold: 0.999,
            disk_usage_lwm_threshold: 0.998,
            rack: Some(rack.into()),
            ..BookieConfig::default()
        };
        let access = MetadataAccess {
            store: Arc::new(MemMetadataStore::connect(&cluster)),
            connector: mem_connector(&cluster),
            init_cluster_if_missing: true,
        };
        let node = patient(BookieNode::start(
            &folio_env::Env::real(),
            config,
            Some(access),
        ))
        .await
        .expect("start a bookie");
        nodes.push(node);
        dirs.push(dir);
    }
    let metadata: Arc<dyn MetadataStore> = Arc::new(MemMetadataStore::connect(&cluster));
    // Each bookie published its rack.
    for (node, rack) in nodes.iter().zip(racks) {
        let info = metadata
            .bookie_service_info(node.bookie_id())
            .await
            .unwrap();
        assert_eq!(info.properties.get("rack").map(String::as_str), Some(rack));
    }
    let ids: Vec<BookieId> = nodes.iter().map(|n| n.bookie_id().clone()).collect();
    let rack_of = |b: &BookieId| racks[ids.iter().position(|i| i == b).unwrap()].to_string();
    let client = Client::connect(
        metadata,
        ClientConfig {
            rack_aware: true,
            ..test_config()
        },
    )
    .await
    .unwrap();
    for spread in ensemble_racks(&client, rack_of).await {
        assert_eq!(spread.len(), 2, "{spread:?}");
    }
    client.close();
    for node in nodes {
        node.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rack_mapping_file_wins_over_the_registration() {
    // The registrations say bookies 0 and 2 share a rack, 1 and 3 the other; the mapping
    // file says 0 and 1 share one, 2 and 3 the other. Placement must follow the file.
    let mut cluster = Cluster::start(0).await;
    for rack in ["/x", "/y", "/x", "/y"] {
        cluster.add_bookie_on_rack(true, Some(rack)).await;
    }
    let ids: Vec<BookieId> = cluster.bookies.iter().map(|b| b.id.clone()).collect();
    let file_racks = ["/a", "/a", "/b", "/b"];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("racks.txt");
    let mut text = String::from("# host:port rack\n");
    for (id, rack) in ids.iter().zip(file_racks) {
        text.push_str(&format!("{id} {rack}\n"));
    }
    std::fs::write(&path, text).unwrap();
    let rack_of = |b: &BookieId| file_racks[ids.iter().position(|i| i == b).unwrap()].to_string();
    let client = cluster
        .client_with(ClientConfig {
            rack_aware: true,
            rack_mapping_file: Some(path.clone()),
            ..test_config()
        })
        .await;
    for spread in ensemble_racks(&client, rack_of).await {
        assert_eq!(spread.len(), 2, "{spread:?}");
    }
    // A file made malformed later (an edit half done) does not fail writers: placement
    // goes on with the last good mapping.
    std::fs::write(&path, format!("{} /a\n{}\n", ids[0], ids[1])).unwrap();
    for spread in ensemble_racks(&client, rack_of).await {
        assert_eq!(spread.len(), 2, "{spread:?}");
    }
    // A malformed file at connect is an error naming the file and the line.
    let e = Client::connect(
        cluster.metadata.clone(),
        ClientConfig {
            rack_aware: true,
            rack_mapping_file: Some(path.clone()),
            ..test_config()
        },
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("racks.txt") && e.contains("line 2"), "{e}");
}
