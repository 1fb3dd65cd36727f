//! The admin HTTP endpoint: the routes of BookKeeper's bookie HTTP service, with its paths
//! and JSON field names. For monitoring: `/heartbeat` (liveness), `/metrics` (Prometheus
//! text: request latency histograms per operation, bytes in and out, connections),
//! `/api/v1/bookie/state`, `/api/v1/bookie/is_ready` and `/api/v1/bookie/info` (free and
//! total disk space). This bookie's disk: `/api/v1/bookie/last_log_mark`,
//! `/api/v1/bookie/list_disk_file`, `/api/v1/bookie/gc`, `/api/v1/bookie/gc_details`. The cluster, through the metadata
//! store (see [`admin_api`]): `/api/v1/ledger/list`, `/api/v1/ledger/metadata`,
//! `/api/v1/ledger/read`, `/api/v1/bookie/list_bookies`, `/api/v1/bookie/list_bookie_info`.
//!
//! Errors are JSON `{"error": "..."}` with a status that fits: 400 for a bad parameter, 404
//! for a missing ledger, 503 when the metadata store cannot be reached.
//!
//! Protection (docs/security.md): the endpoint listens on loopback unless
//! `http_listen_address` says otherwise. With a bearer token ([`AdminState::with_token`],
//! `http_auth_token_file`), every PUT, POST and DELETE and every `/api/v1/ledger/read` need
//! `Authorization: Bearer <token>` (compared in constant time), else 401 naming what is
//! missing; the GET status routes stay open. `/api/v1/ledger/read` answers 403 unless
//! `http_ledger_read_enabled`.
//!
//! `/heartbeat` and `is_ready` tell the truth, as BookKeeper's do: a bookie that cannot take
//! writes for good (its journal is poisoned by a failed fsync, invariant 9) or that is not
//! registered (its metadata session was lost, or it has not registered yet) answers 503 with
//! the cause as JSON `{"error": ...}`, so a monitor or an orchestrator does not count it as
//! healthy. A bookie read-only only for a full disk is still healthy (it serves reads, and
//! turns writable again once space is freed).

pub mod admin_api;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::sync::oneshot;
use tracing::warn;

use crate::storage::BookieStorage;

/// The process-wide Prometheus recorder (the `metrics` facade has one global recorder, so every
/// bookie of a process shares it). `None` if something else installed a recorder first.
pub fn prometheus() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| match recorder().install_recorder() {
            Ok(h) => Some(h),
            Err(e) => {
                warn!("metrics recorder not installed: {e}");
                None
            }
        })
        .as_ref()
}

/// Folio's own latency histograms get buckets (seconds, 100 µs to 10 s); everything else
/// is a summary with BookKeeper's quantiles, as its Prometheus provider reports op stats.
fn recorder() -> PrometheusBuilder {
    const BUCKETS: &[f64] = &[
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
        5.0, 10.0,
    ];
    // Both fail only on an empty list; these are constants.
    PrometheusBuilder::new()
        .set_quantiles(crate::bk_metrics::QUANTILES)
        .expect("quantiles")
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full(
                "folio_bookie_request_latency_seconds".into(),
            ),
            BUCKETS,
        )
        .expect("buckets")
}

/// What the admin routes look at.
#[derive(Clone)]
pub struct AdminState {
    bookie_id: String,
    storage: Arc<dyn BookieStorage>,
    shutting_down: Arc<AtomicBool>,
    /// Sets point-in-time gauges (pending requests, journal numbers) just before a scrape.
    refresh: Option<Arc<dyn Fn() + Send + Sync>>,
    /// This bookie's directories and journal marks (`last_log_mark`, `list_disk_file`).
    local: Option<admin_api::LocalDisk>,
    /// The metadata store and an entry reader, for the cluster routes.
    cluster: admin_api::ClusterAccess,
    session: admin_api::Session,
    /// The garbage collector (`/api/v1/bookie/gc`, `gc_details`).
    gc: Option<crate::gc::GcHandle>,
    /// Why the bookie is unhealthy, if it is (`/heartbeat`, `is_ready`).
    health: Option<HealthProbe>,
    /// The bearer token mutating requests and ledger reads must carry, if one is configured.
    token: Option<Arc<str>>,
    /// Whether `/api/v1/ledger/read` is served (`http_ledger_read_enabled`).
    pub(crate) ledger_read_enabled: bool,
}

/// The path whose reads need the token like a mutation (it serves ledger payloads).
pub const LEDGER_READ_PATH: &str = "/api/v1/ledger/read";

/// Says why the bookie is not healthy (poisoned journal, not registered), or `None`.
pub type HealthProbe = Arc<dyn Fn() -> Option<String> + Send + Sync>;

impl AdminState {
    pub fn new(bookie_id: String, storage: Arc<dyn BookieStorage>) -> Self {
        // Install the recorder before the first request is counted.
        let _ = prometheus();
        AdminState {
            bookie_id,
            storage,
            shutting_down: Arc::new(AtomicBool::new(false)),
            refresh: None,
            local: None,
            cluster: admin_api::ClusterAccess::default(),
            session: admin_api::Session::default(),
            gc: None,
            health: None,
            token: None,
            ledger_read_enabled: false,
        }
    }

