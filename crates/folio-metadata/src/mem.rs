//! The `mem://` driver: an in-process metadata store, for tests and the simulator.
//!
//! A [`MemCluster`] holds the records; every [`MemMetadataStore`] connected to it is
//! one session. A session ends when it is closed, dropped (with every handle made
//! through it), or expired by hand with [`MemMetadataStore::expire_session`], which is
//! how tests play "the bookie's ZooKeeper session expired". Records keep the same
//! bytes as every other driver (ledger metadata is stored serialized), so a test can
//! also plant a corrupt record ([`MemCluster::put_raw_ledger_record`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use folio_types::metadata::LedgerMetadata;
use folio_types::{BookieId, LedgerId};
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::store::*;
use crate::{MetadataError, Result};

/// The layout text the embedded drivers record (they have no ledger manager class).
pub const EMBEDDED_LAYOUT: &str = "2\nfolio.metadata.Embedded:1";

type SessionId = u64;

#[derive(Debug)]
struct Registration {
    session: SessionId,
    token: u64,
    mode: BookieMode,
    info: BookieServiceInfo,
}

#[derive(Debug)]
struct Candidate {
    session: SessionId,
    bookie: BookieId,
    leader: watch::Sender<bool>,
}

#[derive(Debug, Default)]
struct State {
    cluster: Option<ClusterInfo>,
    /// Sessions not yet closed or expired.
    live: BTreeSet<SessionId>,
    next_session: SessionId,
    /// Global revision, like etcd's: every write gets a fresh version, so a record
    /// deleted and recreated never reuses an old version.
    revision: i64,
    next_token: u64,
    bookies: BTreeMap<BookieId, Registration>,
    cookies: BTreeMap<BookieId, (Vec<u8>, i64)>,
    next_ledger_id: LedgerId,
    ledgers: BTreeMap<LedgerId, (Vec<u8>, i64)>,
    /// Marks: missing bookies, ctime, and a version that every write of the mark changes.
    underreplicated: BTreeMap<LedgerId, (BTreeSet<BookieId>, Option<i64>, u64)>,
    /// ledger -> (session, token) of the holder.
    /// Held locks: the session, its token and the holder it named.
    ur_locks: BTreeMap<LedgerId, (SessionId, u64, String)>,
    /// Folio's operation records: name -> (the session that published it, its data).
    operations: BTreeMap<String, (SessionId, Vec<u8>)>,
    autorecovery_disabled: bool,
    /// The delay and the revision it was written at.
    lost_bookie_recovery_delay: Option<(u32, i64)>,
    /// When each Auditor check last completed (ms).
    check_ctimes: BTreeMap<AuditorCheck, i64>,
    /// Election sequence -> candidate; the lowest live sequence leads.
    election: BTreeMap<u64, Candidate>,
    next_vote: u64,
}

impl State {
    fn bump(&mut self) -> i64 {
        self.revision += 1;
        self.revision
    }

    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    /// Drops every ephemeral record of `session` and re-runs the election.
    fn end_session(&mut self, session: SessionId) {
        if !self.live.remove(&session) {
            return;
        }
        self.bookies.retain(|_, r| r.session != session);
        self.ur_locks.retain(|_, (s, _, _)| *s != session);
        self.operations.retain(|_, (s, _)| *s != session);
        self.election.retain(|_, c| {
            if c.session == session {
                c.leader.send_replace(false);
                false
            } else {
                true
            }
        });
        self.elect();
    }

    fn elect(&mut self) {
        let mut first = true;
        for c in self.election.values() {
            c.leader.send_if_modified(|v| {
                let changed = *v != first;
                *v = first;
                changed
            });
            first = false;
        }
    }

    fn bookie_set(&self) -> BookieSet {
        let mut set = BookieSet::default();
        for (id, r) in &self.bookies {
            match r.mode {
                BookieMode::Writable => set.writable.insert(id.clone()),
                BookieMode::ReadOnly => set.readonly.insert(id.clone()),
            };
        }
        set
    }
}

/// The records of one in-process cluster. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct MemCluster {
    inner: Arc<ClusterInner>,
}

