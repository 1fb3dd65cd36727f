//! Replay: reading a journal file's records back at start-up.
//!
//! A crash can cut the last group commit of the *newest* file short: the file then
//! ends in a partial record, or in the zeroes written by preallocation. That torn tail
//! held nothing acknowledged (a group is acknowledged only after its fdatasync) and is
//! dropped. A damaged record *followed by a valid one* is different: acknowledged
//! data may sit behind it, so replay stops with an error naming the file and offset.
//!
//! Every older file is complete: its last group was made durable before a later file
//! was started (by a roll, or by a restart, which first seals a torn newest file, see
//! `seal_file`). Its valid records may be followed by zeroes (preallocation) and
//! nothing else; any other damage there is in acknowledged data and stops replay.

use std::io;
use std::ops::RangeInclusive;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use folio_env::{File, FileSystem, OpenOptions};

use super::format::{self, HEADER_LEN, RECORD_HEADER_LEN, RecordHeader, RecordKind};
use crate::error::StorageError;

/// One record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayRecord {
    pub kind: RecordKind,
    pub ledger: i64,
    pub entry: i64,
    pub payload: Bytes,
}

/// What replaying one file found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileReplay {
    pub records: u64,
    /// Offset after the last valid record.
    pub end: u64,
    /// Where a torn tail (dropped) or, in an older file, the zeroes after its last
    /// record start, if the file has either.
    pub torn_tail: Option<u64>,
    /// The newest file's torn tail (or header) holds bytes other than zeroes: the
    /// file must be cut back to `end` before a later file is started, or the next
    /// start would find that damage in a file that is no longer the newest.
    pub needs_seal: bool,
}

/// How replay treats damage at the end of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// The newest file of its directory: a torn tail is dropped.
    MayBeTorn,
    /// A file that a later file follows: only zeroes may follow its last record.
    Complete,
}

const WINDOW: usize = 1 << 20;

/// Reads a file through a window so records are parsed without a syscall each.
struct Window {
    file: Arc<dyn File>,
    len: u64,
    buf: Vec<u8>,
    start: u64,
}

impl Window {
    fn get(&mut self, off: u64, n: usize) -> io::Result<&[u8]> {
        let end = off + n as u64;
        debug_assert!(end <= self.len);
        let have_end = self.start + self.buf.len() as u64;
        if off < self.start || end > have_end {
            let want = (n.max(WINDOW) as u64).min(self.len - off) as usize;
            self.buf.resize(want, 0);
            self.file.read_exact_at(&mut self.buf, off)?;
            self.start = off;
        }
        let s = (off - self.start) as usize;
        Ok(&self.buf[s..s + n])
    }
}

