//! The shell's autorecovery commands, with BookKeeper's names and flags:
//! `listunderreplicated [-mr ID] [-emr ID] [-pmr] [-prw] [-c]`, `triggeraudit`,
//! `forceauditchecks [-calc] [-ppc] [-rc]`,
//! `queryautorecoverystatus [-v]`, `recover [-l L] [-sk] [-d] [-rate N] [-concurrency K]
//! <bookie,...>` (four ledgers at once by default) and
//! `decommissionbookie [-bookieid ID]`, `updateBookieInLedger -srcBookie B -destBookie B`.
//! `recover` and `decommissionbookie` draw a progress
//! bar on a terminal and print a line per ledger otherwise.

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::{anyhow, bail};
use folio_autorecovery::{
    CopyOptions, LedgerOutcome, LedgerReport, RecoverOptions, Throttle, decommission, recover,
};
use folio_client::Client;
use folio_metadata::MetadataStore;
use folio_types::BookieId;

/// `listunderreplicated`: the marked ledgers, filtered and annotated as asked.
pub async fn listunderreplicated(
    store: &dyn MetadataStore,
    flags: &[String],
) -> anyhow::Result<()> {
    let (mut only, mut except, mut print_missing, mut print_worker, mut count) =
        (None, None, false, false, false);
    let mut it = flags.iter().map(String::as_str);
    while let Some(f) = it.next() {
        match f {
            "-missingreplica" | "--missingreplica" | "-mr" => {
                only = Some(bookie_arg(it.next(), f)?);
            }
            "-excludingmissingreplica" | "--excludingmissingreplica" | "-emr" => {
                except = Some(bookie_arg(it.next(), f)?);
            }
            "-printmissingreplica" | "--printmissingreplica" | "-pmr" => print_missing = true,
            "-printreplicationworkerid" | "--printreplicationworkerid" | "-prw" => {
                print_worker = true;
            }
            "-c" | "--onlydisplayledgercount" => count = true,
            _ => bail!(
                "usage: listunderreplicated [-mr BOOKIE] [-emr BOOKIE] [-pmr] [-prw] [-c], got {f:?}"
            ),
        }
    }
    let mut n = 0;
    for ur in store.list_underreplicated().await? {
        if only
            .as_ref()
            .is_some_and(|b| !ur.missing_replicas.contains(b))
            || except
                .as_ref()
                .is_some_and(|b| ur.missing_replicas.contains(b))
        {
            continue;
        }
        n += 1;
        if count {
            continue;
        }
        println!("{}", ur.ledger_id);
        if print_missing {
            let missing: Vec<_> = ur.missing_replicas.iter().map(|b| b.to_string()).collect();
            println!("\tMissingReplica : [{}]", missing.join(", "));
        }
        if print_worker {
            match store.underreplicated_lock_holder(ur.ledger_id).await? {
                Some(holder) => println!("\tReplicationWorkerId : {holder}"),
                None => println!("\tReplicationWorkerId : (none)"),
            }
        }
    }
    if count {
        println!("{n}");
    }
    Ok(())
}

fn bookie_arg(value: Option<&str>, flag: &str) -> anyhow::Result<BookieId> {
    let v = value.ok_or_else(|| anyhow!("{flag} needs a bookie id"))?;
    Ok(BookieId::new(v)?)
}

/// `triggeraudit`: rewrites the lost-bookie delay with its current value, which the
/// Auditor takes as "audit now" (BookKeeper's `BookKeeperAdmin.triggerAudit`).
pub async fn triggeraudit(store: &dyn MetadataStore) -> anyhow::Result<()> {
    if !store.is_autorecovery_enabled().await? {
        bail!("autorecovery is disabled: enable it first (shell autorecovery -enable)");
    }
    if store.current_auditor().await?.is_none() {
        bail!("no Auditor is elected: start `folio autorecovery` (or a standalone cluster)");
    }
    let delay = store.lost_bookie_recovery_delay().await?.unwrap_or(0);
    store.set_lost_bookie_recovery_delay(delay).await?;
    println!("Triggered an audit");
    Ok(())
}

