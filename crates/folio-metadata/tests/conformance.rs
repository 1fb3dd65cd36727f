//! Runs the metadata conformance suite against the embedded drivers: `mem://` (a
//! fresh in-process cluster per test) and `sqlite://` (a fresh database file in a
//! temporary directory per test, every session a separate connection).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use folio_metadata::conformance::{self, Harness};
use folio_metadata::mem::MemCluster;
use folio_metadata::sqlite::{SqliteMetadataStore, SqliteOptions};
use folio_metadata::{MetadataStore, Result};
use folio_types::LedgerId;

struct MemHarness(MemCluster);

#[async_trait]
impl Harness for MemHarness {
    async fn connect(&self) -> Result<Arc<dyn MetadataStore>> {
        Ok(Arc::new(self.0.connect()))
    }

    async fn put_raw_ledger_record(&self, ledger: LedgerId, bytes: &[u8]) -> Result<()> {
        self.0.put_raw_ledger_record(ledger, bytes);
        Ok(())
    }
}

struct SqliteHarness {
    dir: tempfile::TempDir,
}

impl SqliteHarness {
    fn new() -> Self {
        SqliteHarness {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn options() -> SqliteOptions {
        SqliteOptions {
            session_timeout: Duration::from_secs(10),
            poll_interval: Duration::from_millis(50),
            ..SqliteOptions::default()
        }
    }

    async fn open(&self) -> Result<SqliteMetadataStore> {
        SqliteMetadataStore::open(&self.dir.path().join("metadata.db"), Self::options()).await
    }
}

#[async_trait]
impl Harness for SqliteHarness {
    async fn connect(&self) -> Result<Arc<dyn MetadataStore>> {
        Ok(Arc::new(self.open().await?))
    }

    async fn put_raw_ledger_record(&self, ledger: LedgerId, bytes: &[u8]) -> Result<()> {
        self.open()
            .await?
            .put_raw_ledger_record(ledger, bytes)
            .await
    }
}

macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod mem {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let h = MemHarness(MemCluster::new(stringify!($name)));
                    conformance::$name(&h).await;
                }
            )*
        }
        mod sqlite {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let h = SqliteHarness::new();
                    conformance::$name(&h).await;
                }
            )*
        }
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

/// `run_all` itself (what the zk and etcd drivers call) passes on one shared cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_all_on_one_mem_cluster() {
    conformance::run_all(&MemHarness(MemCluster::new("run_all"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_all_on_one_sqlite_database() {
    conformance::run_all(&SqliteHarness::new()).await;
}
