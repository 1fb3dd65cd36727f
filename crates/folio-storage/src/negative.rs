//! Negative controls: switches that break one durability rule of the storage engine on
//! purpose, so that a test (the simulator, the crash tests) can show its checker sees the
//! break. Each is off by default and set only through a `set_negative_controls_for_tests`
//! call (on `Storage`, `LedgerStore` or the bookie's `EngineStorage`); no configuration
//! file or flag reaches them. Never set one outside a test.

/// Which rules to break.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NegativeControls {
    /// The entry logs' fdatasync is skipped (their buffers are still written): a
    /// checkpoint then moves the journal mark and deletes journal files whose entries are
    /// durable nowhere. (Rotation's sync of a finished log stays.)
    pub skip_entry_log_sync: bool,
    /// A flush commits the index before it fdatasyncs the entry logs, and compaction
    /// points the index at its copies before it fdatasyncs them: a crash in between
    /// leaves an index pointing at bytes that never reached the disk.
    pub index_before_entry_log_sync: bool,
    /// A checkpoint persists the journal marks, deleting the journal files wholly before
    /// them, before it flushes the ledger store: the deleted files' entries are then
    /// durable nowhere until the flush's fdatasync.
    pub delete_journal_before_flush: bool,
    /// A rotated entry log (size limit, eviction, idle or write-closed log per ledger)
    /// gets its ledgers map but no fdatasync: the flush then commits an index pointing
    /// at its records, and the journal mark moves past them, while they may be lost.
    pub skip_rotated_entry_log_sync: bool,
    /// A ForceLedger of a ledger with deferred-sync recovery adds answers after the
    /// journal's fdatasync alone, without waiting for a ledger-store flush: a
    /// re-replicating copier then names this bookie while its copies are only in memory.
    pub deferred_force_skips_flush: bool,
    /// A checkpoint whose ledger-store flush only staged the index (it is not durable)
    /// still persists the journal marks and deletes the journal files before them: a
    /// crash before the next index commit loses the staged flushes' entries.
    pub marks_past_a_staged_index: bool,
}
