//! One entry log file: the writer that appends records to it, and the reads of a record
//! or of the ledgers map from it.
//!
//! The writer buffers records in memory and hands them to the file with positional
//! writes (`write_all_at`) once the buffer is large or a sync is asked for. Nothing is
//! durable until `sync`; the index must only ever point at synced records.
//!
//! With direct I/O (`dbStorage_directIOEntryLogger`) the records go to the device
//! without the page cache: the kernel's copy of every byte into fresh page-cache pages,
//! and their write-back, were the largest cost of a checkpoint (30% of both CPUs while
//! autorecovery restored a bookie). Direct writes must be whole aligned blocks, so the
//! writer keeps the last, partial block it wrote and writes it again, identical, in front
//! of the next records: a torn rewrite leaves each sector old or new, and the old bytes
//! are the same in both. Readers and the ledgers map keep a buffered handle.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use folio_env::{AlignedBuf, DIRECT_IO_ALIGN, File, FileSystem, OpenOptions};

use super::format::{self, HEADER_LEN, MapLocation, PATCH_OFFSET, RECORD_HEADER_LEN};
use crate::ledger_store::{LedgerStoreError, io_error};

/// Where a record is: which log file and the offset of the record's first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Location {
    pub log_id: u64,
    pub offset: u64,
    /// Payload length (the record is `RECORD_HEADER_LEN + len` bytes).
    pub len: u32,
}

/// Bytes of records per ledger in one log, for its ledgers map. A flush appends ledger
/// by ledger, so the bytes of a run of one ledger's records are summed apart and added
/// to the map once per run: with 10,000 ledgers in a log, a lookup of the map per record
/// was a walk of a tree too large for the CPU's caches, part of why an append cost 0.8 µs
/// against 0.5 at 100 ledgers (the gain measured is within the noise of single runs;
/// docs/performance.md, 2026-12-06 (22:30)).
#[derive(Debug, Default)]
struct LedgerBytes {
    map: BTreeMap<i64, u64>,
    /// The ledger of the last records and their bytes, not yet in `map`.
    run: Option<(i64, u64)>,
}

impl LedgerBytes {
    fn add(&mut self, ledger: i64, bytes: u64) {
        match &mut self.run {
            Some((l, n)) if *l == ledger => *n += bytes,
            run => {
                if let Some((l, n)) = run.replace((ledger, bytes)) {
                    *self.map.entry(l).or_insert(0) += n;
                }
            }
        }
    }

    /// Every ledger with its bytes, ascending by ledger.
    fn into_items(mut self) -> Vec<(i64, u64)> {
        if let Some((l, n)) = self.run.take() {
            *self.map.entry(l).or_insert(0) += n;
        }
        self.map.into_iter().collect()
    }
}

/// The name of log `log_id`'s file: 16 hex digits, so names sort by id.
pub fn file_name(log_id: u64) -> String {
    format!("{log_id:016x}.log")
}

/// The log id of a file name made by [`file_name`], or `None` for any other name.
pub fn parse_file_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".log")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// Pending bytes are handed to the file once they reach this size.
const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// With direct I/O, the size of the pieces a flush writes when the write cache has room
/// ([`LogWriter::set_direct_piece`]): each direct write is synchronous and the journal's
/// writes and fdatasyncs on the same disk wait behind the one in flight, so smaller pieces
/// cut the add's tail while a checkpoint runs (p99 at 1 KiB and 128 in flight 0.72x with
/// 256 KiB pieces against 1 MiB, docs/performance.md); [`WRITE_BUFFER_BYTES`] pieces write
/// faster, for when the flush must catch up (at 64 KiB, 256 KiB pieces alone filled the write
/// cache and doubled the p99).
pub const DIRECT_PIECE_WITH_ROOM: usize = 256 << 10;
/// The pieces a flush writes when it must catch up (the default).
pub const DIRECT_PIECE_CATCHING_UP: usize = WRITE_BUFFER_BYTES;

/// Bytes handed to the file between two write-backs (`File::write_back`). A flush
/// writes tens of MiB; left to the final fdatasync they reach the device as one burst
/// that the journal's next small fdatasync waits behind (measured: 30-50 ms journal
/// stalls during each 32 MiB flush). Written back in pieces of this size, the journal
/// waits for one piece at most.
const WRITE_BACK_BYTES: u64 = 1 << 20;

/// Payloads at least this long are written from the caller's buffer (`append_shared`)
/// instead of being copied into the write buffer first.
const UNCOPIED_PAYLOAD_BYTES: usize = 4096;

/// A run of bytes waiting to be written: a range of the write buffer, or a payload
/// shared with the write cache.
enum Piece {
    Buf(usize, usize),
    Shared(Bytes),
}

/// The direct-I/O handle a log's records are written through, and the bytes of the
/// last partial block written (from the block boundary before the file's end), which
/// the next write puts in front of its records.
struct DirectStream {
    file: Arc<dyn File>,
    tail: Vec<u8>,
}

thread_local! {
    /// The aligned buffer a direct write is assembled in: one per thread that flushes
    /// (the checkpoint and compaction threads), not one per log, since a log per ledger
    /// keeps hundreds open.
    static DIRECT_STAGE: std::cell::RefCell<AlignedBuf> = std::cell::RefCell::new(AlignedBuf::default());
}

