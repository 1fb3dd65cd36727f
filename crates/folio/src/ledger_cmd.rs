//! `folio ledger write | read | tail | list | meta | delete`: ledgers through the client
//! library, with the line formats of DESIGN.md section 4 that scripts parse
//! (`ledger <id>`, `acked <entryId>`, `closed <lastEntryId>`, `<entryId>\t<payload>`).
//! Every line is flushed as soon as it is printed, so a script sees an `acked` line the
//! moment the entry is durable.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use folio_client::{
    AppendFuture, Client, ClientConfig, CreateOptions, DigestType, OpenOptions, ReadHandle,
};
use folio_metadata::MetadataStore;
use folio_types::metadata::LedgerMetadata;
use folio_types::{EntryId, LedgerId};
use tokio::sync::mpsc;

use crate::metadata_connect::{self, Missing};
use crate::payload::{Encoding, EncodingArgs};

#[derive(Args, Debug)]
pub struct LedgerArgs {
    #[command(subcommand)]
    command: LedgerCommand,
}

#[derive(Subcommand, Debug)]
enum LedgerCommand {
    /// Create a ledger and append each stdin line as an entry; close it at EOF.
    Write(WriteArgs),
    /// Print a ledger's entries as `<entryId>\t<payload>` lines.
    Read(ReadArgs),
    /// Follow an open ledger, printing entries as they are confirmed, until it is closed.
    Tail(TailArgs),
    /// List every ledger id, one a line.
    List,
    /// Print a ledger's metadata as JSON.
    Meta { id: LedgerId },
    /// Delete a ledger (its metadata; bookies garbage-collect the entries).
    Delete { id: LedgerId },
}

#[derive(Args, Debug)]
struct WriteArgs {
    /// Ensemble size.
    #[arg(short = 'e', long = "ensemble", default_value_t = 3)]
    ensemble: usize,
    /// Write quorum size.
    #[arg(short = 'w', long = "write-quorum", default_value_t = 2)]
    write_quorum: usize,
    /// Ack quorum size.
    #[arg(short = 'a', long = "ack-quorum", default_value_t = 2)]
    ack_quorum: usize,
    /// Digest type: crc32c, crc32, mac (HMAC-SHA1) or dummy.
    #[arg(long, default_value = "crc32c", value_parser = parse_digest)]
    digest: DigestType,
    /// The ledger password.
    #[arg(long, default_value = "")]
    password: String,
    /// Appends in flight before reading more of stdin waits.
    #[arg(long, default_value_t = 1000)]
    in_flight: usize,
    #[command(flatten)]
    encoding: EncodingArgs,
}

#[derive(Args, Debug)]
struct ReadArgs {
    id: LedgerId,
    /// First entry to print.
    #[arg(long, default_value_t = 0)]
    from: EntryId,
    /// Last entry to print (default: the last confirmed entry).
    #[arg(long)]
    to: Option<EntryId>,
    /// Read the ledger as it is, without fencing and recovering it.
    #[arg(long)]
    no_recovery: bool,
    /// The ledger password.
    #[arg(long, default_value = "")]
    password: String,
    #[command(flatten)]
    encoding: EncodingArgs,
}

#[derive(Args, Debug)]
struct TailArgs {
    id: LedgerId,
    /// First entry to print.
    #[arg(long, default_value_t = 0)]
    from: EntryId,
    /// The ledger password.
    #[arg(long, default_value = "")]
    password: String,
    #[command(flatten)]
    encoding: EncodingArgs,
}

fn parse_digest(s: &str) -> Result<DigestType, String> {
    match s.to_ascii_lowercase().as_str() {
        "crc32c" => Ok(DigestType::Crc32c),
        "crc32" => Ok(DigestType::Crc32),
        "mac" | "hmac" => Ok(DigestType::Mac),
        "dummy" => Ok(DigestType::Dummy),
        _ => Err(format!(
            "unknown digest {s:?}: expected crc32c, crc32, mac or dummy"
        )),
    }
}

