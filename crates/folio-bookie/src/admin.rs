//! The seam between a bookie and its admin HTTP endpoint. The node binds the admin port
//! itself (before the storage opens, so that a taken port is a start-up error) and hands the
//! endpoint everything it shows in one [`AdminParts`]; the endpoint is an [`AdminServer`]
//! supplied by whoever starts the node (the `folio` binary passes `folio-http`'s). The HTTP
//! crate sits above this one in the workspace, so the bookie names only this trait.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use folio_metadata::MetadataStore;
use folio_types::BookieId;

use crate::gc::GcHandle;
use crate::registration::Connector;
use crate::storage::BookieStorage;
use crate::tls::ServerTls;

/// Says why the bookie is not healthy (poisoned journal, not registered), or `None`.
pub type HealthProbe = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// This bookie's directories and its journal marks.
#[derive(Clone)]
pub struct LocalDisk {
    pub journal_dirs: Vec<PathBuf>,
    pub ledger_dirs: Vec<PathBuf>,
    pub index_dir: Option<PathBuf>,
    pub marks: Arc<dyn Fn() -> Vec<folio_storage::journal::Position> + Send + Sync>,
}

/// The metadata session the admin routes read the cluster through, and how to open another
/// once it has expired (a lost session never comes back).
#[derive(Clone)]
pub struct AdminMetadata {
    pub store: Arc<dyn MetadataStore>,
    pub connector: Connector,
}

/// What a bookie hands its admin endpoint.
pub struct AdminParts {
    /// The bound admin port.
    pub listener: tokio::net::TcpListener,
    /// HTTPS when `http_tls_key_file` and `http_tls_certificate_file` are set.
    pub tls: Option<Arc<ServerTls>>,
    pub bookie_id: BookieId,
    /// The configuration the bookie runs with (`/api/v1/config/server_config`).
    pub config: crate::config::BookieConfig,
    pub storage: Arc<dyn BookieStorage>,
    /// Sets point-in-time gauges (pending requests, journal numbers) just before a scrape.
    pub refresh: Arc<dyn Fn() + Send + Sync>,
    pub disk: LocalDisk,
    /// `None` for a bookie that runs without a metadata store (tests, benchmarks).
    pub metadata: Option<AdminMetadata>,
    pub gc: GcHandle,
    pub health: HealthProbe,
}

/// A running admin endpoint.
pub trait AdminEndpoint: Send + Sync {
    fn local_addr(&self) -> SocketAddr;
    /// Stops serving; resolves once the server task has ended.
    fn shutdown(self: Box<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// Starts an admin endpoint on the parts a bookie hands it.
pub trait AdminServer: Send + Sync {
    fn serve(&self, parts: AdminParts) -> std::io::Result<Box<dyn AdminEndpoint>>;
}
