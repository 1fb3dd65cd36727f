//! The byte layout of an entry log file (see docs/formats/entry-log.md).
//!
//! A file is a 64-byte header, then records, then (once the file is rotated) a ledgers
//! map saying how many bytes each ledger holds in the file. Every integer is
//! little-endian. Offsets are computed from the previous field so that the layout reads
//! top to bottom like the diagram in the format document.

use bytes::{BufMut, Bytes, BytesMut};

/// First 8 bytes of every entry log file.
pub const MAGIC: [u8; 8] = *b"FOLIOELG";
/// The format version this code writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Size of the file header; the first record starts here.
pub const HEADER_LEN: usize = 64;

const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + MAGIC.len();
const HEADER_LEN_OFFSET: usize = VERSION_OFFSET + size_of::<u32>();
const LOG_ID_OFFSET: usize = HEADER_LEN_OFFSET + size_of::<u32>();
/// The "patch" written at rotation: where the ledgers map is and its checksum.
pub const PATCH_OFFSET: usize = LOG_ID_OFFSET + size_of::<u64>();
const MAP_OFFSET_OFFSET: usize = PATCH_OFFSET;
const MAP_LEN_OFFSET: usize = MAP_OFFSET_OFFSET + size_of::<u64>();
const MAP_COUNT_OFFSET: usize = MAP_LEN_OFFSET + size_of::<u32>();
const MAP_CRC_OFFSET: usize = MAP_COUNT_OFFSET + size_of::<u32>();
const PATCH_CRC_OFFSET: usize = MAP_CRC_OFFSET + size_of::<u32>();
/// Length of the patch region (the bytes covered by the patch checksum).
pub const PATCH_LEN: usize = PATCH_CRC_OFFSET - PATCH_OFFSET;
const _: () = assert!(PATCH_CRC_OFFSET + size_of::<u32>() <= HEADER_LEN);

/// Record header: u32 payload length, u32 checksum, i64 ledger id, i64 entry id.
pub const RECORD_HEADER_LEN: usize = 24;
/// One ledgers-map item: i64 ledger id, u64 bytes.
pub const MAP_ITEM_LEN: usize = 16;

/// Where the ledgers map of a rotated file lies, as recorded in the header patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapLocation {
    pub offset: u64,
    pub len: u32,
    pub count: u32,
    pub crc: u32,
}

/// The decoded header of an entry log file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u32,
    pub log_id: u64,
    /// `None` while the file is being written (or if it was never rotated cleanly).
    pub map: Option<MapLocation>,
}

/// Encodes the header of a new file (no ledgers map yet).
pub fn encode_header(log_id: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[MAGIC_OFFSET..VERSION_OFFSET].copy_from_slice(&MAGIC);
    h[VERSION_OFFSET..HEADER_LEN_OFFSET].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[HEADER_LEN_OFFSET..LOG_ID_OFFSET].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    h[LOG_ID_OFFSET..PATCH_OFFSET].copy_from_slice(&log_id.to_le_bytes());
    h
}

