//! BookKeeper's v2 binary protocol (`BookieProtocol` / `BookieProtoEncoding`), used by Java
//! clients configured with `useV2WireProtocol=true`.
//!
//! Every frame body starts with a header word: for version != 0, `version(8) | opcode(8) |
//! flags(16)`; for the legacy version 0 the word is just the opcode. The ops carried on the v2
//! wire are add, read, batch read and auth; read LAC, write LAC and get bookie info have opcodes
//! but the Java client sends them as v3 even in v2 mode, and the Java bookie rejects them, so
//! decoding them here is an [`ProtoError::UnsupportedV2Opcode`] error too.
//!
//! The functions here work on frame bodies (after the length prefix); the `*_frame` encoders
//! add the prefix.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;

use crate::digest::MASTER_KEY_LENGTH;
use crate::error::ProtoError;
use crate::frame::encode_frame;
use crate::pb::AuthMessage;
use crate::status::Status;

/// The version the Java client writes (`CURRENT_PROTOCOL_VERSION`).
pub const CURRENT_PROTOCOL_VERSION: u8 = 2;
/// Highest version we accept (the lowest compatible is 0).
pub const MAX_PROTOCOL_VERSION: u8 = 2;

/// A 20-byte master key.
pub type MasterKey = [u8; MASTER_KEY_LENGTH];

/// v2 opcodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpCode {
    AddEntry = 1,
    ReadEntry = 2,
    Auth = 3,
    ReadLac = 4,
    WriteLac = 5,
    GetBookieInfo = 6,
    BatchReadEntry = 7,
}

impl OpCode {
    pub fn from_u8(v: u8) -> Result<OpCode, ProtoError> {
        Ok(match v {
            1 => OpCode::AddEntry,
            2 => OpCode::ReadEntry,
            3 => OpCode::Auth,
            4 => OpCode::ReadLac,
            5 => OpCode::WriteLac,
            6 => OpCode::GetBookieInfo,
            7 => OpCode::BatchReadEntry,
            other => return Err(ProtoError::UnknownV2Opcode(other)),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            OpCode::AddEntry => "ADDENTRY",
            OpCode::ReadEntry => "READENTRY",
            OpCode::Auth => "AUTH",
            OpCode::ReadLac => "READ_LAC",
            OpCode::WriteLac => "WRITE_LAC",
            OpCode::GetBookieInfo => "GET_BOOKIE_INFO",
            OpCode::BatchReadEntry => "BATCH_READ_ENTRY",
        }
    }

    fn unsupported(self) -> ProtoError {
        ProtoError::UnsupportedV2Opcode(self as u8, self.name())
    }
}

/// The 16 flag bits of the header word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(pub u16);

impl Flags {
    pub const NONE: Flags = Flags(0x0000);
    /// Read that fences the ledger (carries the master key when version >= 2).
    pub const DO_FENCING: Flags = Flags(0x0001);
    /// Add issued by recovery: accepted on a fenced ledger.
    pub const RECOVERY_ADD: Flags = Flags(0x0002);
    /// High priority (recovery traffic; accepted by a read-only bookie with room).
    pub const HIGH_PRIORITY: Flags = Flags(0x0004);

    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

/// The header word, unpacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PacketHeader {
    pub version: u8,
    pub opcode: OpCode,
    /// Always 0 when `version` is 0 (the legacy word has no room for flags).
    pub flags: Flags,
}

impl PacketHeader {
    pub fn new(version: u8, opcode: OpCode, flags: Flags) -> PacketHeader {
        PacketHeader {
            version,
            opcode,
            flags,
        }
    }

    /// Packs the header word as `BookieProtocol.PacketHeader.toInt` does.
    pub fn to_word(self) -> u32 {
        if self.version == 0 {
            self.opcode as u32
        } else {
            (u32::from(self.version) << 24) | ((self.opcode as u32) << 16) | u32::from(self.flags.0)
        }
    }

    /// Unpacks a header word; unknown versions (> 2) and opcodes are errors.
    pub fn from_word(word: u32) -> Result<PacketHeader, ProtoError> {
        let version = (word >> 24) as u8;
        if version > MAX_PROTOCOL_VERSION {
            return Err(ProtoError::UnknownV2Version(version));
        }
        if version == 0 {
            // Legacy: the word is the opcode; Java takes its low byte.
            Ok(PacketHeader {
                version,
                opcode: OpCode::from_u8(word as u8)?,
                flags: Flags::NONE,
            })
        } else {
            Ok(PacketHeader {
                version,
                opcode: OpCode::from_u8((word >> 16) as u8)?,
                flags: Flags(word as u16),
            })
        }
    }
}

/// ADDENTRY request: `header | masterKey(20) | entry-with-digest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddRequest {
    pub version: u8,
    pub flags: Flags,
    pub master_key: MasterKey,
    /// Peeked from the first 16 bytes of `entry`.
    pub ledger_id: i64,
    pub entry_id: i64,
    /// The whole entry with digest, stored as is.
    pub entry: Bytes,
}

