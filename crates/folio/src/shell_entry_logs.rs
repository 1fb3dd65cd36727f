//! `folio shell` commands on a bookie's entry logs and index, under BookKeeper's names,
//! flags and output lines: `readlogmetadata` (an entry log's ledgers map: bytes per
//! ledger), `activeledgers` (the ledgers of an entry log that still exist in the
//! metadata store) and `localconsistencycheck` (every entry the index lists read back from
//! its entry log; the ones that cannot be are named, and the exit status is non-zero).
//!
//! The bookie's directories come from `-datadir DIR` / `-conf FILE`, as for `readlog`. An
//! entry log that was never rotated (still written, or the bookie stopped before rotating
//! it) has no ledgers map yet; its map is then rebuilt from its records, and stderr says so.
//! `localconsistencycheck` opens the index, so it takes the directories' locks first and
//! refuses while a bookie runs there.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use folio_env::{FileSystem, OpenOptions, RealFileSystem};
use folio_storage::entry_log::log_file;

use crate::metadata_connect::{self, Missing};
use crate::shell_ledger::Flags;
use crate::shell_local::{bookie_config, entry_log_path, looks_like_path, spec};

/// An entry log's id and its bytes per ledger, ascending by ledger.
struct LogMetadata {
    log_id: u64,
    ledgers: Vec<(i64, u64)>,
}

impl LogMetadata {
    fn total(&self) -> u64 {
        self.ledgers.iter().map(|(_, n)| n).sum()
    }
}

/// Reads the ledgers map of the log at `path`, rebuilt from its records if it has none.
fn read_metadata(cmd: &str, path: &std::path::Path) -> anyhow::Result<LogMetadata> {
    let fs = RealFileSystem;
    let file = fs
        .open(path, OpenOptions::read())
        .with_context(|| format!("{cmd}: cannot open {}", path.display()))?;
    let header = log_file::read_header(&*file, path)?;
    let ledgers = match log_file::read_ledgers_map(&*file, path)? {
        Some(map) => map,
        None => {
            eprintln!(
                "{cmd}: {} has no ledgers map yet (not rotated): sizes rebuilt from its records",
                path.display()
            );
            log_file::scan_records(&*file, path)?.ledgers
        }
    };
    Ok(LogMetadata {
        log_id: header.log_id,
        ledgers,
    })
}

fn ledger_lines(ledgers: &[(i64, u64)]) {
    for (ledger, size) in ledgers {
        println!("--------- Lid={ledger}, TotalSizeOfEntriesOfLedger={size}  ---------");
    }
}

/// `readlogmetadata [-datadir DIR | -conf FILE] <entry log id (hex) | entry log file>`.
pub fn readlogmetadata(args: &[String]) -> anyhow::Result<()> {
    const CMD: &str = "readlogmetadata";
    let flags = Flags::parse_with_positional(CMD, args, &spec(&[]), 1)?;
    let Some(arg) = flags.positional.first() else {
        bail!("{CMD}: name the entry log: readlogmetadata <entry log id (hex) | entry log file>");
    };
    let path = if looks_like_path(arg, ".log") {
        PathBuf::from(arg)
    } else {
        // BookKeeper reads the id in hex, as its file names are.
        let id = u64::from_str_radix(arg, 16).map_err(|_| {
            anyhow!("{CMD}: invalid entry log id {arg:?}: expected a hex id or a file path")
        })?;
        entry_log_path(CMD, &flags, id)?
    };
    let meta = read_metadata(CMD, &path)?;
    println!(
        "Print entryLogMetadata of entrylog {} ({:x}.log)",
        meta.log_id, meta.log_id
    );
    println!("entryLogId: {}, total size: {}", meta.log_id, meta.total());
    ledger_lines(&meta.ledgers);
    Ok(())
}

