//! The admin routes beyond monitoring, with BookKeeper's paths and parameters:
//!
//! * `GET /api/v1/ledger/list[?print_metadata=true]`: `{"<ledger id>": null | metadata}`.
//! * `GET /api/v1/ledger/metadata?ledger_id=N`: `{"<ledger id>": metadata}`.
//! * `GET /api/v1/ledger/read?ledger_id=N[&start_entry_id=A][&end_entry_id=B]`:
//!   `{"<entry id>": "<payload>"}` up to the last add confirmed (no recovery, no fencing).
//! * `GET /api/v1/bookie/list_bookies?type=rw|ro[&print_hostnames=true]`:
//!   `{"<bookie id>": null | "<host>"}`.
//! * `GET /api/v1/bookie/list_bookie_info`: free and total space of every writable bookie
//!   (asked over its own admin endpoint) and the cluster's sums.
//! * `GET /api/v1/bookie/last_log_mark`: per journal directory, the persisted mark.
//! * `GET /api/v1/bookie/list_disk_file[?file_type=journal|entrylog|index]`.
//! * `PUT /api/v1/bookie/gc`: starts a garbage collection round in the background and
//!   answers at once; `GET /api/v1/bookie/gc`: `{"is_in_force_gc": "true"|"false"}`.
//! * `GET /api/v1/bookie/gc_details`: what the last round did (a one-element list, as
//!   BookKeeper's one status per ledger storage).
//! * `PUT /api/v1/bookie/gc/suspend_compaction` with `{"suspendMajor": true,
//!   "suspendMinor": true}` (either), `GET` for `{"isMajorGcSuspended": "true"|"false",
//!   "isMinorGcSuspended": ...}`; `PUT /api/v1/bookie/gc/resume_compaction` with
//!   `{"resumeMajor": .., "resumeMinor": ..}`: BookKeeper's bodies and answers.
//! * `config/server_config`, `bookie/sanity`, `ledger/delete`: see `bookie_admin`.

// Handlers return axum's `Response` as the error of their parameter checks: large, but built
// only on the error path, once per request.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use folio_metadata::{MetadataError, MetadataStore};
use folio_types::BookieId;
use folio_types::metadata::LedgerMetadata;

use folio_bookie::admin::LocalDisk;
use folio_bookie::registration::Connector;

use crate::bookie_routes::json;
pub(crate) use crate::peers::{Peer, peer_endpoint, peer_get};
use crate::server::AdminState;

mod autorecovery;
mod bookie_admin;
pub(crate) use bookie_admin::SANITY_PATH;

/// How long one metadata call may take before the store counts as unreachable.
const METADATA_TIMEOUT: Duration = Duration::from_secs(15);
/// At most this many entries per `ledger/read` (a response is built in memory).
pub(crate) const MAX_READ_ENTRIES: i64 = 10_000;

/// What [`LedgerReader::read`] returns: (entry id, payload) pairs or why not.
pub type ReadFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<(i64, Bytes)>, String>> + Send + 'a>>;

/// What [`LedgerReader::sanity`] returns: `Err` says what failed.
pub type SanityFuture<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;

/// What [`LedgerReader::last_add_confirmed`] returns.
pub type LacFuture<'a> = Pin<Box<dyn Future<Output = Result<i64, String>> + Send + 'a>>;

/// What the admin routes reach through the client library and autorecovery (provided by
/// the binary: the bookie crate depends on neither).
pub trait LedgerReader: Send + Sync {
    /// Entries `first..=last` (`last` = None: up to the last add confirmed) of `ledger`,
    /// opened without recovery, as (entry id, payload).
    fn read(&self, ledger: i64, first: i64, last: Option<i64>) -> ReadFuture<'_>;

    /// The last add confirmed of `ledger` as the bookies report it, opened without recovery
    /// (a look never fences the writer).
    fn last_add_confirmed(&self, ledger: i64) -> LacFuture<'_>;

