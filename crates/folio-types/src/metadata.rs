//! A ledger's metadata, as BookKeeper's `LedgerMetadata`: its quorum sizes, its
//! ensembles (one per fragment, keyed by the fragment's first entry id), its state
//! (open, in recovery, closed), and, once closed, its last entry id and length.
//!
//! The metadata store holds it (serialized as BookKeeper's `LedgerMetadataFormat`,
//! see `folio-metadata`); this type is the in-memory value every crate shares.

use std::collections::BTreeMap;
use std::fmt;

use crate::quorum::QuorumConfig;
use crate::{BookieId, EntryId, INVALID_ENTRY_ID};

/// The metadata format version Folio writes: BookKeeper's version 3, binary protobuf.
pub const CURRENT_METADATA_FORMAT_VERSION: u32 = 3;

/// A ledger's life cycle. Values are BookKeeper's `LedgerMetadataFormat.State`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LedgerState {
    /// A writer may be appending.
    Open,
    /// Someone is recovering the tail (the writer has been or is being fenced).
    InRecovery,
    /// The last entry id and length are final; the ledger never changes again.
    Closed,
}

impl fmt::Display for LedgerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LedgerState::Open => "OPEN",
            LedgerState::InRecovery => "IN_RECOVERY",
            LedgerState::Closed => "CLOSED",
        })
    }
}

/// How entries of a ledger are digested. Values are BookKeeper's `DigestType`
/// in `LedgerMetadataFormat` (CRC32=1, HMAC=2, CRC32C=3, DUMMY=4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DigestType {
    Crc32,
    /// HMAC-SHA1 keyed by the ledger password (BookKeeper's `MAC`).
    Mac,
    Crc32c,
    Dummy,
}

impl fmt::Display for DigestType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DigestType::Crc32 => "CRC32",
            DigestType::Mac => "MAC",
            DigestType::Crc32c => "CRC32C",
            DigestType::Dummy => "DUMMY",
        })
    }
}

/// A ledger's metadata.
///
/// Invariants a valid value keeps (checked by [`LedgerMetadata::validate`]):
/// `ensemble_size >= write_quorum >= ack_quorum >= 1`; at least one ensemble, the first
/// starting at entry 0, each with exactly `ensemble_size` bookies; a closed ledger's
/// `last_entry_id >= -1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerMetadata {
    /// The serialization format this record was read with or will be written with (3).
    pub metadata_format_version: u32,
    pub state: LedgerState,
    pub ensemble_size: usize,
    pub write_quorum: usize,
    pub ack_quorum: usize,
    /// Fragments: first entry id -> the ensemble that stores entries from there on.
    pub ensembles: BTreeMap<EntryId, Vec<BookieId>>,
    /// The last entry of a closed ledger; `-1` while open (or when closed empty).
    pub last_entry_id: EntryId,
    /// Total payload bytes of a closed ledger; 0 while open.
    pub length: u64,
    pub digest_type: DigestType,
    /// The ledger password. `None` when the record carried none (very old ledgers);
    /// the digest type is then meaningless, as in BookKeeper.
    pub password: Option<Vec<u8>>,
    /// Application key/value pairs (BookKeeper's `customMetadata`).
    pub custom_metadata: BTreeMap<String, Vec<u8>>,
    /// Creation time in milliseconds since the epoch, when recorded.
    pub ctime: Option<i64>,
    /// A random token set at creation, so a retried create can tell its own record
    /// from somebody else's (BookKeeper's `cToken`, format 3 only). `new_open` leaves
    /// it 0 ("no token": a retried create then reports the ledger as existing); a
    /// creating client sets a random positive value.
    pub c_token: i64,
}

impl LedgerMetadata {
    /// Metadata of a new, open ledger with one ensemble starting at entry 0.
    pub fn new_open(
        quorum: QuorumConfig,
        ensemble: Vec<BookieId>,
        digest_type: DigestType,
        password: Vec<u8>,
    ) -> Self {
        let mut ensembles = BTreeMap::new();
        ensembles.insert(0, ensemble);
        LedgerMetadata {
            metadata_format_version: CURRENT_METADATA_FORMAT_VERSION,
            state: LedgerState::Open,
            ensemble_size: quorum.ensemble_size,
            write_quorum: quorum.write_quorum,
            ack_quorum: quorum.ack_quorum,
            ensembles,
            last_entry_id: INVALID_ENTRY_ID,
            length: 0,
            digest_type,
            password: Some(password),
            custom_metadata: BTreeMap::new(),
            ctime: None,
            c_token: 0,
        }
    }

