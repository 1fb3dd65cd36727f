//! The bookie in the metadata store: its cookie (checked before it serves, so it never starts
//! on the wrong or a wiped disk) and its registration (ephemeral, writable or read-only, redone
//! after a lost session, removed on clean shutdown).
//!
//! A lost session cannot be revived (its ephemeral records are gone and the store refuses further
//! calls), so the registrar holds a [`Connector`] that opens a fresh session and registers again,
//! retrying until it succeeds or the bookie stops.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use folio_env::Env;
use folio_metadata::{
    BookieMode, BookieRegistration, BookieServiceInfo, MetadataError, MetadataStore, SessionState,
};
use folio_storage::cookie::Cookie;
use folio_types::BookieId;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::config::BookieConfig;

/// Opens a new session with the metadata service.
pub type Connector = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = folio_metadata::Result<Arc<dyn MetadataStore>>> + Send>>
        + Send
        + Sync,
>;

/// Why the cookie check refused to let the bookie start.
#[derive(Debug, thiserror::Error)]
pub enum CookieCheckError {
    #[error("metadata: {0}")]
    Metadata(#[from] MetadataError),
    #[error("{0}")]
    File(#[from] folio_storage::cookie::CookieError),
    #[error("cookie of bookie {bookie} in the metadata store is unreadable: {reason}")]
    BadRemote { bookie: String, reason: String },
    #[error("cookie in {dir} does not match this bookie: {mismatch}")]
    LocalMismatch { dir: PathBuf, mismatch: String },
    #[error(
        "cookie of bookie {bookie} in the metadata store does not match this bookie: {mismatch}"
    )]
    RemoteMismatch { bookie: String, mismatch: String },
    #[error(
        "bookie {bookie} has a cookie in the metadata store but {dir} has none: \
         a wiped or new disk must not join as the old bookie (decommission it, or delete its cookie)"
    )]
    MissingLocal { bookie: String, dir: PathBuf },
    #[error(
        "{dir} holds a cookie but the metadata store has none for bookie {bookie}: \
         the directory belongs to another cluster or bookie"
    )]
    MissingRemote { bookie: String, dir: PathBuf },
}

/// The cookie this bookie should have. The index directories are recorded (BookKeeper's
/// `indexDirs`, layout 5) when they differ from the ledger directories, which with Folio's
/// separate index directory is always: a bookie whose index is lost or moved must not start
/// with an empty one and answer "no such entry" for entries it acknowledged.
pub fn expected_cookie(
    bookie: &BookieId,
    instance_id: &str,
    journal_dirs: &[PathBuf],
    ledger_dirs: &[PathBuf],
    index_dirs: &[PathBuf],
) -> Cookie {
    let s = |d: &[PathBuf]| d.iter().map(|p| p.display().to_string()).collect();
    Cookie {
        bookie_host: bookie.to_string(),
        journal_dirs: s(journal_dirs),
        ledger_dirs: s(ledger_dirs),
        instance_id: Some(instance_id.to_string()),
        // As BookKeeper: absent when they are the ledger directories.
        index_dirs: (!index_dirs.is_empty() && index_dirs != ledger_dirs).then(|| s(index_dirs)),
    }
}

/// The directories a cookie covers, each once: journal, ledger, then index directories.
pub fn cookie_dirs(cookie: &Cookie) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    let all = cookie
        .journal_dirs
        .iter()
        .chain(&cookie.ledger_dirs)
        .chain(cookie.index_dirs.iter().flatten());
    for d in all.map(PathBuf::from) {
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    dirs
}

