//! One bookie per directory: every ledger and index directory holds a `LOCK` file, and
//! every journal directory a `LOCK.journal` file, that the process using it keeps
//! locked (flock through the `FileSystem` seam). The names differ so that one directory
//! may serve as both a journal and a ledger directory, as BookKeeper allows.
//!
//! Two processes appending to the same journal or entry log would interleave records
//! and each replay the other's, so a second open fails at once, naming the directory.
//! The lock dies with the process (SIGKILL included), so a restart never finds a stale
//! one; the `LOCK` file itself stays and means nothing when unlocked.

use std::io;
use std::path::{Path, PathBuf};

use folio_env::{FileLock, FileSystem};

/// The lock file of a ledger or index directory.
pub const LOCK_FILE: &str = "LOCK";
/// The lock file of a journal directory.
pub const JOURNAL_LOCK_FILE: &str = "LOCK.journal";

/// Why a directory could not be locked.
pub(crate) enum LockError {
    /// Another holder has it.
    InUse(PathBuf),
    /// Creating the directory or the lock file failed.
    Io(&'static str, PathBuf, io::Error),
}

/// Creates `dir` if needed and locks `dir/<name>`.
pub(crate) fn lock_dir(fs: &dyn FileSystem, dir: &Path, name: &str) -> Result<FileLock, LockError> {
    fs.create_dir_all(dir)
        .map_err(|e| LockError::Io("create directory", dir.to_path_buf(), e))?;
    let path = dir.join(name);
    fs.lock_exclusive(&path).map_err(|e| {
        if e.kind() == io::ErrorKind::WouldBlock {
            LockError::InUse(dir.to_path_buf())
        } else {
            LockError::Io("lock", path, e)
        }
    })
}
