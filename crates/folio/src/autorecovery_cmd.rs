//! `folio autorecovery`: the Auditor candidate and the ReplicationWorker in one process
//! (BookKeeper's `bookkeeper autorecovery`, `AutoRecoveryMain`), until SIGINT or SIGTERM.
//! `folio standalone` runs the same pair in-process through [`AutoRecovery::start`].

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use folio_autorecovery::{Auditor, AutoRecoveryConfig, Worker};
use folio_client::Client;
use folio_metadata::MetadataStore;
use folio_types::BookieId;

use crate::metadata_connect::{self, Missing};

#[derive(clap::Args, Debug)]
pub struct AutoRecoveryArgs {
    /// The id this process stands in the Auditor election with (BookKeeper: its bookie
    /// address); default `<host name>:3181`.
    #[arg(long)]
    pub id: Option<String>,
    /// Seconds between a bookie's loss and the audit of its ledgers, used when the metadata
    /// store has no value yet (BookKeeper's lostBookieRecoveryDelay, default 0).
    #[arg(long, default_value_t = 0)]
    pub lost_bookie_recovery_delay: u32,
    /// How long an open ledger that lost a bookie of its last fragment is left to its writer
    /// before it is fenced and closed (openLedgerRereplicationGracePeriod), in ms.
    #[arg(long, default_value_t = 30_000)]
    pub open_ledger_grace_period_ms: u64,
    /// Ledgers repaired at once by this worker.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Journal every copy on the target bookie, as BookKeeper's worker does, instead of
    /// copying with deferred sync and one ForceLedger per replica (which writes each byte
    /// once, but makes each ledger wait for the target's flush: slower for a worker kept to
    /// one ledger at a time on a machine whose CPUs, not its disk, are the limit).
    #[arg(long)]
    pub journal_copies: bool,
    /// Bytes per second over all copies (replicationRateByBytes; default unlimited).
    #[arg(long)]
    pub replication_rate_bytes: Option<u64>,
    /// Interval of the check of every ledger's replicas on the bookies, in seconds
    /// (auditorPeriodicCheckInterval, default 604800; 0 turns it off).
    #[arg(long, default_value_t = 604_800)]
    pub check_all_ledgers_interval: u64,
    /// Interval of the replicas check of closed ledgers, in seconds
    /// (auditorReplicasCheckInterval, default 0: off); marks what it finds.
    #[arg(long, default_value_t = 0)]
    pub replicas_check_interval: u64,
    /// Interval of the placement policy check of closed ledgers, in seconds
    /// (auditorPeriodicPlacementPolicyCheckInterval, default 0: off).
    #[arg(long, default_value_t = 0)]
    pub placement_policy_check_interval: u64,
    /// Serve the admin HTTP endpoint (the cluster's `/api/v1` paths and the dashboard) on
    /// 127.0.0.1 at this port.
    #[arg(long)]
    pub http_port: Option<u16>,
    /// The bearer token file the admin endpoint's mutations need (as a bookie's
    /// http_auth_token_file).
    #[arg(long, requires = "http_port")]
    pub http_auth_token_file: Option<std::path::PathBuf>,
}

impl AutoRecoveryArgs {
    fn config(&self) -> AutoRecoveryConfig {
        AutoRecoveryConfig {
            lost_bookie_recovery_delay: self.lost_bookie_recovery_delay,
            open_ledger_grace_period: Duration::from_millis(self.open_ledger_grace_period_ms),
            worker_concurrency: self.concurrency.max(1),
            deferred_sync_copies: !self.journal_copies,
            replication_rate_bytes: self.replication_rate_bytes,
            check_all_ledgers_interval: Duration::from_secs(self.check_all_ledgers_interval),
            replicas_check_interval: Duration::from_secs(self.replicas_check_interval),
            placement_policy_check_interval: Duration::from_secs(
                self.placement_policy_check_interval,
            ),
            ..AutoRecoveryConfig::default()
        }
    }
}

/// The host name, for the lock holder and the default election id.
pub fn host_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// A running Auditor candidate and ReplicationWorker.
pub struct AutoRecovery {
    pub auditor: Auditor,
    pub worker: Worker,
}

impl AutoRecovery {
    /// Starts both over `store` (each gets its own client; the store's session carries the
    /// election vote and the locks).
    pub async fn start(
        store: Arc<dyn MetadataStore>,
        id: BookieId,
        config: AutoRecoveryConfig,
    ) -> anyhow::Result<AutoRecovery> {
        let client = Client::connect(store, crate::client_tls::client_config()?)
            .await
            .context("cannot start the autorecovery client")?;
        let auditor = Auditor::start(client.clone(), config.clone(), id);
        let worker = Worker::start(client, config, host_name(), &folio_env::SystemRng::new());
        Ok(AutoRecovery { auditor, worker })
    }

    pub async fn stop(self) {
        self.worker.stop().await;
        self.auditor.stop().await;
    }
}

pub fn run(metadata: Option<&str>, args: AutoRecoveryArgs) -> anyhow::Result<()> {
    let uri = metadata_connect::require_uri(metadata)?.to_string();
    let id = match &args.id {
        Some(id) => BookieId::new(id.as_str())?,
        None => BookieId::new(format!("{}:3181", host_name()))?,
    };
    let config = args.config();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
        let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
        let store = metadata_connect::connect(&uri, Missing::Refuse).await?;
        store
            .read_cluster()
            .await
            .with_context(|| format!("no cluster at {uri}"))?;
        let ar = AutoRecovery::start(store.clone(), id.clone(), config).await?;
        let http = match args.http_port {
            Some(port) => {
                let worker = folio_http::WorkerSlot::default();
                let _ = worker.set(ar.worker.status().clone());
                Some(
                    serve_http(
                        &uri,
                        &id,
                        port,
                        args.http_auth_token_file.as_deref(),
                        worker,
                    )
                    .await?,
                )
            }
            None => None,
        };
        println!("autorecovery {id} running on {uri}");
        if let Some(h) = &http {
            println!("http {}", h.local_addr());
        }
        println!("ready");
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        if let Some(h) = http {
            h.shutdown().await;
        }
        ar.stop().await;
        let _ = store.close().await;
        println!("stopped");
        Ok(())
    })
}

/// The admin endpoint of an autorecovery process: the cluster's routes and the dashboard on
/// loopback, on a metadata session of its own (re-opened once it expires), recovering through
/// a client of its own.
async fn serve_http(
    uri: &str,
    id: &BookieId,
    port: u16,
    token_file: Option<&std::path::Path>,
    worker: folio_http::WorkerSlot,
) -> anyhow::Result<folio_http::HttpHandle> {
    let token = token_file
        .map(folio_http::read_token_file)
        .transpose()
        .map_err(|e| anyhow::anyhow!(e))?;
    let store = metadata_connect::connect(uri, Missing::Refuse).await?;
    let connector: folio_bookie::registration::Connector = {
        let uri = uri.to_string();
        Arc::new(move || {
            let uri = uri.clone();
            Box::pin(async move { metadata_connect::open_store(&uri, None).await })
        })
    };
    let reader = Arc::new(crate::ledger_cmd::ClientLedgerReader::new(
        metadata_connect::connect(uri, Missing::Refuse).await?,
    ));
    let addr = format!("127.0.0.1:{port}");
    folio_http::serve_cluster(
        &addr,
        id.to_string(),
        folio_bookie::admin::AdminMetadata { store, connector },
        token,
        Some(reader),
        worker,
        crate::client_tls::ca_file().as_deref(),
    )
    .await
    .with_context(|| format!("cannot serve the admin endpoint on {addr}"))
}
