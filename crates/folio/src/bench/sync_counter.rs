//! A `FileSystem` wrapper that counts fdatasyncs, so a benchmark can report how many
//! adds each journal fdatasync covered (group commit's batching factor) without the
//! storage engine exposing statistics for it.
//!
//! Journal files (`*.txn`) are counted apart from everything else (entry logs, the
//! index, journal marks), since only the former are on an add's path. A journal
//! fdatasync is a group commit when records were written since the previous one, and a
//! preallocation sync when only zeroes were (the journal keeps written zeroes ahead of
//! its write offset).

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use folio_env::{DiskSpace, File, FileSystem, OpenOptions};

/// fdatasync counts, shared by the wrapper and whoever reads them.
#[derive(Debug, Default)]
pub struct SyncCounts {
    /// fdatasyncs of journal files.
    pub journal: AtomicU64,
    /// Those of them after a write holding something other than zeroes (records).
    pub journal_data: AtomicU64,
    /// fdatasyncs of any other file (ledger store, marks).
    pub other: AtomicU64,
    /// Directory fsyncs.
    pub dirs: AtomicU64,
}

/// A point-in-time copy of [`SyncCounts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncSnapshot {
    pub journal: u64,
    pub journal_data: u64,
    pub other: u64,
    pub dirs: u64,
}

impl SyncCounts {
    pub fn snapshot(&self) -> SyncSnapshot {
        SyncSnapshot {
            journal: self.journal.load(Ordering::Relaxed),
            journal_data: self.journal_data.load(Ordering::Relaxed),
            other: self.other.load(Ordering::Relaxed),
            dirs: self.dirs.load(Ordering::Relaxed),
        }
    }
}

impl std::ops::Sub for SyncSnapshot {
    type Output = SyncSnapshot;
    fn sub(self, rhs: SyncSnapshot) -> SyncSnapshot {
        SyncSnapshot {
            journal: self.journal - rhs.journal,
            journal_data: self.journal_data - rhs.journal_data,
            other: self.other - rhs.other,
            dirs: self.dirs - rhs.dirs,
        }
    }
}

/// Wraps a file system; every file it opens counts its `sync_data` calls.
pub struct CountingFs {
    inner: Arc<dyn FileSystem>,
    counts: Arc<SyncCounts>,
}

impl CountingFs {
    pub fn new(inner: Arc<dyn FileSystem>, counts: Arc<SyncCounts>) -> Self {
        CountingFs { inner, counts }
    }
}

struct CountingFile {
    inner: Arc<dyn File>,
    counts: Arc<SyncCounts>,
    journal: bool,
    /// Non-zero bytes were written since the last sync (journal files only).
    data_since_sync: AtomicBool,
}

impl File for CountingFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        // A record starts with non-zero bytes, so this stops at once for records and
        // scans only zero fills.
        if self.journal && buf.iter().any(|&b| b != 0) {
            self.data_since_sync.store(true, Ordering::Relaxed);
        }
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        let r = self.inner.sync_data();
        if self.journal {
            self.counts.journal.fetch_add(1, Ordering::Relaxed);
            if self.data_since_sync.swap(false, Ordering::Relaxed) {
                self.counts.journal_data.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            self.counts.other.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn allocate(&self, len: u64) -> io::Result<()> {
        self.inner.allocate(len)
    }
}

impl FileSystem for CountingFs {
    fn open(&self, path: &Path, opts: OpenOptions) -> io::Result<Arc<dyn File>> {
        let inner = self.inner.open(path, opts)?;
        Ok(Arc::new(CountingFile {
            inner,
            counts: Arc::clone(&self.counts),
            journal: path.extension().is_some_and(|e| e == "txn"),
            data_since_sync: AtomicBool::new(false),
        }))
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(path)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.counts.dirs.fetch_add(1, Ordering::Relaxed);
        self.inner.sync_dir(path)
    }
    fn space(&self, path: &Path) -> io::Result<DiskSpace> {
        self.inner.space(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use folio_env::RealFileSystem;

    #[test]
    fn counts_journal_and_other_syncs_apart() {
        let tmp = tempfile::tempdir().unwrap();
        let counts = Arc::new(SyncCounts::default());
        let fs = CountingFs::new(Arc::new(RealFileSystem), Arc::clone(&counts));
        let before = counts.snapshot();
        let j = fs
            .open(&tmp.path().join("1.txn"), OpenOptions::write_create())
            .unwrap();
        j.write_all_at(b"x", 0).unwrap();
        j.sync_data().unwrap();
        j.write_all_at(&[0; 4096], 1).unwrap();
        j.sync_data().unwrap();
        fs.write_file_atomic(&tmp.path().join("lastMark"), b"m")
            .unwrap();
        let d = counts.snapshot() - before;
        assert_eq!(
            d,
            SyncSnapshot {
                journal: 2,
                journal_data: 1,
                other: 1,
                dirs: 1
            }
        );
        assert_eq!(fs.read_file(&tmp.path().join("lastMark")).unwrap(), b"m");
    }
}
