//! The metrics every request records, with their handles registered once per bookie
//! server instead of looked up on every request: one op stats per op and outcome
//! (`folio_env::op_stats`), shown as Folio's latency histogram and as BookKeeper's
//! `bookkeeper_server_*` request and processing op stats (`bk_metrics`); Folio's request
//! counter; the bytes in and out. A `metrics::counter!` with labels builds its key
//! (allocating the labels), hashes it and finds it in the recorder's registry each time,
//! and each exporter histogram sample is a timestamped queue push: at small adds these were
//! a visible part of a bookie's CPU per entry. The tests of `/metrics` (folio-http's
//! `bookie_routes`, the binary's `standalone_http` with a label per bookie) read what
//! these record.
//!
//! Handles are registered on first use, on one of the bookie's threads, so that where one
//! process runs several bookies each gets its own `bookie` label (`folio_env::metric_label`).
//! The process's recorder must be installed before the bookie serves (folio-http's
//! `BookieAdmin` installs it when it is built); counters registered without one count
//! nowhere.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use folio_env::op_stats::{self, Kind, OpStats};
use metrics::Counter;

use crate::request::Status;
use crate::wire::OP_NAMES;

/// One bookie server's request metrics (shared by its connections).
#[derive(Default)]
pub(crate) struct RequestMetrics {
    ops: [OnceLock<OpMetrics>; OP_NAMES.len()],
    bytes_in: OnceLock<Counter>,
    bytes_out: OnceLock<Counter>,
}

/// The handles of one op.
struct OpMetrics {
    /// Answered EOK, and answered otherwise (BookKeeper's `success` label).
    ok: Arc<OpStats>,
    failed: Arc<OpStats>,
    ok_count: Counter,
}

impl OpMetrics {
    fn register(op: &'static str) -> OpMetrics {
        let ok = op_stats::op_stats(&format!("request {op} ok"));
        let failed = op_stats::op_stats(&format!("request {op} failed"));
        op_stats::expose(
            "folio_bookie_request_latency_seconds",
            Kind::Histogram,
            &[("op", op)],
            &[&ok, &failed],
        );
        if let Some((request, processing)) = crate::bk_metrics::op_stats(op) {
            for name in [request, processing] {
                op_stats::expose(name, Kind::Summary, &[("success", "true")], &[&ok]);
                op_stats::expose(name, Kind::Summary, &[("success", "false")], &[&failed]);
            }
        }
        OpMetrics {
            ok,
            failed,
            ok_count: requests_total(op, Status::Ok),
        }
    }
}

/// Folio's request counter of `op` answered with `status`.
fn requests_total(op: &'static str, status: Status) -> Counter {
    metrics::counter!(
        "folio_bookie_requests_total",
        "op" => op,
        "status" => status_label(status)
    )
}

impl RequestMetrics {
    /// A request of op `op` (`wire::op_index`) answered with `status` after `elapsed`
    /// (from its decoding to its answer).
    pub(crate) fn done(&self, op: usize, status: Status, elapsed: Duration) {
        let name = OP_NAMES[op];
        let m = self.ops[op].get_or_init(|| OpMetrics::register(name));
        if status == Status::Ok {
            m.ok.record(elapsed);
            m.ok_count.increment(1);
        } else {
            // Rare: the counter's key is looked up each time.
            m.failed.record(elapsed);
            requests_total(name, status).increment(1);
        }
    }

    /// Bytes read from clients (frames with their length prefix).
    pub(crate) fn bytes_in(&self, n: u64) {
        self.bytes_in
            .get_or_init(|| metrics::counter!("folio_bookie_bytes_in_total"))
            .increment(n);
    }

    /// Bytes written to clients (frames with their length prefix).
    pub(crate) fn bytes_out(&self, n: u64) {
        self.bytes_out
            .get_or_init(|| metrics::counter!("folio_bookie_bytes_out_total"))
            .increment(n);
    }
}

/// BookKeeper's name of a status, the `status` label of `folio_bookie_requests_total`.
fn status_label(status: Status) -> &'static str {
    match status {
        Status::Ok => "EOK",
        Status::NoLedger => "ENOLEDGER",
        Status::NoEntry => "ENOENTRY",
        Status::BadRequest => "EBADREQ",
        Status::Io => "EIO",
        Status::Unauthorized => "EUA",
        Status::BadVersion => "EBADVERSION",
        Status::Fenced => "EFENCED",
        Status::ReadOnly => "EREADONLY",
        Status::TooManyRequests => "ETOOMANYREQUESTS",
        Status::UnknownLedgerState => "EUNKNOWNLEDGERSTATE",
    }
}
