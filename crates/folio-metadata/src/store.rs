//! The metadata contract: what the client, the bookie and autorecovery need from a
//! metadata service, whatever it is (ZooKeeper in BookKeeper's layout, etcd, the
//! embedded sqlite database, or the in-process `mem://` store).
//!
//! One `MetadataStore` value is one *session* with the service, like one ZooKeeper
//! client: bookie registrations, under-replication locks and Auditor votes made
//! through it are ephemeral and vanish when the session ends (closed with
//! [`MetadataStore::close`], expired, or its process dead). Everything else
//! (cluster identity, cookies, ledger metadata, the under-replication marks, the
//! autorecovery settings) is persistent.
//!
//! Records that BookKeeper serializes (ledger metadata, bookie service info) are
//! serialized by this crate (`crate::format`), so every driver stores the same bytes.
//!
//! The contract is split along BookKeeper's managers ([`RegistrationManager`],
//! [`ClusterManager`], [`LedgerManager`], [`UnderreplicationManager`], [`AuditorElection`]);
//! [`MetadataStore`] is their umbrella plus the session. Their provided methods hold the
//! rules every driver shares; a driver implements the rest, and the `*_record` methods that
//! move the raw records.

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;

use async_trait::async_trait;
use folio_types::metadata::LedgerMetadata;
use folio_types::{BookieId, LedgerId};
use tokio::sync::watch;

use crate::Result;

/// A record's version, for compare-and-set: a ZooKeeper znode version, an etcd mod
/// revision, a sqlite row version. Opaque to callers: only compare it for equality
/// and hand it back to the store it came from.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Version(i64);

impl Version {
    /// Wraps a driver's native version number. Only drivers call this.
    pub const fn from_raw(raw: i64) -> Self {
        Version(raw)
    }

    /// The driver's native version number. Only drivers call this.
    pub const fn raw(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Debug for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Version({})", self.0)
    }
}

/// A value with the version it was read at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned<T> {
    pub value: T,
    pub version: Version,
}

/// What identifies a cluster: its instance id (a UUID string, BookKeeper's
/// `INSTANCEID`, written into every bookie's cookie) and its layout text
/// (BookKeeper's `LAYOUT`, e.g. `2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    pub instance_id: String,
    pub layout: String,
}

/// Whether a bookie takes writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BookieMode {
    Writable,
    ReadOnly,
}

/// One network endpoint a bookie publishes (BookKeeper's `BookieServiceInfoFormat.Endpoint`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// "bookie" for the bookie port, "http" for the admin endpoint.
    pub id: String,
    pub host: String,
    pub port: u16,
    /// "bookie-rpc" for the bookie protocol.
    pub protocol: String,
    pub auth: Vec<String>,
    /// "tls" when the endpoint speaks TLS.
    pub extensions: Vec<String>,
}

/// What a bookie publishes at registration (BookKeeper's `BookieServiceInfo`).
/// Empty means "the bookie id is `host:port`" (BookKeeper's legacy resolution).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BookieServiceInfo {
    pub endpoints: Vec<Endpoint>,
    pub properties: std::collections::BTreeMap<String, String>,
}

/// The registered bookies at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BookieSet {
    pub writable: BTreeSet<BookieId>,
    pub readonly: BTreeSet<BookieId>,
}

/// One of the Auditor's periodic checks whose last run time the store keeps, so that a
/// new Auditor (after a failover or restart) waits out the rest of the interval instead
/// of starting over (BookKeeper's `checkallledgersctime`, `placementpolicycheckctime` and
/// `replicascheckctime` znodes; `forceauditchecks` moves them back to make the checks due).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AuditorCheck {
    /// checkAllLedgers: every ledger's fragments asked of their bookies.
    CheckAllLedgers,
    /// The placement policy check.
    PlacementPolicy,
    /// The replicas check.
    Replicas,
}

impl AuditorCheck {
    pub const ALL: [AuditorCheck; 3] = [
        AuditorCheck::CheckAllLedgers,
        AuditorCheck::PlacementPolicy,
        AuditorCheck::Replicas,
    ];

