//! The Auditor's shell: stands in the Auditor election, and while elected feeds
//! [`AuditorCore`] with bookie changes, the lost-bookie delay and the clock, and runs the
//! audits it asks for. An audit reads every ledger's metadata and marks each ledger naming
//! an unavailable bookie under-replicated with those bookies (no entry reads). The
//! periodic checks that ask the bookies themselves (checkAllLedgers, the replicas check)
//! and judge placement are in `auditor_checks`; each runs on its interval from the last
//! run recorded in the store.
//!
//! A new Auditor audits at once (BookKeeper's bookie check runs at start), so one that
//! takes over from an Auditor killed mid-audit finishes its work.
//!
//! Time, as in the ReplicationWorker (`worker`) and the client: the polls, the lost-bookie
//! delay and the check schedule run on `tokio::time` (`sleep`, `sleep_until`, its
//! `Instant`), which the simulator pauses, so they are virtual there; the checks' ctime
//! records are wall-clock times read through the client's `folio_env::Clock`
//! ([`Client::clock`]). That `Clock` has no async sleep (ARCHITECTURE.md, "Seams").

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use folio_client::Client;
use folio_metadata::{AuditorCheck, BookieSet, MetadataStore};
use folio_types::{BookieId, LedgerId};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::auditor_checks::{Sweep, check_placement, sweep_replicas};
use crate::auditor_core::{AuditorCore, Decision};
use crate::config::AutoRecoveryConfig;
use crate::stats::Stats;

/// What the Auditor of this process has done.
#[derive(Debug, Default)]
pub struct AuditorStatus {
    /// Whether this process is the Auditor now.
    pub elected: AtomicBool,
    /// Audits run (BookKeeper's `AUDIT_BOOKIES_TIME` count).
    pub audits: AtomicU64,
    /// Ledgers marked under-replicated by audits and checks (`NUM_UNDER_REPLICATED_LEDGERS`).
    pub ledgers_marked: AtomicU64,
    /// Ledgers the check of all ledgers read (`NUM_LEDGERS_CHECKED`).
    pub ledgers_checked: AtomicU64,
    /// Checks of all ledgers completed (`CHECK_ALL_LEDGERS_TIME` count).
    pub checks_of_all_ledgers: AtomicU64,
    /// Replicas checks completed (`REPLICAS_CHECK_TIME` count).
    pub replicas_checks: AtomicU64,
    /// At the last replicas check, the closed ledgers whose worst entry had fewer than Qw
    /// copies, fewer than Qa, and none (BookKeeper's three replicas gauges).
    pub ledgers_below_write_quorum: AtomicU64,
    pub ledgers_below_ack_quorum: AtomicU64,
    pub ledgers_with_no_replica: AtomicU64,
    /// Placement policy checks completed (`PLACEMENT_POLICY_CHECK_TIME` count).
    pub placement_checks: AtomicU64,
    /// At the last placement policy check, the closed ledgers with an ensemble that fails
    /// the policy, and those that meet it only softly.
    pub ledgers_not_adhering: AtomicU64,
    pub ledgers_softly_adhering: AtomicU64,
    /// Audits delayed for a lost bookie (`NUM_BOOKIE_AUDITS_DELAYED`).
    pub audits_delayed: AtomicU64,
    /// Seconds until the delayed audit, or `u64::MAX` when none is pending.
    pub delayed_audit_in_secs: AtomicU64,
}

/// A running Auditor candidate. Call [`Auditor::stop`] to withdraw.
pub struct Auditor {
    status: Arc<AuditorStatus>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Auditor {
    /// Joins the election as `candidate` and audits whenever elected.
    pub fn start(client: Client, config: AutoRecoveryConfig, candidate: BookieId) -> Auditor {
        let status = Arc::new(AuditorStatus::default());
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run(client, config, candidate, stopped, status.clone()));
        Auditor { status, stop, task }
    }

    pub fn status(&self) -> &Arc<AuditorStatus> {
        &self.status
    }

    /// Ends the Auditor at once, as a killed process: its task is aborted wherever it is
    /// (mid-audit, mid-check); its election node goes with its metadata session.
    pub fn kill(self) {
        self.task.abort();
    }

