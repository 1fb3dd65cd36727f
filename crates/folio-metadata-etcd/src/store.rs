//! [`EtcdMetadataStore`]: the metadata contract on etcd, in BookKeeper's etcd key schema
//! (spec §6) for cluster identity, bookies, cookies, ledger ids and ledger metadata.
//! Versions are etcd mod revisions; every compare-and-set is one transaction.
//! Under-replication and the Auditor election (which BookKeeper's etcd driver lacks) are in
//! `underreplication.rs` and `election.rs`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use folio_metadata::driver::{Ephemeral, check_ledger_id, check_page_limit, page};
use folio_metadata::{
    AuditorCheck, BookieMode, BookieRegistration, BookieServiceInfo, BookieSet, ClusterInfo,
    LeaderCandidacy, LedgerPage, MetadataError, MetadataStore, Result, SessionState,
    UnderreplicatedLedger, UnderreplicationLock, Version, Versioned,
};
use folio_types::metadata::LedgerMetadata;
use folio_types::{BookieId, LedgerId};
use tokio::sync::watch;

use crate::keys::{self, Keys, NUM_BUCKETS};
use crate::session::{CasFailure, Etcd, EtcdOptions};

/// The `etcd://` metadata store: one etcd session (lease).
#[derive(Debug, Clone)]
pub struct EtcdMetadataStore {
    pub(crate) etcd: Arc<Etcd>,
    next_bucket: Arc<AtomicU64>,
}

impl EtcdMetadataStore {
    /// Connects with default options (10 s lease TTL and request timeout).
    pub async fn connect(uri: &str) -> Result<Self> {
        Self::connect_with(uri, EtcdOptions::default()).await
    }

    pub async fn connect_with(uri: &str, options: EtcdOptions) -> Result<Self> {
        Ok(EtcdMetadataStore {
            etcd: Etcd::connect(uri, options).await?,
            // BookKeeper starts the round robin over id buckets at a random bucket.
            next_bucket: Arc::new(AtomicU64::new(fastrand::u64(..NUM_BUCKETS))),
        })
    }

    /// The key scope (e.g. `/ledgers`).
    pub fn scope(&self) -> &str {
        &self.etcd.keys.scope
    }

    /// The session lease every ephemeral key of this store is attached to.
    pub fn lease_id(&self) -> i64 {
        self.etcd.lease
    }

    /// The underlying client (tests and tools read raw keys with it); `SessionExpired`
    /// once closed.
    pub fn etcd_client(&self) -> Result<etcd_client::Client> {
        self.etcd.client()
    }

    fn keys(&self) -> &Keys {
        &self.etcd.keys
    }

    fn bookie_key(&self, bookie: &BookieId, mode: BookieMode) -> String {
        match mode {
            BookieMode::Writable => format!("{}/{bookie}", self.keys().writable()),
            BookieMode::ReadOnly => format!("{}/{bookie}", self.keys().readonly()),
        }
    }

    fn versioned_ledger(ledger: LedgerId, kv: &KeyValue) -> Result<Versioned<LedgerMetadata>> {
        Ok(Versioned {
            value: folio_metadata::format::decode_ledger_metadata(ledger, kv.value())?,
            version: Version::from_raw(kv.mod_revision()),
        })
    }
}

/// The last path component of a key.
pub(crate) fn last_component(key: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(key).ok()?;
    s.rsplit('/').next().map(str::to_string)
}

pub(crate) async fn read_bookies(etcd: &Etcd) -> Result<BookieSet> {
    let what = "the bookie list";
    let ids = |kvs: Vec<KeyValue>| -> BTreeSet<BookieId> {
        kvs.iter()
            .filter_map(|kv| last_component(kv.key()))
            .filter_map(|n| BookieId::new(n).ok())
            .collect()
    };
    let opts = || GetOptions::new().with_keys_only();
    Ok(BookieSet {
        writable: ids(etcd.children(&etcd.keys.writable(), what, opts()).await?),
        readonly: ids(etcd.children(&etcd.keys.readonly(), what, opts()).await?),
    })
}

#[async_trait]
impl MetadataStore for EtcdMetadataStore {
    fn uri(&self) -> &str {
        &self.etcd.uri
    }

    fn session_state(&self) -> watch::Receiver<SessionState> {
        self.etcd.state.subscribe()
    }

    fn session_timeout(&self) -> std::time::Duration {
        self.etcd.ttl()
    }

