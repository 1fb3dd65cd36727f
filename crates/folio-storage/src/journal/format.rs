//! The journal's bytes: file header, records and the mark (docs/formats/journal.md).
//!
//! All integers are little-endian. Every record carries a CRC32C seeded with the
//! file's id, so a record copied from another journal file (or embedded in an
//! entry's payload) never passes as a record of this file.
//!
//! Version 2 checksums a record's payload through the entry log's record checksum of
//! the same entry ([`payload_record_crc`]): for an add of 16 KiB or more the write cache
//! computes that one as the add is put, so the journal and the entry log share one pass
//! over the payload where version 1 took two (smaller payloads are checksummed here, as
//! before). Version 1 files are still read (a journal written before the upgrade is
//! replayed); new files are version 2.

use crate::entry_log::format::payload_record_crc;

/// Magic at the start of every journal file.
pub const FILE_MAGIC: &[u8; 8] = b"FOLIOJNL";
/// Magic at the start of a mark file.
pub const MARK_MAGIC: &[u8; 8] = b"FOLIOMRK";
/// The journal format version written by this code (it reads 1 as well).
pub const FORMAT_VERSION: u32 = 2;
/// The oldest journal format version this code reads.
pub const OLDEST_VERSION: u32 = 1;
/// The mark file's version (unchanged by the journal's version 2).
pub const MARK_VERSION: u32 = 1;
/// Bytes of the file header; records start here.
pub const HEADER_LEN: u64 = 32;
/// Bytes of a record header (before the payload).
pub const RECORD_HEADER_LEN: usize = 28;
/// Bytes of a mark file.
pub const MARK_LEN: usize = 36;
/// The largest payload a record may carry (BookKeeper's frames are far smaller).
pub const MAX_PAYLOAD: u32 = 256 * 1024 * 1024;
/// Name of the mark file inside `<journal dir>/current/`.
pub const MARK_FILE: &str = "lastMark";

/// What a record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordKind {
    /// An entry: payload = the entry with digest, as the client sent it.
    Add = 1,
    /// A ledger's master key: payload = the key.
    MasterKey = 2,
    /// The ledger is fenced: empty payload.
    Fence = 3,
    /// An explicit LAC: payload = the LAC body sent by WriteLac.
    ExplicitLac = 4,
}

impl RecordKind {
    pub fn from_u8(b: u8) -> Option<Self> {
        match b {
            1 => Some(RecordKind::Add),
            2 => Some(RecordKind::MasterKey),
            3 => Some(RecordKind::Fence),
            4 => Some(RecordKind::ExplicitLac),
            _ => None,
        }
    }
}

/// A position in a journal directory: (file id, byte offset). Ordered, so marks
/// compare the way they must only move: forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Position {
    pub file_id: u64,
    pub offset: u64,
}

/// `<id as 16 hex digits>.txn`
pub fn file_name(file_id: u64) -> String {
    format!("{file_id:016x}.txn")
}

/// The file id of a journal file name, or None for other files.
pub fn parse_file_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".txn")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

pub fn encode_header(file_id: u64) -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[0..8].copy_from_slice(FILE_MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    h[16..24].copy_from_slice(&file_id.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Checks a file header and returns its format version; Err says what is wrong.
pub fn decode_header(h: &[u8], expected_id: u64) -> Result<u32, String> {
    if h.len() < HEADER_LEN as usize {
        return Err("header too short".into());
    }
    if &h[0..8] != FILE_MAGIC {
        return Err(format!("bad magic {:02x?}", &h[0..8]));
    }
    let crc = u32::from_le_bytes(h[28..32].try_into().unwrap());
    if crc != crc32c::crc32c(&h[0..28]) {
        return Err("header checksum mismatch".into());
    }
    let version = u32::from_le_bytes(h[8..12].try_into().unwrap());
    if !(OLDEST_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(format!(
            "unsupported journal format version {version} (this build reads {OLDEST_VERSION} to {FORMAT_VERSION})"
        ));
    }
    let id = u64::from_le_bytes(h[16..24].try_into().unwrap());
    if id != expected_id {
        return Err(format!(
            "header names file id {id:x}, file name says {expected_id:x}"
        ));
    }
    Ok(version)
}

/// A record's checksum in a file of `version`; `record` is the whole record (its
/// checksum field is not read). Version 1: CRC32C of the file id and every byte after
/// the checksum field. Version 2: CRC32C of the file id, the 24 header bytes after the
/// checksum field and the entry log record checksum of the payload (`payload_crc`, which
/// is computed from `record` when not given).
fn record_crc(version: u32, file_id: u64, record: &[u8], payload_crc: Option<u32>) -> u32 {
    if version == 1 {
        let seed = crc32c::crc32c(&file_id.to_le_bytes());
        return crc32c::crc32c_append(seed, &record[4..]);
    }
    let payload_crc = payload_crc.unwrap_or_else(|| {
        let ledger = i64::from_le_bytes(record[12..20].try_into().unwrap());
        let entry = i64::from_le_bytes(record[20..28].try_into().unwrap());
        payload_record_crc(ledger, entry, &record[RECORD_HEADER_LEN..])
    });
    // File id, header and payload checksum in one call (each call has a fixed cost).
    let mut covered = [0u8; 8 + RECORD_HEADER_LEN];
    covered[0..8].copy_from_slice(&file_id.to_le_bytes());
    covered[8..32].copy_from_slice(&record[4..RECORD_HEADER_LEN]);
    covered[32..36].copy_from_slice(&payload_crc.to_le_bytes());
    crc32c::crc32c(&covered)
}

/// Appends one record to `buf`, in the current format. `payload_crc`, if the caller has
/// it, is the entry log's record checksum of the payload ([`payload_record_crc`] of
/// `ledger`, `entry` and `payload`), saving a pass over the payload here.
pub fn encode_record(
    buf: &mut Vec<u8>,
    file_id: u64,
    kind: RecordKind,
    ledger: i64,
    entry: i64,
    payload: &[u8],
    payload_crc: Option<u32>,
) {
    let start = buf.len();
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&[kind as u8, 0, 0, 0]);
    buf.extend_from_slice(&ledger.to_le_bytes());
    buf.extend_from_slice(&entry.to_le_bytes());
    let crc = record_crc(
        FORMAT_VERSION,
        file_id,
        &buf[start..],
        Some(payload_crc.unwrap_or_else(|| payload_record_crc(ledger, entry, payload))),
    );
    buf.extend_from_slice(payload);
    buf[start..start + 4].copy_from_slice(&crc.to_le_bytes());
}

/// The fixed part of a record, parsed but not yet checked against its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub crc: u32,
    pub len: u32,
    pub kind: u8,
    pub reserved: [u8; 3],
    pub ledger: i64,
    pub entry: i64,
}