struct ClusterInner {
    name: String,
    state: Mutex<State>,
    /// Bumped on every change; watches recompute their value when it moves.
    changes: watch::Sender<u64>,
    /// Draws instance ids; seeded, so a simulation replays the same ids.
    rng: Mutex<fastrand::Rng>,
    /// Milliseconds since the epoch for recorded creation times (a simulated clock
    /// in the simulator).
    clock_ms: Arc<dyn Fn() -> i64 + Send + Sync>,
}

impl std::fmt::Debug for ClusterInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemCluster")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn registry() -> &'static Mutex<HashMap<String, MemCluster>> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, MemCluster>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

impl MemCluster {
    /// A new cluster, not registered under any name.
    pub fn new(name: impl Into<String>) -> Self {
        MemCluster::deterministic(name, fastrand::u64(..), Arc::new(crate::now_ms))
    }

    /// A new cluster whose instance ids come from `seed` and whose recorded creation
    /// times come from `clock_ms`, so that a simulation run replays exactly.
    pub fn deterministic(
        name: impl Into<String>,
        seed: u64,
        clock_ms: Arc<dyn Fn() -> i64 + Send + Sync>,
    ) -> Self {
        MemCluster {
            inner: Arc::new(ClusterInner {
                name: name.into(),
                state: Mutex::new(State::default()),
                changes: watch::Sender::new(0),
                rng: Mutex::new(fastrand::Rng::with_seed(seed)),
                clock_ms,
            }),
        }
    }

    fn new_cluster_info(&self) -> ClusterInfo {
        ClusterInfo {
            instance_id: crate::instance_id_from(&mut self.inner.rng.lock()),
            layout: EMBEDDED_LAYOUT.to_owned(),
        }
    }

    /// The process-wide cluster called `name` (`mem://name`), created on first use.
    pub fn named(name: &str) -> Self {
        registry()
            .lock()
            .entry(name.to_owned())
            .or_insert_with(|| MemCluster::new(name))
            .clone()
    }

    /// Opens a new session on this cluster.
    pub fn connect(&self) -> MemMetadataStore {
        let id = {
            let mut st = self.inner.state.lock();
            st.next_session += 1;
            let id = st.next_session;
            st.live.insert(id);
            id
        };
        MemMetadataStore {
            session: Arc::new(Session {
                cluster: self.clone(),
                id,
                uri: format!("mem://{}", self.inner.name),
                state: watch::Sender::new(SessionState::Connected),
            }),
            session_timeout: MEM_SESSION_TIMEOUT,
        }
    }

    /// Stores raw bytes as a ledger's metadata record, bypassing the encoder
    /// (tests plant corrupt records with it).
    pub fn put_raw_ledger_record(&self, ledger: LedgerId, bytes: &[u8]) {
        let mut st = self.inner.state.lock();
        let rev = st.bump();
        st.ledgers.insert(ledger, (bytes.to_vec(), rev));
        drop(st);
        self.changed();
    }

    fn changed(&self) {
        self.inner.changes.send_modify(|c| *c += 1);
    }

    /// Spawns a task keeping `tx` equal to `compute(state)` until the receiver is dropped.
    fn follow<T, F>(&self, compute: F) -> watch::Receiver<T>
    where
        T: PartialEq + Send + Sync + 'static,
        F: Fn(&State) -> T + Send + 'static,
    {
        let (tx, rx) = watch::channel(compute(&self.inner.state.lock()));
        let mut changes = self.inner.changes.subscribe();
        let cluster = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    r = changes.changed() => if r.is_err() { break },
                    _ = tx.closed() => break,
                }
                let v = compute(&cluster.inner.state.lock());
                crate::driver::publish_if_changed(&tx, v);
            }
        });
        rx
    }
}

/// One session on a [`MemCluster`].
#[derive(Debug)]
struct Session {
    cluster: MemCluster,
    id: SessionId,
    uri: String,
    state: watch::Sender<SessionState>,
}

impl Session {
    /// Runs `f` on the state if this session is live; reports changes to watchers.
    fn with<T>(&self, f: impl FnOnce(&mut State) -> Result<T>) -> Result<T> {
        let mut st = self.cluster.inner.state.lock();
        if !st.live.contains(&self.id) {
            return Err(MetadataError::SessionExpired);
        }
        let before = st.revision;
        let r = f(&mut st);
        let changed = st.revision != before;
        drop(st);
        if changed {
            self.cluster.changed();
        }
        r
    }

