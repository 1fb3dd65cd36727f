//! The registration properties every Folio bookie publishes beside its endpoints
//! (BookKeeper's `BookieServiceInfo` properties), so that clients can tell a Folio bookie
//! from a BookKeeper one where the two answer differently.

/// The property under which a Folio bookie publishes its version. Its presence also says
/// the bookie answers GetListOfEntriesOfLedger (a BookKeeper bookie with DbLedgerStorage
/// leaves that request unanswered).
pub const FOLIO_VERSION_PROPERTY: &str = "folioVersion";
