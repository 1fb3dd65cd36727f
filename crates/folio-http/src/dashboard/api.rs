//! The JSON the dashboard reads, under `/ui/api/`. Built on the same pieces as BookKeeper's
//! paths (the metadata session, `cluster_info_json`, `ledger_metadata_json`, the peers'
//! published admin endpoints), so the page and `/api/v1` never disagree:
//!
//! * `GET /ui/api/bookie`: this process's own facts (id, version, read-only, RSS, usage of
//!   each directory, a few counters from `/metrics`); what `cluster` asks each bookie for.
//! * `GET /ui/api/cluster`: the metadata URI, the instance id, BookKeeper's ClusterInfo and
//!   every bookie that ever joined (it has a cookie) with its state (`writable`,
//!   `read-only`, or `gone` when it is not registered) and its own facts, or why they could
//!   not be read.
//! * `GET /ui/api/ledgers[?search=S][&page=N][&page_size=M]`: newest first, paged; a search
//!   matches the id, the state or a custom metadata key or value.
//! * `GET /ui/api/ledger?ledger_id=N`: the metadata, the fragments (first and last entry id,
//!   the ensemble with each bookie's state), the LAC, and the ledger's under-replication mark.
//! * `GET /ui/api/autorecovery`: the switch, the Auditor, the lost-bookie delay, the queue
//!   (each ledger with the holder of its lock, whichever worker it is, and what this
//!   process's ReplicationWorker knows of it: repairing it, or why it is stuck and when it
//!   is tried again), and the recovers and decommissions with their progress: those started
//!   here, and those any other process runs (`folio shell recover`, `decommissionbookie`,
//!   another endpoint), read from their operation records in the metadata store.

#![allow(clippy::result_large_err)] // handlers' parameter checks return the error Response

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use folio_bookie::admin::LocalDisk;
use folio_metadata::BookieSet;
use folio_metadata::driver::now_ms;
use folio_types::BookieId;
use folio_types::metadata::{LedgerMetadata, LedgerState};
use serde_json::{Value, json};

use crate::bk_api::{
    Params, RecoverProgress, all_ledger_ids, cluster_info_json, id_param, ledger_metadata_json,
    peer_endpoint, peer_get, required_ledger, with_store,
};
use crate::bookie_routes::json as reply;
use crate::server::AdminState;

/// The path each bookie answers its own facts on.
pub(crate) const BOOKIE_PATH: &str = "/ui/api/bookie";
/// At most this many ledgers' metadata are read for one search (each is one metadata read).
const SEARCH_LIMIT: usize = 10_000;
/// The page size unless asked, and the largest one served.
const PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 500;
/// At most this many queued ledgers (the first listed) have their lock holder read, one
/// metadata read each, at every refresh of the page.
const LOCK_LOOKUP_LIMIT: usize = 200;
/// How long asking the bookies for a ledger's LAC may take.
const LAC_TIMEOUT: Duration = Duration::from_secs(15);

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route(BOOKIE_PATH, get(bookie))
        .route("/ui/api/cluster", get(cluster))
        .route("/ui/api/ledgers", get(ledgers))
        .route("/ui/api/ledger", get(ledger))
        .route("/ui/api/autorecovery", get(autorecovery))
}

async fn bookie(State(s): State<AdminState>) -> Response {
    reply(own_facts(&s))
}

/// This process's facts; counters come from the process's `/metrics` (every bookie of a
/// `folio standalone` shares them: the `metrics` facade has one recorder per process).
fn own_facts(s: &AdminState) -> Value {
    if let Some(refresh) = &s.refresh {
        refresh();
    }
    let text = crate::metrics::prometheus().map(|h| h.render());
    json!({
        "id": s.bookie_id,
        "version": env!("CARGO_PKG_VERSION"),
        "readOnly": s.storage.as_ref().map(|st| st.is_read_only()),
        "rssBytes": crate::host_metrics::rss_bytes(),
        "directories": s.local.as_ref().map(directories),
        "metrics": text.as_deref().map(super::prom::summary),
    })
}

/// Usage of each journal, ledger and index directory (statvfs of its file system).
fn directories(disk: &LocalDisk) -> Value {
    crate::host_metrics::directories(disk)
        .map(|(kind, dir)| {
            let path = dir.display().to_string();
            match crate::host_metrics::usage(dir) {
                Ok((usage, sp)) => json!({
                    "kind": kind,
                    "path": path,
                    "freeBytes": sp.free,
                    "totalBytes": sp.total,
                    "usage": usage,
                }),
                Err(e) => json!({ "kind": kind, "path": path, "error": e.to_string() }),
            }
        })
        .collect()
}