    fn end(&self, final_state: SessionState) {
        self.cluster.inner.state.lock().end_session(self.id);
        self.cluster.changed();
        self.state.send_if_modified(|s| {
            let changed = matches!(s, SessionState::Connected | SessionState::Disconnected);
            if changed {
                *s = final_state;
            }
            changed
        });
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.end(SessionState::Closed);
    }
}

/// A session on an in-process cluster: the `mem://` driver's [`MetadataStore`].
#[derive(Debug, Clone)]
pub struct MemMetadataStore {
    session: Arc<Session>,
    /// What `session_timeout` reports (see there).
    session_timeout: std::time::Duration,
}

/// What a `mem://` session reports as its timeout unless told otherwise.
const MEM_SESSION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

impl MemMetadataStore {
    /// Connects to the process-wide cluster `mem://name`.
    pub fn connect(name: &str) -> Self {
        MemCluster::named(name).connect()
    }

    /// The cluster this session belongs to.
    pub fn cluster(&self) -> &MemCluster {
        &self.session.cluster
    }

    /// Reports `timeout` as this session's timeout: a `mem://` session never times out, but
    /// what waits for one to end (a restarted bookie's registration) is bounded by it.
    pub fn with_session_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// Expires this session as ZooKeeper would: its registrations, locks and votes
    /// vanish and every later call fails with `SessionExpired`.
    pub fn expire_session(&self) {
        self.session.end(SessionState::Expired);
    }
}

#[async_trait]
impl MetadataStore for MemMetadataStore {
    fn uri(&self) -> &str {
        &self.session.uri
    }

    fn session_state(&self) -> watch::Receiver<SessionState> {
        self.session.state.subscribe()
    }

    /// A `mem://` session has no timeout: it ends when closed, dropped or expired by a
    /// test. A nominal second (or what `with_session_timeout` set) bounds what waits for one
    /// to end.
    fn session_timeout(&self) -> std::time::Duration {
        self.session_timeout
    }

    async fn close(&self) -> Result<()> {
        self.session.end(SessionState::Closed);
        Ok(())
    }
}

#[async_trait]
impl RegistrationManager for MemMetadataStore {
    async fn register_bookie(
        &self,
        bookie: &BookieId,
        mode: BookieMode,
        info: &BookieServiceInfo,
    ) -> Result<Box<dyn BookieRegistration>> {
        let token = self.session.with(|st| {
            if st.bookies.contains_key(bookie) {
                return Err(MetadataError::already_exists(format!(
                    "registration of bookie {bookie}"
                )));
            }
            let token = st.token();
            st.bookies.insert(
                bookie.clone(),
                Registration {
                    session: self.session.id,
                    token,
                    mode,
                    info: info.clone(),
                },
            );
            st.bump();
            Ok(token)
        })?;
        Ok(Box::new(MemRegistration {
            session: self.session.clone(),
            bookie: bookie.clone(),
            token,
            mode,
        }))
    }

    async fn list_bookies(&self) -> Result<BookieSet> {
        self.session.with(|st| Ok(st.bookie_set()))
    }

    async fn bookie_service_info(&self, bookie: &BookieId) -> Result<BookieServiceInfo> {
        self.session.with(|st| {
            st.bookies
                .get(bookie)
                .map(|r| r.info.clone())
                .ok_or_else(|| MetadataError::not_found(format!("registered bookie {bookie}")))
        })
    }

    async fn watch_bookies(&self) -> Result<watch::Receiver<BookieSet>> {
        self.session.with(|_| Ok(()))?;
        Ok(self.session.cluster.follow(State::bookie_set))
    }
}

#[async_trait]
impl ClusterManager for MemMetadataStore {
    async fn init_cluster(&self) -> Result<ClusterInfo> {
        let cluster = &self.session.cluster;
        self.session.with(|st| {
            if st.cluster.is_some() {
                return Err(MetadataError::already_exists("cluster"));
            }
            let info = cluster.new_cluster_info();
            st.cluster = Some(info.clone());
            st.bump();
            Ok(info)
        })
    }

    async fn read_cluster(&self) -> Result<ClusterInfo> {
        self.session.with(|st| {
            st.cluster
                .clone()
                .ok_or_else(|| MetadataError::not_found("cluster (not initialised)"))
        })
    }

