//! Whole-cluster simulation of Folio in one process, driven by one seed.
//!
//! A run starts a cluster of bookies, each the real request processor
//! (`folio_bookie::Processor`) over the bookie's `EngineStorage` and the production storage
//! engine (journal, `LedgerStore` with entry logs and the redb index), on a simulated disk
//! (`folio_env::sim::SimFileSystem`); mem:// metadata (`MemCluster::deterministic`); and
//! real clients (`Client::with_seams`) whose `Connector` is the simulated network of
//! [`net`], and whose metadata store can fail ([`meta`]). Writers append with pipelining,
//! readers recover ledgers (sometimes two at once), a zombie writer resumes after being
//! fenced, and an injector crashes bookies (torn writes, whole-cluster power loss),
//! partitions clients from bookies, fails fsyncs, fills and slows disks, expires bookies'
//! metadata sessions, cuts the clients off the metadata store, replaces a bookie's disk by
//! an empty one (its cookie must refuse it), and drops, delays and duplicates messages.
//! Then every fault heals, every ledger must recover and read in full, the wiped bookie is
//! reformatted and every ledger must still read in full. In half the seeds
//! (`SimConfig::autorecovery`) an Auditor and one or two ReplicationWorkers run as
//! processes of their own, killed and session-expired by the injector; the wiped bookie
//! stays lost until they heal, and invariant 10 is checked by asking every bookie. The
//! [`history`] checkers judge persistence, agreement, fencing, dirty reads and closed
//! ledgers' ends; [`sweep`] runs many seeds and counts faults.
//!
//! Determinism: all choices come from the seed (one generator per consumer, forked from
//! the seed's), time is tokio's paused clock (auto-advancing when every task waits), and
//! the runtime is single-threaded. The journal runs on its own OS threads; the network
//! hands each request to the processor and busy-waits (in real time, virtual time
//! standing still) for the storage completion, so the journal's work happens between two
//! runtime steps and in request order. Checkpoints are simulator events on the runtime
//! thread, never a timer thread. What remains outside the seed is counted, not hidden:
//! [`scenario::Outcome::late_completions`] counts completions that outlived the wait.
//! Replaying a seed is tested by comparing digests of every message (see
//! docs/simulation.md).
//!
//! Why not turmoil or madsim: madsim replaces tokio and std at build time and cannot
//! control the journal's OS threads (it would need a rewrite of the engine's threading),
//! and turmoil simulates hosts over a TCP/UDP model while our seam is a `Connector` of
//! byte streams and a `FileSystem`, which a paused tokio runtime and in-memory duplex
//! streams serve directly, with no new dependency.
//!
//! Replay a seed: `FOLIO_SIM_SEED=<n> cargo test -p folio-sim --test sim replay -- --exact --nocapture`.
//! Many seeds: `cargo run -p folio-sim --release --example sweep -- <first> <count>`.

pub mod bookie;
pub mod clock;
pub mod history;
pub mod meta;
pub mod net;
pub mod rng;
pub mod scenario;
pub mod sweep;

pub use bookie::BookieKnobs;
pub use net::ProtocolBreaks;
pub use scenario::{AutoRecoveryRuns, FaultCounts, Outcome, SimConfig, run};