/// BookKeeper's start-up cookie check over every directory the expected cookie names
/// ([`cookie_dirs`]). A new bookie (no cookie anywhere) writes its cookie to the metadata
/// store and to every directory; a known bookie must find the same cookie in every directory
/// and in the store. Anything else is refused with the reason.
///
/// One upgrade is made in place: a cookie written before index directories were recorded
/// (no `indexDirs`, by an older Folio) that matches in everything else, with no cookie yet in
/// the index directories, is rewritten with them (the store first, by version, then every
/// directory). The ledger store's own check still refuses an index that is missing or empty
/// while entry logs or the journal's checkpoints say there was data.
pub async fn check_cookies(
    env: &Env,
    store: &dyn MetadataStore,
    expected: &Cookie,
) -> Result<(), CookieCheckError> {
    let dirs = cookie_dirs(expected);
    let bookie =
        BookieId::new(expected.bookie_host.clone()).map_err(|e| CookieCheckError::BadRemote {
            bookie: expected.bookie_host.clone(),
            reason: e.to_string(),
        })?;
    let remote = match store.read_cookie(&bookie).await {
        Ok(v) => Some((
            Cookie::parse(&v.value).map_err(|e| CookieCheckError::BadRemote {
                bookie: bookie.to_string(),
                reason: e.to_string(),
            })?,
            v.version,
        )),
        Err(MetadataError::NotFound { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let mut locals = Vec::new();
    for dir in &dirs {
        locals.push((dir, Cookie::read_from_dir(&*env.fs, dir)?));
    }
    match remote {
        None => {
            if let Some((dir, _)) = locals.iter().find(|(_, c)| c.is_some()) {
                return Err(CookieCheckError::MissingRemote {
                    bookie: bookie.to_string(),
                    dir: dir.to_path_buf(),
                });
            }
            // A new bookie: the store first, so that a crash in between leaves "remote but no
            // local", which is refused rather than silently re-stamped.
            store
                .write_cookie(&bookie, &expected.to_bytes(), None)
                .await?;
            write_to_dirs(env, expected, &dirs)?;
            info!(%bookie, "new bookie: cookie written");
            Ok(())
        }
        Some((remote, version)) => {
            if is_index_upgrade(&remote, expected, &locals) {
                info!(
                    %bookie,
                    index_dirs = ?expected.index_dirs,
                    "the cookie predates recorded index directories: adding them"
                );
                store
                    .write_cookie(&bookie, &expected.to_bytes(), Some(version))
                    .await?;
                return write_to_dirs(env, expected, &dirs);
            }
            if let Some((dir, _)) = locals.iter().find(|(_, c)| c.is_none()) {
                return Err(CookieCheckError::MissingLocal {
                    bookie: bookie.to_string(),
                    dir: dir.to_path_buf(),
                });
            }
            remote
                .verify(expected)
                .map_err(|m| CookieCheckError::RemoteMismatch {
                    bookie: bookie.to_string(),
                    mismatch: m.to_string(),
                })?;
            for (dir, local) in locals {
                let local = local.expect("checked above");
                local
                    .verify(expected)
                    .map_err(|m| CookieCheckError::LocalMismatch {
                        dir: dir.to_path_buf(),
                        mismatch: m.to_string(),
                    })?;
            }
            Ok(())
        }
    }
}

/// Whether `remote` is `expected` as an older Folio wrote it (no `indexDirs`), and the local
/// cookies say the same: present and equal to `remote` in every journal and ledger directory,
/// absent in every index directory.
fn is_index_upgrade(
    remote: &Cookie,
    expected: &Cookie,
    locals: &[(&PathBuf, Option<Cookie>)],
) -> bool {
    let Some(index_dirs) = &expected.index_dirs else {
        return false;
    };
    if remote.index_dirs.is_some() {
        return false;
    }
    let old = Cookie {
        index_dirs: None,
        ..expected.clone()
    };
    if remote.verify(&old).is_err() {
        return false;
    }
    locals.iter().all(|(dir, local)| {
        let is_index = index_dirs.iter().any(|d| Path::new(d) == dir.as_path());
        let in_other = expected
            .journal_dirs
            .iter()
            .chain(&expected.ledger_dirs)
            .any(|d| Path::new(d) == dir.as_path());
        match local {
            None => is_index && !in_other,
            Some(c) => !is_index && c == remote,
        }
    })
}

fn write_to_dirs(env: &Env, cookie: &Cookie, dirs: &[PathBuf]) -> Result<(), CookieCheckError> {
    for dir in dirs {
        env.fs
            .create_dir_all(dir)
            .map_err(|source| folio_storage::cookie::CookieError::Io {
                path: dir.clone(),
                source,
            })?;
        cookie.write_to_dir(&*env.fs, dir)?;
    }
    Ok(())
}

pub use folio_types::rack::RACK_PROPERTY;

/// The properties a bookie publishes in its registration: Folio's version (which tells
/// clients it is a Folio bookie, `folio_types::service`), and its `rack` if configured.
pub fn service_properties(config: &BookieConfig) -> BTreeMap<String, String> {
    let mut p = BTreeMap::new();
    p.insert(
        folio_types::service::FOLIO_VERSION_PROPERTY.to_string(),
        env!("CARGO_PKG_VERSION").to_string(),
    );
    if let Some(rack) = &config.rack {
        p.insert(RACK_PROPERTY.to_string(), rack.clone());
    }
    p
}

/// Where the registration stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegistrationState {
    Registered(BookieMode),
    /// The session was lost; registering again.
    Lost,
    Stopped,
}

/// Keeps the bookie registered (see the module comment).
pub struct Registrar {
    stop: watch::Sender<bool>,
    state: watch::Receiver<RegistrationState>,
    task: tokio::task::JoinHandle<()>,
}

/// Tells the registrar whether the bookie is read-only now.
pub type ReadOnlyProbe = Arc<dyn Fn() -> bool + Send + Sync>;

fn mode_of(read_only: &ReadOnlyProbe) -> BookieMode {
    if read_only() {
        BookieMode::ReadOnly
    } else {
        BookieMode::Writable
    }
}

/// Why the first registration failed.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error("registering bookie: {0}")]
    Metadata(#[from] MetadataError),
    #[error(
        "bookie {bookie} is registered by another live bookie: its registration was still there \
         after waiting {waited_ms} ms (the metadata session timeout of {timeout_ms} ms plus a \
         margin) for an earlier session of this bookie to expire; stop the other bookie or give \
         this one another bookie id"
    )]
    HeldByLiveBookie {
        bookie: BookieId,
        waited_ms: u128,
        timeout_ms: u128,
    },
}

