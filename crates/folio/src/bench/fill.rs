//! `folio bench fill`: many ledgers written into a stopped bookie's data directory through the
//! bookie's own storage engine, so that a `folio bookie` then starts on a store that holds
//! them (issue 20, goal 5: "a million ledgers in the index", start-up with a full journal).
//!
//! A million ledger creations through the client and the metadata store would take hours; the
//! cost under study is the bookie's (its index, its start-up), so the entries go in directly:
//! the configuration is loaded as `folio bookie` loads it and the engine is opened with
//! `folio_bookie::engine::EngineStorage::open`, the assembly the bookie runs, so the journal,
//! entry logs and index land in the layout and format it reads. Each add is an ordinary one
//! (master key recorded, journaled with fdatasync, put in the write cache, checkpointed).
//! The ledgers get no metadata: a bookie started on them with a metadata store must not run
//! garbage collection (set `gc_wait_time_ms` high), which would rightly delete them all.
//!
//! `--no-checkpoint` ends the process once every add is acknowledged without the final
//! checkpoint, as a SIGKILL would: what no checkpoint covered stays in the journal, for the
//! next start to replay. With `flush_interval_ms` and `write_cache_bytes` high in the config
//! that is every entry written.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use folio_bookie::config::BookieConfig;
use folio_bookie::engine::EngineStorage;
use folio_env::Env;
use serde_json::{Map, json};

use super::journal::{Adds, MIN_ENTRY_SIZE, drive_adds};
use super::report::Summary;

/// The master key of every filled ledger (no client ever writes to them).
const MASTER_KEY: [u8; 20] = [0x46; 20];

#[derive(Args, Debug, Clone)]
pub struct FillArgs {
    /// The bookie's data directory (as `folio bookie --data-dir`); the bookie must be stopped.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The bookie's configuration file, loaded as `folio bookie --config` loads it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Ledgers to write.
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    pub ledgers: u64,
    /// Entries per ledger (written round robin over the ledgers).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub entries_per_ledger: u64,
    /// Bytes per entry (the whole entry as a client sends it, at least 32).
    #[arg(long, value_name = "BYTES", default_value_t = 100)]
    pub entry_size: usize,
    /// The first ledger id; the ledgers are consecutive from it. Far above the ids a
    /// metadata store hands out, so that a client's new ledger never collides with one.
    #[arg(long, value_name = "ID", default_value_t = 1 << 40)]
    pub first_ledger: i64,
    /// Adds kept outstanding at once.
    #[arg(long, value_name = "K", default_value_t = 10_000)]
    pub in_flight: u64,
    /// Exit once every add is acknowledged, without the final checkpoint (as SIGKILL would):
    /// the next start replays the journal.
    #[arg(long)]
    pub no_checkpoint: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: FillArgs) -> anyhow::Result<()> {
    let mut config = crate::bookie_cmd::load_config(a.config.as_deref())?;
    if let Some(d) = &a.data_dir {
        config.data_dir = Some(d.clone());
    }
    config.validate()?;
    let filled = fill(&a, &config)?;
    println!("{}", filled.report(&a));
    if a.no_checkpoint {
        // Every add is fdatasynced; leave without the checkpoint a clean stop would run
        // (dropping the engine would not run one either, but exiting here says so plainly).
        std::process::exit(0);
    }
    Ok(())
}

/// What a fill did.
struct Filled {
    summary: Summary,
    open_seconds: f64,
    close_seconds: f64,
    checkpoints: u64,
    journal_bytes: u64,
}