    async fn format_cluster(&self) -> Result<ClusterInfo> {
        let cluster = &self.session.cluster;
        self.session.with(|st| {
            st.bookies.clear();
            st.cookies.clear();
            st.ledgers.clear();
            st.underreplicated.clear();
            st.ur_locks.clear();
            st.operations.clear();
            st.autorecovery_disabled = false;
            st.lost_bookie_recovery_delay = None;
            st.check_ctimes.clear();
            for c in st.election.values() {
                c.leader.send_replace(false);
            }
            st.election.clear();
            let info = cluster.new_cluster_info();
            st.cluster = Some(info.clone());
            st.bump();
            Ok(info)
        })
    }

    async fn cookie_record(&self, bookie: &BookieId) -> Result<Option<Versioned<Vec<u8>>>> {
        self.session.with(|st| {
            Ok(st.cookies.get(bookie).map(|(v, rev)| Versioned {
                value: v.clone(),
                version: Version::from_raw(*rev),
            }))
        })
    }

    async fn write_cookie_record(
        &self,
        bookie: &BookieId,
        cookie: &[u8],
        expected: Option<Version>,
    ) -> Result<RecordWrite<Version>> {
        self.session.with(|st| {
            match (st.cookies.get(bookie), expected) {
                (Some(_), None) => return Ok(RecordWrite::Exists),
                (None, Some(_)) => return Ok(RecordWrite::Missing),
                (Some((_, rev)), Some(v)) if *rev != v.raw() => return Ok(RecordWrite::Changed),
                _ => {}
            }
            let rev = st.bump();
            st.cookies.insert(bookie.clone(), (cookie.to_vec(), rev));
            Ok(RecordWrite::Done(Version::from_raw(rev)))
        })
    }

    async fn delete_cookie_record(
        &self,
        bookie: &BookieId,
        expected: Version,
    ) -> Result<RecordWrite<()>> {
        self.session.with(|st| match st.cookies.get(bookie) {
            None => Ok(RecordWrite::Missing),
            Some((_, rev)) if *rev != expected.raw() => Ok(RecordWrite::Changed),
            Some(_) => {
                st.cookies.remove(bookie);
                st.bump();
                Ok(RecordWrite::Done(()))
            }
        })
    }

    async fn list_cookies(&self) -> Result<Vec<BookieId>> {
        self.session
            .with(|st| Ok(st.cookies.keys().cloned().collect()))
    }
}

#[async_trait]
impl LedgerManager for MemMetadataStore {
    async fn generate_ledger_id(&self) -> Result<LedgerId> {
        self.session.with(|st| {
            let id = st.next_ledger_id;
            st.next_ledger_id += 1;
            Ok(id)
        })
    }

    async fn create_ledger_record(
        &self,
        ledger: LedgerId,
        data: &[u8],
    ) -> Result<std::result::Result<Version, Versioned<Vec<u8>>>> {
        self.session.with(|st| {
            if let Some((existing, rev)) = st.ledgers.get(&ledger) {
                return Ok(Err(Versioned {
                    value: existing.clone(),
                    version: Version::from_raw(*rev),
                }));
            }
            let rev = st.bump();
            st.ledgers.insert(ledger, (data.to_vec(), rev));
            Ok(Ok(Version::from_raw(rev)))
        })
    }

    async fn ledger_record(&self, ledger: LedgerId) -> Result<Option<Versioned<Vec<u8>>>> {
        self.session.with(|st| {
            Ok(st.ledgers.get(&ledger).map(|(bytes, rev)| Versioned {
                value: bytes.clone(),
                version: Version::from_raw(*rev),
            }))
        })
    }

    async fn write_ledger_record(
        &self,
        ledger: LedgerId,
        data: &[u8],
        expected: Version,
    ) -> Result<RecordWrite<Version>> {
        self.session.with(|st| match st.ledgers.get(&ledger) {
            None => Ok(RecordWrite::Missing),
            Some((_, rev)) if *rev != expected.raw() => Ok(RecordWrite::Changed),
            Some(_) => {
                let rev = st.bump();
                st.ledgers.insert(ledger, (data.to_vec(), rev));
                Ok(RecordWrite::Done(Version::from_raw(rev)))
            }
        })
    }