/// Encodes the header patch (written at `PATCH_OFFSET`) recording the ledgers map.
pub fn encode_patch(map: MapLocation) -> [u8; PATCH_LEN + 4] {
    let mut p = [0u8; PATCH_LEN + 4];
    let base = PATCH_OFFSET;
    p[MAP_OFFSET_OFFSET - base..MAP_LEN_OFFSET - base].copy_from_slice(&map.offset.to_le_bytes());
    p[MAP_LEN_OFFSET - base..MAP_COUNT_OFFSET - base].copy_from_slice(&map.len.to_le_bytes());
    p[MAP_COUNT_OFFSET - base..MAP_CRC_OFFSET - base].copy_from_slice(&map.count.to_le_bytes());
    p[MAP_CRC_OFFSET - base..PATCH_CRC_OFFSET - base].copy_from_slice(&map.crc.to_le_bytes());
    let crc = crc32c::crc32c(&p[..PATCH_LEN]);
    p[PATCH_LEN..].copy_from_slice(&crc.to_le_bytes());
    p
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Decodes a header; the error says what is wrong with it.
pub fn decode_header(h: &[u8; HEADER_LEN]) -> Result<Header, String> {
    if h[MAGIC_OFFSET..VERSION_OFFSET] != MAGIC {
        return Err(format!(
            "bad magic {:02x?} (expected {:02x?})",
            &h[..8],
            MAGIC
        ));
    }
    let version = u32_at(h, VERSION_OFFSET);
    if version != FORMAT_VERSION {
        return Err(format!(
            "unsupported entry log format version {version} (this build reads {FORMAT_VERSION})"
        ));
    }
    let header_len = u32_at(h, HEADER_LEN_OFFSET);
    if header_len as usize != HEADER_LEN {
        return Err(format!("bad header length {header_len}"));
    }
    let log_id = u64_at(h, LOG_ID_OFFSET);
    let patch = &h[PATCH_OFFSET..PATCH_CRC_OFFSET];
    let patch_crc = u32_at(h, PATCH_CRC_OFFSET);
    // An all-zero patch means "not rotated yet"; a patch whose checksum fails was torn
    // by a crash during rotation and is treated the same way (the records are intact).
    let map = if patch.iter().all(|&b| b == 0) || crc32c::crc32c(patch) != patch_crc {
        None
    } else {
        Some(MapLocation {
            offset: u64_at(h, MAP_OFFSET_OFFSET),
            len: u32_at(h, MAP_LEN_OFFSET),
            count: u32_at(h, MAP_COUNT_OFFSET),
            crc: u32_at(h, MAP_CRC_OFFSET),
        })
    };
    Ok(Header {
        version,
        log_id,
        map,
    })
}

/// The checksum of a record: CRC32C over its length, ledger id, entry id and payload,
/// i.e. every byte of the record except the checksum field itself.
pub fn record_crc(len: u32, ledger: i64, entry: i64, payload: &[u8]) -> u32 {
    // The three fields in one call: each call has a fixed cost, which at 1 KiB is a good
    // part of the payload's.
    let mut fields = [0u8; 20];
    fields[0..4].copy_from_slice(&len.to_le_bytes());
    fields[4..12].copy_from_slice(&ledger.to_le_bytes());
    fields[12..20].copy_from_slice(&entry.to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&fields), payload)
}

/// The checksum of `payload`'s record as (`ledger`, `entry`): [`record_crc`] with the
/// payload's length.
pub fn payload_record_crc(ledger: i64, entry: i64, payload: &[u8]) -> u32 {
    record_crc(payload_len(payload.len()), ledger, entry, payload)
}

fn payload_len(len: usize) -> u32 {
    u32::try_from(len).expect("entry larger than 4 GiB")
}

/// Appends one record to `out`.
pub fn encode_record(out: &mut Vec<u8>, ledger: i64, entry: i64, payload: &[u8]) {
    let crc = payload_record_crc(ledger, entry, payload);
    encode_record_header(out, ledger, entry, payload.len(), crc);
    out.extend_from_slice(payload);
}

/// Appends the header of a record of `len` payload bytes to `out` (the payload is to
/// follow it). `crc` is the record's [`payload_record_crc`], computed by the caller, who
/// may have done so while the payload was still in the CPU's caches (the write cache, as
/// it copies an entry in).
pub fn encode_record_header(out: &mut Vec<u8>, ledger: i64, entry: i64, len: usize, crc: u32) {
    out.extend_from_slice(&payload_len(len).to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&ledger.to_le_bytes());
    out.extend_from_slice(&entry.to_le_bytes());
}

/// Checks a whole record read from disk against what the index expects and returns its
/// payload. The error says which check failed.
pub fn decode_record(record: Bytes, ledger: i64, entry: i64) -> Result<Bytes, String> {
    if record.len() < RECORD_HEADER_LEN {
        return Err(format!(
            "record shorter than its {RECORD_HEADER_LEN}-byte header"
        ));
    }
    let len = u32_at(&record, 0);
    let crc = u32_at(&record, 4);
    let rec_ledger = i64_at(&record, 8);
    let rec_entry = i64_at(&record, 16);
    if len as usize != record.len() - RECORD_HEADER_LEN {
        return Err(format!(
            "record length field {len} does not match the indexed length {}",
            record.len() - RECORD_HEADER_LEN
        ));
    }
    let payload = record.slice(RECORD_HEADER_LEN..);
    let actual = record_crc(len, rec_ledger, rec_entry, &payload);
    if actual != crc {
        return Err(format!(
            "checksum mismatch (stored {crc:#010x}, computed {actual:#010x})"
        ));
    }
    if rec_ledger != ledger || rec_entry != entry {
        return Err(format!(
            "record holds ledger {rec_ledger} entry {rec_entry}, expected ledger {ledger} entry {entry}"
        ));
    }
    Ok(payload)
}

