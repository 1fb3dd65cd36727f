//! What the bookie needs from its local storage, as a trait, so the request processor can run
//! over the real engine (`folio_storage::Storage`, through an adapter), over the in-memory
//! [`crate::memory::MemoryStorage`] in unit tests, and under the simulator.
//!
//! Writes (add, fence, explicit LAC, force) complete through a callback that runs only once the
//! write is durable (after the journal's fdatasync that covers it), so that a response sent from
//! the callback never acknowledges anything a crash could lose (DESIGN.md invariants 1 and 6).
//! Reads are synchronous and may block on disk.

use bytes::Bytes;
use folio_types::{EntryId, LedgerId};

/// Runs once when a write is durable (`Ok`) or has failed. It may run on the calling thread (an
/// error found at once) or on the journal's completion thread; it must not block for long.
pub type WriteCallback = Box<dyn FnOnce(Result<(), StorageError>) + Send + 'static>;

/// Why storage refused or failed a request. Only [`StorageError::NoLedger`] and
/// [`StorageError::NoEntry`] mean "absent"; everything else that goes wrong is an error, never a
/// negative answer (DESIGN.md invariant 5).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    #[error("no such ledger {0}")]
    NoLedger(LedgerId),
    #[error("no such entry {entry} in ledger {ledger}")]
    NoEntry { ledger: LedgerId, entry: EntryId },
    #[error("master key mismatch for ledger {0}")]
    Unauthorized(LedgerId),
    #[error("ledger {0} is fenced")]
    Fenced(LedgerId),
    #[error("bookie is read-only")]
    ReadOnly,
    #[error("storage I/O error: {0}")]
    Io(String),
}

/// The local disk as the request processor sees it. `Send + Sync`: many connections call it at
/// once, and completions come from the journal thread.
pub trait BookieStorage: Send + Sync + 'static {
    /// Stores `body` (the whole "entry with digest") as `(ledger, entry)`. The first add of a
    /// ledger records `master_key` durably; a later add with another key fails with
    /// `Unauthorized`. An add to a fenced ledger fails with `Fenced` unless `recovery` is set
    /// (recovery adds bypass the fence). `done` runs once the entry is journaled.
    fn add_entry(
        &self,
        ledger: LedgerId,
        entry: EntryId,
        master_key: Bytes,
        body: Bytes,
        recovery: bool,
        done: WriteCallback,
    );

    /// A recovery add with DEFERRED_SYNC (a re-replicating copy): `done` may run before the
    /// entry is durable; a `force_ledger` of the ledger asked after `done` ran makes it so.
    /// The default journals it as any recovery add (durable at `done`, more than asked).
    fn add_recovery_entry_deferred(
        &self,
        ledger: LedgerId,
        entry: EntryId,
        master_key: Bytes,
        body: Bytes,
        done: WriteCallback,
    ) {
        self.add_entry(ledger, entry, master_key, body, true, done)
    }

    /// Fences `ledger` durably (creating its state with `master_key` if the ledger is unknown);
    /// `Unauthorized` if the ledger has another master key. `done` runs once the fence is durable.
    fn fence(&self, ledger: LedgerId, master_key: Bytes, done: WriteCallback);

    /// Reads an entry; `entry == -1` means the last entry stored for the ledger.
    fn read_entry(&self, ledger: LedgerId, entry: EntryId) -> Result<Bytes, StorageError>;

    /// `read_entry` only if it cannot wait for the disk (the entry is in memory or the page
    /// cache), so that the connection's task can answer it itself instead of handing it to
    /// a read thread. `None` when it would wait, and when `read_entry` would fail: the read
    /// threads then answer, with the error. Default: always `None`.
    fn read_entry_nowait(&self, _ledger: LedgerId, _entry: EntryId) -> Option<Bytes> {
        None
    }

    /// The LAC if it is known without reading storage (see `last_add_confirmed`); `None`
    /// otherwise. Default: `None`.
    fn known_lac(&self, _ledger: LedgerId) -> Option<EntryId> {
        None
    }

    /// The highest LAC the bookie knows for the ledger: the larger of the LAC carried by the
    /// entries it stored and the explicit LAC last written. `-1` if none. `NoLedger` if unknown.
    /// An add's LAC counts once `add_entry` returned with the entry stored, durable or not
    /// yet: the writer confirmed it from an ack quorum, so it is true of the ledger whatever
    /// becomes of this copy (BookKeeper's ledger storage serves it the same way).
    fn last_add_confirmed(&self, ledger: LedgerId) -> Result<EntryId, StorageError>;

    /// The LAC body last written by WriteLac (opaque, §4.4), if any. `NoLedger` if unknown.
    fn explicit_lac(&self, ledger: LedgerId) -> Result<Option<Bytes>, StorageError>;

    /// Stores `body` as the explicit LAC of the ledger (`lac` is its decoded value), durably,
    /// after checking the master key. `done` runs once it is durable.
    fn write_lac(
        &self,
        ledger: LedgerId,
        lac: EntryId,
        master_key: Bytes,
        body: Bytes,
        done: WriteCallback,
    );

    /// Makes everything written for the ledger durable; `done` runs once it is.
    fn force_ledger(&self, ledger: LedgerId, done: WriteCallback);

    /// BP-32's advisory write close: checks the master key (`Unauthorized`), then asks for
    /// the ledger's entry log to rotate at the next checkpoint. `NoLedger` if unknown.
    /// Nothing is made durable: a lost mark only delays a rotation. The default (a storage
    /// without entry logs) checks nothing and does nothing.
    fn write_close(&self, _ledger: LedgerId, _master_key: &[u8]) -> Result<(), StorageError> {
        Ok(())
    }

    /// Entry ids held for the ledger, ascending. `NoLedger` if unknown.
    fn entry_ids(&self, ledger: LedgerId) -> Result<Vec<EntryId>, StorageError>;

    /// True when the bookie takes no ordinary adds (a disk is full, or a failed fsync poisoned it).
    fn is_read_only(&self) -> bool;

    /// Free and total bytes of the ledger disks.
    fn space(&self) -> Result<folio_env::DiskSpace, StorageError>;

    /// An operator's manual read-only mode (BookKeeper's `PUT /api/v1/bookie/state/readonly`),
    /// on top of any read-only cause of the storage's own; `false` lifts only the manual one.
    /// Storages without the switch refuse it.
    fn set_manual_read_only(&self, _read_only: bool) -> Result<(), StorageError> {
        Err(StorageError::Io(
            "this bookie's storage has no manual read-only mode".into(),
        ))
    }
}

