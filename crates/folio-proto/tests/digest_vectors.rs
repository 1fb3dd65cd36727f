//! Entry-with-digest and master-key golden tests. The vectors are those of the spec
//! (bookkeeper-protocol.md 4.6); they were re-derived independently with Python's zlib, hashlib
//! and hmac and a bitwise CRC-32C before being written here, and the LAC-body vectors come from
//! the same independent computation.

use bytes::Bytes;
use folio_proto::digest::{self, DigestManager, DigestType, EntryHeader};
use folio_proto::{DigestError, master_key};

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const HEADER: &str = "0000000000000001 0000000000000000 ffffffffffffffff 0000000000000005";

fn expected_entry(digest_hex: &str) -> Vec<u8> {
    let mut v = unhex(HEADER);
    v.extend(unhex(digest_hex));
    v.extend_from_slice(b"hello");
    v
}

fn spec_entry(t: DigestType, password: &[u8]) -> Bytes {
    DigestManager::new(1, t, password).compute(0, -1, 5, b"hello")
}

#[test]
fn crc32_entry_matches_spec_vector() {
    assert_eq!(
        spec_entry(DigestType::Crc32, b"").to_vec(),
        expected_entry("0000000030a56872")
    );
}

#[test]
fn crc32c_entry_matches_spec_vector() {
    assert_eq!(
        spec_entry(DigestType::Crc32c, b"").to_vec(),
        expected_entry("e3a5f74d")
    );
}

#[test]
fn mac_entry_matches_spec_vector() {
    assert_eq!(
        spec_entry(DigestType::Mac, b"pwd").to_vec(),
        expected_entry("b66e20f9eebddec1e704fc3b96b2ed248b6a5ed9")
    );
}

#[test]
fn dummy_entry_has_no_digest() {
    assert_eq!(
        spec_entry(DigestType::Dummy, b"").to_vec(),
        expected_entry("")
    );
}

#[test]
fn master_keys_match_spec_vectors() {
    assert_eq!(
        master_key(b"pwd").to_vec(),
        unhex("9c31dcb7214645e06dbf8a67daa6cfcdcd13a611")
    );
    assert_eq!(
        master_key(b"").to_vec(),
        unhex("850bf1071c5e3d8c24235676f8816ae0cbe2f14f")
    );
    // The MAC key is a different digest of the same password.
    assert_ne!(digest::mac_key(b"pwd"), master_key(b"pwd"));
}

#[test]
fn lac_bodies_match_independent_vectors() {
    let cases = [
        (DigestType::Crc32, "0000000065a4cab5"),
        (DigestType::Crc32c, "62842849"),
        (DigestType::Mac, "6f0dd58dd9acb537942565580565a37c205527e0"),
        (DigestType::Dummy, ""),
    ];
    for (t, d) in cases {
        let dm = DigestManager::new(1, t, b"pwd");
        let body = dm.compute_lac(7);
        let mut expected = unhex("0000000000000001 0000000000000007");
        expected.extend(unhex(d));
        assert_eq!(body.to_vec(), expected, "{t:?}");
        assert_eq!(dm.verify_lac(&body), Ok(7), "{t:?}");
    }
}

const ALL: [DigestType; 4] = [
    DigestType::Crc32,
    DigestType::Crc32c,
    DigestType::Mac,
    DigestType::Dummy,
];

#[test]
fn verify_returns_fields_and_payload_for_every_type() {
    for t in ALL {
        let dm = DigestManager::new(42, t, b"secret");
        let entry = dm.compute(9, 8, 1234, b"payload bytes");
        assert_eq!(entry.len(), 32 + t.digest_len() + 13);
        let v = dm.verify(&entry, 9).unwrap();
        assert_eq!((v.entry_id, v.lac, v.length), (9, 8, 1234), "{t:?}");
        assert_eq!(&v.payload[..], b"payload bytes");
        assert_eq!(
            EntryHeader::peek(&entry),
            Some(EntryHeader {
                ledger_id: 42,
                entry_id: 9,
                lac: 8,
                length: 1234
            })
        );
    }
}

