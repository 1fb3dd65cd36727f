//! The clients' view of the metadata store, with outages: while an outage lasts, every
//! call fails with `Unreachable`, as a ZooKeeper client sees a connection loss. A call
//! that changes something is sometimes applied and still reported as failed (the answer
//! was lost, not the request), so a client cannot take a failure to mean "not written".
//! Outside an outage every call goes to the `mem://` session unchanged.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use folio_metadata::mem::MemMetadataStore;
use folio_metadata::prelude::*;
use folio_metadata::{
    AuditorCheck, BookieMode, BookieRegistration, BookieServiceInfo, BookieSet, ClusterInfo,
    LeaderCandidacy, LedgerPage, MetadataError, RecordWrite, Result, SessionState,
    UnderreplicatedLedger, UnderreplicationLock, Version, Versioned,
};
use folio_types::metadata::LedgerMetadata;
use folio_types::{BookieId, LedgerId};
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::rng::SimRng;

/// An outage shared by every client of a run.
pub struct Outage {
    until: Mutex<Option<tokio::time::Instant>>,
    rng: SimRng,
    /// Calls failed by an outage; of those, changes applied before failing.
    pub failed: AtomicU64,
    pub applied_then_failed: AtomicU64,
}

impl Outage {
    pub fn new(rng: SimRng) -> Outage {
        Outage {
            until: Mutex::new(None),
            rng,
            failed: AtomicU64::new(0),
            applied_then_failed: AtomicU64::new(0),
        }
    }

    /// Every call fails until `until`.
    pub fn start(&self, until: tokio::time::Instant) {
        *self.until.lock() = Some(until);
    }

    pub fn end(&self) {
        *self.until.lock() = None;
    }

    fn active(&self) -> bool {
        self.until
            .lock()
            .is_some_and(|t| tokio::time::Instant::now() < t)
    }

    fn error(&self) -> MetadataError {
        self.failed.fetch_add(1, Ordering::Relaxed);
        MetadataError::Unreachable {
            address: "mem://sim".into(),
            reason: "simulated metadata outage".into(),
        }
    }
}

/// A client's metadata session behind the run's [`Outage`].
#[derive(Clone)]
pub struct FlakyStore {
    inner: MemMetadataStore,
    outage: Arc<Outage>,
}

impl std::fmt::Debug for FlakyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlakyStore").finish_non_exhaustive()
    }
}

impl FlakyStore {
    pub fn new(inner: MemMetadataStore, outage: Arc<Outage>) -> FlakyStore {
        FlakyStore { inner, outage }
    }

    /// Fails a read during an outage.
    fn read(&self) -> Result<()> {
        if self.outage.active() {
            return Err(self.outage.error());
        }
        Ok(())
    }

    /// A change during an outage: lost before it arrives (`None`), or applied with its
    /// answer lost (`Some(true)`); `Some(false)` outside an outage.
    fn change(&self) -> Option<bool> {
        if !self.outage.active() {
            return Some(false);
        }
        self.outage.rng.chance(1, 3).then_some(true)
    }

    async fn changed<T>(&self, f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        match self.change() {
            None => Err(self.outage.error()),
            Some(false) => f.await,
            Some(true) => {
                let _ = f.await;
                self.outage
                    .applied_then_failed
                    .fetch_add(1, Ordering::Relaxed);
                Err(self.outage.error())
            }
        }
    }
}

#[async_trait]
impl MetadataStore for FlakyStore {
    fn uri(&self) -> &str {
        self.inner.uri()
    }

    fn session_state(&self) -> watch::Receiver<SessionState> {
        self.inner.session_state()
    }