impl AddRequest {
    pub fn is_recovery_add(&self) -> bool {
        self.flags.contains(Flags::RECOVERY_ADD)
    }
    pub fn is_high_priority(&self) -> bool {
        self.flags.contains(Flags::HIGH_PRIORITY)
    }
}

/// READENTRY request: `header | ledgerId | entryId [| masterKey]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRequest {
    pub version: u8,
    pub flags: Flags,
    pub ledger_id: i64,
    /// -1 reads the last entry (LAC read).
    pub entry_id: i64,
    /// Present iff the read fences (FLAG_DO_FENCING) and version >= 2.
    pub master_key: Option<MasterKey>,
}

impl ReadRequest {
    pub fn is_fence(&self) -> bool {
        self.flags.contains(Flags::DO_FENCING)
    }
    pub fn is_high_priority(&self) -> bool {
        self.flags.contains(Flags::HIGH_PRIORITY)
    }
}

/// BATCH_READ_ENTRY request: `header | ledgerId | startEntryId | requestId | maxCount(4) |
/// maxSize(8) [| masterKey]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchReadRequest {
    pub version: u8,
    pub flags: Flags,
    pub ledger_id: i64,
    pub start_entry_id: i64,
    /// Correlates the response (the Java client uses its txn id counter).
    pub request_id: i64,
    /// <= 0 means unlimited.
    pub max_count: i32,
    pub max_size: i64,
    pub master_key: Option<MasterKey>,
}

/// AUTH request or response: `header | AuthMessage protobuf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthPacket {
    pub version: u8,
    pub message: AuthMessage,
}

/// A decoded v2 request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Add(AddRequest),
    Read(ReadRequest),
    BatchRead(BatchReadRequest),
    Auth(AuthPacket),
}

/// ADDENTRY response: `header | rc | ledgerId | entryId`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddResponse {
    pub version: u8,
    pub status: Status,
    pub ledger_id: i64,
    pub entry_id: i64,
}

/// READENTRY response: `header | rc | ledgerId | entryId | body` (body empty on error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResponse {
    pub version: u8,
    pub status: Status,
    pub ledger_id: i64,
    pub entry_id: i64,
    pub body: Bytes,
}

/// BATCH_READ_ENTRY response: `header | rc | ledgerId | startEntryId | requestId |
/// { len(4) | entry }*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchReadResponse {
    pub version: u8,
    pub status: Status,
    pub ledger_id: i64,
    pub start_entry_id: i64,
    pub request_id: i64,
    pub entries: Vec<Bytes>,
}

/// A decoded v2 response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    Add(AddResponse),
    Read(ReadResponse),
    BatchRead(BatchReadResponse),
    Auth(AuthPacket),
}

