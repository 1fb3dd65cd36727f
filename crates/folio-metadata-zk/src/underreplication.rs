//! BookKeeper's under-replication manager on ZooKeeper (`ZkLedgerUnderreplicationManager`,
//! spec §5.8): marks at `underreplication/ledgers/<hhhh>/<hhhh>/<hhhh>/<hhhh>/urL<id>` holding
//! a text-format `UnderreplicatedLedgerFormat`, ephemeral locks at
//! `underreplication/locks/urL<id>` holding a text `LockDataFormat`, the `disable` switch and
//! `lostBookieRecoveryDelay`. The layout node `underreplication/LAYOUT` is created on first use,
//! as BookKeeper's manager does when it starts. This module is the driver's
//! `UnderreplicationManager` (with the Auditor checks' ctimes and Folio's operation records).

use folio_metadata::driver::check_ledger_id;
use folio_metadata::prelude::UnderreplicationManager;

use crate::store::ZkMetadataStore;
use std::sync::Arc;

use async_trait::async_trait;
use folio_metadata::{
    AuditorCheck, MetadataError, Result, UnderreplicatedLedger, UnderreplicationLock, Version,
    Versioned,
};
use folio_metadata::{format, layout};
use folio_types::{BookieId, LedgerId};
use zookeeper_client as zk;

use crate::paths::{self, UNDERREPLICATION};
use crate::session::{Zk, ephemeral, persistent};
use folio_metadata::driver::{self, EphemeralLock, EphemeralOwner, underreplicated_what};
use folio_metadata::text::{
    self, decode_underreplicated as decode_mark, encode_underreplicated as encode_mark,
};

/// Creates `underreplication/LAYOUT`, `ledgers` and `locks` if missing.
async fn ensure_layout(zk: &Zk) -> Result<()> {
    let layout = format!("{UNDERREPLICATION}/LAYOUT");
    if zk.exists(&layout, "the under-replication layout").await? {
        return Ok(());
    }
    for (rel, data) in [
        (layout.as_str(), paths::UNDERREPLICATION_LAYOUT.as_bytes()),
        (&format!("{UNDERREPLICATION}/ledgers"), b""),
        (&format!("{UNDERREPLICATION}/locks"), b""),
    ] {
        match zk.create_with_parents(rel, data, &persistent()).await? {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(zk.err(e, "the under-replication layout", None)),
        }
    }
    Ok(())
}

/// Ids of every marked ledger, ascending (a walk of the four hex levels).
async fn marked_ids(zk: &Zk) -> Result<Vec<LedgerId>> {
    let what = "the under-replicated ledger list";
    let mut dirs = vec![format!("{UNDERREPLICATION}/ledgers")];
    for _ in 0..4 {
        let mut next = Vec::new();
        for d in dirs {
            for c in zk.children(&d, what).await? {
                if c.len() == 4 && c.bytes().all(|b| b.is_ascii_hexdigit()) {
                    next.push(format!("{d}/{c}"));
                }
            }
        }
        dirs = next;
    }
    let mut ids = Vec::new();
    for d in dirs {
        for c in zk.children(&d, what).await? {
            if let Some(id) = paths::parse_underreplicated_name(&c) {
                ids.push(id);
            }
        }
    }
    ids.sort();
    Ok(ids)
}

/// Deletes the mark (at `seen` only, if given) and its empty parents; a mark at another
/// version, or already gone, is left as it is.
async fn delete_mark(zk: &Zk, ledger: LedgerId, seen: Option<Version>) -> Result<()> {
    let rel = paths::underreplicated_rel(ledger);
    let client = zk.client()?;
    let version = seen.map(|v| v.raw() as i32);
    match zk.run(client.delete(&zk.abs(&rel), version)).await? {
        Ok(()) | Err(zk::Error::NoNode) => {}
        Err(zk::Error::BadVersion) => return Ok(()),
        Err(e) => return Err(zk.err(e, &underreplicated_what(ledger), None)),
    }
    // Keep `underreplication/ledgers` itself (two levels).
    zk.delete_empty_parents(&rel, 2).await;
    Ok(())
}

