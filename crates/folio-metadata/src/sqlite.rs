//! The `sqlite://` driver: the embedded metadata store of a one-machine cluster
//! (`folio standalone`), safe for several processes sharing one database file.
//!
//! The file is in WAL mode with a busy timeout; every write runs in an immediate
//! transaction, so concurrent processes serialize on the write lock. Ephemeral records
//! (bookie registrations, under-replication locks, Auditor votes) belong to a
//! *session*: a row whose `expires_at` a heartbeat task pushes forward. A process that
//! dies stops renewing, and after the session timeout its records count as gone
//! (readers ignore them, the next writer deletes them). Leases are measured on the
//! machine's wall clock, which every process sharing the file shares. Watches poll.
//! Versions are a database-wide revision, so a deleted and recreated record never
//! reuses a version. Blocking calls run on `spawn_blocking`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use folio_types::metadata::LedgerMetadata;
use folio_types::{BookieId, LedgerId};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use tokio::sync::watch;

use crate::format;
use crate::mem::EMBEDDED_LAYOUT;
use crate::store::*;
use crate::{MetadataError, Result, now_ms};

/// Tuning of the sqlite driver.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// How long a session (and its registrations, locks, votes) outlives its last
    /// heartbeat. BookKeeper's default ZooKeeper session timeout is 10 s.
    pub session_timeout: Duration,
    /// How often watches and candidacies re-read the database.
    pub poll_interval: Duration,
    /// How long a statement waits for another process's write lock.
    pub busy_timeout: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            session_timeout: Duration::from_secs(10),
            poll_interval: Duration::from_millis(200),
            busy_timeout: Duration::from_secs(30),
        }
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS revision (id INTEGER PRIMARY KEY CHECK (id = 0), v INTEGER NOT NULL);
INSERT OR IGNORE INTO revision VALUES (0, 0);
CREATE TABLE IF NOT EXISTS cluster (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (id INTEGER PRIMARY KEY AUTOINCREMENT, expires_at INTEGER NOT NULL, pid INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS bookies (id TEXT PRIMARY KEY, mode TEXT NOT NULL, info BLOB NOT NULL, session INTEGER NOT NULL, token INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS cookies (id TEXT PRIMARY KEY, data BLOB NOT NULL, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS idgen (id INTEGER PRIMARY KEY CHECK (id = 0), next INTEGER NOT NULL);
INSERT OR IGNORE INTO idgen VALUES (0, 0);
CREATE TABLE IF NOT EXISTS ledgers (id INTEGER PRIMARY KEY, data BLOB NOT NULL, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS underreplicated (ledger INTEGER PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS ur_locks (ledger INTEGER PRIMARY KEY, session INTEGER NOT NULL, token INTEGER NOT NULL, holder TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS election (seq INTEGER PRIMARY KEY AUTOINCREMENT, session INTEGER NOT NULL, candidate TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS operations (name TEXT PRIMARY KEY, session INTEGER NOT NULL, data BLOB NOT NULL);
";

/// Rows of live sessions only: `<table>.session IN (LIVE)` with `?1` = now.
const LIVE: &str = "SELECT id FROM sessions WHERE expires_at > ?1";

impl From<rusqlite::Error> for MetadataError {
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
                MetadataError::Unreachable {
                    address: "sqlite database".into(),
                    reason: format!("still locked by another process after the busy timeout: {e}"),
                }
            }
            _ => MetadataError::Internal(format!("sqlite: {e}")),
        }
    }
}

#[derive(Debug)]
struct Inner {
    uri: String,
    conn: Arc<Mutex<Connection>>,
    session: i64,
    opts: SqliteOptions,
    state: watch::Sender<SessionState>,
    /// The database-wide revision as last polled; ledger watches wake on its changes
    /// instead of each re-reading its record on every tick. Polled only once a
    /// ledger watch exists.
    revision: watch::Sender<i64>,
    revision_poller: std::sync::Once,
}

impl Inner {
    fn live(&self) -> Result<()> {
        match *self.state.borrow() {
            SessionState::Connected | SessionState::Disconnected => Ok(()),
            SessionState::Expired | SessionState::Closed => Err(MetadataError::SessionExpired),
        }
    }

    async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        self.live()?;
        run_on(self.conn.clone(), f).await
    }

    /// Runs `f` in an immediate (write-locking) transaction, after dropping the
    /// ephemeral records of expired sessions, and commits it if `f` succeeds.
    async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>, i64) -> Result<T> + Send + 'static,
    {
        let session = self.session;
        let r = self
            .run(move |c| {
                let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let now = now_ms();
                purge_expired(&tx, now)?;
                let alive: bool = tx.query_row(
                    "SELECT count(*) FROM sessions WHERE id = ?1 AND expires_at > ?2",
                    params![session, now],
                    |r| r.get::<_, i64>(0),
                )? > 0;
                if !alive {
                    return Err(MetadataError::SessionExpired);
                }
                let out = f(&tx, now)?;
                tx.commit()?;
                Ok(out)
            })
            .await;
        if matches!(r, Err(MetadataError::SessionExpired)) {
            self.mark_expired();
        }
        r
    }

    /// Records that the session expired, unless it already ended; true if it changed.
    fn mark_expired(&self) -> bool {
        self.state.send_if_modified(|s| {
            let live = matches!(s, SessionState::Connected | SessionState::Disconnected);
            if live {
                *s = SessionState::Expired;
            }
            live
        })
    }

    /// Ends the session now (deleting its ephemeral records), inline.
    fn end_blocking(&self) {
        let c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let r = (|| -> rusqlite::Result<()> {
            c.execute("DELETE FROM bookies WHERE session = ?1", [self.session])?;
            c.execute("DELETE FROM ur_locks WHERE session = ?1", [self.session])?;
            c.execute("DELETE FROM election WHERE session = ?1", [self.session])?;
            c.execute("DELETE FROM operations WHERE session = ?1", [self.session])?;
            c.execute("DELETE FROM sessions WHERE id = ?1", [self.session])?;
            Ok(())
        })();
        if let Err(e) = r {
            tracing::warn!("ending sqlite metadata session {}: {e}", self.session);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.live().is_ok() {
            self.end_blocking();
        }
    }
}

async fn run_on<T, F>(conn: Arc<Mutex<Connection>>, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        let mut c = conn.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut c)
    })
    .await
    .map_err(|e| MetadataError::Internal(format!("sqlite task failed: {e}")))?
}

/// Runs a short cleanup of a dropped handle: on the blocking pool inside a runtime,
/// inline otherwise.
fn cleanup(
    conn: Arc<Mutex<Connection>>,
    f: impl FnOnce(&Connection) -> rusqlite::Result<()> + Send + 'static,
) {
    let job = move || {
        let c = conn.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = f(&c) {
            tracing::warn!("sqlite metadata cleanup: {e}");
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(h) => {
            h.spawn_blocking(job);
        }
        Err(_) => job(),
    }
}

fn purge_expired(tx: &Transaction<'_>, now: i64) -> rusqlite::Result<()> {
    let expired = "SELECT id FROM sessions WHERE expires_at <= ?1";
    tx.execute(
        &format!("DELETE FROM bookies WHERE session IN ({expired})"),
        [now],
    )?;
    tx.execute(
        &format!("DELETE FROM ur_locks WHERE session IN ({expired})"),
        [now],
    )?;
    tx.execute(
        &format!("DELETE FROM election WHERE session IN ({expired})"),
        [now],
    )?;
    tx.execute(
        &format!("DELETE FROM operations WHERE session IN ({expired})"),
        [now],
    )?;
    tx.execute("DELETE FROM sessions WHERE expires_at <= ?1", [now])?;
    Ok(())
}

fn bump(tx: &Transaction<'_>) -> Result<i64> {
    Ok(tx.query_row(
        "UPDATE revision SET v = v + 1 WHERE id = 0 RETURNING v",
        [],
        |r| r.get(0),
    )?)
}

fn cluster_get(c: &Connection, k: &str) -> Result<Option<String>> {
    Ok(
        c.query_row("SELECT v FROM cluster WHERE k = ?1", [k], |r| r.get(0))
            .optional()?,
    )
}

/// Writes a fresh cluster identity (a new instance id, the embedded layout).
fn put_new_cluster(tx: &Transaction<'_>) -> Result<ClusterInfo> {
    let info = ClusterInfo {
        instance_id: crate::new_instance_id(),
        layout: EMBEDDED_LAYOUT.to_owned(),
    };
    cluster_put(tx, "layout", &info.layout)?;
    cluster_put(tx, "instance_id", &info.instance_id)?;
    Ok(info)
}

fn cluster_put(tx: &Transaction<'_>, k: &str, v: &str) -> Result<()> {
    tx.execute(
        "INSERT OR REPLACE INTO cluster (k, v) VALUES (?1, ?2)",
        params![k, v],
    )?;
    bump(tx)?;
    Ok(())
}

fn read_bookie_set(c: &Connection) -> Result<BookieSet> {
    let mut stmt = c.prepare(&format!(
        "SELECT id, mode FROM bookies WHERE session IN ({LIVE})"
    ))?;
    let rows = stmt.query_map([now_ms()], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
    })?;
    let mut set = BookieSet::default();
    for row in rows {
        let (id, mode) = row?;
        let bookie = BookieId::new(id.clone())
            .map_err(|e| MetadataError::corrupt(format!("registration {id:?}"), e.to_string()))?;
        if mode == "readonly" {
            set.readonly.insert(bookie);
        } else {
            set.writable.insert(bookie);
        }
    }
    Ok(set)
}

fn read_ledger_row(c: &Connection, ledger: LedgerId) -> Result<Option<(Vec<u8>, i64)>> {
    Ok(c.query_row(
        "SELECT data, version FROM ledgers WHERE id = ?1",
        [ledger],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .optional()?)
}

/// A mark's stored bytes. They are also its version: every write of a mark changes them
/// (a re-mark adds a bookie and resets ctime), so a lock's holder deletes the mark only if
/// they are still those it saw when it took the lock.
fn read_ur_data(c: &Connection, ledger: LedgerId) -> Result<Option<Vec<u8>>> {
    Ok(c.query_row(
        "SELECT data FROM underreplicated WHERE ledger = ?1",
        [ledger],
        |r| r.get(0),
    )
    .optional()?)
}

fn read_ur(c: &Connection, ledger: LedgerId) -> Result<Option<UnderreplicatedLedger>> {
    read_ur_data(c, ledger)?
        .map(|d| {
            let (missing_replicas, ctime) = format::decode_underreplicated(ledger, &d)?;
            Ok(UnderreplicatedLedger {
                ledger_id: ledger,
                missing_replicas,
                ctime,
            })
        })
        .transpose()
}

fn mode_str(mode: BookieMode) -> &'static str {
    match mode {
        BookieMode::Writable => "writable",
        BookieMode::ReadOnly => "readonly",
    }
}

/// A session on a sqlite metadata database: the `sqlite://` driver's [`MetadataStore`].
#[derive(Debug, Clone)]
pub struct SqliteMetadataStore {
    inner: Arc<Inner>,
}

impl SqliteMetadataStore {
    /// Opens (creating if needed) the database at `path` and starts a session.
    /// The directory must exist; the error names the path otherwise.
    pub async fn open(path: &Path, opts: SqliteOptions) -> Result<Self> {
        let uri = format!("sqlite://{}", path.display());
        let path_buf: PathBuf = path.to_owned();
        let busy = opts.busy_timeout;
        let timeout_ms = i64::try_from(opts.session_timeout.as_millis()).unwrap_or(i64::MAX / 2);
        let unreachable = {
            let uri = uri.clone();
            move |reason: String| MetadataError::Unreachable {
                address: uri.clone(),
                reason,
            }
        };
        let (conn, session) = tokio::task::spawn_blocking(move || -> Result<(Connection, i64)> {
            let mut c = Connection::open(&path_buf)
                .map_err(|e| unreachable(format!("cannot open {}: {e}", path_buf.display())))?;
            c.busy_timeout(busy)?;
            let mode: String = c
                .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
                .map_err(|e| {
                    unreachable(format!(
                        "{} is not a usable sqlite database: {e}",
                        path_buf.display()
                    ))
                })?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(unreachable(format!(
                    "cannot put {} in WAL mode (got {mode})",
                    path_buf.display()
                )));
            }
            c.execute_batch("PRAGMA synchronous=FULL;")?;
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute_batch(SCHEMA).map_err(|e| {
                unreachable(format!(
                    "{} is not a Folio metadata database: {e}",
                    path_buf.display()
                ))
            })?;
            tx.execute(
                "INSERT INTO sessions (expires_at, pid) VALUES (?1, ?2)",
                params![now_ms() + timeout_ms, std::process::id()],
            )?;
            let session = tx.last_insert_rowid();
            tx.commit()?;
            Ok((c, session))
        })
        .await
        .map_err(|e| MetadataError::Internal(format!("sqlite task failed: {e}")))??;
        let inner = Arc::new(Inner {
            uri,
            conn: Arc::new(Mutex::new(conn)),
            session,
            opts,
            state: watch::Sender::new(SessionState::Connected),
            revision: watch::Sender::new(0),
            revision_poller: std::sync::Once::new(),
        });
        tokio::spawn(heartbeat(Arc::downgrade(&inner)));
        Ok(SqliteMetadataStore { inner })
    }

    /// Stores raw bytes as a ledger's metadata record, bypassing the encoder
    /// (tests plant corrupt records with it).
    pub async fn put_raw_ledger_record(&self, ledger: LedgerId, bytes: &[u8]) -> Result<()> {
        let bytes = bytes.to_vec();
        self.inner
            .write(move |tx, _| {
                let rev = bump(tx)?;
                tx.execute(
                    "INSERT OR REPLACE INTO ledgers (id, data, version) VALUES (?1, ?2, ?3)",
                    params![ledger, bytes, rev],
                )?;
                Ok(())
            })
            .await
    }

    /// Follows `compute(connection)` by polling until the receiver is dropped or the
    /// session ends.
    /// With `on_revision`, recomputes only when the database revision moves (for
    /// values only writes change); otherwise on every poll tick (for values that
    /// also change when a session silently expires, like membership).
    fn follow<T, F>(&self, initial: T, on_revision: bool, compute: F) -> watch::Receiver<T>
    where
        T: PartialEq + Send + Sync + 'static,
        F: Fn(&Connection) -> Result<T> + Send + Sync + 'static,
    {
        let (tx, rx) = watch::channel(initial);
        let weak = Arc::downgrade(&self.inner);
        let compute = Arc::new(compute);
        let poll = self.inner.opts.poll_interval;
        let mut revision = self.inner.revision.subscribe();
        if on_revision {
            self.inner
                .revision_poller
                .call_once(|| drop(tokio::spawn(poll_revision(Arc::downgrade(&self.inner)))));
        }
        tokio::spawn(async move {
            // Recompute once right after subscribing: a write between the caller's
            // initial read and the subscription must not be missed.
            let mut recompute_now = on_revision;
            loop {
                if recompute_now {
                    recompute_now = false;
                } else if on_revision {
                    tokio::select! {
                        r = revision.changed() => if r.is_err() { break },
                        _ = tx.closed() => break,
                    }
                } else {
                    tokio::select! {
                        _ = tokio::time::sleep(poll) => {}
                        _ = tx.closed() => break,
                    }
                }
                let Some(inner) = weak.upgrade() else { break };
                let compute = compute.clone();
                let v = match inner.run(move |c| compute(c)).await {
                    Ok(v) => v,
                    Err(MetadataError::SessionExpired) => break,
                    Err(e) => {
                        tracing::debug!("sqlite watch poll failed: {e}");
                        tokio::time::sleep(poll).await;
                        recompute_now = true;
                        continue;
                    }
                };
                drop(inner);
                tx.send_if_modified(|old| {
                    let changed = *old != v;
                    if changed {
                        *old = v;
                    }
                    changed
                });
            }
        });
        rx
    }
}

