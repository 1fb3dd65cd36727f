//! Folio's metadata layer: the contract every metadata service driver implements
//! ([`MetadataStore`], the umbrella of BookKeeper's managers: [`RegistrationManager`],
//! [`ClusterManager`], [`LedgerManager`], [`UnderreplicationManager`], [`AuditorElection`]), BookKeeper's serialization of the records it holds
//! ([`mod@format`]), the metadata service URI ([`MetadataUri`]), and the embedded drivers
//! (`mem://` in [`mem`], `sqlite://` in [`sqlite`]).

#[cfg(feature = "conformance")]
pub mod conformance;
pub mod driver;
pub mod error;
pub mod format;
pub mod layout;
pub mod mem;
pub mod registry;
pub mod sqlite;
pub mod store;
pub mod text;
pub mod uri;

use std::sync::Arc;

use folio_types::LedgerId;
use folio_types::metadata::LedgerMetadata;

pub use error::{MetadataError, Result};
pub use store::*;
pub use uri::{MetadataUri, ServiceUri};

/// The metadata contract's traits, for `use folio_metadata::prelude::*`: the methods of
/// [`MetadataStore`]'s managers are called on an `Arc<dyn MetadataStore>` only with their
/// trait in scope.
pub mod prelude {
    pub use crate::store::{
        AuditorElection, ClusterManager, LedgerManager, MetadataStore, RegistrationManager,
        UnderreplicationManager,
    };
}

/// Connects to an embedded store (`sqlite://` or `mem://`) with default options.
/// `zk://` and `etcd://` live in their own crates (`folio-metadata-zk`,
/// `folio-metadata-etcd`); asked for one of those, this says so.
pub async fn connect_embedded(uri: &str) -> Result<Arc<dyn MetadataStore>> {
    match MetadataUri::parse(uri)? {
        MetadataUri::Mem { name } => Ok(Arc::new(mem::MemMetadataStore::connect(&name))),
        MetadataUri::Sqlite { path } => {
            let store =
                sqlite::SqliteMetadataStore::open(&path, sqlite::SqliteOptions::default()).await?;
            Ok(Arc::new(store))
        }
        other => Err(MetadataError::Unsupported {
            what: format!(
                "connecting to {other} here (use the folio-metadata-{} crate)",
                other.scheme()
            ),
            driver: "embedded".into(),
        }),
    }
}

/// A fresh cluster instance id: a random (version 4) UUID string, as BookKeeper's.
pub fn new_instance_id() -> String {
    instance_id_from(&mut fastrand::Rng::new())
}

/// A random (version 4) UUID string drawn from `rng`.
pub fn instance_id_from(rng: &mut fastrand::Rng) -> String {
    let mut b: [u8; 16] = std::array::from_fn(|_| rng.u8(..));
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

pub(crate) use driver::{now_ms, page};

/// [`driver::check_page_limit`], capped: the embedded drivers read a page into memory.
pub(crate) fn check_limit(limit: usize) -> Result<usize> {
    driver::check_page_limit(limit)?;
    Ok(limit.min(1_000_000))
}

/// A create found a record already there: BookKeeper's rule is that it is our own
/// earlier attempt (success) when it carries the same `cToken`, else `AlreadyExists`.
pub(crate) fn retried_create(
    ledger: LedgerId,
    existing: &[u8],
    version: Version,
    metadata: &LedgerMetadata,
) -> Result<Version> {
    let exists = || MetadataError::already_exists(format!("ledger {ledger}"));
    match format::decode_ledger_metadata(ledger, existing) {
        Ok(m) if metadata.c_token != 0 && m.c_token == metadata.c_token => Ok(version),
        _ => Err(exists()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn instance_ids_are_uuid_v4_strings() {
        let a = super::new_instance_id();
        let b = super::new_instance_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
        assert!(a.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
    }
}