/// Appends records to one entry log file.
pub struct LogWriter {
    log_id: u64,
    dir: PathBuf,
    path: PathBuf,
    file: Arc<dyn File>,
    /// Bytes already handed to the file (the buffer starts here).
    written: u64,
    /// Bytes already written back to the device (`File::write_back`).
    written_back: u64,
    /// Record headers and small records, in `pieces` order.
    buf: Vec<u8>,
    /// What the next write hands to the file, in order (one vectored write).
    pieces: Vec<Piece>,
    /// Bytes in `pieces`.
    pending: usize,
    /// Bytes of records per ledger, for the ledgers map written at rotation.
    ledger_bytes: LedgerBytes,
    records: u64,
    /// The file's end at the last successful `sync` (0 before the first, so that the
    /// header is synced too): a log with nothing new is not fdatasync'd again, which
    /// matters with a log per ledger, where most open logs get nothing in a flush.
    synced_to: u64,
    /// Set when the records go through direct I/O.
    direct: Option<DirectStream>,
    /// With direct I/O, pending bytes are written once they reach this size.
    direct_piece: usize,
}

impl LogWriter {
    /// Creates log file `log_id` in `dir` (an entry log directory, `<ledgerDir>/current`)
    /// and makes its directory entry durable. With `direct`, the records are written
    /// through a second, direct-I/O handle if the file system has direct I/O (see
    /// [`LogWriter::is_direct`]).
    pub fn create(
        fs: &dyn FileSystem,
        dir: &Path,
        log_id: u64,
        direct: bool,
    ) -> Result<LogWriter, LedgerStoreError> {
        let path = dir.join(file_name(log_id));
        let file = fs
            .open(&path, OpenOptions::create_new())
            .map_err(|e| io_error("create entry log", dir, &path, None, e))?;
        let header = format::encode_header(log_id);
        file.write_all_at(&header, 0)
            .map_err(|e| io_error("write entry log header", dir, &path, Some(0), e))?;
        fs.sync_dir(dir)
            .map_err(|e| io_error("sync directory", dir, dir, None, e))?;
        let direct = direct
            .then(|| {
                let opts = OpenOptions {
                    write: true,
                    ..OpenOptions::default()
                };
                fs.open(&path, opts.direct(true)).ok()
            })
            .flatten()
            .map(|file| DirectStream {
                file,
                tail: header.to_vec(),
            });
        Ok(LogWriter {
            log_id,
            dir: dir.to_path_buf(),
            path,
            file,
            written: HEADER_LEN as u64,
            written_back: 0,
            buf: Vec::with_capacity(WRITE_BUFFER_BYTES),
            pieces: Vec::new(),
            pending: 0,
            ledger_bytes: LedgerBytes::default(),
            records: 0,
            synced_to: 0,
            direct,
            direct_piece: DIRECT_PIECE_CATCHING_UP,
        })
    }

    /// With direct I/O, the size at which pending records are written (at most
    /// [`WRITE_BUFFER_BYTES`]); buffered writes always go in [`WRITE_BUFFER_BYTES`].
    pub fn set_direct_piece(&mut self, bytes: usize) {
        self.direct_piece = bytes.clamp(DIRECT_IO_ALIGN, WRITE_BUFFER_BYTES);
    }