    /// Starts, in the background, moving every replica off `bookies` (BookKeeper's
    /// `PUT /api/v1/autorecovery/bookie`); with `decommission` (one bookie, which must not
    /// be writable) as `decommissionbookie` does. Deletes their cookies when asked. An error
    /// says why it could not start; how it ends is logged.
    fn start_recover(
        &self,
        bookies: Vec<folio_types::BookieId>,
        decommission: bool,
        delete_cookie: bool,
    ) -> Result<(), String>;

    /// BookKeeper's bookie sanity test through the client: a ledger written to `bookie`
    /// alone and read back. The default cannot run it.
    fn sanity(&self, bookie: BookieId) -> SanityFuture<'_> {
        let _ = bookie;
        Box::pin(async { Err("this endpoint cannot run the sanity test".to_string()) })
    }

    /// The recovers and decommissions [`LedgerReader::start_recover`] started, as they stand
    /// (the newest last; a few finished ones are kept).
    fn operations(&self) -> Vec<RecoverProgress> {
        Vec::new()
    }
}

/// A recover or decommission, started here or read from its operation record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoverProgress {
    pub bookies: Vec<String>,
    pub decommission: bool,
    /// When it started, ms since the epoch.
    pub started_ms: i64,
    /// The ledgers to repair, once they are counted.
    pub total: Option<usize>,
    /// The ledgers done so far (repaired, deleted meanwhile, or failed).
    pub done: usize,
    /// The ledgers left as they were, with why.
    pub failed: Vec<(i64, String)>,
    /// How it ended (`Err`: why it stopped); `None` while it runs.
    pub finished: Option<Result<String, String>>,
    /// The process running it.
    pub origin: Option<crate::operations::Origin>,
    /// The name of its operation record in the metadata store (crate::operations).
    pub record: Option<String>,
}

/// What the cluster routes use; without a store they answer 503.
#[derive(Clone, Default)]
pub(crate) struct ClusterAccess {
    /// The session used first.
    pub store: Option<Arc<dyn MetadataStore>>,
    /// Opens a new session once that one has expired (a lost session never comes back).
    pub connector: Option<Connector>,
    pub reader: Option<Arc<dyn LedgerReader>>,
}

/// The cluster routes' current metadata session, replaced after it expires.
#[derive(Clone, Default)]
pub(crate) struct Session(Arc<parking_lot::Mutex<Option<Arc<dyn MetadataStore>>>>);

impl Session {
    pub(crate) fn new(store: Option<Arc<dyn MetadataStore>>) -> Self {
        Session(Arc::new(parking_lot::Mutex::new(store)))
    }
}

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route("/api/v1/ledger/list", get(ledger_list))
        .route("/api/v1/ledger/metadata", get(ledger_metadata))
        .route("/api/v1/ledger/read", get(ledger_read))
        .route("/api/v1/bookie/list_bookies", get(list_bookies))
        .route("/api/v1/bookie/cluster_info", get(cluster_info))
        .route("/api/v1/bookie/list_bookie_info", get(list_bookie_info))
        .route("/api/v1/bookie/last_log_mark", get(last_log_mark))
        .route("/api/v1/bookie/list_disk_file", get(list_disk_file))
        .route("/api/v1/bookie/gc", get(gc_status).put(gc_trigger))
        .route("/api/v1/bookie/gc_details", get(gc_details))
        .route(
            "/api/v1/bookie/gc/suspend_compaction",
            get(compaction_suspended).put(suspend_compaction),
        )
        .route(
            "/api/v1/bookie/gc/resume_compaction",
            axum::routing::put(resume_compaction),
        )
        .merge(autorecovery::routes())
        .merge(bookie_admin::routes())
}

/// An error response: `{"error": message}` with `status`.
pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = serde_json::json!({ "error": message.into() });
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        format!("{body:#}\n"),
    )
        .into_response()
}

pub(crate) type Params = Query<HashMap<String, String>>;

