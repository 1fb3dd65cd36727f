//! `/metrics`: the process-wide Prometheus recorder and its text. Folio's own latency
//! histograms get buckets; everything else is a summary with BookKeeper's quantiles, so that
//! dashboards built for BookKeeper's bookie chart a Folio one. Where one process runs several
//! bookies (`folio standalone`), each one's metrics carry its `bookie` label and each one's
//! `/metrics` shows its own series (and the process's unlabelled ones).

use std::sync::OnceLock;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use metrics::{
    Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString, Unit,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing::warn;

use crate::server::AdminState;

/// The process-wide Prometheus recorder (the `metrics` facade has one global recorder, so every
/// bookie of a process shares it; each one's metrics carry its `bookie` label where several
/// run, see [`Labelled`]). `None` if something else installed a recorder first.
pub(crate) fn prometheus() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = recorder().build_recorder();
            let handle = recorder.handle();
            match metrics::set_global_recorder(Labelled(recorder)) {
                Ok(()) => {
                    start_upkeep(handle.clone());
                    Some(handle)
                }
                Err(e) => {
                    warn!("metrics recorder not installed: {e}");
                    None
                }
            }
        })
        .as_ref()
}

/// How often histogram and summary samples are folded into their aggregates: every
/// second, so that the samples queued in between stay small (5 s of them were 6 MB of a
/// bookie's heap at 37,000 adds a second; heaptrack, docs/performance.md).
const UPKEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// `build_recorder` starts no upkeep (`install` would): every histogram sample then stays
/// queued until the next scrape, so a bookie that nobody scrapes grows by each request's
/// samples, about 1 MB a second per bookie at 30,000 adds a second (RSS 169 to 357 MB in
/// 60 s of 100-byte adds, measured). A thread of its own folds them in every
/// [`UPKEEP_INTERVAL`], as the exporter's own upkeep task would, and starts the summary
/// windows of Folio's op stats (`folio_env::op_stats::rotate`).
fn start_upkeep(handle: PrometheusHandle) {
    let started = std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(UPKEEP_INTERVAL);
                handle.run_upkeep();
                folio_env::op_stats::rotate(std::time::Instant::now());
            }
        });
    if let Err(e) = started {
        warn!("cannot start the metrics upkeep thread (samples wait for a scrape): {e}");
    }
}

/// Adds the `bookie` label of the recording thread (`folio_env::metric_label`: set on the
/// threads of each bookie of `folio standalone`) to every metric it records, so that the
/// bookies of one process keep their series apart; unlabelled threads record as they are.
struct Labelled<R>(R);

impl<R> Labelled<R> {
    fn key(key: &Key) -> std::borrow::Cow<'_, Key> {
        match folio_env::metric_label::current() {
            Some(bookie) => std::borrow::Cow::Owned(
                key.with_extra_labels(vec![Label::new("bookie", bookie.to_string())]),
            ),
            None => std::borrow::Cow::Borrowed(key),
        }
    }
}

impl<R: Recorder> Recorder for Labelled<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_counter(key, unit, description)
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_gauge(key, unit, description)
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_histogram(key, unit, description)
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.0.register_counter(&Self::key(key), metadata)
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.0.register_gauge(&Self::key(key), metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.0.register_histogram(&Self::key(key), metadata)
    }
}

/// The Prometheus text with the samples of other bookies of this process left out: a bookie
/// whose metrics are labelled `bookie="<label>"` shows its own and the unlabelled ones.
fn own_samples(text: &str, label: &str) -> String {
    let own = format!("bookie=\"{label}\"");
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let other = !line.starts_with('#') && line.contains("bookie=\"") && !line.contains(&own);
        if !other {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Every op stats summary the exporter records has BookKeeper's quantiles, as its
/// Prometheus provider reports op stats. (The request latencies and the journal's adds are
/// `folio_env::op_stats`, rendered after the exporter's text.)
fn recorder() -> PrometheusBuilder {
    // Fails only on an empty list; this is a constant.
    PrometheusBuilder::new()
        .set_quantiles(folio_bookie::bk_metrics::QUANTILES)
        .expect("quantiles")
}

pub(crate) async fn metrics_text(State(s): State<AdminState>) -> Response {
    if let Some(storage) = &s.storage {
        metrics::gauge!("folio_bookie_read_only").set(if storage.is_read_only() {
            1.0
        } else {
            0.0
        });
    }
    if let Some(refresh) = &s.refresh {
        refresh();
    }
    crate::host_metrics::set_process_gauges();
    if let Some(disk) = &s.local {
        let writable = s.storage.as_ref().is_some_and(|st| !st.is_read_only());
        crate::host_metrics::set_directory_gauges(disk, writable);
    }
    match prometheus() {
        Some(h) => {
            let mut text = h.render();
            folio_env::op_stats::rotate(std::time::Instant::now());
            folio_env::op_stats::render(&mut text);
            (
                [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                match &s.metrics_label {
                    Some(label) => own_samples(&text, label),
                    None => text,
                },
            )
                .into_response()
        }
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics recorder not installed\n",
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bookie_shows_its_own_samples_and_the_unlabelled_ones() {
        let text =
            "# TYPE c counter\nc{bookie=\"a\"} 1\nc{bookie=\"b\"} 2\nc{bookie=\"ab\"} 3\nu 4\n";
        assert_eq!(
            own_samples(text, "a"),
            "# TYPE c counter\nc{bookie=\"a\"} 1\nu 4\n"
        );
    }
}
