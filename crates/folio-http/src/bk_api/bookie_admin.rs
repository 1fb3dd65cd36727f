//! BookKeeper's remaining bookie admin paths:
//!
//! * `GET /api/v1/config/server_config`: the configuration the bookie runs with, as
//!   BookKeeper's `ConfigurationService` answers (one JSON object of strings), under
//!   BookKeeper's key names where Folio implements the key, else Folio's field names.
//! * `PUT /api/v1/config/server_config` with `{"key": value, ...}`: applied only if every key
//!   can change while the bookie runs ([`RUNTIME_KEYS`]: the compaction thresholds and
//!   intervals, picked up by the next GC round); otherwise nothing is applied and the answer
//!   (400) names the key and why. BookKeeper's success body: `Success set server config.`
//! * `GET /api/v1/bookie/sanity`: BookKeeper's `BookieSanityService`: a ledger written to
//!   this bookie and read back, one test at a time; `{"passed": bool, "readOnly": bool}`
//!   (a read-only bookie is not tested). It writes, so it needs the admin token when one is
//!   configured.
//! * `DELETE /api/v1/ledger/delete?ledger_id=N`: the ledger's metadata deleted (its bookies
//!   drop its entries at their next GC round); `"Deleted ledger: N"`.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use folio_bookie::config::BookieConfig;
use folio_bookie::gc::CompactionPolicy;
use serde_json::Value;

use super::{Params, error, required_ledger, with_store};
use crate::bookie_routes::json;
use crate::server::AdminState;

pub(crate) fn routes() -> axum::Router<AdminState> {
    use axum::routing::{delete, get};
    axum::Router::new()
        .route(
            "/api/v1/config/server_config",
            get(server_config).put(set_server_config),
        )
        .route(SANITY_PATH, get(sanity))
        .route("/api/v1/ledger/delete", delete(delete_ledger))
}

/// The sanity test's path (it writes: token-guarded like a mutation).
pub(crate) const SANITY_PATH: &str = "/api/v1/bookie/sanity";

/// The keys `PUT server_config` applies while the bookie runs, by Folio field.
pub(crate) const RUNTIME_KEYS: &[&str] = &[
    "minor_compaction_threshold",
    "minor_compaction_interval_s",
    "major_compaction_threshold",
    "major_compaction_interval_s",
];

#[allow(clippy::result_large_err)]
fn config_of(
    s: &AdminState,
) -> Result<&std::sync::Arc<parking_lot::Mutex<BookieConfig>>, Response> {
    s.config.as_ref().ok_or_else(|| {
        error(
            StatusCode::NOT_FOUND,
            format!(
                "{} is not a bookie: it has no server configuration",
                s.bookie_id
            ),
        )
    })
}

/// A value as BookKeeper's `asJson` shows it: a string (lists comma-separated).
fn as_bk_string(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => Some(
            items
                .iter()
                .filter_map(as_bk_string)
                .collect::<Vec<_>>()
                .join(","),
        ),
        other => Some(other.to_string()),
    }
}

/// The configuration as one JSON object of strings, BookKeeper's names where mapped.
pub(crate) fn config_json(config: &BookieConfig) -> Value {
    let Ok(Value::Object(fields)) = serde_json::to_value(config) else {
        return Value::Object(Default::default());
    };
    let map = fields
        .iter()
        .filter_map(|(field, v)| {
            let key = folio_bookie::config::bookkeeper_name(field).unwrap_or(field);
            Some((key.to_string(), Value::String(as_bk_string(v)?)))
        })
        .collect();
    Value::Object(map)
}

async fn server_config(State(s): State<AdminState>) -> Response {
    match config_of(&s) {
        Ok(c) => json(config_json(&c.lock())),
        Err(r) => r,
    }
}

/// Why `key` cannot be set now, or the Folio field it sets.
fn runtime_field(key: &str) -> Result<&'static str, String> {
    let Some(field) = folio_bookie::config::field_of(key) else {
        if folio_bookie::config::is_bookkeeper_key(key) {
            return Err(format!(
                "{key} is a BookKeeper key Folio does not implement"
            ));
        }
        let hint = folio_bookie::config::suggestion(key)
            .map(|k| format!(" (did you mean {k}?)"))
            .unwrap_or_default();
        return Err(format!("unknown configuration key {key}{hint}"));
    };
    RUNTIME_KEYS
        .iter()
        .find(|f| **f == field)
        .copied()
        .ok_or_else(|| {
            let can: Vec<&str> = RUNTIME_KEYS
                .iter()
                .map(|f| folio_bookie::config::bookkeeper_name(f).unwrap_or(f))
                .collect();
            format!(
                "{key} cannot change while the bookie runs: set it in the configuration file and \
                 restart (these can: {})",
                can.join(", ")
            )
        })
}

/// A number from a JSON number or a numeric string (BookKeeper's values are strings).
fn number(key: &str, v: &Value) -> Result<f64, String> {
    let n = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    n.filter(|n| n.is_finite() && *n >= 0.0)
        .ok_or_else(|| format!("bad value {v} for {key}: expected a non-negative number"))
}

