//! Runs the metadata conformance suite against the embedded drivers: `mem://` (a
//! fresh in-process cluster per test) and `sqlite://` (a fresh database file in a
//! temporary directory per test, every session a separate connection).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use folio_metadata::conformance::Harness;
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

mod mem {
    use super::*;
    folio_metadata::conformance_suite!(|name: &str| MemHarness(MemCluster::new(name)));
}

mod sqlite {
    use super::*;
    folio_metadata::conformance_suite!(|_name: &str| SqliteHarness::new());
}