/// How long a registration of a dead session may outlive the session timeout: ZooKeeper
/// expires sessions on its ticks and etcd revokes leases a little late; half the timeout and a
/// second more covers both (BookKeeper waits the timeout).
fn expiry_bound(session_timeout: Duration) -> Duration {
    session_timeout + session_timeout / 2 + Duration::from_secs(1)
}

/// How often a waiting registration looks again.
const REGISTER_RETRY: Duration = Duration::from_millis(200);

/// Registers `bookie`, waiting while the id is taken: a bookie killed and restarted at once
/// finds its previous process's registration, which its session keeps until the metadata
/// service notices the session is dead (BookKeeper waits for that too). Bounded by
/// [`expiry_bound`] of the store's session timeout; a holder that outlives it is another live
/// bookie.
async fn register_waiting(
    store: &dyn MetadataStore,
    bookie: &BookieId,
    read_only: &ReadOnlyProbe,
    info: &BookieServiceInfo,
) -> Result<(Box<dyn BookieRegistration>, BookieMode), RegisterError> {
    let timeout = store.session_timeout();
    let bound = expiry_bound(timeout);
    let started = tokio::time::Instant::now();
    let mut announced = false;
    loop {
        let mode = mode_of(read_only);
        match store.register_bookie(bookie, mode, info).await {
            Ok(r) => {
                if announced {
                    info!(%bookie, waited_ms = started.elapsed().as_millis() as u64, "the earlier registration expired");
                }
                return Ok((r, mode));
            }
            Err(e) if e.is_already_exists() => {
                if started.elapsed() >= bound {
                    return Err(RegisterError::HeldByLiveBookie {
                        bookie: bookie.clone(),
                        waited_ms: started.elapsed().as_millis(),
                        timeout_ms: timeout.as_millis(),
                    });
                }
                if !announced {
                    warn!(
                        %bookie,
                        bound_ms = bound.as_millis() as u64,
                        "bookie id already registered ({e}): waiting for the registration of an \
                         earlier session (this bookie before a crash or kill?) to expire"
                    );
                    announced = true;
                }
                tokio::time::sleep(REGISTER_RETRY).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

impl Registrar {
    /// Registers the bookie through `store` (a session already open) and keeps it registered.
    /// A registration already there is waited out ([`register_waiting`]); fails if it outlives
    /// the bound (another live bookie holds the id) or the store fails.
    pub async fn start(
        store: Arc<dyn MetadataStore>,
        connector: Connector,
        bookie: BookieId,
        info: BookieServiceInfo,
        read_only: ReadOnlyProbe,
        check_interval: Duration,
    ) -> Result<Registrar, RegisterError> {
        let (registration, mode) = register_waiting(&*store, &bookie, &read_only, &info).await?;
        info!(%bookie, ?mode, "registered");
        let (state_tx, state) = watch::channel(RegistrationState::Registered(mode));
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(keep_registered(
            store,
            registration,
            connector,
            bookie,
            info,
            read_only,
            check_interval,
            state_tx,
            stop_rx,
        ));
        Ok(Registrar { stop, state, task })
    }

    pub fn state(&self) -> RegistrationState {
        *self.state.borrow()
    }

    /// Follows the state (tests, the admin endpoint).
    pub fn watch(&self) -> watch::Receiver<RegistrationState> {
        self.state.clone()
    }

    /// Unregisters (clean shutdown) and closes the session.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        if let Err(e) = self.task.await {
            warn!("registration task ended abnormally: {e}");
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn keep_registered(
    mut store: Arc<dyn MetadataStore>,
    registration: Box<dyn BookieRegistration>,
    connector: Connector,
    bookie: BookieId,
    info: BookieServiceInfo,
    read_only: ReadOnlyProbe,
    check_interval: Duration,
    state: watch::Sender<RegistrationState>,
    mut stop: watch::Receiver<bool>,
) {
    let mut registration = Some(registration);
    let mut session = store.session_state();
    loop {
        let lost = matches!(
            *session.borrow(),
            SessionState::Expired | SessionState::Closed
        );
        if lost {
            drop(registration.take());
            let _ = state.send(RegistrationState::Lost);
            warn!(%bookie, "metadata session lost; registering again");
            // Reconnect and register, retrying until it works or the bookie stops.
            let mut backoff = Duration::from_millis(100);
            loop {
                let attempt = async {
                    let fresh = connector().await?;
                    let mode = mode_of(&read_only);
                    let r = fresh.register_bookie(&bookie, mode, &info).await?;
                    Ok::<_, MetadataError>((fresh, r, mode))
                };
                let result = tokio::select! {
                    r = attempt => r,
                    _ = stopped(&mut stop) => {
                        let _ = state.send(RegistrationState::Stopped);
                        return;
                    }
                };
                match result {
                    Ok((fresh, r, mode)) => {
                        store = fresh;
                        session = store.session_state();
                        registration = Some(r);
                        let _ = state.send(RegistrationState::Registered(mode));
                        info!(%bookie, ?mode, "registered again");
                        break;
                    }
                    Err(e) => {
                        warn!(%bookie, "registering again failed: {e}");
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => {}
                            _ = stopped(&mut stop) => {
                                let _ = state.send(RegistrationState::Stopped);
                                return;
                            }
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                    }
                }
            }
            continue;
        }
        tokio::select! {
            _ = stopped(&mut stop) => break,
            changed = session.changed() => {
                if changed.is_err() {
                    // The store dropped its sender: treat as a lost session.
                    session = watch::channel(SessionState::Closed).1;
                }
            }
            _ = tokio::time::sleep(check_interval) => {
                let want = mode_of(&read_only);
                if let Some(r) = registration.as_mut()
                    && r.mode() != want
                {
                    match r.set_mode(want).await {
                        Ok(()) => {
                            info!(%bookie, mode = ?want, "registration mode changed");
                            let _ = state.send(RegistrationState::Registered(want));
                        }
                        Err(e) => warn!(%bookie, "changing registration mode failed: {e}"),
                    }
                }
            }
        }
    }
    if let Some(r) = registration
        && let Err(e) = r.unregister().await
    {
        warn!(%bookie, "unregistering failed: {e}");
    }
    if let Err(e) = store.close().await {
        warn!(%bookie, "closing the metadata session failed: {e}");
    }
    let _ = state.send(RegistrationState::Stopped);
    info!(%bookie, "unregistered");
}

/// Resolves once the stop flag is set (the watch guard is not held across an await).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