/// Keeps `Inner::revision` equal to the database's revision until the store is dropped.
async fn poll_revision(weak: Weak<Inner>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let poll = inner.opts.poll_interval;
        match inner
            .run(|c| {
                Ok(c.query_row("SELECT v FROM revision WHERE id = 0", [], |r| {
                    r.get::<_, i64>(0)
                })?)
            })
            .await
        {
            Ok(v) => {
                inner
                    .revision
                    .send_if_modified(|old| std::mem::replace(old, v) != v);
            }
            Err(MetadataError::SessionExpired) => return,
            Err(e) => tracing::debug!("sqlite revision poll failed: {e}"),
        }
        drop(inner);
        tokio::time::sleep(poll).await;
    }
}

/// Pushes the session's expiry forward until the store is dropped; notices when the
/// session was lost (the process stalled past the timeout, or someone deleted it).
async fn heartbeat(weak: Weak<Inner>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let interval = (inner.opts.session_timeout / 4).max(Duration::from_millis(10));
        if inner.live().is_err() {
            return;
        }
        let timeout_ms =
            i64::try_from(inner.opts.session_timeout.as_millis()).unwrap_or(i64::MAX / 2);
        let session = inner.session;
        let r = run_on(inner.conn.clone(), move |c| {
            let now = now_ms();
            Ok(c.execute(
                "UPDATE sessions SET expires_at = ?1 WHERE id = ?2 AND expires_at > ?3",
                params![now + timeout_ms, session, now],
            )?)
        })
        .await;
        match r {
            Ok(0) => {
                // Not a warning when close() ended the session while this ran.
                if inner.mark_expired() {
                    tracing::warn!("sqlite metadata session {session} expired");
                }
                return;
            }
            Ok(_) => {
                inner.state.send_if_modified(|s| {
                    let changed = *s == SessionState::Disconnected;
                    if changed {
                        *s = SessionState::Connected;
                    }
                    changed
                });
            }
            Err(e) => {
                tracing::warn!("sqlite metadata heartbeat failed: {e}");
                inner.state.send_if_modified(|s| {
                    let changed = *s == SessionState::Connected;
                    if changed {
                        *s = SessionState::Disconnected;
                    }
                    changed
                });
            }
        }
        drop(inner);
        tokio::time::sleep(interval).await;
    }
}