    /// Resigns and waits for the Auditor to end.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

async fn run(
    client: Client,
    config: AutoRecoveryConfig,
    candidate: BookieId,
    mut stop: watch::Receiver<bool>,
    status: Arc<AuditorStatus>,
) {
    let stats = Stats::new(&config.metrics_prefix);
    while !*stop.borrow() {
        stats.auditor_count("election_attempts", 1);
        let candidacy = match client.metadata().join_auditor_election(&candidate).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("auditor election: {e}");
                tokio::select! {
                    _ = tokio::time::sleep(config.rereplicate_backoff) => continue,
                    _ = stop.changed() => return,
                }
            }
        };
        let mut leader = candidacy.leadership();
        let elected = tokio::select! {
            r = leader.wait_for(|l| *l) => r.is_ok(),
            _ = stop.changed() => false,
        };
        if elected {
            tracing::info!(%candidate, "elected Auditor");
            status.elected.store(true, Ordering::Relaxed);
            if let Err(e) = lead(&client, &config, &mut leader, &mut stop, &status, &stats).await {
                tracing::warn!("auditor: {e}");
            }
            status.elected.store(false, Ordering::Relaxed);
        }
        let _ = candidacy.resign().await;
        if !*stop.borrow() {
            // Lost the session or failed: stand again after a pause.
            tokio::select! {
                _ = tokio::time::sleep(config.poll_interval) => {}
                _ = stop.changed() => return,
            }
        }
    }
}

fn available(set: &BookieSet) -> BTreeSet<BookieId> {
    set.writable.union(&set.readonly).cloned().collect()
}

/// Acts as the Auditor until leadership is lost, `stop` is set, or an error.
async fn lead(
    client: &Client,
    config: &AutoRecoveryConfig,
    leader: &mut watch::Receiver<bool>,
    stop: &mut watch::Receiver<bool>,
    status: &AuditorStatus,
    stats: &Stats,
) -> folio_metadata::Result<()> {
    let metadata = client.metadata().clone();
    if metadata.lost_bookie_recovery_delay().await?.is_none() {
        metadata
            .set_lost_bookie_recovery_delay(config.lost_bookie_recovery_delay)
            .await?;
    }
    let mut bookies = metadata.watch_bookies().await?;
    let mut known: BTreeSet<BookieId> = metadata.list_cookies().await?.into_iter().collect();
    known.extend(available(&bookies.borrow_and_update()));
    let mut core = AuditorCore::new(
        known,
        Duration::from_secs(u64::from(config.lost_bookie_recovery_delay)),
    );
    if let Some(d) = metadata.lost_bookie_recovery_delay_versioned().await? {
        core.on_delay(d.value, d.version, Instant::now());
    }
    let mut decision = core.on_bookies(&available(&bookies.borrow()), Instant::now());
    if decision == Decision::Wait {
        // The bookie check runs at start.
        decision = core.on_periodic_check();
    }
    let mut next_bookie_check = after(config.bookie_check_interval);
    let mut periodic = [
        (
            AuditorCheck::CheckAllLedgers,
            config.check_all_ledgers_interval,
        ),
        (AuditorCheck::Replicas, config.replicas_check_interval),
        (
            AuditorCheck::PlacementPolicy,
            config.placement_policy_check_interval,
        ),
    ]
    .map(|(check, interval)| Periodic {
        check,
        interval,
        next: None,
    });
    for p in &mut periodic {
        p.next = check_due(&metadata, client, p, Instant::now()).await?;
    }
    let mut last_gauge: Option<Instant> = None;
    loop {
        if decision == Decision::Audit {
            audit(&metadata, config, leader, stop, status, stats).await?;
            // A stop seen while the audit waited for autorecovery to be enabled again.
            if *stop.borrow() {
                return Ok(());
            }
            last_gauge = None;
        }
        // The current queue length, at most every ten seconds (listing marks walks the
        // store).
        if last_gauge.is_none_or(|t: Instant| t.elapsed() >= GAUGE_INTERVAL) {
            stats.under_replicated(metadata.list_underreplicated().await?.len());
            last_gauge = Some(Instant::now());
        }
        decision = Decision::Wait;
        let now = Instant::now();
        status.delayed_audit_in_secs.store(
            core.due()
                .map_or(u64::MAX, |d| d.saturating_duration_since(now).as_secs()),
            Ordering::Relaxed,
        );
        let tick = now + config.poll_interval;
        // A due periodic check waits while a delayed audit is pending (BookKeeper skips
        // periodic checks then, PR #3818); it runs at the first wake after that audit.
        let checks_wake = periodic
            .iter()
            .filter_map(|p| p.next)
            .filter(|_| core.due().is_none())
            .min();
        let wake = [Some(tick), core.due(), next_bookie_check, checks_wake]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(tick);
        tokio::select! {
            r = leader.changed() => {
                if r.is_err() || !*leader.borrow() {
                    tracing::info!("no longer the Auditor");
                    return Ok(());
                }
            }
            _ = stop.changed() => return Ok(()),
            r = bookies.changed() => {
                if r.is_err() {
                    return Err(folio_metadata::MetadataError::SessionExpired);
                }
                let before = core.due();
                decision = core.on_bookies(&available(&bookies.borrow_and_update()), Instant::now());
                if before.is_none() && core.due().is_some() {
                    status.audits_delayed.fetch_add(1, Ordering::Relaxed);
                    stats.auditor_count("NUM_BOOKIE_AUDITS_DELAYED", 1);
                }
                if before.is_some() && core.due().is_none() && decision == Decision::Wait {
                    stats.auditor_count("NUM_DELAYED_BOOKIE_AUDITS_CANCELLED", 1);
                }
            }
            _ = tokio::time::sleep_until(wake) => {
                let now = Instant::now();
                if let Some(d) = metadata.lost_bookie_recovery_delay_versioned().await? {
                    decision = core.on_delay(d.value, d.version, now);
                }
                if decision == Decision::Wait {
                    decision = core.on_tick(now);
                }
                if next_bookie_check.is_some_and(|t| t <= now) {
                    next_bookie_check = after(config.bookie_check_interval);
                    if decision == Decision::Wait {
                        decision = core.on_periodic_check();
                    }
                }
                for p in &mut periodic {
                    // Re-read, so that `forceauditchecks` (or another Auditor's run) counts
                    // now.
                    p.next = check_due(&metadata, client, p, now).await?;
                    if p.next.is_some_and(|t| t <= now) && core.due().is_none() {
                        run_check(client, p.check, status, stats).await?;
                        metadata
                            .set_auditor_check_ctime(p.check, wall_clock_ms(client))
                            .await?;
                        p.next = check_due(&metadata, client, p, Instant::now()).await?;
                    }
                }
            }
        }
    }
}