/// `forceauditchecks [-calc] [-ppc] [-rc]`: moves the chosen checks' last-run times 21 days
/// back, so that they are due (BookKeeper's `ForceAuditorChecksCmd`). BookKeeper's Auditor
/// reads them only when it starts, and must be restarted; Folio's reads them on every wake.
pub async fn forceauditchecks(store: &dyn MetadataStore, flags: &[String]) -> anyhow::Result<()> {
    use folio_metadata::AuditorCheck;
    let mut checks = BTreeSet::new();
    for f in flags {
        checks.insert(match f.as_str() {
            "-calc" | "--checkallledgerscheck" => AuditorCheck::CheckAllLedgers,
            "-ppc" | "--placementpolicycheck" => AuditorCheck::PlacementPolicy,
            "-rc" | "--replicascheck" => AuditorCheck::Replicas,
            other => bail!("forceauditchecks: unknown flag {other:?} (use -calc, -ppc, -rc)"),
        });
    }
    if checks.is_empty() {
        bail!(
            "forceauditchecks: name at least one check: -calc (checkAllLedgers), -ppc (placement policy), -rc (replicas)"
        );
    }
    const DAYS_21_MS: i64 = 21 * 24 * 3600 * 1000;
    let when = folio_metadata::driver::now_ms() - DAYS_21_MS;
    for check in checks {
        store.set_auditor_check_ctime(check, when).await?;
        println!(
            "{} set to {when} (21 days ago): the check is due",
            check.record_name()
        );
    }
    Ok(())
}

/// `queryautorecoverystatus [-v]`: which marked ledgers a worker is repairing now, and who
/// (the lock holder); `-v` lists the queued ones too.
pub async fn queryautorecoverystatus(
    store: &dyn MetadataStore,
    flags: &[String],
) -> anyhow::Result<()> {
    let verbose = match flags.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => false,
        ["-v" | "--verbose"] => true,
        _ => bail!("usage: queryautorecoverystatus [-v], got {flags:?}"),
    };
    let mut any = false;
    for ur in store.list_underreplicated().await? {
        let holder = store.underreplicated_lock_holder(ur.ledger_id).await?;
        if holder.is_some() || verbose {
            any = true;
            let missing: Vec<_> = ur.missing_replicas.iter().map(|b| b.to_string()).collect();
            match holder {
                Some(h) => println!(
                    "Ledger {} : InProgress by {h}, missing replicas [{}]",
                    ur.ledger_id,
                    missing.join(", ")
                ),
                None => println!(
                    "Ledger {} : Queued, missing replicas [{}]",
                    ur.ledger_id,
                    missing.join(", ")
                ),
            }
        }
    }
    if !any {
        println!("No Ledgers are being re-replicated");
    }
    Ok(())
}

/// Prints what recover and decommission do, a bar on a terminal and a line per ledger
/// otherwise, and publishes it to every dashboard through `published`'s operation record.
fn reporter(
    published: &folio_http::Publisher,
) -> impl FnMut(usize, Option<&LedgerReport>) + Send + '_ {
    let mut bar = None;
    let mut copied = 0u64;
    move |total, report| {
        published.update(|op| op.count(total, report));
        let bar = bar.get_or_insert_with(|| crate::progress::bar(total as u64, "ledgers"));
        let Some(r) = report else { return };
        bar.inc(1);
        if let LedgerOutcome::Replicated { bytes, .. } = &r.outcome {
            // Bytes next to ledgers: one huge ledger moves the bar by one step.
            copied += bytes;
            let secs = bar.elapsed().as_secs_f64().max(0.001);
            bar.set_message(format!(
                "ledgers, {} copied ({}/s)",
                indicatif::HumanBytes(copied),
                indicatif::HumanBytes((copied as f64 / secs) as u64)
            ));
        }
        let line = match &r.outcome {
            LedgerOutcome::Replicated { entries, bytes } => {
                format!(
                    "ledger {}: recovered ({entries} entries, {bytes} bytes)",
                    r.ledger
                )
            }
            LedgerOutcome::Deleted => format!("ledger {}: deleted meanwhile", r.ledger),
            LedgerOutcome::OpenFragmentDamaged(_) => {
                format!("ledger {}: open, skipped", r.ledger)
            }
            LedgerOutcome::Failed(reason) => {
                format!("ledger {}: NOT recovered: {reason}", r.ledger)
            }
        };
        if bar.is_hidden() {
            println!("{line}");
        } else {
            bar.println(line);
        }
    }
}