const DELAY: &str = "lostBookieRecoveryDelay";

/// Writes `data` into the persistent znode `rel` whatever its version, creating it (and its
/// parents) if missing: the unversioned settings BookKeeper keeps under `underreplication`.
async fn put_persistent(zk: &Zk, rel: &str, data: &[u8], what: &str) -> Result<()> {
    let client = zk.client()?;
    for _ in 0..10 {
        match zk.run(client.set_data(&zk.abs(rel), data, None)).await? {
            Ok(_) => return Ok(()),
            Err(zk::Error::NoNode) => match zk.create_with_parents(rel, data, &persistent()).await?
            {
                Ok(_) => return Ok(()),
                Err(zk::Error::NodeExists) => continue,
                Err(e) => return Err(zk.err(e, what, None)),
            },
            Err(e) => return Err(zk.err(e, what, None)),
        }
    }
    Err(MetadataError::Internal(format!(
        "{what}: kept racing with another writer"
    )))
}

/// Locks, votes and registrations are ephemeral znodes this session owns: deleting one
/// first forgets it (so `close` does not delete it again), then deletes it.
#[async_trait]
impl EphemeralOwner for Zk {
    async fn delete_ephemeral(&self, path: &str, what: &str) -> Result<()> {
        self.disown(path);
        let client = self.client()?;
        match self.run(client.delete(path, None)).await? {
            Ok(()) | Err(zk::Error::NoNode) => Ok(()),
            Err(e) => Err(self.err(e, what, None)),
        }
    }

    fn delete_ephemeral_later(self: Arc<Self>, path: String) {
        self.disown(&path);
        if let Ok(client) = self.client() {
            // Sent on call; nobody waits for the reply.
            drop(client.delete(&path, None));
        }
    }

    async fn remove_underreplicated_at(&self, ledger: LedgerId, seen: Version) -> Result<()> {
        delete_mark(self, ledger, Some(seen)).await
    }
}

#[async_trait]
impl UnderreplicationManager for ZkMetadataStore {
    async fn mark_underreplicated(&self, ledger: LedgerId, missing: &[BookieId]) -> Result<()> {
        check_ledger_id(ledger)?;
        let zk = &self.zk;
        ensure_layout(zk).await?;
        let what = underreplicated_what(ledger);
        let rel = paths::underreplicated_rel(ledger);
        let client = zk.client()?;
        for _ in 0..100 {
            match zk.get(&rel, &what).await? {
                None => {
                    let data =
                        encode_mark(&missing.iter().cloned().collect(), Some(driver::now_ms()));
                    match zk.create_with_parents(&rel, &data, &persistent()).await? {
                        Ok(_) => return Ok(()),
                        Err(zk::Error::NodeExists) => continue,
                        Err(e) => return Err(zk.err(e, &what, None)),
                    }
                }
                Some((data, stat)) => {
                    let mut cur = decode_mark(ledger, &data)?;
                    let before = cur.missing_replicas.len();
                    cur.missing_replicas.extend(missing.iter().cloned());
                    if cur.missing_replicas.len() == before {
                        return Ok(());
                    }
                    // BookKeeper resets ctime when a re-mark adds a bookie.
                    let data = encode_mark(&cur.missing_replicas, Some(driver::now_ms()));
                    match zk
                        .run(client.set_data(&zk.abs(&rel), &data, Some(stat.version)))
                        .await?
                    {
                        Ok(_) => return Ok(()),
                        Err(zk::Error::BadVersion) | Err(zk::Error::NoNode) => continue,
                        Err(e) => return Err(zk.err(e, &what, None)),
                    }
                }
            }
        }
        Err(MetadataError::Internal(format!(
            "{what}: kept losing concurrent updates"
        )))
    }