/// The status that fits a metadata error.
fn metadata_error(e: MetadataError) -> Response {
    let status = match &e {
        MetadataError::NotFound { .. } => StatusCode::NOT_FOUND,
        MetadataError::InvalidArgument(_) => StatusCode::BAD_REQUEST,
        MetadataError::Unreachable { .. } | MetadataError::SessionExpired => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, e.to_string())
}

/// The current session, or a new one through the connector if it expired.
pub(crate) async fn session(s: &AdminState) -> Result<Arc<dyn MetadataStore>, Response> {
    if let Some(store) = s.session.0.lock().clone() {
        return Ok(store);
    }
    let Some(connect) = s.cluster.connector.clone() else {
        return Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "this bookie runs without a metadata store",
        ));
    };
    match tokio::time::timeout(METADATA_TIMEOUT, connect()).await {
        Ok(Ok(store)) => {
            *s.session.0.lock() = Some(store.clone());
            Ok(store)
        }
        Ok(Err(e)) => Err(metadata_error(e)),
        Err(_) => Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "metadata store did not answer within {} s",
                METADATA_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// Runs one metadata call with a deadline; a missing store or a timeout is a 503. An
/// expired session is dropped, so that the next call opens a new one.
pub(crate) async fn with_store<T, F, Fut>(s: &AdminState, call: F) -> Result<T, Response>
where
    F: FnOnce(Arc<dyn MetadataStore>) -> Fut,
    Fut: Future<Output = folio_metadata::Result<T>>,
{
    let store = session(s).await?;
    match tokio::time::timeout(METADATA_TIMEOUT, call(store.clone())).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            if matches!(e, MetadataError::SessionExpired) {
                let mut current = s.session.0.lock();
                if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &store)) {
                    *current = None;
                }
            }
            Err(metadata_error(e))
        }
        Err(_) => Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "metadata store did not answer within {} s",
                METADATA_TIMEOUT.as_secs()
            ),
        )),
    }
}

pub(crate) fn flag(p: &HashMap<String, String>, name: &str) -> Result<bool, Response> {
    match p.get(name).map(|v| v.to_ascii_lowercase()) {
        None => Ok(false),
        Some(v) if v == "true" || v == "1" => Ok(true),
        Some(v) if v == "false" || v == "0" => Ok(false),
        Some(v) => Err(error(
            StatusCode::BAD_REQUEST,
            format!("invalid {name} {v:?}: expected true or false"),
        )),
    }
}

pub(crate) fn id_param(p: &HashMap<String, String>, name: &str) -> Result<Option<i64>, Response> {
    match p.get(name) {
        None => Ok(None),
        Some(v) => match v.parse::<i64>() {
            Ok(n) if n >= 0 => Ok(Some(n)),
            _ => Err(error(
                StatusCode::BAD_REQUEST,
                format!("invalid {name} {v:?}: expected a non-negative integer"),
            )),
        },
    }
}

pub(crate) fn required_ledger(p: &HashMap<String, String>) -> Result<i64, Response> {
    id_param(p, "ledger_id")?
        .ok_or_else(|| error(StatusCode::BAD_REQUEST, "missing parameter ledger_id"))
}

/// A ledger's metadata as one JSON object (ensembles keyed by their first entry id); the
/// same object `folio ledger meta` prints.
pub fn ledger_metadata_json(id: i64, m: &LedgerMetadata) -> serde_json::Value {
    let ensembles: serde_json::Map<String, serde_json::Value> = m
        .ensembles
        .iter()
        .map(|(first, bookies)| {
            (
                first.to_string(),
                bookies.iter().map(|b| b.to_string()).collect(),
            )
        })
        .collect();
    let custom: serde_json::Map<String, serde_json::Value> = m
        .custom_metadata
        .iter()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned().into()))
        .collect();
    serde_json::json!({
        "ledgerId": id,
        "formatVersion": m.metadata_format_version,
        "state": m.state.to_string(),
        "ensembleSize": m.ensemble_size,
        "writeQuorumSize": m.write_quorum,
        "ackQuorumSize": m.ack_quorum,
        "lastEntryId": m.last_entry_id,
        "length": m.length,
        "digestType": m.digest_type.to_string(),
        "hasPassword": m.password.as_ref().is_some_and(|p| !p.is_empty()),
        "ctime": m.ctime,
        "ensembles": ensembles,
        "customMetadata": custom,
    })
}

