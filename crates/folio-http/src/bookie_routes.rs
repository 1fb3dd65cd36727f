//! This bookie's own status routes, with BookKeeper's paths and fields: `/heartbeat`
//! (liveness), `/api/v1/bookie/state`, `/api/v1/bookie/state/readonly` (GET, PUT: the
//! operator's switch), `/api/v1/bookie/is_ready` and `/api/v1/bookie/info` (free and total
//! disk space), and `/metrics`.
//!
//! `/heartbeat` and `is_ready` tell the truth, as BookKeeper's do: a bookie that cannot take
//! writes for good (its journal is poisoned by a failed fsync, invariant 9) or that is not
//! registered (its metadata session was lost, or it has not registered yet) answers 503 with
//! the cause as JSON `{"error": ...}`, so a monitor or an orchestrator does not count it as
//! healthy. A bookie read-only only for a full disk is still healthy (it serves reads, and
//! turns writable again once space is freed).

use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::server::AdminState;

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route("/heartbeat", get(heartbeat))
        .route("/metrics", get(crate::metrics::metrics_text))
        .route("/api/v1/bookie/state", get(bookie_state))
        .route(
            "/api/v1/bookie/state/readonly",
            get(read_only_state).put(set_read_only_state),
        )
        .route("/api/v1/bookie/is_ready", get(is_ready))
        .route("/api/v1/bookie/info", get(bookie_info))
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

pub(crate) fn json(value: serde_json::Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        format!("{value:#}\n"),
    )
        .into_response()
}

async fn bookie_state(State(s): State<AdminState>) -> Response {
    let read_only = match s.storage() {
        Ok(storage) => storage.is_read_only(),
        Err(r) => return r,
    };
    let shutting_down = s.shutting_down.load(Ordering::Acquire);
    json(serde_json::json!({
        "running": !shutting_down,
        "readOnly": read_only,
        "shuttingDown": shutting_down,
        "availableForHighPriorityWrites": !shutting_down,
    }))
}

async fn read_only_state(State(s): State<AdminState>) -> Response {
    match s.storage() {
        Ok(storage) => json(serde_json::json!({ "readOnly": storage.is_read_only() })),
        Err(r) => r,
    }
}

/// BookKeeper's `PUT /api/v1/bookie/state/readonly` with `{"readOnly": true|false}`: the
/// operator's switch. The registration follows within a second (its probe reads the same
/// state); turning it off leaves any other cause (a full disk, a failed fsync) in force, and
/// the answer says what is in effect.
async fn set_read_only_state(State(s): State<AdminState>, body: axum::body::Bytes) -> Response {
    let storage = match s.storage() {
        Ok(storage) => storage,
        Err(r) => return r,
    };
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
    if let Err(e) = storage.set_manual_read_only(wanted) {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(serde_json::json!({ "error": e.to_string() })),
        )
            .into_response();
    }
    json(serde_json::json!({ "readOnly": storage.is_read_only() }))
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
    let storage = match s.storage() {
        Ok(storage) => storage,
        Err(r) => return r,
    };
    match storage.space() {
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
