//! Framing (incremental decoding, maximum frame size, protocol detection) and hostile input:
//! garbage, truncation, huge length prefixes and random bytes all end in errors, never panics.

use bytes::{BufMut, Bytes, BytesMut};
use folio_proto::frame::{DEFAULT_MAX_FRAME_SIZE, FrameDecoder, WireProtocol, detect_protocol};
use folio_proto::{ProtoError, encode_frame, v2, v3};
use proptest::prelude::*;

#[test]
fn frames_arrive_byte_by_byte() {
    let mut wire = BytesMut::new();
    encode_frame(b"first", &mut wire);
    encode_frame(b"", &mut wire);
    encode_frame(&[7u8; 300], &mut wire);
    let mut d = FrameDecoder::new();
    let mut frames = Vec::new();
    for b in wire.iter() {
        d.feed(&[*b]);
        while let Some(f) = d.next_frame().unwrap() {
            frames.push(f);
        }
    }
    assert_eq!(
        frames,
        vec![
            Bytes::from_static(b"first"),
            Bytes::new(),
            Bytes::from(vec![7u8; 300])
        ]
    );
    assert_eq!(d.buffered(), 0);
}

#[test]
fn several_frames_in_one_feed() {
    let mut wire = BytesMut::new();
    for i in 0..10u8 {
        encode_frame(&[i; 3], &mut wire);
    }
    // Plus half of another frame.
    wire.extend_from_slice(&[0, 0, 0, 9, 1, 2]);
    let mut d = FrameDecoder::new();
    d.feed(&wire);
    for i in 0..10u8 {
        assert_eq!(d.next_frame().unwrap().unwrap(), Bytes::from(vec![i; 3]));
    }
    assert_eq!(d.next_frame().unwrap(), None);
    assert_eq!(d.buffered(), 6);
}

/// Bodies of the given sizes (patterned bytes, `seed` apart per body) and the wire
/// bytes that frame them one after the other.
fn framed_bodies(sizes: &[usize], seed: usize) -> (Vec<Vec<u8>>, BytesMut) {
    let bodies: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|j| (i * seed + j) as u8).collect())
        .collect();
    let mut wire = BytesMut::new();
    for b in &bodies {
        encode_frame(b, &mut wire);
    }
    (bodies, wire)
}

