//! The bytes this driver stores for records BookKeeper serializes: ledger metadata
//! (format version 3, `LedgerMetadataSerDe`) and bookie service info
//! (`BookieServiceInfoFormat`) come from `folio_metadata::format`, so every driver
//! stores the very same bytes; decoding failures name the record.

use folio_metadata::{BookieServiceInfo, MetadataError, Result};
use folio_types::metadata::LedgerMetadata;
use folio_types::{BookieId, LedgerId};

pub(crate) fn encode_ledger(ledger: LedgerId, metadata: &LedgerMetadata) -> Result<Vec<u8>> {
    folio_metadata::format::encode_ledger_metadata(metadata).map_err(|e| match e {
        MetadataError::InvalidArgument(m) => {
            MetadataError::InvalidArgument(format!("metadata of ledger {ledger}: {m}"))
        }
        e => e,
    })
}

pub(crate) fn decode_ledger(ledger: LedgerId, data: &[u8]) -> Result<LedgerMetadata> {
    folio_metadata::format::decode_ledger_metadata(ledger, data)
}

pub(crate) fn encode_service_info(info: &BookieServiceInfo) -> Vec<u8> {
    folio_metadata::format::encode_bookie_service_info(info)
}

pub(crate) fn decode_service_info(bookie: &BookieId, data: &[u8]) -> Result<BookieServiceInfo> {
    folio_metadata::format::decode_bookie_service_info(bookie, data)
}

/// A random (version 4) UUID string, BookKeeper's `INSTANCEID`.
pub(crate) fn new_instance_id() -> String {
    let mut b = [0u8; 16];
    for x in b.iter_mut() {
        *x = fastrand::u8(..);
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn instance_ids_are_uuid_v4_strings() {
        let a = super::new_instance_id();
        let b = super::new_instance_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(a.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
    }
}