    async fn close(&self) -> Result<()> {
        self.etcd.close().await
    }

    async fn init_cluster(&self) -> Result<ClusterInfo> {
        let scope = self.keys().scope.clone();
        let instance_id = folio_metadata::new_instance_id();
        let puts: Vec<TxnOp> = self
            .keys()
            .init_keys(&instance_id)
            .into_iter()
            .map(|(k, v)| TxnOp::put(k, v, None))
            .collect();
        // BookKeeper's init: If(createRevision(S) > 0) Else(put everything).
        let txn = Txn::new()
            .when([Compare::create_revision(
                scope.as_str(),
                CompareOp::Greater,
                0,
            )])
            .or_else(puts);
        let mut c = self.etcd.client()?;
        let resp = self.etcd.run("cluster initialisation", c.txn(txn)).await?;
        if resp.succeeded() {
            return Err(MetadataError::already_exists(format!("cluster at {scope}")));
        }
        Ok(ClusterInfo {
            instance_id,
            layout: keys::ETCD_LAYOUT.to_string(),
        })
    }

    async fn read_cluster(&self) -> Result<ClusterInfo> {
        let what = format!("cluster at {} (not initialised)", self.keys().scope);
        let layout = self
            .etcd
            .get(&self.keys().layout(), "the cluster layout")
            .await?
            .ok_or_else(|| MetadataError::not_found(what.clone()))?;
        let id = self
            .etcd
            .get(&self.keys().instance_id(), "the cluster instance id")
            .await?
            .ok_or_else(|| MetadataError::not_found(what.clone()))?;
        let text = |kv: &KeyValue, name: &str| {
            String::from_utf8(kv.value().to_vec())
                .map_err(|_| MetadataError::corrupt(format!("cluster {name}"), "not valid UTF-8"))
        };
        Ok(ClusterInfo {
            instance_id: text(&id, "instance id")?,
            layout: text(&layout, "layout")?,
        })
    }

    async fn format_cluster(&self) -> Result<ClusterInfo> {
        let scope = self.keys().scope.clone();
        let mut c = self.etcd.client()?;
        let txn = Txn::new().and_then([
            TxnOp::delete(scope.as_str(), None),
            TxnOp::delete(
                format!("{scope}/"),
                Some(etcd_client::DeleteOptions::new().with_range(Keys::end_of(&scope))),
            ),
        ]);
        self.etcd.run("the cluster", c.txn(txn)).await?;
        self.init_cluster().await
    }

    async fn register_bookie(
        &self,
        bookie: &BookieId,
        mode: BookieMode,
        info: &BookieServiceInfo,
    ) -> Result<Box<dyn BookieRegistration>> {
        let what = format!("registration of bookie {bookie}");
        let data = folio_metadata::format::encode_bookie_service_info(info);
        // Refused at once while any lease holds the id. A key of a dead session vanishes
        // when its lease expires: the bookie's registrar waits that out (bounded by
        // `session_timeout`), the same way for every driver.
        loop {
            let mut holder = None;
            for m in [BookieMode::Writable, BookieMode::ReadOnly] {
                if let Some(kv) = self.etcd.get(&self.bookie_key(bookie, m), &what).await? {
                    holder = Some(kv.lease());
                }
            }
            match holder {
                None => {
                    let key = self.bookie_key(bookie, mode);
                    if self.etcd.create(&key, &data, true, &what).await?.is_some() {
                        return Ok(Box::new(EtcdRegistration {
                            bookie: bookie.clone(),
                            mode,
                            data,
                            node: Ephemeral::new(self.etcd.clone(), key),
                        }));
                    }
                    // Lost a race with another registration: look again.
                }
                Some(lease) => {
                    let by = if lease == self.etcd.lease {
                        "this session"
                    } else {
                        "another session"
                    };
                    return Err(MetadataError::already_exists(format!(
                        "registration of bookie {bookie} (by {by})"
                    )));
                }
            }
        }
    }

    async fn list_bookies(&self) -> Result<BookieSet> {
        read_bookies(&self.etcd).await
    }

    async fn bookie_service_info(&self, bookie: &BookieId) -> Result<BookieServiceInfo> {
        let what = format!("registered bookie {bookie}");
        for mode in [BookieMode::Writable, BookieMode::ReadOnly] {
            if let Some(kv) = self.etcd.get(&self.bookie_key(bookie, mode), &what).await? {
                return folio_metadata::format::decode_bookie_service_info(bookie, kv.value());
            }
        }
        Err(MetadataError::not_found(what))
    }

