//! The one place the `folio` binary turns a metadata service URI into a session: it
//! dispatches on the scheme (`sqlite://` and `mem://` to the embedded drivers, `zk://` and
//! `etcd://` to their own crates) and bounds the wait, so an unreachable store is one clear
//! error instead of a hang. Every command, the bookie and autorecovery connect here, so every
//! driver works everywhere, and the session timeout (BookKeeper's `zkTimeout`) reaches each.

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

/// Runs `f` on a session with the metadata service at `uri` (a missing sqlite database
/// created or refused as `missing` says), on a runtime of its own, and closes the session
/// after (best effort), whatever `f` returned: for the synchronous shell commands.
pub fn with_store<T>(
    uri: &str,
    missing: Missing,
    f: impl AsyncFnOnce(Arc<dyn MetadataStore>) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let store = connect(uri, missing).await?;
        let result = f(store.clone()).await;
        let _ = store.close().await;
        result
    })
}

/// Connects to the metadata service at `uri` with the drivers' default session timeout.
pub async fn connect(uri: &str, missing: Missing) -> anyhow::Result<Arc<dyn MetadataStore>> {
    connect_with(uri, missing, None).await
}

/// Connects to the metadata service at `uri`; `session_timeout` (BookKeeper's `zkTimeout`,
/// the config's `metadata_session_timeout_ms`) is how long this session's ephemeral records
/// (registrations, locks, votes) outlive a dead process, on every driver.
pub async fn connect_with(
    uri: &str,
    missing: Missing,
    session_timeout: Option<Duration>,
) -> anyhow::Result<Arc<dyn MetadataStore>> {
    let parsed = MetadataUri::parse(uri)?;
    if let (MetadataUri::Sqlite { path }, Missing::Refuse) = (&parsed, missing)
        && !path.exists()
    {
        bail!(
            "metadata service {uri} is unreachable: no database at {} (start `folio standalone`, or run `folio shell initnewcluster`)",
            path.display()
        );
    }
    let connecting = open_store(uri, session_timeout);
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

/// A session of `uri`'s driver, through the one registry
/// (`folio_metadata::registry`, where [`register_drivers`] put ZooKeeper and etcd), with the
/// session timeout when given. Typed errors, no time bound: [`connect_with`] adds both the
/// bound and the message; the bookie's reconnection after a lost session calls this.
pub async fn open_store(
    uri: &str,
    session_timeout: Option<Duration>,
) -> folio_metadata::Result<Arc<dyn MetadataStore>> {
    register_drivers();
    folio_metadata::registry::connect(
        uri,
        folio_metadata::registry::ConnectOptions { session_timeout },
    )
    .await
}

/// Puts the ZooKeeper and etcd drivers in the registry (once; the embedded ones are built in).
pub fn register_drivers() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        folio_metadata_zk::register();
        folio_metadata_etcd::register();
    });
}
