//! An in-process cluster for the client's integration tests: real bookies (the bookie's
//! TCP server over the real storage engine on temp dirs, or over its in-memory storage
//! where a test needs to make a bookie sleep) on ephemeral loopback ports, registered in a
//! `mem://` metadata store.

#![allow(dead_code)] // each test binary uses a different subset

use std::sync::Arc;
use std::time::Duration;

use folio_bookie::config::BookieConfig;
use folio_bookie::engine::EngineStorage;
use folio_bookie::memory::MemoryStorage;
use folio_bookie::server::{BookieServer, ServerConfig, ServerHandle};
use folio_bookie::{BookieStorage, Processor, ProcessorConfig};
use folio_client::{Client, ClientConfig};
use folio_metadata::mem::{MemCluster, unique_name};
use folio_metadata::{BookieMode, BookieRegistration, BookieServiceInfo, MetadataStore};
use folio_types::BookieId;

/// Generous: the machine is slow and shared. Only a hang trips it.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// Fails the test if `f` hangs, instead of hanging the suite.
pub async fn patient<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(PATIENCE, f)
        .await
        .expect("operation hung")
}

pub enum Store {
    Engine(Arc<EngineStorage>),
    Memory(Arc<MemoryStorage>),
}

pub struct TestBookie {
    pub id: BookieId,
    pub store: Store,
    server: Option<ServerHandle>,
    registration: Option<Box<dyn BookieRegistration>>,
    _dir: Option<tempfile::TempDir>,
}

impl TestBookie {
    /// The in-memory storage of a bookie started with [`Cluster::start_with_memory`].
    pub fn memory(&self) -> &MemoryStorage {
        match &self.store {
            Store::Memory(m) => m,
            Store::Engine(_) => panic!("bookie {} runs the real storage", self.id),
        }
    }
}

pub struct Cluster {
    pub metadata: Arc<dyn MetadataStore>,
    pub bookies: Vec<TestBookie>,
    /// Bookies over the real storage lay out an entry log per ledger.
    pub per_ledger_logs: bool,
    _metadata_dir: Option<tempfile::TempDir>,
}

async fn serve<S: BookieStorage>(storage: S) -> ServerHandle {
    let processor = Processor::new(storage, ProcessorConfig::default());
    BookieServer::bind("127.0.0.1:0", processor, ServerConfig::default())
        .await
        .expect("bind a bookie port")
        .start()
}

impl Cluster {
    /// `n` bookies over the real storage engine.
    pub async fn start(n: usize) -> Cluster {
        Cluster::start_with_memory(n, &[]).await
    }

