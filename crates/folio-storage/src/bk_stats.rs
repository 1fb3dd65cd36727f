//! The ledger store's metrics under BookKeeper's `DbLedgerStorageStats` names (scope
//! `bookie`), so that a BookKeeper dashboard's write-cache panels chart a Folio bookie:
//! `bookie_flush` (ms) and `bookie_flush_size` (bytes) summaries per write-cache flush,
//! `bookie_throttled_write` (ms a put waited for write-cache room) with its counter
//! `bookie_throttled_write_requests`, and `bookie_rejected_write_requests` (puts refused
//! because a flush failed while they waited). Without a recorder (the simulator, tools)
//! these calls do nothing. A summary has no series before its first sample; the bookie
//! registers the two counters at each scrape, so that they show 0 before the first.

use std::time::Instant;

use crate::write_cache::Generation;

fn success(ok: bool) -> &'static str {
    if ok { "true" } else { "false" }
}

/// A write-cache flush ended (only one that had entries to write is counted, as
/// BookKeeper skips an empty write cache).
pub(crate) fn flushed(entries: &Generation, started: Instant, ok: bool) {
    if entries.is_empty() {
        return;
    }
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let bytes = entries.bytes();
    metrics::histogram!("bookie_flush", "success" => success(ok)).record(ms);
    metrics::histogram!("bookie_flush_size", "success" => success(ok)).record(bytes as f64);
}

/// A put waited for write-cache room since `since`, then went in.
pub(crate) fn write_throttled(since: Instant) {
    metrics::counter!("bookie_throttled_write_requests").increment(1);
    metrics::histogram!("bookie_throttled_write", "success" => "true")
        .record(since.elapsed().as_secs_f64() * 1e3);
}

/// A put was refused: a flush failed while it waited for room (`since`, if it waited).
pub(crate) fn write_rejected(since: Option<Instant>) {
    metrics::counter!("bookie_rejected_write_requests").increment(1);
    if let Some(t) = since {
        metrics::histogram!("bookie_throttled_write", "success" => "false")
            .record(t.elapsed().as_secs_f64() * 1e3);
    }
}