#[async_trait]
impl MetadataStore for SqliteMetadataStore {
    fn uri(&self) -> &str {
        &self.inner.uri
    }

    fn session_state(&self) -> watch::Receiver<SessionState> {
        self.inner.state.subscribe()
    }

    fn session_timeout(&self) -> Duration {
        self.inner.opts.session_timeout
    }

    async fn close(&self) -> Result<()> {
        if self.inner.live().is_err() {
            return Ok(());
        }
        // Closed first, so the heartbeat does not mistake the deleted session for
        // an expired one.
        self.inner.state.send_replace(SessionState::Closed);
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.end_blocking())
            .await
            .map_err(|e| MetadataError::Internal(format!("sqlite task failed: {e}")))?;
        Ok(())
    }
}

#[async_trait]
impl RegistrationManager for SqliteMetadataStore {
    async fn register_bookie(
        &self,
        bookie: &BookieId,
        mode: BookieMode,
        info: &BookieServiceInfo,
    ) -> Result<Box<dyn BookieRegistration>> {
        let (id, session, bytes) = (
            bookie.to_string(),
            self.inner.session,
            format::encode_bookie_service_info(info),
        );
        let token = self
            .inner
            .write(move |tx, _| {
                let exists: i64 = tx.query_row("SELECT count(*) FROM bookies WHERE id = ?1", [&id], |r| r.get(0))?;
                if exists > 0 {
                    return Err(MetadataError::already_exists(format!("registration of bookie {id}")));
                }
                let token = bump(tx)?;
                tx.execute(
                    "INSERT INTO bookies (id, mode, info, session, token) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![id, mode_str(mode), bytes, session, token],
                )?;
                Ok(token)
            })
            .await?;
        Ok(Box::new(SqliteRegistration {
            inner: self.inner.clone(),
            bookie: bookie.clone(),
            token,
            mode,
            done: false,
        }))
    }

