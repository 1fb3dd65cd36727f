//! Transport framing shared by v2 and v3: every message is a 4-byte big-endian length followed
//! by that many bytes (Netty's `LengthFieldBasedFrameDecoder(max, 0, 4, 0, 4)` in BookKeeper).
//! [`FrameDecoder`] is incremental and sans-IO: feed it whatever the socket produced and pull
//! complete frames out. [`detect_protocol`] classifies one frame as v2 or v3.

use bytes::buf::Limit;
use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::ProtoError;

/// `nettyMaxFrameSizeBytes` default, shared by BookKeeper's client and bookie: 5 MiB.
pub const DEFAULT_MAX_FRAME_SIZE: usize = 5 * 1024 * 1024;

/// Size of the length prefix.
pub const LENGTH_PREFIX_SIZE: usize = 4;

/// What [`FrameDecoder::read_buf`] allocates when it needs room (more for a larger frame
/// already announced).
const READ_CHUNK: usize = 64 * 1024;
/// The spare room below which [`FrameDecoder::read_buf`] allocates: a buffer is filled
/// to within this of its end before the next one is started. Frames handed out keep
/// their buffer alive (the write cache holds entries until a checkpoint), so a buffer
/// abandoned half empty would pin memory that holds nothing.
const MIN_SPARE: usize = 4 * 1024;
/// The most room it reserves ahead for the rest of an announced frame: a peer that sends a
/// large length and nothing else gets no bigger allocation than this.
const MAX_READ_AHEAD: usize = 1024 * 1024;
/// A frame at least this long is read on its own: no byte of the next frame is read
/// into its buffer (see [`FrameDecoder::read_buf`]).
const LARGE_FRAME: usize = 16 * 1024;

