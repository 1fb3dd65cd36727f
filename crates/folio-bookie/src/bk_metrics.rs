//! The bookie's main metrics under BookKeeper's own Prometheus names, so that a dashboard
//! built for a BookKeeper bookie charts a Folio bookie unchanged. BookKeeper's
//! `PrometheusMetricsProvider` joins scope and name with `_` (`bookkeeper_server` for the
//! request processor, `bookie` for the bookie itself) and reports an op's latency as a
//! summary in milliseconds with a `success` label (`true` only for EOK) and the quantiles
//! [`QUANTILES`]. Folio's own `folio_*` metrics say more (a status label, a histogram with
//! buckets, seconds); these exist only for compatibility.

/// The quantiles of BookKeeper's op-stats summaries.
pub use folio_env::op_stats::QUANTILES;

/// BookKeeper's request-level and processing-level op stats for a request (Folio's op
/// names, `wire::op_name`). Folio times one span per request, from its decoding to its
/// response, and reports it under both (`request_metrics`, one op stats shown twice).
pub(crate) fn op_stats(op: &str) -> Option<(&'static str, &'static str)> {
    Some(match op {
        "add" => (
            "bookkeeper_server_ADD_ENTRY_REQUEST",
            "bookkeeper_server_ADD_ENTRY",
        ),
        "read" => (
            "bookkeeper_server_READ_ENTRY_REQUEST",
            "bookkeeper_server_READ_ENTRY",
        ),
        "read_lac" => (
            "bookkeeper_server_READ_LAC_REQUEST",
            "bookkeeper_server_READ_LAC",
        ),
        "write_lac" => (
            "bookkeeper_server_WRITE_LAC_REQUEST",
            "bookkeeper_server_WRITE_LAC",
        ),
        "force_ledger" => (
            "bookkeeper_server_FORCE_LEDGER_REQUEST",
            "bookkeeper_server_FORCE_LEDGER",
        ),
        "get_bookie_info" => (
            "bookkeeper_server_GET_BOOKIE_INFO_REQUEST",
            "bookkeeper_server_GET_BOOKIE_INFO",
        ),
        "get_list_of_entries" => (
            "bookkeeper_server_GET_LIST_OF_ENTRIES_OF_LEDGER_REQUEST",
            "bookkeeper_server_GET_LIST_OF_ENTRIES_OF_LEDGER",
        ),
        _ => return None,
    })
}

/// BookKeeper's `bookie_SERVER_STATUS`: 1 writable, 0 read-only, -1 not registered.
pub fn server_status(status: i8) {
    metrics::gauge!("bookie_SERVER_STATUS").set(f64::from(status));
}

/// BookKeeper's `bookie_write_cache_size` (bytes in the write cache, not yet in an entry
/// log) and `bookie_JOURNAL_DIRS`.
pub fn storage_gauges(write_cache_bytes: u64, journal_dirs: usize) {
    metrics::gauge!("bookie_write_cache_size").set(write_cache_bytes as f64);
    metrics::gauge!("bookie_JOURNAL_DIRS").set(journal_dirs as f64);
}

/// BookKeeper's read-cache figures (`DbLedgerStorageStats`, scope `bookie`): the counters
/// `bookie_read_cache_hits`, `bookie_read_cache_misses`, `bookie_readahead_batch_count`
/// (entries read ahead) and `bookie_readahead_batch_size` (their bytes), and the gauges
/// `bookie_read_cache_size` (bytes) and `bookie_read_cache_count` (entries). The store
/// counts; a scrape copies its totals.
pub fn read_cache(stats: folio_storage::read_cache::ReadCacheStats) {
    metrics::counter!("bookie_read_cache_hits").absolute(stats.hits);
    metrics::counter!("bookie_read_cache_misses").absolute(stats.misses);
    metrics::counter!("bookie_readahead_batch_count").absolute(stats.read_ahead_entries);
    metrics::counter!("bookie_readahead_batch_size").absolute(stats.read_ahead_bytes);
    metrics::gauge!("bookie_read_cache_size").set(stats.bytes as f64);
    metrics::gauge!("bookie_read_cache_count").set(stats.entries as f64);
}

/// BookKeeper's `bookie_journal_JOURNAL_FORCE_WRITE_QUEUE_SIZE` (written groups waiting
/// for the force-write thread's fdatasync) and the ledger storage's `bookie_ledgers_count`
/// and `bookie_entries_count` (`LedgerMetadataIndexStats`, `EntryLocationIndexStats`);
/// the counts are left as they were when they cannot be read. Also registers the ledger
/// store's throttled- and rejected-write counters.
pub fn journal_and_index(engine: &folio_storage::Storage) {
    // Counted by the ledger store; registered here so that they show 0 before the first.
    metrics::counter!("bookie_throttled_write_requests").increment(0);
    metrics::counter!("bookie_rejected_write_requests").increment(0);
    metrics::gauge!("bookie_journal_JOURNAL_FORCE_WRITE_QUEUE_SIZE")
        .set(engine.journal_force_write_queue_len() as f64);
    match engine.ledger_and_entry_counts() {
        Ok((ledgers, entries)) => {
            metrics::gauge!("bookie_ledgers_count").set(ledgers as f64);
            metrics::gauge!("bookie_entries_count").set(entries as f64);
        }
        Err(e) => tracing::warn!("cannot count the ledgers and entries for /metrics: {e}"),
    }
}

/// BookKeeper's entry logger gauges with a log per ledger (`EntryLogManagerForEntryLogPerLedger`,
/// scope `entrylogger` under `bookie`): logs being written, logs rotated because their
/// ledger's access expired or because too many were open, ledgers with several logs.
/// (`bookie_entrylogger_ENTRYLOGS_PER_LEDGER`, a summary, is recorded by the storage engine.)
pub fn entry_logger(stats: &folio_storage::entry_log::EntryLogStats) {
    use std::sync::atomic::Ordering::Relaxed;
    for (name, v) in [
        (
            "bookie_entrylogger_NUM_OF_WRITE_ACTIVE_LEDGERS",
            &stats.active_logs,
        ),
        (
            "bookie_entrylogger_NUM_OF_WRITE_LEDGERS_REMOVED_CACHE_EXPIRY",
            &stats.removed_by_expiry,
        ),
        (
            "bookie_entrylogger_NUM_OF_WRITE_LEDGERS_REMOVED_CACHE_MAXSIZE",
            &stats.removed_by_max_size,
        ),
        (
            "bookie_entrylogger_NUM_LEDGERS_HAVING_MULTIPLE_ENTRYLOGS",
            &stats.ledgers_with_multiple_logs,
        ),
    ] {
        metrics::gauge!(name).set(v.load(Relaxed) as f64);
    }
}