    /// Whether the records go through direct I/O (asked for, and the file system has it).
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    pub fn log_id(&self) -> u64 {
        self.log_id
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The entry log directory (`<ledgerDir>/current`) the file is in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file handle, shared with readers.
    pub fn file(&self) -> Arc<dyn File> {
        self.file.clone()
    }

    /// The file's length once everything buffered is written.
    pub fn end(&self) -> u64 {
        self.written + self.pending as u64
    }

    /// How many records were appended.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Buffers one record (copying the payload); returns where it will be.
    pub fn append(
        &mut self,
        ledger: i64,
        entry: i64,
        payload: &[u8],
    ) -> Result<Location, LedgerStoreError> {
        let crc = format::payload_record_crc(ledger, entry, payload);
        self.append_record(ledger, entry, payload, None, crc)
    }

    /// Buffers one record whose payload, if large, is written from `payload` itself
    /// (kept until the next write) rather than copied: a 64 KiB entry was otherwise
    /// copied once here and once more by the kernel. `crc` is the record's checksum,
    /// [`format::payload_record_crc`] of these three.
    pub fn append_shared(
        &mut self,
        ledger: i64,
        entry: i64,
        payload: &Bytes,
        crc: u32,
    ) -> Result<Location, LedgerStoreError> {
        debug_assert_eq!(crc, format::payload_record_crc(ledger, entry, payload));
        self.append_record(ledger, entry, payload, Some(payload), crc)
    }

    fn append_record(
        &mut self,
        ledger: i64,
        entry: i64,
        payload: &[u8],
        shared: Option<&Bytes>,
        crc: u32,
    ) -> Result<Location, LedgerStoreError> {
        let offset = self.end();
        let start = self.buf.len();
        format::encode_record_header(&mut self.buf, ledger, entry, payload.len(), crc);
        match shared.filter(|p| p.len() >= UNCOPIED_PAYLOAD_BYTES) {
            Some(p) => {
                self.extend_buf_piece(start);
                self.pieces.push(Piece::Shared(p.clone()));
            }
            None => {
                self.buf.extend_from_slice(payload);
                self.extend_buf_piece(start);
            }
        }
        let record_len = RECORD_HEADER_LEN + payload.len();
        self.pending += record_len;
        self.ledger_bytes.add(ledger, record_len as u64);
        self.records += 1;
        let piece = match self.direct {
            Some(_) => self.direct_piece,
            None => WRITE_BUFFER_BYTES,
        };
        if self.pending >= piece {
            self.write_buffer()?;
        }
        Ok(Location {
            log_id: self.log_id,
            offset,
            len: payload.len() as u32,
        })
    }

    /// Adds `buf[start..]` to the pieces (to the last one if it is the buffer run just
    /// before).
    fn extend_buf_piece(&mut self, start: usize) {
        let end = self.buf.len();
        if let Some(Piece::Buf(_, e)) = self.pieces.last_mut()
            && *e == start
        {
            *e = end;
        } else {
            self.pieces.push(Piece::Buf(start, end));
        }
    }

    /// Hands the buffered bytes to the file (not yet durable).
    pub fn write_buffer(&mut self) -> Result<(), LedgerStoreError> {
        if self.pending == 0 {
            return Ok(());
        }
        let slices: Vec<&[u8]> = self
            .pieces
            .iter()
            .map(|p| match p {
                Piece::Buf(a, b) => &self.buf[*a..*b],
                Piece::Shared(b) => &b[..],
            })
            .collect();
        let written = match &mut self.direct {
            Some(d) => write_direct(d, &slices, self.written),
            None => self.file.write_all_vectored_at(&slices, self.written),
        };
        written.map_err(|e| {
            io_error(
                "write entry log",
                &self.dir,
                &self.path,
                Some(self.written),
                e,
            )
        })?;
        self.written += self.pending as u64;
        self.pending = 0;
        self.pieces.clear();
        self.buf.clear();
        // Direct writes leave no dirty pages to write back.
        if self.direct.is_none() && self.written - self.written_back >= WRITE_BACK_BYTES {
            self.file
                .write_back(self.written_back, self.written - self.written_back)
                .map_err(|e| {
                    // Treated as a failed fdatasync, whatever the error (ENOSPC
                    // included): the kernel may have dropped pages it could not write,
                    // and a later fdatasync would not report it again.
                    LedgerStoreError::SyncFailed {
                        path: self.path.clone(),
                        source: std::io::Error::new(
                            e.kind(),
                            format!("write-back before fdatasync: {e}"),
                        ),
                    }
                })?;
            self.written_back = self.written;
        }
        Ok(())
    }

    /// Writes the buffer and makes the file's data durable (fdatasync); nothing to do
    /// if nothing was appended since the last sync.
    pub fn sync(&mut self) -> Result<(), LedgerStoreError> {
        if self.end() == self.synced_to {
            return Ok(());
        }
        self.write_buffer()?;
        self.file
            .sync_data()
            .map_err(|e| io_error("sync entry log", &self.dir, &self.path, None, e))?;
        self.synced_to = self.written;
        Ok(())
    }

    /// Ends the file at rotation: writes the ledgers map after the last record, patches
    /// the header to point at it, and syncs. A crash in between leaves a header whose
    /// patch checksum fails (read as "no map"); the records stay readable.
    pub fn close(self) -> Result<(), LedgerStoreError> {
        self.close_with(true)
    }

    /// [`LogWriter::close`]; `sync` false is the negative control
    /// `skip_rotated_entry_log_sync` (the map is written, the fdatasync skipped).
    pub(crate) fn close_with(mut self, sync: bool) -> Result<(), LedgerStoreError> {
        self.write_buffer()?;
        let items = std::mem::take(&mut self.ledger_bytes).into_items();
        let map = format::encode_ledgers_map(&items);
        let loc = MapLocation {
            offset: self.written,
            len: map.len() as u32,
            count: items.len() as u32,
            crc: crc32c::crc32c(&map),
        };
        self.file.write_all_at(&map, loc.offset).map_err(|e| {
            io_error(
                "write ledgers map",
                &self.dir,
                &self.path,
                Some(loc.offset),
                e,
            )
        })?;
        self.file
            .write_all_at(&format::encode_patch(loc), PATCH_OFFSET as u64)
            .map_err(|e| {
                io_error(
                    "patch entry log header",
                    &self.dir,
                    &self.path,
                    Some(PATCH_OFFSET as u64),
                    e,
                )
            })?;
        if !sync {
            return Ok(());
        }
        self.file
            .sync_data()
            .map_err(|e| io_error("sync entry log", &self.dir, &self.path, None, e))
    }
}

/// Writes `slices`, which belong at `offset`, through `d`: the kept partial block and
/// the slices copied into one aligned buffer, padded with zeros to a whole block and
/// written at the block boundary; then the new partial block is kept. The zeros past the
/// end are overwritten by the next write (or the ledgers map); until then the file is
/// longer than its records, which readers tell by the records' lengths and CRCs.
fn write_direct(d: &mut DirectStream, slices: &[&[u8]], offset: u64) -> std::io::Result<()> {
    let align = DIRECT_IO_ALIGN as u64;
    let start = offset - d.tail.len() as u64;
    debug_assert!(
        start.is_multiple_of(align),
        "the kept tail starts at a block"
    );
    DIRECT_STAGE.with(|stage| {
        let mut stage = stage.borrow_mut();
        let len = d.tail.len() + slices.iter().map(|s| s.len()).sum::<usize>();
        stage.clear();
        stage.reserve(len.next_multiple_of(DIRECT_IO_ALIGN));
        stage.vec().extend_from_slice(&d.tail);
        for s in slices {
            stage.vec().extend_from_slice(s);
        }
        stage.pad_to(DIRECT_IO_ALIGN);
        debug_assert!(stage.is_aligned());
        d.file.write_all_at(stage.as_slice(), start)?;
        let end = start + len as u64;
        let keep_from = (end - end % align - start) as usize;
        d.tail.clear();
        d.tail.extend_from_slice(&stage.as_slice()[keep_from..len]);
        // A large buffer is not kept for the thread's lifetime after one big flush.
        if stage.len() > 8 * WRITE_BUFFER_BYTES {
            *stage = AlignedBuf::default();
        }
        Ok(())
    })
}

fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> LedgerStoreError {
    LedgerStoreError::Corrupt {
        path: path.to_path_buf(),
        offset,
        reason: reason.into(),
    }
}

/// Reads the record at `loc` and checks that it is entry `entry` of ledger `ledger` with
/// a good checksum. A short file or a mismatch is an error naming the file and offset.
pub fn read_record(
    file: &dyn File,
    path: &Path,
    loc: Location,
    ledger: i64,
    entry: i64,
) -> Result<Bytes, LedgerStoreError> {
    let record_len = RECORD_HEADER_LEN as u64 + u64::from(loc.len);
    if loc.len > 1 << 20 {
        // Check before allocating, so that a damaged location cannot ask for 4 GiB.
        let file_len = file.len().map_err(|e| {
            io_error(
                "stat entry log",
                path.parent().unwrap_or(path),
                path,
                None,
                e,
            )
        })?;
        if loc.offset.saturating_add(record_len) > file_len {
            return Err(corrupt(
                path,
                loc.offset,
                format!("file ends inside the record ({record_len} bytes expected)"),
            ));
        }
    }
    let mut buf = BytesMut::zeroed(record_len as usize);
    file.read_exact_at(&mut buf, loc.offset).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            corrupt(
                path,
                loc.offset,
                format!("file ends inside the record ({} bytes expected)", buf.len()),
            )
        } else {
            io_error(
                "read entry log",
                path.parent().unwrap_or(path),
                path,
                Some(loc.offset),
                e,
            )
        }
    })?;
    format::decode_record(buf.freeze(), ledger, entry).map_err(|r| corrupt(path, loc.offset, r))
}