/// `activeledgers -logId ID [-timeout MS] [-datadir DIR | -conf FILE]`: the ledgers of the
/// entry log that the metadata store still has (BookKeeper's default timeout: 1000 ms, for
/// the listing of every ledger).
pub fn activeledgers(args: &[String], metadata: Option<&str>) -> anyhow::Result<()> {
    const CMD: &str = "activeledgers";
    let flags = Flags::parse(
        CMD,
        args,
        &spec(&[("logId", &["l", "logid"], true), ("timeout", &["t"], true)]),
    )?;
    let Some(id) = flags.get::<u64>(CMD, "logId")? else {
        bail!("usage: {CMD} -logId <entry log id> [-timeout MS] [-datadir DIR | -conf FILE]");
    };
    let timeout = Duration::from_millis(flags.get::<u64>(CMD, "timeout")?.unwrap_or(1000));
    let config = bookie_config(CMD, &flags)?;
    let meta = read_metadata(CMD, &entry_log_path(CMD, &flags, id)?)?;
    let uri = metadata
        .map(str::to_owned)
        .or_else(|| config.metadata_service_uri.clone())
        .ok_or_else(|| anyhow!("{CMD}: needs the metadata service: pass --metadata URI"))?;
    let existing = list_all_ledgers(&uri, timeout)
        .with_context(|| format!("{CMD}: listing the ledgers of {uri}"))?;
    if meta.ledgers.is_empty() {
        println!("Ledgers on log file {id} is empty");
    }
    let total = meta.total();
    let active: Vec<(i64, u64)> = meta
        .ledgers
        .into_iter()
        .filter(|(l, _)| existing.binary_search(l).is_ok())
        .collect();
    let remaining: u64 = active.iter().map(|(_, n)| n).sum();
    println!("Print active ledgers of entrylog {id} ({id:x}.log)");
    if remaining == 0 {
        println!("No active ledgers on log file {id}");
    } else {
        let usage = remaining as f64 / total as f64;
        println!(
            "entryLogId: {id}, remaining size: {remaining}, total size: {total}, usage: {usage}"
        );
    }
    ledger_lines(&active);
    Ok(())
}

/// Every ledger id in the metadata store, ascending, listed within `timeout`.
fn list_all_ledgers(uri: &str, timeout: Duration) -> anyhow::Result<Vec<i64>> {
    metadata_connect::with_store(
        uri,
        Missing::Refuse,
        async |store| match tokio::time::timeout(
            timeout,
            folio_metadata::all_ledger_ids(store.as_ref()),
        )
        .await
        {
            Ok(all) => Ok(all?),
            Err(_) => Err(anyhow!(
                "reading the ledgers from the metadata store took over {} ms (-timeout)",
                timeout.as_millis()
            )),
        },
    )
}

/// `localconsistencycheck [-datadir DIR | -conf FILE]`.
pub fn localconsistencycheck(args: &[String]) -> anyhow::Result<()> {
    const CMD: &str = "localconsistencycheck";
    let flags = Flags::parse(CMD, args, &spec(&[]))?;
    let config = bookie_config(CMD, &flags)?;
    let (_dirs, _locks) = crate::shell_local::lock_bookie_dirs(CMD, &config)?;
    let Some(index_dir) = config.effective_index_dir() else {
        bail!("{CMD}: the bookie has no index directory");
    };
    println!("=== Performing local consistency check ===");
    let report = folio_storage::consistency::check(
        &RealFileSystem,
        &config.effective_ledger_dirs(),
        &index_dir,
    )?;
    if report.inconsistencies.is_empty() {
        println!("=== Check passed === ({} entries read)", report.entries);
        return Ok(());
    }
    println!("=== Check returned errors: ===");
    for i in &report.inconsistencies {
        println!(
            "Ledger {}, entry {}: entry log {} offset {}: {}",
            i.ledger, i.entry, i.location.log_id, i.location.offset, i.reason
        );
    }
    bail!(
        "{CMD}: {} of {} entries the index lists cannot be read from their entry logs",
        report.inconsistencies.len(),
        report.entries
    )
}