    /// The record's name under BookKeeper's `underreplication` node.
    pub fn record_name(self) -> &'static str {
        match self {
            AuditorCheck::CheckAllLedgers => "checkallledgersctime",
            AuditorCheck::PlacementPolicy => "placementpolicycheckctime",
            AuditorCheck::Replicas => "replicascheckctime",
        }
    }
}

/// A ledger waiting for re-replication, with the bookies it lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnderreplicatedLedger {
    pub ledger_id: LedgerId,
    /// The bookies whose copies are missing (BookKeeper's `replica` list).
    pub missing_replicas: BTreeSet<BookieId>,
    /// When it was first marked, ms since the epoch, if recorded.
    pub ctime: Option<i64>,
}

/// One page of [`LedgerManager::list_ledgers`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerPage {
    /// Ledger ids in ascending order.
    pub ledgers: Vec<LedgerId>,
    /// Pass as `start_after` to get the next page; `None` when this was the last one.
    pub next: Option<LedgerId>,
}

/// The state of this client's session with the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionState {
    /// Connected; ephemeral records are held.
    Connected,
    /// Connection lost, the session may still be recovered (ZooKeeper `Disconnected`);
    /// ephemeral records may still exist but this client cannot vouch for them.
    Disconnected,
    /// The session expired: every ephemeral record of it is gone (the bookie must
    /// re-register, the Auditor must stop acting).
    Expired,
    /// [`MetadataStore::close`] was called.
    Closed,
}

/// A bookie's registration. Dropping it or calling [`BookieRegistration::unregister`]
/// removes it; it also disappears when the session ends.
#[async_trait]
pub trait BookieRegistration: Send + Sync + fmt::Debug {
    fn bookie_id(&self) -> &BookieId;

    /// The mode it is registered in now.
    fn mode(&self) -> BookieMode;

    /// Moves the registration between writable and read-only (BookKeeper: create the
    /// read-only node first, then delete the writable one, so the bookie is never absent).
    async fn set_mode(&mut self, mode: BookieMode) -> Result<()>;

    /// Removes the registration now and waits until it is gone.
    async fn unregister(self: Box<Self>) -> Result<()>;
}

/// A held under-replication lock on one ledger. Dropping it releases the lock (the
/// ledger stays marked); so does the end of the session.
#[async_trait]
pub trait UnderreplicationLock: Send + Sync + fmt::Debug {
    fn ledger_id(&self) -> LedgerId;

    /// Releases the lock, leaving the ledger marked (another worker will retry it).
    async fn release(self: Box<Self>) -> Result<()>;

    /// The ledger is fully replicated again: removes its mark and releases the lock.
    async fn mark_replicated(self: Box<Self>) -> Result<()>;
}

/// A candidacy in an election (the Auditor election). Dropping it or calling
/// [`LeaderCandidacy::resign`] withdraws; so does the end of the session.
#[async_trait]
pub trait LeaderCandidacy: Send + Sync + fmt::Debug {
    /// `true` while this candidate is the leader. Starts `false`; becomes `true` when
    /// elected; becomes `false` again if the session is lost (stop acting at once).
    fn leadership(&self) -> watch::Receiver<bool>;

    /// Withdraws from the election (and gives up leadership if held).
    async fn resign(self: Box<Self>) -> Result<()>;
}

/// What a driver's conditional write of a record found: the manager traits' provided
/// methods turn it into the contract's errors, naming the record, so that every driver says
/// no the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordWrite<T> {
    /// Written (or deleted); the new version, if any.
    Done(T),
    /// There is no such record (`NotFound`).
    Missing,
    /// A create found the record already there (`AlreadyExists`).
    Exists,
    /// The record is not at the expected version (`BadVersion`).
    Changed,
}

