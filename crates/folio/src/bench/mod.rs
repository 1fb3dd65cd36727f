//! `folio bench`: benchmarks that print throughput and latency percentiles (DESIGN.md
//! section 7). Each kind of benchmark is a subcommand in its own module; `report`
//! holds what they all print.

pub mod bookie;
pub mod fill;
pub mod journal;
pub mod read;
pub mod reclaim;
pub mod report;
pub mod rereplicate;
pub mod tail;
pub mod write;

use clap::{Args, Subcommand};

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Adds through the storage engine alone (journal with fdatasync, ledger store; no
    /// network), like BookKeeper's `bkperf journal append`.
    Journal(journal::JournalArgs),
    /// Writes many ledgers (default a million) into a stopped bookie's data directory through
    /// its storage engine, for a bookie to start on (no metadata, no network).
    Fill(fill::FillArgs),
    /// Adds to one bookie over the wire, like BookKeeper's `benchmark bookie`.
    Bookie(bookie::BookieBenchArgs),
    /// Appends through the client to the cluster of --metadata, like `benchmark writes`.
    Write(write::WriteBenchArgs),
    /// Writes ledgers (or takes --ledger IDs) and reads them back through the client,
    /// like `benchmark reads`.
    Read(read::ReadBenchArgs),
    /// Restores every replica of one bookie elsewhere (autorecovery's repair path): MB/s and
    /// ledgers per minute.
    Rereplicate(rereplicate::RereplicateArgs),
    /// Deleting half of many ledgers written at once, then reclaiming their space (GC and
    /// compaction): bytes rewritten and time, one interleaved entry log or a log per ledger.
    Reclaim(reclaim::ReclaimArgs),
    /// One writer and tailing readers (long-poll LAC) on one ledger: end-to-end latency,
    /// like `benchmark reads -listen`.
    Tail(tail::TailBenchArgs),
}

pub fn run(args: BenchArgs, metadata: Option<String>) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Journal(a) => journal::run(a),
        BenchCommand::Fill(a) => fill::run(a),
        BenchCommand::Bookie(a) => bookie::run(a),
        BenchCommand::Write(a) => write::run(a, metadata),
        BenchCommand::Read(a) => read::run(a, metadata),
        BenchCommand::Tail(a) => tail::run(a, metadata),
        BenchCommand::Reclaim(a) => reclaim::run(a),
        BenchCommand::Rereplicate(a) => rereplicate::run(a, metadata),
    }
}
