//! One etcd session: the client, the session lease (BookKeeper's bookie lease: TTL = the
//! session timeout, kept alive by a background task) that every ephemeral key of this store
//! (registrations, under-replication locks, Auditor votes) is attached to, every request
//! bounded by a timeout, and the transaction helpers that give compare-and-set on mod
//! revisions.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, KeyValue, PutOptions, Txn, TxnOp,
    TxnOpResponse,
};
use folio_metadata::{MetadataError, Result, SessionState, Version};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::keys::Keys;
use crate::uri::EtcdUri;

/// Options of an etcd connection.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// TTL of the session lease (BookKeeper: `zkTimeout`, default 10 s). Ephemeral keys of a
    /// dead process vanish this long after it died. Whole seconds, at least 2.
    pub session_ttl: Duration,
    /// Upper bound on connecting and on every request: an unreachable server gives
    /// `Unreachable` naming its address after at most this long, never a hang.
    pub request_timeout: Duration,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            session_ttl: Duration::from_secs(10),
            request_timeout: Duration::from_secs(10),
        }
    }
}

/// Why a compare-and-set failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CasFailure {
    /// The key does not exist.
    Missing,
    /// The key exists with another mod revision.
    Changed,
}

pub(crate) struct Etcd {
    client: Client,
    pub uri: String,
    pub keys: Keys,
    pub address: String,
    pub options: EtcdOptions,
    /// The session lease every ephemeral key is attached to.
    pub lease: i64,
    pub shutdown: watch::Sender<bool>,
    pub state: watch::Sender<SessionState>,
}