impl<T> RecordWrite<T> {
    /// The same outcome with the written value mapped.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> RecordWrite<U> {
        match self {
            RecordWrite::Done(v) => RecordWrite::Done(f(v)),
            RecordWrite::Missing => RecordWrite::Missing,
            RecordWrite::Exists => RecordWrite::Exists,
            RecordWrite::Changed => RecordWrite::Changed,
        }
    }

    /// The contract's answer for a write of `what` expected at `expected`. A change seen by
    /// a write that expected no particular version means the record went meanwhile.
    pub fn into_result(self, what: impl Into<String>, expected: Option<Version>) -> Result<T> {
        match (self, expected) {
            (RecordWrite::Done(v), _) => Ok(v),
            (RecordWrite::Missing, _) | (RecordWrite::Changed, None) => {
                Err(crate::MetadataError::not_found(what))
            }
            (RecordWrite::Exists, _) => Err(crate::MetadataError::already_exists(what)),
            (RecordWrite::Changed, Some(v)) => Err(crate::MetadataError::bad_version(what, v)),
        }
    }
}

/// What a ledger's metadata record is called in errors.
pub fn ledger_what(ledger: LedgerId) -> String {
    format!("ledger {ledger}")
}

/// What a bookie's cookie is called in errors.
pub fn cookie_what(bookie: &BookieId) -> String {
    format!("cookie of bookie {bookie}")
}

/// Bookie registration (BookKeeper's `RegistrationManager` and `RegistrationClient`):
/// ephemeral registrations, the set of bookies, what each publishes.
#[async_trait]
pub trait RegistrationManager: Send + Sync + fmt::Debug {
    /// Registers a bookie in `mode`, publishing `info`. Ephemeral: tied to this
    /// session. `AlreadyExists` if the id is registered by a live session (in either
    /// mode); a registration of an expired session is replaced.
    async fn register_bookie(
        &self,
        bookie: &BookieId,
        mode: BookieMode,
        info: &BookieServiceInfo,
    ) -> Result<Box<dyn BookieRegistration>>;

    /// The bookies registered now.
    async fn list_bookies(&self) -> Result<BookieSet>;

    /// What a registered bookie published; `NotFound` if it is not registered.
    async fn bookie_service_info(&self, bookie: &BookieId) -> Result<BookieServiceInfo>;

    /// Follows membership: the receiver holds the current set and sees changes
    /// (possibly coalesced). Dropping the receiver stops the watch.
    async fn watch_bookies(&self) -> Result<watch::Receiver<BookieSet>>;
}

/// The cluster's identity and the bookies' cookies (the cluster half of BookKeeper's
/// `RegistrationManager`: `initNewCluster`, `format`, the cookie store).
///
/// Drivers implement the `*_record` methods; callers use the others, whose provided bodies
/// name the cookie in errors the same way for every driver.
#[async_trait]
pub trait ClusterManager: Send + Sync + fmt::Debug {
    /// Initialises a new cluster (BookKeeper's `initNewCluster`): creates the layout
    /// and a fresh instance id. `AlreadyExists` if the cluster is initialised.
    async fn init_cluster(&self) -> Result<ClusterInfo>;

    /// The cluster's identity; `NotFound` if it was never initialised.
    async fn read_cluster(&self) -> Result<ClusterInfo>;

    /// Deletes every record of the cluster (ledgers, cookies, marks, registrations)
    /// and initialises it again with a new instance id (BookKeeper's `metaformat`).
    async fn format_cluster(&self) -> Result<ClusterInfo>;

    /// A bookie's cookie (opaque bytes, BookKeeper's cookie text); `NotFound` if none.
    async fn read_cookie(&self, bookie: &BookieId) -> Result<Versioned<Vec<u8>>> {
        self.cookie_record(bookie)
            .await?
            .ok_or_else(|| crate::MetadataError::not_found(cookie_what(bookie)))
    }