/// `writable`, `read-only` or `gone` (has a cookie, is not registered).
fn bookie_state(set: &BookieSet, b: &BookieId) -> &'static str {
    if set.writable.contains(b) {
        "writable"
    } else if set.readonly.contains(b) {
        "read-only"
    } else {
        "gone"
    }
}

/// `{"id": b, "state": ...}`.
fn with_state(set: &BookieSet, b: &BookieId) -> Value {
    json!({ "id": b.to_string(), "state": bookie_state(set, b) })
}

async fn cluster(State(s): State<AdminState>) -> Response {
    let read = with_store(&s, |st| async move {
        Ok((
            st.uri().to_string(),
            st.read_cluster().await?,
            cluster_info_json(st.as_ref()).await?,
            st.list_bookies().await?,
            st.list_cookies().await?,
        ))
    })
    .await;
    let (uri, cluster, info, set, cookies) = match read {
        Ok(v) => v,
        Err(r) => return r,
    };
    let all: BTreeSet<BookieId> = cookies
        .into_iter()
        .chain(set.writable.iter().cloned())
        .chain(set.readonly.iter().cloned())
        .collect();
    // Every live bookie is asked at once; each answer is bounded by the peer timeout.
    let mut asks = tokio::task::JoinSet::new();
    for (i, b) in all.iter().enumerate() {
        let state = bookie_state(&set, b);
        if state == "gone" {
            continue;
        }
        let (s, b) = (s.clone(), b.clone());
        asks.spawn(async move {
            let facts = if s.storage.is_some() && b.to_string() == s.bookie_id {
                Ok(own_facts(&s))
            } else {
                match peer_endpoint(&s, &b).await {
                    Ok(peer) => peer_get(&s, &peer, BOOKIE_PATH).await,
                    Err(e) => Err(e),
                }
            };
            (i, facts)
        });
    }
    let mut facts = vec![None; all.len()];
    while let Some(done) = asks.join_next().await {
        if let Ok((i, f)) = done {
            facts[i] = Some(f);
        }
    }
    let bookies: Vec<Value> = all
        .iter()
        .zip(facts)
        .map(|(b, f)| {
            let mut v = with_state(&set, b);
            match f {
                Some(Ok(facts)) => v["facts"] = facts,
                Some(Err(e)) => v["error"] = e.into(),
                None => {}
            }
            v
        })
        .collect();
    reply(json!({
        "metadataUri": uri,
        "instanceId": cluster.instance_id,
        "version": env!("CARGO_PKG_VERSION"),
        "servedBy": s.bookie_id,
        "clusterInfo": info,
        "bookies": bookies,
    }))
}

/// Whether `m` (ledger `id`) matches the lower-case `search`.
fn matches(id: i64, m: &LedgerMetadata, search: &str) -> bool {
    let hit = |t: &str| t.to_lowercase().contains(search);
    hit(&id.to_string())
        || hit(&m.state.to_string())
        || m.custom_metadata
            .iter()
            .any(|(k, v)| hit(k) || hit(&String::from_utf8_lossy(v)))
}

async fn ledgers(State(s): State<AdminState>, Query(p): Params) -> Response {
    let (page, size) = match (id_param(&p, "page"), id_param(&p, "page_size")) {
        (Ok(page), Ok(size)) => (
            page.unwrap_or(0) as usize,
            size.map_or(PAGE_SIZE, |n| n as usize)
                .clamp(1, MAX_PAGE_SIZE),
        ),
        (Err(r), _) | (_, Err(r)) => return r,
    };
    let search = p
        .get("search")
        .map(|t| t.trim().to_lowercase())
        .unwrap_or_default();
    let mut ids = match all_ledger_ids(&s).await {
        Ok(ids) => ids,
        Err(r) => return r,
    };
    ids.reverse();
    let mut truncated = false;
    // Without a search only the page's metadata is read; a search reads each ledger's.
    let (total, shown) = if search.is_empty() {
        let shown: Vec<i64> = ids.iter().copied().skip(page * size).take(size).collect();
        (ids.len(), shown)
    } else {
        truncated = ids.len() > SEARCH_LIMIT;
        let mut hits = Vec::new();
        for &id in ids.iter().take(SEARCH_LIMIT) {
            match with_store(&s, |st| async move { st.read_ledger(id).await }).await {
                Ok(m) if matches(id, &m.value, &search) => hits.push(id),
                Ok(_) => {}
                // Deleted since it was listed.
                Err(r) if r.status() == StatusCode::NOT_FOUND => {}
                Err(r) => return r,
            }
        }
        let shown = hits.iter().copied().skip(page * size).take(size).collect();
        (hits.len(), shown)
    };
    let mut out = Vec::new();
    for id in shown {
        match with_store(&s, |st| async move { st.read_ledger(id).await }).await {
            Ok(m) => out.push(ledger_metadata_json(id, &m.value)),
            Err(r) if r.status() == StatusCode::NOT_FOUND => {}
            Err(r) => return r,
        }
    }
    reply(json!({
        "total": total,
        "page": page,
        "pageSize": size,
        "search": search,
        "truncated": truncated,
        "ledgers": out,
    }))
}