    async fn watch_bookies(&self) -> Result<watch::Receiver<BookieSet>> {
        crate::watches::watch_bookies(self.etcd.clone()).await
    }

    async fn read_cookie(&self, bookie: &BookieId) -> Result<Versioned<Vec<u8>>> {
        let what = format!("cookie of bookie {bookie}");
        let kv = self
            .etcd
            .get(&self.keys().cookie(bookie.as_str()), &what)
            .await?
            .ok_or_else(|| MetadataError::not_found(what.clone()))?;
        Ok(Versioned {
            value: kv.value().to_vec(),
            version: Version::from_raw(kv.mod_revision()),
        })
    }

    async fn write_cookie(
        &self,
        bookie: &BookieId,
        cookie: &[u8],
        expected: Option<Version>,
    ) -> Result<Version> {
        let what = format!("cookie of bookie {bookie}");
        let key = self.keys().cookie(bookie.as_str());
        match expected {
            None => match self.etcd.create(&key, cookie, false, &what).await? {
                Some(rev) => Ok(Version::from_raw(rev)),
                None => Err(MetadataError::already_exists(what)),
            },
            Some(v) => match self.etcd.cas_put(&key, cookie, v, &what).await? {
                Ok(rev) => Ok(Version::from_raw(rev)),
                Err(CasFailure::Missing) => Err(MetadataError::not_found(what)),
                Err(CasFailure::Changed) => Err(MetadataError::bad_version(what, v)),
            },
        }
    }

    async fn delete_cookie(&self, bookie: &BookieId, expected: Version) -> Result<()> {
        let what = format!("cookie of bookie {bookie}");
        let key = self.keys().cookie(bookie.as_str());
        match self.etcd.cas_delete(&key, Some(expected), &what).await? {
            Ok(()) => Ok(()),
            Err(CasFailure::Missing) => Err(MetadataError::not_found(what)),
            Err(CasFailure::Changed) => Err(MetadataError::bad_version(what, expected)),
        }
    }

    async fn list_cookies(&self) -> Result<Vec<BookieId>> {
        let kvs = self
            .etcd
            .children(
                &self.keys().cookies(),
                "the cookie list",
                GetOptions::new().with_keys_only(),
            )
            .await?;
        Ok(kvs
            .iter()
            .filter_map(|kv| last_component(kv.key()))
            .filter_map(|n| BookieId::new(n).ok())
            .collect())
    }