/// [`read_record`] only if the bytes are in the page cache ([`File::read_at_nowait`]):
/// `None` when any part of the read would wait for the disk, and also on anything
/// [`read_record`] would report as an error (a short file, a damaged record, an I/O error),
/// so that the blocking path reads again and names the cause. `Some` holds a checked
/// payload.
pub fn read_record_nowait(
    file: &dyn File,
    loc: Location,
    ledger: i64,
    entry: i64,
) -> Option<Bytes> {
    // A damaged location could ask for 4 GiB; the blocking path checks it against the file.
    if loc.len > 1 << 20 {
        return None;
    }
    let mut buf = BytesMut::zeroed(RECORD_HEADER_LEN + loc.len as usize);
    let mut got = 0;
    while got < buf.len() {
        match file.read_at_nowait(&mut buf[got..], loc.offset + got as u64) {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    format::decode_record(buf.freeze(), ledger, entry).ok()
}

/// One entry of a run read ahead: its id, where it is, and its whole record, whose
/// checksum is not yet verified (see [`read_run`]).
pub type RunEntry = (i64, Location, Bytes);

/// Reads the record at `loc` (checked as [`read_record`] does) and, in the same read of
/// up to `max_bytes`, the records that follow it while they are `ledger`'s next entries
/// (`entry + 1`, `entry + 2`, ...), at most `max_entries` of them; the first record that
/// is another ledger's, another entry's, or cut off by the end of the read ends the run
/// quietly (it is not what was asked for). The run's records are checked for their
/// ledger, entry and length only: their checksums are verified when one is served
/// ([`format::decode_record`]), as most of a run may never be (a bookie of a striped
/// ensemble is asked for a third of a ledger's entries). Each entry of the run comes
/// with its location: a log can hold an older copy of an entry (a flush that failed, a
/// compaction cut short), so only the index says which is live.
pub fn read_run(
    file: &dyn File,
    path: &Path,
    loc: Location,
    ledger: i64,
    entry: i64,
    max_bytes: usize,
    max_entries: usize,
) -> Result<(Bytes, Vec<RunEntry>), LedgerStoreError> {
    let record_len = RECORD_HEADER_LEN + loc.len as usize;
    // Room for no second record: the record alone, not a larger read.
    if 2 * record_len > max_bytes || max_entries == 0 {
        return read_record(file, path, loc, ledger, entry).map(|p| (p, Vec::new()));
    }
    let buf = read_up_to(file, loc.offset, max_bytes, false).map_err(|(at, e)| {
        io_error(
            "read entry log",
            path.parent().unwrap_or(path),
            path,
            Some(at),
            e,
        )
    })?;
    if buf.len() < record_len {
        return Err(corrupt(
            path,
            loc.offset,
            format!("file ends inside the record ({record_len} bytes expected)"),
        ));
    }
    split_run(Bytes::from(buf), loc, ledger, entry, max_entries)
        .map_err(|r| corrupt(path, loc.offset, r))
}

/// [`read_run`] only if the bytes are in the page cache ([`File::read_at_nowait`]): the run
/// ends where the cached bytes do. `None` when the record asked for is not all cached, and
/// on anything [`read_run`] would report as an error (the blocking path then reads again
/// and names the cause).
pub fn read_run_nowait(
    file: &dyn File,
    loc: Location,
    ledger: i64,
    entry: i64,
    max_bytes: usize,
    max_entries: usize,
) -> Option<(Bytes, Vec<RunEntry>)> {
    let record_len = RECORD_HEADER_LEN + loc.len as usize;
    // Room for no second record: the record alone, not a larger read.
    if 2 * record_len > max_bytes || max_entries == 0 {
        return read_record_nowait(file, loc, ledger, entry).map(|p| (p, Vec::new()));
    }
    let buf = read_up_to(file, loc.offset, max_bytes, true).ok()?;
    if buf.len() < record_len {
        return None;
    }
    split_run(Bytes::from(buf), loc, ledger, entry, max_entries).ok()
}

/// Up to `max` bytes of `file` from `offset`, fewer where the file ends, into a buffer
/// nothing zeroes first (see `File::read_at_append`). With `nowait` only from the page
/// cache: the bytes end where the cached ones do, and it fails if not even the first is.
/// A failure comes with the offset it happened at.
fn read_up_to(
    file: &dyn File,
    offset: u64,
    max: usize,
    nowait: bool,
) -> Result<Vec<u8>, (u64, std::io::Error)> {
    let mut buf = Vec::with_capacity(max);
    while buf.len() < max {
        let (at, want) = (offset + buf.len() as u64, max - buf.len());
        let read = if nowait {
            file.read_at_nowait_append(&mut buf, want, at)
        } else {
            file.read_at_append(&mut buf, want, at)
        };
        match read {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // The rest would wait for the disk: the run is what is cached.
            Err(e) if nowait && e.kind() == std::io::ErrorKind::WouldBlock && !buf.is_empty() => {
                break;
            }
            Err(e) => return Err((at, e)),
        }
    }
    Ok(buf)
}

/// The record at the start of `chunk` (read from `loc`), checked, and the records after
/// it that are `ledger`'s next entries, at most `max_entries`: the run ends quietly at
/// the first that is not (see [`read_run`]). Records are slices of `chunk`, not copies.
fn split_run(
    chunk: Bytes,
    loc: Location,
    ledger: i64,
    entry: i64,
    max_entries: usize,
) -> Result<(Bytes, Vec<RunEntry>), String> {
    let record_len = RECORD_HEADER_LEN + loc.len as usize;
    let first = format::decode_record(chunk.slice(..record_len), ledger, entry)?;
    let mut run = Vec::new();
    let mut at = record_len;
    while run.len() < max_entries && at + RECORD_HEADER_LEN <= chunk.len() {
        let next = entry + 1 + run.len() as i64;
        let Some(len) = format::record_len_if(&chunk[at..], ledger, next) else {
            break;
        };
        let end = at + RECORD_HEADER_LEN + len as usize;
        if end > chunk.len() {
            break;
        }
        run.push((
            next,
            Location {
                log_id: loc.log_id,
                offset: loc.offset + at as u64,
                len,
            },
            chunk.slice(at..end),
        ));
        at = end;
    }
    Ok((first, run))
}

/// Reads a file's header.
pub fn read_header(file: &dyn File, path: &Path) -> Result<format::Header, LedgerStoreError> {
    let mut h = [0u8; HEADER_LEN];
    file.read_exact_at(&mut h, 0)
        .map_err(|e| corrupt(path, 0, format!("cannot read header: {e}")))?;
    format::decode_header(&h).map_err(|r| corrupt(path, 0, r))
}

/// Reads the ledgers map of a rotated file: `Ok(None)` if the file was never closed
/// (still being written, or the process stopped before rotation).
pub fn read_ledgers_map(
    file: &dyn File,
    path: &Path,
) -> Result<Option<Vec<(i64, u64)>>, LedgerStoreError> {
    let Some(map) = read_header(file, path)?.map else {
        return Ok(None);
    };
    let mut buf = vec![0u8; map.len as usize];
    file.read_exact_at(&mut buf, map.offset)
        .map_err(|e| corrupt(path, map.offset, format!("cannot read ledgers map: {e}")))?;
    if crc32c::crc32c(&buf) != map.crc {
        return Err(corrupt(path, map.offset, "ledgers map checksum mismatch"));
    }
    format::decode_ledgers_map(&buf, map.count)
        .map(Some)
        .map_err(|r| corrupt(path, map.offset, r))
}

/// What a scan of a log's records found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogScan {
    /// Bytes of records per ledger, ascending by ledger (as in a ledgers map).
    pub ledgers: Vec<(i64, u64)>,
    /// Number of valid records.
    pub records: u64,
    /// Offset just after the last valid record.
    pub end: u64,
    /// Whether what follows `end` up to the file's end is only a direct-I/O write's
    /// zero padding (less than a block of zeros, ending at a block boundary): the log
    /// ends cleanly there, rather than in a torn or corrupt record.
    pub padded: bool,
}

/// One valid record of an entry log, as a tool sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Offset of the record's first byte in the file.
    pub offset: u64,
    pub ledger: i64,
    pub entry: i64,
    /// The stored entry (what the client sent, digest included).
    pub payload: Bytes,
}

