//! "Entry with digest" (BookKeeper's `DigestManager`): the bytes a client sends in an add and a
//! bookie stores and returns on a read.
//!
//! Layout: `ledgerId(8) | entryId(8) | lac(8) | length(8) | digest(D) | payload`, all big-endian;
//! the digest covers the 32 header bytes followed by the payload (everything but itself). The
//! LAC body of WriteLac/ReadLac is `ledgerId(8) | lac(8) | digest(D)` with the digest over the
//! first 16 bytes. Bookies never verify digests; they only compare the master key
//! ([`master_key`]) with the one first seen for the ledger.

use bytes::{BufMut, Bytes, BytesMut};
use hmac::{Hmac, KeyInit, Mac};
use sha1::{Digest, Sha1};

use crate::error::DigestError;

/// Bytes of entry header before the digest (`DigestManager.METADATA_LENGTH`).
pub const METADATA_LENGTH: usize = 32;
/// Bytes of LAC body before the digest (`DigestManager.LAC_METADATA_LENGTH`).
pub const LAC_METADATA_LENGTH: usize = 16;
/// Length of a master key and of a MAC (SHA-1 output).
pub const MASTER_KEY_LENGTH: usize = 20;

type HmacSha1 = Hmac<Sha1>;

/// A ledger's digest type, numbered as in ledger metadata (`LedgerMetadataFormat.DigestType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DigestType {
    /// CRC-32 (IEEE, `java.util.zip.CRC32`) in an 8-byte field; the Java client's default.
    Crc32,
    /// HMAC-SHA1 keyed with SHA-1("mac" ‖ password), 20 bytes.
    Mac,
    /// CRC-32C (Castagnoli) in a 4-byte field.
    Crc32c,
    /// No digest (0 bytes).
    Dummy,
}

impl DigestType {
    /// Size `D` of the digest field.
    pub fn digest_len(self) -> usize {
        match self {
            DigestType::Crc32 => 8,
            DigestType::Mac => 20,
            DigestType::Crc32c => 4,
            DigestType::Dummy => 0,
        }
    }

    /// The value in ledger metadata (CRC32 = 1, HMAC = 2, CRC32C = 3, DUMMY = 4).
    pub fn metadata_value(self) -> i32 {
        match self {
            DigestType::Crc32 => 1,
            DigestType::Mac => 2,
            DigestType::Crc32c => 3,
            DigestType::Dummy => 4,
        }
    }

    /// From the ledger-metadata value; `None` for values BookKeeper does not define.
    pub fn from_metadata_value(value: i32) -> Option<DigestType> {
        match value {
            1 => Some(DigestType::Crc32),
            2 => Some(DigestType::Mac),
            3 => Some(DigestType::Crc32c),
            4 => Some(DigestType::Dummy),
            _ => None,
        }
    }
}

fn sha1_of(pad: &[u8], password: &[u8]) -> [u8; MASTER_KEY_LENGTH] {
    let mut h = Sha1::new();
    h.update(pad);
    h.update(password);
    h.finalize().into()
}

/// The master key a client sends to bookies: SHA-1("ledger" ‖ password). The empty password
/// gives SHA-1("ledger"), BookKeeper's `EMPTY_LEDGER_KEY`.
pub fn master_key(password: &[u8]) -> [u8; MASTER_KEY_LENGTH] {
    sha1_of(b"ledger", password)
}

/// The HMAC key of MAC ledgers: SHA-1("mac" ‖ password).
pub fn mac_key(password: &[u8]) -> [u8; MASTER_KEY_LENGTH] {
    sha1_of(b"mac", password)
}

/// The 32-byte header of an entry, read without verification (what a bookie needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryHeader {
    pub ledger_id: i64,
    pub entry_id: i64,
    /// Last add confirmed known by the writer when it sent the entry (-1 if none).
    pub lac: i64,
    /// Ledger length in bytes including this entry's payload.
    pub length: i64,
}

