//! The metadata conformance suite of `folio-metadata` against the `zk://` driver, each
//! property on its own real ZooKeeper server (started by folio-testsvc), plus `run_all` on
//! one shared cluster.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use folio_metadata::conformance::Harness;
use folio_metadata::{MetadataStore, Result};
use folio_metadata_zk::{ZkMetadataStore, ZkOptions, ledger_path};
use folio_testsvc::ZooKeeperServer;
use folio_types::LedgerId;
use zookeeper_client as zk;

struct ZkHarness {
    server: ZooKeeperServer,
}

impl ZkHarness {
    fn new() -> Self {
        ZkHarness {
            server: ZooKeeperServer::start().expect("starting ZooKeeper"),
        }
    }
}

#[async_trait]
impl Harness for ZkHarness {
    async fn connect(&self) -> Result<Arc<dyn MetadataStore>> {
        let options = ZkOptions {
            session_timeout: Duration::from_secs(6),
            ..ZkOptions::default()
        };
        Ok(Arc::new(
            ZkMetadataStore::connect_with(&self.server.metadata_uri("/ledgers"), options).await?,
        ))
    }

    async fn put_raw_ledger_record(&self, ledger: LedgerId, bytes: &[u8]) -> Result<()> {
        let c = zk::Client::connect(&self.server.connect_string())
            .await
            .expect("raw ZooKeeper client");
        let path = ledger_path("/ledgers", ledger);
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        c.mkdir(&path[..path.rfind('/').unwrap()], &open)
            .await
            .expect("parents");
        match c.create(&path, bytes, &open).await {
            Ok(_) => {}
            Err(zk::Error::NodeExists) => {
                c.set_data(&path, bytes, None).await.expect("set_data");
            }
            Err(e) => panic!("planting {path}: {e}"),
        }
        Ok(())
    }
}

folio_metadata::conformance_suite!(|_name: &str| ZkHarness::new());
