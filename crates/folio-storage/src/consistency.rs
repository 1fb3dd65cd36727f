//! BookKeeper's `localconsistencycheck` over Folio's ledger store: every entry the index
//! lists is read back from the entry log the index points at, its record checked (length,
//! ledger and entry ids, CRC); the entries that cannot be read are reported with why. Run
//! on a stopped bookie (the tool takes the directories' locks first): it opens the index.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use folio_env::{File, FileSystem, OpenOptions};

use crate::entry_log::log_file::{self, Location};
use crate::index::{INDEX_FILE, LedgerIndex};
use crate::ledger_store::LedgerStoreError;

/// An entry the index lists that its entry log does not give back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inconsistency {
    pub ledger: i64,
    pub entry: i64,
    pub location: Location,
    pub reason: String,
}

/// What the check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsistencyReport {
    /// Entries the index lists (all of them were read).
    pub entries: u64,
    pub inconsistencies: Vec<Inconsistency>,
}

/// Reads back every entry the index in `<index_dir>/current` lists from the entry logs in
/// `<ledger dir>/current`. An index that does not exist is an error (nothing to check is
/// not a clean result).
pub fn check(
    fs: &dyn FileSystem,
    ledger_dirs: &[PathBuf],
    index_dir: &Path,
) -> Result<ConsistencyReport, LedgerStoreError> {
    let dir = index_dir.join("current");
    if !fs.exists(&dir.join(INDEX_FILE)) {
        return Err(LedgerStoreError::Index {
            path: dir.join(INDEX_FILE),
            reason: "no index here: is this the bookie's index directory?".into(),
        });
    }
    let index = LedgerIndex::open(fs, &dir)?;
    let mut logs: HashMap<u64, Result<OpenLog, String>> = HashMap::new();
    let mut report = ConsistencyReport::default();
    for (ledger, entry, location) in index.all_locations()? {
        report.entries += 1;
        let log = logs
            .entry(location.log_id)
            .or_insert_with(|| open_log(fs, ledger_dirs, location.log_id));
        let problem = match log {
            Err(why) => Some(why.clone()),
            Ok((file, path)) => log_file::read_record(&**file, path, location, ledger, entry)
                .err()
                .map(|e| e.to_string()),
        };
        if let Some(reason) = problem {
            report.inconsistencies.push(Inconsistency {
                ledger,
                entry,
                location,
                reason,
            });
        }
    }
    Ok(report)
}

/// An entry log opened for reading, with its path.
type OpenLog = (Arc<dyn File>, PathBuf);

fn open_log(fs: &dyn FileSystem, ledger_dirs: &[PathBuf], log_id: u64) -> Result<OpenLog, String> {
    let name = log_file::file_name(log_id);
    let path = ledger_dirs
        .iter()
        .map(|d| d.join("current").join(&name))
        .find(|p| fs.exists(p))
        .ok_or_else(|| format!("entry log {name} is in no ledger directory"))?;
    let file = fs
        .open(&path, OpenOptions::read())
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    Ok((file, path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger_store::{LedgerStore, LedgerStoreConfig};
    use bytes::Bytes;
    use folio_env::{Env, RealFileSystem};

    fn store_with_entries(root: &Path) -> (Vec<PathBuf>, PathBuf) {
        let ledger_dirs = vec![root.join("ledgers")];
        let index_dir = root.join("index");
        let store = LedgerStore::open(
            &Env::real(),
            LedgerStoreConfig::new(ledger_dirs.clone(), index_dir.clone()),
        )
        .unwrap();
        for e in 0..3 {
            let payload = Bytes::from(format!("entry {e} of ledger 7"));
            store.put_entry(7, e, payload).unwrap();
        }
        store.close().unwrap();
        (ledger_dirs, index_dir)
    }

    #[test]
    fn a_clean_store_has_no_inconsistency_and_a_damaged_record_is_named() {
        let d = tempfile::tempdir().unwrap();
        let (ledger_dirs, index_dir) = store_with_entries(d.path());
        let report = check(&RealFileSystem, &ledger_dirs, &index_dir).unwrap();
        assert_eq!((report.entries, report.inconsistencies.len()), (3, 0));

        // Flip a byte in entry 1's payload: its CRC no longer matches.
        let index = LedgerIndex::open(&RealFileSystem, &index_dir.join("current")).unwrap();
        let loc = index.get(7, 1).unwrap().unwrap();
        drop(index);
        let path = ledger_dirs[0]
            .join("current")
            .join(log_file::file_name(loc.log_id));
        let mut bytes = std::fs::read(&path).unwrap();
        let last = (loc.offset as usize) + crate::entry_log::format::RECORD_HEADER_LEN + 2;
        bytes[last] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();

        let report = check(&RealFileSystem, &ledger_dirs, &index_dir).unwrap();
        assert_eq!(report.entries, 3);
        let bad: Vec<(i64, i64)> = report
            .inconsistencies
            .iter()
            .map(|i| (i.ledger, i.entry))
            .collect();
        assert_eq!(bad, vec![(7, 1)], "{report:?}");

        // A missing log: every entry in it is named.
        std::fs::remove_file(&path).unwrap();
        let report = check(&RealFileSystem, &ledger_dirs, &index_dir).unwrap();
        assert_eq!(report.inconsistencies.len(), 3, "{report:?}");
        assert!(
            report.inconsistencies[0]
                .reason
                .contains("in no ledger directory")
        );
    }

    #[test]
    fn no_index_is_an_error_not_a_clean_result() {
        let d = tempfile::tempdir().unwrap();
        let e = check(&RealFileSystem, &[d.path().join("ledgers")], d.path()).unwrap_err();
        assert!(e.to_string().contains("no index here"), "{e}");
    }
}