    /// `n` bookies over the real storage engine, with `sqlite://` metadata in a temp dir.
    pub async fn start_sqlite(n: usize) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let uri = format!("sqlite://{}", dir.path().join("metadata.db").display());
        let metadata = folio_metadata::connect_embedded(&uri)
            .await
            .expect("open sqlite metadata");
        Cluster::start_on(n, &[], metadata, Some(dir)).await
    }

    /// `n` bookies over the real storage engine, registered in `metadata` (any driver).
    pub async fn start_on_store(n: usize, metadata: Arc<dyn MetadataStore>) -> Cluster {
        Cluster::start_on(n, &[], metadata, None).await
    }

    /// `n` bookies over the real storage engine, each with an entry log per ledger.
    pub async fn start_per_ledger_logs(n: usize) -> Cluster {
        let mut cluster = Cluster::start(0).await;
        cluster.per_ledger_logs = true;
        for _ in 0..n {
            cluster.add_bookie(false).await;
        }
        cluster
    }

    /// `n` bookies; those whose index is in `memory` use the in-memory storage.
    pub async fn start_with_memory(n: usize, memory: &[usize]) -> Cluster {
        let metadata: Arc<dyn MetadataStore> =
            Arc::new(MemCluster::new(unique_name("client-test")).connect());
        Cluster::start_on(n, memory, metadata, None).await
    }

    async fn start_on(
        n: usize,
        memory: &[usize],
        metadata: Arc<dyn MetadataStore>,
        metadata_dir: Option<tempfile::TempDir>,
    ) -> Cluster {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        metadata.init_cluster().await.expect("init cluster");
        let mut cluster = Cluster {
            metadata,
            bookies: Vec::new(),
            per_ledger_logs: false,
            _metadata_dir: metadata_dir,
        };
        for i in 0..n {
            cluster.add_bookie(memory.contains(&i)).await;
        }
        cluster
    }

    /// Starts one more bookie and registers it as writable.
    pub async fn add_bookie(&mut self, in_memory: bool) -> BookieId {
        self.add_bookie_on_rack(in_memory, None).await
    }

    /// Starts one more bookie, registered as writable with a `rack` property if given.
    pub async fn add_bookie_on_rack(&mut self, in_memory: bool, rack: Option<&str>) -> BookieId {
        let (store, server, dir) = if in_memory {
            let m = Arc::new(MemoryStorage::new());
            let server = serve(m.clone()).await;
            (Store::Memory(m), server, None)
        } else {
            let dir = tempfile::tempdir().expect("tempdir");
            let config = BookieConfig {
                data_dir: Some(dir.path().to_path_buf()),
                journal_max_group_wait_ms: 1,
                // A full host disk must never fail a test.
                disk_usage_threshold: 0.999,
                disk_usage_lwm_threshold: 0.998,
                entry_log_per_ledger_enabled: self.per_ledger_logs,
                ..BookieConfig::default()
            };
            let storage = Arc::new(
                EngineStorage::open(&folio_env::Env::real(), &config).expect("open storage"),
            );
            let server = serve(storage.clone()).await;
            (Store::Engine(storage), server, Some(dir))
        };
        let id = BookieId::new(server.local_addr().to_string()).unwrap();
        // What a `folio bookie` publishes (its version, its rack if given).
        let info = BookieServiceInfo {
            properties: folio_bookie::registration::service_properties(&BookieConfig {
                rack: rack.map(str::to_owned),
                ..BookieConfig::default()
            }),
            ..BookieServiceInfo::default()
        };
        let registration = self
            .metadata
            .register_bookie(&id, BookieMode::Writable, &info)
            .await
            .expect("register bookie");
        self.bookies.push(TestBookie {
            id: id.clone(),
            store,
            server: Some(server),
            registration: Some(registration),
            _dir: dir,
        });
        id
    }

    pub fn bookie(&self, id: &BookieId) -> &TestBookie {
        self.bookies
            .iter()
            .find(|b| &b.id == id)
            .unwrap_or_else(|| panic!("no bookie {id}"))
    }

    /// Stops a bookie's port (its connections close, new ones are refused) and removes
    /// its registration: a crashed bookie, as the client sees it.
    pub async fn kill(&mut self, id: &BookieId) {
        let b = self
            .bookies
            .iter_mut()
            .find(|b| &b.id == id)
            .unwrap_or_else(|| panic!("no bookie {id}"));
        if let Some(r) = b.registration.take() {
            r.unregister().await.expect("unregister");
        }
        if let Some(s) = b.server.take() {
            s.shutdown().await;
        }
    }

    /// Stops an in-memory bookie's port and starts it again on the same address with the
    /// same storage (a process restart that kept its data), registered again.
    pub async fn restart_memory_bookie(&mut self, id: &BookieId) {
        self.serve_memory_again(id, id.as_str()).await;
    }

    /// Stops an in-memory bookie and serves its storage again on a new port, registered
    /// under the new address (a host re-addressed with its disks); returns the new id.
    pub async fn move_memory_bookie(&mut self, id: &BookieId) -> BookieId {
        self.serve_memory_again(id, "127.0.0.1:0").await
    }

    /// Stops in-memory bookie `id` and serves its storage on `addr`, registered under the
    /// address it got.
    async fn serve_memory_again(&mut self, id: &BookieId, addr: &str) -> BookieId {
        self.kill(id).await;
        let b = self
            .bookies
            .iter_mut()
            .find(|b| &b.id == id)
            .unwrap_or_else(|| panic!("no bookie {id}"));
        let Store::Memory(m) = &b.store else {
            panic!("bookie {id} is not in memory");
        };
        let processor = Processor::new(m.clone(), ProcessorConfig::default());
        let server = BookieServer::bind(addr, processor, ServerConfig::default())
            .await
            .unwrap_or_else(|e| panic!("bind {addr}: {e}"))
            .start();
        let new_id = BookieId::new(server.local_addr().to_string()).unwrap();
        b.id = new_id.clone();
        b.server = Some(server);
        b.registration = Some(
            self.metadata
                .register_bookie(&new_id, BookieMode::Writable, &BookieServiceInfo::default())
                .await
                .expect("register again"),
        );
        new_id
    }

    /// A client with test-friendly timeouts.
    pub async fn client(&self) -> Client {
        self.client_with(test_config()).await
    }

    pub async fn client_with(&self, config: ClientConfig) -> Client {
        Client::connect(self.metadata.clone(), config)
            .await
            .expect("client")
    }
}

/// Generous per-request timeouts (the machine is slow) but quick reconnects.
pub fn test_config() -> ClientConfig {
    ClientConfig {
        add_entry_timeout: Duration::from_secs(30),
        read_timeout: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(30),
        reconnect_backoff: Duration::from_millis(50),
        ..ClientConfig::default()
    }
}

/// Creates a ledger at `quorum` (E, Qw, Qa) with CRC32C and password "pw", appends
/// entries `0..entries` (`payload`) and closes it; returns its id.
pub async fn write_closed_ledger(
    client: &Client,
    quorum: (usize, usize, usize),
    entries: i64,
) -> i64 {
    let opts = folio_client::CreateOptions::default()
        .quorum(quorum.0, quorum.1, quorum.2)
        .digest(folio_client::DigestType::Crc32c)
        .password("pw");
    let w = patient(client.create_ledger(opts)).await.unwrap();
    for e in 0..entries {
        patient(w.append(payload(e))).await.unwrap();
    }
    patient(w.close()).await.unwrap();
    w.id()
}

pub fn payload(entry: i64) -> Vec<u8> {
    format!("entry {entry} ")
        .repeat(1 + (entry as usize % 5))
        .into_bytes()
}