/// Replays the records of `path` from `start`, calling `apply` for each in order.
pub fn replay_file(
    fs: &dyn FileSystem,
    path: &Path,
    file_id: u64,
    start: u64,
    tail: Tail,
    apply: &mut dyn FnMut(ReplayRecord) -> Result<(), StorageError>,
) -> Result<FileReplay, StorageError> {
    let io_err = |e| StorageError::io("read journal", path, e);
    let file = fs.open(path, OpenOptions::read()).map_err(io_err)?;
    let len = file.len().map_err(io_err)?;
    let mut w = Window {
        file,
        len,
        buf: Vec::new(),
        start: 0,
    };
    let corrupt = |offset: u64, reason: String| StorageError::CorruptJournal {
        file: path.to_path_buf(),
        offset,
        reason,
    };

    // The mark's offset was the end of a durable group: the file cannot be shorter.
    if start > HEADER_LEN && start > len {
        return Err(corrupt(
            start,
            format!("the file is only {len} bytes long but the mark is at offset {start}"),
        ));
    }
    // A header that never became durable (the file was created, then the machine
    // crashed before its first fdatasync) leaves a short or zeroed file: no records.
    // Only the newest file can be caught like that: a later file is created only after
    // this one's header is durable.
    let header_torn = if len < HEADER_LEN {
        Some(format!(
            "the file is only {len} bytes long, shorter than its header"
        ))
    } else if w
        .get(0, HEADER_LEN as usize)
        .map_err(io_err)?
        .iter()
        .all(|&b| b == 0)
    {
        // The header is gone, so is its version: a record of any version counts.
        let any = format::OLDEST_VERSION..=format::FORMAT_VERSION;
        if let Some(q) = find_valid_record(&mut w, file_id, any, HEADER_LEN).map_err(io_err)? {
            return Err(corrupt(
                0,
                format!("zeroed header but a valid record at {q}"),
            ));
        }
        Some("zeroed header".to_string())
    } else {
        None
    };
    if let Some(why) = header_torn {
        if tail == Tail::Complete {
            return Err(corrupt(
                0,
                format!("{why}, in a file that later journal files follow"),
            ));
        }
        return Ok(FileReplay {
            end: 0,
            torn_tail: Some(0),
            // Even an empty file gets its header written: it is not the newest any more
            // once the writer starts the next one.
            needs_seal: true,
            ..Default::default()
        });
    }
    let header = w.get(0, HEADER_LEN as usize).map_err(io_err)?;
    let version = format::decode_header(header, file_id).map_err(|r| corrupt(0, r))?;
    let versions = version..=version;

    let mut out = FileReplay {
        end: start.max(HEADER_LEN),
        ..Default::default()
    };
    let mut pos = out.end;
    while pos < len {
        let room = len - pos;
        let bad = match check_record(&mut w, file_id, versions.clone(), pos).map_err(io_err)? {
            Ok(h) => {
                let body = w
                    .get(pos + RECORD_HEADER_LEN as u64, h.len as usize)
                    .map_err(io_err)?;
                let kind = RecordKind::from_u8(h.kind).expect("checked by plausible");
                apply(ReplayRecord {
                    kind,
                    ledger: h.ledger,
                    entry: h.entry,
                    payload: Bytes::copy_from_slice(body),
                })?;
                out.records += 1;
                pos += RECORD_HEADER_LEN as u64 + u64::from(h.len);
                out.end = pos;
                continue;
            }
            Err(reason) => reason,
        };
        debug_assert!(room > 0);
        let nonzero = first_nonzero(&mut w, pos).map_err(io_err)?;
        if tail == Tail::Complete {
            // Zeroes after the last record are preallocation, not damage.
            if let Some(z) = nonzero {
                return Err(corrupt(
                    pos,
                    format!(
                        "{bad} (a non-zero byte at offset {z}), in a file that later journal \
                         files follow: its records were all acknowledged, so this is damage, \
                         not a torn tail"
                    ),
                ));
            }
            out.torn_tail = Some(pos);
            break;
        }
        if let Some(q) =
            find_valid_record(&mut w, file_id, versions.clone(), pos + 1).map_err(io_err)?
        {
            return Err(corrupt(
                pos,
                format!("{bad}, yet a valid record follows at offset {q}"),
            ));
        }
        if nonzero.is_some() {
            tracing::info!(file = %path.display(), offset = pos, "dropping torn journal tail: {bad}");
        }
        out.torn_tail = Some(pos);
        out.needs_seal = nonzero.is_some();
        break;
    }
    Ok(out)
}

/// Reads every record of the journal file at `path` (named `<id>.txn`, the id seeds
/// its checksums), handing `visit` each record with its offset; for tools such as
/// `folio shell readjournal`. Safe while a bookie appends to the file: it sees the
/// records written so far, the rest reads as a torn tail.
pub fn scan_file(
    fs: &dyn FileSystem,
    path: &Path,
    visit: &mut dyn FnMut(u64, &ReplayRecord),
) -> Result<FileReplay, StorageError> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let Some(file_id) = format::parse_file_name(name) else {
        return Err(StorageError::BadRequest(format!(
            "{} is not a journal file (expected a name of 16 hex digits and .txn)",
            path.display()
        )));
    };
    let mut offset = HEADER_LEN;
    // A tool may read any file, also one a bookie is appending to: tolerate a torn tail.
    replay_file(fs, path, file_id, 0, Tail::MayBeTorn, &mut |r| {
        visit(offset, &r);
        offset += RECORD_HEADER_LEN as u64 + r.payload.len() as u64;
        Ok(())
    })
}