impl Etcd {
    pub async fn connect(uri: &str, options: EtcdOptions) -> Result<Arc<Etcd>> {
        let parsed = EtcdUri::parse(uri)?;
        let address = parsed.address();
        let unreachable = |reason: String| MetadataError::Unreachable {
            address: address.clone(),
            reason,
        };
        let t = options.request_timeout;
        let connect_opts = ConnectOptions::new()
            .with_connect_timeout(t)
            .with_timeout(t)
            .with_keep_alive(Duration::from_secs(2), t);
        let mut client =
            tokio::time::timeout(t, Client::connect(&parsed.endpoints, Some(connect_opts)))
                .await
                .map_err(|_| unreachable(format!("no connection to etcd within {t:?}")))?
                .map_err(|e| unreachable(format!("cannot connect to etcd: {e}")))?;
        let ttl = options.session_ttl.as_secs().max(2) as i64;
        // The connection is lazy: the lease grant is the first real request. A server that
        // is still starting refuses it; keep trying until the request timeout.
        let deadline = tokio::time::Instant::now() + t;
        let lease = loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let reason = match tokio::time::timeout(left, client.lease_grant(ttl, None)).await {
                Ok(Ok(resp)) => break resp.id(),
                Ok(Err(e)) => format!("cannot reach etcd: {e}"),
                Err(_) => format!("etcd did not answer within {t:?}"),
            };
            if tokio::time::Instant::now() + Duration::from_millis(200) >= deadline {
                return Err(unreachable(format!("{reason} (kept trying for {t:?})")));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let (state, _) = watch::channel(SessionState::Connected);
        let (shutdown, _) = watch::channel(false);
        let this = Arc::new(Etcd {
            client,
            uri: uri.to_string(),
            keys: Keys::new(&parsed.scope),
            address,
            options,
            lease,
            shutdown,
            state,
        });
        tokio::spawn(keep_alive(Arc::downgrade(&this), ttl));
        Ok(this)
    }

    /// A client handle; `SessionExpired` once the store is closed or its lease expired.
    pub fn client(&self) -> Result<Client> {
        match *self.state.borrow() {
            SessionState::Closed | SessionState::Expired => Err(MetadataError::SessionExpired),
            _ => Ok(self.client.clone()),
        }
    }

    /// Runs one request with the request timeout, mapping transport failures to
    /// `Unreachable` naming the servers.
    pub async fn run<T>(
        &self,
        what: &str,
        fut: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.options.request_timeout, fut).await {
            Err(_) => Err(MetadataError::Unreachable {
                address: self.address.clone(),
                reason: format!(
                    "etcd did not answer within {:?} (while accessing {what})",
                    self.options.request_timeout
                ),
            }),
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.err(e, what)),
        }
    }

    pub fn err(&self, e: etcd_client::Error, what: &str) -> MetadataError {
        use etcd_client::Error as E;
        match &e {
            E::TransportError(_) | E::IoError(_) => MetadataError::Unreachable {
                address: self.address.clone(),
                reason: format!("{e} (while accessing {what})"),
            },
            E::GRpcStatus(s)
                if matches!(
                    s.code(),
                    tonic_code::UNAVAILABLE | tonic_code::DEADLINE_EXCEEDED | tonic_code::CANCELLED
                ) =>
            {
                MetadataError::Unreachable {
                    address: self.address.clone(),
                    reason: format!("{} (while accessing {what})", s.message()),
                }
            }
            // Our lease is gone (expired while keep-alives could not get through): every
            // ephemeral key of this session went with it.
            E::GRpcStatus(s) if s.message().contains("lease not found") => {
                MetadataError::SessionExpired
            }
            _ => MetadataError::Internal(format!("etcd error on {what}: {e}")),
        }
    }

    pub async fn get(&self, key: &str, what: &str) -> Result<Option<KeyValue>> {
        let mut c = self.client()?;
        let mut resp = self.run(what, c.get(key, None)).await?;
        Ok(resp.take_kvs().into_iter().next())
    }

    /// Children of `dir` (keys `dir/...`), in key order.
    pub async fn children(
        &self,
        dir: &str,
        what: &str,
        options: GetOptions,
    ) -> Result<Vec<KeyValue>> {
        let mut c = self.client()?;
        let opts = options.with_range(Keys::end_of(dir));
        let mut resp = self.run(what, c.get(format!("{dir}/"), Some(opts))).await?;
        Ok(resp.take_kvs())
    }

    /// Creates `key` if absent; `Some(revision)` on success, `None` if it existed.
    pub async fn create(
        &self,
        key: &str,
        value: &[u8],
        with_lease: bool,
        what: &str,
    ) -> Result<Option<i64>> {
        let mut c = self.client()?;
        let put_opts = with_lease.then(|| PutOptions::new().with_lease(self.lease));
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, value, put_opts)]);
        let resp = self.run(what, c.txn(txn)).await?;
        if resp.succeeded() {
            Ok(Some(revision(resp.header())))
        } else {
            Ok(None)
        }
    }

    /// Puts `key` if its mod revision is still `expected`; the new revision on success.
    pub async fn cas_put(
        &self,
        key: &str,
        value: &[u8],
        expected: Version,
        what: &str,
    ) -> Result<std::result::Result<i64, CasFailure>> {
        let mut c = self.client()?;
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, expected.raw())])
            .and_then([TxnOp::put(key, value, None)])
            .or_else([TxnOp::get(key, Some(GetOptions::new().with_keys_only()))]);
        let resp = self.run(what, c.txn(txn)).await?;
        if resp.succeeded() {
            return Ok(Ok(revision(resp.header())));
        }
        Ok(Err(failure(&resp.op_responses())))
    }

    /// Deletes `key`, if `expected` is given only at that mod revision.
    pub async fn cas_delete(
        &self,
        key: &str,
        expected: Option<Version>,
        what: &str,
    ) -> Result<std::result::Result<(), CasFailure>> {
        let mut c = self.client()?;
        let cmp = match expected {
            Some(v) => Compare::mod_revision(key, CompareOp::Equal, v.raw()),
            None => Compare::create_revision(key, CompareOp::Greater, 0),
        };
        let txn = Txn::new()
            .when([cmp])
            .and_then([TxnOp::delete(key, None)])
            .or_else([TxnOp::get(key, Some(GetOptions::new().with_keys_only()))]);
        let resp = self.run(what, c.txn(txn)).await?;
        if resp.succeeded() {
            return Ok(Ok(()));
        }
        Ok(Err(failure(&resp.op_responses())))
    }

    /// Deletes `key` (absent is fine).
    pub async fn delete(&self, key: &str, what: &str) -> Result<()> {
        let mut c = self.client()?;
        self.run(what, c.delete(key, None)).await?;
        Ok(())
    }

    /// Ends the session: revokes the lease (every ephemeral key goes with it, atomically).
    pub async fn close(&self) -> Result<()> {
        if self.shutdown.send_replace(true) {
            return Ok(());
        }
        let was = self.state.send_replace(SessionState::Closed);
        if was == SessionState::Expired {
            return Ok(());
        }
        let mut c = self.client.clone();
        self.run("the session lease", c.lease_revoke(self.lease))
            .await
            .map(|_| ())
            .or_else(|e| match e {
                // Already gone: nothing to revoke.
                MetadataError::SessionExpired => Ok(()),
                e => Err(e),
            })
    }

    /// When the lease will have expired if no keep-alive gets through.
    pub fn ttl(&self) -> Duration {
        Duration::from_secs(self.options.session_ttl.as_secs().max(2))
    }
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("uri", &self.uri)
            .field("lease", &self.lease)
            .field("state", &*self.state.borrow())
            .finish_non_exhaustive()
    }
}

