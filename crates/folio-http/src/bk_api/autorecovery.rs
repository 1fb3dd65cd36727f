//! BookKeeper's `/api/v1/autorecovery/...` routes that the metadata store alone answers:
//! the cluster-wide switch, the under-replicated ledgers, the Auditor, `trigger_audit` and
//! the lost-bookie delay, with BookKeeper's parameters and bodies (spec/autorecovery.md
//! section 4). Served by every bookie with an admin port, whether or not it runs
//! autorecovery itself; `bookie` and `decommission` run through the binary's
//! [`super::LedgerReader`].

use std::collections::BTreeMap;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use folio_types::BookieId;

use super::{Params, error, flag, with_store};
use crate::bookie_routes::json;
use crate::server::AdminState;

pub(super) fn routes() -> Router<AdminState> {
    Router::new()
        .route("/api/v1/autorecovery/status", get(status).put(set_status))
        .route(
            "/api/v1/autorecovery/list_under_replicated_ledger",
            get(list_under_replicated),
        )
        .route("/api/v1/autorecovery/who_is_auditor", get(who_is_auditor))
        .route("/api/v1/autorecovery/trigger_audit", put(trigger_audit))
        .route(
            "/api/v1/autorecovery/lost_bookie_recovery_delay",
            get(delay).put(set_delay),
        )
        .route("/api/v1/autorecovery/bookie", put(recover_bookie))
        .route("/api/v1/autorecovery/decommission", put(decommission))
}

/// The body's `bookie_src` as a list of bookie ids (BookKeeper sends a list for `bookie`,
/// one string for `decommission`) and its `delete_cookie` (a boolean or "true").
fn recover_body(body: &str) -> Result<(Vec<BookieId>, bool), Response> {
    let bad = |why: String| error(StatusCode::BAD_REQUEST, why);
    let v: serde_json::Value = serde_json::from_str(body)
        .map_err(|e| bad(format!("expected a JSON body with bookie_src: {e}")))?;
    let ids: Vec<&str> = match &v["bookie_src"] {
        serde_json::Value::String(s) => vec![s.as_str()],
        serde_json::Value::Array(a) => a.iter().filter_map(|x| x.as_str()).collect(),
        _ => {
            return Err(bad(
                "bookie_src must name a bookie id or a list of them".into()
            ));
        }
    };
    let bookies = ids
        .into_iter()
        .map(|id| BookieId::new(id).map_err(|e| bad(format!("invalid bookie_src {id:?}: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    if bookies.is_empty() {
        return Err(bad("bookie_src is empty".into()));
    }
    let delete_cookie = match &v["delete_cookie"] {
        serde_json::Value::Bool(b) => *b,
        serde_json::Value::String(s) => s == "true",
        _ => false,
    };
    Ok((bookies, delete_cookie))
}

async fn start(s: &AdminState, body: &str, decommission: bool) -> Response {
    let (bookies, delete_cookie) = match recover_body(body) {
        Ok(v) => v,
        Err(r) => return r,
    };
    if decommission && bookies.len() != 1 {
        return error(StatusCode::BAD_REQUEST, "decommission takes one bookie_src");
    }
    let Some(runner) = s.cluster.reader.clone() else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "this bookie's admin endpoint has no client to recover with",
        );
    };
    let names: Vec<String> = bookies.iter().map(|b| b.to_string()).collect();
    match runner.start_recover(bookies, decommission, delete_cookie) {
        Ok(()) => text(format!(
            "{} of {} started in the background\n",
            if decommission {
                "Decommission"
            } else {
                "Recovery"
            },
            names.join(", ")
        )),
        Err(why) => error(StatusCode::CONFLICT, why),
    }
}

async fn recover_bookie(State(s): State<AdminState>, body: String) -> Response {
    start(&s, &body, false).await
}

async fn decommission(State(s): State<AdminState>, body: String) -> Response {
    start(&s, &body, true).await
}

fn text(body: String) -> Response {
    (StatusCode::OK, body).into_response()
}

async fn status(State(s): State<AdminState>) -> Response {
    match with_store(&s, |st| async move { st.is_autorecovery_enabled().await }).await {
        Ok(enabled) => json(serde_json::json!({ "enabled": enabled })),
        Err(r) => r,
    }
}

async fn set_status(State(s): State<AdminState>, Query(p): Params) -> Response {
    let enabled = match p.get("enabled").map(String::as_str) {
        Some("true") => true,
        Some("false") => false,
        other => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("parameter enabled must be true or false, got {other:?}"),
            );
        }
    };
    match with_store(&s, |st| async move {
        st.set_autorecovery_enabled(enabled).await
    })
    .await
    {
        Ok(()) => json(serde_json::json!({ "enabled": enabled })),
        Err(r) => r,
    }
}

