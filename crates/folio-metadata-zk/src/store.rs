//! [`ZkMetadataStore`]: the metadata contract on ZooKeeper in BookKeeper's own layout, so
//! that a Java BookKeeper client or shell pointed at the same root sees a Folio cluster as
//! its own: cluster identity, bookie registration, cookies, ledger ids and ledger metadata.
//! Under-replication and the Auditor election live in `underreplication.rs` and
//! `election.rs`; watches in `watches.rs`.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
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
use zookeeper_client as zk;

use crate::paths::{self, AVAILABLE, COOKIES, IDGEN, IDGEN_LONG, INSTANCEID, LAYOUT, READONLY};
use crate::session::{Zk, ZkOptions, ephemeral, ephemeral_sequential, persistent};

/// The `zk://` metadata store: one ZooKeeper session.
#[derive(Debug, Clone)]
pub struct ZkMetadataStore {
    pub(crate) zk: Arc<Zk>,
}

impl ZkMetadataStore {
    /// Connects with default options (10 s session and request timeouts).
    pub async fn connect(uri: &str) -> Result<Self> {
        Self::connect_with(uri, ZkOptions::default()).await
    }

    pub async fn connect_with(uri: &str, options: ZkOptions) -> Result<Self> {
        Ok(ZkMetadataStore {
            zk: Zk::connect(uri, options).await?,
        })
    }

    /// The ledgers root path (e.g. `/ledgers`).
    pub fn root(&self) -> &str {
        &self.zk.root
    }

    /// The ZooKeeper session id (what `ephemeralOwner` of this session's znodes holds).
    pub fn session_id(&self) -> i64 {
        self.zk.session_id
    }

    /// The underlying client (tests and tools inspect the raw znodes with it);
    /// `SessionExpired` once closed.
    pub fn zookeeper_client(&self) -> Result<zk::Client> {
        self.zk.client()
    }

    pub(crate) fn bookie_rel(bookie: &BookieId, mode: BookieMode) -> String {
        match mode {
            BookieMode::Writable => format!("{AVAILABLE}/{bookie}"),
            BookieMode::ReadOnly => format!("{AVAILABLE}/{READONLY}/{bookie}"),
        }
    }

    /// BookKeeper's short ledger id: an ephemeral-sequential `idgen/ID-` znode's counter.
    async fn short_ledger_id(&self) -> Result<Option<LedgerId>> {
        let rel = format!("{IDGEN}/ID-");
        let (_, seq) = self
            .zk
            .create_with_parents(&rel, b"", &ephemeral_sequential())
            .await?
            .map_err(|e| self.zk.err(e, "the ledger id generator", None))?;
        let seq = seq.into_i64();
        self.delete_idgen_node(&format!("{IDGEN}/ID-{seq:010}"));
        if (0..i32::MAX as i64).contains(&seq) {
            Ok(Some(seq))
        } else {
            Ok(None)
        }
    }

    /// Deletes an id-generation znode without waiting (BookKeeper deletes it asynchronously).
    fn delete_idgen_node(&self, rel: &str) {
        if let Ok(client) = self.zk.client() {
            // The request is sent when `delete` is called; the reply is not needed.
            drop(client.delete(&self.zk.abs(rel), None));
        }
    }

    /// BookKeeper's 63-bit ids (`LongZkLedgerIdGenerator`): the newest `HOB-<high>` under
    /// `idgen-long` gives the high 31 bits, an ephemeral-sequential child the low 32.
    async fn long_ledger_id(&self) -> Result<LedgerId> {
        let what = "the long ledger id generator";
        for _ in 0..100 {
            let hobs: Vec<i64> = self
                .zk
                .children(IDGEN_LONG, what)
                .await?
                .iter()
                .filter_map(|c| c.strip_prefix("HOB-")?.parse().ok())
                .collect();
            let high = match hobs.iter().max() {
                Some(h) => *h,
                None => {
                    let rel = format!("{IDGEN_LONG}/HOB-{:010}", 1);
                    match self
                        .zk
                        .create_with_parents(&rel, b"", &persistent())
                        .await?
                    {
                        Ok(_) | Err(zk::Error::NodeExists) => continue,
                        Err(e) => return Err(self.zk.err(e, what, None)),
                    }
                }
            };
            let rel = format!("{IDGEN_LONG}/HOB-{high:010}/ID-");
            match self
                .zk
                .create_with_parents(&rel, b"", &ephemeral_sequential())
                .await?
            {
                Ok((_, seq)) => {
                    let low = seq.into_i64();
                    self.delete_idgen_node(&format!("{IDGEN_LONG}/HOB-{high:010}/ID-{low:010}"));
                    if (0..i32::MAX as i64).contains(&low) && high < (1 << 31) {
                        return Ok((high << 32) | low);
                    }
                    // The low part overflowed: open the next high block, keep the 3 newest.
                    let next = format!("{IDGEN_LONG}/HOB-{:010}", high + 1);
                    match self
                        .zk
                        .create_with_parents(&next, b"", &persistent())
                        .await?
                    {
                        Ok(_) | Err(zk::Error::NodeExists) => {}
                        Err(e) => return Err(self.zk.err(e, what, None)),
                    }
                    let mut all = hobs.clone();
                    all.sort();
                    for old in all.iter().rev().skip(2) {
                        let _ = self
                            .zk
                            .delete_recursive(
                                &self.zk.abs(&format!("{IDGEN_LONG}/HOB-{old:010}")),
                                what,
                            )
                            .await;
                    }
                }
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(self.zk.err(e, what, None)),
            }
        }
        Err(MetadataError::Internal(
            "the long ledger id generator kept losing races".into(),
        ))
    }

