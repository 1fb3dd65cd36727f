//! The `availabilityOfEntriesOfLedger` bytes of a GetListOfEntriesOfLedger response
//! (BookKeeper's `AvailabilityOfEntriesOfLedger`): which entries of a ledger a bookie holds,
//! condensed into sequence groups.
//!
//! Layout: a 64-byte header (`int32 version = 0`, `int32 number of groups`, 56 zero bytes), then
//! per group 24 bytes: `int64 firstSequenceStart | int64 lastSequenceStart | int32 sequenceSize |
//! int32 sequencePeriod`. A group is runs of `sequenceSize` consecutive entry ids starting at
//! `firstSequenceStart`, then every `sequencePeriod` ids, the last run starting at
//! `lastSequenceStart` (period 0 when there is a single run). Striping makes this compact: with
//! ensemble 3 and write quorum 2 a bookie holds runs of 2 every 3 entries, one group.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::ProtoError;

/// Size of the header.
pub const HEADER_SIZE: usize = 64;
/// Size of one serialized group.
pub const GROUP_SIZE: usize = 24;
/// The only header version BookKeeper defines.
pub const CURRENT_VERSION: i32 = 0;

/// Runs of `size` consecutive entries, one starting every `period` ids from `first_start` up to
/// `last_start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceGroup {
    pub first_start: i64,
    pub last_start: i64,
    pub size: i32,
    /// 0 iff `first_start == last_start`.
    pub period: i32,
}

impl SequenceGroup {
    /// Number of entries in the group.
    pub fn len(&self) -> u64 {
        let runs = if self.period == 0 {
            1
        } else {
            ((self.last_start - self.first_start) / i64::from(self.period)) as u64 + 1
        };
        runs.saturating_mul(self.size as u64)
    }

    /// Never true for a decoded or encoded group (sizes are positive).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `entry_id` is one of the group's entries.
    pub fn contains(&self, entry_id: i64) -> bool {
        // i128: the last run may end at i64::MAX, where `last_start + size` overflows i64.
        let (e, first, last) = (
            entry_id as i128,
            self.first_start as i128,
            self.last_start as i128,
        );
        let size = i128::from(self.size);
        if e < first || e >= last + size {
            return false;
        }
        let offset = e - first;
        if self.period == 0 {
            offset < size
        } else {
            offset % i128::from(self.period) < size
        }
    }

    /// The entries, in order.
    pub fn entries(&self) -> impl Iterator<Item = i64> + '_ {
        let step = if self.period == 0 {
            1
        } else {
            self.period as usize
        };
        (self.first_start..=self.last_start)
            .step_by(step)
            .flat_map(move |start| start..=start.saturating_add(i64::from(self.size) - 1))
    }
}

/// The entries a bookie holds for one ledger.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AvailabilityOfEntries {
    pub groups: Vec<SequenceGroup>,
}

impl AvailabilityOfEntries {
    /// Condenses strictly increasing, non-negative entry ids. Duplicates are ignored; an id
    /// lower than its predecessor is a caller bug and is skipped.
    pub fn from_sorted_entries(entries: impl IntoIterator<Item = i64>) -> AvailabilityOfEntries {
        // First the maximal runs of consecutive ids...
        let mut runs: Vec<(i64, i32)> = Vec::new();
        for e in entries {
            match runs.last_mut() {
                Some((start, size)) if e < start.saturating_add(i64::from(*size)) => {} // duplicate or unsorted
                Some((start, size))
                    if e == start.saturating_add(i64::from(*size)) && *size < i32::MAX =>
                {
                    *size += 1
                }
                _ => runs.push((e, 1)),
            }
        }
        // ...then runs of equal size at a constant period share a group.
        let mut groups: Vec<SequenceGroup> = Vec::new();
        for (start, size) in runs {
            if let Some(g) = groups.last_mut()
                && g.size == size
            {
                let gap = start - g.last_start;
                let fits = i32::try_from(gap).is_ok();
                if fits && (g.period == 0 || gap == i64::from(g.period)) {
                    g.period = gap as i32;
                    g.last_start = start;
                    continue;
                }
            }
            groups.push(SequenceGroup {
                first_start: start,
                last_start: start,
                size,
                period: 0,
            });
        }
        AvailabilityOfEntries { groups }
    }

    /// Total number of entries.
    pub fn len(&self) -> u64 {
        self.groups
            .iter()
            .fold(0u64, |n, g| n.saturating_add(g.len()))
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Whether the bookie holds `entry_id`.
    pub fn contains(&self, entry_id: i64) -> bool {
        self.groups.iter().any(|g| g.contains(entry_id))
    }

    /// All entries, in order.
    pub fn entries(&self) -> impl Iterator<Item = i64> + '_ {
        self.groups.iter().flat_map(SequenceGroup::entries)
    }

    /// Serializes header and groups.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(HEADER_SIZE + GROUP_SIZE * self.groups.len());
        out.put_i32(CURRENT_VERSION);
        out.put_i32(i32::try_from(self.groups.len()).expect("more than 2^31 groups"));
        out.put_bytes(0, HEADER_SIZE - 8);
        for g in &self.groups {
            out.put_i64(g.first_start);
            out.put_i64(g.last_start);
            out.put_i32(g.size);
            out.put_i32(g.period);
        }
        out.freeze()
    }

    /// Parses the bytes of a response, checking every group is well formed.
    pub fn decode(mut buf: &[u8]) -> Result<AvailabilityOfEntries, ProtoError> {
        let bad = |reason: String| ProtoError::BadAvailability(reason);
        if buf.len() < HEADER_SIZE {
            return Err(ProtoError::Truncated {
                what: "availabilityOfEntriesOfLedger header",
                needed: HEADER_SIZE,
                got: buf.len(),
            });
        }
        let version = buf.get_i32();
        if version != CURRENT_VERSION {
            return Err(bad(format!("unsupported header version {version}")));
        }
        let count = buf.get_i32();
        if count < 0 {
            return Err(bad(format!("negative group count {count}")));
        }
        buf.advance(HEADER_SIZE - 8);
        let needed = HEADER_SIZE + GROUP_SIZE * count as usize;
        if buf.len() < GROUP_SIZE * count as usize {
            return Err(ProtoError::Truncated {
                what: "availabilityOfEntriesOfLedger groups",
                needed,
                got: HEADER_SIZE + buf.len(),
            });
        }
        let mut groups = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let g = SequenceGroup {
                first_start: buf.get_i64(),
                last_start: buf.get_i64(),
                size: buf.get_i32(),
                period: buf.get_i32(),
            };
            let well_formed = g.first_start >= 0
                && g.size > 0
                && g.period >= 0
                && g.last_start.checked_add(i64::from(g.size) - 1).is_some()
                && if g.period == 0 {
                    g.last_start == g.first_start
                } else {
                    g.last_start >= g.first_start
                        && (g.last_start - g.first_start) % i64::from(g.period) == 0
                };
            if !well_formed {
                return Err(bad(format!("malformed sequence group {g:?}")));
            }
            groups.push(g);
        }
        Ok(AvailabilityOfEntries { groups })
    }
}
