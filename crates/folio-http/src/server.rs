//! The admin endpoint's state, its router and its server: one [`AdminState`] per endpoint,
//! built from what a bookie hands over ([`BookieAdmin`], the bookie's `AdminServer`) or, for
//! a process that is not a bookie (`folio autorecovery`), from a metadata session alone
//! ([`serve_cluster`]). Routes that need the bookie's storage answer 404 there.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::http::StatusCode;
use axum::response::Response;
use folio_bookie::BookieStorage;
use folio_bookie::admin::{
    AdminEndpoint, AdminMetadata, AdminParts, AdminServer, HealthProbe, LocalDisk,
};
use folio_bookie::config::BookieConfig;
use folio_bookie::gc::GcHandle;
use folio_bookie::tls::ServerTls;
use tokio::sync::oneshot;
use tracing::warn;

use crate::bk_api::{self, ClusterAccess, LedgerReader, Session};

/// What the admin routes look at.
#[derive(Clone)]
pub(crate) struct AdminState {
    /// The bookie's id, or the election id of an autorecovery process.
    pub(crate) bookie_id: String,
    /// `None` in a process that is not a bookie.
    pub(crate) storage: Option<Arc<dyn BookieStorage>>,
    pub(crate) shutting_down: Arc<AtomicBool>,
    /// Sets point-in-time gauges (pending requests, journal numbers) just before a scrape.
    pub(crate) refresh: Option<Arc<dyn Fn() + Send + Sync>>,
    /// This bookie's directories and journal marks (`last_log_mark`, `list_disk_file`).
    pub(crate) local: Option<LocalDisk>,
    /// The metadata store and an entry reader, for the cluster routes.
    pub(crate) cluster: ClusterAccess,
    pub(crate) session: Session,
    /// The garbage collector (`/api/v1/bookie/gc`, `gc_details`).
    pub(crate) gc: Option<GcHandle>,
    /// Why the bookie is unhealthy, if it is (`/heartbeat`, `is_ready`).
    pub(crate) health: Option<HealthProbe>,
    /// The bearer token mutating requests and ledger reads must carry, if one is configured.
    pub(crate) token: Option<Arc<str>>,
    /// Whether `/api/v1/ledger/read` is served (`http_ledger_read_enabled`).
    pub(crate) ledger_read_enabled: bool,
    /// The ReplicationWorker of this process, once it runs.
    pub(crate) worker: WorkerSlot,
    /// The bookie's configuration as it runs (`config/server_config`); `None` in a process
    /// that is not a bookie.
    pub(crate) config: Option<Arc<parking_lot::Mutex<BookieConfig>>>,
    /// One sanity test at a time (`bookie/sanity`), as BookKeeper's `BookieSanityService`.
    pub(crate) sanity: Arc<tokio::sync::Mutex<()>>,
    /// Reads other bookies' HTTPS admin endpoints (crate::peers), if a CA is configured.
    pub(crate) peer_tls: Option<tokio_rustls::TlsConnector>,
    /// This bookie's `bookie` label on metrics, where one process runs several bookies
    /// (`folio_env::metric_label`): `/metrics` then shows only its own series.
    pub(crate) metrics_label: Option<std::sync::Arc<str>>,
}

/// Where the binary puts its ReplicationWorker's status once autorecovery runs in the
/// process (it starts after the bookies and their endpoints).
pub type WorkerSlot = Arc<std::sync::OnceLock<Arc<folio_autorecovery::WorkerStatus>>>;

impl AdminState {
    fn new(bookie_id: String, metadata: Option<AdminMetadata>, access: &Access) -> Self {
        // Install the recorder before the first request is counted.
        let _ = crate::metrics::prometheus();
        let cluster = ClusterAccess {
            store: metadata.as_ref().map(|m| m.store.clone()),
            connector: metadata.map(|m| m.connector),
            reader: access.reader.clone(),
        };
        AdminState {
            bookie_id,
            storage: None,
            shutting_down: Arc::new(AtomicBool::new(false)),
            refresh: None,
            local: None,
            session: Session::new(cluster.store.clone()),
            cluster,
            gc: None,
            health: None,
            token: access.token.clone(),
            ledger_read_enabled: access.ledger_read_enabled,
            worker: access.worker.clone(),
            config: None,
            sanity: Arc::default(),
            peer_tls: access.peer_tls.clone(),
            metrics_label: None,
        }
    }

    /// Why the bookie is not healthy now, if it is not.
    pub(crate) fn unhealthy(&self) -> Option<String> {
        self.health.as_ref().and_then(|probe| probe())
    }

    /// The bookie's storage, or a 404 saying this process is not a bookie.
    // The error is a whole Response, built only on that path (as bk_api's parameter checks).
    #[allow(clippy::result_large_err)]
    pub(crate) fn storage(&self) -> Result<&Arc<dyn BookieStorage>, Response> {
        self.storage.as_ref().ok_or_else(|| {
            bk_api::error(
                StatusCode::NOT_FOUND,
                format!("{} is not a bookie: it has no storage", self.bookie_id),
            )
        })
    }
}

/// Who may do what on an endpoint, and how ledgers are read.
#[derive(Clone, Default)]
struct Access {
    token: Option<Arc<str>>,
    ledger_read_enabled: bool,
    reader: Option<Arc<dyn LedgerReader>>,
    worker: WorkerSlot,
    peer_tls: Option<tokio_rustls::TlsConnector>,
}

/// The TLS client for HTTPS peers, from the PEM CA bundle at `ca` if one is given.
fn peer_tls(ca: Option<&std::path::Path>) -> Result<Option<tokio_rustls::TlsConnector>, String> {
    ca.map(crate::peers::peer_connector).transpose()
}