    async fn delete_ledger_record(
        &self,
        ledger: LedgerId,
        expected: Option<Version>,
    ) -> Result<RecordWrite<()>> {
        self.session
            .with(|st| match (st.ledgers.get(&ledger), expected) {
                (None, _) => Ok(RecordWrite::Missing),
                (Some((_, rev)), Some(v)) if *rev != v.raw() => Ok(RecordWrite::Changed),
                (Some(_), _) => {
                    st.ledgers.remove(&ledger);
                    st.bump();
                    Ok(RecordWrite::Done(()))
                }
            })
    }

    async fn list_ledgers(
        &self,
        start_after: Option<LedgerId>,
        limit: usize,
    ) -> Result<LedgerPage> {
        let limit = crate::check_limit(limit)?;
        self.session.with(|st| {
            let from = start_after.map_or(i64::MIN, |s| s.saturating_add(1));
            let ids = if start_after == Some(i64::MAX) {
                Vec::new()
            } else {
                st.ledgers
                    .range(from..)
                    .map(|(id, _)| *id)
                    .take(limit + 1)
                    .collect()
            };
            Ok(crate::page(ids, limit))
        })
    }

    async fn watch_ledger(
        &self,
        ledger: LedgerId,
    ) -> Result<watch::Receiver<Option<Versioned<LedgerMetadata>>>> {
        self.session.with(|_| Ok(()))?;
        Ok(self.session.cluster.follow(move |st| {
            let (bytes, rev) = st.ledgers.get(&ledger)?;
            // A record that cannot be decoded reads as absent here; read_ledger reports it.
            let value = crate::format::decode_ledger_metadata(ledger, bytes).ok()?;
            Some(Versioned {
                value,
                version: Version::from_raw(*rev),
            })
        }))
    }
}

#[async_trait]
impl UnderreplicationManager for MemMetadataStore {
    async fn mark_underreplicated(&self, ledger: LedgerId, missing: &[BookieId]) -> Result<()> {
        crate::driver::check_ledger_id(ledger)?;
        let now = (self.session.cluster.inner.clock_ms)();
        self.session.with(|st| {
            let version = st.token();
            match st.underreplicated.get_mut(&ledger) {
                None => {
                    let set = missing.iter().cloned().collect();
                    st.underreplicated.insert(ledger, (set, Some(now), version));
                }
                Some(mark) => {
                    let before = mark.0.len();
                    mark.0.extend(missing.iter().cloned());
                    if mark.0.len() == before {
                        return Ok(()); // nothing new: no write, as BookKeeper
                    }
                    // A re-mark that adds a bookie resets ctime (BookKeeper).
                    mark.1 = Some(now);
                    mark.2 = version;
                }
            }
            st.bump();
            Ok(())
        })
    }

    async fn list_underreplicated(&self) -> Result<Vec<UnderreplicatedLedger>> {
        self.session.with(|st| {
            Ok(st
                .underreplicated
                .iter()
                .map(|(id, (missing, ctime, _))| UnderreplicatedLedger {
                    ledger_id: *id,
                    missing_replicas: missing.clone(),
                    ctime: *ctime,
                })
                .collect())
        })
    }

    async fn find_underreplicated(
        &self,
        ledger: LedgerId,
    ) -> Result<Option<UnderreplicatedLedger>> {
        self.session.with(|st| {
            Ok(st
                .underreplicated
                .get(&ledger)
                .map(|(missing, ctime, _)| UnderreplicatedLedger {
                    ledger_id: ledger,
                    missing_replicas: missing.clone(),
                    ctime: *ctime,
                }))
        })
    }

    async fn try_lock_underreplicated(
        &self,
        ledger: LedgerId,
        holder: &str,
    ) -> Result<Option<Box<dyn UnderreplicationLock>>> {
        let token = self.session.with(|st| {
            let Some(&(_, _, mark_version)) = st.underreplicated.get(&ledger) else {
                return Err(MetadataError::not_found(format!(
                    "under-replicated ledger {ledger}"
                )));
            };
            if st.ur_locks.contains_key(&ledger) {
                return Ok(None);
            }
            let token = st.token();
            st.ur_locks
                .insert(ledger, (self.session.id, token, holder.to_string()));
            st.bump();
            Ok(Some((token, mark_version)))
        })?;
        Ok(token.map(|(token, mark_version)| {
            Box::new(MemLock {
                session: self.session.clone(),
                ledger,
                token,
                mark_version,
                done: false,
            }) as Box<dyn UnderreplicationLock>
        }))
    }