    /// Writes a cookie: `expected = None` creates it (`AlreadyExists` if present);
    /// `Some(v)` replaces it if its version is still `v` (`BadVersion` otherwise,
    /// `NotFound` if it is gone). Returns the new version.
    async fn write_cookie(
        &self,
        bookie: &BookieId,
        cookie: &[u8],
        expected: Option<Version>,
    ) -> Result<Version> {
        self.write_cookie_record(bookie, cookie, expected)
            .await?
            .into_result(cookie_what(bookie), expected)
    }

    /// Deletes a cookie if its version is still `expected`.
    async fn delete_cookie(&self, bookie: &BookieId, expected: Version) -> Result<()> {
        self.delete_cookie_record(bookie, expected)
            .await?
            .into_result(cookie_what(bookie), Some(expected))
    }

    /// Every bookie with a cookie (BookKeeper's "all bookies", live or not).
    async fn list_cookies(&self) -> Result<Vec<BookieId>>;

    /// Driver side of [`ClusterManager::read_cookie`]: the record, if there is one.
    async fn cookie_record(&self, bookie: &BookieId) -> Result<Option<Versioned<Vec<u8>>>>;

    /// Driver side of [`ClusterManager::write_cookie`].
    async fn write_cookie_record(
        &self,
        bookie: &BookieId,
        cookie: &[u8],
        expected: Option<Version>,
    ) -> Result<RecordWrite<Version>>;

    /// Driver side of [`ClusterManager::delete_cookie`].
    async fn delete_cookie_record(
        &self,
        bookie: &BookieId,
        expected: Version,
    ) -> Result<RecordWrite<()>>;
}

/// Ledger ids and ledger metadata (BookKeeper's `LedgerIdGenerator` and `LedgerManager`).
///
/// Drivers implement the `*_record` methods, which move the serialized bytes; callers use
/// the others, whose provided bodies check the id, encode and decode BookKeeper's format
/// (naming the ledger), apply BookKeeper's retried-create rule and name the ledger in
/// errors, one copy for every driver.
#[async_trait]
pub trait LedgerManager: Send + Sync + fmt::Debug {
    /// A new ledger id, never returned before by any client of this cluster
    /// (unique under concurrency), non-negative.
    async fn generate_ledger_id(&self) -> Result<LedgerId>;

    /// Stores the metadata of a new ledger. `AlreadyExists` if the id is taken, except
    /// that a retried create finding a record with the same `c_token` succeeds
    /// (returns that record's version), as BookKeeper does.
    async fn create_ledger(&self, ledger: LedgerId, metadata: &LedgerMetadata) -> Result<Version> {
        crate::driver::check_ledger_id(ledger)?;
        let bytes = crate::driver::encode_ledger_metadata(ledger, metadata)?;
        match self.create_ledger_record(ledger, &bytes).await? {
            Ok(version) => Ok(version),
            Err(existing) => {
                crate::retried_create(ledger, &existing.value, existing.version, metadata)
            }
        }
    }

    /// A ledger's metadata and version; `NotFound` if there is no such ledger,
    /// `Corrupt` (naming the ledger) if its record cannot be decoded.
    async fn read_ledger(&self, ledger: LedgerId) -> Result<Versioned<LedgerMetadata>> {
        crate::driver::check_ledger_id(ledger)?;
        let record = self
            .ledger_record(ledger)
            .await?
            .ok_or_else(|| crate::MetadataError::not_found(ledger_what(ledger)))?;
        Ok(Versioned {
            value: crate::format::decode_ledger_metadata(ledger, &record.value)?,
            version: record.version,
        })
    }

    /// Replaces a ledger's metadata if its version is still `expected`; returns the new
    /// version. `BadVersion` if somebody else wrote it, `NotFound` if it is gone.
    async fn write_ledger(
        &self,
        ledger: LedgerId,
        metadata: &LedgerMetadata,
        expected: Version,
    ) -> Result<Version> {
        crate::driver::check_ledger_id(ledger)?;
        let bytes = crate::driver::encode_ledger_metadata(ledger, metadata)?;
        self.write_ledger_record(ledger, &bytes, expected)
            .await?
            .into_result(ledger_what(ledger), Some(expected))
    }