fn copy_options(rate: Option<u64>) -> CopyOptions {
    CopyOptions {
        throttle: rate.map(|r| Arc::new(Throttle::new(r))),
        ..CopyOptions::default()
    }
}

/// `recover [-l L] [-sk] [-d] [-q] [-f] [-rate N] <bookie[,bookie...]>`: copies every replica
/// held by the given bookies elsewhere, client side (BookKeeper's `recoverBookieData`).
pub async fn recover_cmd(store: Arc<dyn MetadataStore>, flags: &[String]) -> anyhow::Result<()> {
    let mut options = RecoverOptions {
        concurrency: 4,
        ..RecoverOptions::default()
    };
    let (mut delete_cookie, mut rate, mut sources) = (false, None, BTreeSet::new());
    let mut it = flags.iter().map(String::as_str);
    while let Some(f) = it.next() {
        match f {
            "-ledger" | "--ledger" | "-l" => {
                let v = it.next().ok_or_else(|| anyhow!("{f} needs a ledger id"))?;
                options.ledger = Some(v.parse().map_err(|_| anyhow!("invalid ledger id {v:?}"))?);
            }
            "-skipOpenLedgers" | "--skipOpenLedgers" | "-sk" => options.skip_open = true,
            "-deleteCookie" | "--deleteCookie" | "-d" => delete_cookie = true,
            // Asked-for confirmation and dry runs are not offered: accepted and ignored.
            "-query" | "-q" | "-force" | "-f" | "-skipUnrecoverableLedgers" | "-sku" => {}
            "-concurrency" | "--concurrency" => {
                let v = it.next().ok_or_else(|| anyhow!("{f} needs a number"))?;
                options.concurrency = v
                    .parse()
                    .map_err(|_| anyhow!("invalid concurrency {v:?}"))?;
            }
            "-replicate-rate" | "-rate" => {
                let v = it.next().ok_or_else(|| anyhow!("{f} needs a number"))?;
                rate = Some(v.parse().map_err(|_| anyhow!("invalid rate {v:?}"))?);
            }
            list => {
                for b in list.split(',').filter(|b| !b.is_empty()) {
                    sources.insert(BookieId::new(b)?);
                }
            }
        }
    }
    if sources.is_empty() {
        bail!("usage: recover [-l LEDGER] [-sk] [-d] [-rate BYTES/S] <bookie[,bookie...]>");
    }
    options.copy = copy_options(rate);
    let client = Client::connect(store.clone(), crate::client_tls::client_config()?).await?;
    let bookies: Vec<BookieId> = sources.iter().cloned().collect();
    let published = folio_http::Publisher::start(
        store.clone(),
        folio_http::RecoverProgress::begin(&bookies, false),
    );
    let summary = recover(&client, &sources, &options, &mut reporter(&published)).await;
    published.finish().await;
    let summary = summary?;
    println!(
        "Recovered {} ledger(s): {} entries, {} bytes copied; {} not recovered",
        summary.ledgers - summary.failed.len(),
        summary.entries,
        summary.bytes,
        summary.failed.len()
    );
    if let Some(failure) = summary.failure() {
        bail!("{failure}");
    }
    if delete_cookie {
        for b in &sources {
            if let Ok(c) = store.read_cookie(b).await {
                store.delete_cookie(b, c.version).await?;
            }
        }
    }
    Ok(())
}

