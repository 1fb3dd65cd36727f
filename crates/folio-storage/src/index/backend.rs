//! The index's redb file, opened through the `folio_env` file seam.
//!
//! redb reaches its file only through [`redb::StorageBackend`]; this one forwards every
//! call to a `folio_env::File`, so the index lives on whatever `FileSystem` the bookie's
//! `Env` carries (the real disk, or the simulated one whose crashes then cover the index
//! as they cover the journal and the entry logs). The bytes are the same as redb's own
//! `FileBackend` writes: an index written by an older build through redb's file opens
//! here unchanged (docs/formats/index.md).
//!
//! Durability maps one to one: redb's `StorageBackend::sync_data` is its only barrier
//! (a durable commit writes the new pages and the header, then calls it; with two-phase
//! commit, between the two as well), and `File::sync_data` is fdatasync. A failed sync
//! is latched by redb (every later operation of that database fails), which is what a
//! failed fsync must do (invariant 9). `set_len` needs no barrier of its own: redb syncs
//! after growing before it relies on the new length, and fdatasync covers the size.
//! Locking is left to the index directory's `LOCK` file (taken by `LedgerStore`), so the
//! lock methods stay redb's "unsupported" default and redb runs in its only mode that
//! needs none, `ExclusiveWriter`.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use folio_env::File;

/// A redb storage backend over one `folio_env` file.
pub struct EnvFileBackend {
    file: Arc<dyn File>,
    path: PathBuf,
}

impl EnvFileBackend {
    pub fn new(file: Arc<dyn File>, path: &Path) -> EnvFileBackend {
        EnvFileBackend {
            file,
            path: path.to_path_buf(),
        }
    }
}

impl fmt::Debug for EnvFileBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EnvFileBackend({})", self.path.display())
    }
}

impl redb::StorageBackend for EnvFileBackend {
    fn len(&self) -> Result<u64, io::Error> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        // redb asks only for bytes inside the file; a short read is an error (the trait's
        // contract), which `read_exact_at` reports as UnexpectedEof.
        self.file.read_exact_at(out, offset)
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        // New bytes read as zeroes, as the trait asks (ftruncate, and the simulated
        // disk's resize, both zero-fill).
        self.file.set_len(len)
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        self.file.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.file.write_all_at(data, offset)
    }
}