/// How often the Auditor refreshes the under-replicated gauge.
const GAUGE_INTERVAL: Duration = Duration::from_secs(10);

fn after(interval: Duration) -> Option<Instant> {
    (!interval.is_zero()).then(|| Instant::now() + interval)
}

/// One of the Auditor's periodic checks that record their last run in the store.
struct Periodic {
    check: AuditorCheck,
    /// Zero: off.
    interval: Duration,
    next: Option<Instant>,
}

/// When `p` is next due: its interval after the last run recorded in the store (by this
/// Auditor or an earlier one), at once if it never ran, never if its interval is 0.
/// BookKeeper computes the same initial delay from the check's ctime znode; reading it on
/// every wake also lets `forceauditchecks` take effect without restarting the Auditor.
async fn check_due(
    metadata: &Arc<dyn MetadataStore>,
    client: &Client,
    p: &Periodic,
    now: Instant,
) -> folio_metadata::Result<Option<Instant>> {
    if p.interval.is_zero() {
        return Ok(None);
    }
    let Some(last) = metadata.auditor_check_ctime(p.check).await? else {
        return Ok(Some(now));
    };
    // A ctime in the future (another host's clock) counts as now.
    let since = Duration::from_millis(wall_clock_ms(client).saturating_sub(last).max(0) as u64);
    Ok(Some(now + p.interval.saturating_sub(since)))
}

