//! `folio standalone`: a whole cluster in one process, for a laptop or a test. The
//! metadata is an embedded sqlite database (`DIR/metadata.db`, the cluster initialised on
//! first start), and N bookies listen on consecutive localhost ports, each with its data in
//! `DIR/bookie-<i>`. Starting again on the same directory finds every ledger again: the
//! bookies replay their journals and keep their ids (and so their cookies).
//!
//! Each bookie runs on a runtime of its own whose threads carry its `bookie` label on
//! metrics (its id; `bookie-<i>` with `--port 0`), so that each bookie's `/metrics` shows its
//! own series, as a bookie process of its own would.
//!
//! Each bookie's metadata session lives the bookie config's `metadata_session_timeout_ms`
//! (BookKeeper's zkTimeout, 10 s) past its last heartbeat. The first bookie serves the admin
//! HTTP endpoint, reading ledgers for `/api/v1/ledger/read` through a client.
//!
//! It prints `metadata <uri>`, one `bookie <id>` line a bookie (and `http <addr>` for the
//! admin endpoint), then `ready`; SIGINT or SIGTERM stops the bookies (each unregisters,
//! drains its port and checkpoints) and it prints `stopped`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use folio_bookie::config::BookieConfig;
use folio_bookie::node::{BookieNode, MetadataAccess};
use folio_bookie::registration::Connector;
use folio_metadata::MetadataStore;
use folio_metadata::sqlite::{SqliteMetadataStore, SqliteOptions};

use crate::ledger_cmd::{ClientLedgerReader, Stdout};
use crate::metadata_connect::{self, Missing};

#[derive(clap::Args, Debug)]
pub struct StandaloneArgs {
    /// Number of bookies.
    #[arg(long, default_value_t = 3)]
    pub bookies: u16,
    /// Directory for the metadata database and every bookie's data.
    #[arg(long, default_value = "./folio-data")]
    pub data_dir: PathBuf,
    /// Port of the first bookie; the others take the next ones (0: any free ports, which
    /// a restart will not find again).
    #[arg(long, default_value_t = 3181)]
    pub port: u16,
    /// Admin HTTP port and web dashboard (of the first bookie; the others take free ports);
    /// BookKeeper's default is 8080.
    #[arg(long, default_value_t = 8080)]
    pub http_port: u16,
    /// Serve /api/v1/ledger/read on the admin endpoint (http_ledger_read_enabled; off: 403).
    #[arg(long)]
    pub http_ledger_read: bool,
    /// Bearer token file the admin endpoint's mutating requests and ledger reads must match
    /// (http_auth_token_file).
    #[arg(long, value_name = "FILE")]
    pub http_auth_token_file: Option<PathBuf>,
}

/// A bookie's metadata session on the embedded store: it lives `session_timeout` past its
/// last heartbeat (the bookie config's metadata_session_timeout_ms, BookKeeper's zkTimeout,
/// 10 s by default), after which its registration disappears.
async fn bookie_session(
    path: &std::path::Path,
    session_timeout: Duration,
) -> folio_metadata::Result<Arc<dyn MetadataStore>> {
    let opts = SqliteOptions {
        session_timeout,
        ..SqliteOptions::default()
    };
    Ok(Arc::new(SqliteMetadataStore::open(path, opts).await?))
}

fn connector(path: PathBuf, session_timeout: Duration) -> Connector {
    Arc::new(move || {
        let path = path.clone();
        Box::pin(async move { bookie_session(&path, session_timeout).await })
    })
}

/// SIGINT and SIGTERM, listened for from creation on: a stop that comes right after
/// `ready` is a clean stop, not the default (fatal) action.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn listen() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            int: signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?,
            term: signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?,
        })
    }

    async fn wait(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
}