    async fn generate_ledger_id(&self) -> Result<LedgerId> {
        // BookKeeper's Etcd64bitIdGenerator: put to a bucket key and read its version back;
        // id = bucket << 56 | version.
        const MAX_LOW: i64 = 0x00ff_ffff_ffff_ffff;
        for _ in 0..NUM_BUCKETS {
            let bucket = self.next_bucket.fetch_add(1, Ordering::Relaxed) % NUM_BUCKETS;
            let key = self.keys().bucket(bucket);
            let txn = Txn::new().and_then([
                TxnOp::put(key.as_str(), Vec::new(), None),
                TxnOp::get(key.as_str(), None),
            ]);
            let mut c = self.etcd.client()?;
            let resp = self.etcd.run("the ledger id generator", c.txn(txn)).await?;
            let version = resp
                .op_responses()
                .into_iter()
                .find_map(|r| match r {
                    TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.version()),
                    _ => None,
                })
                .ok_or_else(|| {
                    MetadataError::Internal(format!("id bucket {key} vanished while in use"))
                })?;
            if version <= MAX_LOW {
                return Ok(((bucket as i64) << 56) | version);
            }
        }
        Err(MetadataError::Internal(
            "every ledger id bucket is exhausted".into(),
        ))
    }

    async fn create_ledger(&self, ledger: LedgerId, metadata: &LedgerMetadata) -> Result<Version> {
        check_ledger_id(ledger)?;
        let what = format!("ledger {ledger}");
        let data = folio_metadata::driver::encode_ledger_metadata(ledger, metadata)?;
        let key = self.keys().ledger(ledger);
        match self.etcd.create(&key, &data, false, &what).await? {
            Some(rev) => Ok(Version::from_raw(rev)),
            None => {
                let existing = self.read_ledger(ledger).await?;
                if metadata.c_token != 0 && existing.value.c_token == metadata.c_token {
                    Ok(existing.version)
                } else {
                    Err(MetadataError::already_exists(what))
                }
            }
        }
    }

    async fn read_ledger(&self, ledger: LedgerId) -> Result<Versioned<LedgerMetadata>> {
        check_ledger_id(ledger)?;
        let what = format!("ledger {ledger}");
        let kv = self
            .etcd
            .get(&self.keys().ledger(ledger), &what)
            .await?
            .ok_or_else(|| MetadataError::not_found(what.clone()))?;
        Self::versioned_ledger(ledger, &kv)
    }

    async fn write_ledger(
        &self,
        ledger: LedgerId,
        metadata: &LedgerMetadata,
        expected: Version,
    ) -> Result<Version> {
        check_ledger_id(ledger)?;
        let what = format!("ledger {ledger}");
        let data = folio_metadata::driver::encode_ledger_metadata(ledger, metadata)?;
        match self
            .etcd
            .cas_put(&self.keys().ledger(ledger), &data, expected, &what)
            .await?
        {
            Ok(rev) => Ok(Version::from_raw(rev)),
            Err(CasFailure::Missing) => Err(MetadataError::not_found(what)),
            Err(CasFailure::Changed) => Err(MetadataError::bad_version(what, expected)),
        }
    }

    async fn delete_ledger(&self, ledger: LedgerId, expected: Option<Version>) -> Result<()> {
        check_ledger_id(ledger)?;
        let what = format!("ledger {ledger}");
        match self
            .etcd
            .cas_delete(&self.keys().ledger(ledger), expected, &what)
            .await?
        {
            Ok(()) => Ok(()),
            Err(CasFailure::Missing) => Err(MetadataError::not_found(what)),
            Err(CasFailure::Changed) => match expected {
                Some(v) => Err(MetadataError::bad_version(what, v)),
                None => Err(MetadataError::not_found(what)),
            },
        }
    }

    async fn list_ledgers(
        &self,
        start_after: Option<LedgerId>,
        limit: usize,
    ) -> Result<LedgerPage> {
        check_page_limit(limit)?;
        let dir = self.keys().ledgers();
        let from = match start_after {
            Some(a) if a == i64::MAX => {
                return Ok(LedgerPage {
                    ledgers: Vec::new(),
                    next: None,
                });
            }
            Some(a) => self.keys().ledger(a.max(-1) + 1),
            None => format!("{dir}/"),
        };
        let opts = GetOptions::new()
            .with_range(Keys::end_of(&dir))
            .with_keys_only()
            .with_limit(limit as i64 + 1);
        let mut c = self.etcd.client()?;
        let mut resp = self
            .etcd
            .run("the ledger list", c.get(from, Some(opts)))
            .await?;
        let ledgers: Vec<LedgerId> = resp
            .take_kvs()
            .iter()
            .filter_map(|kv| last_component(kv.key()))
            .filter_map(|n| keys::parse_ledger_uuid(&n))
            .collect();
        Ok(page(ledgers, limit))
    }

    async fn watch_ledger(
        &self,
        ledger: LedgerId,
    ) -> Result<watch::Receiver<Option<Versioned<LedgerMetadata>>>> {
        check_ledger_id(ledger)?;
        crate::watches::watch_ledger(self.etcd.clone(), ledger).await
    }

    async fn mark_underreplicated(&self, ledger: LedgerId, missing: &[BookieId]) -> Result<()> {
        check_ledger_id(ledger)?;
        crate::underreplication::mark(&self.etcd, ledger, missing).await
    }

    async fn list_underreplicated(&self) -> Result<Vec<UnderreplicatedLedger>> {
        crate::underreplication::list(&self.etcd).await
    }

    async fn get_underreplicated(&self, ledger: LedgerId) -> Result<UnderreplicatedLedger> {
        check_ledger_id(ledger)?;
        crate::underreplication::get(&self.etcd, ledger)
            .await?
            .ok_or_else(|| {
                MetadataError::not_found(folio_metadata::driver::underreplicated_what(ledger))
            })
    }

    async fn try_lock_underreplicated(
        &self,
        ledger: LedgerId,
        holder: &str,
    ) -> Result<Option<Box<dyn UnderreplicationLock>>> {
        check_ledger_id(ledger)?;
        crate::underreplication::try_lock(&self.etcd, ledger, holder).await
    }

    async fn lock_next_underreplicated(
        &self,
        holder: &str,
    ) -> Result<Option<(UnderreplicatedLedger, Box<dyn UnderreplicationLock>)>> {
        crate::underreplication::lock_next(&self.etcd, holder).await
    }

    async fn publish_operation(&self, name: &str, data: &[u8]) -> Result<()> {
        folio_metadata::driver::check_operation_name(name)?;
        crate::underreplication::publish_operation(&self.etcd, name, data).await
    }

    async fn remove_operation(&self, name: &str) -> Result<()> {
        folio_metadata::driver::check_operation_name(name)?;
        crate::underreplication::remove_operation(&self.etcd, name).await
    }

    async fn list_operations(&self) -> Result<Vec<(String, Vec<u8>)>> {
        crate::underreplication::list_operations(&self.etcd).await
    }

    async fn underreplicated_lock_holder(&self, ledger: LedgerId) -> Result<Option<String>> {
        check_ledger_id(ledger)?;
        crate::underreplication::lock_holder(&self.etcd, ledger).await
    }

    async fn remove_underreplicated(&self, ledger: LedgerId) -> Result<()> {
        check_ledger_id(ledger)?;
        crate::underreplication::remove(&self.etcd, ledger).await
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
        let what = "lostBookieRecoveryDelay";
        match self.etcd.get(&self.keys().ur_delay(), what).await? {
            None => Ok(None),
            Some(kv) => {
                let s = String::from_utf8_lossy(kv.value());
                let version = Version::from_raw(kv.mod_revision());
                s.trim()
                    .parse::<u32>()
                    .map(|value| Some(Versioned { value, version }))
                    .map_err(|_| {
                        MetadataError::corrupt(what, format!("{s:?} is not a number of seconds"))
                    })
            }
        }
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

    async fn join_auditor_election(
        &self,
        candidate: &BookieId,
    ) -> Result<Box<dyn LeaderCandidacy>> {
        crate::election::join(self.etcd.clone(), candidate).await
    }

    async fn current_auditor(&self) -> Result<Option<BookieId>> {
        crate::election::current(&self.etcd).await
    }
}

