//! One ZooKeeper session and the primitives every part of the driver builds on: path
//! helpers under the ledgers root, every request bounded by a timeout, ZooKeeper errors
//! mapped onto [`MetadataError`] naming the record, "create with parents", and the set of
//! ephemeral znodes this session owns (so `close()` can remove them before ending).

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use folio_metadata::{MetadataError, RecordWrite, Result, SessionState, Version};
use tokio::sync::watch;
use zookeeper_client as zk;

use crate::uri::ZkUri;

/// Options of a ZooKeeper connection.
#[derive(Debug, Clone)]
pub struct ZkOptions {
    /// Negotiated with the server (BookKeeper's `zkTimeout`, default 10 s). Ephemeral
    /// registrations of a dead process vanish this long after it died.
    pub session_timeout: Duration,
    /// Upper bound on connecting and on every single request: an unreachable server gives
    /// `Unreachable` naming its address after at most this long, never a hang.
    pub request_timeout: Duration,
}

impl Default for ZkOptions {
    fn default() -> Self {
        ZkOptions {
            session_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(10),
        }
    }
}

pub(crate) fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

pub(crate) fn ephemeral() -> zk::CreateOptions<'static> {
    zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())
}

pub(crate) fn ephemeral_sequential() -> zk::CreateOptions<'static> {
    zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all())
}

/// The session shared by the store and every registration, lock and candidacy it hands out.
#[derive(Debug)]
pub(crate) struct Zk {
    client: Mutex<Option<zk::Client>>,
    pub uri: String,
    pub root: String,
    pub address: String,
    pub options: ZkOptions,
    pub session_id: i64,
    /// Ephemeral znodes (absolute paths) this session created and still owns.
    owned: Mutex<BTreeSet<String>>,
    /// Flips to `true` on close: background watch tasks stop and drop their clients.
    pub shutdown: watch::Sender<bool>,
    pub state: watch::Sender<SessionState>,
}

impl Zk {
    pub async fn connect(uri: &str, options: ZkOptions) -> Result<Arc<Zk>> {
        let parsed = ZkUri::parse(uri)?;
        let unreachable = |reason: String| MetadataError::Unreachable {
            address: parsed.connect_string.clone(),
            reason,
        };
        // Fail fast per attempt (all hosts refused), but keep trying until the request
        // timeout: a server that is still starting refuses or drops the first sessions.
        let deadline = tokio::time::Instant::now() + options.request_timeout;
        let client = loop {
            let connector = zk::Client::connector()
                .with_session_timeout(options.session_timeout)
                .with_fail_eagerly();
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let reason =
                match tokio::time::timeout(left, connector.connect(&parsed.connect_string)).await {
                    Ok(Ok(client)) => break client,
                    Ok(Err(e)) => format!("cannot connect to ZooKeeper: {e}"),
                    Err(_) => format!(
                        "no ZooKeeper session established within {:?}",
                        options.request_timeout
                    ),
                };
            if tokio::time::Instant::now() + std::time::Duration::from_millis(200) >= deadline {
                return Err(unreachable(format!(
                    "{reason} (kept trying for {:?})",
                    options.request_timeout
                )));
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        };
        let (state, _) = watch::channel(SessionState::Connected);
        let (shutdown, _) = watch::channel(false);
        let this = Arc::new(Zk {
            session_id: client.session_id().0,
            client: Mutex::new(Some(client.clone())),
            uri: uri.to_string(),
            root: parsed.root,
            address: parsed.connect_string,
            options,
            owned: Mutex::new(BTreeSet::new()),
            shutdown,
            state,
        });
        this.spawn_state_forwarder(client.state_watcher());
        Ok(this)
    }

    /// Mirrors the ZooKeeper session state into our `SessionState` channel.
    fn spawn_state_forwarder(self: &Arc<Self>, mut watcher: zk::StateWatcher) {
        let weak = Arc::downgrade(self);
        let mut shutdown = self.shutdown.subscribe();
        tokio::spawn(async move {
            loop {
                let state = tokio::select! {
                    s = watcher.changed() => s,
                    _ = shutdown.wait_for(|s| *s) => return,
                };
                let Some(this) = weak.upgrade() else { return };
                let ours = match state {
                    zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                        SessionState::Connected
                    }
                    zk::SessionState::Disconnected => SessionState::Disconnected,
                    zk::SessionState::Expired | zk::SessionState::AuthFailed => {
                        SessionState::Expired
                    }
                    zk::SessionState::Closed => SessionState::Closed,
                };
                // A closed store stays Closed whatever the client reports afterwards.
                if *this.state.borrow() != SessionState::Closed {
                    this.state.send_replace(ours);
                }
                if matches!(ours, SessionState::Expired | SessionState::Closed) {
                    this.client.lock().unwrap_or_else(|p| p.into_inner()).take();
                    return;
                }
            }
        });
    }