pub fn run(metadata: Option<&str>, args: StandaloneArgs) -> anyhow::Result<()> {
    if let Some(uri) = metadata {
        // Often FOLIO_METADATA left set in the shell: not worth refusing to start.
        eprintln!(
            "folio standalone: ignoring --metadata / FOLIO_METADATA ({uri}): it serves its own store in --data-dir"
        );
    }
    if args.bookies == 0 {
        bail!("--bookies must be at least 1");
    }
    if args.port != 0 && u32::from(args.port) + u32::from(args.bookies) - 1 > 65535 {
        bail!(
            "--port {} leaves no room for {} bookies on consecutive ports",
            args.port,
            args.bookies
        );
    }
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create data directory {}", args.data_dir.display()))?;
    let dir = std::fs::canonicalize(&args.data_dir)
        .with_context(|| format!("cannot resolve data directory {}", args.data_dir.display()))?;
    let Some(dir_text) = dir.to_str() else {
        bail!("data directory {} is not valid UTF-8", dir.display());
    };
    let uri = format!("sqlite://{dir_text}/metadata.db");

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // Each bookie's own runtime (see `bookie_runtime`), shut down once the bookies stopped.
    let mut bookie_runtimes = Vec::new();
    let result = runtime.block_on(run_cluster(&args, &dir, &uri, &mut bookie_runtimes));
    for rt in bookie_runtimes {
        rt.shutdown_timeout(Duration::from_secs(10));
    }
    result
}