    /// Walks one ledger subtree (short 2-4-4 or long 3-4-4-4-4) in ascending order, adding
    /// ids greater than `start_after` until `out` holds `limit + 1` ids.
    async fn walk_ledgers(
        &self,
        split: &[usize],
        start_after: Option<LedgerId>,
        limit: usize,
        out: &mut Vec<LedgerId>,
    ) -> Result<()> {
        let total: usize = split.iter().sum();
        // (relative dir, digits so far, depth)
        let mut stack = vec![(String::new(), String::new(), 0usize)];
        while let Some((dir, prefix, depth)) = stack.pop() {
            if out.len() > limit {
                return Ok(());
            }
            let leaf_level = depth == split.len() - 1;
            let children = self.zk.children(&dir, "the ledger list").await?;
            let mut next = Vec::new();
            for c in children {
                if !paths::is_group(&c, split[depth], leaf_level) {
                    continue;
                }
                let digits = format!("{prefix}{}", c.trim_start_matches('L'));
                let (_, max) = paths::id_range(&digits, total);
                if let Some(after) = start_after
                    && max <= after as u128
                {
                    continue;
                }
                let child_rel = paths::join(&dir, &c);
                let child_rel = child_rel.trim_start_matches('/').to_string();
                next.push((child_rel, digits));
            }
            if leaf_level {
                for (_, digits) in next {
                    if out.len() > limit {
                        break;
                    }
                    let Ok(id) = digits.parse::<i64>() else {
                        continue;
                    };
                    // The long subtree must not double-count ids of the short form.
                    let in_form = if total == 10 {
                        id < paths::LONG_FORM_FROM
                    } else {
                        id >= paths::LONG_FORM_FROM
                    };
                    if in_form && start_after.is_none_or(|a| id > a) {
                        out.push(id);
                    }
                }
            } else {
                // Stack: push in reverse so the smallest is visited first.
                for (rel, digits) in next.into_iter().rev() {
                    stack.push((rel, digits, depth + 1));
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl MetadataStore for ZkMetadataStore {
    fn uri(&self) -> &str {
        &self.zk.uri
    }

    fn session_state(&self) -> watch::Receiver<SessionState> {
        self.zk.state.subscribe()
    }

    /// The timeout asked for (the server may clamp it to 2 to 20 ticks).
    fn session_timeout(&self) -> std::time::Duration {
        self.zk.options.session_timeout
    }

    async fn close(&self) -> Result<()> {
        if self.zk.shutdown.send_replace(true) {
            return Ok(());
        }
        // Remove this session's ephemerals ourselves, so they are gone when close returns
        // (the session's own end would remove them too, but asynchronously).
        if let Ok(client) = self.zk.client() {
            for path in self.zk.take_owned() {
                let _ = self.zk.run(client.delete(&path, None)).await;
            }
        }
        self.zk.state.send_replace(SessionState::Closed);
        // Dropping the last client handle closes the ZooKeeper session.
        drop(self.zk.take_client());
        Ok(())
    }
}

#[async_trait]
impl RegistrationManager for ZkMetadataStore {
    async fn register_bookie(
        &self,
        bookie: &BookieId,
        mode: BookieMode,
        info: &BookieServiceInfo,
    ) -> Result<Box<dyn BookieRegistration>> {
        let data = folio_metadata::format::encode_bookie_service_info(info);
        let what = format!("registration of bookie {bookie}");
        let client = self.zk.client()?;
        // Refuse if registered in either mode by any session, at once. A node of an older,
        // dead session vanishes within its session timeout: the bookie's registrar waits
        // that out (bounded by `session_timeout`), the same way for every driver.
        for m in [BookieMode::Writable, BookieMode::ReadOnly] {
            let path = self.zk.abs(&Self::bookie_rel(bookie, m));
            if let Some(stat) = self
                .zk
                .run(client.check_stat(&path))
                .await?
                .map_err(|e| self.zk.err(e, &what, None))?
            {
                let by = if stat.ephemeral_owner == self.zk.session_id {
                    "this session"
                } else {
                    "another session"
                };
                return Err(MetadataError::already_exists(format!(
                    "registration of bookie {bookie} (by {by})"
                )));
            }
        }
        let path = self.zk.put_registration(bookie, mode, &data).await?;
        Ok(Box::new(EphemeralRegistration::new(
            self.zk.clone(),
            bookie.clone(),
            mode,
            data,
            path,
        )))
    }

    async fn list_bookies(&self) -> Result<BookieSet> {
        crate::watches::read_bookies(&self.zk).await
    }

    async fn bookie_service_info(&self, bookie: &BookieId) -> Result<BookieServiceInfo> {
        let what = format!("registered bookie {bookie}");
        for mode in [BookieMode::Writable, BookieMode::ReadOnly] {
            if let Some((data, _)) = self.zk.get(&Self::bookie_rel(bookie, mode), &what).await? {
                return folio_metadata::format::decode_bookie_service_info(bookie, &data);
            }
        }
        Err(MetadataError::not_found(what))
    }

    async fn watch_bookies(&self) -> Result<watch::Receiver<BookieSet>> {
        crate::watches::watch_bookies(self.zk.clone()).await
    }
}

#[async_trait]
impl ClusterManager for ZkMetadataStore {
    async fn init_cluster(&self) -> Result<ClusterInfo> {
        let client = self.zk.client()?;
        let root = self.zk.root.clone();
        let already = || MetadataError::already_exists(format!("cluster at {root}"));
        // Parents of the root (e.g. /folio for /folio/ledgers) are plain directories.
        if let Some(i) = root.rfind('/')
            && i > 0
        {
            match self.zk.run(client.mkdir(&root[..i], &persistent())).await? {
                Ok(()) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(self.zk.err(e, "the ledgers root's parent", None)),
            }
        }
        let instance_id = folio_metadata::new_instance_id();
        // BookKeeper's initNewCluster: one multi for root, available, available/readonly
        // and INSTANCEID; then LAYOUT. The cluster exists once INSTANCEID does; directories
        // already there (a bookie registered before the cluster was initialised) are kept,
        // and the INSTANCEID create decides between two concurrent initialisations.
        let mut initialised = false;
        for _ in 0..10 {
            if self.zk.exists(INSTANCEID, "the cluster INSTANCEID").await? {
                return Err(already());
            }
            let mut multi = client.new_multi_writer();
            for rel in ["", AVAILABLE, &format!("{AVAILABLE}/{READONLY}")] {
                if !self.zk.exists(rel, "the cluster directories").await? {
                    multi
                        .add_create(&self.zk.abs(rel), b"", &persistent())
                        .map_err(|e| self.zk.err(e, "cluster initialisation", None))?;
                }
            }
            multi
                .add_create(
                    &self.zk.abs(INSTANCEID),
                    instance_id.as_bytes(),
                    &persistent(),
                )
                .map_err(|e| self.zk.err(e, "cluster initialisation", None))?;
            match self.zk.run(multi.commit()).await? {
                Ok(_) => {
                    initialised = true;
                    break;
                }
                // Somebody created one of them meanwhile: look again.
                Err(zk::MultiWriteError::OperationFailed {
                    source: zk::Error::NodeExists,
                    ..
                }) => continue,
                Err(e) => {
                    return Err(MetadataError::Internal(format!(
                        "ZooKeeper error initialising the cluster at {root}: {e}"
                    )));
                }
            }
        }
        if !initialised {
            return Err(MetadataError::Internal(format!(
                "initialising the cluster at {root} kept racing with other writers"
            )));
        }
        // This session won the INSTANCEID: it owns the LAYOUT too (a stale one is replaced).
        let layout = self.zk.abs(LAYOUT);
        let bytes = paths::DEFAULT_LAYOUT.as_bytes();
        match self
            .zk
            .run(client.create(&layout, bytes, &persistent()))
            .await?
        {
            Ok(_) => {}
            Err(zk::Error::NodeExists) => {
                self.zk
                    .run(client.set_data(&layout, bytes, None))
                    .await?
                    .map_err(|e| self.zk.err(e, "the cluster LAYOUT", None))?;
            }
            Err(e) => return Err(self.zk.err(e, "the cluster LAYOUT", None)),
        }
        Ok(ClusterInfo {
            instance_id,
            layout: paths::DEFAULT_LAYOUT.to_string(),
        })
    }

    async fn read_cluster(&self) -> Result<ClusterInfo> {
        let what = format!("cluster at {} (not initialised)", self.zk.root);
        let (layout, _) = self
            .zk
            .get(LAYOUT, "the cluster LAYOUT")
            .await?
            .ok_or_else(|| MetadataError::not_found(what.clone()))?;
        let (id, _) = self
            .zk
            .get(INSTANCEID, "the cluster INSTANCEID")
            .await?
            .ok_or_else(|| MetadataError::not_found(what.clone()))?;
        let text = |b: Vec<u8>, name: &str| {
            String::from_utf8(b)
                .map_err(|_| MetadataError::corrupt(format!("cluster {name}"), "not valid UTF-8"))
        };
        Ok(ClusterInfo {
            instance_id: text(id, "INSTANCEID")?,
            layout: text(layout, "LAYOUT")?,
        })
    }

    async fn format_cluster(&self) -> Result<ClusterInfo> {
        let root = self.zk.root.clone();
        self.zk.delete_recursive(&root, "the cluster").await?;
        self.init_cluster().await
    }

    async fn cookie_record(&self, bookie: &BookieId) -> Result<Option<Versioned<Vec<u8>>>> {
        let what = cookie_what(bookie);
        let record = self.zk.get(&format!("{COOKIES}/{bookie}"), &what).await?;
        Ok(record.map(|(value, stat)| Versioned {
            value,
            version: Version::from_raw(stat.version as i64),
        }))
    }

    async fn write_cookie_record(
        &self,
        bookie: &BookieId,
        cookie: &[u8],
        expected: Option<Version>,
    ) -> Result<RecordWrite<Version>> {
        let what = cookie_what(bookie);
        let rel = format!("{COOKIES}/{bookie}");
        let written = match expected {
            None => {
                let r = self
                    .zk
                    .create_with_parents(&rel, cookie, &persistent())
                    .await?;
                self.zk.written(r.map(|(stat, _)| stat), &what)?
            }
            Some(v) => {
                let Ok(version) = i32::try_from(v.raw()) else {
                    return Ok(RecordWrite::Changed);
                };
                let client = self.zk.client()?;
                let r = self
                    .zk
                    .run(client.set_data(&self.zk.abs(&rel), cookie, Some(version)))
                    .await?;
                self.zk.written(r, &what)?
            }
        };
        Ok(written.map(|stat| Version::from_raw(stat.version as i64)))
    }

    async fn delete_cookie_record(
        &self,
        bookie: &BookieId,
        expected: Version,
    ) -> Result<RecordWrite<()>> {
        let Ok(version) = i32::try_from(expected.raw()) else {
            return Ok(RecordWrite::Changed);
        };
        let client = self.zk.client()?;
        let r = self
            .zk
            .run(client.delete(&self.zk.abs(&format!("{COOKIES}/{bookie}")), Some(version)))
            .await?;
        self.zk.written(r, &cookie_what(bookie))
    }

    async fn list_cookies(&self) -> Result<Vec<BookieId>> {
        let names = self.zk.children(COOKIES, "the cookie list").await?;
        Ok(names
            .into_iter()
            .filter_map(|n| BookieId::new(n).ok())
            .collect())
    }
}

#[async_trait]
impl LedgerManager for ZkMetadataStore {
    async fn generate_ledger_id(&self) -> Result<LedgerId> {
        if !self
            .zk
            .exists(IDGEN_LONG, "the long ledger id generator")
            .await?
        {
            if let Some(id) = self.short_ledger_id().await? {
                return Ok(id);
            }
            // Short ids are exhausted: switch to 63-bit ids for good, as BookKeeper does.
            match self
                .zk
                .create_with_parents(IDGEN_LONG, b"", &persistent())
                .await?
            {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(self.zk.err(e, "the long ledger id generator", None)),
            }
        }
        self.long_ledger_id().await
    }

    async fn create_ledger_record(
        &self,
        ledger: LedgerId,
        data: &[u8],
    ) -> Result<std::result::Result<Version, Versioned<Vec<u8>>>> {
        let what = ledger_what(ledger);
        let rel = paths::ledger_rel(ledger);
        match self
            .zk
            .create_with_parents(&rel, data, &persistent())
            .await?
        {
            Ok((stat, _)) => Ok(Ok(Version::from_raw(stat.version as i64))),
            // A retried create finds its own record: the caller compares the cToken.
            Err(zk::Error::NodeExists) => match self.ledger_record(ledger).await? {
                Some(existing) => Ok(Err(existing)),
                None => Err(MetadataError::not_found(what)),
            },
            Err(e) => Err(self.zk.err(e, &what, None)),
        }
    }

    async fn ledger_record(&self, ledger: LedgerId) -> Result<Option<Versioned<Vec<u8>>>> {
        let what = ledger_what(ledger);
        let record = self.zk.get(&paths::ledger_rel(ledger), &what).await?;
        Ok(record.map(|(value, stat)| Versioned {
            value,
            version: Version::from_raw(stat.version as i64),
        }))
    }

    async fn write_ledger_record(
        &self,
        ledger: LedgerId,
        data: &[u8],
        expected: Version,
    ) -> Result<RecordWrite<Version>> {
        let Ok(version) = i32::try_from(expected.raw()) else {
            return Ok(RecordWrite::Changed);
        };
        let client = self.zk.client()?;
        let r = self
            .zk
            .run(client.set_data(
                &self.zk.abs(&paths::ledger_rel(ledger)),
                data,
                Some(version),
            ))
            .await?;
        let written = self.zk.written(r, &ledger_what(ledger))?;
        Ok(written.map(|stat| Version::from_raw(stat.version as i64)))
    }

    async fn delete_ledger_record(
        &self,
        ledger: LedgerId,
        expected: Option<Version>,
    ) -> Result<RecordWrite<()>> {
        let version = match expected.map(|v| i32::try_from(v.raw())) {
            Some(Ok(v)) => Some(v),
            Some(Err(_)) => return Ok(RecordWrite::Changed),
            None => None,
        };
        let rel = paths::ledger_rel(ledger);
        let client = self.zk.client()?;
        let r = self
            .zk
            .run(client.delete(&self.zk.abs(&rel), version))
            .await?;
        let written = self.zk.written(r, &ledger_what(ledger))?;
        if written == RecordWrite::Done(()) {
            self.zk.delete_empty_parents(&rel, 0).await;
        }
        Ok(written)
    }

    async fn list_ledgers(
        &self,
        start_after: Option<LedgerId>,
        limit: usize,
    ) -> Result<LedgerPage> {
        check_page_limit(limit)?;
        let mut out = Vec::new();
        if start_after.is_none_or(|a| a < paths::LONG_FORM_FROM - 1) {
            self.walk_ledgers(paths::SHORT_SPLIT, start_after, limit, &mut out)
                .await?;
        }
        if out.len() <= limit {
            self.walk_ledgers(paths::LONG_SPLIT, start_after, limit, &mut out)
                .await?;
        }
        out.sort();
        Ok(page(out, limit))
    }

    async fn watch_ledger(
        &self,
        ledger: LedgerId,
    ) -> Result<watch::Receiver<Option<Versioned<LedgerMetadata>>>> {
        check_ledger_id(ledger)?;
        crate::watches::watch_ledger(self.zk.clone(), ledger).await
    }
}

#[async_trait]
impl RegistrationOwner for Zk {
    async fn put_registration(
        &self,
        bookie: &BookieId,
        mode: BookieMode,
        data: &[u8],
    ) -> Result<String> {
        let rel = ZkMetadataStore::bookie_rel(bookie, mode);
        if let Err(e) = self.create_with_parents(&rel, data, &ephemeral()).await? {
            return Err(self.err(e, &format!("registration of bookie {bookie}"), None));
        }
        let path = self.abs(&rel);
        self.own(&path);
        Ok(path)
    }
}

/// The bookie ids among `names` (children of a registration directory).
pub(crate) fn bookie_ids(names: Vec<String>) -> BTreeSet<BookieId> {
    names
        .into_iter()
        .filter(|n| n != READONLY)
        .filter_map(|n| BookieId::new(n).ok())
        .collect()
}