/// The payload length of the record that starts `bytes`, if its header says it is
/// `ledger`'s entry `entry` (the checksum is not verified: [`decode_record`] does that).
pub fn record_len_if(bytes: &[u8], ledger: i64, entry: i64) -> Option<u32> {
    if bytes.len() < RECORD_HEADER_LEN || i64_at(bytes, 8) != ledger || i64_at(bytes, 16) != entry {
        return None;
    }
    Some(u32_at(bytes, 0))
}

/// Encodes the ledgers map: (ledger id, bytes held) per ledger, ascending by ledger.
pub fn encode_ledgers_map(items: &[(i64, u64)]) -> Bytes {
    let mut b = BytesMut::with_capacity(items.len() * MAP_ITEM_LEN);
    for &(ledger, bytes) in items {
        b.put_i64_le(ledger);
        b.put_u64_le(bytes);
    }
    b.freeze()
}

/// Decodes a ledgers map after its checksum was verified.
pub fn decode_ledgers_map(b: &[u8], count: u32) -> Result<Vec<(i64, u64)>, String> {
    if b.len() != count as usize * MAP_ITEM_LEN {
        return Err(format!(
            "ledgers map is {} bytes, expected {count} items of {MAP_ITEM_LEN}",
            b.len()
        ));
    }
    Ok(b.chunks_exact(MAP_ITEM_LEN)
        .map(|c| (i64_at(c, 0), u64_at(c, 8)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record checksum is CRC32C over the bytes docs/formats/entry-log.md names, in
    /// order, whatever the calls that compute it.
    #[test]
    fn record_crc_is_crc32c_of_the_fields_then_the_payload() {
        for (l, e, n) in [
            (0i64, 0i64, 0usize),
            (7, 3, 1),
            (-1, i64::MAX, 1000),
            (1 << 40, 5, 70_000),
        ] {
            let payload: Vec<u8> = (0..n).map(|i| (i * 31 % 251) as u8).collect();
            let mut all = (n as u32).to_le_bytes().to_vec();
            all.extend_from_slice(&l.to_le_bytes());
            all.extend_from_slice(&e.to_le_bytes());
            all.extend_from_slice(&payload);
            assert_eq!(payload_record_crc(l, e, &payload), crc32c::crc32c(&all));
        }
    }

    #[test]
    fn header_round_trip_without_and_with_patch() {
        let mut h = encode_header(0x1234);
        let d = decode_header(&h).unwrap();
        assert_eq!(d.log_id, 0x1234);
        assert_eq!(d.version, FORMAT_VERSION);
        assert_eq!(d.map, None);
        let map = MapLocation {
            offset: 4096,
            len: 32,
            count: 2,
            crc: 7,
        };
        h[PATCH_OFFSET..PATCH_OFFSET + PATCH_LEN + 4].copy_from_slice(&encode_patch(map));
        assert_eq!(decode_header(&h).unwrap().map, Some(map));
        // A torn patch reads as "no map", not as a wrong map.
        h[PATCH_OFFSET] ^= 1;
        assert_eq!(decode_header(&h).unwrap().map, None);
    }

    #[test]
    fn header_errors_name_the_problem() {
        let mut h = encode_header(1);
        h[0] = b'X';
        assert!(decode_header(&h).unwrap_err().contains("magic"));
        let mut h = encode_header(1);
        h[VERSION_OFFSET] = 9;
        assert!(decode_header(&h).unwrap_err().contains("version 9"));
    }

    #[test]
    fn record_round_trip_and_checks() {
        let mut v = Vec::new();
        encode_record(&mut v, 5, 7, b"hello");
        assert_eq!(v.len(), RECORD_HEADER_LEN + 5);
        let rec = Bytes::from(v.clone());
        assert_eq!(decode_record(rec.clone(), 5, 7).unwrap(), &b"hello"[..]);
        let e = decode_record(rec, 5, 8).unwrap_err();
        assert!(e.contains("expected ledger 5 entry 8"), "{e}");
        for i in 0..v.len() {
            let mut bad = v.clone();
            bad[i] ^= 0x40;
            assert!(
                decode_record(Bytes::from(bad), 5, 7).is_err(),
                "flipping byte {i} must be detected"
            );
        }
        assert!(decode_record(Bytes::from(v[..10].to_vec()), 5, 7).is_err());
    }

    #[test]
    fn ledgers_map_round_trip() {
        let items = vec![(-1, 3), (1, 100), (i64::MAX, u64::MAX)];
        let b = encode_ledgers_map(&items);
        assert_eq!(decode_ledgers_map(&b, 3).unwrap(), items);
        assert!(decode_ledgers_map(&b, 2).is_err());
    }
}
