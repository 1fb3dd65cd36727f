//! Keys and values of the ledger index tables (see docs/formats/index.md).
//!
//! Keys are big-endian with the sign bit flipped, so that byte order equals numeric
//! order (a ledger's entries are one contiguous, ascending key range). Values are
//! little-endian and start with nothing but fixed fields, except the ledger info, which
//! starts with a version byte because it will grow.

use bytes::Bytes;

use crate::entry_log::Location;

/// Length of an entry key: ledger id + entry id.
pub const ENTRY_KEY_LEN: usize = 16;
/// Length of a location value: log id, offset, payload length.
pub const LOCATION_LEN: usize = 20;
/// Version byte at the start of an encoded [`LedgerInfo`].
pub const LEDGER_INFO_VERSION: u8 = 1;

/// Per-ledger state kept in the index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerInfo {
    pub fenced: bool,
    /// 20 bytes from the client.
    pub master_key: Option<Bytes>,
    /// The opaque LAC body sent by WriteLac.
    pub explicit_lac: Option<Bytes>,
    /// Highest entry id stored, as far as this info knows: on disk a lower bound (see
    /// docs/formats/index.md); `LedgerStore` raises it to the index's last entry.
    pub last_entry_id: Option<i64>,
    pub deleted: bool,
}

fn sortable(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

fn unsortable(b: &[u8]) -> i64 {
    (u64::from_be_bytes(b.try_into().expect("8 bytes")) ^ (1 << 63)) as i64
}

pub fn ledger_key(ledger: i64) -> [u8; 8] {
    sortable(ledger)
}

pub fn decode_ledger_key(k: &[u8]) -> Result<i64, String> {
    if k.len() != 8 {
        return Err(format!("ledger key of {} bytes (expected 8)", k.len()));
    }
    Ok(unsortable(k))
}

pub fn entry_key(ledger: i64, entry: i64) -> [u8; ENTRY_KEY_LEN] {
    let mut k = [0u8; ENTRY_KEY_LEN];
    k[..8].copy_from_slice(&sortable(ledger));
    k[8..].copy_from_slice(&sortable(entry));
    k
}

pub fn decode_entry_key(k: &[u8]) -> Result<(i64, i64), String> {
    if k.len() != ENTRY_KEY_LEN {
        return Err(format!("entry key of {} bytes (expected 16)", k.len()));
    }
    Ok((unsortable(&k[..8]), unsortable(&k[8..])))
}

pub fn encode_location(l: Location) -> [u8; LOCATION_LEN] {
    let mut v = [0u8; LOCATION_LEN];
    v[..8].copy_from_slice(&l.log_id.to_le_bytes());
    v[8..16].copy_from_slice(&l.offset.to_le_bytes());
    v[16..].copy_from_slice(&l.len.to_le_bytes());
    v
}

pub fn decode_location(v: &[u8]) -> Result<Location, String> {
    if v.len() != LOCATION_LEN {
        return Err(format!("location of {} bytes (expected 20)", v.len()));
    }
    Ok(Location {
        log_id: u64::from_le_bytes(v[..8].try_into().expect("8")),
        offset: u64::from_le_bytes(v[8..16].try_into().expect("8")),
        len: u32::from_le_bytes(v[16..].try_into().expect("4")),
    })
}

/// Entries per block of the `entry_blocks` table (format version 2): a ledger's entries
/// `32 b .. 32 b + 31` share block `b`'s key, so a flush of a ledger's run of entries
/// rewrites one B-tree value per 32 entries, not one per entry.
pub const BLOCK_SLOTS: i64 = 32;
/// Length of a block's presence bitmap (u32, little-endian) at the start of its value.
const BLOCK_BITMAP_LEN: usize = 4;

/// The block holding `entry` and its slot in it (negative ids included: floor division).
pub fn block_of(entry: i64) -> (i64, usize) {
    (
        entry.div_euclid(BLOCK_SLOTS),
        entry.rem_euclid(BLOCK_SLOTS) as usize,
    )
}

/// The first entry id of block `block`.
pub fn block_first_entry(block: i64) -> i64 {
    block.saturating_mul(BLOCK_SLOTS)
}

/// A block's key: ledger id and block number, sortable as entry keys are.
pub fn block_key(ledger: i64, block: i64) -> [u8; ENTRY_KEY_LEN] {
    entry_key(ledger, block)
}

pub fn decode_block_key(k: &[u8]) -> Result<(i64, i64), String> {
    decode_entry_key(k).map_err(|e| e.replace("entry key", "block key"))
}

/// The locations of one block's entries: which slots hold one, and where each is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    present: u32,
    locs: [Location; BLOCK_SLOTS as usize],
}

const NO_LOCATION: Location = Location {
    log_id: 0,
    offset: 0,
    len: 0,
};