    /// Deletes a ledger's metadata; with `Some(v)` only if its version is still `v`.
    /// `NotFound` if there is no such ledger.
    async fn delete_ledger(&self, ledger: LedgerId, expected: Option<Version>) -> Result<()> {
        crate::driver::check_ledger_id(ledger)?;
        self.delete_ledger_record(ledger, expected)
            .await?
            .into_result(ledger_what(ledger), expected)
    }

    /// One page of at most `limit` (>= 1) ledger ids greater than `start_after`, ascending.
    async fn list_ledgers(&self, start_after: Option<LedgerId>, limit: usize)
    -> Result<LedgerPage>;

    /// Follows one ledger's metadata: the receiver holds the current value (`None`
    /// once deleted, or if it does not exist yet) and sees every change, possibly
    /// coalesced. Dropping the receiver stops the watch.
    async fn watch_ledger(
        &self,
        ledger: LedgerId,
    ) -> Result<watch::Receiver<Option<Versioned<LedgerMetadata>>>>;

    /// Driver side of [`LedgerManager::create_ledger`]: creates the record `data` unless
    /// the id is taken, in which case it returns the record there (`Err`).
    async fn create_ledger_record(
        &self,
        ledger: LedgerId,
        data: &[u8],
    ) -> Result<std::result::Result<Version, Versioned<Vec<u8>>>>;

    /// Driver side of [`LedgerManager::read_ledger`]: the record's bytes, if there is one.
    async fn ledger_record(&self, ledger: LedgerId) -> Result<Option<Versioned<Vec<u8>>>>;

    /// Driver side of [`LedgerManager::write_ledger`].
    async fn write_ledger_record(
        &self,
        ledger: LedgerId,
        data: &[u8],
        expected: Version,
    ) -> Result<RecordWrite<Version>>;

    /// Driver side of [`LedgerManager::delete_ledger`].
    async fn delete_ledger_record(
        &self,
        ledger: LedgerId,
        expected: Option<Version>,
    ) -> Result<RecordWrite<()>>;
}

/// The under-replication queue and autorecovery's settings (BookKeeper's
/// `LedgerUnderreplicationManager`), and Folio's operation records.
#[async_trait]
pub trait UnderreplicationManager: Send + Sync + fmt::Debug {
    /// Marks a ledger under-replicated, adding `missing` to the bookies it already
    /// lists as missing (creating the mark if needed).
    async fn mark_underreplicated(&self, ledger: LedgerId, missing: &[BookieId]) -> Result<()>;

    /// Every under-replicated ledger, ascending by id.
    async fn list_underreplicated(&self) -> Result<Vec<UnderreplicatedLedger>>;

    /// One ledger's mark; `NotFound` if it is not marked.
    async fn get_underreplicated(&self, ledger: LedgerId) -> Result<UnderreplicatedLedger> {
        crate::driver::check_ledger_id(ledger)?;
        self.find_underreplicated(ledger).await?.ok_or_else(|| {
            crate::MetadataError::not_found(crate::driver::underreplicated_what(ledger))
        })
    }

    /// Driver side of [`UnderreplicationManager::get_underreplicated`]: the mark, if any.
    async fn find_underreplicated(&self, ledger: LedgerId)
    -> Result<Option<UnderreplicatedLedger>>;

    /// Locks a marked ledger for one worker (`holder` names it, e.g. its bookie id).
    /// `Ok(None)` if another live session holds the lock; `NotFound` if not marked.
    async fn try_lock_underreplicated(
        &self,
        ledger: LedgerId,
        holder: &str,
    ) -> Result<Option<Box<dyn UnderreplicationLock>>>;

    /// Locks some marked ledger that nobody holds; `Ok(None)` if there is none. Provided:
    /// the first of [`UnderreplicationManager::marked_ledgers`] that can be locked and is
    /// still marked once locked (a driver that can do it in one step overrides it).
    async fn lock_next_underreplicated(
        &self,
        holder: &str,
    ) -> Result<Option<(UnderreplicatedLedger, Box<dyn UnderreplicationLock>)>> {
        crate::driver::lock_first_marked(
            self.marked_ledgers().await?,
            |id| self.try_lock_underreplicated(id, holder),
            |id| self.find_underreplicated(id),
        )
        .await
    }

