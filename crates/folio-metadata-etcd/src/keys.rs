//! The etcd key schema (BookKeeper's etcd driver where it has one, spec §6; Folio's own
//! design for under-replication and the Auditor election). Every key is under the scope `S`.
//! See `docs/formats/etcd-layout.md` and the crate documentation for the table.

use folio_metadata::layout;
use folio_types::LedgerId;

/// BookKeeper's etcd LAYOUT: layout format 2, the etcd ledger manager factory, version 0.
pub const ETCD_LAYOUT: &str = layout::ETCD_LAYOUT_TEXT;

/// Id-generation buckets (BookKeeper's `Etcd64bitIdGenerator.NUM_BUCKETS`).
pub const NUM_BUCKETS: u64 = 0x80;

/// Keys of one cluster scope.
#[derive(Debug, Clone)]
pub struct Keys {
    pub scope: String,
}

// A ledger's name under `S/ledgers` and `S/underreplication/{ledgers,locks}`: Java's
// `UUID(0, ledgerId)` string, from `folio_metadata::layout` (shared with the shell).
pub use layout::{ledger_id_from_uuid as parse_ledger_uuid, ledger_uuid};

impl Keys {
    pub fn new(scope: &str) -> Self {
        Keys {
            scope: scope.to_string(),
        }
    }

    fn k(&self, rel: &str) -> String {
        format!("{}/{rel}", self.scope)
    }

    /// The range end of the children of `dir` (keys `dir/...`): BookKeeper's END_SEP
    /// convention, `dir` + "0" ('0' is the byte after '/').
    pub fn end_of(dir: &str) -> String {
        format!("{dir}0")
    }

    pub fn layout(&self) -> String {
        self.k("layout")
    }
    pub fn instance_id(&self) -> String {
        self.k("instanceid")
    }
    pub fn cookies(&self) -> String {
        self.k("cookies")
    }
    pub fn cookie(&self, bookie: &str) -> String {
        self.k(&format!("cookies/{bookie}"))
    }
    pub fn bookies(&self) -> String {
        self.k("bookies")
    }
    pub fn writable(&self) -> String {
        self.k("bookies/writable")
    }
    pub fn readonly(&self) -> String {
        self.k("bookies/readonly")
    }
    pub fn ledgers(&self) -> String {
        self.k("ledgers")
    }
    pub fn ledger(&self, ledger: LedgerId) -> String {
        self.k(&format!("ledgers/{}", ledger_uuid(ledger)))
    }
    pub fn buckets(&self) -> String {
        self.k("buckets")
    }
    pub fn bucket(&self, bucket: u64) -> String {
        self.k(&format!("buckets/{bucket:03}"))
    }
    pub fn underreplication(&self) -> String {
        self.k("underreplication")
    }
    pub fn ur_ledgers(&self) -> String {
        self.k("underreplication/ledgers")
    }
    pub fn ur_ledger(&self, ledger: LedgerId) -> String {
        self.k(&format!("underreplication/ledgers/{}", ledger_uuid(ledger)))
    }
    pub fn ur_lock(&self, ledger: LedgerId) -> String {
        self.k(&format!("underreplication/locks/{}", ledger_uuid(ledger)))
    }
    pub fn operations(&self) -> String {
        self.k(folio_metadata::layout::OPERATIONS_REL)
    }
    pub fn operation(&self, name: &str) -> String {
        format!("{}/{name}", self.operations())
    }
    pub fn ur_disable(&self) -> String {
        self.k("underreplication/disable")
    }
    pub fn ur_delay(&self) -> String {
        self.k("underreplication/lostBookieRecoveryDelay")
    }
    pub fn check_ctime(&self, check: folio_metadata::AuditorCheck) -> String {
        self.k(&format!("underreplication/{}", check.record_name()))
    }
    pub fn election(&self) -> String {
        self.k("underreplication/auditorelection")
    }
    /// A candidate's vote: the session lease and a per-session candidacy number.
    pub fn vote(&self, lease: i64, n: u64) -> String {
        self.k(&format!(
            "underreplication/auditorelection/{lease:016x}-{n}"
        ))
    }

    /// The keys `init_cluster` creates (empty directories, plus layout and instance id).
    pub fn init_keys(&self, instance_id: &str) -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<(String, Vec<u8>)> = [
            self.scope.clone(),
            self.cookies(),
            self.bookies(),
            self.writable(),
            self.readonly(),
            self.ledgers(),
            self.buckets(),
            self.underreplication(),
        ]
        .into_iter()
        .map(|k| (k, Vec::new()))
        .collect();
        v.push((self.layout(), ETCD_LAYOUT.as_bytes().to_vec()));
        v.push((self.instance_id(), instance_id.as_bytes().to_vec()));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_schema() {
        let k = Keys::new("/ledgers");
        assert_eq!(k.writable(), "/ledgers/bookies/writable");
        assert_eq!(Keys::end_of(&k.writable()), "/ledgers/bookies/writable0");
        assert_eq!(k.bucket(7), "/ledgers/buckets/007");
        assert_eq!(
            k.ledger(1),
            "/ledgers/ledgers/00000000-0000-0000-0000-000000000001"
        );
        assert_eq!(
            k.ledger(0x0123_4567_89ab_cdef),
            layout::etcd_ledger_key("/ledgers", 0x0123_4567_89ab_cdef)
        );
        assert_eq!(
            k.ur_lock(5),
            "/ledgers/underreplication/locks/00000000-0000-0000-0000-000000000005"
        );
        assert_eq!(
            k.vote(0xab, 2),
            "/ledgers/underreplication/auditorelection/00000000000000ab-2"
        );
    }
}