impl<S: BookieStorage + ?Sized> BookieStorage for std::sync::Arc<S> {
    fn add_entry(
        &self,
        ledger: LedgerId,
        entry: EntryId,
        master_key: Bytes,
        body: Bytes,
        recovery: bool,
        done: WriteCallback,
    ) {
        (**self).add_entry(ledger, entry, master_key, body, recovery, done)
    }
    fn add_recovery_entry_deferred(
        &self,
        ledger: LedgerId,
        entry: EntryId,
        master_key: Bytes,
        body: Bytes,
        done: WriteCallback,
    ) {
        (**self).add_recovery_entry_deferred(ledger, entry, master_key, body, done)
    }
    fn fence(&self, ledger: LedgerId, master_key: Bytes, done: WriteCallback) {
        (**self).fence(ledger, master_key, done)
    }
    fn read_entry(&self, ledger: LedgerId, entry: EntryId) -> Result<Bytes, StorageError> {
        (**self).read_entry(ledger, entry)
    }
    fn read_entry_nowait(&self, ledger: LedgerId, entry: EntryId) -> Option<Bytes> {
        (**self).read_entry_nowait(ledger, entry)
    }
    fn known_lac(&self, ledger: LedgerId) -> Option<EntryId> {
        (**self).known_lac(ledger)
    }
    fn last_add_confirmed(&self, ledger: LedgerId) -> Result<EntryId, StorageError> {
        (**self).last_add_confirmed(ledger)
    }
    fn explicit_lac(&self, ledger: LedgerId) -> Result<Option<Bytes>, StorageError> {
        (**self).explicit_lac(ledger)
    }
    fn write_lac(
        &self,
        ledger: LedgerId,
        lac: EntryId,
        master_key: Bytes,
        body: Bytes,
        done: WriteCallback,
    ) {
        (**self).write_lac(ledger, lac, master_key, body, done)
    }
    fn force_ledger(&self, ledger: LedgerId, done: WriteCallback) {
        (**self).force_ledger(ledger, done)
    }
    fn write_close(&self, ledger: LedgerId, master_key: &[u8]) -> Result<(), StorageError> {
        (**self).write_close(ledger, master_key)
    }
    fn entry_ids(&self, ledger: LedgerId) -> Result<Vec<EntryId>, StorageError> {
        (**self).entry_ids(ledger)
    }
    fn is_read_only(&self) -> bool {
        (**self).is_read_only()
    }
    fn space(&self) -> Result<folio_env::DiskSpace, StorageError> {
        (**self).space()
    }
    fn set_manual_read_only(&self, read_only: bool) -> Result<(), StorageError> {
        (**self).set_manual_read_only(read_only)
    }
}