/// Reading straight into the decoder's buffer (as the bookie's connections do): frames
/// come out intact whatever the read sizes, a large frame's bytes are not copied (its
/// `Bytes` points where the socket wrote them), small reads fill one buffer instead of
/// starting a new one each (handed-out frames pin their buffer), and a bare announced
/// length reserves at most 1 MiB ahead.
#[test]
fn frames_read_into_the_decoders_buffer_arrive_whole_and_uncopied() {
    let (bodies, wire) = framed_bodies(&[0, 5, 70_000, 3, 200_000, 65_536], 31);
    for chunk in [1usize, 7, 4096, 65_536, 1 << 20] {
        let mut d = FrameDecoder::new();
        let mut frames = Vec::new();
        let mut reads = 0;
        for piece in wire.chunks(chunk) {
            let mut piece = piece;
            while !piece.is_empty() {
                // What a socket read does: fill the room offered, up to the limit.
                let mut buf = d.read_buf();
                let n = piece.len().min(buf.chunk_mut().len());
                assert!(n > 0, "room to read into");
                buf.put_slice(&piece[..n]);
                piece = &piece[n..];
                reads += 1;
                while let Some(f) = d.next_frame().unwrap() {
                    frames.push(f);
                }
            }
        }
        if chunk == 1 << 20 {
            // The whole stream at once: read small frames together, each large frame
            // on its own, with its length prefix alone after a large frame.
            assert_eq!(reads, 7, "chunk {chunk}");
        }
        assert_eq!(frames.len(), bodies.len(), "chunk {chunk}");
        for (f, b) in frames.iter().zip(&bodies) {
            assert!(f.as_ref() == b.as_slice(), "chunk {chunk}: a frame differs");
        }
        assert_eq!(d.buffered(), 0);
    }
    // Zero copy: with the whole frame announced before its body arrives, the body is
    // read into room reserved for it and handed out from there.
    let mut d = FrameDecoder::new();
    let big = &bodies[4];
    d.read_buf().put_slice(&(big.len() as u32).to_be_bytes());
    assert_eq!(d.next_frame().unwrap(), None);
    let mut buf = d.read_buf();
    assert_eq!(
        buf.remaining_mut(),
        big.len(),
        "a large frame is read alone"
    );
    let buf = buf.get_mut();
    assert!(
        buf.capacity() - buf.len() >= big.len(),
        "room for the frame"
    );
    let at = buf.as_ptr() as usize + buf.len();
    buf.extend_from_slice(big);
    let f = d.next_frame().unwrap().unwrap();
    assert_eq!(f.as_ptr() as usize, at, "the frame was copied");
    assert!(f.as_ref() == big.as_slice());
    // After a large frame the next prefix is read alone, and the next large frame gets a
    // buffer of its own: the held frame's buffer is not read into again.
    assert_eq!(d.read_buf().remaining_mut(), 4);
    d.read_buf().put_slice(&(70_000u32).to_be_bytes());
    let buf = d.read_buf().into_inner();
    assert!(buf.capacity() - buf.len() >= 70_000);
    assert!(
        buf.capacity() <= 70_004 + 4096,
        "{}: a buffer of the frame's size",
        buf.capacity()
    );
    let (start, end) = (f.as_ptr() as usize, f.as_ptr() as usize + f.len());
    let into = buf.as_ptr() as usize + buf.len();
    assert!(
        !(start..=end).contains(&into),
        "read into the held frame's buffer"
    );
    // Many small frames read a few at a time, each handed out and held (as the write
    // cache holds entries): they share a few buffers rather than one each.
    let mut d = FrameDecoder::new();
    let mut held = Vec::new();
    let mut buffers = std::collections::HashSet::new();
    for i in 0..1000u32 {
        let mut wire = BytesMut::new();
        encode_frame(&i.to_be_bytes().repeat(25), &mut wire); // 104-byte frames
        let buf = d.read_buf().into_inner();
        buffers.insert(buf.as_ptr() as usize + buf.capacity()); // the allocation's end
        buf.extend_from_slice(&wire);
        held.push(d.next_frame().unwrap().unwrap());
    }
    assert!(
        buffers.len() <= 4,
        "{} buffers for 104 KB of frames",
        buffers.len()
    );
    for (i, f) in held.iter().enumerate() {
        assert_eq!(f.as_ref(), (i as u32).to_be_bytes().repeat(25).as_slice());
    }
    // A bare 5 MiB prefix: no more than 1 MiB (plus the chunk) reserved ahead.
    let mut d = FrameDecoder::new();
    d.read_buf().put_slice(&((5 << 20) - 4u32).to_be_bytes());
    assert_eq!(d.next_frame().unwrap(), None);
    assert!(d.read_buf().get_ref().capacity() <= (1 << 20) + (64 << 10) + 4);
}

#[test]
fn encode_frame_writes_big_endian_length() {
    let mut out = BytesMut::new();
    encode_frame(&[0xaa; 0x0102], &mut out);
    assert_eq!(&out[..4], &[0, 0, 1, 2]);
    assert_eq!(out.len(), 4 + 0x0102);
}

#[test]
fn huge_length_prefixes_are_errors_without_allocation() {
    for prefix in [
        [0x80, 0, 0, 0],          // 2^31
        [0xff, 0xff, 0xff, 0xff], // -1 as Java reads it
        [0x7f, 0xff, 0xff, 0xff], // 2^31 - 1
        [0x00, 0x50, 0x00, 0x00], // 5 MiB exactly: plus the prefix it is over
    ] {
        let mut d = FrameDecoder::new();
        d.feed(&prefix);
        let err = d.next_frame().unwrap_err();
        assert!(
            matches!(err, ProtoError::FrameTooLarge { max, .. } if max == DEFAULT_MAX_FRAME_SIZE),
            "{prefix:?}: {err:?}"
        );
        // The stream is broken for good.
        d.feed(&[0, 0, 0, 1, 9]);
        assert_eq!(d.next_frame().unwrap_err(), err);
        assert_eq!(d.buffered(), 0);
    }
}

#[test]
fn maximum_frame_size_counts_the_prefix() {
    let mut d = FrameDecoder::with_max_frame_size(16);
    d.feed(&[0, 0, 0, 12]);
    d.feed(&[1; 12]);
    assert_eq!(d.next_frame().unwrap().unwrap().len(), 12);
    d.feed(&[0, 0, 0, 13]);
    assert_eq!(
        d.next_frame(),
        Err(ProtoError::FrameTooLarge { len: 13, max: 16 })
    );
    // The default accepts 5 MiB - 4.
    let mut d = FrameDecoder::new();
    let len = (DEFAULT_MAX_FRAME_SIZE - 4) as u32;
    d.feed(&len.to_be_bytes());
    assert_eq!(d.next_frame(), Ok(None));
}

