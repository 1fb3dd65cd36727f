//! `/metrics`: the process-wide Prometheus recorder and its text. Folio's own latency
//! histograms get buckets; everything else is a summary with BookKeeper's quantiles, so that
//! dashboards built for BookKeeper's bookie chart a Folio one.

use std::sync::OnceLock;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing::warn;

use crate::server::AdminState;

/// The process-wide Prometheus recorder (the `metrics` facade has one global recorder, so every
/// bookie of a process shares it). `None` if something else installed a recorder first.
pub(crate) fn prometheus() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| match recorder().install_recorder() {
            Ok(h) => Some(h),
            Err(e) => {
                warn!("metrics recorder not installed: {e}");
                None
            }
        })
        .as_ref()
}

/// Folio's own latency histograms get buckets (seconds, 100 µs to 10 s); everything else
/// is a summary with BookKeeper's quantiles, as its Prometheus provider reports op stats.
fn recorder() -> PrometheusBuilder {
    const BUCKETS: &[f64] = &[
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
        5.0, 10.0,
    ];
    // Both fail only on an empty list; these are constants.
    PrometheusBuilder::new()
        .set_quantiles(folio_bookie::bk_metrics::QUANTILES)
        .expect("quantiles")
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full(
                "folio_bookie_request_latency_seconds".into(),
            ),
            BUCKETS,
        )
        .expect("buckets")
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
        Some(h) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            h.render(),
        )
            .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics recorder not installed\n",
        )
            .into_response(),
    }
}