/// `decommissionbookie [-bookieid ID]`: moves every replica off a stopped bookie and
/// deletes its cookie.
pub async fn decommissionbookie(
    store: Arc<dyn MetadataStore>,
    flags: &[String],
) -> anyhow::Result<()> {
    let bookie = match flags.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["-bookieid" | "--bookieid", id] => BookieId::new(id)?,
        _ => bail!(
            "usage: decommissionbookie -bookieid <host:port> (the bookie must be stopped first)"
        ),
    };
    let client = Client::connect(store.clone(), crate::client_tls::client_config()?).await?;
    let published = folio_http::Publisher::start(
        store,
        folio_http::RecoverProgress::begin(std::slice::from_ref(&bookie), true),
    );
    let summary = decommission(
        &client,
        &bookie,
        true,
        &copy_options(None),
        &mut reporter(&published),
    )
    .await;
    published.finish().await;
    let summary = summary?;
    println!(
        "Decommissioned bookie {bookie}: {} ledger(s), {} entries, {} bytes moved; cookie deleted",
        summary.ledgers, summary.entries, summary.bytes
    );
    Ok(())
}

/// `updateBookieInLedger -srcBookie B -destBookie B [-updatespersec N] [-limit N] [-verbose]`:
/// every ledger naming the source bookie names the destination instead (metadata only; the
/// data must already answer at the destination). `-maxOutstandingReads` and
/// `-printprogress` are accepted for BookKeeper's scripts.
pub async fn update_bookie_in_ledger(
    store: Arc<dyn MetadataStore>,
    args: &[String],
) -> anyhow::Result<()> {
    const C: &str = "updateBookieInLedger";
    let flags = crate::shell_ledger::Flags::parse(
        C,
        args,
        &[
            ("srcBookie", &["sb", "srcbookie"], true),
            ("destBookie", &["db", "destbookie"], true),
            ("updatespersec", &["s"], true),
            ("limit", &["l"], true),
            ("verbose", &["v"], false),
            ("printprogress", &["p"], true),
            ("maxOutstandingReads", &["r"], true),
        ],
    )?;
    let (Some(src), Some(dst)) = (
        flags.get::<String>(C, "srcBookie")?,
        flags.get::<String>(C, "destBookie")?,
    ) else {
        bail!(
            "usage: {C} -srcBookie <bookie id> -destBookie <bookie id> [-updatespersec N] [-limit N] [-verbose]"
        );
    };
    let (src, dst) = (BookieId::new(src)?, BookieId::new(dst)?);
    let options = folio_autorecovery::RenameOptions {
        updates_per_sec: flags.get(C, "updatespersec")?.unwrap_or(5),
        limit: flags.get(C, "limit")?,
    };
    let progress = flags.get::<u64>(C, "printprogress")?;
    rename_ledgers(
        store,
        C,
        &src,
        &dst,
        &options,
        flags.has("verbose"),
        progress,
    )
    .await
}

/// Moves every ledger's metadata from `src` to `dst` (`updateBookieInLedger`, and
/// `updateledgers` between a bookie's address- and host-name-based ids): with `verbose`
/// a line per ledger, and every `print_progress` seconds the count so far.
pub(crate) async fn rename_ledgers(
    store: Arc<dyn MetadataStore>,
    cmd: &str,
    src: &BookieId,
    dst: &BookieId,
    options: &folio_autorecovery::RenameOptions,
    verbose: bool,
    print_progress: Option<u64>,
) -> anyhow::Result<()> {
    let client = Client::connect(store, crate::client_tls::client_config()?).await?;
    let every = print_progress.map(std::time::Duration::from_secs);
    let mut last = std::time::Instant::now();
    let mut count = 0u64;
    let summary = folio_autorecovery::update_bookie_in_ledgers(&client, src, dst, options, |l| {
        count += 1;
        if verbose {
            println!("Updated ledger {l}");
            if every.is_some_and(|e| last.elapsed() >= e) {
                println!("Number of ledgers updated so far: {count}");
                last = std::time::Instant::now();
            }
        }
    })
    .await?;
    for l in &summary.skipped {
        eprintln!("{cmd}: ledger {l} left naming {src}: an ensemble of it already holds {dst}");
    }
    println!("Number of ledgers updated: {}", summary.updated.len());
    let set = client.metadata().list_bookies().await?;
    if !set.writable.contains(dst) && !set.readonly.contains(dst) {
        eprintln!(
            "{cmd}: warning: bookie {dst} is not registered now: nothing serves those ledgers' copies until it is"
        );
    }
    Ok(())
}