/// Every ledger id in the metadata store, in ascending order (page by page).
pub(crate) async fn all_ledger_ids(s: &AdminState) -> Result<Vec<i64>, Response> {
    // Each page under its own deadline, on a session re-opened if the last one expired.
    folio_metadata::collect_ledger_ids(|start| {
        with_store(s, move |st| async move {
            st.list_ledgers(start, folio_metadata::LEDGER_ID_PAGE).await
        })
    })
    .await
}

async fn ledger_list(State(s): State<AdminState>, Query(p): Params) -> Response {
    let print_metadata = match flag(&p, "print_metadata") {
        Ok(v) => v,
        Err(r) => return r,
    };
    let ids = match all_ledger_ids(&s).await {
        Ok(ids) => ids,
        Err(r) => return r,
    };
    let mut out = serde_json::Map::new();
    for id in ids {
        let value = if print_metadata {
            match with_store(&s, |st| async move { st.read_ledger(id).await }).await {
                Ok(m) => ledger_metadata_json(id, &m.value),
                // Deleted since it was listed.
                Err(r) if r.status() == StatusCode::NOT_FOUND => continue,
                Err(r) => return r,
            }
        } else {
            serde_json::Value::Null
        };
        out.insert(id.to_string(), value);
    }
    json(serde_json::Value::Object(out))
}

async fn ledger_metadata(State(s): State<AdminState>, Query(p): Params) -> Response {
    let id = match required_ledger(&p) {
        Ok(id) => id,
        Err(r) => return r,
    };
    match with_store(&s, |st| async move { st.read_ledger(id).await }).await {
        Ok(m) => json(serde_json::json!({ id.to_string(): ledger_metadata_json(id, &m.value) })),
        Err(r) => r,
    }
}

async fn ledger_read(State(s): State<AdminState>, Query(p): Params) -> Response {
    if !s.ledger_read_enabled {
        return error(
            StatusCode::FORBIDDEN,
            "ledger reads over HTTP are off: set http_ledger_read_enabled = true in the bookie's \
             config to serve /api/v1/ledger/read",
        );
    }
    let (id, first, last) = match (|| {
        Ok::<_, Response>((
            required_ledger(&p)?,
            id_param(&p, "start_entry_id")?.unwrap_or(0),
            id_param(&p, "end_entry_id")?,
        ))
    })() {
        Ok(v) => v,
        Err(r) => return r,
    };
    if let Some(last) = last
        && last < first
    {
        return error(
            StatusCode::BAD_REQUEST,
            format!("end_entry_id {last} is before start_entry_id {first}"),
        );
    }
    // A missing ledger is a 404 before the client is involved.
    let m = match with_store(&s, |st| async move { st.read_ledger(id).await }).await {
        Ok(m) => m.value,
        Err(r) => return r,
    };
    let end = last.unwrap_or(m.last_entry_id.max(first));
    // `end >= first >= 0`, so this cannot overflow (an `end - first + 1` could).
    if end - first >= MAX_READ_ENTRIES {
        return error(
            StatusCode::BAD_REQUEST,
            format!(
                "range {first}..={end} is too large: at most {MAX_READ_ENTRIES} entries per request"
            ),
        );
    }
    let Some(reader) = s.cluster.reader.clone() else {
        return error(
            StatusCode::NOT_IMPLEMENTED,
            "this bookie has no client to read ledgers with",
        );
    };
    // An open ledger has no last entry in its metadata: bound the read by the same cap, so
    // a long ledger is never read whole into memory (the reader also stops at the LAC).
    let last = last.unwrap_or(if m.last_entry_id >= 0 {
        m.last_entry_id
    } else {
        first.saturating_add(MAX_READ_ENTRIES - 1)
    });
    let last = Some(last);
    match reader.read(id, first, last).await {
        Ok(entries) => {
            let out: serde_json::Map<String, serde_json::Value> = entries
                .into_iter()
                .map(|(e, payload)| {
                    (
                        e.to_string(),
                        String::from_utf8_lossy(&payload).into_owned().into(),
                    )
                })
                .collect();
            json(serde_json::Value::Object(out))
        }
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot read ledger {id}: {e}"),
        ),
    }
}

