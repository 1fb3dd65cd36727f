//! Folio's `etcd://host:port[,host:port]/prefix` metadata driver: the metadata contract of
//! `folio-metadata` on etcd v3, in Apache BookKeeper's etcd key schema where it has one
//! (spec/bookkeeper-protocol.md §6), plus the under-replication queue and the Auditor election
//! that BookKeeper's etcd driver lacks (Folio's design). `docs/formats/etcd-layout.md` holds
//! the same table.
//!
//! Keys under the scope `S` (the URI path, e.g. `/ledgers`):
//!
//! | key | value | origin |
//! |---|---|---|
//! | `S` | empty: the cluster exists | BookKeeper |
//! | `S/layout` | `2\norg.apache.bookkeeper.metadata.etcd.EtcdLedgerManagerFactory:0` | BookKeeper |
//! | `S/instanceid` | the cluster's UUID | BookKeeper |
//! | `S/cookies`, `S/cookies/<bookie>` | empty / the cookie | BookKeeper |
//! | `S/bookies`, `S/bookies/writable`, `S/bookies/readonly` | empty | BookKeeper |
//! | `S/bookies/writable/<bookie>`, `S/bookies/readonly/<bookie>` | `BookieServiceInfoFormat` bytes (BookKeeper writes empty), on the session lease | BookKeeper keys |
//! | `S/ledgers`, `S/ledgers/<UUID(0,id)>` | empty / ledger metadata, format version 3 | BookKeeper |
//! | `S/buckets`, `S/buckets/<%03d>` | empty: id-generation counters (id = bucket << 56 \| key version) | BookKeeper |
//! | `S/underreplication` | empty | BookKeeper |
//! | `S/underreplication/ledgers/<UUID(0,id)>` | text `UnderreplicatedLedgerFormat` (as on ZooKeeper) | Folio |
//! | `S/underreplication/locks/<UUID(0,id)>` | text `LockDataFormat`, on the holder's lease | Folio |
//! | `S/underreplication/auditorelection/<lease hex>-<n>` | text `AuditorVoteFormat`, on the candidate's lease; lowest create revision = Auditor | Folio |
//! | `S/underreplication/disable` | empty: presence disables autorecovery | Folio |
//! | `S/underreplication/lostBookieRecoveryDelay` | decimal seconds | Folio |
//!
//! `UUID(0,id)` is Java's `new UUID(0, id).toString()`: `00000000-0000-0000-hhhh-hhhhhhhhhhhh`,
//! so key order is id order. Versions are mod revisions; every compare-and-set is one
//! transaction comparing the key's mod revision (create: create revision == 0). One store is
//! one lease (TTL = session timeout, kept alive every TTL/3): closing revokes it, and an
//! expired lease takes every registration, lock and vote of the store with it.

mod election;
mod keys;
mod session;
mod store;
mod underreplication;
mod uri;
mod watches;

use std::sync::Arc;

use folio_metadata::{MetadataStore, Result};

pub use keys::{ETCD_LAYOUT, ledger_uuid};
pub use session::EtcdOptions;
pub use store::EtcdMetadataStore;
pub use uri::EtcdUri;

/// Registers this driver for `etcd://` URIs in [`folio_metadata::registry`], so that every
/// `connect` of the program reaches etcd.
pub fn register() {
    folio_metadata::registry::register(
        "etcd",
        Arc::new(|uri, _parsed, options| {
            let uri = uri.to_string();
            Box::pin(async move {
                let mut etcd = EtcdOptions::default();
                if let Some(t) = options.session_timeout {
                    // etcd leases are whole seconds, at least 2 (the driver refuses less).
                    etcd.session_ttl = t.max(std::time::Duration::from_secs(2));
                }
                Ok(Arc::new(EtcdMetadataStore::connect_with(&uri, etcd).await?)
                    as Arc<dyn MetadataStore>)
            })
        }),
    );
}

/// Connects to the `etcd://` URI with default options.
pub async fn connect(uri: &str) -> Result<Arc<dyn MetadataStore>> {
    Ok(Arc::new(EtcdMetadataStore::connect(uri).await?))
}
