//! The `availabilityOfEntriesOfLedger` encoding of GetListOfEntriesOfLedger (spec §2.6).
//!
//! A 64-byte header (int32 version 0, int32 group count, zeros) followed by 24-byte sequence groups
//! (int64 firstSequenceStart, int64 lastSequenceStart, int32 sequenceSize, int32 sequencePeriod),
//! big-endian. BookKeeper's encoder in practice writes one group per run of consecutive entry ids
//! (period 0, first == last start); we write the same, which every decoder accepts.

use bytes::{BufMut, Bytes, BytesMut};
use folio_types::EntryId;

const HEADER_SIZE: usize = 64;
const GROUP_SIZE: usize = 24;
const VERSION: i32 = 0;

/// Encodes entry ids (any order, duplicates allowed).
pub fn encode(entry_ids: &[EntryId]) -> Bytes {
    let mut ids = entry_ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    // Runs of consecutive ids: (start, size).
    let mut runs: Vec<(i64, i64)> = Vec::new();
    for id in ids {
        match runs.last_mut() {
            Some((start, size)) if *start + *size == id && *size < i32::MAX as i64 => *size += 1,
            _ => runs.push((id, 1)),
        }
    }
    let mut out = BytesMut::with_capacity(HEADER_SIZE + runs.len() * GROUP_SIZE);
    out.put_i32(VERSION);
    out.put_i32(runs.len() as i32);
    out.put_bytes(0, HEADER_SIZE - 8);
    for (start, size) in runs {
        out.put_i64(start);
        out.put_i64(start);
        out.put_i32(size as i32);
        out.put_i32(0);
    }
    out.freeze()
}

/// Why an availability encoding could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("availability encoding truncated: {0} bytes")]
    Truncated(usize),
    #[error("availability encoding has unsupported header version {0}")]
    Version(i32),
    #[error("availability encoding has an invalid sequence group at index {0}")]
    BadGroup(usize),
}

/// Decodes to the ascending list of entry ids (for clients and tests). Understands groups with a
/// period, as BookKeeper's decoder does.
pub fn decode(data: &[u8]) -> Result<Vec<EntryId>, DecodeError> {
    if data.len() < HEADER_SIZE {
        return Err(DecodeError::Truncated(data.len()));
    }
    let version = i32::from_be_bytes(data[0..4].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(DecodeError::Version(version));
    }
    let groups = i32::from_be_bytes(data[4..8].try_into().expect("4 bytes"));
    let groups = usize::try_from(groups).map_err(|_| DecodeError::BadGroup(0))?;
    if data.len() < HEADER_SIZE + groups * GROUP_SIZE {
        return Err(DecodeError::Truncated(data.len()));
    }
    let mut ids = Vec::new();
    for g in 0..groups {
        let at = HEADER_SIZE + g * GROUP_SIZE;
        let first = i64::from_be_bytes(data[at..at + 8].try_into().expect("8 bytes"));
        let last = i64::from_be_bytes(data[at + 8..at + 16].try_into().expect("8 bytes"));
        let size = i32::from_be_bytes(data[at + 16..at + 20].try_into().expect("4 bytes"));
        let period = i32::from_be_bytes(data[at + 20..at + 24].try_into().expect("4 bytes"));
        if size <= 0 || last < first || (last != first && period <= 0) {
            return Err(DecodeError::BadGroup(g));
        }
        let mut start = first;
        loop {
            ids.extend(start..start + size as i64);
            if start >= last {
                break;
            }
            start += period as i64;
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_list_is_a_bare_header() {
        let e = encode(&[]);
        assert_eq!(e.len(), 64);
        assert!(e.iter().all(|b| *b == 0));
        assert_eq!(decode(&e).unwrap(), Vec::<i64>::new());
    }

    #[test]
    fn runs_become_groups() {
        let e = encode(&[5, 0, 1, 2, 7, 8, 2]);
        assert_eq!(i32::from_be_bytes(e[4..8].try_into().unwrap()), 3);
        assert_eq!(e.len(), 64 + 3 * 24);
        // First group: entries 0..=2.
        assert_eq!(i64::from_be_bytes(e[64..72].try_into().unwrap()), 0);
        assert_eq!(i64::from_be_bytes(e[72..80].try_into().unwrap()), 0);
        assert_eq!(i32::from_be_bytes(e[80..84].try_into().unwrap()), 3);
        assert_eq!(decode(&e).unwrap(), vec![0, 1, 2, 5, 7, 8]);
    }

    #[test]
    fn decodes_periodic_groups() {
        // One group: sequences of 2 starting at 10, 20, 30.
        let mut d = vec![0u8; 64];
        d[7] = 1;
        d.extend_from_slice(&10i64.to_be_bytes());
        d.extend_from_slice(&30i64.to_be_bytes());
        d.extend_from_slice(&2i32.to_be_bytes());
        d.extend_from_slice(&10i32.to_be_bytes());
        assert_eq!(decode(&d).unwrap(), vec![10, 11, 20, 21, 30, 31]);
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(decode(&[0; 10]), Err(DecodeError::Truncated(10)));
        let mut d = vec![0u8; 64];
        d[3] = 1;
        assert_eq!(decode(&d), Err(DecodeError::Version(1)));
        let mut d = vec![0u8; 64];
        d[7] = 2;
        assert_eq!(decode(&d), Err(DecodeError::Truncated(64)));
    }
}
