//! Reaches the metadata service a URI names: `zk://` through folio-metadata-zk, the embedded
//! stores (`sqlite://`, `mem://`) through folio-metadata. One place, so `folio bookie` and
//! `folio shell` accept the same URIs.

use std::sync::Arc;

use folio_metadata::{MetadataStore, MetadataUri};

/// Connects to the metadata service `uri` with the driver its scheme names.
pub async fn connect(uri: &str) -> folio_metadata::Result<Arc<dyn MetadataStore>> {
    match MetadataUri::parse(uri)? {
        MetadataUri::Zk { .. } => folio_metadata_zk::connect(uri).await,
        _ => folio_metadata::connect_embedded(uri).await,
    }
}
