//! `folio bench rereplicate`: how fast autorecovery's machinery restores the copies a bookie
//! held: every replica on `--bookie` (stopped, or still up) copied elsewhere, `--concurrency`
//! ledgers at a time, through the same repair path the ReplicationWorker takes. Prints
//! ledgers, entries, bytes, seconds, MB/s and ledgers per minute (`--json`: one object).
//! `scripts/bench-rereplicate` sets up the cluster and compares with the disk's limit.

use std::collections::BTreeSet;
use std::time::Instant;

use anyhow::{Context, bail};
use folio_autorecovery::{RecoverOptions, recover};
use folio_client::Client;
use folio_types::BookieId;

use crate::metadata_connect::{self, Missing};

#[derive(clap::Args, Debug)]
pub struct RereplicateArgs {
    /// The bookie whose replicas are restored elsewhere.
    #[arg(long)]
    pub bookie: String,
    /// Ledgers repaired at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Copy through the targets' journals, as BookKeeper's worker does, instead of with
    /// deferred sync and one ForceLedger per replica (the default).
    #[arg(long)]
    pub journal_copies: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: RereplicateArgs, metadata: Option<String>) -> anyhow::Result<()> {
    let uri = metadata_connect::require_uri(metadata.as_deref())?.to_string();
    let bookie = BookieId::new(args.bookie.as_str())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let store = metadata_connect::connect(&uri, Missing::Refuse).await?;
        let client = Client::connect(store.clone(), crate::client_tls::client_config()?).await?;
        let options = RecoverOptions {
            concurrency: args.concurrency.max(1),
            copy: folio_autorecovery::CopyOptions {
                deferred_sync: !args.journal_copies,
                ..Default::default()
            },
            ..RecoverOptions::default()
        };
        let started = Instant::now();
        let summary = recover(&client, &BTreeSet::from([bookie.clone()]), &options, &mut |_, _| {})
            .await?;
        let seconds = started.elapsed().as_secs_f64();
        let _ = store.close().await;
        if let Some(failure) = summary.failure() {
            bail!("{failure}");
        }
        let mb_per_sec = summary.bytes as f64 / 1e6 / seconds.max(1e-9);
        let ledgers_per_minute = summary.ledgers as f64 * 60.0 / seconds.max(1e-9);
        if args.json {
            println!(
                "{}",
                serde_json::json!({
                    "bookie": bookie.to_string(),
                    "concurrency": options.concurrency,
                    "deferred_sync": options.copy.deferred_sync,
                    "ledgers": summary.ledgers,
                    "entries": summary.entries,
                    "bytes": summary.bytes,
                    "seconds": seconds,
                    "mb_per_sec": mb_per_sec,
                    "ledgers_per_minute": ledgers_per_minute,
                })
            );
        } else {
            println!(
                "rereplicate {bookie}: {} ledgers, {} entries, {} bytes in {seconds:.2} s: {mb_per_sec:.1} MB/s, {ledgers_per_minute:.0} ledgers/min ({} at once)",
                summary.ledgers, summary.entries, summary.bytes, options.concurrency
            );
        }
        Ok(())
    })
}