async fn run_cluster(
    args: &StandaloneArgs,
    dir: &std::path::Path,
    uri: &str,
    bookie_runtimes: &mut Vec<tokio::runtime::Runtime>,
) -> anyhow::Result<()> {
    let mut signals = Signals::listen()?;
    let store = metadata_connect::connect(uri, Missing::Create).await?;
    if let Err(e) = store.read_cluster().await {
        if !e.is_not_found() {
            return Err(anyhow::Error::new(e).context("cannot read the cluster"));
        }
        match store.init_cluster().await {
            Ok(_) | Err(folio_metadata::MetadataError::AlreadyExists { .. }) => {}
            Err(e) => {
                return Err(anyhow::Error::new(e).context("cannot initialise the cluster"));
            }
        }
    }
    let mut out = Stdout::new();
    out.line(format!("metadata {uri}").as_bytes())?;

    let mut nodes: Vec<(BookieNode, tokio::runtime::Handle)> = Vec::new();
    // The first bookie's dashboard shows the in-process worker once it runs.
    let worker = folio_http::WorkerSlot::default();
    let started = start_bookies(
        args,
        dir,
        uri,
        &mut nodes,
        bookie_runtimes,
        &mut out,
        &worker,
    )
    .await;
    // Autorecovery on its own session, as `folio autorecovery` would run it.
    let mut autorecovery = None;
    let started = match started {
        Ok(()) => {
            async {
                let session = metadata_connect::connect(uri, Missing::Create).await?;
                let id = folio_types::BookieId::new(format!("localhost:{}", args.port))?;
                let config = folio_autorecovery::AutoRecoveryConfig {
                    // In the bookies' process: BookKeeper's embedded names.
                    metrics_prefix: "replication_".into(),
                    ..Default::default()
                };
                let ar = crate::autorecovery_cmd::AutoRecovery::start(session.clone(), id, config)
                    .await?;
                let _ = worker.set(ar.worker.status().clone());
                autorecovery = Some((ar, session));
                out.line(b"autorecovery running")
            }
            .await
        }
        Err(e) => Err(e),
    };
    let result = match started {
        Ok(()) => match out.line(b"ready") {
            Ok(()) => {
                signals.wait().await;
                Ok(())
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    if let Some((ar, session)) = autorecovery.take() {
        ar.stop().await;
        let _ = session.close().await;
    }
    // Stop in reverse order of start, whatever happened; report the first failure.
    let mut stop_error = None;
    while let Some((node, on)) = nodes.pop() {
        let id = node.bookie_id().clone();
        let stopped = on
            .spawn(node.shutdown())
            .await
            .map_err(anyhow::Error::new)
            .and_then(|r| r.map_err(anyhow::Error::new));
        if let Err(e) = stopped {
            stop_error.get_or_insert(e.context(format!("bookie {id}")));
        }
    }
    let _ = store.close().await;
    result?;
    if let Some(e) = stop_error {
        return Err(e);
    }
    out.line(b"stopped")
}

/// A runtime of its own for bookie `i`, so that its metrics are told apart from the other
/// bookies' of this process: every thread of it (workers, blocking threads, and the threads
/// the bookie starts from them) carries the bookie's `bookie` label
/// (`folio_env::metric_label`), which the metrics recorder adds to what it records there.
fn bookie_runtime(i: u16, label: Arc<str>) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name(format!("bookie-{i}"))
        .on_thread_start(move || folio_env::metric_label::set(Some(label.clone())))
        .build()
        .with_context(|| format!("cannot start the runtime of bookie {i}"))
}

async fn start_bookies(
    args: &StandaloneArgs,
    dir: &std::path::Path,
    uri: &str,
    nodes: &mut Vec<(BookieNode, tokio::runtime::Handle)>,
    runtimes: &mut Vec<tokio::runtime::Runtime>,
    out: &mut Stdout,
    worker: &folio_http::WorkerSlot,
) -> anyhow::Result<()> {
    // BK_<key> variables reach every bookie (BK_diskUsageThreshold=0.99 on a full laptop
    // disk, say); the standalone's own settings below win over them.
    let base = crate::bookie_cmd::load_config(None)?;
    let db = dir.join("metadata.db");
    for i in 0..args.bookies {
        let config = BookieConfig {
            listen_address: "127.0.0.1".into(),
            port: if args.port == 0 { 0 } else { args.port + i },
            // The first bookie on --http-port; the others on ports of their own, so that the
            // dashboard shows every bookie's disks (it asks each bookie's endpoint).
            http_port: Some(if i == 0 { args.http_port } else { 0 }),
            http_ledger_read_enabled: args.http_ledger_read,
            http_auth_token_file: args.http_auth_token_file.clone(),
            data_dir: Some(dir.join(format!("bookie-{i}"))),
            ..base.clone()
        };
        let session_timeout = Duration::from_millis(config.metadata_session_timeout_ms);
        let session = bookie_session(&db, session_timeout)
            .await
            .with_context(|| format!("cannot connect to metadata service {uri}"))?;
        // The first bookie's endpoint (the one a user opens) reads ledgers through a client
        // on its own session.
        let reader: Option<Arc<dyn folio_http::LedgerReader>> = if i == 0 {
            let store = metadata_connect::connect(uri, Missing::Create).await?;
            Some(Arc::new(ClientLedgerReader::new(store)))
        } else {
            None
        };
        let admin = folio_http::BookieAdmin::from_config(&config, reader)
            .map_err(|e| anyhow::anyhow!(e))?
            .with_worker(worker.clone());
        // Its metrics' `bookie` label: its id, or where that is known only once its port is
        // bound (`--port 0`), its data directory's name.
        let label: Arc<str> = if config.port == 0 {
            format!("bookie-{i}").into()
        } else {
            folio_bookie::bookie_address::bookie_id_text(&config, config.port).into()
        };
        let runtime = bookie_runtime(i, label)?;
        let on = runtime.handle().clone();
        runtimes.push(runtime);
        let metadata = MetadataAccess {
            store: session,
            connector: connector(db.clone(), session_timeout),
            init_cluster_if_missing: true,
        };
        let node = on
            .spawn(async move {
                BookieNode::start_with_admin(
                    &folio_env::Env::real(),
                    config,
                    Some(metadata),
                    Some(&admin),
                )
                .await
            })
            .await
            .map_err(anyhow::Error::new)
            .and_then(|r| r.map_err(anyhow::Error::new))
            .with_context(|| format!("cannot start bookie {i}"))?;
        out.line(format!("bookie {}", node.bookie_id()).as_bytes())?;
        if let Some(http) = node.http_addr() {
            out.line(format!("http {http}").as_bytes())?;
        }
        nodes.push((node, on));
    }
    Ok(())
}
