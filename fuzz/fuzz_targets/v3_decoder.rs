//! Arbitrary frame bodies through the v3 decoders; whatever decodes must re-encode to bytes
//! that decode to the same message.
#![no_main]

use bytes::Bytes;
use folio_proto::v3;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let body = Bytes::copy_from_slice(data);
    if let Ok(req) = v3::decode_request(body.clone()) {
        assert_eq!(v3::decode_request(v3::encode_request(&req)).as_ref(), Ok(&req));
    }
    if let Ok(resp) = v3::decode_response(body) {
        assert_eq!(v3::decode_response(v3::encode_response(&resp)).as_ref(), Ok(&resp));
    }
});
