//! BookKeeper's ZooKeeper paths (spec/bookkeeper-protocol.md §5.2, §5.6, §5.8), relative to
//! the ledgers root (`/ledgers` by default), and their inverse for listings.
//!
//! Ledger ids below `i32::MAX` use the hierarchical 2-4-4 split of the 10-digit id
//! (`00/0000/L0001`); larger ids use the long-hierarchical 3-4-4-4-4 split of the 19-digit id
//! (`000/0000/0000/0002/L1474`), exactly as BookKeeper's default `HierarchicalLedgerManager`.

use folio_metadata::layout;

pub const LAYOUT: &str = "LAYOUT";
pub const INSTANCEID: &str = "INSTANCEID";
pub const AVAILABLE: &str = "available";
pub const READONLY: &str = "readonly";
pub const COOKIES: &str = "cookies";
pub const IDGEN: &str = "idgen";
pub const IDGEN_LONG: &str = "idgen-long";
pub const UNDERREPLICATION: &str = "underreplication";

/// The LAYOUT content BookKeeper writes for its default ledger manager (§5.3).
pub const DEFAULT_LAYOUT: &str = layout::ZK_LAYOUT_TEXT;

/// The under-replication LAYOUT (text format of `LedgerRereplicationLayoutFormat`, §5.8).
pub const UNDERREPLICATION_LAYOUT: &str = layout::UNDERREPLICATION_LAYOUT_TEXT;

// The ledger and under-replication paths themselves are `folio_metadata::layout`'s, shared
// with the shell and the other drivers; these are the names this driver uses for them.
pub use layout::{
    LONG_FORM_FROM, LONG_SPLIT, SHORT_SPLIT, hierarchical_ledger_rel as ledger_rel,
    is_ledger_path_group as is_group,
    ledger_id_from_underreplicated_name as parse_underreplicated_name,
    underreplicated_ledger_rel as underreplicated_rel, underreplication_lock_rel,
};

/// Joins the root and a relative path.
pub fn join(root: &str, rel: &str) -> String {
    if rel.is_empty() {
        root.to_string()
    } else {
        format!("{root}/{rel}")
    }
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
    fn id_ranges_cover_a_path_prefix() {
        assert_eq!(id_range("01", 10), (100000000, 199999999));
        assert_eq!(id_range("", 10), (0, 9999999999));
        assert_eq!(id_range("000", 19), (0, 9999999999999999));
    }

    #[test]
    fn paths_are_joined_under_the_root() {
        assert_eq!(join("/ledgers", &ledger_rel(1)), "/ledgers/00/0000/L0001");
        assert_eq!(join("/ledgers", ""), "/ledgers");
        assert_eq!(
            join("/x", &underreplication_lock_rel(7)),
            "/x/underreplication/locks/urL0000000007"
        );
    }
}