impl RecordHeader {
    pub fn parse(h: &[u8]) -> RecordHeader {
        RecordHeader {
            crc: u32::from_le_bytes(h[0..4].try_into().unwrap()),
            len: u32::from_le_bytes(h[4..8].try_into().unwrap()),
            kind: h[8],
            reserved: [h[9], h[10], h[11]],
            ledger: i64::from_le_bytes(h[12..20].try_into().unwrap()),
            entry: i64::from_le_bytes(h[20..28].try_into().unwrap()),
        }
    }

    /// Plausible shape (kind known, reserved zero, length in bounds); the checksum is
    /// checked separately.
    pub fn plausible(&self, room: u64) -> bool {
        RecordKind::from_u8(self.kind).is_some()
            && self.reserved == [0; 3]
            && self.len <= MAX_PAYLOAD
            && u64::from(self.len) <= room
    }

    /// Whether `record` (header + payload bytes) carries a correct checksum for a file
    /// of format `version`.
    pub fn checksum_ok(&self, version: u32, file_id: u64, record: &[u8]) -> bool {
        self.crc == record_crc(version, file_id, record, None)
    }
}

pub fn encode_mark(p: Position) -> [u8; MARK_LEN] {
    let mut m = [0u8; MARK_LEN];
    m[0..8].copy_from_slice(MARK_MAGIC);
    m[8..12].copy_from_slice(&MARK_VERSION.to_le_bytes());
    m[16..24].copy_from_slice(&p.file_id.to_le_bytes());
    m[24..32].copy_from_slice(&p.offset.to_le_bytes());
    let crc = crc32c::crc32c(&m[0..32]);
    m[32..36].copy_from_slice(&crc.to_le_bytes());
    m
}

pub fn decode_mark(m: &[u8]) -> Result<Position, String> {
    if m.len() != MARK_LEN {
        return Err(format!("mark is {} bytes, expected {MARK_LEN}", m.len()));
    }
    if &m[0..8] != MARK_MAGIC {
        return Err("bad mark magic".into());
    }
    if u32::from_le_bytes(m[32..36].try_into().unwrap()) != crc32c::crc32c(&m[0..32]) {
        return Err("mark checksum mismatch".into());
    }
    let version = u32::from_le_bytes(m[8..12].try_into().unwrap());
    if version != MARK_VERSION {
        return Err(format!("unsupported mark version {version}"));
    }
    Ok(Position {
        file_id: u64::from_le_bytes(m[16..24].try_into().unwrap()),
        offset: u64::from_le_bytes(m[24..32].try_into().unwrap()),
    })
}