/// Runs one `folio ledger` command against the metadata service `metadata`.
pub fn run(args: LedgerArgs, metadata: Option<&str>) -> anyhow::Result<()> {
    let uri = metadata_connect::require_uri(metadata)?.to_owned();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(async move {
        let store = metadata_connect::connect(&uri, Missing::Refuse).await?;
        let result = execute(args.command, store.clone()).await;
        let _ = store.close().await;
        result
    });
    // Blocking stdin readers may still wait for input: do not wait for them.
    runtime.shutdown_background();
    result
}

async fn execute(command: LedgerCommand, store: Arc<dyn MetadataStore>) -> anyhow::Result<()> {
    let config = ClientConfig {
        // An idle writer tells the bookies its LAC soon, so a `tail` prints an entry as
        // soon as it is confirmed rather than when the next one is written.
        explicit_lac_interval: Some(EXPLICIT_LAC_INTERVAL),
        ..crate::client_tls::client_config()?
    };
    let client = Client::connect(store, config).await?;
    let result = match command {
        LedgerCommand::Write(a) => write(&client, a).await,
        LedgerCommand::Read(a) => read(&client, a).await,
        LedgerCommand::Tail(a) => tail(&client, a).await,
        LedgerCommand::List => {
            let mut out = Stdout::new();
            for id in client.list_ledgers().await? {
                out.line(format!("{id}").as_bytes())?;
            }
            Ok(())
        }
        LedgerCommand::Meta { id } => {
            let m = client.ledger_metadata(id).await?;
            Stdout::new().line(metadata_json(id, &m).to_string().as_bytes())
        }
        LedgerCommand::Delete { id } => {
            client.delete_ledger(id).await?;
            Stdout::new().line(format!("deleted {id}").as_bytes())
        }
    };
    client.close();
    result
}

/// How long a writer stays idle before it sends its LAC explicitly.
const EXPLICIT_LAC_INTERVAL: Duration = Duration::from_millis(100);

/// Stdout, flushed after every line (a script waits for each `acked` line).
pub struct Stdout(std::io::Stdout);

impl Stdout {
    pub fn new() -> Self {
        Stdout(std::io::stdout())
    }

    pub fn line(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        let mut lock = self.0.lock();
        lock.write_all(bytes)
            .and_then(|()| lock.write_all(b"\n"))
            .and_then(|()| lock.flush())
            .context("cannot write to stdout")
    }

    /// `<entryId>\t<payload>`.
    pub fn entry(&mut self, id: EntryId, payload: &[u8], enc: Encoding) -> anyhow::Result<()> {
        let mut line = format!("{id}\t").into_bytes();
        line.extend_from_slice(&enc.encode(payload));
        self.line(&line)
    }
}

