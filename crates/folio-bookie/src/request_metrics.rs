//! The metrics every request records, with their handles registered once per bookie
//! server instead of looked up on every request: Folio's latency histogram and request
//! counter, BookKeeper's `bookkeeper_server_*` op stats (`bk_metrics`), and the bytes in
//! and out. A `metrics::counter!` with labels builds its key (allocating the labels),
//! hashes it and finds it in the recorder's registry each time; at 100-byte adds the six
//! such lookups of a request were a visible part of a bookie's CPU per entry. Requests
//! answered with an error are rare and take the macros' path. The tests of `/metrics`
//! (folio-http's `bookie_routes`, the binary's `standalone_http` with a label per bookie)
//! read what these record.
//!
//! Handles are registered on first use, on one of the bookie's threads, so that where one
//! process runs several bookies each gets its own `bookie` label (`folio_env::metric_label`).
//! The process's recorder must be installed before the bookie serves (folio-http's
//! `BookieAdmin` installs it when it is built); handles registered without one record nowhere.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{Counter, Histogram};

use crate::request::Status;
use crate::wire::OP_NAMES;

/// One bookie server's request metrics (shared by its connections).
#[derive(Default)]
pub(crate) struct RequestMetrics {
    ops: [OnceLock<OpMetrics>; OP_NAMES.len()],
    bytes_in: OnceLock<Counter>,
    bytes_out: OnceLock<Counter>,
}

/// The handles of one op answered EOK.
struct OpMetrics {
    latency: Histogram,
    ok: Counter,
    /// BookKeeper's request and processing op stats with `success="true"`, for the ops
    /// BookKeeper has.
    bk: Option<(Histogram, Histogram)>,
}

impl OpMetrics {
    fn register(op: &'static str) -> OpMetrics {
        OpMetrics {
            latency: metrics::histogram!("folio_bookie_request_latency_seconds", "op" => op),
            ok: metrics::counter!(
                "folio_bookie_requests_total",
                "op" => op,
                "status" => status_label(Status::Ok)
            ),
            bk: crate::bk_metrics::op_stats(op).map(|(request, processing)| {
                (
                    metrics::histogram!(request, "success" => "true"),
                    metrics::histogram!(processing, "success" => "true"),
                )
            }),
        }
    }
}

impl RequestMetrics {
    /// A request of op `op` (`wire::op_index`) answered with `status` after `elapsed`
    /// (from its decoding to its answer).
    pub(crate) fn done(&self, op: usize, status: Status, elapsed: Duration) {
        let name = OP_NAMES[op];
        if status != Status::Ok {
            return Self::done_slowly(name, status, elapsed);
        }
        let m = self.ops[op].get_or_init(|| OpMetrics::register(name));
        m.latency.record(elapsed.as_secs_f64());
        m.ok.increment(1);
        if let Some((request, processing)) = &m.bk {
            let ms = elapsed.as_secs_f64() * 1000.0;
            request.record(ms);
            processing.record(ms);
        }
    }

    /// The same metrics through the macros, for an error answer.
    fn done_slowly(op: &'static str, status: Status, elapsed: Duration) {
        metrics::histogram!("folio_bookie_request_latency_seconds", "op" => op)
            .record(elapsed.as_secs_f64());
        metrics::counter!(
            "folio_bookie_requests_total",
            "op" => op,
            "status" => status_label(status)
        )
        .increment(1);
        crate::bk_metrics::request_done(op, status == Status::Ok, elapsed);
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