/// Applies `changes` (key, value) to a copy of `config`, all or nothing.
fn apply(
    config: &BookieConfig,
    changes: &serde_json::Map<String, Value>,
) -> Result<BookieConfig, String> {
    if changes.is_empty() {
        return Err("Request body not found. should contains k-v pairs".into());
    }
    let mut c = config.clone();
    for (key, v) in changes {
        let n = number(key, v)?;
        match runtime_field(key)? {
            "minor_compaction_threshold" => c.minor_compaction_threshold = n,
            "major_compaction_threshold" => c.major_compaction_threshold = n,
            "minor_compaction_interval_s" => c.minor_compaction_interval_s = n as u64,
            _ => c.major_compaction_interval_s = n as u64,
        }
    }
    for (key, t) in [
        ("minorCompactionThreshold", c.minor_compaction_threshold),
        ("majorCompactionThreshold", c.major_compaction_threshold),
    ] {
        if t > 1.0 {
            return Err(format!(
                "{key} = {t}: a threshold is a fraction of an entry log, at most 1"
            ));
        }
    }
    if c.minor_compaction_threshold > c.major_compaction_threshold
        && c.major_compaction_threshold > 0.0
    {
        return Err(format!(
            "minorCompactionThreshold ({}) above majorCompactionThreshold ({}): BookKeeper refuses it too",
            c.minor_compaction_threshold, c.major_compaction_threshold
        ));
    }
    Ok(c)
}

async fn set_server_config(State(s): State<AdminState>, body: axum::body::Bytes) -> Response {
    let config = match config_of(&s) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let changes = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(m)) => m,
        Ok(_) | Err(_) if body.is_empty() => {
            return error(
                StatusCode::BAD_REQUEST,
                "Request body not found. should contains k-v pairs",
            );
        }
        Ok(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("expected a JSON object of key/value pairs, got {other}"),
            );
        }
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the body is not JSON: {e}"),
            );
        }
    };
    let mut current = config.lock();
    match apply(&current, &changes) {
        Ok(updated) => {
            if let Some(gc) = &s.gc {
                gc.set_compaction_policy(CompactionPolicy::from_config(&updated));
            }
            *current = updated;
            json(Value::String("Success set server config.".into()))
        }
        Err(why) => error(StatusCode::BAD_REQUEST, why),
    }
}

async fn sanity(State(s): State<AdminState>) -> Response {
    let storage = match s.storage() {
        Ok(st) => st.clone(),
        Err(r) => return r,
    };
    if storage.is_read_only() {
        return json(serde_json::json!({ "passed": false, "readOnly": true }));
    }
    let Some(reader) = s.cluster.reader.clone() else {
        return error(
            StatusCode::NOT_IMPLEMENTED,
            "this endpoint has no client to run the sanity test with",
        );
    };
    let Ok(bookie) = folio_types::BookieId::new(s.bookie_id.clone()) else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("bad bookie id {}", s.bookie_id),
        );
    };
    let _one_at_a_time = s.sanity.lock().await;
    match reader.sanity(bookie).await {
        Ok(()) => json(serde_json::json!({ "passed": true, "readOnly": false })),
        Err(why) => json(serde_json::json!({ "passed": false, "readOnly": false, "error": why })),
    }
}

async fn delete_ledger(State(s): State<AdminState>, Query(p): Params) -> Response {
    let id = match required_ledger(&p) {
        Ok(id) => id,
        Err(r) => return r,
    };
    match with_store(&s, |st| async move { st.delete_ledger(id, None).await }).await {
        Ok(()) => json(Value::String(format!("Deleted ledger: {id}"))),
        Err(r) => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_runtime_keys_are_applied_and_the_refusal_names_the_key() {
        let c = BookieConfig::default();
        let ok = serde_json::json!({"minorCompactionThreshold": "0.1", "major_compaction_interval_s": 60});
        let updated = apply(&c, ok.as_object().unwrap()).unwrap();
        assert_eq!(updated.minor_compaction_threshold, 0.1);
        assert_eq!(updated.major_compaction_interval_s, 60);
        let e = apply(
            &c,
            serde_json::json!({"bookiePort": 4000}).as_object().unwrap(),
        )
        .unwrap_err();
        assert!(
            e.contains("bookiePort cannot change while the bookie runs"),
            "{e}"
        );
        let e = apply(
            &c,
            serde_json::json!({"minorCompactionTreshold": 0.1})
                .as_object()
                .unwrap(),
        )
        .unwrap_err();
        assert!(e.contains("did you mean minorCompactionThreshold"), "{e}");
        let e = apply(
            &c,
            serde_json::json!({"minorCompactionThreshold": 2})
                .as_object()
                .unwrap(),
        )
        .unwrap_err();
        assert!(e.contains("at most 1"), "{e}");
    }
}
