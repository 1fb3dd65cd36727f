//! Folio's `zk://host:port[,host:port]/ledgers` metadata driver: the metadata contract of
//! `folio-metadata` on ZooKeeper, in Apache BookKeeper's own layout (spec/bookkeeper-protocol.md
//! §5), so the Java BookKeeper client and its shell see a Folio cluster as their own.
//!
//! Under the ledgers root `R` (default `/ledgers`):
//!
//! | znode | what |
//! |---|---|
//! | `R/LAYOUT` | `2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1` |
//! | `R/INSTANCEID` | the cluster's UUID |
//! | `R/available/<bookie>`, `R/available/readonly/<bookie>` | ephemeral registrations, `BookieServiceInfoFormat` bytes |
//! | `R/cookies/<bookie>` | cookies (opaque to this driver) |
//! | `R/idgen/ID-<seq>`, `R/idgen-long/HOB-<hi>/ID-<seq>` | ledger id generation (ephemeral-sequential, deleted at once) |
//! | `R/00/0000/L0001` (ids < 2^31-1), `R/000/0000/0000/0000/L0001` (larger) | ledger metadata, format version 3 |
//! | `R/underreplication/LAYOUT`, `ledgers/<hhhh>/<hhhh>/<hhhh>/<hhhh>/urL<id>`, `locks/urL<id>`, `auditorelection/V_<seq>`, `disable`, `lostBookieRecoveryDelay` | autorecovery |
//!
//! Versions are znode versions. Registrations, under-replication locks and Auditor votes are
//! ephemeral znodes of the store's session: they vanish when it is closed or expires.

mod election;
mod paths;
mod session;
mod store;
mod underreplication;
mod uri;
mod watches;

use std::sync::Arc;

use folio_metadata::{MetadataStore, Result};

pub use paths::DEFAULT_LAYOUT;
pub use session::ZkOptions;
pub use store::ZkMetadataStore;
pub use uri::ZkUri;

/// Registers this driver for `zk://` URIs (BookKeeper's `zk+hierarchical://` too) in
/// [`folio_metadata::registry`], so that every `connect` of the program reaches ZooKeeper.
pub fn register() {
    folio_metadata::registry::register(
        "zk",
        std::sync::Arc::new(|uri, _parsed, options| {
            let uri = uri.to_string();
            Box::pin(async move {
                let mut zk = ZkOptions::default();
                if let Some(t) = options.session_timeout {
                    zk.session_timeout = t;
                }
                Ok(Arc::new(ZkMetadataStore::connect_with(&uri, zk).await?)
                    as Arc<dyn MetadataStore>)
            })
        }),
    );
}

/// Connects to the `zk://` URI with default options.
pub async fn connect(uri: &str) -> Result<Arc<dyn MetadataStore>> {
    Ok(Arc::new(ZkMetadataStore::connect(uri).await?))
}

/// The znode path of a ledger's metadata under `root`, as BookKeeper's hierarchical layout
/// names it (e.g. `/ledgers/00/0000/L0001`).
pub fn ledger_path(root: &str, ledger: folio_types::LedgerId) -> String {
    paths::join(root, &paths::ledger_rel(ledger))
}

/// The znode path of a ledger's under-replication mark under `root`.
pub fn underreplicated_path(root: &str, ledger: folio_types::LedgerId) -> String {
    paths::join(root, &paths::underreplicated_rel(ledger))
}