/// Incremental frame decoder with a maximum frame size.
///
/// Like Netty, the maximum is compared with the length *plus* the 4-byte prefix. An oversize
/// length is reported as soon as the prefix is seen, before any buffering, so a hostile peer
/// cannot make us allocate. After an error the decoder keeps returning it: the byte stream has
/// lost its framing and the connection must be closed.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: BytesMut,
    max_frame_size: usize,
    failed: Option<ProtoError>,
    /// Whether the last frame handed out was large: the peer sends large frames, so the
    /// next one's length prefix is read alone, to size its buffer before its body.
    large: bool,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameDecoder {
    /// A decoder with BookKeeper's default maximum frame size (5 MiB).
    pub fn new() -> Self {
        Self::with_max_frame_size(DEFAULT_MAX_FRAME_SIZE)
    }

    /// A decoder accepting frames whose length plus prefix is at most `max_frame_size`.
    pub fn with_max_frame_size(max_frame_size: usize) -> Self {
        FrameDecoder {
            buf: BytesMut::new(),
            max_frame_size,
            failed: None,
            large: false,
        }
    }

    /// The configured maximum (length prefix included).
    pub fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    /// Appends bytes received from the peer.
    pub fn feed(&mut self, data: &[u8]) {
        if self.failed.is_none() {
            self.buf.extend_from_slice(data);
        }
    }

    /// The decoder's own buffer, to read the socket straight into (e.g. tokio's
    /// `read_buf`), with room for at least 4 KiB and for the rest of a frame whose length
    /// is already known (up to 1 MiB ahead); when it must allocate, it takes 64 KiB or
    /// that frame's size. A frame read this way is never copied: the [`Bytes`] that
    /// [`FrameDecoder::next_frame`] returns points into the bytes the socket wrote.
    /// [`FrameDecoder::feed`] copies instead.
    ///
    /// Large frames (16 KiB and more) are read one at a time: the read stops at the end
    /// of the frame, and after a large frame the next length prefix is read alone, so
    /// that each large frame gets a buffer of its own size. Otherwise the start of the
    /// next frame, read into the tail of a buffer that a held frame keeps alive, would
    /// be copied out to a new one when the rest of it arrives: one more pass over most
    /// of the bytes of a stream of 64 KiB entries. It costs one more read per large
    /// frame. Small frames are read many at a time, sharing 64 KiB buffers.
    pub fn read_buf(&mut self) -> Limit<&mut BytesMut> {
        let known = self.buf.len() >= LENGTH_PREFIX_SIZE;
        let rest_of_frame = if known {
            let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
            (len as usize + LENGTH_PREFIX_SIZE).saturating_sub(self.buf.len())
        } else {
            0
        };
        // (A complete frame is not "the rest of" anything: the caller takes it first, and
        // a zero limit would read as end of stream.)
        let large = known
            && rest_of_frame > 0
            && rest_of_frame + self.buf.len() >= LARGE_FRAME + LENGTH_PREFIX_SIZE;
        let (want, limit) = if large {
            // Exactly the rest of this frame (at most 1 MiB of it reserved at a time).
            (rest_of_frame.min(MAX_READ_AHEAD), rest_of_frame)
        } else if known {
            (rest_of_frame.max(MIN_SPARE), usize::MAX)
        } else if self.large {
            (
                LENGTH_PREFIX_SIZE - self.buf.len(),
                LENGTH_PREFIX_SIZE - self.buf.len(),
            )
        } else {
            (MIN_SPARE, usize::MAX)
        };
        if self.buf.capacity() - self.buf.len() < want {
            if self.large && !known {
                // A buffer of its own for the prefix, grown to the frame's size once the
                // prefix is in. (`reserve` on the spent end of a shared buffer would
                // allocate as much as that buffer had, and then grow again.)
                let mut own = BytesMut::with_capacity(LENGTH_PREFIX_SIZE);
                own.extend_from_slice(&self.buf);
                self.buf = own;
            } else if large {
                self.buf.reserve(want);
            } else {
                self.buf.reserve(want.max(READ_CHUNK));
            }
        }
        (&mut self.buf).limit(limit)
    }

    /// Bytes buffered but not yet returned as a frame.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next complete frame body (without its length prefix), `Ok(None)` if more bytes are
    /// needed, or the error that broke the stream.
    pub fn next_frame(&mut self) -> Result<Option<Bytes>, ProtoError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        if self.buf.len() < LENGTH_PREFIX_SIZE {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        // Netty reads the field as a signed int: a negative length is as fatal as an oversize
        // one, and both exceed any maximum we accept.
        let total = u64::from(len) + LENGTH_PREFIX_SIZE as u64;
        if len > i32::MAX as u32 || total > self.max_frame_size as u64 {
            let err = ProtoError::FrameTooLarge {
                len: u64::from(len),
                max: self.max_frame_size,
            };
            self.failed = Some(err.clone());
            self.buf = BytesMut::new();
            return Err(err);
        }
        let total = total as usize;
        if self.buf.len() < total {
            // No reservation for the announced length: a peer sending only a prefix must not
            // make us allocate up to the maximum frame size.
            return Ok(None);
        }
        self.buf.advance(LENGTH_PREFIX_SIZE);
        self.large = len as usize >= LARGE_FRAME;
        Ok(Some(self.buf.split_to(len as usize).freeze()))
    }
}

/// Writes `body` as one frame (length prefix, then the body) into `dst`.
///
/// # Panics
/// Never for bodies a peer could accept; a body over 2^31 - 1 bytes cannot be framed and is a
/// programming error, reported by panic.
pub fn encode_frame(body: &[u8], dst: &mut BytesMut) {
    let len = i32::try_from(body.len()).expect("frame body over 2 GiB cannot be framed");
    dst.reserve(LENGTH_PREFIX_SIZE + body.len());
    dst.put_i32(len);
    dst.put_slice(body);
}

/// Which of BookKeeper's two protocols a frame is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireProtocol {
    /// Binary protocol (`BookieProtocol`), header word first.
    V2,
    /// Protobuf `Request`/`Response` (`BookkeeperProtocol.proto`).
    V3,
}

/// Classifies one frame body.
///
/// A v2 frame starts with the header word whose first byte is the protocol version (0, 1 or
/// 2); read as a protobuf tag that is field number 0, which protobuf never produces, so Java's
/// "try v3, fall back to v2" and this per-frame first-byte test agree. Everything else is
/// treated as v3 and left to the v3 decoder to accept or reject. Per frame rather than per
/// connection, because a v2 Java client still sends StartTLS, WriteLac, GetBookieInfo and
/// GetListOfEntriesOfLedger as v3.
pub fn detect_protocol(frame: &[u8]) -> Result<WireProtocol, ProtoError> {
    match frame.first() {
        None => Err(ProtoError::EmptyFrame),
        Some(0..=2) => Ok(WireProtocol::V2),
        Some(_) => Ok(WireProtocol::V3),
    }
}