    async fn list_bookies(&self) -> Result<BookieSet> {
        self.inner.run(|c| read_bookie_set(c)).await
    }

    async fn bookie_service_info(&self, bookie: &BookieId) -> Result<BookieServiceInfo> {
        let b = bookie.clone();
        self.inner
            .run(move |c| {
                let data: Option<Vec<u8>> = c
                    .query_row(
                        &format!("SELECT info FROM bookies WHERE id = ?2 AND session IN ({LIVE})"),
                        params![now_ms(), b.as_str()],
                        |r| r.get(0),
                    )
                    .optional()?;
                match data {
                    Some(d) => format::decode_bookie_service_info(&b, &d),
                    None => Err(MetadataError::not_found(format!("registered bookie {b}"))),
                }
            })
            .await
    }

    async fn watch_bookies(&self) -> Result<watch::Receiver<BookieSet>> {
        let initial = self.list_bookies().await?;
        Ok(self.follow(initial, false, read_bookie_set))
    }
}

#[async_trait]
impl ClusterManager for SqliteMetadataStore {
    async fn init_cluster(&self) -> Result<ClusterInfo> {
        self.inner
            .write(|tx, _| {
                if cluster_get(tx, "instance_id")?.is_some() {
                    return Err(MetadataError::already_exists("cluster"));
                }
                put_new_cluster(tx)
            })
            .await
    }

    async fn read_cluster(&self) -> Result<ClusterInfo> {
        self.inner
            .run(|c| {
                let id = cluster_get(c, "instance_id")?;
                let layout = cluster_get(c, "layout")?;
                match (id, layout) {
                    (Some(instance_id), Some(layout)) => Ok(ClusterInfo {
                        instance_id,
                        layout,
                    }),
                    _ => Err(MetadataError::not_found("cluster (not initialised)")),
                }
            })
            .await
    }

    async fn format_cluster(&self) -> Result<ClusterInfo> {
        self.inner
            .write(|tx, _| {
                tx.execute_batch(
                    "DELETE FROM cluster; DELETE FROM bookies; DELETE FROM cookies; DELETE FROM ledgers;
                     DELETE FROM underreplicated; DELETE FROM ur_locks; DELETE FROM election;
                     DELETE FROM operations;",
                )?;
                put_new_cluster(tx)
            })
            .await
    }

    async fn cookie_record(&self, bookie: &BookieId) -> Result<Option<Versioned<Vec<u8>>>> {
        let b = bookie.clone();
        self.inner
            .run(move |c| {
                Ok(c.query_row(
                    "SELECT data, version FROM cookies WHERE id = ?1",
                    [b.as_str()],
                    |r| {
                        Ok(Versioned {
                            value: r.get(0)?,
                            version: Version::from_raw(r.get(1)?),
                        })
                    },
                )
                .optional()?)
            })
            .await
    }

    async fn write_cookie_record(
        &self,
        bookie: &BookieId,
        cookie: &[u8],
        expected: Option<Version>,
    ) -> Result<RecordWrite<Version>> {
        let (b, data) = (bookie.clone(), cookie.to_vec());
        self.inner
            .write(move |tx, _| {
                let current: Option<i64> = tx
                    .query_row(
                        "SELECT version FROM cookies WHERE id = ?1",
                        [b.as_str()],
                        |r| r.get(0),
                    )
                    .optional()?;
                match (current, expected) {
                    (Some(_), None) => return Ok(RecordWrite::Exists),
                    (None, Some(_)) => return Ok(RecordWrite::Missing),
                    (Some(cur), Some(v)) if cur != v.raw() => return Ok(RecordWrite::Changed),
                    _ => {}
                }
                let rev = bump(tx)?;
                tx.execute(
                    "INSERT OR REPLACE INTO cookies (id, data, version) VALUES (?1, ?2, ?3)",
                    params![b.as_str(), data, rev],
                )?;
                Ok(RecordWrite::Done(Version::from_raw(rev)))
            })
            .await
    }