/// Deletes `key` only if it is still attached to this session's lease (it is ours).
pub(crate) async fn delete_own(etcd: &Etcd, key: &str, what: &str) -> Result<()> {
    let mut c = etcd.client()?;
    let txn = Txn::new()
        .when([Compare::lease(key, CompareOp::Equal, etcd.lease)])
        .and_then([TxnOp::delete(key, None)]);
    etcd.run(what, c.txn(txn)).await?;
    Ok(())
}

/// Fire-and-forget [`delete_own`] from a `Drop`.
pub(crate) fn delete_own_later(etcd: &Arc<Etcd>, key: String) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        let etcd = etcd.clone();
        handle.spawn(async move {
            let _ = delete_own(&etcd, &key, "a dropped ephemeral key").await;
        });
    }
}

/// A bookie's lease-attached registration key.
#[derive(Debug)]
struct EtcdRegistration {
    bookie: BookieId,
    mode: BookieMode,
    data: Vec<u8>,
    node: Ephemeral<Etcd>,
}

#[async_trait]
impl BookieRegistration for EtcdRegistration {
    fn bookie_id(&self) -> &BookieId {
        &self.bookie
    }

    fn mode(&self) -> BookieMode {
        self.mode
    }

    async fn set_mode(&mut self, mode: BookieMode) -> Result<()> {
        if mode == self.mode {
            return Ok(());
        }
        let what = format!("registration of bookie {}", self.bookie);
        let etcd = self.node.owner().clone();
        let new_key = match mode {
            BookieMode::Writable => format!("{}/{}", etcd.keys.writable(), self.bookie),
            BookieMode::ReadOnly => format!("{}/{}", etcd.keys.readonly(), self.bookie),
        };
        // Put the new key first, then delete the old one: never absent.
        let mut c = etcd.client()?;
        etcd.run(
            &what,
            c.put(
                new_key.as_str(),
                self.data.clone(),
                Some(PutOptions::new().with_lease(etcd.lease)),
            ),
        )
        .await?;
        if let Some(old) = self.node.replace(new_key) {
            delete_own(&etcd, &old, &what).await?;
        }
        self.mode = mode;
        Ok(())
    }

    async fn unregister(mut self: Box<Self>) -> Result<()> {
        let what = format!("registration of bookie {}", self.bookie);
        self.node.delete(&what).await
    }
}
