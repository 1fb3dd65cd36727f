//! Arbitrary byte streams through the frame decoder and the protocol-detecting decoders.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut d = folio_proto::FrameDecoder::with_max_frame_size(64 * 1024);
    // Feed in uneven pieces so partial prefixes and bodies are exercised.
    for piece in data.chunks(7) {
        d.feed(piece);
        while let Ok(Some(frame)) = d.next_frame() {
            let _ = folio_proto::decode_request(frame.clone());
            let _ = folio_proto::decode_response(frame);
        }
    }
});