    /// Requires `Authorization: Bearer <token>` on every PUT, POST and DELETE and on
    /// `/api/v1/ledger/read`.
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token.map(Arc::from);
        self
    }

    /// Serves `/api/v1/ledger/read` (off by default: 403).
    pub fn with_ledger_read(mut self, enabled: bool) -> Self {
        self.ledger_read_enabled = enabled;
        self
    }

    /// Answers `/heartbeat` and `is_ready` with 503 and the probe's cause while it has one.
    pub fn with_health(mut self, probe: HealthProbe) -> Self {
        self.health = Some(probe);
        self
    }

    /// Why the bookie is not healthy now, if it is not.
    fn unhealthy(&self) -> Option<String> {
        self.health.as_ref().and_then(|probe| probe())
    }

    /// Serves `/api/v1/bookie/gc` and `gc_details` from this collector.
    pub fn with_gc(mut self, gc: crate::gc::GcHandle) -> Self {
        self.gc = Some(gc);
        self
    }

    /// Serves this bookie's directories and marks (`last_log_mark`, `list_disk_file`).
    pub fn with_local_disk(
        mut self,
        journal_dirs: Vec<PathBuf>,
        ledger_dirs: Vec<PathBuf>,
        index_dir: Option<PathBuf>,
        marks: Arc<dyn Fn() -> Vec<folio_storage::journal::Position> + Send + Sync>,
    ) -> Self {
        self.local = Some(admin_api::LocalDisk {
            journal_dirs,
            ledger_dirs,
            index_dir,
            marks,
        });
        self
    }

    /// Serves the cluster routes from this metadata store (and `ledger/read` through
    /// `reader`, when given).
    pub fn with_cluster(mut self, cluster: admin_api::ClusterAccess) -> Self {
        self.session = admin_api::Session::new(cluster.store.clone());
        self.cluster = cluster;
        self
    }

    /// Runs `refresh` before each `/metrics` render, to set gauges that are read, not counted.
    pub fn with_refresh(mut self, refresh: Arc<dyn Fn() + Send + Sync>) -> Self {
        self.refresh = Some(refresh);
        self
    }
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

/// The router alone (tests drive it without a socket too).
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/heartbeat", get(heartbeat))
        .route("/metrics", get(metrics_text))
        .route("/api/v1/bookie/state", get(bookie_state))
        .route(
            "/api/v1/bookie/state/readonly",
            get(read_only_state).put(set_read_only_state),
        )
        .route("/api/v1/bookie/is_ready", get(is_ready))
        .route("/api/v1/bookie/info", get(bookie_info))
        .merge(admin_api::routes())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_token,
        ))
        .with_state(state)
}

/// Reads the admin token from `path`: its content without surrounding whitespace. A missing,
/// unreadable or empty file is an error naming the file.
pub fn read_token_file(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read http_auth_token_file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!(
            "http_auth_token_file {} is empty: put the admin bearer token in it",
            path.display()
        ));
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "http_auth_token_file {}: the token must be one line without spaces",
            path.display()
        ));
    }
    Ok(token.to_string())
}

/// Equal in time independent of where the bytes differ (only the expected length shows).
fn same_token(given: &[u8], expected: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != expected.len());
    for (i, e) in expected.iter().enumerate() {
        diff |= e ^ given.get(i).copied().unwrap_or(0);
    }
    std::hint::black_box(diff) == 0
}

/// With a token configured, mutating requests and ledger reads must carry it.
async fn require_token(State(s): State<AdminState>, request: Request, next: Next) -> Response {
    let Some(expected) = &s.token else {
        return next.run(request).await;
    };
    let guarded = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) || request.uri().path() == LEDGER_READ_PATH;
    if !guarded {
        return next.run(request).await;
    }
    let what = format!("{} {}", request.method(), request.uri().path());
    let given = match request.headers().get(header::AUTHORIZATION) {
        None => {
            return unauthorized(format!(
                "{what} needs an Authorization: Bearer <token> header (http_auth_token_file is set)"
            ));
        }
        Some(v) => v.as_bytes(),
    };
    let Some(token) = given
        .strip_prefix(b"Bearer ")
        .or_else(|| given.strip_prefix(b"bearer "))
    else {
        return unauthorized(format!(
            "{what}: the Authorization header is not a bearer token (expected \"Bearer <token>\")"
        ));
    };
    if !same_token(token, expected.as_bytes()) {
        return unauthorized(format!("{what}: wrong bearer token"));
    }
    next.run(request).await
}

/// 401 with `{"error": why}` and the scheme the client must use.
fn unauthorized(why: String) -> Response {
    let mut r = admin_api::error(StatusCode::UNAUTHORIZED, why);
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer realm=\"folio-admin\""),
    );
    r
}

/// Binds `addr` and serves the admin routes.
pub async fn serve(addr: &str, state: AdminState) -> std::io::Result<HttpHandle> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    serve_on(listener, state)
}