/// A file header of format version 1, as builds before version 2 wrote it.
#[cfg(test)]
pub(crate) fn encode_header_v1(file_id: u64) -> [u8; HEADER_LEN as usize] {
    let mut h = encode_header(file_id);
    h[8..12].copy_from_slice(&1u32.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h
}

/// A record of format version 1, as builds before version 2 wrote it.
#[cfg(test)]
pub(crate) fn encode_record_v1(
    buf: &mut Vec<u8>,
    file_id: u64,
    kind: RecordKind,
    ledger: i64,
    entry: i64,
    payload: &[u8],
) {
    let start = buf.len();
    encode_record(buf, file_id, kind, ledger, entry, payload, None);
    let crc = record_crc(1, file_id, &buf[start..], None);
    buf[start..start + 4].copy_from_slice(&crc.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version 2 record's checksum is CRC32C over the file id, the 24 header bytes and
    /// the payload's entry log record checksum (docs/formats/journal.md).
    #[test]
    fn version_2_checksum_is_crc32c_of_file_id_header_and_payload_checksum() {
        let mut rec = Vec::new();
        encode_record(&mut rec, 0x1f, RecordKind::Add, 9, 4, b"some payload", None);
        let mut covered = 0x1fu64.to_le_bytes().to_vec();
        covered.extend_from_slice(&rec[4..RECORD_HEADER_LEN]);
        covered.extend_from_slice(&payload_record_crc(9, 4, b"some payload").to_le_bytes());
        assert_eq!(RecordHeader::parse(&rec).crc, crc32c::crc32c(&covered));
    }

    #[test]
    fn record_round_trip_and_checksum_covers_every_byte() {
        let mut v1 = Vec::new();
        encode_record_v1(&mut v1, 7, RecordKind::Add, 3, 4, b"payload");
        for (version, given) in [
            (2, None),
            (2, Some(payload_record_crc(3, 4, b"payload"))),
            (1, None),
        ] {
            let buf = if version == 1 {
                v1.clone()
            } else {
                let mut b = Vec::new();
                encode_record(&mut b, 7, RecordKind::Add, 3, 4, b"payload", given);
                b
            };
            assert_eq!(buf.len(), RECORD_HEADER_LEN + 7);
            assert_eq!(
                &buf[4..],
                &v1[4..],
                "only the checksum differs between versions"
            );
            let h = RecordHeader::parse(&buf);
            assert_eq!((h.len, h.kind, h.ledger, h.entry), (7, 1, 3, 4));
            assert!(h.plausible(100));
            assert!(h.checksum_ok(version, 7, &buf), "version {version}");
            assert!(
                !h.checksum_ok(3 - version, 7, &buf),
                "the other version's check fails"
            );
            assert!(
                !h.checksum_ok(version, 8, &buf),
                "the file id seeds the checksum"
            );
            for i in 4..buf.len() {
                let mut bad = buf.clone();
                bad[i] ^= 1;
                let hb = RecordHeader::parse(&bad);
                assert!(
                    !hb.checksum_ok(version, 7, &bad),
                    "version {version}: flip at byte {i} not detected"
                );
            }
        }
    }

    #[test]
    fn a_wrong_payload_checksum_given_makes_a_record_that_fails() {
        let mut buf = Vec::new();
        let wrong = payload_record_crc(3, 5, b"payload");
        encode_record(&mut buf, 7, RecordKind::Add, 3, 4, b"payload", Some(wrong));
        assert!(!RecordHeader::parse(&buf).checksum_ok(2, 7, &buf));
    }

    #[test]
    fn version_1_and_2_headers_are_read_others_refused() {
        let mut h = encode_header(9);
        assert_eq!(decode_header(&h, 9), Ok(FORMAT_VERSION));
        h[8..12].copy_from_slice(&1u32.to_le_bytes());
        let crc = crc32c::crc32c(&h[0..28]);
        h[28..32].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_header(&h, 9), Ok(1));
        h[8..12].copy_from_slice(&3u32.to_le_bytes());
        let crc = crc32c::crc32c(&h[0..28]);
        h[28..32].copy_from_slice(&crc.to_le_bytes());
        assert!(decode_header(&h, 9).unwrap_err().contains("version 3"));
    }

    #[test]
    fn header_and_mark_round_trip_and_reject_damage() {
        let h = encode_header(0x2a);
        decode_header(&h, 0x2a).unwrap();
        assert!(decode_header(&h, 0x2b).unwrap_err().contains("file id"));
        let mut bad = h;
        bad[9] = 9;
        assert!(decode_header(&bad, 0x2a).is_err());
        let p = Position {
            file_id: 5,
            offset: 1234,
        };
        assert_eq!(decode_mark(&encode_mark(p)).unwrap(), p);
        let mut m = encode_mark(p);
        m[20] ^= 0xff;
        assert!(decode_mark(&m).unwrap_err().contains("checksum"));
        assert!(decode_mark(&m[..10]).is_err());
    }

    #[test]
    fn file_names() {
        assert_eq!(file_name(0x1f), "000000000000001f.txn");
        assert_eq!(parse_file_name("000000000000001f.txn"), Some(0x1f));
        assert_eq!(parse_file_name("lastMark"), None);
        assert_eq!(parse_file_name("1f.txn"), None);
        assert!(
            Position {
                file_id: 2,
                offset: 0
            } > Position {
                file_id: 1,
                offset: 99
            }
        );
    }
}
