//! Folio's client library: BookKeeper's ledger API over Folio (or BookKeeper) bookies.
//!
//! * [`Client`]: connect with a metadata store; create, open (with or without recovery),
//!   delete and list ledgers.
//! * [`LedgerHandle`]: the writer; pipelined [`LedgerHandle::append`]s acknowledged in
//!   entry order once an ack quorum of the entry's write set has them; ensemble changes
//!   when a bookie fails; [`LedgerHandle::close`].
//! * [`ReadHandle`]: reads (digest verified, next replica on failure), the LAC, the long
//!   poll for a new LAC, unconfirmed reads.
//!
//! The protocol decisions live in sans-IO state machines, tested on their own:
//! [`pending`] (quorum tracking, in-order acknowledgement, when to change the ensemble),
//! [`recovery`] (fencing coverage, read-forward decisions, write-back), [`ensemble`]
//! (placement and the metadata of a change) and [`coverage`]. The async shell only moves
//! bytes: [`conn`] keeps one v3 connection per bookie and matches responses by txn id.
//!
//! A runnable tour against bookies started in-process:
//! `cargo run -p folio-client --example quickstart`. In short:
//!
//! ```no_run
//! # async fn demo(metadata: std::sync::Arc<dyn folio_metadata::MetadataStore>) -> folio_client::Result<()> {
//! use folio_client::{Client, ClientConfig, CreateOptions, OpenOptions};
//!
//! let client = Client::connect(metadata, ClientConfig::default()).await?;
//! let writer = client.create_ledger(CreateOptions::default().password("pw")).await?;
//! let acks: Vec<_> = (0..10).map(|i| writer.append(format!("entry {i}"))).collect();
//! for ack in acks {
//!     ack.await?;
//! }
//! // A reader opening with recovery fences the writer: its next append fails.
//! let reader = client.open_ledger(writer.id(), b"pw", OpenOptions::recovery()).await?;
//! assert_eq!(reader.last_add_confirmed(), 9);
//! assert!(writer.append("late").await.unwrap_err().is_fenced());
//! # Ok(())
//! # }
//! ```

mod client;
pub mod config;
pub mod conn;
pub mod coverage;
pub mod ensemble;
mod entry_queue;
pub mod error;
mod ledger;
pub mod pending;
mod reader;
mod recover;
pub mod recovery;
mod replica;
pub mod tls;
mod write_close;
mod writer;

pub use client::{Client, ClientStats, CreateOptions, OpenOptions, proto_digest};
pub use config::ClientConfig;
pub use error::{ClientError, Result};
pub use folio_types::metadata::DigestType;
pub use ledger::{AppendFuture, LedgerHandle};
pub use reader::{LedgerEntry, ReadHandle};
pub use replica::{BookieInfo, DeferredCopies, ReplicaAnswer};
pub use tls::{ClientCertFiles, ClientTls, TlsConfigError};