#[test]
fn tampered_payload_or_header_is_a_mismatch() {
    for t in [DigestType::Crc32, DigestType::Crc32c, DigestType::Mac] {
        let dm = DigestManager::new(42, t, b"secret");
        let entry = dm.compute(3, 2, 100, b"abcdef");
        let mut bad = entry.to_vec();
        *bad.last_mut().unwrap() ^= 1;
        assert!(
            matches!(
                dm.verify(&Bytes::from(bad), 3),
                Err(DigestError::Mismatch { .. })
            ),
            "{t:?} payload"
        );
        let mut bad = entry.to_vec();
        bad[20] ^= 0x80; // inside the lac field
        assert!(
            matches!(
                dm.verify(&Bytes::from(bad), 3),
                Err(DigestError::Mismatch { .. })
            ),
            "{t:?} header"
        );
    }
}

#[test]
fn mac_with_wrong_password_is_a_mismatch() {
    let entry = DigestManager::new(1, DigestType::Mac, b"right").compute(0, -1, 1, b"x");
    let other = DigestManager::new(1, DigestType::Mac, b"wrong");
    assert!(matches!(
        other.verify(&entry, 0),
        Err(DigestError::Mismatch { .. })
    ));
}

#[test]
fn wrong_ledger_and_entry_ids_are_rejected() {
    for t in ALL {
        let entry = DigestManager::new(5, t, b"p").compute(1, 0, 1, b"x");
        let other_ledger = DigestManager::new(6, t, b"p");
        assert_eq!(
            other_ledger.verify(&entry, 1),
            Err(DigestError::LedgerIdMismatch {
                expected: 6,
                actual: 5
            }),
            "{t:?}"
        );
        let dm = DigestManager::new(5, t, b"p");
        assert_eq!(
            dm.verify(&entry, 2),
            Err(DigestError::EntryIdMismatch {
                expected: 2,
                actual: 1
            })
        );
        // A last-entry read accepts whatever entry id came back.
        assert_eq!(dm.verify_any_entry(&entry).unwrap().entry_id, 1);
    }
}

#[test]
fn short_entries_and_lac_bodies_are_rejected() {
    for t in ALL {
        let dm = DigestManager::new(1, t, b"p");
        let entry = dm.compute(0, -1, 0, b"");
        let short = entry.slice(..entry.len() - 1);
        assert!(matches!(
            dm.verify(&short, 0),
            Err(DigestError::TooShort { .. })
        ));
        let lac = dm.compute_lac(3);
        assert!(matches!(
            dm.verify_lac(&lac[..lac.len() - 1]),
            Err(DigestError::TooShort { .. })
        ));
    }
}

#[test]
fn tampered_lac_body_is_rejected() {
    let dm = DigestManager::new(1, DigestType::Crc32c, b"");
    let mut body = dm.compute_lac(10).to_vec();
    body[15] ^= 1;
    assert!(matches!(
        dm.verify_lac(&body),
        Err(DigestError::Mismatch { .. })
    ));
    let other = DigestManager::new(2, DigestType::Dummy, b"");
    assert_eq!(
        other.verify_lac(&dm.compute_lac(10)[..16]),
        Err(DigestError::LedgerIdMismatch {
            expected: 2,
            actual: 1
        })
    );
}

#[test]
fn digest_type_metadata_values_round_trip() {
    for t in ALL {
        assert_eq!(DigestType::from_metadata_value(t.metadata_value()), Some(t));
    }
    assert_eq!(DigestType::Crc32.metadata_value(), 1);
    assert_eq!(DigestType::Mac.metadata_value(), 2);
    assert_eq!(DigestType::Crc32c.metadata_value(), 3);
    assert_eq!(DigestType::Dummy.metadata_value(), 4);
    assert_eq!(DigestType::from_metadata_value(0), None);
    assert_eq!(DigestType::from_metadata_value(5), None);
}