    async fn lock_next_underreplicated(
        &self,
        holder: &str,
    ) -> Result<Option<(UnderreplicatedLedger, Box<dyn UnderreplicationLock>)>> {
        let found = self.session.with(|st| {
            let Some((id, (missing, ctime, mark_version))) = st
                .underreplicated
                .iter()
                .find(|(id, _)| !st.ur_locks.contains_key(id))
            else {
                return Ok(None);
            };
            let ur = UnderreplicatedLedger {
                ledger_id: *id,
                missing_replicas: missing.clone(),
                ctime: *ctime,
            };
            let mark_version = *mark_version;
            let token = st.token();
            st.ur_locks
                .insert(ur.ledger_id, (self.session.id, token, holder.to_string()));
            st.bump();
            Ok(Some((ur, token, mark_version)))
        })?;
        Ok(found.map(|(ur, token, mark_version)| {
            let lock = Box::new(MemLock {
                session: self.session.clone(),
                ledger: ur.ledger_id,
                token,
                mark_version,
                done: false,
            }) as Box<dyn UnderreplicationLock>;
            (ur, lock)
        }))
    }

    async fn underreplicated_lock_holder(&self, ledger: LedgerId) -> Result<Option<String>> {
        self.session
            .with(|st| Ok(st.ur_locks.get(&ledger).map(|(_, _, h)| h.clone())))
    }

    async fn remove_underreplicated(&self, ledger: LedgerId) -> Result<()> {
        self.session.with(|st| {
            st.underreplicated.remove(&ledger);
            st.ur_locks.remove(&ledger);
            st.bump();
            Ok(())
        })
    }

    async fn is_autorecovery_enabled(&self) -> Result<bool> {
        self.session.with(|st| Ok(!st.autorecovery_disabled))
    }

    async fn set_autorecovery_enabled(&self, enabled: bool) -> Result<()> {
        self.session.with(|st| {
            st.autorecovery_disabled = !enabled;
            st.bump();
            Ok(())
        })
    }

    async fn lost_bookie_recovery_delay_versioned(&self) -> Result<Option<Versioned<u32>>> {
        self.session.with(|st| {
            Ok(st.lost_bookie_recovery_delay.map(|(value, rev)| Versioned {
                value,
                version: Version::from_raw(rev),
            }))
        })
    }

    async fn set_lost_bookie_recovery_delay(&self, seconds: u32) -> Result<()> {
        self.session.with(|st| {
            let rev = st.bump();
            st.lost_bookie_recovery_delay = Some((seconds, rev));
            Ok(())
        })
    }

    async fn auditor_check_ctime(&self, check: AuditorCheck) -> Result<Option<i64>> {
        self.session
            .with(|st| Ok(st.check_ctimes.get(&check).copied()))
    }

    async fn set_auditor_check_ctime(&self, check: AuditorCheck, ctime_ms: i64) -> Result<()> {
        self.session.with(|st| {
            st.check_ctimes.insert(check, ctime_ms);
            st.bump();
            Ok(())
        })
    }

    async fn put_operation_record(&self, name: &str, data: &[u8]) -> Result<()> {
        let session = self.session.id;
        self.session.with(|st| {
            st.operations
                .insert(name.to_string(), (session, data.to_vec()));
            st.bump();
            Ok(())
        })
    }

    async fn delete_operation_record(&self, name: &str) -> Result<()> {
        self.session.with(|st| {
            st.operations.remove(name);
            st.bump();
            Ok(())
        })
    }

    async fn list_operations(&self) -> Result<Vec<(String, Vec<u8>)>> {
        self.session.with(|st| {
            Ok(st
                .operations
                .iter()
                .map(|(n, (_, d))| (n.clone(), d.clone()))
                .collect())
        })
    }
}

