//! What the metadata store hands back, through BookKeeper's formats: ledger metadata
//! (binary format 3), bookie service info, under-replication marks (binary and protobuf
//! text), the Auditor's check ctimes, bookie id records and the text format parser. A store
//! written by another tool, or damaged, must give errors, never panics; a ledger's metadata
//! that decodes must encode and decode to the same value.
#![no_main]

use folio_metadata::{AuditorCheck, format, text};
use folio_types::BookieId;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = format::decode_ledger_metadata(7, data) {
        if let Ok(bytes) = format::encode_ledger_metadata(&m) {
            assert_eq!(format::decode_ledger_metadata(7, &bytes).ok(), Some(m));
        }
    }
    let bookie = BookieId::new("10.0.0.1:3181").unwrap();
    let _ = format::decode_bookie_service_info(&bookie, data);
    let _ = format::decode_underreplicated(7, data);
    let _ = format::decode_check_ctime(AuditorCheck::Replicas, data);
    let _ = text::decode_underreplicated(7, data);
    let _ = text::decode_bookie_id("fuzz", data);
    let _ = text::decode_lock_holder("fuzz", data);
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = text::parse(s);
    }
});