    fn session_timeout(&self) -> std::time::Duration {
        self.inner.session_timeout()
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

#[async_trait]
impl RegistrationManager for FlakyStore {
    async fn register_bookie(
        &self,
        bookie: &BookieId,
        mode: BookieMode,
        info: &BookieServiceInfo,
    ) -> Result<Box<dyn BookieRegistration>> {
        self.read()?;
        self.inner.register_bookie(bookie, mode, info).await
    }

    async fn list_bookies(&self) -> Result<BookieSet> {
        self.read()?;
        self.inner.list_bookies().await
    }

    async fn bookie_service_info(&self, bookie: &BookieId) -> Result<BookieServiceInfo> {
        self.read()?;
        self.inner.bookie_service_info(bookie).await
    }

    async fn watch_bookies(&self) -> Result<watch::Receiver<BookieSet>> {
        self.read()?;
        self.inner.watch_bookies().await
    }
}

#[async_trait]
impl ClusterManager for FlakyStore {
    async fn init_cluster(&self) -> Result<ClusterInfo> {
        self.changed(self.inner.init_cluster()).await
    }

    async fn read_cluster(&self) -> Result<ClusterInfo> {
        self.read()?;
        self.inner.read_cluster().await
    }

    async fn format_cluster(&self) -> Result<ClusterInfo> {
        self.changed(self.inner.format_cluster()).await
    }

    async fn cookie_record(&self, bookie: &BookieId) -> Result<Option<Versioned<Vec<u8>>>> {
        self.read()?;
        self.inner.cookie_record(bookie).await
    }

    async fn write_cookie_record(
        &self,
        bookie: &BookieId,
        cookie: &[u8],
        expected: Option<Version>,
    ) -> Result<RecordWrite<Version>> {
        self.changed(self.inner.write_cookie_record(bookie, cookie, expected))
            .await
    }

    async fn delete_cookie_record(
        &self,
        bookie: &BookieId,
        expected: Version,
    ) -> Result<RecordWrite<()>> {
        self.changed(self.inner.delete_cookie_record(bookie, expected))
            .await
    }

    async fn list_cookies(&self) -> Result<Vec<BookieId>> {
        self.read()?;
        self.inner.list_cookies().await
    }
}

#[async_trait]
impl LedgerManager for FlakyStore {
    async fn generate_ledger_id(&self) -> Result<LedgerId> {
        self.changed(self.inner.generate_ledger_id()).await
    }

    async fn create_ledger_record(
        &self,
        ledger: LedgerId,
        data: &[u8],
    ) -> Result<std::result::Result<Version, Versioned<Vec<u8>>>> {
        self.changed(self.inner.create_ledger_record(ledger, data))
            .await
    }

    async fn ledger_record(&self, ledger: LedgerId) -> Result<Option<Versioned<Vec<u8>>>> {
        self.read()?;
        self.inner.ledger_record(ledger).await
    }

    async fn write_ledger_record(
        &self,
        ledger: LedgerId,
        data: &[u8],
        expected: Version,
    ) -> Result<RecordWrite<Version>> {
        self.changed(self.inner.write_ledger_record(ledger, data, expected))
            .await
    }

    async fn delete_ledger_record(
        &self,
        ledger: LedgerId,
        expected: Option<Version>,
    ) -> Result<RecordWrite<()>> {
        self.changed(self.inner.delete_ledger_record(ledger, expected))
            .await
    }

    async fn list_ledgers(
        &self,
        start_after: Option<LedgerId>,
        limit: usize,
    ) -> Result<LedgerPage> {
        self.read()?;
        self.inner.list_ledgers(start_after, limit).await
    }

    async fn watch_ledger(
        &self,
        ledger: LedgerId,
    ) -> Result<watch::Receiver<Option<Versioned<LedgerMetadata>>>> {
        self.read()?;
        self.inner.watch_ledger(ledger).await
    }
}

#[async_trait]
impl UnderreplicationManager for FlakyStore {
    async fn mark_underreplicated(&self, ledger: LedgerId, missing: &[BookieId]) -> Result<()> {
        self.changed(self.inner.mark_underreplicated(ledger, missing))
            .await
    }

    async fn list_underreplicated(&self) -> Result<Vec<UnderreplicatedLedger>> {
        self.read()?;
        self.inner.list_underreplicated().await
    }

    async fn find_underreplicated(
        &self,
        ledger: LedgerId,
    ) -> Result<Option<UnderreplicatedLedger>> {
        self.read()?;
        self.inner.find_underreplicated(ledger).await
    }

    async fn try_lock_underreplicated(
        &self,
        ledger: LedgerId,
        holder: &str,
    ) -> Result<Option<Box<dyn UnderreplicationLock>>> {
        self.read()?;
        self.inner.try_lock_underreplicated(ledger, holder).await
    }

    async fn lock_next_underreplicated(
        &self,
        holder: &str,
    ) -> Result<Option<(UnderreplicatedLedger, Box<dyn UnderreplicationLock>)>> {
        self.read()?;
        self.inner.lock_next_underreplicated(holder).await
    }

    async fn underreplicated_lock_holder(&self, ledger: LedgerId) -> Result<Option<String>> {
        self.read()?;
        self.inner.underreplicated_lock_holder(ledger).await
    }

    async fn remove_underreplicated(&self, ledger: LedgerId) -> Result<()> {
        self.changed(self.inner.remove_underreplicated(ledger))
            .await
    }

    async fn put_operation_record(&self, name: &str, data: &[u8]) -> Result<()> {
        self.changed(self.inner.put_operation_record(name, data))
            .await
    }

    async fn delete_operation_record(&self, name: &str) -> Result<()> {
        self.changed(self.inner.delete_operation_record(name)).await
    }

    async fn list_operations(&self) -> Result<Vec<(String, Vec<u8>)>> {
        self.read()?;
        self.inner.list_operations().await
    }

    async fn is_autorecovery_enabled(&self) -> Result<bool> {
        self.read()?;
        self.inner.is_autorecovery_enabled().await
    }

    async fn set_autorecovery_enabled(&self, enabled: bool) -> Result<()> {
        self.changed(self.inner.set_autorecovery_enabled(enabled))
            .await
    }

    async fn lost_bookie_recovery_delay_versioned(&self) -> Result<Option<Versioned<u32>>> {
        self.read()?;
        self.inner.lost_bookie_recovery_delay_versioned().await
    }

    async fn set_lost_bookie_recovery_delay(&self, seconds: u32) -> Result<()> {
        self.changed(self.inner.set_lost_bookie_recovery_delay(seconds))
            .await
    }

    async fn auditor_check_ctime(&self, check: AuditorCheck) -> Result<Option<i64>> {
        self.read()?;
        self.inner.auditor_check_ctime(check).await
    }

    async fn set_auditor_check_ctime(&self, check: AuditorCheck, ctime_ms: i64) -> Result<()> {
        self.changed(self.inner.set_auditor_check_ctime(check, ctime_ms))
            .await
    }
}

#[async_trait]
impl AuditorElection for FlakyStore {
    async fn join_auditor_election(
        &self,
        candidate: &BookieId,
    ) -> Result<Box<dyn LeaderCandidacy>> {
        self.read()?;
        self.inner.join_auditor_election(candidate).await
    }

    async fn current_auditor(&self) -> Result<Option<BookieId>> {
        self.read()?;
        self.inner.current_auditor().await
    }
}