/// Rebuilds a log's per-ledger byte counts by reading its records in order, for logs
/// without a ledgers map (the process stopped before rotating them). Stops at the
/// ledgers map, at the end of the file, or at the first record that is incomplete or
/// fails its checksum: the torn tail of a crash, which the index never points into.
pub fn scan_records(file: &dyn File, path: &Path) -> Result<LogScan, LedgerStoreError> {
    scan_entries(file, path, &mut |_| {})
}

/// Reads a log's valid records in order, handing each to `visit` (for `scan_records`
/// and for tools that print a log). Stops where `scan_records` does.
pub fn scan_entries(
    file: &dyn File,
    path: &Path,
    visit: &mut dyn FnMut(LogRecord),
) -> Result<LogScan, LedgerStoreError> {
    let header = read_header(file, path)?;
    let dir = path.parent().unwrap_or(path);
    let file_len = file
        .len()
        .map_err(|e| io_error("stat entry log", dir, path, None, e))?;
    let limit = header.map.map_or(file_len, |m| m.offset.min(file_len));
    let mut ledgers = BTreeMap::new();
    let mut records = 0;
    let mut offset = HEADER_LEN as u64;
    while offset + RECORD_HEADER_LEN as u64 <= limit {
        let mut head = [0u8; RECORD_HEADER_LEN];
        file.read_exact_at(&mut head, offset)
            .map_err(|e| io_error("read entry log", dir, path, Some(offset), e))?;
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
        let end = offset + (RECORD_HEADER_LEN as u64) + u64::from(len);
        if end > limit {
            break;
        }
        let ledger = i64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
        let entry = i64::from_le_bytes(head[16..24].try_into().expect("8 bytes"));
        let loc = Location {
            log_id: header.log_id,
            offset,
            len,
        };
        let payload = match read_record(file, path, loc, ledger, entry) {
            Ok(p) => p,
            Err(LedgerStoreError::Corrupt { .. }) => break,
            Err(e) => return Err(e),
        };
        visit(LogRecord {
            offset,
            ledger,
            entry,
            payload,
        });
        *ledgers.entry(ledger).or_insert(0) += end - offset;
        records += 1;
        offset = end;
    }
    let padded = offset < limit && is_zero_padding(file, offset, limit)?;
    Ok(LogScan {
        ledgers: ledgers.into_iter().collect(),
        records,
        end: offset,
        padded,
    })
}

