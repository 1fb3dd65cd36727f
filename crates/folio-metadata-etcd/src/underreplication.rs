//! The under-replication queue on etcd (Folio's design: BookKeeper's etcd driver has none).
//! Marks are `S/underreplication/ledgers/<UUID(0, id)>` holding the same text-format
//! `UnderreplicatedLedgerFormat` BookKeeper writes on ZooKeeper; locks are
//! `S/underreplication/locks/<UUID(0, id)>` holding a text `LockDataFormat`, attached to the
//! session lease and taken with a create-if-absent transaction. Key order is id order.
//! This module is the driver's `UnderreplicationManager`: also the autorecovery switch,
//! `lostBookieRecoveryDelay`, the Auditor checks' ctimes and Folio's operation records.

use folio_metadata::driver::check_ledger_id;
use folio_metadata::prelude::UnderreplicationManager;

use crate::store::EtcdMetadataStore;
use std::sync::Arc;

use async_trait::async_trait;
use etcd_client::GetOptions;
use folio_metadata::{
    AuditorCheck, MetadataError, Result, UnderreplicatedLedger, UnderreplicationLock, Version,
    Versioned,
};
use folio_types::{BookieId, LedgerId};

use crate::keys;
use crate::session::{CasFailure, Etcd};
use crate::store::{delete_own, delete_own_later, last_component};
use folio_metadata::driver::{self, EphemeralLock, EphemeralOwner, underreplicated_what};
use folio_metadata::text::{
    self, decode_underreplicated as decode_mark, encode_underreplicated as encode_mark,
};

/// Locks, votes and registrations are keys on this session's lease: deleting one deletes
/// it only while it is still attached to the lease (it is ours).
#[async_trait]
impl EphemeralOwner for Etcd {
    async fn delete_ephemeral(&self, key: &str, what: &str) -> Result<()> {
        delete_own(self, key, what).await
    }

    fn delete_ephemeral_later(self: Arc<Self>, key: String) {
        delete_own_later(&self, key);
    }

    async fn remove_underreplicated_at(&self, ledger: LedgerId, seen: Version) -> Result<()> {
        // Changed since (re-marked) or gone: either way the mark is not ours to delete.
        let _ = self
            .cas_delete(
                &self.keys.ur_ledger(ledger),
                Some(seen),
                &underreplicated_what(ledger),
            )
            .await?;
        Ok(())
    }
}

#[async_trait]
impl UnderreplicationManager for EtcdMetadataStore {
    async fn mark_underreplicated(&self, ledger: LedgerId, missing: &[BookieId]) -> Result<()> {
        check_ledger_id(ledger)?;
        let etcd = &self.etcd;
        let what = underreplicated_what(ledger);
        let key = etcd.keys.ur_ledger(ledger);
        for _ in 0..100 {
            match etcd.get(&key, &what).await? {
                None => {
                    let data =
                        encode_mark(&missing.iter().cloned().collect(), Some(driver::now_ms()));
                    if etcd.create(&key, &data, false, &what).await?.is_some() {
                        return Ok(());
                    }
                }
                Some(kv) => {
                    let mut cur = decode_mark(ledger, kv.value())?;
                    let before = cur.missing_replicas.len();
                    cur.missing_replicas.extend(missing.iter().cloned());
                    if cur.missing_replicas.len() == before {
                        return Ok(());
                    }
                    // BookKeeper resets ctime when a re-mark adds a bookie.
                    let data = encode_mark(&cur.missing_replicas, Some(driver::now_ms()));
                    let v = Version::from_raw(kv.mod_revision());
                    match etcd.cas_put(&key, &data, v, &what).await? {
                        Ok(_) => return Ok(()),
                        Err(CasFailure::Missing) | Err(CasFailure::Changed) => continue,
                    }
                }
            }
        }
        Err(MetadataError::Internal(format!(
            "{what}: kept losing concurrent updates"
        )))
    }

    async fn find_underreplicated(
        &self,
        ledger: LedgerId,
    ) -> Result<Option<UnderreplicatedLedger>> {
        let etcd = &self.etcd;
        match etcd
            .get(&etcd.keys.ur_ledger(ledger), &underreplicated_what(ledger))
            .await?
        {
            Some(kv) => Ok(Some(decode_mark(ledger, kv.value())?)),
            None => Ok(None),
        }
    }

    async fn list_underreplicated(&self) -> Result<Vec<UnderreplicatedLedger>> {
        let etcd = &self.etcd;
        let kvs = etcd
            .children(
                &etcd.keys.ur_ledgers(),
                "the under-replicated ledger list",
                GetOptions::new(),
            )
            .await?;
        let mut out = Vec::new();
        for kv in kvs {
            let Some(id) = last_component(kv.key()).and_then(|n| keys::parse_ledger_uuid(&n))
            else {
                continue;
            };
            out.push(decode_mark(id, kv.value())?);
        }
        Ok(out)
    }

    async fn try_lock_underreplicated(
        &self,
        ledger: LedgerId,
        holder: &str,
    ) -> Result<Option<Box<dyn UnderreplicationLock>>> {
        check_ledger_id(ledger)?;
        let etcd = &self.etcd;
        // The mark's revision now: `mark_replicated` deletes the mark only at this revision.
        let Some(mark) = etcd
            .get(&etcd.keys.ur_ledger(ledger), &underreplicated_what(ledger))
            .await?
        else {
            return Err(MetadataError::not_found(underreplicated_what(ledger)));
        };
        let mark_version = Version::from_raw(mark.mod_revision());
        let key = etcd.keys.ur_lock(ledger);
        let data = text::encode_bookie_id(holder);
        let what = format!("under-replication lock of ledger {ledger}");
        match etcd.create(&key, &data, true, &what).await? {
            Some(_) => Ok(Some(Box::new(EphemeralLock::new(
                etcd.clone(),
                ledger,
                mark_version,
                key,
            )))),
            None => Ok(None),
        }
    }

