//! BookKeeper's ZooKeeper paths (spec/bookkeeper-protocol.md §5.2, §5.6, §5.8), relative to
//! the ledgers root (`/ledgers` by default), and their inverse for listings.
//!
//! Ledger ids below `i32::MAX` use the hierarchical 2-4-4 split of the 10-digit id
//! (`00/0000/L0001`); larger ids use the long-hierarchical 3-4-4-4-4 split of the 19-digit id
//! (`000/0000/0000/0002/L1474`), exactly as BookKeeper's default `HierarchicalLedgerManager`.

use folio_types::LedgerId;

pub const LAYOUT: &str = "LAYOUT";
pub const INSTANCEID: &str = "INSTANCEID";
pub const AVAILABLE: &str = "available";
pub const READONLY: &str = "readonly";
pub const COOKIES: &str = "cookies";
pub const IDGEN: &str = "idgen";
pub const IDGEN_LONG: &str = "idgen-long";
pub const UNDERREPLICATION: &str = "underreplication";

/// The LAYOUT content BookKeeper writes for its default ledger manager (§5.3).
pub const DEFAULT_LAYOUT: &str = "2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1";

/// The under-replication LAYOUT (text format of `LedgerRereplicationLayoutFormat`, §5.8).
pub const UNDERREPLICATION_LAYOUT: &str = "type: \"BASIC\"\nversion: 1\n";

/// Digit groups of the short (10-digit) and long (19-digit) ledger paths.
pub const SHORT_SPLIT: &[usize] = &[2, 4, 4];
pub const LONG_SPLIT: &[usize] = &[3, 4, 4, 4, 4];

/// Ids from here on use the long form (BookKeeper: `ledgerId >= Integer.MAX_VALUE`).
pub const LONG_FORM_FROM: LedgerId = i32::MAX as LedgerId;

/// Joins the root and a relative path.
pub fn join(root: &str, rel: &str) -> String {
    if rel.is_empty() {
        root.to_string()
    } else {
        format!("{root}/{rel}")
    }
}

/// The digit groups of a ledger path, the last one being the leaf (without its `L`).
fn groups(ledger: LedgerId) -> (Vec<String>, bool) {
    let (digits, split) = if ledger < LONG_FORM_FROM {
        (format!("{ledger:010}"), SHORT_SPLIT)
    } else {
        (format!("{ledger:019}"), LONG_SPLIT)
    };
    let mut out = Vec::with_capacity(split.len());
    let mut at = 0;
    for width in split {
        out.push(digits[at..at + width].to_string());
        at += width;
    }
    (out, ledger >= LONG_FORM_FROM)
}

/// A ledger's znode path relative to the root, e.g. 1 -> `00/0000/L0001`.
pub fn ledger_rel(ledger: LedgerId) -> String {
    let (mut g, _) = groups(ledger);
    let leaf = g.pop().unwrap_or_default();
    format!("{}/L{leaf}", g.join("/"))
}

/// A ledger's under-replication mark relative to the root:
/// `underreplication/ledgers/<hhhh>/<hhhh>/<hhhh>/<hhhh>/urL<id %010d>`.
pub fn underreplicated_rel(ledger: LedgerId) -> String {
    let id = ledger as u64;
    format!(
        "{UNDERREPLICATION}/ledgers/{:04x}/{:04x}/{:04x}/{:04x}/urL{ledger:010}",
        (id >> 48) & 0xffff,
        (id >> 32) & 0xffff,
        (id >> 16) & 0xffff,
        id & 0xffff
    )
}

/// The lock znode of an under-replicated ledger, relative to the root.
pub fn underreplication_lock_rel(ledger: LedgerId) -> String {
    format!("{UNDERREPLICATION}/locks/urL{ledger:010}")
}

