//! `folio bench reclaim`: what deleting ledgers costs the disk, with one interleaved entry
//! log against a log per ledger (seed 001, issue 18). Writes `--ledgers` ledgers at the same
//! time (round robin, so an interleaved log holds them all) through the production ledger
//! store on the real disk, write-closes them (BP-32, as a Folio client does), deletes every
//! other one, then reclaims their space as a bookie's GC round does: entry logs whose
//! ledgers are all deleted are removed whole, then major compaction (threshold 0.8) copies
//! the live entries out of the mixed ones. Reports the bytes compaction rewrote, the bytes
//! freed and the time it took. No journal: reclaiming is the entry logs' business.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Args;
use folio_env::Env;
use folio_storage::entry_log::format::RECORD_HEADER_LEN;
use folio_storage::ledger_store::{CompactionLimits, LedgerStore, LedgerStoreConfig};
use serde_json::json;

/// BookKeeper's major compaction threshold.
const MAJOR_THRESHOLD: f64 = 0.8;

#[derive(Args, Debug, Clone)]
pub struct ReclaimArgs {
    /// Directory on the disk under test (a fresh subdirectory is used and removed).
    #[arg(long)]
    pub dir: PathBuf,
    /// Ledgers written at the same time; every other one is deleted.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub ledgers: u64,
    /// Entries per ledger.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub entries: u64,
    /// Bytes per entry.
    #[arg(long, value_name = "BYTES", default_value_t = 4096)]
    pub entry_size: usize,
    /// Entry log size limit (logSizeLimit), in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub log_size_mib: u64,
    /// A log per ledger (entryLogPerLedgerEnabled) instead of one interleaved log.
    #[arg(long)]
    pub entry_log_per_ledger: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: ReclaimArgs) -> anyhow::Result<()> {
    if a.ledgers < 2 || a.entries == 0 || a.entry_size == 0 {
        bail!("--ledgers must be at least 2, --entries and --entry-size at least 1");
    }
    std::fs::create_dir_all(&a.dir)
        .with_context(|| format!("cannot create --dir {}", a.dir.display()))?;
    let work = a
        .dir
        .join(format!("folio-bench-reclaim-{}", std::process::id()));
    if work.exists() {
        bail!("{} already exists", work.display());
    }
    let result = bench(&a, &work);
    let _ = std::fs::remove_dir_all(&work);
    println!("{}", result?);
    Ok(())
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir.join("current"))
        .map(|it| {
            it.filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn bench(a: &ReclaimArgs, work: &Path) -> anyhow::Result<String> {
    let env = Env::real();
    let ledgers_dir = work.join("ledgers");
    let mut cfg = LedgerStoreConfig::new(vec![ledgers_dir.clone()], work.join("index"));
    cfg.entry_log_size_limit = a.log_size_mib << 20;
    cfg.entry_log_per_ledger = a.entry_log_per_ledger;
    let cache = cfg.write_cache_bytes;
    let store = LedgerStore::open(&env, cfg)
        .with_context(|| format!("cannot open the ledger store in {}", work.display()))?;
    let payload = Bytes::from(vec![0x5a; a.entry_size]);

    // Write: every ledger's entry e before any entry e + 1, flushing as a checkpoint would
    // when a quarter of the write cache is unflushed.
    let started = Instant::now();
    let mut unflushed = 0u64;
    for e in 0..a.entries as i64 {
        for l in 0..a.ledgers as i64 {
            store.put_entry(l, e, payload.clone())?;
            unflushed += a.entry_size as u64;
            if unflushed >= cache / 4 {
                store.flush()?;
                unflushed = 0;
            }
        }
    }
    for l in 0..a.ledgers as i64 {
        store.mark_write_closed(l);
    }
    store.flush()?;
    let write_secs = started.elapsed().as_secs_f64();
    let logs_written = store.entry_log_ids().len();
    let bytes_before = dir_bytes(&ledgers_dir);

    // Delete every other ledger, then reclaim as a GC round does.
    for l in (0..a.ledgers as i64).step_by(2) {
        store.delete_ledger(l)?;
    }
    store.flush()?;
    let reclaim = Instant::now();
    let gc = store.remove_dead_entry_logs()?;
    let compaction = store.compact(MAJOR_THRESHOLD, CompactionLimits::UNLIMITED)?;
    store.flush()?;
    let reclaim_secs = reclaim.elapsed().as_secs_f64();
    let bytes_after = dir_bytes(&ledgers_dir);
    store.close()?;
    if !compaction.failures.is_empty() || !gc.failures.is_empty() {
        bail!(
            "reclaiming failed: gc {:?}, compaction {:?}",
            gc.failures,
            compaction.failures
        );
    }
    let rewritten = compaction.entries_moved * (a.entry_size + RECORD_HEADER_LEN) as u64;
    let freed = bytes_before.saturating_sub(bytes_after);
    let mode = if a.entry_log_per_ledger {
        "per-ledger"
    } else {
        "interleaved"
    };
    if a.json {
        return Ok(json!({
            "bench": "reclaim",
            "mode": mode,
            "ledgers": a.ledgers,
            "entries_per_ledger": a.entries,
            "entry_size": a.entry_size,
            "write_secs": write_secs,
            "entry_logs_written": logs_written,
            "log_bytes_before": bytes_before,
            "logs_removed_whole": gc.logs_removed.len(),
            "logs_compacted": compaction.logs_compacted,
            "entries_copied": compaction.entries_moved,
            "bytes_rewritten": rewritten,
            "bytes_freed": freed,
            "reclaim_secs": reclaim_secs,
        })
        .to_string());
    }
    Ok(format!(
        "folio bench reclaim ({mode}): {} ledgers x {} entries of {} B written in {write_secs:.2} s \
         into {logs_written} entry logs ({:.1} MiB); half deleted; reclaimed in {reclaim_secs:.2} s: \
         {} logs removed whole, {} compacted, {} entries copied ({:.1} MiB rewritten), {:.1} MiB freed",
        a.ledgers,
        a.entries,
        a.entry_size,
        bytes_before as f64 / 1048576.0,
        gc.logs_removed.len(),
        compaction.logs_compacted,
        compaction.entries_moved,
        rewritten as f64 / 1048576.0,
        freed as f64 / 1048576.0,
    ))
}