/// Whether `[from, to)` is a direct write's zero padding: shorter than a block, ending at
/// a block boundary, all zeros.
fn is_zero_padding(file: &dyn File, from: u64, to: u64) -> Result<bool, LedgerStoreError> {
    let align = DIRECT_IO_ALIGN as u64;
    if !to.is_multiple_of(align) || to - from >= align {
        return Ok(false);
    }
    let mut rest = vec![0u8; (to - from) as usize];
    match file.read_exact_at(&mut rest, from) {
        Ok(()) => Ok(rest.iter().all(|&b| b == 0)),
        Err(_) => Ok(false),
    }
}

/// Opens the entry log file at `path` read-only and reads its records through
/// [`scan_entries`] (tools: `folio shell readlog`). Safe while a bookie appends to it:
/// it sees the records synced so far.
pub fn scan_file(
    fs: &dyn FileSystem,
    path: &Path,
    visit: &mut dyn FnMut(LogRecord),
) -> Result<(format::Header, LogScan), LedgerStoreError> {
    let dir = path.parent().unwrap_or(path);
    let file = fs
        .open(path, OpenOptions::read())
        .map_err(|e| io_error("open entry log", dir, path, None, e))?;
    let header = read_header(&*file, path)?;
    let scan = scan_entries(&*file, path, visit)?;
    Ok((header, scan))
}

#[cfg(test)]
mod tests {
    use super::*;

    use folio_env::RealFileSystem;

    /// `LogWriter::append_shared` with the record's checksum computed here.
    fn append_shared(
        w: &mut LogWriter,
        ledger: i64,
        entry: i64,
        payload: &Bytes,
    ) -> Result<Location, LedgerStoreError> {
        let crc = format::payload_record_crc(ledger, entry, payload);
        w.append_shared(ledger, entry, payload, crc)
    }

    #[test]
    fn file_names_round_trip_and_reject_others() {
        assert_eq!(file_name(0x2a), "000000000000002a.log");
        assert_eq!(parse_file_name(&file_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_file_name("2a.log"), None);
        assert_eq!(parse_file_name("000000000000002a.txt"), None);
        assert_eq!(parse_file_name("VERSION"), None);
    }

    /// Runs of one ledger summed apart give the same map as a lookup per record: runs of
    /// every length, ledgers coming back after others, the last run still open at the end.
    #[test]
    fn ledger_bytes_summed_by_runs_match_a_sum_per_record() {
        use folio_env::Rng;
        let rng = folio_env::SystemRng::with_seed(0x1ed6e5);
        for _ in 0..200 {
            let mut runs = LedgerBytes::default();
            let mut each: BTreeMap<i64, u64> = BTreeMap::new();
            for _ in 0..rng.below(300) {
                let ledger = rng.below(12) as i64;
                for _ in 0..1 + rng.below(4) {
                    let bytes = 1 + rng.below(2000);
                    runs.add(ledger, bytes);
                    *each.entry(ledger).or_insert(0) += bytes;
                }
            }
            assert_eq!(runs.into_items(), each.into_iter().collect::<Vec<_>>());
        }
    }

    #[test]
    fn write_read_and_close_with_ledgers_map() {
        let dir = tempfile::tempdir().unwrap();
        let fs = RealFileSystem;
        let mut w = LogWriter::create(&fs, dir.path(), 7, false).unwrap();
        let a = w.append(1, 0, b"aaaa").unwrap();
        let b = w.append(2, 0, b"bbbbbbbb").unwrap();
        let c = w.append(1, 1, b"cc").unwrap();
        assert_eq!(a.offset, HEADER_LEN as u64);
        w.sync().unwrap();
        let file = w.file();
        let path = w.path().to_path_buf();
        assert_eq!(read_ledgers_map(&*file, &path).unwrap(), None);
        assert_eq!(
            read_record(&*file, &path, b, 2, 0).unwrap(),
            &b"bbbbbbbb"[..]
        );
        w.close().unwrap();
        assert_eq!(read_record(&*file, &path, a, 1, 0).unwrap(), &b"aaaa"[..]);
        assert_eq!(read_record(&*file, &path, c, 1, 1).unwrap(), &b"cc"[..]);
        let rec = RECORD_HEADER_LEN as u64;
        assert_eq!(
            read_ledgers_map(&*file, &path).unwrap(),
            Some(vec![(1, 2 * rec + 6), (2, rec + 8)])
        );
        assert_eq!(read_header(&*file, &path).unwrap().log_id, 7);
    }

    /// Large payloads go out from the caller's buffers between copied headers and small
    /// records; the file holds exactly the records a copying writer would write, across
    /// several vectored writes, and every record reads back whole.
    #[test]
    fn shared_payloads_are_written_in_place_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let fs = RealFileSystem;
        let mut shared = LogWriter::create(&fs, dir.path(), 1, false).unwrap();
        let mut copied = LogWriter::create(&fs, dir.path(), 2, false).unwrap();
        let mut locs = Vec::new();
        for e in 0..100i64 {
            // Sizes around the threshold, up to 70 KiB: several MiB in all.
            let len = [10, 4095, 4096, 70_000, 65_536, 1][e as usize % 6];
            let payload = Bytes::from(vec![e as u8; len]);
            let a = append_shared(&mut shared, e % 3, e, &payload).unwrap();
            let b = copied.append(e % 3, e, &payload).unwrap();
            assert_eq!((a.offset, a.len), (b.offset, b.len));
            locs.push((e, a, payload));
        }
        shared.sync().unwrap();
        copied.sync().unwrap();
        let (sf, sp) = (shared.file(), shared.path().to_path_buf());
        let cf = copied.file();
        let len = sf.len().unwrap();
        assert!(len > 2 * WRITE_BUFFER_BYTES as u64, "several writes: {len}");
        assert_eq!(len, cf.len().unwrap());
        let mut a = vec![0u8; len as usize];
        let mut b = vec![0u8; len as usize];
        sf.read_exact_at(&mut a, 0).unwrap();
        cf.read_exact_at(&mut b, 0).unwrap();
        // The headers differ only in the log id.
        assert_eq!(a[HEADER_LEN..], b[HEADER_LEN..]);
        for (e, loc, payload) in locs {
            assert_eq!(read_record(&*sf, &sp, loc, e % 3, e).unwrap(), payload);
        }
    }

