//! `folio bench journal`: the storage engine's add path on the real disk, no network.
//!
//! Keeps `--in-flight` adds outstanding against `folio_storage::Storage` (journal with
//! group commit and fdatasync on, over the production ledger store), records each
//! add's latency from the call to its completion callback (which runs after the
//! fdatasync covering it), and reports throughput, latency percentiles and how many
//! adds each journal fdatasync covered (from `Storage::journal_stats`). The engine runs in a fresh subdirectory of
//! `--dir` that is removed afterwards, so `--dir` should be on the disk under test.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::{BufMut, Bytes, BytesMut};
use clap::Args;
use folio_env::Env;
use folio_storage::ledger_store::{LedgerStore, LedgerStoreConfig};
use folio_storage::{JournalConfig, Storage, StorageConfig, StorageError};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Map, json};

use super::report::{Latencies, Summary};

/// An entry must hold the entry header the engine checks (ledger, entry, LAC, length).
pub(super) const MIN_ENTRY_SIZE: usize = 32;
/// The master key every benchmark ledger uses.
const MASTER_KEY: [u8; 20] = [0x42; 20];
/// How long without any completion before the benchmark gives up.
const STALL_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Args, Debug, Clone)]
pub struct JournalArgs {
    /// Directory on the disk under test; the benchmark works in a fresh subdirectory
    /// of it and removes that afterwards.
    #[arg(long)]
    pub dir: PathBuf,
    /// Bytes per entry (the whole entry as a client sends it, at least 32).
    #[arg(long, value_name = "BYTES", default_value_t = 1024)]
    pub entry_size: usize,
    /// Number of adds.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub entries: u64,
    /// Adds kept outstanding at once.
    #[arg(long, value_name = "K", default_value_t = 1)]
    pub in_flight: u64,
    /// Journal directories (each with its own writer thread and fdatasyncs), all under --dir.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub journal_dirs: usize,
    /// Ledgers the adds are spread over, round robin (ledgers are hashed onto journal
    /// directories).
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub ledgers: u64,
    /// A log per ledger (entryLogPerLedgerEnabled) instead of one interleaved entry log.
    #[arg(long)]
    pub entry_log_per_ledger: bool,
    /// `dbStorage_directIOEntryLogger`: entry logs written with direct I/O.
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    pub entry_log_direct_io: Option<bool>,
    /// `journalMaxGroupWaitMSec` in microseconds (the bookie's default is 2 ms).
    #[arg(long, value_name = "US")]
    pub max_group_wait_us: Option<u64>,
    /// `journalFlushWhenQueueEmpty` (default true, as in a Folio bookie): write a group
    /// as soon as the queue is empty; false waits for the group timer as BookKeeper does.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub flush_when_queue_empty: bool,
    /// `journalBufferedWritesThreshold`: bytes that close a group (default 512 KiB).
    #[arg(long, value_name = "BYTES")]
    pub max_group_bytes: Option<u64>,
    /// A force-write thread (fdatasyncs overlap the next groups' writes).
    #[arg(long)]
    pub force_write_thread: bool,
    /// UNSAFE: acknowledge adds without fdatasync (journalSyncData=false), to see what
    /// the sync costs.
    #[arg(long)]
    pub no_sync: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Keep the working subdirectory instead of removing it.
    #[arg(long)]
    pub keep: bool,
}

pub fn run(a: JournalArgs) -> anyhow::Result<()> {
    validate(&a)?;
    std::fs::create_dir_all(&a.dir)
        .with_context(|| format!("cannot create --dir {}", a.dir.display()))?;
    let work = a
        .dir
        .join(format!("folio-bench-journal-{}", std::process::id()));
    if work.exists() {
        bail!(
            "{} already exists; remove it or pick another --dir",
            work.display()
        );
    }
    if a.no_sync {
        eprintln!("folio bench journal: --no-sync: adds are acknowledged WITHOUT fdatasync");
    }
    let result = bench(&a, &work);
    if !a.keep {
        let _ = std::fs::remove_dir_all(&work);
    }
    let out = result?;
    println!("{out}");
    Ok(())
}

fn validate(a: &JournalArgs) -> anyhow::Result<()> {
    if a.entry_size < MIN_ENTRY_SIZE {
        bail!(
            "--entry-size {} is too small: an entry holds a {MIN_ENTRY_SIZE}-byte header \
             (ledger, entry, LAC, length)",
            a.entry_size
        );
    }
    for (name, v) in [
        ("--entries", a.entries),
        ("--in-flight", a.in_flight),
        ("--journal-dirs", a.journal_dirs as u64),
        ("--ledgers", a.ledgers),
    ] {
        if v == 0 {
            bail!("{name} must be at least 1");
        }
    }
    Ok(())
}