mod tonic_code {
    pub const UNAVAILABLE: tonic::Code = tonic::Code::Unavailable;
    pub const DEADLINE_EXCEEDED: tonic::Code = tonic::Code::DeadlineExceeded;
    // What a request in flight gets when the connection drops under it.
    pub const CANCELLED: tonic::Code = tonic::Code::Cancelled;
}

fn revision(header: Option<&etcd_client::ResponseHeader>) -> i64 {
    header.map(|h| h.revision()).unwrap_or(0)
}

/// From the `or_else` get of a failed CAS: did the key exist?
fn failure(responses: &[TxnOpResponse]) -> CasFailure {
    let exists = responses.iter().any(|r| match r {
        TxnOpResponse::Get(g) => !g.kvs().is_empty(),
        _ => false,
    });
    if exists {
        CasFailure::Changed
    } else {
        CasFailure::Missing
    }
}

/// Keeps the session lease alive every TTL/3. Unanswered keep-alives make the session
/// `Disconnected`; once a whole TTL has passed without one (or etcd reports the lease gone)
/// it is `Expired`: etcd has deleted every key attached to it.
async fn keep_alive(weak: std::sync::Weak<Etcd>, ttl: i64) {
    let ttl_d = Duration::from_secs(ttl as u64);
    let period = ttl_d / 3;
    let mut last_ok = Instant::now();
    let mut stream: Option<(etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream)> = None;
    loop {
        let Some(this) = weak.upgrade() else { return };
        if *this.shutdown.borrow() {
            return;
        }
        let mut shutdown = this.shutdown.subscribe();
        let mut client = this.client.clone();
        let lease = this.lease;
        let outcome = tokio::time::timeout(period.max(Duration::from_millis(500)), async {
            if stream.is_none() {
                stream = Some(client.lease_keep_alive(lease).await.ok()?);
            }
            let (keeper, s) = stream.as_mut()?;
            keeper.keep_alive().await.ok()?;
            s.message().await.ok()?.map(|r| r.ttl())
        })
        .await;
        match outcome {
            Ok(Some(ttl_left)) if ttl_left > 0 => {
                last_ok = Instant::now();
                this.state.send_if_modified(|s| {
                    if *s == SessionState::Disconnected {
                        *s = SessionState::Connected;
                        true
                    } else {
                        false
                    }
                });
            }
            Ok(Some(_)) => {
                // etcd says the lease is gone.
                this.state.send_if_modified(|s| {
                    if *s == SessionState::Closed {
                        false
                    } else {
                        *s = SessionState::Expired;
                        true
                    }
                });
                return;
            }
            _ => {
                stream = None;
                let expired = last_ok.elapsed() >= ttl_d;
                this.state.send_if_modified(|s| {
                    let next = if expired {
                        SessionState::Expired
                    } else {
                        SessionState::Disconnected
                    };
                    if *s == SessionState::Closed || *s == next {
                        false
                    } else {
                        *s = next;
                        true
                    }
                });
                if expired {
                    return;
                }
            }
        }
        drop(this);
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}