    async fn list_underreplicated(&self) -> Result<Vec<UnderreplicatedLedger>> {
        let zk = &self.zk;
        let mut out = Vec::new();
        for id in marked_ids(zk).await? {
            // A mark removed between the listing and the read is simply gone.
            if let Some(m) = self.find_underreplicated(id).await? {
                out.push(m);
            }
        }
        Ok(out)
    }

    async fn find_underreplicated(
        &self,
        ledger: LedgerId,
    ) -> Result<Option<UnderreplicatedLedger>> {
        let zk = &self.zk;
        let what = underreplicated_what(ledger);
        match zk.get(&paths::underreplicated_rel(ledger), &what).await? {
            Some((data, _)) => Ok(Some(decode_mark(ledger, &data)?)),
            None => Ok(None),
        }
    }

    async fn try_lock_underreplicated(
        &self,
        ledger: LedgerId,
        holder: &str,
    ) -> Result<Option<Box<dyn UnderreplicationLock>>> {
        check_ledger_id(ledger)?;
        let zk = &self.zk;
        // The mark's version now: `mark_replicated` deletes the mark only at this version.
        let Some((_, stat)) = zk
            .get(
                &paths::underreplicated_rel(ledger),
                &underreplicated_what(ledger),
            )
            .await?
        else {
            return Err(MetadataError::not_found(underreplicated_what(ledger)));
        };
        let mark_version = Version::from_raw(i64::from(stat.version));
        ensure_layout(zk).await?;
        let rel = paths::underreplication_lock_rel(ledger);
        let data = text::encode_bookie_id(holder);
        match zk.create_with_parents(&rel, &data, &ephemeral()).await? {
            Ok(_) => {
                let path = zk.abs(&rel);
                zk.own(&path);
                Ok(Some(Box::new(EphemeralLock::new(
                    zk.clone(),
                    ledger,
                    mark_version,
                    path,
                ))))
            }
            Err(zk::Error::NodeExists) => Ok(None),
            Err(e) => Err(zk.err(
                e,
                &format!("under-replication lock of ledger {ledger}"),
                None,
            )),
        }
    }

    /// The holder named in `ledger`'s lock znode (BookKeeper's `LockDataFormat`), if locked.
    async fn underreplicated_lock_holder(&self, ledger: LedgerId) -> Result<Option<String>> {
        check_ledger_id(ledger)?;
        let zk = &self.zk;
        let what = format!("under-replication lock of ledger {ledger}");
        match zk
            .get(&paths::underreplication_lock_rel(ledger), &what)
            .await?
        {
            None => Ok(None),
            Some((data, _)) => text::decode_lock_holder(&what, &data).map(Some),
        }
    }

    async fn marked_ledgers(&self) -> Result<Vec<LedgerId>> {
        marked_ids(&self.zk).await
    }

    async fn remove_underreplicated(&self, ledger: LedgerId) -> Result<()> {
        check_ledger_id(ledger)?;
        let zk = &self.zk;
        delete_mark(zk, ledger, None).await
    }

    async fn is_autorecovery_enabled(&self) -> Result<bool> {
        let zk = &self.zk;
        Ok(!zk
            .exists(
                &format!("{UNDERREPLICATION}/disable"),
                "the autorecovery switch",
            )
            .await?)
    }

    async fn set_autorecovery_enabled(&self, enabled: bool) -> Result<()> {
        let zk = &self.zk;
        let what = "the autorecovery switch";
        let rel = format!("{UNDERREPLICATION}/disable");
        if enabled {
            let client = zk.client()?;
            match zk.run(client.delete(&zk.abs(&rel), None)).await? {
                Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                Err(e) => Err(zk.err(e, what, None)),
            }
        } else {
            match zk.create_with_parents(&rel, b"", &persistent()).await? {
                Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
                Err(e) => Err(zk.err(e, what, None)),
            }
        }
    }

    async fn lost_bookie_recovery_delay_versioned(&self) -> Result<Option<Versioned<u32>>> {
        let record = self
            .zk
            .get(
                &format!("{UNDERREPLICATION}/{DELAY}"),
                "lostBookieRecoveryDelay",
            )
            .await?;
        record
            .map(|(data, stat)| {
                driver::decode_recovery_delay(&data, Version::from_raw(i64::from(stat.version)))
            })
            .transpose()
    }