/// BookKeeper's `ClusterInfo` (its `cluster-info` command and `/api/v1/bookie/cluster_info`):
/// "total" counts every bookie with a cookie (every bookie that ever joined), so
/// "unavailable" are those neither writable nor read-only now. One definition for the shell
/// and the admin endpoint.
pub async fn cluster_info_json(
    store: &dyn folio_metadata::MetadataStore,
) -> folio_metadata::Result<serde_json::Value> {
    let all = store.list_cookies().await?;
    let set = store.list_bookies().await?;
    let auditor = store.current_auditor().await?;
    let available = set.writable.len() + set.readonly.len();
    Ok(serde_json::json!({
        "auditorElected": auditor.is_some(),
        "auditorId": auditor.map(|a| a.to_string()).unwrap_or_default(),
        "clusterUnderReplicated": !store.list_underreplicated().await?.is_empty(),
        "ledgerReplicationEnabled": store.is_autorecovery_enabled().await?,
        "totalBookiesCount": all.len(),
        "writableBookiesCount": set.writable.len(),
        "readonlyBookiesCount": set.readonly.len(),
        "unavailableBookiesCount": all.len().saturating_sub(available),
    }))
}

async fn cluster_info(State(s): State<AdminState>) -> Response {
    match with_store(&s, |st| async move { cluster_info_json(st.as_ref()).await }).await {
        Ok(v) => json(v),
        Err(r) => r,
    }
}

async fn list_bookies(State(s): State<AdminState>, Query(p): Params) -> Response {
    let readonly = match p.get("type").map(String::as_str) {
        Some("rw") => false,
        Some("ro") => true,
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("invalid type {other:?}: expected rw or ro"),
            );
        }
        None => return error(StatusCode::BAD_REQUEST, "missing parameter type (rw or ro)"),
    };
    let hostnames = match flag(&p, "print_hostnames") {
        Ok(v) => v,
        Err(r) => return r,
    };
    let set = match with_store(&s, |st| async move { st.list_bookies().await }).await {
        Ok(set) => set,
        Err(r) => return r,
    };
    let bookies = if readonly { set.readonly } else { set.writable };
    let out: serde_json::Map<String, serde_json::Value> = bookies
        .iter()
        .map(|b| {
            let id = b.to_string();
            let host = hostnames.then(|| {
                serde_json::Value::String(id.rsplit_once(':').map_or(id.clone(), |(h, _)| h.into()))
            });
            (id, host.unwrap_or(serde_json::Value::Null))
        })
        .collect();
    json(serde_json::Value::Object(out))
}

/// `GET /api/v1/bookie/info` of another bookie: its (free, total) space.
async fn peer_info(s: &AdminState, peer: &Peer) -> Result<(u64, u64), String> {
    let v = peer_get(s, peer, "/api/v1/bookie/info").await?;
    match (v["freeSpace"].as_u64(), v["totalSpace"].as_u64()) {
        (Some(f), Some(t)) => Ok((f, t)),
        _ => Err(format!("no freeSpace/totalSpace in {v}")),
    }
}