#[async_trait]
impl AuditorElection for MemMetadataStore {
    async fn join_auditor_election(
        &self,
        candidate: &BookieId,
    ) -> Result<Box<dyn LeaderCandidacy>> {
        let (vote, rx) = self.session.with(|st| {
            st.next_vote += 1;
            let vote = st.next_vote;
            let (tx, rx) = watch::channel(false);
            st.election.insert(
                vote,
                Candidate {
                    session: self.session.id,
                    bookie: candidate.clone(),
                    leader: tx,
                },
            );
            st.elect();
            st.bump();
            Ok((vote, rx))
        })?;
        Ok(Box::new(MemCandidacy {
            session: self.session.clone(),
            vote,
            leader: rx,
        }))
    }

    async fn current_auditor(&self) -> Result<Option<BookieId>> {
        self.session
            .with(|st| Ok(st.election.values().next().map(|c| c.bookie.clone())))
    }
}

#[derive(Debug)]
struct MemRegistration {
    session: Arc<Session>,
    bookie: BookieId,
    token: u64,
    mode: BookieMode,
}

impl MemRegistration {
    fn remove(&self) {
        let mut st = self.session.cluster.inner.state.lock();
        if st
            .bookies
            .get(&self.bookie)
            .is_some_and(|r| r.token == self.token)
        {
            st.bookies.remove(&self.bookie);
            st.bump();
            drop(st);
            self.session.cluster.changed();
        }
    }
}

#[async_trait]
impl BookieRegistration for MemRegistration {
    fn bookie_id(&self) -> &BookieId {
        &self.bookie
    }

    fn mode(&self) -> BookieMode {
        self.mode
    }

    async fn set_mode(&mut self, mode: BookieMode) -> Result<()> {
        let (bookie, token) = (self.bookie.clone(), self.token);
        self.session.with(|st| match st.bookies.get_mut(&bookie) {
            Some(r) if r.token == token => {
                r.mode = mode;
                st.bump();
                Ok(())
            }
            _ => Err(MetadataError::SessionExpired),
        })?;
        self.mode = mode;
        Ok(())
    }

    async fn unregister(self: Box<Self>) -> Result<()> {
        // Drop does the work.
        Ok(())
    }
}

impl Drop for MemRegistration {
    fn drop(&mut self) {
        self.remove();
    }
}

#[derive(Debug)]
struct MemLock {
    session: Arc<Session>,
    ledger: LedgerId,
    token: u64,
    /// The mark's version when the lock was taken: `mark_replicated` removes it only then.
    mark_version: u64,
    done: bool,
}

impl MemLock {
    fn finish(&mut self, unmark: bool) -> Result<()> {
        self.done = true;
        let mut st = self.session.cluster.inner.state.lock();
        let held = st
            .ur_locks
            .get(&self.ledger)
            .is_some_and(|(_, t, _)| *t == self.token);
        if !held {
            return Err(MetadataError::SessionExpired);
        }
        st.ur_locks.remove(&self.ledger);
        let unchanged = st
            .underreplicated
            .get(&self.ledger)
            .is_some_and(|m| m.2 == self.mark_version);
        if unmark && unchanged {
            st.underreplicated.remove(&self.ledger);
        }
        st.bump();
        drop(st);
        self.session.cluster.changed();
        Ok(())
    }
}

#[async_trait]
impl UnderreplicationLock for MemLock {
    fn ledger_id(&self) -> LedgerId {
        self.ledger
    }

    async fn release(mut self: Box<Self>) -> Result<()> {
        self.finish(false)
    }

    async fn mark_replicated(mut self: Box<Self>) -> Result<()> {
        self.finish(true)
    }
}

impl Drop for MemLock {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.finish(false);
        }
    }
}

#[derive(Debug)]
struct MemCandidacy {
    session: Arc<Session>,
    vote: u64,
    leader: watch::Receiver<bool>,
}

#[async_trait]
impl LeaderCandidacy for MemCandidacy {
    fn leadership(&self) -> watch::Receiver<bool> {
        self.leader.clone()
    }

    async fn resign(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

impl Drop for MemCandidacy {
    fn drop(&mut self) {
        let mut st = self.session.cluster.inner.state.lock();
        if let Some(c) = st.election.remove(&self.vote) {
            c.leader.send_replace(false);
            st.elect();
            st.bump();
            drop(st);
            self.session.cluster.changed();
        }
    }
}

/// Shared counter so that tests can make distinct cluster names.
pub fn unique_name(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