    async fn delete_cookie_record(
        &self,
        bookie: &BookieId,
        expected: Version,
    ) -> Result<RecordWrite<()>> {
        let b = bookie.clone();
        self.inner
            .write(move |tx, _| {
                let current: Option<i64> = tx
                    .query_row(
                        "SELECT version FROM cookies WHERE id = ?1",
                        [b.as_str()],
                        |r| r.get(0),
                    )
                    .optional()?;
                match current {
                    None => Ok(RecordWrite::Missing),
                    Some(cur) if cur != expected.raw() => Ok(RecordWrite::Changed),
                    Some(_) => {
                        tx.execute("DELETE FROM cookies WHERE id = ?1", [b.as_str()])?;
                        bump(tx)?;
                        Ok(RecordWrite::Done(()))
                    }
                }
            })
            .await
    }

    async fn list_cookies(&self) -> Result<Vec<BookieId>> {
        self.inner
            .run(|c| {
                let mut stmt = c.prepare("SELECT id FROM cookies ORDER BY id")?;
                let ids = stmt.query_map([], |r| r.get::<_, String>(0))?;
                let mut out = Vec::new();
                for id in ids {
                    let id = id?;
                    out.push(BookieId::new(id.clone()).map_err(|e| {
                        MetadataError::corrupt(format!("cookie {id:?}"), e.to_string())
                    })?);
                }
                Ok(out)
            })
            .await
    }
}

#[async_trait]
impl LedgerManager for SqliteMetadataStore {
    async fn generate_ledger_id(&self) -> Result<LedgerId> {
        self.inner
            .write(|tx, _| {
                Ok(tx.query_row(
                    "UPDATE idgen SET next = next + 1 WHERE id = 0 RETURNING next - 1",
                    [],
                    |r| r.get(0),
                )?)
            })
            .await
    }

    async fn create_ledger_record(
        &self,
        ledger: LedgerId,
        data: &[u8],
    ) -> Result<std::result::Result<Version, Versioned<Vec<u8>>>> {
        let bytes = data.to_vec();
        self.inner
            .write(move |tx, _| {
                if let Some((existing, rev)) = read_ledger_row(tx, ledger)? {
                    return Ok(Err(Versioned {
                        value: existing,
                        version: Version::from_raw(rev),
                    }));
                }
                let rev = bump(tx)?;
                tx.execute(
                    "INSERT INTO ledgers (id, data, version) VALUES (?1, ?2, ?3)",
                    params![ledger, bytes, rev],
                )?;
                Ok(Ok(Version::from_raw(rev)))
            })
            .await
    }

    async fn ledger_record(&self, ledger: LedgerId) -> Result<Option<Versioned<Vec<u8>>>> {
        self.inner
            .run(move |c| {
                Ok(read_ledger_row(c, ledger)?.map(|(bytes, rev)| Versioned {
                    value: bytes,
                    version: Version::from_raw(rev),
                }))
            })
            .await
    }

    async fn write_ledger_record(
        &self,
        ledger: LedgerId,
        data: &[u8],
        expected: Version,
    ) -> Result<RecordWrite<Version>> {
        let bytes = data.to_vec();
        self.inner
            .write(move |tx, _| {
                let current: Option<i64> = tx
                    .query_row("SELECT version FROM ledgers WHERE id = ?1", [ledger], |r| {
                        r.get(0)
                    })
                    .optional()?;
                match current {
                    None => Ok(RecordWrite::Missing),
                    Some(cur) if cur != expected.raw() => Ok(RecordWrite::Changed),
                    Some(_) => {
                        let rev = bump(tx)?;
                        tx.execute(
                            "UPDATE ledgers SET data = ?2, version = ?3 WHERE id = ?1",
                            params![ledger, bytes, rev],
                        )?;
                        Ok(RecordWrite::Done(Version::from_raw(rev)))
                    }
                }
            })
            .await
    }

    async fn delete_ledger_record(
        &self,
        ledger: LedgerId,
        expected: Option<Version>,
    ) -> Result<RecordWrite<()>> {
        self.inner
            .write(move |tx, _| {
                let current: Option<i64> = tx
                    .query_row("SELECT version FROM ledgers WHERE id = ?1", [ledger], |r| {
                        r.get(0)
                    })
                    .optional()?;
                match (current, expected) {
                    (None, _) => Ok(RecordWrite::Missing),
                    (Some(cur), Some(v)) if cur != v.raw() => Ok(RecordWrite::Changed),
                    (Some(_), _) => {
                        tx.execute("DELETE FROM ledgers WHERE id = ?1", [ledger])?;
                        bump(tx)?;
                        Ok(RecordWrite::Done(()))
                    }
                }
            })
            .await
    }

    async fn list_ledgers(
        &self,
        start_after: Option<LedgerId>,
        limit: usize,
    ) -> Result<LedgerPage> {
        let limit = crate::check_limit(limit)?;
        self.inner
            .run(move |c| {
                let mut stmt =
                    c.prepare("SELECT id FROM ledgers WHERE id > ?1 ORDER BY id LIMIT ?2")?;
                let ids = stmt
                    .query_map(
                        params![start_after.unwrap_or(i64::MIN), (limit + 1) as i64],
                        |r| r.get(0),
                    )?
                    .collect::<rusqlite::Result<Vec<LedgerId>>>()?;
                Ok(crate::page(ids, limit))
            })
            .await
    }

