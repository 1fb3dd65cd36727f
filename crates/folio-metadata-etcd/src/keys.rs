//! The etcd key schema (BookKeeper's etcd driver where it has one, spec §6; Folio's own
//! design for under-replication and the Auditor election). Every key is under the scope `S`.
//! See `docs/formats/etcd-layout.md` and the crate documentation for the table.

use folio_types::LedgerId;

/// BookKeeper's etcd LAYOUT: layout format 2, the etcd ledger manager factory, version 0.
pub const ETCD_LAYOUT: &str = "2\norg.apache.bookkeeper.metadata.etcd.EtcdLedgerManagerFactory:0";

/// Id-generation buckets (BookKeeper's `Etcd64bitIdGenerator.NUM_BUCKETS`).
pub const NUM_BUCKETS: u64 = 0x80;

/// Keys of one cluster scope.
#[derive(Debug, Clone)]
pub struct Keys {
    pub scope: String,
}

/// BookKeeper's ledger key: Java `UUID(0, ledgerId).toString()`.
pub fn ledger_uuid(ledger: LedgerId) -> String {
    let id = ledger as u64;
    format!(
        "00000000-0000-0000-{:04x}-{:012x}",
        (id >> 48) & 0xffff,
        id & 0xffff_ffff_ffff
    )
}

/// Inverse of [`ledger_uuid`].
pub fn parse_ledger_uuid(s: &str) -> Option<LedgerId> {
    let rest = s.strip_prefix("00000000-0000-0000-")?;
    let (hi, lo) = rest.split_once('-')?;
    if hi.len() != 4 || lo.len() != 12 {
        return None;
    }
    let hi = u64::from_str_radix(hi, 16).ok()?;
    let lo = u64::from_str_radix(lo, 16).ok()?;
    Some(((hi << 48) | lo) as LedgerId)
}

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
    pub fn ur_disable(&self) -> String {
        self.k("underreplication/disable")
    }
    pub fn ur_delay(&self) -> String {
        self.k("underreplication/lostBookieRecoveryDelay")
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
    fn ledger_keys_are_java_uuid_strings() {
        assert_eq!(ledger_uuid(1), "00000000-0000-0000-0000-000000000001");
        assert_eq!(
            ledger_uuid(0x0123_4567_89ab_cdef),
            "00000000-0000-0000-0123-456789abcdef"
        );
        for id in [0, 1, 255, i32::MAX as i64, 1 << 56, i64::MAX] {
            assert_eq!(parse_ledger_uuid(&ledger_uuid(id)), Some(id));
        }
        assert_eq!(parse_ledger_uuid("junk"), None);
        // Fixed-width lowercase hex: key order is id order.
        assert!(ledger_uuid(9) < ledger_uuid(10));
        assert!(ledger_uuid(0xffff) < ledger_uuid(1 << 48));
    }

    #[test]
    fn key_schema() {
        let k = Keys::new("/ledgers");
        assert_eq!(k.writable(), "/ledgers/bookies/writable");
        assert_eq!(Keys::end_of(&k.writable()), "/ledgers/bookies/writable0");
        assert_eq!(k.bucket(7), "/ledgers/buckets/007");
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

/// This driver's keys agree with `folio_metadata::layout`, the shared helpers.
#[cfg(test)]
mod agreement {
    use folio_metadata::layout;

    use super::*;

    #[test]
    fn ledger_keys_and_layout_agree() {
        let k = Keys::new("/ledgers");
        for id in [
            0,
            1,
            255,
            i32::MAX as i64,
            1 << 56,
            (127 << 56) | 5,
            i64::MAX,
        ] {
            assert_eq!(
                k.ledger(id),
                layout::etcd_ledger_key("/ledgers", id),
                "{id}"
            );
            assert_eq!(
                layout::ledger_id_from_etcd_key("/ledgers", &k.ledger(id)),
                Some(id)
            );
        }
        assert_eq!(ETCD_LAYOUT, layout::ETCD_LAYOUT_TEXT);
    }
}
