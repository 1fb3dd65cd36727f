//! One whole bookie: configuration in, a serving bookie out. Binds the bookie port (first, so a
//! bookie id with port 0 gets its real port), checks the cookie against the metadata store, opens
//! the storage engine (replaying the journal), serves, registers, optionally serves the admin
//! HTTP endpoint (an [`AdminServer`] the caller supplies: `folio-http`'s), and starts the
//! garbage collector. [`BookieNode::shutdown`] undoes it in the safe order: unregister (clients
//! stop choosing this bookie), drain the port, stop the garbage collector, then checkpoint and
//! stop the storage.
//!
//! `folio bookie` runs one; `folio standalone` and tests can run several in one process.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use folio_env::Env;
use folio_metadata::{BookieServiceInfo, Endpoint, MetadataError, MetadataStore};
use folio_types::BookieId;
use tokio::net::TcpListener;
use tracing::info;

use crate::admin::{AdminEndpoint, AdminMetadata, AdminParts, AdminServer, HealthProbe, LocalDisk};
use crate::config::{BookieConfig, ConfigError};
use crate::engine::{EngineStorage, OpenError};
use crate::gc::{GarbageCollector, GcHandle, GcMetadata, StoreMetadata};
use crate::processor::{Processor, ProcessorConfig};
use crate::registration::{self, Connector, CookieCheckError, Registrar, RegistrationState};
use crate::server::{BookieServer, ServerConfig, ServerHandle};

/// Why a bookie could not start or stop cleanly. Each names its cause.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("invalid bookie id {0:?}")]
    BookieId(String),
    #[error("metadata: {0}")]
    Metadata(#[from] MetadataError),
    #[error("cookie check failed: {0}")]
    Cookie(#[from] CookieCheckError),
    #[error("storage: {0}")]
    Storage(#[from] OpenError),
    #[error(transparent)]
    Registration(#[from] registration::RegisterError),
    #[error("storage shutdown: {0}")]
    StorageShutdown(#[from] folio_storage::StorageError),
    #[error("storage task failed: {0}")]
    Task(String),
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("http_port is set, but this bookie was started without an admin endpoint to serve it")]
    NoAdminServer,
}

/// The metadata session the bookie registers through, and how to open another one.
pub struct MetadataAccess {
    pub store: Arc<dyn MetadataStore>,
    pub connector: Connector,
    /// Create the cluster if it was never initialised (embedded stores: sqlite://, mem://).
    pub init_cluster_if_missing: bool,
}

/// A running bookie.
pub struct BookieNode {
    bookie_id: BookieId,
    storage: Arc<EngineStorage>,
    server: ServerHandle,
    registrar: Option<Registrar>,
    http: Option<Box<dyn AdminEndpoint>>,
    disk_checker: tokio::task::JoinHandle<()>,
    gc: GarbageCollector,
}

/// Checks disk usage every `interval`, turning the bookie read-only and back.
fn spawn_disk_checker(
    storage: Arc<EngineStorage>,
    threshold: f64,
    lwm: f64,
    interval: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut was_full = false;
        loop {
            let s = storage.clone();
            let checked =
                tokio::task::spawn_blocking(move || s.check_disk_usage(threshold, lwm)).await;
            match checked {
                Ok(Ok((usage, full))) => {
                    if full != was_full {
                        if full {
                            tracing::warn!(
                                usage,
                                threshold,
                                "disk usage over threshold: bookie is read-only"
                            );
                        } else {
                            info!(
                                usage,
                                lwm, "disk usage back under threshold: bookie is writable"
                            );
                        }
                    }
                    was_full = full;
                }
                Ok(Err(e)) => tracing::warn!("disk usage check failed: {e}"),
                Err(e) => tracing::warn!("disk usage check task failed: {e}"),
            }
            tokio::time::sleep(interval).await;
        }
    })
}

/// What `/heartbeat` and `is_ready` report as unhealthy (folio-http): a poisoned engine
/// (a failed fsync or checkpoint; it never takes writes again, invariant 9), and, with a
/// metadata store, a bookie that is not registered (not yet, or its session was lost).
fn health_probe(
    engine: Arc<folio_storage::Storage>,
    registration: Option<Arc<std::sync::OnceLock<tokio::sync::watch::Receiver<RegistrationState>>>>,
) -> HealthProbe {
    Arc::new(move || {
        // Not a full disk's refusal: that bookie is read-only, serving, and turns writable
        // again once space is freed.
        if let Some(reason) = engine.fatal_reason() {
            return Some(format!(
                "storage poisoned, no writes until the bookie is restarted: {reason}"
            ));
        }
        let state = registration.as_ref()?.get().map(|r| *r.borrow());
        match state {
            Some(RegistrationState::Registered(_)) => None,
            None => Some("bookie is not registered yet".into()),
            Some(RegistrationState::Lost) => Some(
                "bookie is not registered: its metadata session was lost; registering again".into(),
            ),
            Some(RegistrationState::Stopped) => {
                Some("bookie is not registered: it is shutting down".into())
            }
        }
    })
}

/// `host:port`, with an IPv6 address in brackets.
fn http_bind_address(host: &str, port: u16) -> String {
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
        _ => format!("{host}:{port}"),
    }
}