    /// Sizes that put record ends everywhere in a block: below, at and across block and
    /// write-buffer boundaries.
    fn mixed_payload(e: i64) -> Bytes {
        let len = [10, 4072, 4096, 70_000, 65_536, 1, 300, 8191][e as usize % 8];
        Bytes::from(vec![(e % 251) as u8 + 1; len])
    }

    /// With direct I/O, records are written once a piece of the size set is pending (smaller
    /// while the write cache has room); buffered logs keep their 1 MiB writes whatever is set.
    #[test]
    fn direct_writes_go_in_pieces_of_the_size_set() {
        let dir = tempfile::tempdir().unwrap();
        let fs = RealFileSystem;
        let payload = Bytes::from(vec![9u8; 10_000]);
        let pending_after = |direct: bool, piece: Option<usize>, id: u64| {
            let mut w = LogWriter::create(&fs, dir.path(), id, direct).unwrap();
            assert_eq!(w.is_direct(), direct);
            if let Some(p) = piece {
                w.set_direct_piece(p);
            }
            for e in 0..30 {
                append_shared(&mut w, 1, e, &payload).unwrap();
            }
            w.pending
        };
        // 30 records of about 10 KiB: 300 KiB, past a 256 KiB piece, short of 1 MiB.
        let small = pending_after(true, Some(DIRECT_PIECE_WITH_ROOM), 1);
        assert!(
            small < DIRECT_PIECE_WITH_ROOM / 4,
            "written at 256 KiB: {small} pending"
        );
        let large = pending_after(true, None, 2);
        assert!(
            large > DIRECT_PIECE_WITH_ROOM,
            "nothing written yet: {large} pending"
        );
        assert_eq!(pending_after(false, Some(DIRECT_PIECE_WITH_ROOM), 3), large);
    }

    /// A direct-I/O log holds exactly the bytes a buffered one does, record for record;
    /// every record reads back through the readers' buffered handle right after the sync
    /// that made it durable, also when the next write rewrites its (partial) last block,
    /// which the page cache may hold from that read.
    #[test]
    fn direct_writes_hold_the_same_records_as_buffered_ones() {
        let dir = tempfile::tempdir().unwrap();
        let fs = RealFileSystem;
        let mut direct = LogWriter::create(&fs, dir.path(), 1, true).unwrap();
        let mut buffered = LogWriter::create(&fs, dir.path(), 2, false).unwrap();
        assert!(
            direct.is_direct(),
            "{} has direct I/O",
            dir.path().display()
        );
        assert!(!buffered.is_direct());
        let (df, dp) = (direct.file(), direct.path().to_path_buf());
        let mut locs = Vec::new();
        for e in 0..120i64 {
            let payload = mixed_payload(e);
            let a = append_shared(&mut direct, e % 3, e, &payload).unwrap();
            let b = append_shared(&mut buffered, e % 3, e, &payload).unwrap();
            assert_eq!((a.offset, a.len), (b.offset, b.len));
            locs.push((e, a, payload));
            if e % 7 == 0 {
                direct.sync().unwrap();
                buffered.sync().unwrap();
                for (e, loc, payload) in &locs {
                    assert_eq!(read_record(&*df, &dp, *loc, e % 3, *e).unwrap(), payload);
                }
            }
        }
        direct.sync().unwrap();
        // An unrotated direct log ends in zero padding up to a block, which a scan
        // tells from a torn tail.
        let scan = scan_records(&*df, &dp).unwrap();
        assert_eq!(scan.records, 120);
        assert_eq!(scan.end, direct.end());
        assert!(df.len().unwrap().is_multiple_of(DIRECT_IO_ALIGN as u64));
        assert_eq!(scan.padded, df.len().unwrap() != scan.end);
        direct.close().unwrap();
        buffered.close().unwrap();
        let bf = fs
            .open(&dir.path().join(file_name(2)), OpenOptions::read())
            .unwrap();
        let map = read_header(&*df, &dp)
            .unwrap()
            .map
            .expect("closed: has a map");
        let end = map.offset as usize + map.len as usize;
        let mut a = vec![0u8; end];
        let mut b = vec![0u8; end];
        df.read_exact_at(&mut a, 0).unwrap();
        bf.read_exact_at(&mut b, 0).unwrap();
        assert!(
            a[HEADER_LEN..] == b[HEADER_LEN..],
            "the records and the map differ"
        );
        assert_eq!(
            read_ledgers_map(&*df, &dp).unwrap(),
            read_ledgers_map(&*bf, &dir.path().join(file_name(2))).unwrap()
        );
        for (e, loc, payload) in locs {
            assert_eq!(read_record(&*df, &dp, loc, e % 3, e).unwrap(), payload);
        }
    }

