//! Folio's shared vocabulary: the ids BookKeeper readers know (ledger, entry, bookie)
//! and the quorum arithmetic every other crate relies on (which bookies of an
//! ensemble hold an entry, when a set of answers covers an ack quorum).
//!
//! Ledger and entry ids are `i64`, as on BookKeeper's wire, where `-1` means "no entry"
//! (an empty ledger's LAC, the "last entry" read). Keeping BookKeeper's signed
//! representation avoids a conversion at every protocol boundary.

pub mod metadata;
pub mod quorum;
pub mod rack;
pub mod service;

use std::fmt;
use std::sync::Arc;

/// A ledger's id, as BookKeeper's `long ledgerId` (non-negative when valid).
pub type LedgerId = i64;
/// An entry's id within a ledger, as BookKeeper's `long entryId`.
pub type EntryId = i64;

/// A hash map keyed by ledger ids (or pairs of ids), for the maps every add looks up.
///
/// std's default hasher (SipHash-1-3) costs tens of nanoseconds per lookup, and an add
/// looks a ledger up in several maps on each bookie. foldhash takes a few; its seed is
/// random per map, so a client choosing ledger ids cannot aim them at one bucket.
pub type IdHashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// The set counterpart of [`IdHashMap`].
pub type IdHashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// "No entry": the LAC of a ledger with no confirmed entry, and BookKeeper's
/// `LedgerHandle.INVALID_ENTRY_ID`.
pub const INVALID_ENTRY_ID: EntryId = -1;

/// A read of entry id `-1` asks a bookie for the last entry it holds of a ledger
/// (BookKeeper's `BookieProtocol.LAST_ADD_CONFIRMED`).
pub const LAST_ENTRY_ID: EntryId = -1;

/// A bookie's identity: `host:port` unless configured otherwise (BookKeeper's `BookieId`).
///
/// Shared, not owned: a writer clones its ensemble's ids for every add and every answer
/// (the add to each bookie, the answer's sender, the acknowledgement set), and a clone is a
/// reference count, not an allocation.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BookieId(Arc<str>);

impl BookieId {
    /// Wraps a bookie id string. BookKeeper allows `[a-zA-Z0-9:-_.]`; anything else is refused.
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidBookieId> {
        let id = id.into();
        let valid = !id.is_empty()
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '-' | '_' | '.'));
        if valid {
            Ok(BookieId(id.into()))
        } else {
            Err(InvalidBookieId(id))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BookieId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for BookieId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BookieId({})", self.0)
    }
}

/// A string that is not a valid bookie id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidBookieId(pub String);

impl fmt::Display for InvalidBookieId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid bookie id {:?}: only letters, digits, ':', '-', '_' and '.' are allowed",
            self.0
        )
    }
}

impl std::error::Error for InvalidBookieId {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookie_id_accepts_host_port_and_rejects_junk() {
        assert_eq!(
            BookieId::new("127.0.0.1:3181").unwrap().as_str(),
            "127.0.0.1:3181"
        );
        assert!(BookieId::new("").is_err());
        assert!(BookieId::new("a b").is_err());
        assert!(BookieId::new("host/3181").is_err());
    }
}