impl Default for Block {
    fn default() -> Block {
        Block {
            present: 0,
            locs: [NO_LOCATION; BLOCK_SLOTS as usize],
        }
    }
}

impl Block {
    pub fn get(&self, slot: usize) -> Option<Location> {
        (self.present & (1 << slot) != 0).then(|| self.locs[slot])
    }

    /// Sets a slot's location; returns whether the slot was empty.
    pub fn set(&mut self, slot: usize, loc: Location) -> bool {
        let was_empty = self.present & (1 << slot) == 0;
        self.present |= 1 << slot;
        self.locs[slot] = loc;
        was_empty
    }

    /// How many slots hold a location.
    pub fn len(&self) -> u32 {
        self.present.count_ones()
    }

    pub fn is_empty(&self) -> bool {
        self.present == 0
    }

    /// (slot, location) of every slot that holds one, ascending.
    pub fn iter(&self) -> impl Iterator<Item = (usize, Location)> + '_ {
        (0..BLOCK_SLOTS as usize).filter_map(|s| self.get(s).map(|l| (s, l)))
    }

    /// The value: the presence bitmap, then the present slots' locations in slot order.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(BLOCK_BITMAP_LEN + self.len() as usize * LOCATION_LEN);
        v.extend_from_slice(&self.present.to_le_bytes());
        for (_, l) in self.iter() {
            v.extend_from_slice(&encode_location(l));
        }
        v
    }

    pub fn decode(v: &[u8]) -> Result<Block, String> {
        let present = block_bitmap(v)?;
        let mut b = Block {
            present,
            ..Block::default()
        };
        let mut at = BLOCK_BITMAP_LEN;
        for s in 0..BLOCK_SLOTS as usize {
            if present & (1 << s) != 0 {
                b.locs[s] = decode_location(&v[at..at + LOCATION_LEN])?;
                at += LOCATION_LEN;
            }
        }
        Ok(b)
    }

    /// One slot's location straight from an encoded block (a point lookup decodes no
    /// more than it needs).
    pub fn decode_slot(v: &[u8], slot: usize) -> Result<Option<Location>, String> {
        let present = block_bitmap(v)?;
        if present & (1 << slot) == 0 {
            return Ok(None);
        }
        let at =
            BLOCK_BITMAP_LEN + (present & ((1 << slot) - 1)).count_ones() as usize * LOCATION_LEN;
        decode_location(&v[at..at + LOCATION_LEN]).map(Some)
    }

    /// How many locations an encoded block holds.
    pub fn count_encoded(v: &[u8]) -> Result<u32, String> {
        block_bitmap(v).map(u32::count_ones)
    }
}

/// A block value's bitmap, checked against the value's length.
fn block_bitmap(v: &[u8]) -> Result<u32, String> {
    let Some(head) = v.get(..BLOCK_BITMAP_LEN) else {
        return Err(format!("block of {} bytes (no bitmap)", v.len()));
    };
    let present = u32::from_le_bytes(head.try_into().expect("4"));
    let want = BLOCK_BITMAP_LEN + present.count_ones() as usize * LOCATION_LEN;
    if v.len() != want {
        return Err(format!(
            "block of {} bytes for {} locations (expected {want})",
            v.len(),
            present.count_ones()
        ));
    }
    Ok(present)
}

const FENCED: u8 = 1;
const DELETED: u8 = 2;
const HAS_KEY: u8 = 4;
const HAS_LAC: u8 = 8;
const HAS_LAST: u8 = 16;

pub fn encode_ledger_info(i: &LedgerInfo) -> Vec<u8> {
    let mut flags = 0;
    flags |= if i.fenced { FENCED } else { 0 };
    flags |= if i.deleted { DELETED } else { 0 };
    flags |= if i.master_key.is_some() { HAS_KEY } else { 0 };
    flags |= if i.explicit_lac.is_some() { HAS_LAC } else { 0 };
    flags |= if i.last_entry_id.is_some() {
        HAS_LAST
    } else {
        0
    };
    let mut v = vec![LEDGER_INFO_VERSION, flags];
    if let Some(last) = i.last_entry_id {
        v.extend_from_slice(&last.to_le_bytes());
    }
    for b in [&i.master_key, &i.explicit_lac].into_iter().flatten() {
        v.extend_from_slice(&(b.len() as u32).to_le_bytes());
        v.extend_from_slice(b);
    }
    v
}

