//! A small ledger store for tests: all state in memory, made durable by `flush`,
//! which rewrites one file atomically through the `FileSystem` seam.
//!
//! It honours the `LedgerBackend` contract exactly (nothing durable before `flush`),
//! and because its file lives on the same (simulated) disk as the journal, one crash
//! image of that disk captures both consistently. It is not meant for production:
//! every flush rewrites everything. The crash tests and the simulator run the
//! production `LedgerStore` (its index too is on the simulated disk now); this store is
//! left for unit tests that need a store without entry logs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use folio_env::FileSystem;
use parking_lot::Mutex;

use crate::error::BackendError;
use crate::storage::{LedgerBackend, StoredLedger};

#[derive(Default, Clone)]
struct State {
    ledgers: BTreeMap<i64, StoredLedger>,
    entries: BTreeMap<(i64, i64), Bytes>,
    unflushed: u64,
}

/// The test ledger store.
pub struct MemLedgerStore {
    fs: Arc<dyn FileSystem>,
    path: PathBuf,
    state: Mutex<State>,
}

fn other(msg: String) -> BackendError {
    BackendError::Other(msg.into())
}

impl MemLedgerStore {
    /// Opens the store kept in `path` (empty if the file does not exist).
    pub fn open(fs: Arc<dyn FileSystem>, path: &Path) -> Result<Self, BackendError> {
        let state = if fs.exists(path) {
            let bytes = fs
                .read_file(path)
                .map_err(|e| other(format!("read {}: {e}", path.display())))?;
            decode(&bytes)
                .ok_or_else(|| other(format!("{}: damaged store file", path.display())))?
        } else {
            State::default()
        };
        Ok(MemLedgerStore {
            fs,
            path: path.to_path_buf(),
            state: Mutex::new(state),
        })
    }

    fn ledger_mut<R>(&self, ledger: i64, f: impl FnOnce(&mut StoredLedger) -> R) -> R {
        let mut s = self.state.lock();
        f(s.ledgers.entry(ledger).or_default())
    }
}

impl LedgerBackend for MemLedgerStore {
    fn put_entry(&self, ledger: i64, entry: i64, data: Bytes) -> Result<(), BackendError> {
        let mut s = self.state.lock();
        s.ledgers.entry(ledger).or_default();
        s.unflushed += data.len() as u64;
        s.entries.insert((ledger, entry), data);
        Ok(())
    }

    fn get_entry(&self, ledger: i64, entry: i64) -> Result<Option<Bytes>, BackendError> {
        let s = self.state.lock();
        if entry == -1 {
            return Ok(s
                .entries
                .range((ledger, 0)..=(ledger, i64::MAX))
                .next_back()
                .map(|(_, v)| v.clone()));
        }
        Ok(s.entries.get(&(ledger, entry)).cloned())
    }

    fn ledger(&self, ledger: i64) -> Result<Option<StoredLedger>, BackendError> {
        Ok(self.state.lock().ledgers.get(&ledger).cloned())
    }

    fn set_master_key(&self, ledger: i64, key: Bytes) -> Result<(), BackendError> {
        self.ledger_mut(ledger, |l| l.master_key = Some(key));
        Ok(())
    }

    fn set_fenced(&self, ledger: i64) -> Result<(), BackendError> {
        self.ledger_mut(ledger, |l| l.fenced = true);
        Ok(())
    }

    fn set_explicit_lac(&self, ledger: i64, body: Bytes) -> Result<(), BackendError> {
        self.ledger_mut(ledger, |l| l.explicit_lac = Some(body));
        Ok(())
    }

    fn entry_ids(&self, ledger: i64) -> Result<Vec<i64>, BackendError> {
        let s = self.state.lock();
        Ok(s.entries
            .range((ledger, 0)..=(ledger, i64::MAX))
            .map(|((_, e), _)| *e)
            .collect())
    }

    fn flush(&self) -> Result<(), BackendError> {
        let snapshot = self.state.lock().clone();
        let bytes = encode(&snapshot);
        self.fs.write_file_atomic(&self.path, &bytes).map_err(|e| {
            if e.kind() == std::io::ErrorKind::StorageFull {
                let dir = self.path.parent().unwrap_or(Path::new("/")).to_path_buf();
                BackendError::NoSpace {
                    dir,
                    detail: e.to_string(),
                }
            } else {
                other(format!("flush {}: {e}", self.path.display()))
            }
        })?;
        let mut s = self.state.lock();
        s.unflushed = s.unflushed.saturating_sub(snapshot.unflushed);
        Ok(())
    }

    fn write_cache_used(&self) -> u64 {
        self.state.lock().unflushed
    }
}

fn put_bytes(out: &mut Vec<u8>, b: Option<&Bytes>) {
    match b {
        None => out.push(0),
        Some(b) => {
            out.push(1);
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
    }
}

fn encode(s: &State) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(s.ledgers.len() as u32).to_le_bytes());
    for (id, l) in &s.ledgers {
        out.extend_from_slice(&id.to_le_bytes());
        out.push(u8::from(l.fenced));
        put_bytes(&mut out, l.master_key.as_ref());
        put_bytes(&mut out, l.explicit_lac.as_ref());
    }
    out.extend_from_slice(&(s.entries.len() as u32).to_le_bytes());
    for ((l, e), data) in &s.entries {
        out.extend_from_slice(&l.to_le_bytes());
        out.extend_from_slice(&e.to_le_bytes());
        put_bytes(&mut out, Some(data));
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<Option<Bytes>> {
        match self.take(1)?[0] {
            0 => Some(None),
            _ => {
                let n = self.u32()? as usize;
                Some(Some(Bytes::copy_from_slice(self.take(n)?)))
            }
        }
    }
}

fn decode(b: &[u8]) -> Option<State> {
    let (body, crc) = b.split_at(b.len().checked_sub(4)?);
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return None;
    }
    let mut c = Cursor(body);
    let mut s = State::default();
    for _ in 0..c.u32()? {
        let id = c.i64()?;
        let fenced = c.take(1)?[0] != 0;
        let master_key = c.bytes()?;
        let explicit_lac = c.bytes()?;
        s.ledgers.insert(
            id,
            StoredLedger {
                fenced,
                master_key,
                explicit_lac,
            },
        );
    }
    for _ in 0..c.u32()? {
        let l = c.i64()?;
        let e = c.i64()?;
        s.entries.insert((l, e), c.bytes()??);
    }
    Some(s)
}