    async fn set_lost_bookie_recovery_delay(&self, seconds: u32) -> Result<()> {
        let zk = &self.zk;
        let rel = format!("{UNDERREPLICATION}/{DELAY}");
        put_persistent(
            zk,
            &rel,
            seconds.to_string().as_bytes(),
            "lostBookieRecoveryDelay",
        )
        .await
    }

    /// `underreplication/<check>ctime`: binary, as BookKeeper writes it (spec/autorecovery.md §1).
    async fn auditor_check_ctime(&self, check: AuditorCheck) -> Result<Option<i64>> {
        let zk = &self.zk;
        let rel = format!("{UNDERREPLICATION}/{}", check.record_name());
        match zk.get(&rel, check.record_name()).await? {
            None => Ok(None),
            Some((data, _)) => format::decode_check_ctime(check, &data),
        }
    }

    async fn set_auditor_check_ctime(&self, check: AuditorCheck, ctime_ms: i64) -> Result<()> {
        let zk = &self.zk;
        let what = check.record_name();
        let data = format::encode_check_ctime(ctime_ms);
        put_persistent(zk, &format!("{UNDERREPLICATION}/{what}"), &data, what).await
    }

    /// Folio's operation record `name`: an ephemeral znode under
    /// `underreplication/folio-operations`, created or, when this session already has it,
    /// rewritten.
    async fn put_operation_record(&self, name: &str, data: &[u8]) -> Result<()> {
        let zk = &self.zk;
        let rel = format!("{}/{name}", layout::OPERATIONS_REL);
        let what = format!("operation record {name}");
        let client = zk.client()?;
        for _ in 0..10 {
            match zk.create_with_parents(&rel, data, &ephemeral()).await? {
                Ok(_) => {
                    zk.own(&zk.abs(&rel));
                    return Ok(());
                }
                Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(zk.err(e, &what, None)),
            }
            match zk.run(client.set_data(&zk.abs(&rel), data, None)).await? {
                Ok(_) => return Ok(()),
                // Gone between the two (its session ended): create it again.
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(zk.err(e, &what, None)),
            }
        }
        Err(MetadataError::Internal(format!(
            "{what}: kept racing with another writer"
        )))
    }

    async fn delete_operation_record(&self, name: &str) -> Result<()> {
        let zk = &self.zk;
        let path = zk.abs(&format!("{}/{name}", layout::OPERATIONS_REL));
        zk.delete_ephemeral(&path, &format!("operation record {name}"))
            .await
    }

    async fn list_operations(&self) -> Result<Vec<(String, Vec<u8>)>> {
        let zk = &self.zk;
        let mut out = Vec::new();
        for name in zk
            .children(layout::OPERATIONS_REL, "the operation records")
            .await?
        {
            let what = format!("operation record {name}");
            // Gone since it was listed: its operation ended.
            if let Some((data, _)) = zk
                .get(&format!("{}/{name}", layout::OPERATIONS_REL), &what)
                .await?
            {
                out.push((name, data));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn mark_text_round_trips() {
        let replicas: BTreeSet<_> = ["10.0.0.1:3181", "10.0.0.2:3181"]
            .iter()
            .map(|s| BookieId::new(*s).unwrap())
            .collect();
        let data = encode_mark(&replicas, Some(42));
        assert_eq!(
            std::str::from_utf8(&data).unwrap(),
            "replica: \"10.0.0.1:3181\"\nreplica: \"10.0.0.2:3181\"\nctime: 42\n"
        );
        let back = decode_mark(9, &data).unwrap();
        assert_eq!(back.missing_replicas, replicas);
        assert_eq!(back.ctime, Some(42));
        let err = decode_mark(9, b"replica: 'a b'").unwrap_err().to_string();
        assert!(err.contains("ledger 9"), "{err}");
    }
}
