//! Cookie text (a bookie directory's `current/VERSION`, or the metadata store's copy) through
//! the parser: nothing may panic, and a parsed cookie prints as text that parses to itself.
#![no_main]

use folio_storage::cookie::Cookie;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(cookie) = Cookie::parse(data) {
        assert_eq!(Cookie::parse(&cookie.to_bytes()), Ok(cookie));
    }
});