    /// A handle on the live client, or `SessionExpired` once closed or expired.
    pub fn client(&self) -> Result<zk::Client> {
        self.client
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(MetadataError::SessionExpired)
    }

    /// Forgets the client: once every background task has dropped its clone the session ends.
    pub fn take_client(&self) -> Option<zk::Client> {
        self.client.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    pub fn abs(&self, rel: &str) -> String {
        crate::paths::join(&self.root, rel)
    }

    pub fn own(&self, path: &str) {
        self.owned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(path.to_string());
    }

    pub fn disown(&self, path: &str) {
        self.owned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(path);
    }

    pub fn take_owned(&self) -> Vec<String> {
        std::mem::take(&mut *self.owned.lock().unwrap_or_else(|p| p.into_inner()))
            .into_iter()
            .collect()
    }

    /// Runs one request with the request timeout; ZooKeeper errors stay ZooKeeper errors
    /// (callers decide what NoNode or NodeExists mean), a timeout becomes `Unreachable`.
    pub async fn run<T, E>(
        &self,
        fut: impl Future<Output = std::result::Result<T, E>>,
    ) -> Result<std::result::Result<T, E>> {
        match tokio::time::timeout(self.options.request_timeout, fut).await {
            Ok(r) => Ok(r),
            Err(_) => Err(MetadataError::Unreachable {
                address: self.address.clone(),
                reason: format!(
                    "ZooKeeper did not answer within {:?}",
                    self.options.request_timeout
                ),
            }),
        }
    }

    /// Maps a ZooKeeper error about `what` onto the contract's errors.
    pub fn err(&self, e: zk::Error, what: &str, expected: Option<Version>) -> MetadataError {
        match e {
            zk::Error::NoNode => MetadataError::not_found(what),
            zk::Error::NodeExists => MetadataError::already_exists(what),
            zk::Error::BadVersion => match expected {
                Some(v) => MetadataError::bad_version(what, v),
                None => MetadataError::Internal(format!("{what}: unexpected version conflict")),
            },
            zk::Error::SessionExpired | zk::Error::ClientClosed => MetadataError::SessionExpired,
            zk::Error::ConnectionLoss | zk::Error::Timeout | zk::Error::NoHosts => {
                MetadataError::Unreachable {
                    address: self.address.clone(),
                    reason: format!("{e} (while accessing {what})"),
                }
            }
            other => MetadataError::Internal(format!("ZooKeeper error on {what}: {other}")),
        }
    }

    /// A conditional write's outcome: the failures the contract names (no node, a node
    /// already there, another version) as a [`RecordWrite`], any other error as [`Zk::err`].
    pub fn written<T>(
        &self,
        r: std::result::Result<T, zk::Error>,
        what: &str,
    ) -> Result<RecordWrite<T>> {
        match r {
            Ok(v) => Ok(RecordWrite::Done(v)),
            Err(zk::Error::NoNode) => Ok(RecordWrite::Missing),
            Err(zk::Error::NodeExists) => Ok(RecordWrite::Exists),
            Err(zk::Error::BadVersion) => Ok(RecordWrite::Changed),
            Err(e) => Err(self.err(e, what, None)),
        }
    }

    /// Data and stat of a znode, `None` if absent.
    pub async fn get(&self, rel: &str, what: &str) -> Result<Option<(Vec<u8>, zk::Stat)>> {
        let client = self.client()?;
        let path = self.abs(rel);
        match self.run(client.get_data(&path)).await? {
            Ok(v) => Ok(Some(v)),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(self.err(e, what, None)),
        }
    }

    pub async fn exists(&self, rel: &str, what: &str) -> Result<bool> {
        let client = self.client()?;
        let path = self.abs(rel);
        match self.run(client.check_stat(&path)).await? {
            Ok(s) => Ok(s.is_some()),
            Err(e) => Err(self.err(e, what, None)),
        }
    }

    /// Children of a znode (sorted), empty if it does not exist.
    pub async fn children(&self, rel: &str, what: &str) -> Result<Vec<String>> {
        let client = self.client()?;
        let path = self.abs(rel);
        match self.run(client.list_children(&path)).await? {
            Ok(mut c) => {
                c.sort();
                Ok(c)
            }
            Err(zk::Error::NoNode) => Ok(Vec::new()),
            Err(e) => Err(self.err(e, what, None)),
        }
    }

    /// Creates a znode, creating missing ancestors (persistent, empty) first, as BookKeeper's
    /// `ZkUtils.asyncCreateFullPathOptimistic`. Returns the raw ZooKeeper outcome.
    pub async fn create_with_parents(
        &self,
        rel: &str,
        data: &[u8],
        options: &zk::CreateOptions<'_>,
    ) -> Result<std::result::Result<(zk::Stat, zk::CreateSequence), zk::Error>> {
        let client = self.client()?;
        let path = self.abs(rel);
        for _ in 0..10 {
            match self.run(client.create(&path, data, options)).await? {
                Err(zk::Error::NoNode) => {
                    let parent = &path[..path.rfind('/').unwrap_or(0)];
                    if parent.is_empty() {
                        return Ok(Err(zk::Error::NoNode));
                    }
                    match self.run(client.mkdir(parent, &persistent())).await? {
                        Ok(()) | Err(zk::Error::NodeExists) => continue,
                        Err(e) => return Ok(Err(e)),
                    }
                }
                other => return Ok(other),
            }
        }
        // Parents kept vanishing under us (a concurrent delete of empty parents).
        Ok(Err(zk::Error::NoNode))
    }

    /// Deletes the now-empty parents of `rel` up to (not including) `stop` levels from the
    /// root, ignoring "not empty" and "no node": BookKeeper's optimistic parent cleanup.
    pub async fn delete_empty_parents(&self, rel: &str, keep_levels: usize) {
        let Ok(client) = self.client() else { return };
        let mut parts: Vec<&str> = rel.split('/').collect();
        parts.pop();
        while parts.len() > keep_levels {
            let path = self.abs(&parts.join("/"));
            match self.run(client.delete(&path, None)).await {
                Ok(Ok(())) | Ok(Err(zk::Error::NoNode)) => {}
                _ => return,
            }
            parts.pop();
        }
    }

    /// Deletes a subtree, children first. Absent nodes are fine.
    pub async fn delete_recursive(&self, abs: &str, what: &str) -> Result<()> {
        let client = self.client()?;
        // Iterative post-order walk.
        let mut stack = vec![(abs.to_string(), false)];
        while let Some((path, expanded)) = stack.pop() {
            if expanded {
                match self.run(client.delete(&path, None)).await? {
                    Ok(()) | Err(zk::Error::NoNode) => {}
                    Err(e) => return Err(self.err(e, what, None)),
                }
                continue;
            }
            let children = match self.run(client.list_children(&path)).await? {
                Ok(c) => c,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(self.err(e, what, None)),
            };
            stack.push((path.clone(), true));
            for c in children {
                stack.push((format!("{path}/{c}"), false));
            }
        }
        Ok(())
    }
}