    /// The holder named in `ledger`'s lock key (BookKeeper's `LockDataFormat`), if locked.
    async fn underreplicated_lock_holder(&self, ledger: LedgerId) -> Result<Option<String>> {
        check_ledger_id(ledger)?;
        let etcd = &self.etcd;
        let what = format!("under-replication lock of ledger {ledger}");
        match etcd.get(&etcd.keys.ur_lock(ledger), &what).await? {
            None => Ok(None),
            Some(kv) => text::decode_lock_holder(&what, kv.value()).map(Some),
        }
    }

    async fn marked_ledgers(&self) -> Result<Vec<LedgerId>> {
        let etcd = &self.etcd;
        Ok(etcd
            .children(
                &etcd.keys.ur_ledgers(),
                "the under-replicated ledger list",
                GetOptions::new().with_keys_only(),
            )
            .await?
            .iter()
            .filter_map(|kv| last_component(kv.key()).and_then(|n| keys::parse_ledger_uuid(&n)))
            .collect())
    }

    async fn remove_underreplicated(&self, ledger: LedgerId) -> Result<()> {
        check_ledger_id(ledger)?;
        let etcd = &self.etcd;
        etcd.delete(&etcd.keys.ur_ledger(ledger), &underreplicated_what(ledger))
            .await
    }

    /// Folio's operation record `name`: `S/underreplication/folio-operations/<name>`, put on
    /// the session lease (so it goes with the session), replacing any earlier value.
    async fn put_operation_record(&self, name: &str, data: &[u8]) -> Result<()> {
        let etcd = &self.etcd;
        let key = etcd.keys.operation(name);
        let mut c = etcd.client()?;
        let opts = etcd_client::PutOptions::new().with_lease(etcd.lease);
        etcd.run(
            &format!("operation record {name}"),
            c.put(key, data.to_vec(), Some(opts)),
        )
        .await?;
        Ok(())
    }

    async fn delete_operation_record(&self, name: &str) -> Result<()> {
        let etcd = &self.etcd;
        etcd.delete(
            &etcd.keys.operation(name),
            &format!("operation record {name}"),
        )
        .await
    }

    async fn list_operations(&self) -> Result<Vec<(String, Vec<u8>)>> {
        let etcd = &self.etcd;
        let kvs = etcd
            .children(
                &etcd.keys.operations(),
                "the operation records",
                GetOptions::new(),
            )
            .await?;
        Ok(kvs
            .iter()
            .filter_map(|kv| Some((last_component(kv.key())?, kv.value().to_vec())))
            .collect())
    }

    async fn is_autorecovery_enabled(&self) -> Result<bool> {
        Ok(self
            .etcd
            .get(&self.keys().ur_disable(), "the autorecovery switch")
            .await?
            .is_none())
    }

    async fn set_autorecovery_enabled(&self, enabled: bool) -> Result<()> {
        let what = "the autorecovery switch";
        let key = self.keys().ur_disable();
        if enabled {
            self.etcd.delete(&key, what).await
        } else {
            let mut c = self.etcd.client()?;
            self.etcd.run(what, c.put(key, Vec::new(), None)).await?;
            Ok(())
        }
    }

    async fn lost_bookie_recovery_delay_versioned(&self) -> Result<Option<Versioned<u32>>> {
        let kv = self
            .etcd
            .get(&self.keys().ur_delay(), "lostBookieRecoveryDelay")
            .await?;
        kv.map(|kv| driver::decode_recovery_delay(kv.value(), Version::from_raw(kv.mod_revision())))
            .transpose()
    }

    async fn set_lost_bookie_recovery_delay(&self, seconds: u32) -> Result<()> {
        let mut c = self.etcd.client()?;
        self.etcd
            .run(
                "lostBookieRecoveryDelay",
                c.put(self.keys().ur_delay(), seconds.to_string(), None),
            )
            .await?;
        Ok(())
    }

    async fn auditor_check_ctime(&self, check: AuditorCheck) -> Result<Option<i64>> {
        match self
            .etcd
            .get(&self.keys().check_ctime(check), check.record_name())
            .await?
        {
            None => Ok(None),
            Some(kv) => folio_metadata::format::decode_check_ctime(check, kv.value()),
        }
    }

    async fn set_auditor_check_ctime(&self, check: AuditorCheck, ctime_ms: i64) -> Result<()> {
        let mut c = self.etcd.client()?;
        let data = folio_metadata::format::encode_check_ctime(ctime_ms);
        self.etcd
            .run(
                check.record_name(),
                c.put(self.keys().check_ctime(check), data, None),
            )
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn marks_use_bookkeeper_text_format() {
        let replicas: BTreeSet<_> = [BookieId::new("b:1").unwrap()].into_iter().collect();
        let data = encode_mark(&replicas, Some(5));
        assert_eq!(
            std::str::from_utf8(&data).unwrap(),
            "replica: \"b:1\"\nctime: 5\n"
        );
        assert_eq!(decode_mark(3, &data).unwrap().missing_replicas, replicas);
        let e = decode_mark(3, b"\xff").unwrap_err().to_string();
        assert!(e.contains("ledger 3"), "{e}");
    }
}