impl BookieNode {
    /// Starts a bookie without an admin endpoint (see the module comment); `http_port` must
    /// be unset. Without metadata, it serves unregistered (tests, benchmarks).
    pub async fn start(
        env: &Env,
        config: BookieConfig,
        metadata: Option<MetadataAccess>,
    ) -> Result<BookieNode, NodeError> {
        Self::start_with_admin(env, config, metadata, None).await
    }

    /// Like [`BookieNode::start`]; with `http_port` set, `admin` serves the admin endpoint on
    /// it.
    pub async fn start_with_admin(
        env: &Env,
        config: BookieConfig,
        metadata: Option<MetadataAccess>,
        admin: Option<&dyn AdminServer>,
    ) -> Result<BookieNode, NodeError> {
        config.validate()?;
        let admin = match (config.http_port, admin) {
            (Some(_), None) => return Err(NodeError::NoAdminServer),
            (Some(_), Some(a)) => Some(a),
            (None, _) => None,
        };
        // The TLS files are read before anything starts: a bad key or chain is a start-up error.
        let tls = match crate::tls::TlsSettings::from_config(&config)? {
            Some(settings) => Some(Arc::new(crate::tls::ServerTls::load(settings)?)),
            None => None,
        };
        let listen = format!("{}:{}", config.listen_address, config.port);
        let listener = TcpListener::bind(&listen)
            .await
            .map_err(|source| NodeError::Bind {
                addr: listen.clone(),
                source,
            })?;
        let port = listener
            .local_addr()
            .map(|a| a.port())
            .unwrap_or(config.port);
        let http_tls = match (
            &config.http_port,
            crate::tls::ServerTls::for_admin_http(&config)?,
        ) {
            (Some(_), Some(tls)) => Some(Arc::new(tls)),
            _ => None,
        };
        let http_listener = match config.http_port {
            Some(http_port) => {
                let addr = http_bind_address(&config.http_listen_address, http_port);
                Some(
                    TcpListener::bind(&addr)
                        .await
                        .map_err(|source| NodeError::Bind { addr, source })?,
                )
            }
            None => None,
        };
        let host = crate::bookie_address::advertised_host(&config);
        let id_text = crate::bookie_address::bookie_id_text(&config, port);
        let bookie_id = BookieId::new(id_text.clone()).map_err(|_| NodeError::BookieId(id_text))?;

        if let Some(m) = &metadata {
            let cluster = match m.store.read_cluster().await {
                Ok(c) => c,
                Err(MetadataError::NotFound { .. }) if m.init_cluster_if_missing => {
                    info!(uri = m.store.uri(), "initialising a new cluster");
                    match m.store.init_cluster().await {
                        Ok(c) => c,
                        // Another bookie initialised it meanwhile.
                        Err(MetadataError::AlreadyExists { .. }) => m.store.read_cluster().await?,
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(e) => return Err(e.into()),
            };
            let journal_dirs = config.effective_journal_dirs();
            let ledger_dirs = config.effective_ledger_dirs();
            let index_dirs: Vec<_> = config.effective_index_dir().into_iter().collect();
            let expected = registration::expected_cookie(
                &bookie_id,
                &cluster.instance_id,
                &journal_dirs,
                &ledger_dirs,
                &index_dirs,
            );
            registration::check_cookies(env, &*m.store, &expected).await?;
        }

        // Opening replays the journal: blocking work, off the runtime's threads.
        let storage = {
            let env = env.clone();
            let config = config.clone();
            tokio::task::spawn_blocking(move || EngineStorage::open(&env, &config))
                .await
                .map_err(|e| NodeError::Task(e.to_string()))??
        };
        let storage = Arc::new(storage);
        let disk_checker = spawn_disk_checker(
            storage.clone(),
            config.disk_usage_threshold,
            config.disk_usage_lwm_threshold,
            Duration::from_millis(config.disk_check_interval_ms.max(1)),
        );
        // Without a metadata store, rounds only remove dead entry logs: no ledger is deleted.
        let gc_metadata = metadata.as_ref().map(|m| {
            Arc::new(StoreMetadata::new(
                m.store.clone(),
                Some(m.connector.clone()),
            )) as Arc<dyn GcMetadata>
        });
        let gc = GcHandle::new(storage.clone(), gc_metadata)
            .with_compaction(crate::gc::CompactionPolicy::from_config(&config));
        let processor = Processor::new(
            storage.clone(),
            ProcessorConfig {
                max_pending_adds: config.max_pending_adds,
                max_pending_reads: config.max_pending_reads,
                max_batch_read_size: config.max_frame_size.saturating_sub(1024),
                max_long_poll_timeout: Duration::from_millis(config.max_long_poll_timeout_ms),
                max_long_polls_per_connection: config.max_long_polls_per_connection,
            },
        );
        let server = BookieServer::from_listener(
            listener,
            processor.clone(),
            ServerConfig {
                max_frame_size: config.max_frame_size,
                max_connections: config.max_connections,
                max_pending_per_connection: config.max_pending_requests_per_connection,
                read_threads: config.read_threads,
                tls: tls.clone(),
                ..ServerConfig::default()
            },
        )
        .start();

        // Filled once the registrar runs (after the admin endpoint starts): until then the
        // bookie is not registered.
        let registration: Arc<
            std::sync::OnceLock<tokio::sync::watch::Receiver<RegistrationState>>,
        > = Arc::default();
        let http = match http_listener.zip(admin) {
            Some((listener, admin)) => {
                let engine = storage.engine().clone();
                let p = processor.clone();
                let status_storage = storage.clone();
                let status_registration = registration.clone();
                let journal_dirs = config.effective_journal_dirs().len();
                let registered = metadata.is_some();
                let refresh: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
                    // BookKeeper's names (bk_metrics), for its users' dashboards.
                    let status = match status_registration.get().map(|r| *r.borrow()) {
                        _ if !registered => {
                            i8::from(!crate::BookieStorage::is_read_only(status_storage.as_ref()))
                        }
                        Some(RegistrationState::Registered(
                            folio_metadata::BookieMode::Writable,
                        )) => 1,
                        Some(RegistrationState::Registered(
                            folio_metadata::BookieMode::ReadOnly,
                        )) => 0,
                        _ => -1,
                    };
                    crate::bk_metrics::server_status(status);
                    crate::bk_metrics::storage_gauges(engine.write_cache_used(), journal_dirs);
                    crate::bk_metrics::entry_logger(status_storage.entry_log_stats());
                    crate::bk_metrics::journal_and_index(&engine);
                    crate::bk_metrics::read_cache(engine.read_cache_stats());
                    metrics::gauge!("folio_bookie_pending_adds").set(p.pending_adds() as f64);
                    metrics::gauge!("folio_bookie_pending_reads").set(p.pending_reads() as f64);
                    metrics::gauge!("folio_bookie_waiting_long_polls")
                        .set(p.waiting_long_polls() as f64);
                    let replay = engine.replay_stats();
                    metrics::gauge!("folio_journal_replayed_files").set(replay.files as f64);
                    metrics::gauge!("folio_journal_replayed_records").set(replay.records as f64);
                    for (i, mark) in engine.journal_marks().iter().enumerate() {
                        let dir = i.to_string();
                        metrics::gauge!("folio_journal_mark_file_id", "dir" => dir.clone())
                            .set(mark.file_id as f64);
                        metrics::gauge!("folio_journal_mark_offset", "dir" => dir)
                            .set(mark.offset as f64);
                    }
                });
                let addr = listener
                    .local_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_default();
                let marks_engine = storage.engine().clone();
                let parts = AdminParts {
                    listener,
                    tls: http_tls.clone(),
                    bookie_id: bookie_id.clone(),
                    config: config.clone(),
                    storage: storage.clone(),
                    refresh,
                    disk: LocalDisk {
                        journal_dirs: config.effective_journal_dirs(),
                        ledger_dirs: config.effective_ledger_dirs(),
                        index_dir: config.effective_index_dir(),
                        marks: Arc::new(move || marks_engine.journal_marks()),
                    },
                    metadata: metadata.as_ref().map(|m| AdminMetadata {
                        store: m.store.clone(),
                        connector: m.connector.clone(),
                    }),
                    gc: gc.clone(),
                    health: health_probe(
                        storage.engine().clone(),
                        metadata.is_some().then(|| registration.clone()),
                    ),
                };
                match admin.serve(parts) {
                    Ok(h) => Some(h),
                    Err(source) => {
                        disk_checker.abort();
                        server.shutdown().await;
                        let s = storage.clone();
                        // No checkpoint: this start failed, the directories may not even be ours.
                        let _ = tokio::task::spawn_blocking(move || s.engine().shutdown()).await;
                        return Err(NodeError::Bind { addr, source });
                    }
                }
            }
            None => None,
        };

        let registrar = match metadata {
            Some(m) => {
                let mut endpoints = vec![Endpoint {
                    id: "bookie".into(),
                    host: host.clone(),
                    port,
                    protocol: "bookie-rpc".into(),
                    auth: Vec::new(),
                    // BookKeeper's registration says "tls" when the bookie port offers it.
                    extensions: if tls.is_some() {
                        vec!["tls".into()]
                    } else {
                        Vec::new()
                    },
                }];
                if let Some(h) = &http {
                    endpoints.push(Endpoint {
                        id: "http".into(),
                        host: host.clone(),
                        port: h.local_addr().port(),
                        protocol: if http_tls.is_some() { "https" } else { "http" }.into(),
                        auth: Vec::new(),
                        extensions: Vec::new(),
                    });
                }
                let info = BookieServiceInfo {
                    endpoints,
                    properties: crate::registration::service_properties(&config),
                };
                let probe_storage = storage.clone();
                let started = Registrar::start(
                    m.store,
                    m.connector,
                    bookie_id.clone(),
                    info,
                    Arc::new(move || {
                        use crate::storage::BookieStorage;
                        probe_storage.is_read_only()
                    }),
                    Duration::from_secs(1),
                )
                .await;
                match started {
                    Ok(r) => {
                        let _ = registration.set(r.watch());
                        Some(r)
                    }
                    Err(e) => {
                        // Undo what started: nothing may keep the storage open behind us.
                        disk_checker.abort();
                        server.shutdown().await;
                        if let Some(h) = http {
                            h.shutdown().await;
                        }
                        let s = storage.clone();
                        // No checkpoint: this start failed, the directories may not even be ours.
                        let _ = tokio::task::spawn_blocking(move || s.engine().shutdown()).await;
                        return Err(e.into());
                    }
                }
            }
            None => None,
        };
        let gc = GarbageCollector::start(gc, Duration::from_millis(config.gc_wait_time_ms.max(1)));
        info!(%bookie_id, addr = %server.local_addr(), "bookie started");
        Ok(BookieNode {
            bookie_id,
            storage,
            server,
            registrar,
            http,
            disk_checker,
            gc,
        })
    }

    pub fn bookie_id(&self) -> &BookieId {
        &self.bookie_id
    }

    /// The bookie port's bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// The admin HTTP endpoint's bound address, if it runs.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(|h| h.local_addr())
    }

    pub fn registrar(&self) -> Option<&Registrar> {
        self.registrar.as_ref()
    }

    pub fn storage(&self) -> &Arc<EngineStorage> {
        &self.storage
    }

    /// The garbage collector (trigger a round, see what the last one did).
    pub fn gc(&self) -> &GcHandle {
        self.gc.handle()
    }

    /// Unregisters, drains the bookie port, stops the admin endpoint, then checkpoints and stops
    /// the storage.
    pub async fn shutdown(self) -> Result<(), NodeError> {
        if let Some(r) = self.registrar {
            r.shutdown().await;
        }
        self.server.shutdown().await;
        if let Some(h) = self.http {
            h.shutdown().await;
        }
        self.disk_checker.abort();
        self.gc.shutdown().await;
        let storage = self.storage;
        tokio::task::spawn_blocking(move || storage.shutdown())
            .await
            .map_err(|e| NodeError::Task(e.to_string()))??;
        info!(bookie_id = %self.bookie_id, "bookie stopped");
        Ok(())
    }
}