    async fn watch_ledger(
        &self,
        ledger: LedgerId,
    ) -> Result<watch::Receiver<Option<Versioned<LedgerMetadata>>>> {
        let compute = move |c: &Connection| -> Result<Option<Versioned<LedgerMetadata>>> {
            let Some((bytes, rev)) = read_ledger_row(c, ledger)? else {
                return Ok(None);
            };
            // A record that cannot be decoded reads as absent here; read_ledger reports it.
            Ok(format::decode_ledger_metadata(ledger, &bytes)
                .ok()
                .map(|value| Versioned {
                    value,
                    version: Version::from_raw(rev),
                }))
        };
        let initial = self.inner.run(move |c| compute(c)).await?;
        Ok(self.follow(initial, true, compute))
    }
}

#[async_trait]
impl UnderreplicationManager for SqliteMetadataStore {
    async fn mark_underreplicated(&self, ledger: LedgerId, missing: &[BookieId]) -> Result<()> {
        crate::driver::check_ledger_id(ledger)?;
        let missing: Vec<BookieId> = missing.to_vec();
        self.inner
            .write(move |tx, now| {
                let mut set = match read_ur(tx, ledger)? {
                    Some(ur) => {
                        let before = ur.missing_replicas.len();
                        let mut set = ur.missing_replicas;
                        set.extend(missing.iter().cloned());
                        if set.len() == before {
                            return Ok(()); // nothing new: no write, as BookKeeper
                        }
                        set
                    }
                    None => BTreeSet::new(),
                };
                set.extend(missing);
                // A new mark, or a re-mark that adds a bookie: ctime is now (BookKeeper).
                let ctime = Some(now);
                tx.execute(
                    "INSERT OR REPLACE INTO underreplicated (ledger, data) VALUES (?1, ?2)",
                    params![ledger, format::encode_underreplicated(&set, ctime)],
                )?;
                bump(tx)?;
                Ok(())
            })
            .await
    }

