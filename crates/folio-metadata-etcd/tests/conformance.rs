//! The metadata conformance suite of `folio-metadata` against the `etcd://` driver, each
//! property on its own real etcd server (started by folio-testsvc), plus `run_all` on one
//! shared cluster.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use folio_metadata::conformance::{self, Harness};
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

macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let h = EtcdHarness::new();
                conformance::$name(&h).await;
            }
        )*
    };
}

suite!(
    cluster_init_and_read,
    ledger_create_read_update_delete_with_cas,
    concurrent_cas_has_one_winner,
    ledger_ids_are_unique_under_concurrency,
    list_ledgers_pages_through_everything,
    cookies_use_version_cas,
    registration_visible_until_session_closed,
    registration_removed_on_unregister_and_drop,
    bookie_watch_fires,
    ledger_watch_fires,
    exactly_one_leader_and_failover,
    underreplication_lock_is_exclusive_and_dies_with_session,
    autorecovery_settings_are_shared,
    corrupt_record_is_an_error_naming_the_ledger,
    bad_input_is_refused_with_clear_errors,
    format_cluster_wipes_everything,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_all_on_one_cluster() {
    conformance::run_all(&EtcdHarness::new()).await;
}