/// The fragments of `m`: each ensemble with the entry ids it holds (the last one's end is
/// the ledger's last entry once closed, unknown while open).
fn fragments(m: &LedgerMetadata, set: &BookieSet) -> Vec<Value> {
    let firsts: Vec<i64> = m.ensembles.keys().copied().collect();
    m.ensembles
        .iter()
        .enumerate()
        .map(|(i, (first, bookies))| {
            let last = match firsts.get(i + 1) {
                Some(next) => Some(next - 1),
                None if m.state == LedgerState::Closed => Some(m.last_entry_id),
                None => None,
            };
            let bookies: Vec<Value> = bookies.iter().map(|b| with_state(set, b)).collect();
            json!({ "firstEntry": first, "lastEntry": last, "bookies": bookies })
        })
        .collect()
}

async fn ledger(State(s): State<AdminState>, Query(p): Params) -> Response {
    let id = match required_ledger(&p) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let read = with_store(&s, |st| async move {
        Ok((
            st.read_ledger(id).await?.value,
            st.list_underreplicated().await?,
            st.list_bookies().await?,
        ))
    })
    .await;
    let (m, marks, set) = match read {
        Ok(v) => v,
        Err(r) => return r,
    };
    let (lac, lac_error) = if m.state == LedgerState::Closed {
        (Some(m.last_entry_id), None)
    } else {
        match &s.cluster.reader {
            None => (
                None,
                Some("this endpoint has no client to ask the bookies".into()),
            ),
            Some(reader) => {
                match tokio::time::timeout(LAC_TIMEOUT, reader.last_add_confirmed(id)).await {
                    Ok(Ok(lac)) => (Some(lac), None),
                    Ok(Err(e)) => (None, Some(e)),
                    Err(_) => (
                        None,
                        Some(format!("no LAC within {} s", LAC_TIMEOUT.as_secs())),
                    ),
                }
            }
        }
    };
    let mark = marks.iter().find(|mk| mk.ledger_id == id);
    reply(json!({
        "metadata": ledger_metadata_json(id, &m),
        "fragments": fragments(&m, &set),
        "lac": lac,
        "lacError": lac_error,
        "underReplicated": mark.is_some(),
        "missingReplicas": mark.map(|mk| mk.missing_replicas.iter().map(|b| b.to_string()).collect::<Vec<_>>()),
        "markedAt": mark.and_then(|mk| mk.ctime),
        "entryReads": {
            "enabled": s.ledger_read_enabled,
            "tokenRequired": s.token.is_some(),
            "path": crate::token::LEDGER_READ_PATH,
        },
    }))
}

async fn autorecovery(State(s): State<AdminState>) -> Response {
    let read = with_store(&s, |st| async move {
        let marks = st.list_underreplicated().await?;
        // Whose worker holds each ledger (BookKeeper's lock znode names its holder).
        let mut holders = Vec::new();
        for mk in marks.iter().take(LOCK_LOOKUP_LIMIT) {
            holders.push(st.underreplicated_lock_holder(mk.ledger_id).await?);
        }
        Ok((
            (
                st.is_autorecovery_enabled().await?,
                st.current_auditor().await?,
                st.lost_bookie_recovery_delay().await?,
            ),
            marks,
            holders,
            st.list_bookies().await?,
            st.list_operations().await?,
        ))
    })
    .await;
    let ((enabled, auditor, delay), marks, holders, set, records) = match read {
        Ok(v) => v,
        Err(r) => return r,
    };
    let now = now_ms();
    let worker = s.worker.get();
    let (repairing, failures) = match worker {
        Some(w) => (w.in_progress(), w.failures()),
        None => Default::default(),
    };
    let queue: Vec<Value> = marks
        .iter()
        .enumerate()
        .map(|(i, mk)| {
            let missing: Vec<Value> = mk
                .missing_replicas
                .iter()
                .map(|b| with_state(&set, b))
                .collect();
            let failure = failures.get(&mk.ledger_id);
            let mut row = json!({
                "ledgerId": mk.ledger_id,
                "missingReplicas": missing,
                "markedAt": mk.ctime,
                // What this process's worker knows: it repairs the ledger now, or why its
                // last attempt failed (another process's worker may hold the ledger).
                "repairing": repairing.contains(&mk.ledger_id),
                "stuck": failure.map(|f| json!({
                    "reason": f.reason,
                    "attempts": f.attempts,
                    "retryInSeconds": f.retry_in.as_secs(),
                    "retryAt": now + f.retry_in.as_millis() as i64,
                })),
            });
            // The holder of its lock, whichever process's worker it is (null: free; absent
            // past the first LOCK_LOOKUP_LIMIT marks: not read).
            if let Some(holder) = holders.get(i) {
                row["lockedBy"] = holder.clone().into();
            }
            row
        })
        .collect();
    let operations = operations(&s, &records, now);
    reply(json!({
        "enabled": enabled,
        "auditor": auditor.map(|a| a.to_string()),
        "lostBookieRecoveryDelaySeconds": delay.unwrap_or(0),
        "underReplicated": queue,
        "worker": worker.map(|w| json!({
            "inProgress": repairing,
            "ledgersReplicated": w.ledgers_replicated.load(Ordering::Relaxed),
            "entriesWritten": w.entries_written.load(Ordering::Relaxed),
            "bytesWritten": w.bytes_written.load(Ordering::Relaxed),
        })),
        "operations": operations,
    }))
}