    /// E, Qw and Qa, checked.
    pub fn quorum(&self) -> Result<QuorumConfig, String> {
        QuorumConfig::new(self.ensemble_size, self.write_quorum, self.ack_quorum)
    }

    pub fn is_closed(&self) -> bool {
        self.state == LedgerState::Closed
    }

    pub fn is_in_recovery(&self) -> bool {
        self.state == LedgerState::InRecovery
    }

    /// The ensemble of the last fragment (where new entries go), with its first entry id.
    pub fn current_ensemble(&self) -> Option<(EntryId, &[BookieId])> {
        self.ensembles
            .iter()
            .next_back()
            .map(|(first, e)| (*first, e.as_slice()))
    }

    /// The ensemble of the fragment holding `entry_id`: the one with the greatest first
    /// entry id not above it. `None` for a negative entry id or no ensemble at all.
    pub fn ensemble_for_entry(&self, entry_id: EntryId) -> Option<&[BookieId]> {
        if entry_id < 0 {
            return None;
        }
        self.ensembles
            .range(..=entry_id)
            .next_back()
            .map(|(_, e)| e.as_slice())
    }

    /// The first entry id of the fragment holding `entry_id`.
    pub fn fragment_start(&self, entry_id: EntryId) -> Option<EntryId> {
        if entry_id < 0 {
            return None;
        }
        self.ensembles
            .range(..=entry_id)
            .next_back()
            .map(|(first, _)| *first)
    }

    /// Every bookie that appears in any ensemble of the ledger.
    pub fn all_bookies(&self) -> std::collections::BTreeSet<BookieId> {
        self.ensembles.values().flatten().cloned().collect()
    }

    /// Checks the invariants listed on the type; the message names what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        self.quorum()?;
        let Some((first, _)) = self.ensembles.iter().next() else {
            return Err("ledger metadata has no ensemble".into());
        };
        if *first != 0 {
            return Err(format!(
                "the first ensemble starts at entry {first}, not at entry 0"
            ));
        }
        for (start, ensemble) in &self.ensembles {
            if ensemble.len() != self.ensemble_size {
                return Err(format!(
                    "the ensemble starting at entry {start} has {} bookies, the ensemble size is {}",
                    ensemble.len(),
                    self.ensemble_size
                ));
            }
        }
        if self.is_closed() && self.last_entry_id < INVALID_ENTRY_ID {
            return Err(format!(
                "closed ledger with last entry id {}",
                self.last_entry_id
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> BookieId {
        BookieId::new(s).unwrap()
    }

    fn sample() -> LedgerMetadata {
        let mut m = LedgerMetadata::new_open(
            QuorumConfig::new(3, 2, 2).unwrap(),
            vec![b("a:1"), b("b:1"), b("c:1")],
            DigestType::Crc32c,
            b"pw".to_vec(),
        );
        m.ensembles.insert(10, vec![b("a:1"), b("d:1"), b("c:1")]);
        m
    }

    #[test]
    fn ensemble_for_entry_picks_the_fragment_holding_it() {
        let m = sample();
        assert_eq!(m.ensemble_for_entry(0).unwrap()[1], b("b:1"));
        assert_eq!(m.ensemble_for_entry(9).unwrap()[1], b("b:1"));
        assert_eq!(m.ensemble_for_entry(10).unwrap()[1], b("d:1"));
        assert_eq!(m.ensemble_for_entry(1_000).unwrap()[1], b("d:1"));
        assert_eq!(m.ensemble_for_entry(-1), None);
        assert_eq!(m.fragment_start(12), Some(10));
        assert_eq!(m.current_ensemble().unwrap().0, 10);
        assert_eq!(m.all_bookies().len(), 4);
    }

    #[test]
    fn validate_names_the_broken_invariant() {
        let mut m = sample();
        assert_eq!(m.validate(), Ok(()));
        m.ensembles.insert(20, vec![b("a:1")]);
        assert!(m.validate().unwrap_err().contains("entry 20"));
        let mut m = sample();
        m.ensembles.remove(&0);
        assert!(m.validate().unwrap_err().contains("not at entry 0"));
        let mut m = sample();
        m.ack_quorum = 3;
        assert!(m.validate().unwrap_err().contains("invalid quorum"));
        assert!(!m.is_closed());
    }
}
