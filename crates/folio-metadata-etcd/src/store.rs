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
use folio_metadata::driver::{
    EphemeralRegistration, RegistrationOwner, check_ledger_id, check_page_limit, page,
};
use folio_metadata::prelude::*;
use folio_metadata::{
    BookieMode, BookieRegistration, BookieServiceInfo, BookieSet, ClusterInfo, LedgerPage,
    MetadataError, RecordWrite, Result, SessionState, Version, Versioned, cookie_what, ledger_what,
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

    pub(crate) fn keys(&self) -> &Keys {
        &self.etcd.keys
    }

    fn bookie_key(&self, bookie: &BookieId, mode: BookieMode) -> String {
        bookie_key(self.keys(), bookie, mode)
    }
}

/// A bookie's registration key in `mode`.
fn bookie_key(keys: &Keys, bookie: &BookieId, mode: BookieMode) -> String {
    match mode {
        BookieMode::Writable => format!("{}/{bookie}", keys.writable()),
        BookieMode::ReadOnly => format!("{}/{bookie}", keys.readonly()),
    }
}

/// A compare-and-set's outcome as the contract's [`RecordWrite`].
fn written<T>(r: std::result::Result<T, CasFailure>) -> RecordWrite<T> {
    match r {
        Ok(v) => RecordWrite::Done(v),
        Err(CasFailure::Missing) => RecordWrite::Missing,
        Err(CasFailure::Changed) => RecordWrite::Changed,
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
}

#[async_trait]
impl RegistrationManager for EtcdMetadataStore {
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
                        return Ok(Box::new(EphemeralRegistration::new(
                            self.etcd.clone(),
                            bookie.clone(),
                            mode,
                            data,
                            key,
                        )));
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
}

#[async_trait]
impl ClusterManager for EtcdMetadataStore {
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

    async fn cookie_record(&self, bookie: &BookieId) -> Result<Option<Versioned<Vec<u8>>>> {
        let what = cookie_what(bookie);
        let kv = self
            .etcd
            .get(&self.keys().cookie(bookie.as_str()), &what)
            .await?;
        Ok(kv.map(|kv| Versioned {
            value: kv.value().to_vec(),
            version: Version::from_raw(kv.mod_revision()),
        }))
    }

    async fn write_cookie_record(
        &self,
        bookie: &BookieId,
        cookie: &[u8],
        expected: Option<Version>,
    ) -> Result<RecordWrite<Version>> {
        let what = cookie_what(bookie);
        let key = self.keys().cookie(bookie.as_str());
        Ok(match expected {
            None => match self.etcd.create(&key, cookie, false, &what).await? {
                Some(rev) => RecordWrite::Done(rev),
                None => RecordWrite::Exists,
            },
            Some(v) => written(self.etcd.cas_put(&key, cookie, v, &what).await?),
        }
        .map(Version::from_raw))
    }

    async fn delete_cookie_record(
        &self,
        bookie: &BookieId,
        expected: Version,
    ) -> Result<RecordWrite<()>> {
        let key = self.keys().cookie(bookie.as_str());
        let r = self
            .etcd
            .cas_delete(&key, Some(expected), &cookie_what(bookie))
            .await?;
        Ok(written(r))
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
}

#[async_trait]
impl LedgerManager for EtcdMetadataStore {
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

    async fn create_ledger_record(
        &self,
        ledger: LedgerId,
        data: &[u8],
    ) -> Result<std::result::Result<Version, Versioned<Vec<u8>>>> {
        let what = ledger_what(ledger);
        let key = self.keys().ledger(ledger);
        match self.etcd.create(&key, data, false, &what).await? {
            Some(rev) => Ok(Ok(Version::from_raw(rev))),
            // A retried create finds its own record: the caller compares the cToken.
            None => match self.ledger_record(ledger).await? {
                Some(existing) => Ok(Err(existing)),
                None => Err(MetadataError::not_found(what)),
            },
        }
    }

    async fn ledger_record(&self, ledger: LedgerId) -> Result<Option<Versioned<Vec<u8>>>> {
        let kv = self
            .etcd
            .get(&self.keys().ledger(ledger), &ledger_what(ledger))
            .await?;
        Ok(kv.map(|kv| Versioned {
            value: kv.value().to_vec(),
            version: Version::from_raw(kv.mod_revision()),
        }))
    }

    async fn write_ledger_record(
        &self,
        ledger: LedgerId,
        data: &[u8],
        expected: Version,
    ) -> Result<RecordWrite<Version>> {
        let key = self.keys().ledger(ledger);
        let r = self
            .etcd
            .cas_put(&key, data, expected, &ledger_what(ledger))
            .await?;
        Ok(written(r).map(Version::from_raw))
    }

    async fn delete_ledger_record(
        &self,
        ledger: LedgerId,
        expected: Option<Version>,
    ) -> Result<RecordWrite<()>> {
        let key = self.keys().ledger(ledger);
        let r = self
            .etcd
            .cas_delete(&key, expected, &ledger_what(ledger))
            .await?;
        Ok(written(r))
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

#[async_trait]
impl RegistrationOwner for Etcd {
    async fn put_registration(
        &self,
        bookie: &BookieId,
        mode: BookieMode,
        data: &[u8],
    ) -> Result<String> {
        let key = bookie_key(&self.keys, bookie, mode);
        let mut c = self.client()?;
        self.run(
            &format!("registration of bookie {bookie}"),
            c.put(
                key.as_str(),
                data.to_vec(),
                Some(PutOptions::new().with_lease(self.lease)),
            ),
        )
        .await?;
        Ok(key)
    }
}