/// Writes the ledgers into the engine `config` names, then checkpoints and stops it, or with
/// `--no-checkpoint` leaves it unstopped (the caller exits; dropped, it stops without one).
fn fill(a: &FillArgs, config: &BookieConfig) -> anyhow::Result<Filled> {
    if a.entry_size < MIN_ENTRY_SIZE {
        bail!(
            "--entry-size {} is below {MIN_ENTRY_SIZE} bytes",
            a.entry_size
        );
    }
    for (name, v) in [
        ("--ledgers", a.ledgers),
        ("--entries-per-ledger", a.entries_per_ledger),
        ("--in-flight", a.in_flight),
    ] {
        if v == 0 {
            bail!("{name} must be at least 1");
        }
    }
    let env = Env::real();
    let opened = Instant::now();
    let storage = EngineStorage::open(&env, config).context("cannot open the bookie's storage")?;
    let open_seconds = opened.elapsed().as_secs_f64();
    let engine = storage.engine();

    let total = a.ledgers * a.entries_per_ledger;
    let journal_before = engine.journal_stats();
    let checkpoints_before = engine.checkpoints();
    let start = Instant::now();
    let adds = Adds {
        first_ledger: a.first_ledger,
        ledgers: a.ledgers,
        total,
        in_flight: a.in_flight,
        entry_size: a.entry_size,
        master_key: &MASTER_KEY,
    };
    let latencies = drive_adds(engine, &adds, || {})?;
    let elapsed = start.elapsed();
    let journal = engine.journal_stats() - journal_before;
    let checkpoints = engine.checkpoints() - checkpoints_before;
    let closing = Instant::now();
    if !a.no_checkpoint {
        storage.shutdown().context("the final checkpoint failed")?;
    }
    Ok(Filled {
        summary: Summary {
            entries: total,
            bytes: total * a.entry_size as u64,
            elapsed,
            latencies,
            cpu_seconds: None,
        },
        open_seconds,
        close_seconds: closing.elapsed().as_secs_f64(),
        checkpoints,
        journal_bytes: journal.bytes,
    })
}

impl Filled {
    fn report(&self, a: &FillArgs) -> String {
        let Filled {
            summary,
            open_seconds,
            close_seconds,
            checkpoints,
            journal_bytes,
        } = self;
        if a.json {
            let mut extra = Map::new();
            extra.insert("bench".into(), json!("fill"));
            extra.insert("ledgers".into(), json!(a.ledgers));
            extra.insert("entries_per_ledger".into(), json!(a.entries_per_ledger));
            extra.insert("entry_size".into(), json!(a.entry_size));
            extra.insert("first_ledger".into(), json!(a.first_ledger));
            extra.insert("in_flight".into(), json!(a.in_flight));
            extra.insert("open_seconds".into(), json!(open_seconds));
            extra.insert("close_seconds".into(), json!(close_seconds));
            extra.insert("checkpoints_during".into(), json!(checkpoints));
            extra.insert("final_checkpoint".into(), json!(!a.no_checkpoint));
            extra.insert("journal_bytes".into(), json!(journal_bytes));
            return summary.to_json(extra).to_string();
        }
        format!(
            "folio bench fill: {} ledgers x {} entries of {} B from ledger {} (opened in \
             {open_seconds:.1} s)\n{}\n{journal_bytes} journal bytes, {checkpoints} checkpoints \
             during the fill, {}",
            a.ledgers,
            a.entries_per_ledger,
            a.entry_size,
            a.first_ledger,
            summary.to_text(),
            if a.no_checkpoint {
                "no final checkpoint: the next start replays the journal".to_string()
            } else {
                format!("final checkpoint {close_seconds:.1} s")
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::journal::entry_bytes;

    fn args(no_checkpoint: bool) -> FillArgs {
        FillArgs {
            data_dir: None,
            config: None,
            ledgers: 300,
            entries_per_ledger: 2,
            entry_size: 100,
            first_ledger: 1 << 40,
            in_flight: 64,
            no_checkpoint,
            json: true,
        }
    }

    /// The bookie's engine, opened again on a filled data directory, holds every ledger and
    /// entry: from the index after the final checkpoint, from the journal's replay without it
    /// (the state a SIGKILL leaves, which the replay benchmark depends on).
    #[test]
    fn the_bookie_engine_reopens_a_filled_data_dir_with_every_entry() {
        for no_checkpoint in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let config = BookieConfig {
                data_dir: Some(dir.path().to_path_buf()),
                ..BookieConfig::default()
            };
            let a = args(no_checkpoint);
            let filler: Vec<u8> = (0..a.entry_size).map(|i| i as u8).collect();
            let filled = fill(&a, &config).unwrap();
            assert_eq!(filled.summary.entries, 600);
            let storage = EngineStorage::open(&Env::real(), &config).unwrap();
            let engine = storage.engine();
            if no_checkpoint {
                assert!(engine.replay_stats().records >= 600, "{no_checkpoint}");
            }
            for l in [0, 1, 299] {
                let ledger = a.first_ledger + l;
                for e in 0..2 {
                    let got = engine.read_entry(ledger, e).unwrap().expect("stored");
                    assert_eq!(got, entry_bytes(ledger, e, &filler), "{no_checkpoint}");
                }
            }
            assert!(
                engine
                    .read_entry(a.first_ledger + 300, 0)
                    .unwrap()
                    .is_none()
            );
            storage.shutdown().unwrap();
        }
    }
}
