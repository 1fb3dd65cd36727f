//! `folio bookie`: runs one bookie until SIGINT or SIGTERM, then stops it cleanly (unregister,
//! drain the port, checkpoint). Configuration comes from an optional TOML file (`--config`,
//! every key listed by `--print-default-config`), overridden by the flags.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use folio_bookie::config::{BookieConfig, DEFAULT_CONFIG_TOML};
use folio_bookie::node::{BookieNode, MetadataAccess};
use folio_bookie::registration::Connector;

use crate::metadata_connect::{Missing, connect_with};

#[derive(clap::Args, Debug)]
pub struct BookieArgs {
    /// Directory for the journal, the entry logs and the index (overrides the config's data_dir).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Bookie port (default 3181; 0 picks a free port).
    #[arg(long)]
    pub port: Option<u16>,
    /// Admin HTTP port (no HTTP endpoint unless given here or in the config).
    #[arg(long)]
    pub http_port: Option<u16>,
    /// Network location published in the registration for rack-aware clients, e.g.
    /// /region-a/rack-1 (overrides the config's rack).
    #[arg(long, value_name = "/REGION/RACK")]
    pub rack: Option<String>,
    /// Configuration file: TOML (--print-default-config), or BookKeeper's bk_server.conf
    /// (Java properties); BK_<key> environment variables override it, the flags override both.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print every configuration key with its default value and exit.
    #[arg(long)]
    pub print_default_config: bool,
}

fn connector(uri: String, session_timeout: Duration) -> Connector {
    Arc::new(move || {
        let uri = uri.clone();
        Box::pin(
            async move { crate::metadata_connect::open_store(&uri, Some(session_timeout)).await },
        )
    })
}

/// SIGINT and SIGTERM, listened for from the moment this returns (before "ready" is printed, so
/// a supervisor that stops the bookie right after never kills it uncleanly).
fn stop_signals() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    })
}

/// A bookie's configuration: the file (TOML or BookKeeper's bk_server.conf) if given, then
/// the process's `BK_<key>` variables over it, as BookKeeper's container image applies them;
/// one warning lists the BookKeeper settings Folio does not implement.
pub fn load_config(path: Option<&std::path::Path>) -> anyhow::Result<BookieConfig> {
    let bk_env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("BK_"))
        .collect();
    let loaded = BookieConfig::load_with_env(path, &bk_env)?;
    if !loaded.ignored.is_empty() {
        tracing::warn!(
            "BookKeeper settings Folio does not implement, ignored: {}",
            loaded.ignored.join(", ")
        );
    }
    Ok(loaded.config)
}

pub fn run(metadata: Option<String>, args: BookieArgs) -> anyhow::Result<()> {
    if args.print_default_config {
        print!("{DEFAULT_CONFIG_TOML}");
        return Ok(());
    }
    let mut config = load_config(args.config.as_deref())?;
    if let Some(d) = args.data_dir {
        config.data_dir = Some(d);
    }
    if let Some(p) = args.port {
        config.port = p;
    }
    if let Some(p) = args.http_port {
        config.http_port = Some(p);
    }
    if let Some(r) = args.rack {
        config.rack = Some(r);
    }
    let Some(uri) = metadata.or_else(|| config.metadata_service_uri.clone()) else {
        bail!(
            "no metadata service: pass --metadata URI (or set FOLIO_METADATA, or metadata_service_uri in the config)"
        );
    };
    config.validate()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let stop = stop_signals()?;
        let session_timeout = Duration::from_millis(config.metadata_session_timeout_ms);
        let autorecovery_config =
            config
                .auto_recovery_daemon_enabled
                .then(|| folio_autorecovery::AutoRecoveryConfig {
                    lost_bookie_recovery_delay: config.lost_bookie_recovery_delay,
                    check_all_ledgers_interval: Duration::from_secs(
                        config.auditor_periodic_check_interval_s,
                    ),
                    bookie_check_interval: Duration::from_secs(
                        config.auditor_periodic_bookie_check_interval_s,
                    ),
                    replicas_check_interval: Duration::from_secs(
                        config.auditor_replicas_check_interval_s,
                    ),
                    placement_policy_check_interval: Duration::from_secs(
                        config.auditor_periodic_placement_policy_check_interval_s,
                    ),
                    metrics_prefix: "replication_".into(),
                    ..Default::default()
                });
        let store = connect_with(&uri, Missing::Create, Some(session_timeout)).await?;
        let embedded = uri.starts_with("sqlite:") || uri.starts_with("mem:");
        // The admin endpoint's /api/v1/ledger/read goes through a client on its own session.
        let reader: Option<Arc<dyn folio_http::LedgerReader>> = match config.http_port {
            Some(_) => Some(Arc::new(crate::ledger_cmd::ClientLedgerReader::new(
                connect_with(&uri, Missing::Create, Some(session_timeout)).await?,
            ))),
            None => None,
        };
        // autoRecoveryDaemonEnabled: the dashboard shows the worker once it runs.
        let worker = folio_http::WorkerSlot::default();
        let admin = folio_http::BookieAdmin::from_config(&config, reader)
            .map_err(|e| anyhow::anyhow!(e))?
            .with_worker(worker.clone());
        let node = BookieNode::start_with_admin(
            &folio_env::Env::real(),
            config,
            Some(MetadataAccess {
                store,
                connector: connector(uri.clone(), session_timeout),
                init_cluster_if_missing: embedded,
            }),
            Some(&admin),
        )
        .await?;
        println!(
            "bookie {} listening on {}",
            node.bookie_id(),
            node.local_addr()
        );
        if let Some(http) = node.http_addr() {
            println!("http listening on {http}");
        }
        // autoRecoveryDaemonEnabled: the Auditor candidate (with the bookie's id, as
        // BookKeeper's) and a worker on their own metadata session.
        let autorecovery = match autorecovery_config {
            Some(ar_config) => {
                let session = connect_with(&uri, Missing::Create, Some(session_timeout)).await?;
                let ar = crate::autorecovery_cmd::AutoRecovery::start(
                    session.clone(),
                    node.bookie_id().clone(),
                    ar_config,
                )
                .await?;
                let _ = worker.set(ar.worker.status().clone());
                println!("autorecovery running");
                Some((ar, session))
            }
            None => None,
        };
        println!("ready");
        stop.await;
        tracing::info!("signal received, shutting down");
        if let Some((ar, session)) = autorecovery {
            ar.stop().await;
            let _ = session.close().await;
        }
        node.shutdown().await?;
        println!("stopped");
        Ok(())
    })
}
