//! The one place the `folio` binary turns a metadata service URI into a session: it
//! dispatches on the scheme (`sqlite://` and `mem://` to the embedded drivers, `zk://` and
//! `etcd://` to their own crates) and bounds the wait, so an unreachable store is one clear
//! error instead of a hang.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use folio_metadata::{MetadataStore, MetadataUri};

/// How long connecting may take before the store is reported unreachable. Generous: the
/// ZooKeeper and etcd clients retry inside this window.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// Whether a missing `sqlite://` database file may be created by connecting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// Create it (`folio shell initnewcluster`, `folio standalone`, `folio bookie`).
    Create,
    /// Refuse: a client command pointed at a path with no database is a typo, and
    /// creating an empty database there would only hide it.
    Refuse,
}

/// The URI given by `--metadata` or `FOLIO_METADATA`, or an error saying how to give one.
pub fn require_uri(metadata: Option<&str>) -> anyhow::Result<&str> {
    metadata.ok_or_else(|| {
        anyhow!("no metadata service given: pass --metadata URI or set FOLIO_METADATA")
    })
}

/// Connects to the metadata service at `uri`.
pub async fn connect(uri: &str, missing: Missing) -> anyhow::Result<Arc<dyn MetadataStore>> {
    let parsed = MetadataUri::parse(uri)?;
    if let (MetadataUri::Sqlite { path }, Missing::Refuse) = (&parsed, missing)
        && !path.exists()
    {
        bail!(
            "metadata service {uri} is unreachable: no database at {} (start `folio standalone`, or run `folio shell initnewcluster`)",
            path.display()
        );
    }
    let connecting = async {
        let store: Arc<dyn MetadataStore> = match parsed {
            MetadataUri::Zk { .. } => folio_metadata_zk::connect(uri).await?,
            MetadataUri::Etcd { .. } => folio_metadata_etcd::connect(uri).await?,
            _ => folio_metadata::connect_embedded(uri).await?,
        };
        anyhow::Ok(store)
    };
    tokio::time::timeout(CONNECT_TIMEOUT, connecting)
        .await
        .map_err(|_| {
            anyhow!(
                "metadata service {uri} is unreachable: no session after {} s",
                CONNECT_TIMEOUT.as_secs()
            )
        })?
        .with_context(|| format!("cannot connect to metadata service {uri}"))
}