    /// The ids of the marked ledgers, ascending (drivers that can list them without their
    /// marks' contents override it).
    async fn marked_ledgers(&self) -> Result<Vec<LedgerId>> {
        Ok(self
            .list_underreplicated()
            .await?
            .into_iter()
            .map(|m| m.ledger_id)
            .collect())
    }

    /// Who holds the lock of `ledger`'s mark (the `holder` its worker named), if anyone
    /// (BookKeeper's `getReplicationWorkerIdRereplicatingLedger`).
    async fn underreplicated_lock_holder(&self, ledger: LedgerId) -> Result<Option<String>>;

    /// Removes a ledger's mark whoever holds its lock (e.g. the ledger was deleted).
    /// Removing an absent mark is not an error.
    async fn remove_underreplicated(&self, ledger: LedgerId) -> Result<()>;

    /// Whether autorecovery (re-replication) is enabled cluster-wide (default: yes).
    async fn is_autorecovery_enabled(&self) -> Result<bool>;

    async fn set_autorecovery_enabled(&self, enabled: bool) -> Result<()>;

    /// Seconds the Auditor waits after a bookie disappears before marking its ledgers
    /// (BookKeeper's `lostBookieRecoveryDelay`); `None` if never set (use the config's).
    async fn lost_bookie_recovery_delay(&self) -> Result<Option<u32>> {
        Ok(self
            .lost_bookie_recovery_delay_versioned()
            .await?
            .map(|v| v.value))
    }

    /// The same with the version it was written at. Every write gives a new version, even
    /// of the same value: rewriting the current value is how BookKeeper's `triggeraudit`
    /// asks the Auditor for an audit now, and the Auditor notices it by the version.
    async fn lost_bookie_recovery_delay_versioned(&self) -> Result<Option<Versioned<u32>>>;

    async fn set_lost_bookie_recovery_delay(&self, seconds: u32) -> Result<()>;

    /// When `check` last completed, in milliseconds since the Unix epoch; `None` if never
    /// (BookKeeper reads a missing record as -1).
    async fn auditor_check_ctime(&self, check: AuditorCheck) -> Result<Option<i64>>;

    /// Records when `check` last completed (the Auditor, after each run; `forceauditchecks`
    /// with a time far enough back to make the check due).
    async fn set_auditor_check_ctime(&self, check: AuditorCheck, ctime_ms: i64) -> Result<()>;

    // ---- Folio's operation records (not BookKeeper's) ------------------------------

    /// Publishes (creates or replaces) the record `name` of an operation this session runs,
    /// a recover or a decommission, with its progress as `data` (docs/formats/operations.md):
    /// every process's dashboard shows it. The record is ephemeral: it goes when this
    /// session ends, as a lock does. `name` is 1 to 100 of `[A-Za-z0-9._-]`.
    async fn publish_operation(&self, name: &str, data: &[u8]) -> Result<()> {
        crate::driver::check_operation_name(name)?;
        self.put_operation_record(name, data).await
    }

    /// Removes the record `name` (the operation ended); an absent one is not an error.
    async fn remove_operation(&self, name: &str) -> Result<()> {
        crate::driver::check_operation_name(name)?;
        self.delete_operation_record(name).await
    }

    /// Every live operation record, by name.
    async fn list_operations(&self) -> Result<Vec<(String, Vec<u8>)>>;

    /// Driver side of [`UnderreplicationManager::publish_operation`] (the name checked).
    async fn put_operation_record(&self, name: &str, data: &[u8]) -> Result<()>;

    /// Driver side of [`UnderreplicationManager::remove_operation`] (the name checked).
    async fn delete_operation_record(&self, name: &str) -> Result<()>;
}