/// The recovers and decommissions started through this endpoint (finished ones too), then
/// those other processes run, from their operation records (crate::operations); a record
/// that cannot be read is shown with why.
fn operations(s: &AdminState, records: &[(String, Vec<u8>)], now: i64) -> Vec<Value> {
    let local = s
        .cluster
        .reader
        .as_ref()
        .map(|r| r.operations())
        .unwrap_or_default();
    let published: BTreeSet<&str> = local.iter().filter_map(|op| op.record.as_deref()).collect();
    let mut out: Vec<Value> = local
        .iter()
        .map(|op| {
            let mut v = operation(op, now);
            v["startedHere"] = true.into();
            v
        })
        .collect();
    for (name, data) in records {
        if published.contains(name.as_str()) {
            continue;
        }
        out.push(match RecoverProgress::from_record(name, data) {
            Ok(op) => {
                let mut v = operation(&op, now);
                v["startedHere"] = false.into();
                v
            }
            Err(why) => json!({ "record": name, "error": why }),
        });
    }
    out
}

/// A recover or decommission with its progress and, while it runs, an estimate of the time
/// left from the pace so far (none before the first ledger is done); `now_ms` since the epoch.
fn operation(p: &RecoverProgress, now_ms: i64) -> Value {
    let elapsed_ms = (now_ms - p.started_ms).max(0);
    let eta_seconds = match (p.total, &p.finished) {
        (Some(total), None) if p.done > 0 => {
            let left = total.saturating_sub(p.done) as i64;
            Some(elapsed_ms * left / p.done as i64 / 1000)
        }
        _ => None,
    };
    let failed: Vec<Value> = p
        .failed
        .iter()
        .map(|(ledger, why)| json!({ "ledgerId": ledger, "reason": why }))
        .collect();
    json!({
        "kind": if p.decommission { "decommission" } else { "recover" },
        "bookies": p.bookies,
        "startedAt": p.started_ms,
        "ledgers": p.total,
        "done": p.done,
        "failed": failed,
        "running": p.finished.is_none(),
        "result": p.finished.as_ref().map(|r| match r {
            Ok(summary) => json!({ "ok": summary }),
            Err(why) => json!({ "error": why }),
        }),
        "etaSeconds": eta_seconds,
        "startedBy": p.origin.as_ref().map(|o| json!({ "host": o.host, "pid": o.pid })),
        "record": p.record,
    })
}

#[cfg(test)]
mod tests {
    use super::{RecoverProgress, operation};

    #[test]
    fn the_eta_follows_the_pace_so_far_and_only_while_running() {
        let mut p = RecoverProgress {
            bookies: vec!["b:1".into()],
            started_ms: 1_000_000,
            total: Some(4),
            ..Default::default()
        };
        // Nothing done yet: no pace, no estimate.
        assert!(operation(&p, 1_010_000)["etaSeconds"].is_null());
        // One ledger in 10 s, three left.
        p.done = 1;
        let v = operation(&p, 1_010_000);
        assert_eq!(
            (v["etaSeconds"].clone(), v["running"].clone()),
            (30.into(), true.into())
        );
        assert_eq!(v["kind"], "recover");
        p.done = 4;
        p.finished = Some(Ok("4 ledgers".into()));
        let v = operation(&p, 1_020_000);
        assert!(v["etaSeconds"].is_null(), "{v}");
        assert_eq!(v["result"]["ok"], "4 ledgers");
        // Not counted yet.
        p.total = None;
        p.finished = None;
        assert!(operation(&p, 1_020_000)["etaSeconds"].is_null());
    }
}