pub fn decode_ledger_info(v: &[u8]) -> Result<LedgerInfo, String> {
    fn take<'a>(v: &mut &'a [u8], n: usize, what: &str) -> Result<&'a [u8], String> {
        if v.len() < n {
            return Err(format!("ledger info truncated in {what}"));
        }
        let (a, b) = v.split_at(n);
        *v = b;
        Ok(a)
    }
    fn blob(v: &mut &[u8], what: &str) -> Result<Bytes, String> {
        let n = u32::from_le_bytes(take(v, 4, what)?.try_into().expect("4"));
        Ok(Bytes::copy_from_slice(take(v, n as usize, what)?))
    }
    let mut v = v;
    let head = take(&mut v, 2, "header")?;
    if head[0] != LEDGER_INFO_VERSION {
        return Err(format!("ledger info version {} unsupported", head[0]));
    }
    let flags = head[1];
    let last_entry_id = if flags & HAS_LAST != 0 {
        Some(i64::from_le_bytes(
            take(&mut v, 8, "last entry id")?.try_into().expect("8"),
        ))
    } else {
        None
    };
    let master_key = (flags & HAS_KEY != 0)
        .then(|| blob(&mut v, "master key"))
        .transpose()?;
    let explicit_lac = (flags & HAS_LAC != 0)
        .then(|| blob(&mut v, "explicit LAC"))
        .transpose()?;
    if !v.is_empty() {
        return Err(format!("{} trailing bytes after ledger info", v.len()));
    }
    Ok(LedgerInfo {
        fenced: flags & FENCED != 0,
        master_key,
        explicit_lac,
        last_entry_id,
        deleted: flags & DELETED != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_numerically_including_negative_ids() {
        let ids = [i64::MIN, -2, -1, 0, 1, 255, 256, i64::MAX];
        for w in ids.windows(2) {
            assert!(entry_key(w[0], 0) < entry_key(w[1], 0));
            assert!(entry_key(7, w[0]) < entry_key(7, w[1]));
            assert!(ledger_key(w[0]) < ledger_key(w[1]));
        }
        for id in ids {
            assert_eq!(decode_entry_key(&entry_key(id, !id)).unwrap(), (id, !id));
            assert_eq!(decode_ledger_key(&ledger_key(id)).unwrap(), id);
        }
        assert!(decode_entry_key(&[0; 3]).is_err());
    }

    #[test]
    fn blocks_cover_negative_ids_and_round_trip() {
        assert_eq!(block_of(0), (0, 0));
        assert_eq!(block_of(31), (0, 31));
        assert_eq!(block_of(32), (1, 0));
        assert_eq!(block_of(-1), (-1, 31));
        assert_eq!(block_of(-32), (-1, 0));
        assert_eq!(block_first_entry(-1), -32);
        for e in [-33, -1, 0, 5, 63, i64::MAX, i64::MIN] {
            let (b, s) = block_of(e);
            assert_eq!(block_first_entry(b) + s as i64, e);
        }
        let mut b = Block::default();
        assert!(b.is_empty());
        let l = |n: u64| Location {
            log_id: n,
            offset: n * 10,
            len: n as u32,
        };
        assert!(b.set(31, l(31)));
        assert!(b.set(0, l(1)));
        assert!(b.set(7, l(7)));
        assert!(!b.set(7, l(8)), "a slot set again was not empty");
        let v = b.encode();
        assert_eq!(v.len(), 4 + 3 * LOCATION_LEN);
        assert_eq!(Block::decode(&v).unwrap(), b);
        assert_eq!(Block::count_encoded(&v).unwrap(), 3);
        for s in 0..BLOCK_SLOTS as usize {
            assert_eq!(Block::decode_slot(&v, s).unwrap(), b.get(s), "slot {s}");
        }
        assert_eq!(
            b.iter().collect::<Vec<_>>(),
            vec![(0, l(1)), (7, l(8)), (31, l(31))]
        );
        assert!(
            Block::decode(&v[..v.len() - 1])
                .unwrap_err()
                .contains("expected")
        );
        assert!(
            Block::decode_slot(&[1, 0], 0)
                .unwrap_err()
                .contains("no bitmap")
        );
    }

    #[test]
    fn location_round_trip() {
        let l = Location {
            log_id: 3,
            offset: 1 << 40,
            len: 99,
        };
        assert_eq!(decode_location(&encode_location(l)).unwrap(), l);
        assert!(decode_location(&[0; 19]).is_err());
    }

    #[test]
    fn ledger_info_round_trip_and_errors() {
        let full = LedgerInfo {
            fenced: true,
            master_key: Some(Bytes::from_static(&[1; 20])),
            explicit_lac: Some(Bytes::from_static(b"lac")),
            last_entry_id: Some(-1),
            deleted: true,
        };
        for i in [LedgerInfo::default(), full.clone()] {
            assert_eq!(decode_ledger_info(&encode_ledger_info(&i)).unwrap(), i);
        }
        let enc = encode_ledger_info(&full);
        assert!(
            decode_ledger_info(&enc[..enc.len() - 1])
                .unwrap_err()
                .contains("truncated")
        );
        let mut bad = enc.clone();
        bad[0] = 9;
        assert!(decode_ledger_info(&bad).unwrap_err().contains("version 9"));
        let mut long = enc;
        long.push(0);
        assert!(decode_ledger_info(&long).unwrap_err().contains("trailing"));
    }
}