/// The journal's defaults with the group-commit settings the arguments override.
fn journal_defaults(dirs: Vec<PathBuf>, a: &JournalArgs) -> JournalConfig {
    let mut c = JournalConfig::with_dirs(dirs);
    if let Some(us) = a.max_group_wait_us {
        c.max_group_wait = Duration::from_micros(us);
    }
    if let Some(b) = a.max_group_bytes {
        c.max_group_bytes = b;
    }
    c
}

/// Opens the engine in `work`, runs the adds, and returns what to print.
fn bench(a: &JournalArgs, work: &Path) -> anyhow::Result<String> {
    let env = Env::real();
    let mut store_cfg = LedgerStoreConfig::new(vec![work.join("ledgers")], work.join("index"));
    store_cfg.entry_log_per_ledger = a.entry_log_per_ledger;
    if let Some(d) = a.entry_log_direct_io {
        store_cfg.entry_log_direct_io = d;
    }
    let store = LedgerStore::open(&env, store_cfg)
        .with_context(|| format!("cannot open the ledger store in {}", work.display()))?;
    let journal_dirs = (0..a.journal_dirs)
        .map(|i| work.join(format!("journal{i}")))
        .collect();
    let cfg = StorageConfig {
        journal: JournalConfig {
            sync_data: !a.no_sync,
            flush_when_queue_empty: a.flush_when_queue_empty,
            force_write_thread: a.force_write_thread,
            ..journal_defaults(journal_dirs, a)
        },
        ..StorageConfig::default()
    };
    let storage = Storage::open(&env, cfg, Arc::new(store))
        .with_context(|| format!("cannot open the storage engine in {}", work.display()))?;

    let progress = if std::io::stderr().is_terminal() && !a.json {
        let pb = ProgressBar::with_draw_target(Some(a.entries), ProgressDrawTarget::stderr());
        pb.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} adds {per_sec} eta {eta}")
                .expect("static progress template"),
        );
        pb
    } else {
        ProgressBar::hidden()
    };

    let before = storage.journal_stats();
    let checkpoints_before = storage.checkpoints();
    let start = Instant::now();
    let adds = Adds {
        first_ledger: 0,
        ledgers: a.ledgers,
        total: a.entries,
        in_flight: a.in_flight,
        entry_size: a.entry_size,
        master_key: &MASTER_KEY,
    };
    let outcome = drive_adds(&storage, &adds, || progress.inc(1));
    let elapsed = start.elapsed();
    let stats = storage.journal_stats() - before;
    let checkpoints = storage.checkpoints() - checkpoints_before;
    progress.finish_and_clear();
    storage.shutdown();
    let latencies = outcome?;

    let summary = Summary {
        entries: a.entries,
        bytes: a.entries * a.entry_size as u64,
        elapsed,
        latencies,
        cpu_seconds: None,
    };
    let syncs = stats.fdatasyncs();
    let per_sync = (syncs > 0).then(|| a.entries as f64 / syncs as f64);
    let per_group =
        (stats.group_fdatasyncs > 0).then(|| a.entries as f64 / stats.group_fdatasyncs as f64);
    let round2 = |x: Option<f64>| x.map(|x| (x * 100.0).round() / 100.0);
    if a.json {
        let mut extra = Map::new();
        extra.insert("bench".into(), json!("journal"));
        extra.insert("entry_size".into(), json!(a.entry_size));
        extra.insert("in_flight".into(), json!(a.in_flight));
        extra.insert("journal_dirs".into(), json!(a.journal_dirs));
        extra.insert("ledgers".into(), json!(a.ledgers));
        extra.insert("sync".into(), json!(!a.no_sync));
        extra.insert("entry_log_per_ledger".into(), json!(a.entry_log_per_ledger));
        extra.insert("entry_log_direct_io".into(), json!(a.entry_log_direct_io));
        extra.insert("max_group_wait_us".into(), json!(a.max_group_wait_us));
        extra.insert(
            "flush_when_queue_empty".into(),
            json!(a.flush_when_queue_empty),
        );
        extra.insert("force_write_thread".into(), json!(a.force_write_thread));
        extra.insert("max_group_bytes".into(), json!(a.max_group_bytes));
        extra.insert("journal_fdatasyncs".into(), json!(syncs));
        extra.insert("entries_per_fdatasync".into(), json!(round2(per_sync)));
        extra.insert(
            "journal_group_fdatasyncs".into(),
            json!(stats.group_fdatasyncs),
        );
        extra.insert(
            "journal_prealloc_fdatasyncs".into(),
            json!(stats.prealloc_fdatasyncs),
        );
        extra.insert("journal_files_created".into(), json!(stats.files_created));
        extra.insert("journal_group_commits".into(), json!(stats.group_commits));
        extra.insert("journal_records".into(), json!(stats.records));
        extra.insert("journal_bytes".into(), json!(stats.bytes));
        extra.insert("journal_prealloc_bytes".into(), json!(stats.prealloc_bytes));
        extra.insert("entries_per_group".into(), json!(round2(per_group)));
        extra.insert("checkpoints".into(), json!(checkpoints));
        extra.insert("dir".into(), json!(a.dir.display().to_string()));
        return Ok(summary.to_json(extra).to_string());
    }
    let per_sync = per_sync.map_or("-".to_string(), |x| format!("{x:.1}"));
    let per_group = per_group.map_or("-".to_string(), |x| format!("{x:.1}"));
    Ok(format!(
        "folio bench journal: {} entries of {} B, {} in flight, {} journal dir(s), {} ledgers{}, \
         fdatasync {}\n{}\njournal fdatasyncs {syncs} ({per_sync} entries per fdatasync): {} group \
         commits ({per_group} entries per group commit), {} zero fills ({} MiB), {} new files; \
         {checkpoints} checkpoints",
        a.entries,
        a.entry_size,
        a.in_flight,
        a.journal_dirs,
        a.ledgers,
        if a.entry_log_per_ledger {
            " (a log per ledger)"
        } else {
            ""
        },
        if a.no_sync { "OFF (unsafe)" } else { "on" },
        summary.to_text(),
        stats.group_fdatasyncs,
        stats.prealloc_fdatasyncs,
        stats.prealloc_bytes >> 20,
        stats.files_created,
    ))
}

