//! Point-in-time gauges read at each scrape of `/metrics`: the process's CPU and memory
//! under the standard Prometheus process names (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, ... as the Java client's `StandardExports` gives a
//! BookKeeper bookie), read from `/proc/self` (Linux; elsewhere they are absent), and a
//! bookie's directories' usage under `LedgerDirsManager`'s names: `bookie_ledger_dir_<path>_usage`
//! and `bookie_index_dir_<path>_usage` in percent (BookKeeper names each gauge after the
//! configured directory, its `/` turned into `_`), `bookie_ledger_writable_dirs` and
//! `bookie_ledger_num_dirs`. BookKeeper has no journal directory gauge; Folio's
//! `folio_disk_usage_ratio{kind, dir}` covers every directory under one name.

use std::path::PathBuf;

use folio_bookie::admin::LocalDisk;

/// The bookie's directories with their kind (`journal`, `ledger`, `index`).
pub(crate) fn directories(disk: &LocalDisk) -> impl Iterator<Item = (&'static str, &PathBuf)> {
    disk.journal_dirs
        .iter()
        .map(|d| ("journal", d))
        .chain(disk.ledger_dirs.iter().map(|d| ("ledger", d)))
        .chain(disk.index_dir.iter().map(|d| ("index", d)))
}

/// The fraction of the file system holding `dir` that is used (statvfs).
pub(crate) fn usage(dir: &std::path::Path) -> std::io::Result<(f64, folio_env::DiskSpace)> {
    let sp = folio_env::FileSystem::space(&folio_env::RealFileSystem, dir)?;
    let used = if sp.total == 0 {
        0.0
    } else {
        1.0 - sp.free as f64 / sp.total as f64
    };
    Ok((used, sp))
}

/// BookKeeper's gauge name for a directory's usage: `bookie_<scope>_dir_<path>_usage`,
/// the path's `/` (and anything else Prometheus does not allow) turned into `_`.
pub(crate) fn bk_usage_name(scope: &str, dir: &std::path::Path) -> String {
    let path: String = dir
        .display()
        .to_string()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("bookie_{scope}_dir_{path}_usage")
}

/// Sets the directory gauges; `writable` is whether the bookie takes writes now (Folio
/// stops all ledger directories together, so they are all writable or none is).
pub(crate) fn set_directory_gauges(disk: &LocalDisk, writable: bool) {
    for (kind, dir) in directories(disk) {
        let Ok((used, _)) = usage(dir) else {
            continue;
        };
        metrics::gauge!("folio_disk_usage_ratio", "kind" => kind, "dir" => dir.display().to_string())
            .set(used);
        if kind != "journal" {
            metrics::gauge!(bk_usage_name(kind, dir)).set(used * 100.0);
        }
    }
    let n = disk.ledger_dirs.len() as f64;
    metrics::gauge!("bookie_ledger_num_dirs").set(n);
    metrics::gauge!("bookie_ledger_writable_dirs").set(if writable { n } else { 0.0 });
}

/// The resident set size of this process (`/proc/self/status`), if readable.
pub(crate) fn rss_bytes() -> Option<u64> {
    status_kib("VmRSS:").map(|kb| kb * 1024)
}

fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The process's figures from `/proc/self/stat`: CPU seconds (user + system) and the
/// start time in seconds since the boot.
fn cpu_and_start_seconds() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces; the fields after its ')' start at 3.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let field = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse().ok() };
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    Some(((field(14)? + field(15)?) / ticks, field(22)? / ticks))
}

/// The boot time in seconds since the epoch (`btime` of `/proc/stat`).
fn boot_time_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// The soft limit on open files (`/proc/self/limits`).
fn max_fds() -> Option<f64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// This process's CPU seconds so far (user + system, `/proc/self/stat`), if readable: the
/// gauge `process_cpu_seconds_total`, and what `folio bench` reads around its measured phase.
pub fn process_cpu_seconds() -> Option<f64> {
    cpu_and_start_seconds().map(|(cpu, _)| cpu)
}

/// Sets the standard Prometheus process gauges, each only when it could be read.
pub(crate) fn set_process_gauges() {
    if let Some((cpu, started)) = cpu_and_start_seconds() {
        metrics::gauge!("process_cpu_seconds_total").set(cpu);
        if let Some(boot) = boot_time_seconds() {
            metrics::gauge!("process_start_time_seconds").set(boot + started);
        }
    }
    if let Some(rss) = rss_bytes() {
        metrics::gauge!("process_resident_memory_bytes").set(rss as f64);
    }
    if let Some(kb) = status_kib("VmSize:") {
        metrics::gauge!("process_virtual_memory_bytes").set((kb * 1024) as f64);
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        metrics::gauge!("process_open_fds").set(fds.count() as f64);
    }
    if let Some(max) = max_fds() {
        metrics::gauge!("process_max_fds").set(max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_gauge_is_named_as_bookkeeper_names_it() {
        // LedgerDirsManager: "dir_" + dir.getParent().replace('/', '_') + "_usage", where
        // dir is <ledgerDir>/current; Prometheus then turns '.' and '-' into '_'.
        assert_eq!(
            bk_usage_name("ledger", std::path::Path::new("/data/bk-1/ledgers.a")),
            "bookie_ledger_dir__data_bk_1_ledgers_a_usage"
        );
    }

    #[test]
    fn this_process_reads_its_own_cpu_and_memory() {
        let (cpu, started) = cpu_and_start_seconds().expect("/proc/self/stat");
        assert!(cpu >= 0.0 && started > 0.0, "{cpu} {started}");
        assert!(rss_bytes().expect("VmRSS") > 0);
        assert!(max_fds().expect("limits") > 0.0);
    }
}