#[test]
fn truncated_frames_wait_for_more_bytes() {
    let mut d = FrameDecoder::new();
    d.feed(&[0, 0]);
    assert_eq!(d.next_frame(), Ok(None));
    d.feed(&[0, 5, 1, 2, 3, 4]);
    assert_eq!(d.next_frame(), Ok(None));
    d.feed(&[5]);
    assert_eq!(
        d.next_frame().unwrap().unwrap(),
        Bytes::from_static(&[1, 2, 3, 4, 5])
    );
}

#[test]
fn protocol_detection_by_first_byte() {
    assert_eq!(detect_protocol(&[0x0a, 0x06]), Ok(WireProtocol::V3));
    assert_eq!(detect_protocol(&[0x02, 0x01, 0, 0]), Ok(WireProtocol::V2));
    assert_eq!(detect_protocol(&[0x01]), Ok(WireProtocol::V2));
    assert_eq!(detect_protocol(&[0x00, 0, 0, 1]), Ok(WireProtocol::V2));
    assert_eq!(detect_protocol(&[]), Err(ProtoError::EmptyFrame));
    // Anything else goes to the v3 decoder, which rejects garbage.
    assert_eq!(detect_protocol(&[0xff]), Ok(WireProtocol::V3));
    assert!(folio_proto::decode_request(Bytes::from_static(&[0xff, 0xff])).is_err());
    // v2 header with an unknown version never reaches v2 (first byte 3 is not v2): v3 rejects.
    assert!(folio_proto::decode_request(Bytes::from_static(&[3, 1, 0, 0])).is_err());
}

fn roundtrip_v2_request(req: &v2::Request) -> v2::Request {
    v2::decode_request(req.to_bytes()).unwrap()
}

fn arb_key() -> impl Strategy<Value = [u8; 20]> {
    proptest::array::uniform20(any::<u8>())
}

fn arb_v2_request() -> impl Strategy<Value = v2::Request> {
    prop_oneof![
        (
            any::<u16>(),
            arb_key(),
            any::<i64>(),
            any::<i64>(),
            proptest::collection::vec(any::<u8>(), 0..64)
        )
            .prop_map(|(flags, master_key, ledger_id, entry_id, tail)| {
                let mut entry = ledger_id.to_be_bytes().to_vec();
                entry.extend_from_slice(&entry_id.to_be_bytes());
                entry.extend(tail);
                v2::Request::Add(v2::AddRequest {
                    version: 2,
                    flags: v2::Flags(flags),
                    master_key,
                    ledger_id,
                    entry_id,
                    entry: Bytes::from(entry),
                })
            }),
        (
            any::<bool>(),
            any::<bool>(),
            arb_key(),
            any::<i64>(),
            any::<i64>()
        )
            .prop_map(|(fence, high, key, ledger_id, entry_id)| {
                let mut flags = v2::Flags::NONE;
                if fence {
                    flags = flags | v2::Flags::DO_FENCING;
                }
                if high {
                    flags = flags | v2::Flags::HIGH_PRIORITY;
                }
                v2::Request::Read(v2::ReadRequest {
                    version: 2,
                    flags,
                    ledger_id,
                    entry_id,
                    master_key: fence.then_some(key),
                })
            }),
        (any::<bool>(), arb_key(), any::<(i64, i64, i64, i32, i64)>()).prop_map(
            |(fence, key, (ledger_id, start_entry_id, request_id, max_count, max_size))| {
                v2::Request::BatchRead(v2::BatchReadRequest {
                    version: 2,
                    flags: if fence {
                        v2::Flags::DO_FENCING
                    } else {
                        v2::Flags::NONE
                    },
                    ledger_id,
                    start_entry_id,
                    request_id,
                    max_count,
                    max_size,
                    master_key: fence.then_some(key),
                })
            }
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Random bytes through the frame decoder and both top-level decoders: errors allowed,
    /// panics not.
    #[test]
    fn random_streams_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512), chunk in 1usize..64) {
        let mut d = FrameDecoder::with_max_frame_size(1024);
        for piece in data.chunks(chunk) {
            d.feed(piece);
            while let Ok(Some(frame)) = d.next_frame() {
                let _ = folio_proto::decode_request(frame.clone());
                let _ = folio_proto::decode_response(frame);
            }
        }
    }

    /// Random bodies straight into each decoder.
    #[test]
    fn random_bodies_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        let b = Bytes::from(data);
        let _ = v2::decode_request(b.clone());
        let _ = v2::decode_response(b.clone());
        let _ = v3::decode_request(b.clone());
        let _ = v3::decode_response(b);
    }

    /// Random bodies behind a valid v2 header word reach the op-specific parsers.
    #[test]
    fn random_v2_bodies_never_panic(op in 0u8..9, flags in any::<u16>(), version in 0u8..3, tail in proptest::collection::vec(any::<u8>(), 0..80)) {
        let mut body = if version == 0 { u32::from(op).to_be_bytes().to_vec() } else {
            vec![version, op, (flags >> 8) as u8, flags as u8]
        };
        body.extend(tail);
        let b = Bytes::from(body);
        let _ = v2::decode_request(b.clone());
        let _ = v2::decode_response(b);
    }

    /// Every v2 request we encode decodes to itself.
    #[test]
    fn v2_requests_round_trip(req in arb_v2_request()) {
        prop_assert_eq!(roundtrip_v2_request(&req), req);
    }

    /// Every header word with a known version and opcode round-trips.
    #[test]
    fn v2_header_words_round_trip(version in 1u8..3, op in 1u8..8, flags in any::<u16>()) {
        let word = (u32::from(version) << 24) | (u32::from(op) << 16) | u32::from(flags);
        let h = v2::PacketHeader::from_word(word).unwrap();
        prop_assert_eq!(h.to_word(), word);
    }
}