async fn list_bookie_info(State(s): State<AdminState>) -> Response {
    let set = match with_store(&s, |st| async move { st.list_bookies().await }).await {
        Ok(set) => set,
        Err(r) => return r,
    };
    let mut out = serde_json::Map::new();
    let (mut free, mut total) = (0u64, 0u64);
    for b in &set.writable {
        let own = s.storage.as_ref().filter(|_| b.to_string() == s.bookie_id);
        let info = if let Some(storage) = own {
            storage
                .space()
                .map(|sp| (sp.free, sp.total))
                .map_err(|e| e.to_string())
        } else {
            match peer_endpoint(&s, b).await {
                Ok(peer) => peer_info(&s, &peer).await,
                Err(e) => Err(e),
            }
        };
        let v = match info {
            Ok((f, t)) => {
                free += f;
                total += t;
                serde_json::json!({ "freeSpace": f, "totalSpace": t })
            }
            Err(e) => serde_json::json!({ "error": e }),
        };
        out.insert(b.to_string(), v);
    }
    out.insert(
        "ClusterInfo".into(),
        serde_json::json!({ "totalFreeSpace": free, "totalSpace": total }),
    );
    json(serde_json::Value::Object(out))
}

fn local(s: &AdminState) -> Result<&LocalDisk, Response> {
    s.local.as_ref().ok_or_else(|| {
        error(
            StatusCode::NOT_IMPLEMENTED,
            "this bookie does not publish its directories",
        )
    })
}

async fn last_log_mark(State(s): State<AdminState>) -> Response {
    let disk = match local(&s) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let marks = (disk.marks)();
    let out: serde_json::Map<String, serde_json::Value> = disk
        .journal_dirs
        .iter()
        .zip(marks)
        .map(|(d, m)| {
            (
                d.display().to_string(),
                serde_json::json!({ "logFileId": m.file_id, "logFileOffset": m.offset }),
            )
        })
        .collect();
    json(serde_json::Value::Object(out))
}

/// The names in `<dir>/<sub>` of files ending with `suffix` (every entry if empty, but
/// the lock file).
fn files_in(dirs: &[PathBuf], sub: &str, suffix: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for d in dirs {
        let current = d.join(sub);
        let read = match std::fs::read_dir(&current) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot list {}: {e}", current.display())),
        };
        for e in read {
            let e = e.map_err(|e| format!("cannot list {}: {e}", current.display()))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let wanted = if suffix.is_empty() {
                name != folio_storage::dir_lock::LOCK_FILE
            } else {
                name.ends_with(suffix) && e.path().is_file()
            };
            if wanted {
                names.push(name);
            }
        }
    }
    names.sort();
    Ok(names)
}

async fn list_disk_file(State(s): State<AdminState>, Query(p): Params) -> Response {
    let disk = match local(&s) {
        Ok(d) => d.clone(),
        Err(r) => return r,
    };
    let wanted: Vec<&str> = match p.get("file_type").map(String::as_str) {
        None => vec!["journal", "entrylog", "index"],
        Some(t @ ("journal" | "entrylog" | "index")) => vec![t],
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("invalid file_type {other:?}: expected journal, entrylog or index"),
            );
        }
    };
    let mut out = serde_json::Map::new();
    for t in wanted {
        let listed = match t {
            "journal" => files_in(&disk.journal_dirs, "current", ".txn"),
            "entrylog" => files_in(&disk.ledger_dirs, "current", ".log"),
            _ => files_in(disk.index_dir.as_slice(), "", ""),
        };
        match listed {
            Ok(names) => {
                out.insert(format!("{t} files"), names.join(" ").into());
            }
            Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e),
        }
    }
    json(serde_json::Value::Object(out))
}

fn collector(s: &AdminState) -> Result<&folio_bookie::gc::GcHandle, Response> {
    s.gc.as_ref().ok_or_else(|| {
        error(
            StatusCode::NOT_IMPLEMENTED,
            "this bookie runs no garbage collector",
        )
    })
}

