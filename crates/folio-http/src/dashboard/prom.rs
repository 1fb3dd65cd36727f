//! Reads a few samples out of this process's Prometheus text, for the cluster page's
//! per-bookie columns (the charts parse `/metrics` themselves, in the page).

use serde_json::{Value, json};

/// The sum of the samples of `name` whose labels include every `labels` pair (a summary's
/// quantile, a counter over its label values), or `None` when there is none.
pub(crate) fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (label_text, value) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once('}') {
                Some((l, v)) => (l, v),
                None => continue,
            },
            None if rest.starts_with(' ') => ("", rest),
            // Another metric whose name starts with `name`.
            None => continue,
        };
        let wanted = labels
            .iter()
            .all(|(k, v)| label_text.split(',').any(|kv| kv == format!("{k}=\"{v}\"")));
        if !wanted {
            continue;
        }
        if let Some(Ok(v)) = value.split_whitespace().next().map(str::parse::<f64>) {
            found = Some(found.unwrap_or(0.0) + v);
        }
    }
    found.filter(|v: &f64| v.is_finite())
}

/// The counters and latencies the cluster page shows for a bookie.
pub(crate) fn summary(text: &str) -> Value {
    let ok = ("success", "true");
    let quantile = |name: &str, q: &str| sample(text, name, &[ok, ("quantile", q)]);
    json!({
        "addsTotal": sample(text, "bookkeeper_server_ADD_ENTRY_REQUEST_count", &[ok]),
        "readsTotal": sample(text, "bookkeeper_server_READ_ENTRY_REQUEST_count", &[ok]),
        "addP50Ms": quantile("bookkeeper_server_ADD_ENTRY_REQUEST", "0.5"),
        "addP99Ms": quantile("bookkeeper_server_ADD_ENTRY_REQUEST", "0.99"),
        "journalSyncP99Ms": quantile("bookie_journal_JOURNAL_SYNC", "0.99"),
        "writeCacheBytes": sample(text, "bookie_write_cache_size", &[]),
    })
}

#[cfg(test)]
mod tests {
    use super::sample;

    const TEXT: &str = "\
# TYPE bookkeeper_server_ADD_ENTRY_REQUEST summary
bookkeeper_server_ADD_ENTRY_REQUEST{success=\"true\",quantile=\"0.99\"} 2.5
bookkeeper_server_ADD_ENTRY_REQUEST{success=\"false\",quantile=\"0.99\"} 9
bookkeeper_server_ADD_ENTRY_REQUEST_count{success=\"true\"} 7
bookkeeper_server_ADD_ENTRY_REQUEST_count{success=\"false\"} 1
bookie_write_cache_size 4096
";

    #[test]
    fn samples_are_found_by_name_and_labels() {
        let q = [("success", "true"), ("quantile", "0.99")];
        assert_eq!(
            sample(TEXT, "bookkeeper_server_ADD_ENTRY_REQUEST", &q),
            Some(2.5)
        );
        // The `_count` series is another metric, not a sample of the summary.
        assert_eq!(
            sample(TEXT, "bookkeeper_server_ADD_ENTRY_REQUEST_count", &[]),
            Some(8.0)
        );
        assert_eq!(sample(TEXT, "bookie_write_cache_size", &[]), Some(4096.0));
        assert_eq!(sample(TEXT, "bookie_write_cache", &[]), None);
        assert_eq!(sample(TEXT, "no_such_metric", &[]), None);
    }
}