fn valid_v3_request_bytes() -> Vec<u8> {
    let req = folio_proto::pb::Request {
        header: v3::request_header(folio_proto::pb::OperationType::AddEntry, 77, Some(100)),
        add_request: Some(folio_proto::pb::AddRequest {
            flag: Some(1),
            ledger_id: 5,
            entry_id: 6,
            master_key: Bytes::from_static(&[1; 20]),
            body: Bytes::from_static(b"entry with digest"),
            write_flags: Some(1),
        }),
        request_context: vec![folio_proto::pb::ContextPair {
            key: "a".into(),
            value: "b".into(),
        }],
        ..Default::default()
    };
    v3::encode_request(&req).to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Valid v3 bytes with one byte changed or cut short: decoded or rejected, never a panic,
    /// and whatever decodes re-encodes to something that decodes again.
    #[test]
    fn mutated_v3_requests_never_panic(pos in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<prop::sample::Index>()) {
        let mut bytes = valid_v3_request_bytes();
        let i = pos.index(bytes.len());
        bytes[i] = byte;
        let n = cut.index(bytes.len() + 1);
        for candidate in [&bytes[..], &bytes[..n]] {
            if let Ok(req) = v3::decode_request(Bytes::copy_from_slice(candidate)) {
                prop_assert!(v3::decode_request(v3::encode_request(&req)).is_ok());
            }
            let _ = v3::decode_response(Bytes::copy_from_slice(candidate));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Frames of any mix of sizes, small and large, read the way a socket is read
    /// (`read_buf`, as much as each read offers and the peer has sent): every read offers
    /// room (none would read as the end of the stream), and the frames come out whole
    /// and in order.
    #[test]
    fn frames_of_mixed_sizes_read_through_read_buf(
        sizes in proptest::collection::vec(prop_oneof![0usize..200, 16_000usize..70_000], 1..12),
        sent in proptest::collection::vec(1usize..100_000, 1..8),
    ) {
        let (bodies, wire) = framed_bodies(&sizes, 7);
        let mut d = FrameDecoder::new();
        let mut frames = Vec::new();
        let mut at = 0;
        let mut step = 0;
        while at < wire.len() {
            // The peer has sent up to `avail`; one read takes what fits.
            let avail = (wire.len() - at).min(sent[step % sent.len()]);
            step += 1;
            let mut buf = d.read_buf();
            let room = buf.chunk_mut().len();
            prop_assert!(room > 0, "a read offered no room");
            let n = avail.min(room);
            buf.put_slice(&wire[at..at + n]);
            at += n;
            while let Some(f) = d.next_frame().unwrap() {
                frames.push(f);
            }
        }
        prop_assert_eq!(frames.len(), bodies.len());
        for (f, b) in frames.iter().zip(&bodies) {
            prop_assert!(f.as_ref() == b.as_slice());
        }
        prop_assert_eq!(d.buffered(), 0);
    }
}