/// Serves the admin routes on a bound listener.
pub fn serve_on(
    listener: tokio::net::TcpListener,
    state: AdminState,
) -> std::io::Result<HttpHandle> {
    serve_tls_on(listener, state, None)
}

/// Serves the admin routes on a bound listener, over HTTPS when `tls` is given.
pub fn serve_tls_on(
    listener: tokio::net::TcpListener,
    state: AdminState,
    tls: Option<Arc<crate::tls::ServerTls>>,
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
            let listener = TlsListener::start(listener, tls, local_addr);
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

/// At most this many TLS handshakes of the admin endpoint run at once; further connections
/// are closed at accept (a peer cannot hold unbounded handshakes).
const MAX_HANDSHAKES: usize = 256;

/// Hands finished TLS connections to axum. Handshakes run on their own tasks, bounded in
/// number and in time, so a slow or silent peer delays nobody's accept.
struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(TlsStream, SocketAddr)>,
    local: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

type TlsStream = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;

impl TlsListener {
    fn start(
        listener: tokio::net::TcpListener,
        tls: Arc<crate::tls::ServerTls>,
        local: SocketAddr,
    ) -> TlsListener {
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        let accepting = tokio::spawn(async move {
            let slots = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
            let timeout = tls.settings().start_tls_timeout;
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(a) => a,
                    Err(e) => {
                        warn!("admin HTTPS accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    warn!(%peer, "admin HTTPS: {MAX_HANDSHAKES} handshakes running, closing");
                    continue;
                };
                let acceptor = tls.acceptor();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, "admin HTTPS handshake failed: {e}"),
                        Err(_) => tracing::debug!(%peer, "admin HTTPS handshake timed out"),
                    }
                });
            }
        });
        TlsListener {
            ready,
            local,
            accepting,
        }
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(ready) => ready,
            // The accepting task ended (aborted): nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

async fn heartbeat(State(s): State<AdminState>) -> Response {
    match s.unhealthy() {
        Some(cause) => unavailable(cause),
        None => (StatusCode::OK, "OK\n").into_response(),
    }
}

/// 503 with `{"error": cause}`.
fn unavailable(cause: String) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{:#}\n", serde_json::json!({ "error": cause })),
    )
        .into_response()
}

async fn metrics_text(State(s): State<AdminState>) -> Response {
    metrics::gauge!("folio_bookie_read_only").set(if s.storage.is_read_only() { 1.0 } else { 0.0 });
    if let Some(refresh) = &s.refresh {
        refresh();
    }
    match prometheus() {
        Some(h) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            h.render(),
        )
            .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics recorder not installed\n",
        )
            .into_response(),
    }
}

fn json(value: serde_json::Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        format!("{value:#}\n"),
    )
        .into_response()
}

async fn bookie_state(State(s): State<AdminState>) -> Response {
    let read_only = s.storage.is_read_only();
    let shutting_down = s.shutting_down.load(Ordering::Acquire);
    json(serde_json::json!({
        "running": !shutting_down,
        "readOnly": read_only,
        "shuttingDown": shutting_down,
        "availableForHighPriorityWrites": !shutting_down,
    }))
}

async fn read_only_state(State(s): State<AdminState>) -> Response {
    json(serde_json::json!({ "readOnly": s.storage.is_read_only() }))
}

/// BookKeeper's `PUT /api/v1/bookie/state/readonly` with `{"readOnly": true|false}`: the
/// operator's switch. The registration follows within a second (its probe reads the same
/// state); turning it off leaves any other cause (a full disk, a failed fsync) in force, and
/// the answer says what is in effect.
async fn set_read_only_state(State(s): State<AdminState>, body: axum::body::Bytes) -> Response {
    let wanted = match serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("readOnly").and_then(|b| b.as_bool()))
    {
        Some(b) => b,
        None => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(serde_json::json!({
                    "error": "expected a JSON body {\"readOnly\": true|false}"
                })),
            )
                .into_response();
        }
    };
    if let Err(e) = s.storage.set_manual_read_only(wanted) {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(serde_json::json!({ "error": e.to_string() })),
        )
            .into_response();
    }
    json(serde_json::json!({ "readOnly": s.storage.is_read_only() }))
}

async fn is_ready(State(s): State<AdminState>) -> Response {
    if s.shutting_down.load(Ordering::Acquire) {
        return unavailable("bookie is shutting down".into());
    }
    match s.unhealthy() {
        Some(cause) => unavailable(cause),
        None => (StatusCode::OK, "OK\n").into_response(),
    }
}

async fn bookie_info(State(s): State<AdminState>) -> Response {
    match s.storage.space() {
        Ok(space) => json(serde_json::json!({
            "bookieId": s.bookie_id,
            "freeSpace": space.free,
            "totalSpace": space.total,
        })),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot read disk space: {e}\n"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::same_token;

    #[test]
    fn tokens_match_only_exactly() {
        assert!(same_token(b"abc123", b"abc123"));
        for other in [&b""[..], b"abc12", b"abc1234", b"abc124", b"Abc123"] {
            assert!(!same_token(other, b"abc123"), "{other:?}");
        }
    }
}