impl EntryHeader {
    /// Reads the header fields; `None` if `entry` is shorter than 32 bytes.
    pub fn peek(entry: &[u8]) -> Option<EntryHeader> {
        if entry.len() < METADATA_LENGTH {
            return None;
        }
        Some(EntryHeader {
            ledger_id: be_i64(entry, 0),
            entry_id: be_i64(entry, 8),
            lac: be_i64(entry, 16),
            length: be_i64(entry, 24),
        })
    }
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// An entry whose digest, ledger id and (unless skipped) entry id checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedEntry {
    pub entry_id: i64,
    pub lac: i64,
    pub length: i64,
    /// The application's bytes (a slice of the received entry, no copy).
    pub payload: Bytes,
}

#[derive(Clone)]
enum Algo {
    Crc32,
    Crc32c,
    Mac(HmacSha1),
    Dummy,
}

/// Builds and verifies entries and LAC bodies of one ledger.
#[derive(Clone)]
pub struct DigestManager {
    ledger_id: i64,
    digest_type: DigestType,
    algo: Algo,
}

impl std::fmt::Debug for DigestManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The MAC state is keyed with the password's digest: keep it out of logs.
        f.debug_struct("DigestManager")
            .field("ledger_id", &self.ledger_id)
            .field("digest_type", &self.digest_type)
            .finish()
    }
}

impl DigestManager {
    /// A digest manager for `ledger_id`; `password` matters only for [`DigestType::Mac`].
    pub fn new(ledger_id: i64, digest_type: DigestType, password: &[u8]) -> DigestManager {
        let algo = match digest_type {
            DigestType::Crc32 => Algo::Crc32,
            DigestType::Crc32c => Algo::Crc32c,
            DigestType::Dummy => Algo::Dummy,
            DigestType::Mac => Algo::Mac(
                // HMAC accepts keys of any length, so this cannot fail for a 20-byte key.
                HmacSha1::new_from_slice(&mac_key(password)).expect("HMAC accepts any key length"),
            ),
        };
        DigestManager {
            ledger_id,
            digest_type,
            algo,
        }
    }

    pub fn ledger_id(&self) -> i64 {
        self.ledger_id
    }

    pub fn digest_type(&self) -> DigestType {
        self.digest_type
    }

    /// Size of the digest field.
    pub fn digest_len(&self) -> usize {
        self.digest_type.digest_len()
    }

    /// Appends the digest of `parts` (concatenated) to `out`.
    fn put_digest(&self, parts: &[&[u8]], out: &mut BytesMut) {
        match &self.algo {
            Algo::Crc32 => {
                let mut h = crc32fast::Hasher::new();
                for p in parts {
                    h.update(p);
                }
                // java.util.zip.CRC32.getValue() is a long with the upper 32 bits zero.
                out.put_u64(u64::from(h.finalize()));
            }
            Algo::Crc32c => {
                let crc = parts.iter().fold(0u32, |c, p| crc32c::crc32c_append(c, p));
                out.put_u32(crc);
            }
            Algo::Mac(mac) => {
                let mut m = mac.clone();
                for p in parts {
                    m.update(p);
                }
                out.put_slice(&m.finalize().into_bytes());
            }
            Algo::Dummy => {}
        }
    }

    fn digest_matches(&self, parts: &[&[u8]], received: &[u8]) -> bool {
        match &self.algo {
            Algo::Mac(mac) => {
                let mut m = mac.clone();
                for p in parts {
                    m.update(p);
                }
                // Constant-time comparison: the MAC authenticates the entry.
                m.verify_slice(received).is_ok()
            }
            _ => {
                let mut expected = BytesMut::with_capacity(self.digest_len());
                self.put_digest(parts, &mut expected);
                expected[..] == *received
            }
        }
    }

