//! What can go wrong in the storage engine, each variant naming what failed and where.
//!
//! The bookie maps these onto BookKeeper's status codes: `Unauthorized` -> EUA,
//! `Fenced` -> EFENCED, `ReadOnly` / `NoSpace` -> EREADONLY, the rest -> EIO.

use std::io;
use std::path::PathBuf;

/// An error of the ledger store under the journal (entry logs, index, write cache).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The disk holding `dir` is full.
    #[error("no space left in {}: {detail}", dir.display())]
    NoSpace { dir: PathBuf, detail: String },
    /// Any other failure, with its own description of what and where.
    #[error("{0}")]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// The master key given does not match the one the ledger was created with.
    #[error("ledger {ledger}: master key does not match")]
    Unauthorized { ledger: i64 },
    /// The ledger is fenced; only recovery adds are accepted.
    #[error("ledger {ledger} is fenced")]
    Fenced { ledger: i64 },
    /// The request itself is malformed.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// A journal write or fsync failed earlier; the engine takes no more writes
    /// (it never acknowledges on top of a failed fsync).
    #[error("storage is read-only: {reason}")]
    ReadOnly { reason: String },
    /// The disk holding `dir` is full; nothing was acknowledged for this write.
    #[error("no space left in {}: {detail}", dir.display())]
    NoSpace { dir: PathBuf, detail: String },
    /// An I/O error, with the operation and the path.
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A journal holds a damaged record followed by valid ones (not a torn tail), or a
    /// damaged header or mark; start-up stops here rather than skip acknowledged data.
    #[error("corrupt journal {} at offset {offset}: {reason}", file.display())]
    CorruptJournal {
        file: PathBuf,
        offset: u64,
        reason: String,
    },
    /// The ledger store failed.
    #[error("ledger store: {0}")]
    Backend(BackendError),
    /// The engine is shutting down.
    #[error("storage is shut down")]
    ShutDown,
    /// Another process (or another `Storage` in this one) has the directory open: its
    /// `LOCK` file is locked.
    #[error("directory {} is in use by another bookie (its LOCK file is locked); stop that one first", dir.display())]
    DirInUse { dir: PathBuf },
}

impl From<BackendError> for StorageError {
    /// A full disk under the ledger store is `NoSpace` naming its directory, like one
    /// under the journal.
    fn from(e: BackendError) -> Self {
        match e {
            BackendError::NoSpace { dir, detail } => StorageError::NoSpace {
                dir,
                detail: format!("ledger store: {detail}"),
            },
            other => StorageError::Backend(other),
        }
    }
}

impl From<crate::dir_lock::LockError> for StorageError {
    fn from(e: crate::dir_lock::LockError) -> Self {
        match e {
            crate::dir_lock::LockError::InUse(dir) => StorageError::DirInUse { dir },
            crate::dir_lock::LockError::Io(op, path, e) => StorageError::io_dir(op, path, e),
        }
    }
}

impl StorageError {
    /// An I/O error on file `path`; a full disk becomes `NoSpace` naming its directory.
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        let path = path.into();
        if is_no_space(&source) {
            let dir = path.parent().map(PathBuf::from).unwrap_or(path);
            return StorageError::NoSpace {
                dir,
                detail: format!("{op}: {source}"),
            };
        }
        StorageError::Io { op, path, source }
    }

    /// An I/O error on directory `dir`.
    pub(crate) fn io_dir(op: &'static str, dir: impl Into<PathBuf>, source: io::Error) -> Self {
        let dir = dir.into();
        if is_no_space(&source) {
            return StorageError::NoSpace {
                dir,
                detail: format!("{op}: {source}"),
            };
        }
        StorageError::Io {
            op,
            path: dir,
            source,
        }
    }
}

pub(crate) fn is_no_space(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::StorageFull || e.raw_os_error() == Some(28)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enospc_names_the_directory() {
        let e = StorageError::io(
            "write",
            "/j/current/0000000000000001.txn",
            io::Error::new(io::ErrorKind::StorageFull, "full"),
        );
        match &e {
            StorageError::NoSpace { dir, .. } => assert_eq!(dir, &PathBuf::from("/j/current")),
            other => panic!("expected NoSpace, got {other:?}"),
        }
        assert!(e.to_string().contains("/j/current"), "{e}");
        let e = StorageError::io_dir(
            "create directory",
            "/j/current",
            io::Error::new(io::ErrorKind::StorageFull, "full"),
        );
        assert!(
            e.to_string().contains("no space left in /j/current:"),
            "{e}"
        );
        let e = StorageError::io("read", "/j/x", io::Error::other("boom"));
        assert!(matches!(e, StorageError::Io { .. }));
        assert!(e.to_string().contains("read /j/x"), "{e}");
    }
}
