//! Folio's autorecovery: it restores the copies a lost bookie held (DESIGN.md invariant 10:
//! Qw copies of every entry, no closed ledger made longer or shorter).
//!
//! * [`Auditor`]: one per cluster (elected); notices lost bookies, applies the lost-bookie
//!   delay, and marks their ledgers under-replicated. Its decisions are
//!   [`AuditorCore`]'s, sans-IO.
//! * [`Worker`]: the ReplicationWorker; takes marked ledgers from the queue, most at risk
//!   first, and repairs them: the ledger checker finds the bad replicas, the fragment
//!   replicator copies them from the survivors to a bookie the placement policy picks, and
//!   the metadata is changed by compare-and-set only after the copy is durable.
//! * [`recover`] and [`decommission`]: the operator's commands, client side;
//!   [`update_bookie_in_ledgers`]: ledgers' metadata moved from one bookie id to another.
//!
//! Everything runs over a [`folio_client::Client`] and its metadata store, in BookKeeper's
//! layout, so Folio's autorecovery and BookKeeper's share one queue and one election.

mod admin;
mod auditor;
mod auditor_checks;
mod auditor_core;
mod checker;
mod config;
mod fragments;
mod rename;
mod repair;
mod replicator;
mod stats;
mod throttle;
mod worker;

pub use admin::{
    DecommissionError, LedgerReport, RecoverOptions, RecoverSummary, decommission, ledgers_naming,
    recover,
};
pub use auditor::{Auditor, AuditorStatus};
pub use auditor_checks::{Adherence, Shortfall, adherence, shortfall};
pub use auditor_core::{AuditorCore, Decision};
pub use checker::{BadReplica, CheckReport, Damage, check_ledger};
pub use config::AutoRecoveryConfig;
pub use fragments::{Fragment, fragments};
pub use rename::{RenameOptions, RenameSummary, update_bookie_in_ledgers};
pub use repair::{LedgerOutcome, Scope, repair_ledger};
pub use replicator::{CopyOptions, RepairError};
pub use throttle::Throttle;
pub use worker::{Failure, Worker, WorkerStatus};