/// Parses an `urL<digits>` znode name.
pub fn parse_underreplicated_name(name: &str) -> Option<LedgerId> {
    let digits = name.strip_prefix("urL")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether `name` can be the digit group of the given width (a ledger directory or, with
/// `leaf`, an `L`-prefixed leaf). Everything else under the root (`available`, `LAYOUT`,
/// `idgen`, ...) is not a ledger.
pub fn is_group(name: &str, width: usize, leaf: bool) -> bool {
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

/// The smallest and largest ledger id under a path prefix whose digit groups so far are
/// `prefix` (concatenated) of a layout with `total` digits.
pub fn id_range(prefix: &str, total: usize) -> (u128, u128) {
    let rest = (total - prefix.len()) as u32;
    let p: u128 = if prefix.is_empty() {
        0
    } else {
        prefix.parse().unwrap_or(0)
    };
    let scale = 10u128.pow(rest);
    (p * scale, (p + 1) * scale - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_paths_match_bookkeeper_examples() {
        assert_eq!(ledger_rel(1), "00/0000/L0001");
        assert_eq!(ledger_rel(123456789), "01/2345/L6789");
        assert_eq!(ledger_rel(2147483646), "21/4748/L3646");
        assert_eq!(ledger_rel(2147483647), "000/0000/0021/4748/L3647");
        assert_eq!(ledger_rel(i64::MAX), "922/3372/0368/5477/L5807");
    }

    #[test]
    fn long_path_groups_are_3_4_4_4_4() {
        // BookKeeper: 19 digits split 3-4-4-4-4 with the L on the last group.
        let p = ledger_rel(2147483647);
        let parts: Vec<_> = p.split('/').collect();
        assert_eq!(parts.len(), 5);
        assert_eq!(
            parts
                .iter()
                .map(|s| s.trim_start_matches('L').len())
                .collect::<Vec<_>>(),
            vec![3, 4, 4, 4, 4]
        );
    }

    #[test]
    fn underreplication_paths_use_hex_groups() {
        assert_eq!(
            underreplicated_rel(0xcafebeef0000feedu64 as i64),
            format!(
                "underreplication/ledgers/cafe/beef/0000/feed/urL{:010}",
                0xcafebeef0000feedu64 as i64
            )
        );
        assert_eq!(
            underreplicated_rel(7),
            "underreplication/ledgers/0000/0000/0000/0007/urL0000000007"
        );
        assert_eq!(
            underreplication_lock_rel(7),
            "underreplication/locks/urL0000000007"
        );
        assert_eq!(parse_underreplicated_name("urL0000000007"), Some(7));
        assert_eq!(parse_underreplicated_name("urLx"), None);
    }

    #[test]
    fn groups_and_ranges() {
        assert!(is_group("00", 2, false));
        assert!(!is_group("available", 2, false));
        assert!(!is_group("ID-0000000001", 2, false));
        assert!(is_group("L0001", 4, true));
        assert!(!is_group("0001", 4, true));
        assert_eq!(id_range("01", 10), (100000000, 199999999));
        assert_eq!(id_range("", 10), (0, 9999999999));
    }
}

/// This driver's paths and text records agree with `folio_metadata::layout`, the shared
/// helpers other crates (the shell, the sqlite driver's exports) use.
#[cfg(test)]
mod agreement {
    use std::collections::BTreeSet;

    use folio_metadata::layout;
    use folio_types::BookieId;

    use super::*;

    const IDS: &[LedgerId] = &[
        0,
        1,
        9999,
        123456789,
        2147483646,
        2147483647,
        2147483650,
        0xcafebeef0000feed_u64 as i64 & i64::MAX,
        i64::MAX,
    ];

    #[test]
    fn ledger_and_underreplication_paths_agree() {
        for &id in IDS {
            assert_eq!(
                join("/ledgers", &ledger_rel(id)),
                layout::hierarchical_ledger_path("/ledgers", id),
                "ledger {id}"
            );
            assert_eq!(
                layout::ledger_id_from_hierarchical_path(
                    "/ledgers",
                    &join("/ledgers", &ledger_rel(id))
                ),
                Some(id)
            );
            assert_eq!(
                join("/ledgers", &underreplicated_rel(id)),
                layout::underreplicated_ledger_path("/ledgers", id),
                "ledger {id}"
            );
            assert_eq!(
                join("/ledgers", &underreplication_lock_rel(id)),
                layout::underreplication_lock_path("/ledgers", id),
                "ledger {id}"
            );
        }
        assert_eq!(DEFAULT_LAYOUT, layout::ZK_LAYOUT_TEXT);
    }

    #[test]
    fn text_records_agree() {
        let missing: BTreeSet<BookieId> = ["10.0.0.1:3181", "10.0.0.2:3181"]
            .iter()
            .map(|s| BookieId::new(*s).unwrap())
            .collect();
        let fields: Vec<(&str, crate::text::Value)> = missing
            .iter()
            .map(|b| ("replica", crate::text::Value::Str(b.to_string())))
            .chain([("ctime", crate::text::Value::Int(17))])
            .collect();
        let ours = crate::text::print(&fields);
        assert_eq!(ours, layout::underreplicated_text(&missing, Some(17)));
        assert_eq!(
            layout::parse_underreplicated_text(1, ours.as_bytes()).unwrap(),
            (missing, Some(17))
        );
        let vote = crate::text::print(&[("bookieId", crate::text::Value::Str("b:1".into()))]);
        assert_eq!(vote, layout::bookie_id_text("b:1"));
        assert_eq!(
            layout::parse_bookie_id_text(vote.as_bytes()).as_deref(),
            Some("b:1")
        );
    }
}