    /// The rewrite of a partial block cannot take synced records with it: after a crash
    /// at any point of later, unsynced direct writes (torn at a seeded byte), every
    /// record synced before reads back whole, and a scan finds at least those.
    #[test]
    fn a_torn_direct_write_keeps_every_synced_record() {
        use folio_env::sim::{CrashMode, SimFileSystem};
        let dir = Path::new("/d");
        for seed in 0..40u64 {
            let fs = SimFileSystem::new();
            fs.create_dir_all(dir).unwrap();
            let mut w = LogWriter::create(&fs, dir, 9, true).unwrap();
            assert!(w.is_direct());
            let mut synced = Vec::new();
            let mut e = 0i64;
            for _ in 0..(1 + seed % 5) {
                let payload = mixed_payload(e + seed as i64);
                synced.push((e, append_shared(&mut w, 1, e, &payload).unwrap(), payload));
                e += 1;
            }
            w.sync().unwrap();
            for _ in 0..(1 + seed % 3) {
                let payload = mixed_payload(e * 3 + seed as i64);
                append_shared(&mut w, 1, e, &payload).unwrap();
                w.write_buffer().unwrap();
                e += 1;
            }
            let after = fs.crash(CrashMode::Torn { seed });
            let path = dir.join(file_name(9));
            let f = after.open(&path, OpenOptions::read()).unwrap();
            for (e, loc, payload) in &synced {
                let got = read_record(&*f, &path, *loc, 1, *e);
                assert_eq!(got.as_ref().ok(), Some(payload), "seed {seed}, entry {e}");
            }
            assert!(scan_records(&*f, &path).unwrap().records >= synced.len() as u64);
        }
    }

    /// Where the file system has no direct I/O (tmpfs), the log is written through the
    /// page cache instead, and says so.
    #[test]
    fn a_refused_direct_open_falls_back_to_buffered_writes() {
        let fs = folio_env::sim::SimFileSystem::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        fs.refuse_direct_io();
        let mut w = LogWriter::create(&fs, dir, 1, true).unwrap();
        assert!(!w.is_direct());
        let loc = w.append(1, 0, b"x").unwrap();
        w.sync().unwrap();
        assert_eq!(
            read_record(&*w.file(), w.path(), loc, 1, 0).unwrap(),
            &b"x"[..]
        );
        assert_eq!(fs.direct_writes(), 0);
    }

    #[test]
    fn scanning_matches_the_ledgers_map_and_stops_at_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let fs = RealFileSystem;
        let mut w = LogWriter::create(&fs, dir.path(), 3, false).unwrap();
        for e in 0..5 {
            w.append(e % 2, e, &vec![e as u8; 10 + e as usize]).unwrap();
        }
        w.sync().unwrap();
        let (file, path) = (w.file(), w.path().to_path_buf());
        let unclosed = scan_records(&*file, &path).unwrap();
        assert_eq!(unclosed.records, 5);
        assert_eq!(unclosed.end, w.end());
        w.close().unwrap();
        let map = read_ledgers_map(&*file, &path).unwrap().unwrap();
        assert_eq!(unclosed.ledgers, map);
        assert_eq!(
            scan_records(&*file, &path).unwrap(),
            unclosed,
            "stops at the map"
        );
        let mut seen = Vec::new();
        let (header, scan) = scan_file(&fs, &path, &mut |r| seen.push(r)).unwrap();
        assert_eq!((header.log_id, scan), (3, unclosed.clone()));
        let ids: Vec<_> = seen.iter().map(|r| (r.ledger, r.entry)).collect();
        assert_eq!(ids, vec![(0, 0), (1, 1), (0, 2), (1, 3), (0, 4)]);
        assert_eq!(seen[2].payload, vec![2u8; 12]);
        assert_eq!(seen[0].offset, HEADER_LEN as u64);

        // A torn tail: the last record is cut short and followed by zeros.
        let mut w = LogWriter::create(&fs, dir.path(), 4, false).unwrap();
        w.append(1, 0, b"first").unwrap();
        let last = w.append(1, 1, b"second record").unwrap();
        w.sync().unwrap();
        let (file, path) = (w.file(), w.path().to_path_buf());
        file.set_len(last.offset + 30).unwrap();
        file.set_len(last.offset + 4096).unwrap();
        let scan = scan_records(&*file, &path).unwrap();
        assert_eq!(scan.records, 1);
        assert_eq!(scan.end, last.offset);
        assert_eq!(scan.ledgers, vec![(1, RECORD_HEADER_LEN as u64 + 5)]);
    }

    #[test]
    fn a_location_past_the_end_is_corrupt_without_a_huge_allocation() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = LogWriter::create(&RealFileSystem, dir.path(), 5, false).unwrap();
        let mut loc = w.append(1, 0, b"x").unwrap();
        w.sync().unwrap();
        loc.len = u32::MAX;
        let e = read_record(&*w.file(), w.path(), loc, 1, 0).unwrap_err();
        assert!(
            matches!(e, LedgerStoreError::Corrupt { offset, .. } if offset == loc.offset),
            "{e}"
        );
    }

    #[test]
    fn a_second_file_with_the_same_id_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fs = RealFileSystem;
        let _w = LogWriter::create(&fs, dir.path(), 1, false).unwrap();
        let e = LogWriter::create(&fs, dir.path(), 1, false).err().unwrap();
        assert!(e.to_string().contains("0000000000000001.log"), "{e}");
    }
}
