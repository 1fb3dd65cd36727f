//! `folio bench`: benchmarks that print throughput and latency percentiles (DESIGN.md
//! section 7). Each kind of benchmark is a subcommand in its own module; `report`
//! holds what they all print.

pub mod journal;
pub mod report;

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
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Journal(a) => journal::run(a),
    }
}