fn bookie_param(
    p: &std::collections::HashMap<String, String>,
    name: &str,
) -> Result<Option<BookieId>, Response> {
    match p.get(name) {
        None => Ok(None),
        Some(v) => BookieId::new(v.as_str())
            .map(Some)
            .map_err(|e| error(StatusCode::BAD_REQUEST, format!("invalid {name}: {e}"))),
    }
}

async fn list_under_replicated(State(s): State<AdminState>, Query(p): Params) -> Response {
    let (only, except, print) = match (
        bookie_param(&p, "missingreplica"),
        bookie_param(&p, "excludingmissingreplica"),
        flag(&p, "printmissingreplica"),
    ) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        (Err(r), _, _) | (_, Err(r), _) | (_, _, Err(r)) => return r,
    };
    let marks = match with_store(&s, |st| async move { st.list_underreplicated().await }).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let marks: Vec<_> = marks
        .into_iter()
        .filter(|m| only.as_ref().is_none_or(|b| m.missing_replicas.contains(b)))
        .filter(|m| {
            except
                .as_ref()
                .is_none_or(|b| !m.missing_replicas.contains(b))
        })
        .collect();
    if marks.is_empty() {
        return error(StatusCode::NOT_FOUND, "No under replicated ledgers found");
    }
    if print {
        let out: BTreeMap<String, Vec<String>> = marks
            .iter()
            .map(|m| {
                (
                    m.ledger_id.to_string(),
                    m.missing_replicas.iter().map(|b| b.to_string()).collect(),
                )
            })
            .collect();
        json(serde_json::json!(out))
    } else {
        let ids: Vec<i64> = marks.iter().map(|m| m.ledger_id).collect();
        json(serde_json::json!(ids))
    }
}

async fn who_is_auditor(State(s): State<AdminState>) -> Response {
    match with_store(&s, |st| async move { st.current_auditor().await }).await {
        Ok(Some(a)) => text(format!("Auditor: {a}\n")),
        Ok(None) => error(StatusCode::NOT_FOUND, "no Auditor is elected"),
        Err(r) => r,
    }
}

async fn trigger_audit(State(s): State<AdminState>) -> Response {
    let state = with_store(&s, |st| async move {
        Ok((
            st.is_autorecovery_enabled().await?,
            st.current_auditor().await?,
        ))
    })
    .await;
    match state {
        Ok((false, _)) => {
            return error(
                StatusCode::CONFLICT,
                "autorecovery is disabled: enable it first",
            );
        }
        Ok((true, None)) => return error(StatusCode::NOT_FOUND, "no Auditor is elected"),
        Ok(_) => {}
        Err(r) => return r,
    }
    // Rewriting the delay's current value is BookKeeper's "audit now".
    let done = with_store(&s, |st| async move {
        let delay = st.lost_bookie_recovery_delay().await?.unwrap_or(0);
        st.set_lost_bookie_recovery_delay(delay).await
    })
    .await;
    match done {
        Ok(()) => text("Successfully triggered audit\n".into()),
        Err(r) => r,
    }
}

async fn delay(State(s): State<AdminState>) -> Response {
    match with_store(
        &s,
        |st| async move { st.lost_bookie_recovery_delay().await },
    )
    .await
    {
        Ok(v) => text(format!(
            "lostBookieRecoveryDelay value: {}\n",
            v.unwrap_or(0)
        )),
        Err(r) => r,
    }
}

async fn set_delay(State(s): State<AdminState>, body: String) -> Response {
    let seconds = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("delay_seconds").and_then(serde_json::Value::as_u64))
        .and_then(|n| u32::try_from(n).ok());
    let Some(seconds) = seconds else {
        return error(
            StatusCode::BAD_REQUEST,
            format!("expected a body {{\"delay_seconds\": N}}, got {body:?}"),
        );
    };
    match with_store(&s, |st| async move {
        st.set_lost_bookie_recovery_delay(seconds).await
    })
    .await
    {
        Ok(()) => text(format!(
            "Successfully set lostBookieRecoveryDelay to {seconds}\n"
        )),
        Err(r) => r,
    }
}