/// The Auditor election (BookKeeper's `LedgerAuditorManager`).
#[async_trait]
pub trait AuditorElection: Send + Sync + fmt::Debug {
    /// Joins the Auditor election as `candidate`. Exactly one live candidate is leader
    /// at a time; when it resigns or its session ends, another is elected.
    async fn join_auditor_election(&self, candidate: &BookieId)
    -> Result<Box<dyn LeaderCandidacy>>;

    /// The current Auditor, if any candidate is elected.
    async fn current_auditor(&self) -> Result<Option<BookieId>>;
}

/// The metadata contract: one session with a metadata service, and through it each of
/// BookKeeper's managers. See the module documentation for the session model. Callers hold
/// an `Arc<dyn MetadataStore>` and bring the managers' methods into scope with
/// `use folio_metadata::prelude::*`.
///
/// Every method is cancel-safe in the sense that dropping its future leaves the store
/// consistent (an operation either happened or did not); none panics on bad input.
#[async_trait]
pub trait MetadataStore:
    RegistrationManager
    + ClusterManager
    + LedgerManager
    + UnderreplicationManager
    + AuditorElection
    + Send
    + Sync
    + fmt::Debug
{
    /// The URI this store was connected with (for messages).
    fn uri(&self) -> &str;

    /// The state of this client's session; the receiver sees every change.
    fn session_state(&self) -> watch::Receiver<SessionState>;

    /// How long the service keeps a session after its client's last contact (ZooKeeper's
    /// session timeout, etcd's lease TTL, sqlite's lease): the registrations of a client
    /// that died vanish about this long after it died. Bounds how long a restarted bookie
    /// waits for its previous process's registration to expire.
    fn session_timeout(&self) -> std::time::Duration;

    /// Ends the session: every registration, lock and candidacy of it disappears.
    /// Later calls on this store fail with [`crate::MetadataError::SessionExpired`].
    async fn close(&self) -> Result<()>;
}

/// How many ledger ids [`all_ledger_ids`] asks for per page.
pub const LEDGER_ID_PAGE: usize = 1000;

/// Every ledger id in `store`, ascending, read page by page with
/// [`LedgerManager::list_ledgers`].
pub async fn all_ledger_ids(store: &(impl LedgerManager + ?Sized)) -> Result<Vec<LedgerId>> {
    collect_ledger_ids(|after| store.list_ledgers(after, LEDGER_ID_PAGE)).await
}

/// The paging loop of [`all_ledger_ids`] over any page source: `page(start_after)` is
/// called with `None`, then with each page's `next`, until a page says it was the last.
/// For callers that wrap each call (a deadline, a session re-opened once it expired).
pub async fn collect_ledger_ids<E, F, Fut>(mut page: F) -> std::result::Result<Vec<LedgerId>, E>
where
    F: FnMut(Option<LedgerId>) -> Fut,
    Fut: Future<Output = std::result::Result<LedgerPage, E>>,
{
    let mut ids = Vec::new();
    let mut after = None;
    loop {
        let p = page(after).await?;
        ids.extend(p.ledgers);
        match p.next {
            Some(n) => after = Some(n),
            None => return Ok(ids),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn paging_follows_next_until_the_last_page() {
        // Pages of two over 1..=5, as a driver would give them.
        let asked = std::sync::Mutex::new(Vec::new());
        let ids = collect_ledger_ids(|after: Option<LedgerId>| {
            asked.lock().unwrap().push(after);
            let from = after.map_or(1, |a| a + 1);
            let ledgers: Vec<LedgerId> = (from..=5).take(2).collect();
            let next = (ledgers.last() < Some(&5)).then(|| *ledgers.last().unwrap());
            async move { Ok::<_, crate::MetadataError>(LedgerPage { ledgers, next }) }
        })
        .await
        .unwrap();
        assert_eq!(ids, [1, 2, 3, 4, 5]);
        assert_eq!(*asked.lock().unwrap(), [None, Some(2), Some(4)]);
    }
}