/// An entry as a client would send it: ledger, entry, LAC (entry - 1), length, then
/// filler up to `filler.len()` bytes in total.
/// What [`drive_adds`] writes: `total` adds of `entry_size` bytes, round robin over
/// `ledgers` ledgers from `first_ledger`, `in_flight` outstanding at once.
pub(super) struct Adds<'a> {
    pub first_ledger: i64,
    pub ledgers: u64,
    pub total: u64,
    pub in_flight: u64,
    pub entry_size: usize,
    pub master_key: &'a [u8],
}

/// Runs the adds through the engine (`folio bench journal` and `folio bench fill`),
/// calling `on_done` after each completion; the latency of every add, or the first
/// failure, or an error once no add completed for [`STALL_TIMEOUT`].
pub(super) fn drive_adds(
    storage: &Storage,
    a: &Adds,
    mut on_done: impl FnMut(),
) -> anyhow::Result<Latencies> {
    let filler = Bytes::from((0..a.entry_size).map(|i| i as u8).collect::<Vec<u8>>());
    let (tx, rx) = mpsc::channel::<Result<Duration, StorageError>>();
    let mut latencies = Latencies::new();
    let (mut sent, mut done) = (0u64, 0u64);
    while done < a.total {
        while sent < a.total && sent - done < a.in_flight {
            let ledger = a.first_ledger + (sent % a.ledgers) as i64;
            let entry = (sent / a.ledgers) as i64;
            let tx = tx.clone();
            let t0 = Instant::now();
            storage.add_entry(
                ledger,
                entry,
                a.master_key,
                entry_bytes(ledger, entry, &filler),
                false,
                Box::new(move |r| {
                    let _ = tx.send(r.map(|()| t0.elapsed()));
                }),
            );
            sent += 1;
        }
        match rx.recv_timeout(STALL_TIMEOUT) {
            Ok(Ok(d)) => latencies.record(d),
            Ok(Err(e)) => return Err(e).context(format!("add {done} of {} failed", a.total)),
            Err(_) => bail!(
                "no add completed for {} s ({done} of {} done)",
                STALL_TIMEOUT.as_secs(),
                a.total
            ),
        }
        done += 1;
        on_done();
    }
    Ok(latencies)
}

pub(super) fn entry_bytes(ledger: i64, entry: i64, filler: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(filler.len());
    b.put_i64(ledger);
    b.put_i64(entry);
    b.put_i64(entry - 1);
    b.put_i64(filler.len() as i64);
    b.put_slice(&filler[MIN_ENTRY_SIZE..]);
    b.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_have_the_header_and_the_requested_size() {
        let filler = vec![7u8; 100];
        let e = entry_bytes(3, 9, &filler);
        assert_eq!(e.len(), 100);
        assert_eq!(i64::from_be_bytes(e[0..8].try_into().unwrap()), 3);
        assert_eq!(i64::from_be_bytes(e[8..16].try_into().unwrap()), 9);
        assert_eq!(i64::from_be_bytes(e[16..24].try_into().unwrap()), 8);
        assert_eq!(&e[32..], &filler[32..]);
    }
}
