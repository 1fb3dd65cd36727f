//! Where BookKeeper keeps things in ZooKeeper and etcd (spec/bookkeeper-protocol.md
//! sections 5.2 to 5.8 and 6): the LAYOUT texts, the hierarchical ledger paths, the
//! under-replication paths, the etcd ledger keys, and the protobuf *text format*
//! records of the under-replication manager. Pure functions, shared by the `zk://`
//! and `etcd://` drivers so both agree with Java BookKeeper byte for byte.

use std::collections::BTreeSet;

use folio_types::{BookieId, LedgerId};

use crate::{Result, text};

/// `<root>/LAYOUT` as BookKeeper writes it for the hierarchical ledger manager.
pub const ZK_LAYOUT_TEXT: &str = "2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1";

/// `<scope>/layout` as BookKeeper's etcd driver writes it.
pub const ETCD_LAYOUT_TEXT: &str =
    "2\norg.apache.bookkeeper.metadata.etcd.EtcdLedgerManagerFactory:0";

/// Children of the ZooKeeper root that are never ledgers.
pub const ZK_RESERVED_NAMES: &[&str] = &[
    "available",
    "cookies",
    "LAYOUT",
    "INSTANCEID",
    "underreplication",
    "idgen",
    "idgen-long",
    "disableHealthCheck",
];

/// The under-replication LAYOUT (text format of `LedgerRereplicationLayoutFormat`, §5.8).
pub const UNDERREPLICATION_LAYOUT_TEXT: &str = "type: \"BASIC\"\nversion: 1\n";

/// Digit groups of the hierarchical (10-digit) and long-hierarchical (19-digit) ledger paths.
pub const SHORT_SPLIT: &[usize] = &[2, 4, 4];
pub const LONG_SPLIT: &[usize] = &[3, 4, 4, 4, 4];

/// Ids from here on use the long form (BookKeeper: `ledgerId >= Integer.MAX_VALUE`).
pub const LONG_FORM_FROM: LedgerId = i32::MAX as LedgerId;

/// The hierarchical ledger manager's znode of a ledger relative to the root: ids below
/// 2^31-1 as 10 digits split 2-4-4 (`00/0000/L0001`), larger ones as 19 digits split
/// 3-4-4-4-4 (`000/0000/0021/4748/L3647`).
pub fn hierarchical_ledger_rel(ledger: LedgerId) -> String {
    let (digits, split) = if ledger < LONG_FORM_FROM {
        (format!("{ledger:010}"), SHORT_SPLIT)
    } else {
        (format!("{ledger:019}"), LONG_SPLIT)
    };
    let mut out = String::with_capacity(digits.len() + split.len());
    let mut at = 0;
    for (i, width) in split.iter().enumerate() {
        if i + 1 == split.len() {
            out.push('L');
        }
        out.push_str(&digits[at..at + width]);
        if i + 1 < split.len() {
            out.push('/');
        }
        at += width;
    }
    out
}

/// The hierarchical ledger manager's znode of a ledger: `<root>/` + [`hierarchical_ledger_rel`].
pub fn hierarchical_ledger_path(root: &str, ledger: LedgerId) -> String {
    format!("{root}/{}", hierarchical_ledger_rel(ledger))
}

/// The ledger id of a hierarchical ledger znode path (the inverse of
/// [`hierarchical_ledger_path`]); `None` for anything that is not a ledger's path.
pub fn ledger_id_from_hierarchical_path(root: &str, path: &str) -> Option<LedgerId> {
    let rest = path.strip_prefix(root)?.strip_prefix('/')?;
    let parts: Vec<&str> = rest.split('/').collect();
    let widths: &[usize] = match parts.len() {
        3 => SHORT_SPLIT,
        5 => LONG_SPLIT,
        _ => return None,
    };
    let mut digits = String::new();
    for (i, (part, width)) in parts.iter().zip(widths).enumerate() {
        if !is_ledger_path_group(part, *width, i + 1 == parts.len()) {
            return None;
        }
        digits.push_str(part.trim_start_matches('L'));
    }
    let id: LedgerId = digits.parse().ok()?;
    // Each id has exactly one path: reject a short path for a long id and vice versa.
    (hierarchical_ledger_path(root, id) == path).then_some(id)
}

/// Whether `name` can be a digit group of the given width of a ledger path (a directory or,
/// with `leaf`, the `L`-prefixed leaf). Everything else under the root (`available`,
/// `LAYOUT`, `idgen`, ...) is not part of a ledger's path.
pub fn is_ledger_path_group(name: &str, width: usize, leaf: bool) -> bool {
    let digits = if leaf {
        match name.strip_prefix('L') {
            Some(d) => d,
            None => return false,
        }
    } else {
        name
    };
    digits.len() == width && digits.bytes().all(|b| b.is_ascii_digit())
}

/// An under-replication mark relative to the root:
/// `underreplication/ledgers/<hhhh>/<hhhh>/<hhhh>/<hhhh>/urL<id %010d>`.
pub fn underreplicated_ledger_rel(ledger: LedgerId) -> String {
    let u = ledger as u64;
    format!(
        "underreplication/ledgers/{:04x}/{:04x}/{:04x}/{:04x}/urL{ledger:010}",
        (u >> 48) & 0xffff,
        (u >> 32) & 0xffff,
        (u >> 16) & 0xffff,
        u & 0xffff
    )
}