/// Runs one periodic check and publishes what it found under BookKeeper's names.
async fn run_check(
    client: &Client,
    check: AuditorCheck,
    status: &AuditorStatus,
    stats: &Stats,
) -> folio_metadata::Result<()> {
    let started = Instant::now();
    match check {
        AuditorCheck::CheckAllLedgers => {
            sweep_replicas(client, Sweep::AllLedgers, status, stats).await?;
            status.checks_of_all_ledgers.fetch_add(1, Ordering::Relaxed);
            stats.auditor_time("CHECK_ALL_LEDGERS_TIME", started.elapsed());
        }
        AuditorCheck::Replicas => {
            let c = sweep_replicas(client, Sweep::ClosedLedgers, status, stats).await?;
            for (field, name, v) in [
                (
                    &status.ledgers_below_write_quorum,
                    "NUM_LEDGERS_HAVING_LESS_THAN_WQ_REPLICAS_OF_AN_ENTRY",
                    c.below_write_quorum,
                ),
                (
                    &status.ledgers_below_ack_quorum,
                    "NUM_LEDGERS_HAVING_LESS_THAN_AQ_REPLICAS_OF_AN_ENTRY",
                    c.below_ack_quorum,
                ),
                (
                    &status.ledgers_with_no_replica,
                    "NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY",
                    c.no_replica,
                ),
            ] {
                field.store(v, Ordering::Relaxed);
                stats.auditor_gauge(name, v);
            }
            status.replicas_checks.fetch_add(1, Ordering::Relaxed);
            stats.auditor_time("REPLICAS_CHECK_TIME", started.elapsed());
            tracing::info!(?c, "replicas check done");
        }
        AuditorCheck::PlacementPolicy => {
            let c = check_placement(client).await?;
            status
                .ledgers_not_adhering
                .store(c.not_adhering, Ordering::Relaxed);
            status
                .ledgers_softly_adhering
                .store(c.softly_adhering, Ordering::Relaxed);
            stats.auditor_gauge(
                "NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY",
                c.not_adhering,
            );
            stats.auditor_gauge(
                "NUM_LEDGERS_SOFTLY_ADHERING_TO_PLACEMENT_POLICY",
                c.softly_adhering,
            );
            status.placement_checks.fetch_add(1, Ordering::Relaxed);
            stats.auditor_time("PLACEMENT_POLICY_CHECK_TIME", started.elapsed());
            tracing::info!(?c, "placement policy check done");
        }
    }
    Ok(())
}

/// Milliseconds since the Unix epoch, for the ctime records (wall-clock times shared with
/// BookKeeper's Auditor, so not the monotonic clock the timers use), from the client's
/// clock seam (virtual under the simulator).
fn wall_clock_ms(client: &Client) -> i64 {
    client.clock().unix_millis() as i64
}

/// Waits while autorecovery is disabled cluster-wide (BookKeeper's `disable` znode); false
/// if meanwhile this Auditor was asked to stop or lost its leadership, so that a disabled
/// cluster never holds up a shutdown.
async fn wait_enabled(
    metadata: &Arc<dyn MetadataStore>,
    config: &AutoRecoveryConfig,
    leader: &watch::Receiver<bool>,
    stop: &mut watch::Receiver<bool>,
) -> folio_metadata::Result<bool> {
    while !metadata.is_autorecovery_enabled().await? {
        if *stop.borrow() || !*leader.borrow() {
            return Ok(false);
        }
        tokio::select! {
            _ = tokio::time::sleep(config.poll_interval) => {}
            _ = stop.changed() => return Ok(false),
        }
    }
    Ok(true)
}

/// Marks every ledger that names an unavailable bookie, with those bookies.
async fn audit(
    metadata: &Arc<dyn MetadataStore>,
    config: &AutoRecoveryConfig,
    leader: &watch::Receiver<bool>,
    stop: &mut watch::Receiver<bool>,
    status: &AuditorStatus,
    stats: &Stats,
) -> folio_metadata::Result<()> {
    if !wait_enabled(metadata, config, leader, stop).await? {
        return Ok(());
    }
    let started = Instant::now();
    let set = metadata.list_bookies().await?;
    let available = available(&set);
    let mut marked = 0u64;
    let mut after: Option<LedgerId> = None;
    loop {
        if !*leader.borrow() {
            return Ok(());
        }
        let page = metadata.list_ledgers(after, 1000).await?;
        for ledger in page.ledgers {
            let meta = match metadata.read_ledger(ledger).await {
                Ok(m) => m.value,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            };
            let lost: Vec<BookieId> = meta
                .all_bookies()
                .into_iter()
                .filter(|b| !available.contains(b))
                .collect();
            if !lost.is_empty() {
                metadata.mark_underreplicated(ledger, &lost).await?;
                marked += 1;
            }
        }
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    status.audits.fetch_add(1, Ordering::Relaxed);
    status.ledgers_marked.fetch_add(marked, Ordering::Relaxed);
    stats.auditor_count("NUM_UNDER_REPLICATED_LEDGERS", marked);
    stats.auditor_time("AUDIT_BOOKIES_TIME", started.elapsed());
    stats.auditor_time("URL_PUBLISH_TIME_FOR_LOST_BOOKIE", started.elapsed());
    tracing::info!(marked, "audit done");
    Ok(())
}