async fn write(client: &Client, a: WriteArgs) -> anyhow::Result<()> {
    let enc = a.encoding.encoding();
    let writer = client
        .create_ledger(
            CreateOptions::default()
                .quorum(a.ensemble, a.write_quorum, a.ack_quorum)
                .digest(a.digest)
                .password(a.password.into_bytes()),
        )
        .await?;
    let id = writer.id();
    let mut out = Stdout::new();
    out.line(format!("ledger {id}").as_bytes())?;

    // Acknowledgements come in entry order: one task awaits them in order and prints
    // each at once, while the loop below keeps appending (pipelined).
    let (tx, mut rx) = mpsc::channel::<AppendFuture>(a.in_flight.max(1));
    let mut acks = tokio::spawn(async move {
        let mut out = Stdout::new();
        while let Some(ack) = rx.recv().await {
            let entry = ack.await?;
            out.line(format!("acked {entry}").as_bytes())?;
        }
        anyhow::Ok(())
    });
    // Someone recovering the ledger (state no longer OPEN) fences this writer: say so at
    // once, even when stdin is idle.
    let mut watch = client.metadata().watch_ledger(id).await.ok();
    let fenced = async {
        let Some(w) = watch.as_mut() else {
            return std::future::pending().await;
        };
        loop {
            let open = w
                .borrow_and_update()
                .as_ref()
                .is_some_and(|v| !v.value.is_closed() && !v.value.is_in_recovery());
            if !open {
                return;
            }
            if w.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    };
    tokio::pin!(fenced);

    let mut stdin = stdin_lines();
    let mut acks_done = false;
    // Bad input stops the appends; what was acknowledged is kept and the ledger closed.
    let mut input_error = None;
    loop {
        tokio::select! {
            read = stdin.recv() => {
                let line = match read {
                    None => break,
                    Some(Ok(line)) => line,
                    Some(Err(e)) => {
                        input_error = Some(anyhow::Error::new(e).context("cannot read stdin"));
                        break;
                    }
                };
                let payload = match enc.decode(&line) {
                    Ok(p) => p,
                    Err(e) => {
                        input_error = Some(e);
                        break;
                    }
                };
                if tx.send(writer.append(payload)).await.is_err() {
                    // The ack task ended early: it failed; its error is reported below.
                    break;
                }
            }
            r = &mut acks => {
                acks_done = true;
                r.context("acknowledgement task failed")??;
                // The ack task only ends on its own with an error.
                break;
            }
            () = &mut fenced => bail!("ledger {id} is fenced"),
        }
    }
    drop(tx);
    if !acks_done {
        acks.await.context("acknowledgement task failed")??;
    }
    writer.close().await?;
    out.line(format!("closed {}", writer.last_add_confirmed()).as_bytes())?;
    match input_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Stdin's lines (without their newline), read on a thread of their own: std's blocking
/// reads need no extra tokio feature, and a line is handed over as soon as it is complete.
fn stdin_lines() -> mpsc::Receiver<std::io::Result<Vec<u8>>> {
    let (tx, rx) = mpsc::channel(64);
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut lock = stdin.lock();
        loop {
            let mut line = Vec::new();
            match std::io::BufRead::read_until(&mut lock, b'\n', &mut line) {
                Ok(0) => return,
                Ok(_) => {
                    if line.last() == Some(&b'\n') {
                        line.pop();
                    }
                    if tx.blocking_send(Ok(line)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            }
        }
    });
    rx
}

async fn open(
    client: &Client,
    id: LedgerId,
    password: &str,
    recovery: bool,
) -> anyhow::Result<ReadHandle> {
    let opts = if recovery {
        OpenOptions::recovery()
    } else {
        OpenOptions::no_recovery()
    };
    Ok(client.open_ledger(id, password.as_bytes(), opts).await?)
}

/// Entries read per request batch.
const READ_BATCH: EntryId = 100;

async fn print_range(
    h: &ReadHandle,
    first: EntryId,
    last: EntryId,
    enc: Encoding,
    out: &mut Stdout,
) -> anyhow::Result<()> {
    let mut next = first;
    while next <= last {
        let end = last.min(next + READ_BATCH - 1);
        for e in h.read(next, end).await? {
            out.entry(e.entry_id, &e.payload, enc)?;
        }
        next = end + 1;
    }
    Ok(())
}

async fn read(client: &Client, a: ReadArgs) -> anyhow::Result<()> {
    if a.from < 0 {
        bail!("invalid --from {}: entry ids are non-negative", a.from);
    }
    let h = open(client, a.id, &a.password, !a.no_recovery).await?;
    let lac = h.last_add_confirmed();
    let last = a.to.map_or(lac, |to| to.min(lac));
    print_range(&h, a.from, last, a.encoding.encoding(), &mut Stdout::new()).await
}

/// How long one long poll waits before asking again.
const LONG_POLL: Duration = Duration::from_secs(10);

async fn tail(client: &Client, a: TailArgs) -> anyhow::Result<()> {
    if a.from < 0 {
        bail!("invalid --from {}: entry ids are non-negative", a.from);
    }
    let enc = a.encoding.encoding();
    let h = open(client, a.id, &a.password, false).await?;
    let mut out = Stdout::new();
    let mut next = a.from;
    loop {
        let lac = h.last_add_confirmed();
        if next <= lac {
            print_range(&h, next, lac, enc, &mut out).await?;
            next = lac + 1;
        }
        if h.is_closed() {
            return Ok(());
        }
        h.wait_for_lac_beyond(lac, LONG_POLL).await?;
    }
}

/// A ledger's metadata as one JSON object (ensembles keyed by their first entry id); the
/// bookie's admin endpoint serves the same object.
pub fn metadata_json(id: LedgerId, m: &LedgerMetadata) -> serde_json::Value {
    folio_http::ledger_metadata_json(id, m)
}

/// Reads ledgers for a bookie's admin endpoint (`/api/v1/ledger/read`) through the client
/// library, connected on first use. Opens without recovery (an admin look never fences a
/// writer) with the password kept in the ledger's metadata.
pub struct ClientLedgerReader {
    store: Arc<dyn MetadataStore>,
    client: tokio::sync::OnceCell<Client>,
    /// The recovers and decommissions started here, for the dashboard.
    operations: Arc<Mutex<Operations>>,
}

/// Recovers and decommissions by id (an index would move as finished ones are dropped).
#[derive(Default)]
struct Operations {
    next: u64,
    list: Vec<(u64, folio_http::RecoverProgress)>,
}

/// How many finished recovers the dashboard still shows.
const KEPT_OPERATIONS: usize = 10;

impl Operations {
    /// Records a new operation, dropping the oldest finished ones; its id.
    fn begin(&mut self, bookies: &[folio_types::BookieId], decommission: bool) -> u64 {
        while self.list.len() >= KEPT_OPERATIONS {
            match self.list.iter().position(|(_, o)| o.finished.is_some()) {
                Some(i) => {
                    self.list.remove(i);
                }
                None => break,
            }
        }
        let id = self.next;
        self.next += 1;
        self.list.push((
            id,
            folio_http::RecoverProgress::begin(bookies, decommission),
        ));
        id
    }
}

impl ClientLedgerReader {
    pub fn new(store: Arc<dyn MetadataStore>) -> Self {
        ClientLedgerReader {
            store,
            client: tokio::sync::OnceCell::new(),
            operations: Arc::default(),
        }
    }

    /// Opens `ledger` without recovery, with the password kept in its metadata.
    async fn open(&self, ledger: LedgerId) -> anyhow::Result<folio_client::ReadHandle> {
        let config = crate::client_tls::client_config()?;
        let client = self
            .client
            .get_or_try_init(|| Client::connect(self.store.clone(), config))
            .await?;
        let m = client.ledger_metadata(ledger).await?;
        let password = m.password.clone().unwrap_or_default();
        Ok(client
            .open_ledger(ledger, &password, OpenOptions::no_recovery())
            .await?)
    }

    async fn read_range(
        &self,
        ledger: LedgerId,
        first: EntryId,
        last: Option<EntryId>,
    ) -> anyhow::Result<Vec<(EntryId, bytes::Bytes)>> {
        let h = self.open(ledger).await?;
        let lac = h.last_add_confirmed();
        let last = last.map_or(lac, |l| l.min(lac));
        let mut out = Vec::new();
        let mut next = first;
        while next <= last {
            let end = last.min(next + READ_BATCH - 1);
            for e in h.read(next, end).await? {
                out.push((e.entry_id, e.payload));
            }
            next = end + 1;
        }
        Ok(out)
    }
}

impl folio_http::LedgerReader for ClientLedgerReader {
    fn read(
        &self,
        ledger: LedgerId,
        first: EntryId,
        last: Option<EntryId>,
    ) -> folio_http::ReadFuture<'_> {
        Box::pin(async move {
            self.read_range(ledger, first, last)
                .await
                .map_err(|e| format!("{e:#}"))
        })
    }

    fn operations(&self) -> Vec<folio_http::RecoverProgress> {
        let ops = self.operations.lock().unwrap();
        ops.list.iter().map(|(_, op)| op.clone()).collect()
    }

    fn sanity(&self, bookie: folio_types::BookieId) -> folio_http::SanityFuture<'_> {
        Box::pin(async move {
            // BookKeeper's SanityTestCommand: 10 entries, a 5 s timeout per call.
            let timeout = std::time::Duration::from_secs(5);
            crate::shell_ledger::sanity_check(self.store.clone(), &bookie, 10, timeout, || {})
                .await
                .map_err(|e| format!("{e:#}"))
        })
    }

    fn last_add_confirmed(&self, ledger: LedgerId) -> folio_http::LacFuture<'_> {
        Box::pin(async move {
            let h = self.open(ledger).await.map_err(|e| format!("{e:#}"))?;
            Ok(h.last_add_confirmed())
        })
    }

    fn start_recover(
        &self,
        bookies: Vec<folio_types::BookieId>,
        decommission: bool,
        delete_cookie: bool,
    ) -> Result<(), String> {
        let store = self.store.clone();
        let what = bookies
            .iter()
            .map(|b| b.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let id = self
            .operations
            .lock()
            .unwrap()
            .begin(&bookies, decommission);
        let operations = self.operations.clone();
        let first = operations
            .lock()
            .unwrap()
            .list
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, op)| op.clone());
        tokio::spawn(async move {
            let update = |f: &mut dyn FnMut(&mut folio_http::RecoverProgress)| {
                let mut ops = operations.lock().unwrap();
                if let Some((_, op)) = ops.list.iter_mut().find(|(i, _)| *i == id) {
                    f(op);
                }
            };
            // Other processes' dashboards see it through its operation record.
            let publisher = first.map(|op| folio_http::Publisher::start(store.clone(), op));
            let result = async {
                let client =
                    Client::connect(store.clone(), crate::client_tls::client_config()?).await?;
                let copy = folio_autorecovery::CopyOptions::default();
                let mut progress = |n: usize, report: Option<&folio_autorecovery::LedgerReport>| {
                    update(&mut |op| op.count(n, report));
                    if let Some(p) = &publisher {
                        p.update(|op| op.count(n, report));
                    }
                };
                let summary = if decommission {
                    folio_autorecovery::decommission(
                        &client,
                        &bookies[0],
                        delete_cookie,
                        &copy,
                        &mut progress,
                    )
                    .await?
                } else {
                    let sources = bookies.iter().cloned().collect();
                    let options = folio_autorecovery::RecoverOptions {
                        concurrency: 4,
                        copy,
                        ..Default::default()
                    };
                    let summary =
                        folio_autorecovery::recover(&client, &sources, &options, &mut progress)
                            .await?;
                    if delete_cookie && summary.failed.is_empty() {
                        for b in &bookies {
                            if let Ok(c) = store.read_cookie(b).await {
                                store.delete_cookie(b, c.version).await?;
                            }
                        }
                    }
                    summary
                };
                anyhow::Ok(summary)
            }
            .await;
            let finished = match result.map(|s| (s.failure(), s)) {
                Ok((None, s)) => {
                    let done = format!("{} ledgers, {} bytes copied", s.ledgers, s.bytes);
                    tracing::warn!("recovery of {what} done: {done}");
                    Ok(done)
                }
                Ok((Some(failure), _)) => {
                    tracing::warn!("recovery of {what}: {failure}");
                    Err(failure)
                }
                Err(e) => {
                    tracing::warn!("recovery of {what} failed: {e:#}");
                    Err(format!("{e:#}"))
                }
            };
            update(&mut |op| op.finished = Some(finished.clone()));
            if let Some(p) = publisher {
                p.finish().await;
            }
        });
        Ok(())
    }
}
