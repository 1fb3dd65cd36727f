//! Bookie-local storage.
pub mod cookie;
pub mod entry_log;
pub mod index;
pub mod ledger_store;
pub mod write_cache;
