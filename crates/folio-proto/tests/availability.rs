//! availabilityOfEntriesOfLedger encoding (spec 2.6).

use folio_proto::ProtoError;
use folio_proto::availability::{AvailabilityOfEntries, HEADER_SIZE, SequenceGroup};
use proptest::prelude::*;

#[test]
fn striped_entries_form_one_group_with_bookkeeper_layout() {
    // Ensemble 3, write quorum 2: bookie 0 holds 0,1, 3,4, 6,7.
    let a = AvailabilityOfEntries::from_sorted_entries([0, 1, 3, 4, 6, 7]);
    assert_eq!(
        a.groups,
        vec![SequenceGroup {
            first_start: 0,
            last_start: 6,
            size: 2,
            period: 3
        }]
    );
    let bytes = a.encode();
    let mut expected = vec![0, 0, 0, 0, 0, 0, 0, 1];
    expected.extend([0u8; 56]);
    expected.extend(0i64.to_be_bytes());
    expected.extend(6i64.to_be_bytes());
    expected.extend(2i32.to_be_bytes());
    expected.extend(3i32.to_be_bytes());
    assert_eq!(&bytes[..], &expected[..]);
    assert_eq!(AvailabilityOfEntries::decode(&bytes).unwrap(), a);
    assert_eq!(a.entries().collect::<Vec<_>>(), vec![0, 1, 3, 4, 6, 7]);
    assert_eq!(a.len(), 6);
    assert!(a.contains(4) && !a.contains(5) && !a.contains(8) && !a.contains(-1));
}

#[test]
fn empty_and_irregular_sets() {
    let empty = AvailabilityOfEntries::from_sorted_entries([]);
    assert_eq!(empty.encode().len(), HEADER_SIZE);
    assert!(
        AvailabilityOfEntries::decode(&empty.encode())
            .unwrap()
            .is_empty()
    );
    let ids = [2, 3, 4, 10, 11, 12, 20, 30, 31];
    let a = AvailabilityOfEntries::from_sorted_entries(ids);
    assert_eq!(a.entries().collect::<Vec<_>>(), ids);
}

#[test]
fn malformed_bytes_are_errors() {
    let good = AvailabilityOfEntries::from_sorted_entries([0, 1, 3, 4]).encode();
    assert!(matches!(
        AvailabilityOfEntries::decode(&good[..HEADER_SIZE - 1]),
        Err(ProtoError::Truncated { .. })
    ));
    assert!(matches!(
        AvailabilityOfEntries::decode(&good[..good.len() - 1]),
        Err(ProtoError::Truncated { .. })
    ));
    let mut v1 = good.to_vec();
    v1[3] = 1;
    assert!(matches!(
        AvailabilityOfEntries::decode(&v1),
        Err(ProtoError::BadAvailability(_))
    ));
    let mut zero_size = good.to_vec();
    zero_size[HEADER_SIZE + 16..HEADER_SIZE + 20].copy_from_slice(&0i32.to_be_bytes());
    assert!(matches!(
        AvailabilityOfEntries::decode(&zero_size),
        Err(ProtoError::BadAvailability(_))
    ));
    let mut huge_count = good.to_vec();
    huge_count[4..8].copy_from_slice(&i32::MAX.to_be_bytes());
    assert!(AvailabilityOfEntries::decode(&huge_count).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn round_trips_any_set(set in proptest::collection::btree_set(0i64..2000, 0..200)) {
        let a = AvailabilityOfEntries::from_sorted_entries(set.iter().copied());
        let back = AvailabilityOfEntries::decode(&a.encode()).unwrap();
        prop_assert_eq!(back.entries().collect::<Vec<_>>(), set.iter().copied().collect::<Vec<_>>());
        for e in -1..2001 {
            prop_assert_eq!(back.contains(e), set.contains(&e));
        }
    }

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(a) = AvailabilityOfEntries::decode(&data) {
            let _ = a.len();
        }
    }
}

#[test]
fn extreme_values_do_not_overflow() {
    let a = AvailabilityOfEntries::from_sorted_entries([i64::MAX - 1, i64::MAX]);
    assert!(a.contains(i64::MAX - 1) && a.contains(i64::MAX));
    assert_eq!(
        a.entries().collect::<Vec<_>>(),
        vec![i64::MAX - 1, i64::MAX]
    );
    // A decoded group covering nearly all ids reports a saturated length instead of panicking.
    let g = SequenceGroup {
        first_start: 0,
        last_start: i64::MAX - i64::from(i32::MAX),
        size: i32::MAX,
        period: 1,
    };
    let bytes = AvailabilityOfEntries { groups: vec![g, g] }.encode();
    let back = AvailabilityOfEntries::decode(&bytes).unwrap();
    assert_eq!(back.len(), u64::MAX);
}