/// The router alone (the tests drive it without a socket too).
pub(crate) fn router(state: AdminState) -> Router {
    crate::bookie_routes::routes()
        .merge(bk_api::routes())
        .merge(crate::dashboard::routes())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::token::require_token,
        ))
        .with_state(state)
}

/// The admin endpoint of a bookie (`folio bookie`, `folio standalone`): the binary builds it
/// from the bookie's config and hands it to `BookieNode::start_with_admin`.
pub struct BookieAdmin {
    access: Access,
}

impl BookieAdmin {
    /// Reads the admin token file (`http_auth_token_file`) now, before anything starts: a
    /// missing or empty file is a start-up error, never an endpoint left open. So is an
    /// unreadable CA bundle for other bookies' HTTPS endpoints (`http_tls_ca_file`, else the
    /// bookie port's `tlsTrustStore`).
    /// `/api/v1/ledger/read` and the recover routes go through `reader`.
    pub fn from_config(
        config: &BookieConfig,
        reader: Option<Arc<dyn LedgerReader>>,
    ) -> Result<BookieAdmin, String> {
        // Installed before the bookie serves: its server keeps the handles of its
        // per-request metrics from the first request on.
        let _ = crate::metrics::prometheus();
        let token = match (&config.http_port, &config.http_auth_token_file) {
            (Some(_), Some(path)) => Some(Arc::from(crate::token::read_token_file(path)?)),
            _ => None,
        };
        let ca = config
            .http_tls_ca_file
            .as_deref()
            .or(config.tls_trust_store.as_deref());
        let peer_tls = match config.http_port {
            Some(_) => peer_tls(ca).map_err(|e| match &config.http_tls_ca_file {
                Some(_) => format!("http_tls_ca_file: {e}"),
                None => format!("tlsTrustStore (for peers' HTTPS endpoints): {e}"),
            })?,
            None => None,
        };
        Ok(BookieAdmin {
            access: Access {
                token,
                ledger_read_enabled: config.http_ledger_read_enabled,
                reader,
                worker: WorkerSlot::default(),
                peer_tls,
            },
        })
    }

    /// Shows this worker's repairs and failures on the autorecovery page once it is set.
    pub fn with_worker(mut self, worker: WorkerSlot) -> Self {
        self.access.worker = worker;
        self
    }
}

impl AdminServer for BookieAdmin {
    fn serve(&self, parts: AdminParts) -> std::io::Result<Box<dyn AdminEndpoint>> {
        let mut state = AdminState::new(parts.bookie_id.to_string(), parts.metadata, &self.access);
        state.storage = Some(parts.storage);
        state.config = Some(Arc::new(parking_lot::Mutex::new(parts.config)));
        state.refresh = Some(parts.refresh);
        state.local = Some(parts.disk);
        state.gc = Some(parts.gc);
        state.health = Some(parts.health);
        // Served from the bookie's own threads: their label is the bookie's.
        state.metrics_label = folio_env::metric_label::current();
        let handle = serve_on(parts.listener, state, parts.tls)?;
        Ok(Box::new(handle))
    }
}

/// Serves the cluster routes and the dashboard of a process that is not a bookie (`folio
/// autorecovery --http-port`) on `addr`, from `metadata`; `id` is the process's election id,
/// `worker` its ReplicationWorker, `peer_ca` the PEM CA bundle other bookies' HTTPS admin
/// endpoints are verified against.
pub async fn serve_cluster(
    addr: &str,
    id: String,
    metadata: AdminMetadata,
    token: Option<String>,
    reader: Option<Arc<dyn LedgerReader>>,
    worker: WorkerSlot,
    peer_ca: Option<&std::path::Path>,
) -> std::io::Result<HttpHandle> {
    let peer_tls = peer_tls(peer_ca).map_err(std::io::Error::other)?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let access = Access {
        token: token.map(Arc::from),
        ledger_read_enabled: false,
        reader,
        worker,
        peer_tls,
    };
    serve_on(listener, AdminState::new(id, Some(metadata), &access), None)
}

/// A running admin endpoint.
pub struct HttpHandle {
    local_addr: SocketAddr,
    stop: oneshot::Sender<()>,
    shutting_down: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl HttpHandle {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub async fn shutdown(self) {
        self.shutting_down.store(true, Ordering::Release);
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

impl AdminEndpoint for HttpHandle {
    fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    fn shutdown(
        self: Box<Self>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(HttpHandle::shutdown(*self))
    }
}

/// Serves the admin routes on a bound listener, over HTTPS when `tls` is given.
fn serve_on(
    listener: tokio::net::TcpListener,
    state: AdminState,
    tls: Option<Arc<ServerTls>>,
) -> std::io::Result<HttpHandle> {
    let local_addr = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let shutting_down = state.shutting_down.clone();
    let app = router(state);
    let stopped = async {
        let _ = stopped.await;
    };
    let task = match tls {
        None => tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(stopped)
                .await;
            if let Err(e) = served {
                warn!("admin HTTP endpoint failed: {e}");
            }
        }),
        Some(tls) => {
            let listener = crate::tls_listener::TlsListener::start(listener, tls, local_addr);
            tokio::spawn(async move {
                let served = axum::serve(listener, app)
                    .with_graceful_shutdown(stopped)
                    .await;
                if let Err(e) = served {
                    warn!("admin HTTPS endpoint failed: {e}");
                }
            })
        }
    };
    Ok(HttpHandle {
        local_addr,
        stop,
        shutting_down,
        task,
    })
}