async fn gc_trigger(State(s): State<AdminState>) -> Response {
    match collector(&s) {
        Ok(gc) => {
            gc.trigger();
            json(serde_json::Value::String(format!(
                "Triggered GC on BookieServer: {}",
                s.bookie_id
            )))
        }
        Err(r) => r,
    }
}

async fn gc_status(State(s): State<AdminState>) -> Response {
    match collector(&s) {
        Ok(gc) => json(serde_json::json!({
            "is_in_force_gc": gc.is_force_gc_running().to_string(),
        })),
        Err(r) => r,
    }
}

async fn compaction_suspended(State(s): State<AdminState>) -> Response {
    match collector(&s) {
        Ok(gc) => {
            let (major, minor) = gc.compaction_suspended();
            json(serde_json::json!({
                "isMajorGcSuspended": major.to_string(),
                "isMinorGcSuspended": minor.to_string(),
            }))
        }
        Err(r) => r,
    }
}

/// The two levels a suspend or resume body names as `true` (BookKeeper ignores anything
/// but a JSON boolean true).
fn compaction_levels(body: &[u8], major: &str, minor: &str) -> Result<(bool, bool), &'static str> {
    if body.is_empty() {
        return Err("Empty request body");
    }
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|_| "Bad JSON body")?;
    let flag = |k: &str| v.get(k).and_then(|b| b.as_bool()).unwrap_or(false);
    Ok((flag(major), flag(minor)))
}

async fn suspend_compaction(State(s): State<AdminState>, body: axum::body::Bytes) -> Response {
    set_compaction(&s, &body, true)
}

async fn resume_compaction(State(s): State<AdminState>, body: axum::body::Bytes) -> Response {
    set_compaction(&s, &body, false)
}

/// Suspends (or resumes) the levels `body` names, answering as BookKeeper's
/// Suspend/ResumeCompactionService.
fn set_compaction(s: &AdminState, body: &[u8], suspend: bool) -> Response {
    let gc = match collector(s) {
        Ok(gc) => gc,
        Err(r) => return r,
    };
    let (verb, key) = if suspend {
        ("Suspend", "suspend")
    } else {
        ("Resume", "resume")
    };
    let (major, minor) =
        match compaction_levels(body, &format!("{key}Major"), &format!("{key}Minor")) {
            Ok((false, false)) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("No {key}Major or {key}Minor params found"),
                );
            }
            Ok(levels) => levels,
            Err(e) => return error(StatusCode::BAD_REQUEST, e),
        };
    gc.set_compaction_suspended(major.then_some(suspend), minor.then_some(suspend));
    let mut out = String::new();
    if major {
        out = format!("{verb} majorGC on BookieServer: {}", s.bookie_id);
    }
    if minor {
        out += &format!(", {verb} minorGC on BookieServer: {}", s.bookie_id);
    }
    json(serde_json::Value::String(out))
}

async fn gc_details(State(s): State<AdminState>) -> Response {
    let gc = match collector(&s) {
        Ok(gc) => gc,
        Err(r) => return r,
    };
    let last = gc.last_round().map(|r| {
        serde_json::json!({
            "forced": r.forced,
            "startedAtMs": r.started_ms,
            "finishedAtMs": r.finished_ms,
            "localLedgers": r.local_ledgers,
            "ledgersDeleted": r.ledgers_deleted,
            "entryLogsRemoved": r.entry_logs_removed,
            "bytesReclaimed": r.bytes_reclaimed,
            "compaction": r.compaction,
            "entryLogsCompacted": r.entry_logs_compacted,
            "compactionBytesReclaimed": r.compaction_bytes_reclaimed,
            "compactionEntriesCopied": r.compaction_entries_copied,
            "skipped": r.skipped,
            "errors": r.errors,
        })
    });
    json(serde_json::json!([{
        "forceCompacting": gc.is_force_gc_running(),
        "gcRounds": gc.rounds(),
        "lastGc": last,
    }]))
}