/// `<root>/` + [`underreplicated_ledger_rel`].
pub fn underreplicated_ledger_path(root: &str, ledger: LedgerId) -> String {
    format!("{root}/{}", underreplicated_ledger_rel(ledger))
}

/// An under-replication lock relative to the root: `underreplication/locks/urL<id %010d>`.
pub fn underreplication_lock_rel(ledger: LedgerId) -> String {
    format!("underreplication/locks/urL{ledger:010}")
}

/// Folio's operation records (a recover's or a decommission's progress, for every dashboard;
/// docs/formats/operations.md), relative to the root: `underreplication/folio-operations`,
/// beside BookKeeper's autorecovery records, which no BookKeeper code lists.
pub const OPERATIONS_REL: &str = "underreplication/folio-operations";

/// `<root>/` + [`underreplication_lock_rel`].
pub fn underreplication_lock_path(root: &str, ledger: LedgerId) -> String {
    format!("{root}/{}", underreplication_lock_rel(ledger))
}

/// The ledger id of an `urL<digits>` node name.
pub fn ledger_id_from_underreplicated_name(name: &str) -> Option<LedgerId> {
    let digits = name.strip_prefix("urL")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// BookKeeper's etcd name of a ledger: Java's `new UUID(0, ledgerId).toString()`,
/// `00000000-0000-0000-hhhh-hhhhhhhhhhhh` (fixed-width lowercase hex, so key order is id
/// order).
pub fn ledger_uuid(ledger: LedgerId) -> String {
    let u = ledger as u64;
    format!(
        "00000000-0000-0000-{:04x}-{:012x}",
        (u >> 48) & 0xffff,
        u & 0xffff_ffff_ffff
    )
}

/// The ledger id of a [`ledger_uuid`] string.
pub fn ledger_id_from_uuid(uuid: &str) -> Option<LedgerId> {
    let rest = uuid.strip_prefix("00000000-0000-0000-")?;
    let (hi, lo) = rest.split_once('-')?;
    if hi.len() != 4 || lo.len() != 12 {
        return None;
    }
    let hi = u64::from_str_radix(hi, 16).ok()?;
    let lo = u64::from_str_radix(lo, 16).ok()?;
    Some(((hi << 48) | lo) as LedgerId)
}

/// The etcd key of a ledger: `<scope>/ledgers/` + [`ledger_uuid`].
pub fn etcd_ledger_key(scope: &str, ledger: LedgerId) -> String {
    format!("{scope}/ledgers/{}", ledger_uuid(ledger))
}

/// The ledger id of an etcd ledger key (inverse of [`etcd_ledger_key`]).
pub fn ledger_id_from_etcd_key(scope: &str, key: &str) -> Option<LedgerId> {
    ledger_id_from_uuid(key.strip_prefix(scope)?.strip_prefix("/ledgers/")?)
}

/// Protobuf text format of `UnderreplicatedLedgerFormat` (what BookKeeper stores in
/// ZooKeeper): one `replica: "<id>"` line per missing bookie, then `ctime: <ms>`
/// ([`text::encode_underreplicated`] as a string).
pub fn underreplicated_text(missing: &BTreeSet<BookieId>, ctime: Option<i64>) -> String {
    String::from_utf8_lossy(&text::encode_underreplicated(missing, ctime)).into_owned()
}

/// Parses [`underreplicated_text`]'s format ([`text::decode_underreplicated`]; unknown
/// fields are skipped, as protobuf does); `ledger` names the record in errors.
pub fn parse_underreplicated_text(
    ledger: LedgerId,
    data: &[u8],
) -> Result<(BTreeSet<BookieId>, Option<i64>)> {
    let mark = text::decode_underreplicated(ledger, data)?;
    Ok((mark.missing_replicas, mark.ctime))
}

/// Protobuf text format of `LockDataFormat` / `AuditorVoteFormat`: `bookieId: "<id>"`
/// ([`text::encode_bookie_id`] as a string).
pub fn bookie_id_text(bookie: &str) -> String {
    String::from_utf8_lossy(&text::encode_bookie_id(bookie)).into_owned()
}

/// The `bookieId` of a `LockDataFormat` / `AuditorVoteFormat` text record, whatever it holds.
pub fn parse_bookie_id_text(data: &[u8]) -> Option<String> {
    let fields = text::parse(std::str::from_utf8(data).ok()?).ok()?;
    text::strings(&fields, "bookieId")
        .first()
        .map(|s| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hierarchical_paths_match_the_spec_examples() {
        assert_eq!(
            hierarchical_ledger_path("/ledgers", 1),
            "/ledgers/00/0000/L0001"
        );
        assert_eq!(
            hierarchical_ledger_path("/ledgers", 123456789),
            "/ledgers/01/2345/L6789"
        );
        assert_eq!(
            hierarchical_ledger_path("/ledgers", i32::MAX as i64),
            "/ledgers/000/0000/0021/4748/L3647"
        );
        for id in [
            0,
            1,
            123456789,
            i32::MAX as i64 - 1,
            i32::MAX as i64,
            0x7fff_ffff_ffff_ffff,
        ] {
            let p = hierarchical_ledger_path("/x/y", id);
            assert_eq!(
                ledger_id_from_hierarchical_path("/x/y", &p),
                Some(id),
                "{p}"
            );
        }
        for bad in [
            "/ledgers/00/0000/0001",
            "/ledgers/00/0000",
            "/ledgers/available/readonly/x",
            "/ledgers/00/000a/L0001",
            "/other/00/0000/L0001",
            // a short id written in the long form
            "/ledgers/000/0000/0000/0000/L0001",
        ] {
            assert_eq!(
                ledger_id_from_hierarchical_path("/ledgers", bad),
                None,
                "{bad}"
            );
        }
    }

    #[test]
    fn relative_ledger_paths_match_bookkeeper_examples() {
        assert_eq!(hierarchical_ledger_rel(1), "00/0000/L0001");
        assert_eq!(hierarchical_ledger_rel(123456789), "01/2345/L6789");
        assert_eq!(hierarchical_ledger_rel(2147483646), "21/4748/L3646");
        assert_eq!(
            hierarchical_ledger_rel(2147483647),
            "000/0000/0021/4748/L3647"
        );
        assert_eq!(
            hierarchical_ledger_rel(i64::MAX),
            "922/3372/0368/5477/L5807"
        );
        assert!(is_ledger_path_group("00", 2, false));
        assert!(!is_ledger_path_group("available", 2, false));
        assert!(!is_ledger_path_group("ID-0000000001", 2, false));
        assert!(is_ledger_path_group("L0001", 4, true));
        assert!(!is_ledger_path_group("0001", 4, true));
    }

    #[test]
    fn underreplication_paths_match_the_spec_example() {
        let id = 0xcafebeef0000feed_u64 as i64;
        let p = underreplicated_ledger_path("/ledgers", id);
        assert!(
            p.starts_with("/ledgers/underreplication/ledgers/cafe/beef/0000/feed/urL"),
            "{p}"
        );
        assert_eq!(
            underreplicated_ledger_path("/ledgers", 7),
            "/ledgers/underreplication/ledgers/0000/0000/0000/0007/urL0000000007"
        );
        assert_eq!(
            underreplication_lock_path("/ledgers", 7),
            "/ledgers/underreplication/locks/urL0000000007"
        );
        assert_eq!(
            ledger_id_from_underreplicated_name("urL0000000007"),
            Some(7)
        );
        assert_eq!(ledger_id_from_underreplicated_name("urLx"), None);
        assert_eq!(ledger_id_from_underreplicated_name("L0007"), None);
    }

    #[test]
    fn etcd_keys_are_java_uuid_strings() {
        assert_eq!(
            etcd_ledger_key("/ledgers", 1),
            "/ledgers/ledgers/00000000-0000-0000-0000-000000000001"
        );
        let big = 0x0123_4567_89ab_cdef;
        assert_eq!(
            etcd_ledger_key("/s", big),
            "/s/ledgers/00000000-0000-0000-0123-456789abcdef"
        );
        assert_eq!(
            ledger_id_from_etcd_key("/s", &etcd_ledger_key("/s", big)),
            Some(big)
        );
        assert_eq!(ledger_id_from_etcd_key("/s", "/s/ledgers/garbage"), None);
        for id in [
            0,
            1,
            255,
            i32::MAX as i64,
            1 << 56,
            (127 << 56) | 5,
            i64::MAX,
        ] {
            assert_eq!(ledger_id_from_uuid(&ledger_uuid(id)), Some(id));
        }
        assert_eq!(ledger_id_from_uuid("junk"), None);
        // Fixed-width lowercase hex: key order is id order.
        assert!(ledger_uuid(9) < ledger_uuid(10));
        assert!(ledger_uuid(0xffff) < ledger_uuid(1 << 48));
    }

    #[test]
    fn text_records_round_trip() {
        let missing: BTreeSet<_> =
            [BookieId::new("a:1").unwrap(), BookieId::new("b:2").unwrap()].into();
        let t = underreplicated_text(&missing, Some(99));
        assert_eq!(t, "replica: \"a:1\"\nreplica: \"b:2\"\nctime: 99\n");
        assert_eq!(
            parse_underreplicated_text(4, t.as_bytes()).unwrap(),
            (missing, Some(99))
        );
        let e = parse_underreplicated_text(4, b"replica: a:1").unwrap_err();
        assert!(e.to_string().contains("ledger 4"), "{e}");
        let e = parse_underreplicated_text(4, b"replica \"a:1\"").unwrap_err();
        assert!(e.to_string().contains("ledger 4"), "{e}");
        assert_eq!(bookie_id_text("h:1"), "bookieId: \"h:1\"\n");
        assert_eq!(
            parse_bookie_id_text(bookie_id_text("h:1").as_bytes()).as_deref(),
            Some("h:1")
        );
        assert_eq!(parse_bookie_id_text(b"nothing"), None);
    }
}
