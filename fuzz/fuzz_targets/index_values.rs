//! Index keys and values (docs/formats/index.md) through their decoders, as a damaged index
//! file could hand them back: nothing may panic, and what decodes encodes to the same bytes.
#![no_main]

use folio_storage::index::codec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(ledger) = codec::decode_ledger_key(data) {
        assert_eq!(codec::ledger_key(ledger).as_slice(), data);
    }
    if let Ok((ledger, entry)) = codec::decode_entry_key(data) {
        assert_eq!(codec::entry_key(ledger, entry).as_slice(), data);
    }
    if let Ok(location) = codec::decode_location(data) {
        assert_eq!(codec::encode_location(location).as_slice(), data);
    }
    if let Ok(block) = codec::Block::decode(data) {
        assert_eq!(block.encode(), data);
        assert_eq!(codec::Block::count_encoded(data), Ok(block.len()));
        for slot in 0..codec::BLOCK_SLOTS as usize {
            assert_eq!(codec::Block::decode_slot(data, slot), Ok(block.get(slot)));
        }
    } else {
        assert!(codec::Block::count_encoded(data).is_err());
    }
    if let Ok(info) = codec::decode_ledger_info(data) {
        let again = codec::encode_ledger_info(&info);
        assert_eq!(codec::decode_ledger_info(&again), Ok(info));
    }
});
