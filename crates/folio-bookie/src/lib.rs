//! The bookie: BookKeeper's request processing over the local storage engine.
//!
//! The core ([`processor`]) is a sans-IO state machine: it takes one decoded request (v3 or v2,
//! already converted to the protocol-neutral [`request`] model), talks to storage through the
//! [`storage::BookieStorage`] trait and hands back responses through a callback, so it can be
//! tested with the in-memory [`memory::MemoryStorage`] and driven by the simulator. The async shell
//! ([`server`]) only moves frames between sockets and the processor (answers through a
//! connection's `responder`); [`wire`] converts frames to
//! and from the model. [`engine`] adapts the real storage engine, [`gc`] deletes ledgers whose
//! metadata is gone, [`registration`] checks the cookie and keeps the bookie registered, [`admin`] is the seam to the admin
//! HTTP endpoint (served by `folio-http`), [`config`] the TOML
//! file, [`tls`] StartTLS and authorization by client certificate, and [`node`] puts one whole bookie together.

pub mod admin;
pub mod bk_metrics;
pub mod bookie_address;
pub mod config;
pub mod engine;
pub mod gc;
pub mod memory;
pub mod node;
pub mod processor;
pub mod read_pool;
pub mod registration;
pub mod request;
mod request_metrics;
mod responder;
pub mod server;
pub mod storage;
pub mod tls;
pub mod wire;

pub use processor::{ConnectionId, LongPollTimer, Processor, ProcessorConfig, Reply};
pub use request::{Request, Response, Status};
pub use storage::{BookieStorage, StorageError, WriteCallback};

#[cfg(test)]
mod processor_tests;
