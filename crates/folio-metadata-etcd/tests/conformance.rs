//! The metadata conformance suite of `folio-metadata` against the `etcd://` driver, each
//! property on its own real etcd server (started by folio-testsvc), plus `run_all` on one
//! shared cluster.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use folio_metadata::conformance::Harness;
use folio_metadata::{MetadataStore, Result};
use folio_metadata_etcd::{EtcdMetadataStore, EtcdOptions, ledger_uuid};
use folio_testsvc::EtcdServer;
use folio_types::LedgerId;

struct EtcdHarness {
    server: EtcdServer,
}

impl EtcdHarness {
    fn new() -> Self {
        EtcdHarness {
            server: EtcdServer::start().expect("starting etcd"),
        }
    }
}

#[async_trait]
impl Harness for EtcdHarness {
    async fn connect(&self) -> Result<Arc<dyn MetadataStore>> {
        let options = EtcdOptions {
            session_ttl: Duration::from_secs(6),
            ..EtcdOptions::default()
        };
        Ok(Arc::new(
            EtcdMetadataStore::connect_with(&self.server.metadata_uri("/ledgers"), options).await?,
        ))
    }

    async fn put_raw_ledger_record(&self, ledger: LedgerId, bytes: &[u8]) -> Result<()> {
        let mut c = etcd_client::Client::connect([self.server.endpoint()], None)
            .await
            .expect("raw etcd client");
        c.put(
            format!("/ledgers/ledgers/{}", ledger_uuid(ledger)),
            bytes.to_vec(),
            None,
        )
        .await
        .expect("planting a raw record");
        Ok(())
    }
}

folio_metadata::conformance_suite!(|_name: &str| EtcdHarness::new());