/// Cuts the newest journal file back to `end`, the end of its last valid record (or, if
/// its header never became durable, rewrites it as a header alone), and makes that
/// durable. Called at start-up before a later file is started: the torn bytes held
/// nothing acknowledged, and once a later file exists this one must be complete.
pub(crate) fn seal_file(
    fs: &dyn FileSystem,
    path: &Path,
    file_id: u64,
    end: u64,
) -> Result<(), StorageError> {
    let io_err = |e| StorageError::io("seal torn journal file", path, e);
    let opts = OpenOptions {
        write: true,
        ..OpenOptions::default()
    };
    let file = fs.open(path, opts).map_err(io_err)?;
    if end < HEADER_LEN {
        file.set_len(0).map_err(io_err)?;
        file.write_all_at(&format::encode_header(file_id), 0)
            .map_err(io_err)?;
    } else {
        file.set_len(end).map_err(io_err)?;
    }
    file.sync_data().map_err(io_err)?;
    tracing::info!(file = %path.display(), end = end.max(HEADER_LEN), "cut the torn tail off the newest journal file");
    Ok(())
}

/// The offset of the first byte at or after `from` that is not zero.
fn first_nonzero(w: &mut Window, from: u64) -> io::Result<Option<u64>> {
    let mut at = from;
    while at < w.len {
        let n = (w.len - at).min(WINDOW as u64) as usize;
        if let Some(i) = w.get(at, n)?.iter().position(|&b| b != 0) {
            return Ok(Some(at + i as u64));
        }
        at += n as u64;
    }
    Ok(None)
}

/// Ok(Ok(header)) when a whole, valid record starts at `pos`; Ok(Err(why)) if not.
/// `versions`: the format versions the record may be of (the file's; any, when its
/// header is gone).
fn check_record(
    w: &mut Window,
    file_id: u64,
    versions: RangeInclusive<u32>,
    pos: u64,
) -> io::Result<Result<RecordHeader, String>> {
    let room = w.len - pos;
    if room < RECORD_HEADER_LEN as u64 {
        return Ok(Err(format!("record header cut off ({room} bytes left)")));
    }
    let hb = w.get(pos, RECORD_HEADER_LEN)?;
    if hb.iter().all(|&b| b == 0) {
        return Ok(Err("zeroes where a record should start".into()));
    }
    let h = RecordHeader::parse(hb);
    if !h.plausible(room - RECORD_HEADER_LEN as u64) {
        return Ok(Err(format!(
            "invalid record header (kind {}, length {}, {} bytes left)",
            h.kind, h.len, room
        )));
    }
    let rec = w.get(pos, RECORD_HEADER_LEN + h.len as usize)?;
    if !versions.into_iter().any(|v| h.checksum_ok(v, file_id, rec)) {
        return Ok(Err("record checksum mismatch".into()));
    }
    Ok(Ok(h))
}

/// The offset of the first valid record at or after `from`. Only offsets whose kind
/// byte is a known kind are checked, found a window at a time, so runs of
/// preallocated zeroes are skipped at memory speed.
fn find_valid_record(
    w: &mut Window,
    file_id: u64,
    versions: RangeInclusive<u32>,
    from: u64,
) -> io::Result<Option<u64>> {
    let hdr = RECORD_HEADER_LEN as u64;
    let mut r = from;
    while r + hdr <= w.len {
        // Candidate starts r .. r + n; their kind bytes sit at r + 8 .. r + 8 + n.
        let n = (w.len - hdr - r + 1).min(WINDOW as u64 / 2) as usize;
        let hit = w
            .get(r + 8, n)?
            .iter()
            .position(|&b| RecordKind::from_u8(b).is_some());
        match hit {
            None => r += n as u64,
            Some(i) => {
                let candidate = r + i as u64;
                if check_record(w, file_id, versions.clone(), candidate)?.is_ok() {
                    return Ok(Some(candidate));
                }
                r = candidate + 1;
            }
        }
    }
    Ok(None)
}
