//! The under-replication queue on etcd (Folio's design: BookKeeper's etcd driver has none).
//! Marks are `S/underreplication/ledgers/<UUID(0, id)>` holding the same text-format
//! `UnderreplicatedLedgerFormat` BookKeeper writes on ZooKeeper; locks are
//! `S/underreplication/locks/<UUID(0, id)>` holding a text `LockDataFormat`, attached to the
//! session lease and taken with a create-if-absent transaction. Key order is id order.

use std::sync::Arc;

use async_trait::async_trait;
use etcd_client::GetOptions;
use folio_metadata::{MetadataError, Result, UnderreplicatedLedger, UnderreplicationLock, Version};
use folio_types::{BookieId, LedgerId};

use crate::keys;
use crate::session::{CasFailure, Etcd};
use crate::store::{delete_own, delete_own_later, last_component};
use folio_metadata::driver::{self, EphemeralLock, EphemeralOwner, underreplicated_what};
use folio_metadata::text::{
    self, decode_underreplicated as decode_mark, encode_underreplicated as encode_mark,
};

pub(crate) async fn mark(etcd: &Etcd, ledger: LedgerId, missing: &[BookieId]) -> Result<()> {
    let what = underreplicated_what(ledger);
    let key = etcd.keys.ur_ledger(ledger);
    for _ in 0..100 {
        match etcd.get(&key, &what).await? {
            None => {
                let data = encode_mark(&missing.iter().cloned().collect(), Some(driver::now_ms()));
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

pub(crate) async fn get(etcd: &Etcd, ledger: LedgerId) -> Result<Option<UnderreplicatedLedger>> {
    match etcd
        .get(&etcd.keys.ur_ledger(ledger), &underreplicated_what(ledger))
        .await?
    {
        Some(kv) => Ok(Some(decode_mark(ledger, kv.value())?)),
        None => Ok(None),
    }
}

pub(crate) async fn list(etcd: &Etcd) -> Result<Vec<UnderreplicatedLedger>> {
    let kvs = etcd
        .children(
            &etcd.keys.ur_ledgers(),
            "the under-replicated ledger list",
            GetOptions::new(),
        )
        .await?;
    let mut out = Vec::new();
    for kv in kvs {
        let Some(id) = last_component(kv.key()).and_then(|n| keys::parse_ledger_uuid(&n)) else {
            continue;
        };
        out.push(decode_mark(id, kv.value())?);
    }
    Ok(out)
}

pub(crate) async fn try_lock(
    etcd: &Arc<Etcd>,
    ledger: LedgerId,
    holder: &str,
) -> Result<Option<Box<dyn UnderreplicationLock>>> {
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
pub(crate) async fn lock_holder(etcd: &Arc<Etcd>, ledger: LedgerId) -> Result<Option<String>> {
    let what = format!("under-replication lock of ledger {ledger}");
    match etcd.get(&etcd.keys.ur_lock(ledger), &what).await? {
        None => Ok(None),
        Some(kv) => text::decode_lock_holder(&what, kv.value()).map(Some),
    }
}

pub(crate) async fn lock_next(
    etcd: &Arc<Etcd>,
    holder: &str,
) -> Result<Option<(UnderreplicatedLedger, Box<dyn UnderreplicationLock>)>> {
    let ids: Vec<LedgerId> = etcd
        .children(
            &etcd.keys.ur_ledgers(),
            "the under-replicated ledger list",
            GetOptions::new().with_keys_only(),
        )
        .await?
        .iter()
        .filter_map(|kv| last_component(kv.key()).and_then(|n| keys::parse_ledger_uuid(&n)))
        .collect();
    driver::lock_first_marked(ids, |id| try_lock(etcd, id, holder), |id| get(etcd, id)).await
}

pub(crate) async fn remove(etcd: &Etcd, ledger: LedgerId) -> Result<()> {
    etcd.delete(&etcd.keys.ur_ledger(ledger), &underreplicated_what(ledger))
        .await
}

/// Folio's operation record `name`: `S/underreplication/folio-operations/<name>`, put on
/// the session lease (so it goes with the session), replacing any earlier value.
pub(crate) async fn publish_operation(etcd: &Etcd, name: &str, data: &[u8]) -> Result<()> {
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

pub(crate) async fn remove_operation(etcd: &Etcd, name: &str) -> Result<()> {
    etcd.delete(
        &etcd.keys.operation(name),
        &format!("operation record {name}"),
    )
    .await
}

pub(crate) async fn list_operations(etcd: &Etcd) -> Result<Vec<(String, Vec<u8>)>> {
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
