//! The admin HTTP endpoint of every Folio process that has one (a bookie, `folio standalone`,
//! `folio autorecovery`): `/heartbeat` and `/metrics` (Prometheus text), BookKeeper's
//! `/api/v1/...` paths with its JSON field names (the bookie's own state and disk, the
//! cluster through the metadata store, autorecovery), and the web dashboard at `/` with the
//! JSON it reads under `/ui/api/`.
//!
//! Errors are JSON `{"error": "..."}` with a status that fits: 400 for a bad parameter, 404
//! for a missing ledger, 503 when the metadata store cannot be reached.
//!
//! Protection (docs/security.md): a bookie's endpoint listens on loopback unless
//! `http_listen_address` says otherwise; with `http_auth_token_file`, mutations and ledger
//! reads need the bearer token (`token.rs`); `/api/v1/ledger/read` answers 403 unless
//! `http_ledger_read_enabled`; HTTPS with `http_tls_key_file` and `http_tls_certificate_file`.
//!
//! A bookie reaches this crate only through `folio_bookie::admin::AdminServer`, which
//! [`BookieAdmin`] implements: the bookie crate sits below this one.

mod bk_api;
mod bookie_routes;
mod dashboard;
mod host_metrics;
mod metrics;
mod operations;
mod peers;
mod server;
mod tls_listener;
mod token;

pub use bk_api::{
    LacFuture, LedgerReader, ReadFuture, RecoverProgress, SanityFuture, cluster_info_json,
    ledger_metadata_json,
};
pub use host_metrics::process_cpu_seconds;
pub use operations::{Origin, PUBLISH_INTERVAL, Publisher};
pub use server::{BookieAdmin, HttpHandle, WorkerSlot, serve_cluster};
pub use token::read_token_file;