/// Cursor over a frame body that reports truncation instead of panicking.
struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a Bytes, what: &'static str) -> Self {
        Reader { buf, pos: 0, what }
    }
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if self.remaining() < n {
            return Err(ProtoError::Truncated {
                what: self.what,
                needed: self.pos + n,
                got: self.buf.len(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, ProtoError> {
        Ok(self.take(4)?.get_u32())
    }
    fn i32(&mut self) -> Result<i32, ProtoError> {
        Ok(self.take(4)?.get_i32())
    }
    fn i64(&mut self) -> Result<i64, ProtoError> {
        Ok(self.take(8)?.get_i64())
    }
    fn master_key(&mut self) -> Result<MasterKey, ProtoError> {
        let mut k = [0u8; MASTER_KEY_LENGTH];
        k.copy_from_slice(self.take(MASTER_KEY_LENGTH)?);
        Ok(k)
    }
    fn rest(&mut self) -> Bytes {
        let b = self.buf.slice(self.pos..);
        self.pos = self.buf.len();
        b
    }
}

fn decode_auth(version: u8, body: Bytes) -> Result<AuthPacket, ProtoError> {
    let message = crate::v3::decode_checked::<AuthMessage>(body, "AuthMessage")?;
    Ok(AuthPacket { version, message })
}

/// Decodes a v2 request frame body. Trailing bytes after a fixed-size request are ignored, as
/// the Java bookie does.
pub fn decode_request(frame: Bytes) -> Result<Request, ProtoError> {
    let mut r = Reader::new(&frame, "v2 request");
    let header = PacketHeader::from_word(r.u32()?)?;
    let (version, flags) = (header.version, header.flags);
    let fence_key = flags.contains(Flags::DO_FENCING) && version >= 2;
    match header.opcode {
        OpCode::AddEntry => {
            r.what = "v2 add request";
            let master_key = r.master_key()?;
            let entry = r.rest();
            if entry.len() < 16 {
                return Err(ProtoError::Truncated {
                    what: "v2 add request entry (ledger and entry ids)",
                    needed: 16,
                    got: entry.len(),
                });
            }
            let ledger_id = (&entry[0..8]).get_i64();
            let entry_id = (&entry[8..16]).get_i64();
            Ok(Request::Add(AddRequest {
                version,
                flags,
                master_key,
                ledger_id,
                entry_id,
                entry,
            }))
        }
        OpCode::ReadEntry => {
            r.what = "v2 read request";
            let ledger_id = r.i64()?;
            let entry_id = r.i64()?;
            let master_key = if fence_key {
                Some(r.master_key()?)
            } else {
                None
            };
            Ok(Request::Read(ReadRequest {
                version,
                flags,
                ledger_id,
                entry_id,
                master_key,
            }))
        }
        OpCode::BatchReadEntry => {
            r.what = "v2 batch read request";
            let ledger_id = r.i64()?;
            let start_entry_id = r.i64()?;
            let request_id = r.i64()?;
            let max_count = r.i32()?;
            let max_size = r.i64()?;
            let master_key = if fence_key {
                Some(r.master_key()?)
            } else {
                None
            };
            Ok(Request::BatchRead(BatchReadRequest {
                version,
                flags,
                ledger_id,
                start_entry_id,
                request_id,
                max_count,
                max_size,
                master_key,
            }))
        }
        OpCode::Auth => Ok(Request::Auth(decode_auth(version, r.rest())?)),
        op @ (OpCode::ReadLac | OpCode::WriteLac | OpCode::GetBookieInfo) => Err(op.unsupported()),
    }
}

/// Decodes a v2 response frame body.
pub fn decode_response(frame: Bytes) -> Result<Response, ProtoError> {
    let mut r = Reader::new(&frame, "v2 response");
    let header = PacketHeader::from_word(r.u32()?)?;
    let version = header.version;
    match header.opcode {
        OpCode::AddEntry => {
            r.what = "v2 add response";
            let status = Status::from_v2_rc(r.i32()?)?;
            Ok(Response::Add(AddResponse {
                version,
                status,
                ledger_id: r.i64()?,
                entry_id: r.i64()?,
            }))
        }
        OpCode::ReadEntry => {
            r.what = "v2 read response";
            let status = Status::from_v2_rc(r.i32()?)?;
            let ledger_id = r.i64()?;
            let entry_id = r.i64()?;
            Ok(Response::Read(ReadResponse {
                version,
                status,
                ledger_id,
                entry_id,
                body: r.rest(),
            }))
        }
        OpCode::BatchReadEntry => {
            r.what = "v2 batch read response";
            let status = Status::from_v2_rc(r.i32()?)?;
            let ledger_id = r.i64()?;
            let start_entry_id = r.i64()?;
            let request_id = r.i64()?;
            let mut entries = Vec::new();
            while r.remaining() > 0 {
                let len = r.i32()?;
                let remaining = r.remaining();
                if len < 0 || len as usize > remaining {
                    return Err(ProtoError::BadBatchEntryLength { len, remaining });
                }
                let start = r.pos;
                r.take(len as usize)?;
                entries.push(frame.slice(start..start + len as usize));
            }
            Ok(Response::BatchRead(BatchReadResponse {
                version,
                status,
                ledger_id,
                start_entry_id,
                request_id,
                entries,
            }))
        }
        OpCode::Auth => Ok(Response::Auth(decode_auth(version, r.rest())?)),
        op @ (OpCode::ReadLac | OpCode::WriteLac | OpCode::GetBookieInfo) => Err(op.unsupported()),
    }
}

impl Request {
    /// The header word this request carries.
    pub fn header(&self) -> PacketHeader {
        match self {
            Request::Add(a) => PacketHeader::new(a.version, OpCode::AddEntry, a.flags),
            Request::Read(r) => PacketHeader::new(r.version, OpCode::ReadEntry, r.flags),
            Request::BatchRead(b) => PacketHeader::new(b.version, OpCode::BatchReadEntry, b.flags),
            Request::Auth(a) => PacketHeader::new(a.version, OpCode::Auth, Flags::NONE),
        }
    }

    /// Appends the frame body (no length prefix). The master key of a read is written iff it
    /// is `Some`; a bookie reads it back only for fencing reads of version >= 2.
    pub fn encode(&self, dst: &mut BytesMut) {
        dst.put_u32(self.header().to_word());
        match self {
            Request::Add(a) => {
                dst.put_slice(&a.master_key);
                dst.put_slice(&a.entry);
            }
            Request::Read(r) => {
                dst.put_i64(r.ledger_id);
                dst.put_i64(r.entry_id);
                if let Some(k) = &r.master_key {
                    dst.put_slice(k);
                }
            }
            Request::BatchRead(b) => {
                dst.put_i64(b.ledger_id);
                dst.put_i64(b.start_entry_id);
                dst.put_i64(b.request_id);
                dst.put_i32(b.max_count);
                dst.put_i64(b.max_size);
                if let Some(k) = &b.master_key {
                    dst.put_slice(k);
                }
            }
            Request::Auth(a) => a.message.encode_raw(dst),
        }
    }

    /// The frame body as bytes.
    pub fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::new();
        self.encode(&mut b);
        b.freeze()
    }

    /// Appends the whole frame (length prefix included).
    pub fn encode_frame(&self, dst: &mut BytesMut) {
        encode_frame(&self.to_bytes(), dst);
    }
}

impl Response {
    /// The header word this response carries (flags always 0).
    pub fn header(&self) -> PacketHeader {
        let (version, opcode) = match self {
            Response::Add(a) => (a.version, OpCode::AddEntry),
            Response::Read(r) => (r.version, OpCode::ReadEntry),
            Response::BatchRead(b) => (b.version, OpCode::BatchReadEntry),
            Response::Auth(a) => (a.version, OpCode::Auth),
        };
        PacketHeader::new(version, opcode, Flags::NONE)
    }

    /// Appends the frame body (no length prefix). Statuses go through
    /// [`Status::to_v2_rc`], so `UnknownLedgerState` is sent as `EIO`, which Java v2 clients
    /// understand.
    pub fn encode(&self, dst: &mut BytesMut) {
        dst.put_u32(self.header().to_word());
        match self {
            Response::Add(a) => {
                dst.put_i32(a.status.to_v2_rc());
                dst.put_i64(a.ledger_id);
                dst.put_i64(a.entry_id);
            }
            Response::Read(r) => {
                dst.put_i32(r.status.to_v2_rc());
                dst.put_i64(r.ledger_id);
                dst.put_i64(r.entry_id);
                dst.put_slice(&r.body);
            }
            Response::BatchRead(b) => {
                dst.put_i32(b.status.to_v2_rc());
                dst.put_i64(b.ledger_id);
                dst.put_i64(b.start_entry_id);
                dst.put_i64(b.request_id);
                for e in &b.entries {
                    dst.put_i32(i32::try_from(e.len()).expect("entry over 2 GiB"));
                    dst.put_slice(e);
                }
            }
            Response::Auth(a) => a.message.encode_raw(dst),
        }
    }

    pub fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::new();
        self.encode(&mut b);
        b.freeze()
    }

    /// The frame body (no length prefix) in one or two pieces, to be written back to back:
    /// a read's entry of at least [`crate::v3::UNCOPIED_BODY_BYTES`] is the second piece,
    /// shared rather than copied (it is the last thing in the body). Anything else is one
    /// piece, as [`Response::to_bytes`] makes it.
    pub fn to_pieces(&self) -> (Bytes, Option<Bytes>) {
        match self {
            Response::Read(r) if r.body.len() >= crate::v3::UNCOPIED_BODY_BYTES => {
                let mut head = BytesMut::with_capacity(24);
                head.put_u32(self.header().to_word());
                head.put_i32(r.status.to_v2_rc());
                head.put_i64(r.ledger_id);
                head.put_i64(r.entry_id);
                (head.freeze(), Some(r.body.clone()))
            }
            _ => (self.to_bytes(), None),
        }
    }

    pub fn encode_frame(&self, dst: &mut BytesMut) {
        encode_frame(&self.to_bytes(), dst);
    }
}