    /// Builds the whole entry with digest: header, digest, payload.
    pub fn compute(&self, entry_id: i64, lac: i64, length: i64, payload: &[u8]) -> Bytes {
        let mut out = BytesMut::with_capacity(METADATA_LENGTH + self.digest_len() + payload.len());
        out.put_i64(self.ledger_id);
        out.put_i64(entry_id);
        out.put_i64(lac);
        out.put_i64(length);
        let header = out.clone().freeze();
        self.put_digest(&[&header, payload], &mut out);
        out.put_slice(payload);
        out.freeze()
    }

    /// Verifies an entry read for `expected_entry_id`: digest, then ledger id, then entry id.
    pub fn verify(
        &self,
        entry: &Bytes,
        expected_entry_id: i64,
    ) -> Result<VerifiedEntry, DigestError> {
        self.verify_inner(entry, Some(expected_entry_id))
    }

    /// Verifies an entry returned for a LAC / last-entry read (entry id -1), where the entry id
    /// is whatever the bookie had last: digest and ledger id only (BookKeeper's recovery data).
    pub fn verify_any_entry(&self, entry: &Bytes) -> Result<VerifiedEntry, DigestError> {
        self.verify_inner(entry, None)
    }

    fn verify_inner(
        &self,
        entry: &Bytes,
        expected: Option<i64>,
    ) -> Result<VerifiedEntry, DigestError> {
        let d = self.digest_len();
        let needed = METADATA_LENGTH + d;
        if entry.len() < needed {
            return Err(DigestError::TooShort {
                needed,
                got: entry.len(),
            });
        }
        let header = EntryHeader::peek(entry).ok_or(DigestError::TooShort {
            needed,
            got: entry.len(),
        })?;
        let parts: [&[u8]; 2] = [&entry[..METADATA_LENGTH], &entry[needed..]];
        if !self.digest_matches(&parts, &entry[METADATA_LENGTH..needed]) {
            return Err(DigestError::Mismatch {
                ledger_id: self.ledger_id,
                entry_id: expected.unwrap_or(header.entry_id),
            });
        }
        if header.ledger_id != self.ledger_id {
            return Err(DigestError::LedgerIdMismatch {
                expected: self.ledger_id,
                actual: header.ledger_id,
            });
        }
        if let Some(expected) = expected
            && header.entry_id != expected
        {
            return Err(DigestError::EntryIdMismatch {
                expected,
                actual: header.entry_id,
            });
        }
        Ok(VerifiedEntry {
            entry_id: header.entry_id,
            lac: header.lac,
            length: header.length,
            payload: entry.slice(needed..),
        })
    }

    /// Builds a LAC body (`ledgerId | lac | digest`) for WriteLac.
    pub fn compute_lac(&self, lac: i64) -> Bytes {
        let mut out = BytesMut::with_capacity(LAC_METADATA_LENGTH + self.digest_len());
        out.put_i64(self.ledger_id);
        out.put_i64(lac);
        let header = out.clone().freeze();
        self.put_digest(&[&header], &mut out);
        out.freeze()
    }

    /// Verifies a LAC body from ReadLac and returns the LAC.
    pub fn verify_lac(&self, body: &[u8]) -> Result<i64, DigestError> {
        let needed = LAC_METADATA_LENGTH + self.digest_len();
        if body.len() < needed {
            return Err(DigestError::TooShort {
                needed,
                got: body.len(),
            });
        }
        let ledger_id = be_i64(body, 0);
        let lac = be_i64(body, 8);
        if !self.digest_matches(
            &[&body[..LAC_METADATA_LENGTH]],
            &body[LAC_METADATA_LENGTH..needed],
        ) {
            return Err(DigestError::Mismatch {
                ledger_id: self.ledger_id,
                entry_id: lac,
            });
        }
        if ledger_id != self.ledger_id {
            return Err(DigestError::LedgerIdMismatch {
                expected: self.ledger_id,
                actual: ledger_id,
            });
        }
        Ok(lac)
    }
}
