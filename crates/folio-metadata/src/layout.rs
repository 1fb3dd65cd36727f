//! Where BookKeeper keeps things in ZooKeeper and etcd (spec/bookkeeper-protocol.md
//! sections 5.2 to 5.8 and 6): the LAYOUT texts, the hierarchical ledger paths, the
//! under-replication paths, the etcd ledger keys, and the protobuf *text format*
//! records of the under-replication manager. Pure functions, shared by the `zk://`
//! and `etcd://` drivers so both agree with Java BookKeeper byte for byte.

use std::collections::BTreeSet;

use folio_types::{BookieId, LedgerId};

use crate::{MetadataError, Result};

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

/// The hierarchical ledger manager's znode of a ledger: ids below 2^31-1 as 10 digits
/// split 2-4-4 (`<root>/00/0000/L0001`), larger ones as 19 digits split 3-4-4-4-4.
pub fn hierarchical_ledger_path(root: &str, ledger: LedgerId) -> String {
    if ledger < i32::MAX as i64 {
        let d = format!("{ledger:010}");
        format!("{root}/{}/{}/L{}", &d[0..2], &d[2..6], &d[6..10])
    } else {
        let d = format!("{ledger:019}");
        format!(
            "{root}/{}/{}/{}/{}/L{}",
            &d[0..3],
            &d[3..7],
            &d[7..11],
            &d[11..15],
            &d[15..19]
        )
    }
}

/// The ledger id of a hierarchical ledger znode path (the inverse of
/// [`hierarchical_ledger_path`]); `None` for anything that is not a ledger's path.
pub fn ledger_id_from_hierarchical_path(root: &str, path: &str) -> Option<LedgerId> {
    let rest = path.strip_prefix(root)?.strip_prefix('/')?;
    let parts: Vec<&str> = rest.split('/').collect();
    let widths: &[usize] = match parts.len() {
        3 => &[2, 4, 4],
        5 => &[3, 4, 4, 4, 4],
        _ => return None,
    };
    let mut digits = String::new();
    for (i, (part, width)) in parts.iter().zip(widths).enumerate() {
        let part = if i + 1 == parts.len() {
            part.strip_prefix('L')?
        } else {
            part
        };
        if part.len() != *width || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.push_str(part);
    }
    let id: LedgerId = digits.parse().ok()?;
    // Each id has exactly one path: reject a short path for a long id and vice versa.
    (hierarchical_ledger_path(root, id) == path).then_some(id)
}

/// `<root>/underreplication/ledgers/<hhhh>/<hhhh>/<hhhh>/<hhhh>/urL<id %010d>`.
pub fn underreplicated_ledger_path(root: &str, ledger: LedgerId) -> String {
    let u = ledger as u64;
    format!(
        "{root}/underreplication/ledgers/{:04x}/{:04x}/{:04x}/{:04x}/urL{ledger:010}",
        (u >> 48) & 0xffff,
        (u >> 32) & 0xffff,
        (u >> 16) & 0xffff,
        u & 0xffff
    )
}

/// `<root>/underreplication/locks/urL<id %010d>`.
pub fn underreplication_lock_path(root: &str, ledger: LedgerId) -> String {
    format!("{root}/underreplication/locks/urL{ledger:010}")
}

/// The ledger id of an `urL<digits>` node name.
pub fn ledger_id_from_underreplicated_name(name: &str) -> Option<LedgerId> {
    let digits = name.strip_prefix("urL")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The etcd key of a ledger: `<scope>/ledgers/` + Java's `UUID(0, ledgerId)` string.
pub fn etcd_ledger_key(scope: &str, ledger: LedgerId) -> String {
    let u = ledger as u64;
    format!(
        "{scope}/ledgers/00000000-0000-0000-{:04x}-{:012x}",
        u >> 48,
        u & 0xffff_ffff_ffff
    )
}

/// The ledger id of an etcd ledger key (inverse of [`etcd_ledger_key`]).
pub fn ledger_id_from_etcd_key(scope: &str, key: &str) -> Option<LedgerId> {
    let uuid = key.strip_prefix(scope)?.strip_prefix("/ledgers/")?;
    let rest = uuid.strip_prefix("00000000-0000-0000-")?;
    let (hi, lo) = rest.split_once('-')?;
    if hi.len() != 4 || lo.len() != 12 {
        return None;
    }
    let hi = u64::from_str_radix(hi, 16).ok()?;
    let lo = u64::from_str_radix(lo, 16).ok()?;
    Some(((hi << 48) | lo) as LedgerId)
}

/// Protobuf text format of `UnderreplicatedLedgerFormat` (what BookKeeper stores in
/// ZooKeeper): one `replica: "<id>"` line per missing bookie, then `ctime: <ms>`.
pub fn underreplicated_text(missing: &BTreeSet<BookieId>, ctime: Option<i64>) -> String {
    let mut out = String::new();
    for b in missing {
        out.push_str(&format!("replica: \"{b}\"\n"));
    }
    if let Some(c) = ctime {
        out.push_str(&format!("ctime: {c}\n"));
    }
    out
}

/// Parses [`underreplicated_text`]'s format (unknown fields are skipped, as protobuf
/// does); `ledger` names the record in errors.
pub fn parse_underreplicated_text(
    ledger: LedgerId,
    text: &[u8],
) -> Result<(BTreeSet<BookieId>, Option<i64>)> {
    let what = format!("under-replication mark of ledger {ledger}");
    let text = std::str::from_utf8(text)
        .map_err(|e| MetadataError::corrupt(&what, format!("not UTF-8: {e}")))?;
    let mut missing = BTreeSet::new();
    let mut ctime = None;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let Some((key, value)) = line.split_once(':') else {
            return Err(MetadataError::corrupt(&what, format!("bad line {line:?}")));
        };
        let value = value.trim();
        match key.trim() {
            "replica" => {
                let id = value
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .ok_or_else(|| {
                        MetadataError::corrupt(&what, format!("unquoted replica {value:?}"))
                    })?;
                let id =
                    BookieId::new(id).map_err(|e| MetadataError::corrupt(&what, e.to_string()))?;
                missing.insert(id);
            }
            "ctime" => {
                ctime =
                    Some(value.parse().map_err(|_| {
                        MetadataError::corrupt(&what, format!("bad ctime {value:?}"))
                    })?);
            }
            _ => {}
        }
    }
    Ok((missing, ctime))
}

/// Protobuf text format of `LockDataFormat` / `AuditorVoteFormat` (both are
/// `{1: optional string bookieId}`): `bookieId: "<id>"`.
pub fn bookie_id_text(bookie: &str) -> String {
    let escaped = bookie.replace('\\', "\\\\").replace('"', "\\\"");
    format!("bookieId: \"{escaped}\"\n")
}

/// The `bookieId` of a `LockDataFormat` / `AuditorVoteFormat` text record.
pub fn parse_bookie_id_text(text: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(text).ok()?;
    text.lines().find_map(|l| {
        let v = l.trim().strip_prefix("bookieId:")?.trim();
        let v = v.strip_prefix('"')?.strip_suffix('"')?;
        Some(v.replace("\\\"", "\"").replace("\\\\", "\\"))
    })
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
        assert_eq!(bookie_id_text("h:1"), "bookieId: \"h:1\"\n");
        assert_eq!(
            parse_bookie_id_text(bookie_id_text("h:1").as_bytes()).as_deref(),
            Some("h:1")
        );
        assert_eq!(parse_bookie_id_text(b"nothing"), None);
    }
}
