//! Entry log bytes through their decoders: the 64-byte header (with its rotation patch), a
//! record read back at an indexed location, the ledgers map of a rotated log. Nothing may
//! panic; what decodes is what the encoder would have written.
#![no_main]

use bytes::Bytes;
use folio_storage::entry_log::format;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(h) = data.get(..format::HEADER_LEN) {
        let _ = format::decode_header(h.try_into().unwrap());
    }
    // A record as the index points at it, for the ledger and entry its header claims.
    let record = Bytes::copy_from_slice(data);
    if data.len() >= 24 {
        let ledger = i64::from_le_bytes(data[8..16].try_into().unwrap());
        let entry = i64::from_le_bytes(data[16..24].try_into().unwrap());
        if let Ok(payload) = format::decode_record(record.clone(), ledger, entry) {
            let mut again = Vec::new();
            format::encode_record(&mut again, ledger, entry, &payload);
            assert_eq!(again, data);
        }
    }
    let count = data.len() as u32 / 16;
    if let Ok(items) = format::decode_ledgers_map(&data[..count as usize * 16], count) {
        assert_eq!(format::encode_ledgers_map(&items).as_ref(), &data[..count as usize * 16]);
    }
    let _ = format::decode_ledgers_map(data, data.first().copied().unwrap_or(0).into());
});
