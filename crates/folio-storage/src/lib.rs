//! The bookie's disk.
//!
//! Every write (add, fence, master key, explicit LAC) is appended to a journal and
//! acknowledged only after the journal's group-commit fdatasync covers it; the same
//! write goes to a ledger store (entry logs, index, write cache) that is made durable
//! later, by checkpoints. A checkpoint flushes the ledger store and then moves each
//! journal directory's mark forward, so a restart replays only what the ledger store
//! may have lost. [`Storage`] is the engine the bookie calls.

mod bk_stats;
pub mod callback_batch;
pub mod checkpoint;
pub mod config;
pub mod consistency;
mod deferred;
pub mod dir_lock;
pub mod error;
pub mod journal;
pub mod mem_store;
#[doc(hidden)]
pub mod negative;
pub mod storage;

pub mod cookie;
pub mod entry_log;
pub mod index;
pub mod ledger_store;
pub mod read_cache;
pub mod write_cache;

pub use config::{JournalConfig, StorageConfig};
pub use error::{BackendError, StorageError};
pub use journal::JournalStats;
#[doc(hidden)]
pub use negative::NegativeControls;
pub use storage::{LacRead, LedgerBackend, Storage, StoredLedger, WriteCallback};