    async fn list_underreplicated(&self) -> Result<Vec<UnderreplicatedLedger>> {
        self.inner
            .run(|c| {
                let mut stmt =
                    c.prepare("SELECT ledger, data FROM underreplicated ORDER BY ledger")?;
                let rows = stmt
                    .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)))?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                rows.into_iter()
                    .map(|(ledger, d)| {
                        let (missing_replicas, ctime) = format::decode_underreplicated(ledger, &d)?;
                        Ok(UnderreplicatedLedger {
                            ledger_id: ledger,
                            missing_replicas,
                            ctime,
                        })
                    })
                    .collect()
            })
            .await
    }

    async fn find_underreplicated(
        &self,
        ledger: LedgerId,
    ) -> Result<Option<UnderreplicatedLedger>> {
        self.inner.run(move |c| read_ur(c, ledger)).await
    }

    async fn try_lock_underreplicated(
        &self,
        ledger: LedgerId,
        holder: &str,
    ) -> Result<Option<Box<dyn UnderreplicationLock>>> {
        let (session, holder) = (self.inner.session, holder.to_owned());
        let token = self
            .inner
            .write(move |tx, _| {
                let Some(seen) = read_ur_data(tx, ledger)? else {
                    return Err(MetadataError::not_found(format!(
                        "under-replicated ledger {ledger}"
                    )));
                };
                let held: i64 = tx.query_row(
                    "SELECT count(*) FROM ur_locks WHERE ledger = ?1",
                    [ledger],
                    |r| r.get(0),
                )?;
                if held > 0 {
                    return Ok(None);
                }
                let token = bump(tx)?;
                tx.execute(
                    "INSERT INTO ur_locks (ledger, session, token, holder) VALUES (?1, ?2, ?3, ?4)",
                    params![ledger, session, token, holder],
                )?;
                Ok(Some((token, seen)))
            })
            .await?;
        Ok(token.map(|(token, seen)| {
            Box::new(SqliteLock::new(self.inner.clone(), ledger, token, seen))
                as Box<dyn UnderreplicationLock>
        }))
    }

    async fn lock_next_underreplicated(
        &self,
        holder: &str,
    ) -> Result<Option<(UnderreplicatedLedger, Box<dyn UnderreplicationLock>)>> {
        let (session, holder) = (self.inner.session, holder.to_owned());
        let found = self
            .inner
            .write(move |tx, _| {
                let ledger: Option<i64> = tx
                    .query_row(
                        "SELECT ledger FROM underreplicated WHERE ledger NOT IN (SELECT ledger FROM ur_locks) ORDER BY ledger LIMIT 1",
                        [],
                        |r| r.get(0),
                    )
                    .optional()?;
                let Some(ledger) = ledger else { return Ok(None) };
                let seen = read_ur_data(tx, ledger)?.ok_or_else(|| MetadataError::Internal(format!("mark of ledger {ledger} vanished")))?;
                let (missing_replicas, ctime) = format::decode_underreplicated(ledger, &seen)?;
                let ur = UnderreplicatedLedger { ledger_id: ledger, missing_replicas, ctime };
                let token = bump(tx)?;
                tx.execute(
                    "INSERT INTO ur_locks (ledger, session, token, holder) VALUES (?1, ?2, ?3, ?4)",
                    params![ledger, session, token, holder],
                )?;
                Ok(Some((ur, token, seen)))
            })
            .await?;
        Ok(found.map(|(ur, token, seen)| {
            let lock = Box::new(SqliteLock::new(
                self.inner.clone(),
                ur.ledger_id,
                token,
                seen,
            )) as Box<dyn UnderreplicationLock>;
            (ur, lock)
        }))
    }

    async fn underreplicated_lock_holder(&self, ledger: LedgerId) -> Result<Option<String>> {
        self.inner
            .run(move |c| {
                Ok(c.query_row(
                    &format!(
                        "SELECT holder FROM ur_locks WHERE ledger = ?2 AND session IN ({LIVE})"
                    ),
                    params![now_ms(), ledger],
                    |r| r.get(0),
                )
                .optional()?)
            })
            .await
    }

    async fn put_operation_record(&self, name: &str, data: &[u8]) -> Result<()> {
        let (session, name, data) = (self.inner.session, name.to_owned(), data.to_vec());
        self.inner
            .write(move |tx, _| {
                tx.execute(
                    "INSERT OR REPLACE INTO operations (name, session, data) VALUES (?1, ?2, ?3)",
                    params![name, session, data],
                )?;
                bump(tx)?;
                Ok(())
            })
            .await
    }

    async fn delete_operation_record(&self, name: &str) -> Result<()> {
        let name = name.to_owned();
        self.inner
            .write(move |tx, _| {
                tx.execute("DELETE FROM operations WHERE name = ?1", [name])?;
                bump(tx)?;
                Ok(())
            })
            .await
    }

    async fn list_operations(&self) -> Result<Vec<(String, Vec<u8>)>> {
        self.inner
            .run(move |c| {
                let mut q = c.prepare(&format!(
                    "SELECT name, data FROM operations WHERE session IN ({LIVE}) ORDER BY name"
                ))?;
                let rows = q.query_map([now_ms()], |r| Ok((r.get(0)?, r.get(1)?)))?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .await
    }

    async fn remove_underreplicated(&self, ledger: LedgerId) -> Result<()> {
        self.inner
            .write(move |tx, _| {
                tx.execute("DELETE FROM underreplicated WHERE ledger = ?1", [ledger])?;
                tx.execute("DELETE FROM ur_locks WHERE ledger = ?1", [ledger])?;
                bump(tx)?;
                Ok(())
            })
            .await
    }

    async fn is_autorecovery_enabled(&self) -> Result<bool> {
        self.inner
            .run(|c| Ok(cluster_get(c, "autorecovery_disabled")?.is_none_or(|v| v != "true")))
            .await
    }

    async fn set_autorecovery_enabled(&self, enabled: bool) -> Result<()> {
        self.inner
            .write(move |tx, _| {
                cluster_put(
                    tx,
                    "autorecovery_disabled",
                    if enabled { "false" } else { "true" },
                )
            })
            .await
    }

    async fn lost_bookie_recovery_delay_versioned(&self) -> Result<Option<Versioned<u32>>> {
        self.inner
            .run(|c| {
                let Some(v) = cluster_get(c, "lost_bookie_recovery_delay")? else {
                    return Ok(None);
                };
                let value = v.parse().map_err(|_| {
                    MetadataError::corrupt(
                        "lost bookie recovery delay",
                        format!("{v:?} is not a number of seconds"),
                    )
                })?;
                // Each write counts up, so a rewrite of the same value is seen (triggeraudit).
                let writes = cluster_get(c, "lost_bookie_recovery_delay_writes")?
                    .and_then(|w| w.parse().ok())
                    .unwrap_or(0);
                Ok(Some(Versioned {
                    value,
                    version: Version::from_raw(writes),
                }))
            })
            .await
    }

    async fn set_lost_bookie_recovery_delay(&self, seconds: u32) -> Result<()> {
        self.inner
            .write(move |tx, _| {
                let writes: i64 = cluster_get(tx, "lost_bookie_recovery_delay_writes")?
                    .and_then(|w| w.parse().ok())
                    .unwrap_or(0);
                cluster_put(tx, "lost_bookie_recovery_delay", &seconds.to_string())?;
                cluster_put(
                    tx,
                    "lost_bookie_recovery_delay_writes",
                    &(writes + 1).to_string(),
                )
            })
            .await
    }

    async fn auditor_check_ctime(&self, check: AuditorCheck) -> Result<Option<i64>> {
        self.inner
            .run(move |c| {
                let Some(v) = cluster_get(c, check.record_name())? else {
                    return Ok(None);
                };
                v.parse::<i64>()
                    .map(|t| Some(t).filter(|&t| t >= 0))
                    .map_err(|_| {
                        MetadataError::corrupt(
                            check.record_name(),
                            format!("{v:?} is not a time in milliseconds"),
                        )
                    })
            })
            .await
    }

    async fn set_auditor_check_ctime(&self, check: AuditorCheck, ctime_ms: i64) -> Result<()> {
        self.inner
            .write(move |tx, _| cluster_put(tx, check.record_name(), &ctime_ms.to_string()))
            .await
    }
}

#[async_trait]
impl AuditorElection for SqliteMetadataStore {
    async fn join_auditor_election(
        &self,
        candidate: &BookieId,
    ) -> Result<Box<dyn LeaderCandidacy>> {
        let (session, who) = (self.inner.session, candidate.to_string());
        let vote = self
            .inner
            .write(move |tx, _| {
                tx.execute(
                    "INSERT INTO election (session, candidate) VALUES (?1, ?2)",
                    params![session, who],
                )?;
                let vote = tx.last_insert_rowid();
                bump(tx)?;
                Ok(vote)
            })
            .await?;
        let leader = Arc::new(watch::Sender::new(false));
        let task = tokio::spawn(follow_election(
            Arc::downgrade(&self.inner),
            vote,
            leader.clone(),
        ));
        Ok(Box::new(SqliteCandidacy {
            inner: self.inner.clone(),
            vote,
            leader,
            task,
        }))
    }

    async fn current_auditor(&self) -> Result<Option<BookieId>> {
        self.inner
            .run(|c| {
                let who: Option<String> = c
                    .query_row(
                        &format!("SELECT candidate FROM election WHERE session IN ({LIVE}) ORDER BY seq LIMIT 1"),
                        [now_ms()],
                        |r| r.get(0),
                    )
                    .optional()?;
                who.map(|w| BookieId::new(w.clone()).map_err(|e| MetadataError::corrupt(format!("auditor vote {w:?}"), e.to_string())))
                    .transpose()
            })
            .await
    }
}

/// Keeps a candidacy's leadership flag equal to "my vote is the lowest live one".
async fn follow_election(weak: Weak<Inner>, vote: i64, leader: Arc<watch::Sender<bool>>) {
    loop {
        let Some(inner) = weak.upgrade() else { break };
        let poll = inner.opts.poll_interval;
        let r = inner
            .run(move |c| {
                let now = now_ms();
                let mine: i64 = c.query_row(
                    &format!("SELECT count(*) FROM election WHERE seq = ?2 AND session IN ({LIVE})"),
                    params![now, vote],
                    |r| r.get(0),
                )?;
                if mine == 0 {
                    return Ok(None);
                }
                let first: Option<i64> = c
                    .query_row(
                        &format!("SELECT seq FROM election WHERE session IN ({LIVE}) ORDER BY seq LIMIT 1"),
                        [now],
                        |r| r.get(0),
                    )
                    .optional()?;
                Ok(Some(first == Some(vote)))
            })
            .await;
        drop(inner);
        match r {
            Ok(Some(is_leader)) => {
                leader.send_if_modified(|v| {
                    let changed = *v != is_leader;
                    *v = is_leader;
                    changed
                });
            }
            // The vote is gone (session expired or closed): never leader again.
            Ok(None) | Err(MetadataError::SessionExpired) => break,
            Err(e) => {
                // Cannot vouch for leadership while the database is unreadable.
                tracing::warn!("sqlite election poll failed: {e}");
                leader.send_if_modified(|v| std::mem::replace(v, false));
            }
        }
        tokio::time::sleep(poll).await;
    }
    leader.send_replace(false);
}

#[derive(Debug)]
struct SqliteRegistration {
    inner: Arc<Inner>,
    bookie: BookieId,
    token: i64,
    mode: BookieMode,
    done: bool,
}

#[async_trait]
impl BookieRegistration for SqliteRegistration {
    fn bookie_id(&self) -> &BookieId {
        &self.bookie
    }

    fn mode(&self) -> BookieMode {
        self.mode
    }

    async fn set_mode(&mut self, mode: BookieMode) -> Result<()> {
        let (id, token) = (self.bookie.to_string(), self.token);
        self.inner
            .write(move |tx, _| {
                let n = tx.execute(
                    "UPDATE bookies SET mode = ?1 WHERE id = ?2 AND token = ?3",
                    params![mode_str(mode), id, token],
                )?;
                if n == 0 {
                    return Err(MetadataError::SessionExpired);
                }
                bump(tx)?;
                Ok(())
            })
            .await?;
        self.mode = mode;
        Ok(())
    }

    async fn unregister(mut self: Box<Self>) -> Result<()> {
        self.done = true;
        let (id, token) = (self.bookie.to_string(), self.token);
        run_on(self.inner.conn.clone(), move |c| {
            c.execute(
                "DELETE FROM bookies WHERE id = ?1 AND token = ?2",
                params![id, token],
            )?;
            Ok(())
        })
        .await
    }
}

impl Drop for SqliteRegistration {
    fn drop(&mut self) {
        if !self.done {
            let (id, token) = (self.bookie.to_string(), self.token);
            cleanup(self.inner.conn.clone(), move |c| {
                c.execute(
                    "DELETE FROM bookies WHERE id = ?1 AND token = ?2",
                    params![id, token],
                )
                .map(drop)
            });
        }
    }
}

#[derive(Debug)]
struct SqliteLock {
    inner: Arc<Inner>,
    ledger: LedgerId,
    token: i64,
    /// The mark's bytes when the lock was taken (its version: see `read_ur_data`).
    seen: Vec<u8>,
    done: bool,
}

impl SqliteLock {
    fn new(inner: Arc<Inner>, ledger: LedgerId, token: i64, seen: Vec<u8>) -> Self {
        SqliteLock {
            inner,
            ledger,
            token,
            seen,
            done: false,
        }
    }

    async fn finish(&mut self, unmark: bool) -> Result<()> {
        self.done = true;
        let (ledger, token, seen) = (self.ledger, self.token, std::mem::take(&mut self.seen));
        self.inner
            .write(move |tx, _| {
                let n = tx.execute(
                    "DELETE FROM ur_locks WHERE ledger = ?1 AND token = ?2",
                    params![ledger, token],
                )?;
                if n == 0 {
                    // The lock died with an expired session; someone else may hold it now.
                    return Err(MetadataError::SessionExpired);
                }
                if unmark {
                    tx.execute(
                        "DELETE FROM underreplicated WHERE ledger = ?1 AND data = ?2",
                        params![ledger, seen],
                    )?;
                }
                bump(tx)?;
                Ok(())
            })
            .await
    }
}

#[async_trait]
impl UnderreplicationLock for SqliteLock {
    fn ledger_id(&self) -> LedgerId {
        self.ledger
    }

    async fn release(mut self: Box<Self>) -> Result<()> {
        self.finish(false).await
    }

    async fn mark_replicated(mut self: Box<Self>) -> Result<()> {
        self.finish(true).await
    }
}

impl Drop for SqliteLock {
    fn drop(&mut self) {
        if !self.done {
            let (ledger, token) = (self.ledger, self.token);
            cleanup(self.inner.conn.clone(), move |c| {
                c.execute(
                    "DELETE FROM ur_locks WHERE ledger = ?1 AND token = ?2",
                    params![ledger, token],
                )
                .map(drop)
            });
        }
    }
}

#[derive(Debug)]
struct SqliteCandidacy {
    inner: Arc<Inner>,
    vote: i64,
    leader: Arc<watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

#[async_trait]
impl LeaderCandidacy for SqliteCandidacy {
    fn leadership(&self) -> watch::Receiver<bool> {
        self.leader.subscribe()
    }

    async fn resign(self: Box<Self>) -> Result<()> {
        let vote = self.vote;
        run_on(self.inner.conn.clone(), move |c| {
            c.execute("DELETE FROM election WHERE seq = ?1", [vote])?;
            Ok(())
        })
        .await
        // Drop stops the follower task; deleting again there is harmless.
    }
}

impl Drop for SqliteCandidacy {
    fn drop(&mut self) {
        self.task.abort();
        self.leader.send_replace(false);
        let vote = self.vote;
        cleanup(self.inner.conn.clone(), move |c| {
            c.execute("DELETE FROM election WHERE seq = ?1", [vote])
                .map(drop)
        });
    }
}
