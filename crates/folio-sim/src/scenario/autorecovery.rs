//! Autorecovery in a run (invariant 10): an Auditor and one or two ReplicationWorkers,
//! each a "process" of its own (its own client and metadata session, behind the run's
//! metadata outages), started with the cluster. The injector kills them (the task aborted
//! wherever it is, the session expired with it: election node and locks gone) or expires
//! their session (the process lingers, every metadata call failing, until its supervisor
//! replaces it), and starts a new incarnation a little later.
//!
//! A bookie is lost for good in every such run: the one whose disk is wiped (mid-run, or
//! at the end if none was), refused by its cookie and reformatted only after
//! autorecovery has healed. At quiescence the run waits (virtual time, bounded) until the
//! under-replication queue is empty, no ledger names the lost bookie and a check of all
//! ledgers begun after quiescence has ended, then asks every bookie of every write set of
//! every ledger (those that named the lost bookie and the others) for every entry of every
//! fragment: each must return it with a valid digest.

use folio_metadata::prelude::*;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use folio_autorecovery::{
    Auditor, AuditorStatus, AutoRecoveryConfig, Worker, WorkerStatus, fragments,
};
use folio_client::ReplicaAnswer;
use folio_metadata::mem::MemMetadataStore;
use folio_proto::DigestManager;
use folio_types::metadata::DigestType;
use folio_types::{BookieId, LedgerId};

use super::{PASSWORD, World};

/// Which seeds run autorecovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoRecoveryRuns {
    /// None (the runs of before autorecovery, draw for draw).
    Off,
    /// Half the seeds, chosen by a hash of the seed (so the other half run exactly as
    /// without autorecovery).
    Half,
    /// Every seed.
    Every,
}

impl AutoRecoveryRuns {
    /// Whether `seed` runs autorecovery. Drawn from the seed alone, never from the run's
    /// generator, so the other seeds keep every draw they had.
    pub fn on(self, seed: u64) -> bool {
        match self {
            AutoRecoveryRuns::Off => false,
            AutoRecoveryRuns::Every => true,
            AutoRecoveryRuns::Half => {
                crate::rng::SimRng::new(seed ^ 0x6175_746f_7265_6376).chance(1, 2)
            }
        }
    }
}

/// A fast configuration: short grace period and polls (virtual time, so they cost
/// little), failed ledgers retried within seconds. The lost-bookie delay is drawn from
/// the seed (not the run's generator): none in half the runs, else 2, 6 or 20 s, so that
/// the bookies the injector crashes and restarts are sometimes back within it (the audit
/// is cancelled) and sometimes not (it runs, naming a bookie that returns meanwhile).
pub(super) fn config(seed: u64, skip_copy: bool) -> AutoRecoveryConfig {
    let draw = crate::rng::SimRng::new(seed ^ 0x6465_6c61_7973);
    let lost_bookie_recovery_delay = if draw.chance(1, 2) {
        0
    } else {
        [2, 6, 20][folio_env::Rng::below(&draw, 3) as usize]
    };
    AutoRecoveryConfig {
        lost_bookie_recovery_delay,
        open_ledger_grace_period: Duration::from_secs(3),
        poll_interval: Duration::from_millis(300),
        rereplicate_backoff: Duration::from_millis(500),
        failed_ledger_max_backoff: Duration::from_secs(4),
        bookie_check_interval: Duration::from_secs(15),
        // On: it finds the copies an ack quorum smaller than the write quorum never got
        // (a dropped add the writer did not retry) in ledgers whose mark was handled
        // while they were open (seed 644 with autorecovery on every seed).
        check_all_ledgers_interval: Duration::from_secs(10),
        worker_concurrency: 2,
        skip_copy_for_tests: skip_copy,
        ..AutoRecoveryConfig::default()
    }
}

/// Which process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Auditor,
    Worker(usize),
}

/// A running process: what it runs, and its metadata session (to expire it).
struct Proc<T> {
    run: T,
    session: MemMetadataStore,
}

/// The autorecovery processes of a run.
pub(super) struct Processes {
    cfg: AutoRecoveryConfig,
    auditor: Option<Proc<Auditor>>,
    workers: Vec<Option<Proc<Worker>>>,
    /// Processes that failed, and when their supervisor starts a new incarnation; a
    /// session-expired one lingers (still in `auditor`/`workers`) until then.
    restarts: Vec<(Role, tokio::time::Instant)>,
    incarnation: u64,
    statuses: Vec<Arc<WorkerStatus>>,
    auditor_statuses: Vec<Arc<AuditorStatus>>,
}

impl Processes {
    pub(super) fn new(cfg: AutoRecoveryConfig, workers: usize) -> Processes {
        Processes {
            cfg,
            auditor: None,
            workers: (0..workers).map(|_| None).collect(),
            restarts: Vec::new(),
            incarnation: 0,
            statuses: Vec::new(),
            auditor_statuses: Vec::new(),
        }
    }

    pub(super) fn workers(&self) -> usize {
        self.workers.len()
    }

    fn auditor_status(&self) -> Option<Arc<AuditorStatus>> {
        self.auditor.as_ref().map(|a| a.run.status().clone())
    }

    /// Ledgers repaired and entries copied, over every worker incarnation.
    pub(super) fn repaired(&self) -> (u64, u64) {
        self.statuses.iter().fold((0, 0), |(l, e), s| {
            (
                l + s.ledgers_replicated.load(Ordering::Relaxed),
                e + s.entries_written.load(Ordering::Relaxed),
            )
        })
    }
}

impl World {
    /// Starts (or starts again) one autorecovery process, ending what ran in its place.
    pub(super) fn start_process(&self, role: Role) {
        let Some(ar) = &self.ar else { return };
        let (client, session) = self.client_session();
        let rng = self.rng.fork();
        let mut p = ar.lock();
        p.incarnation += 1;
        let n = p.incarnation;
        let cfg = p.cfg.clone();
        match role {
            Role::Auditor => {
                if let Some(old) = p.auditor.take() {
                    old.session.expire_session();
                    old.run.kill();
                }
                let id = BookieId::new(format!("auditor-{n}:0")).expect("valid id");
                let run = Auditor::start(client, cfg, id);
                p.auditor_statuses.push(run.status().clone());
                p.auditor = Some(Proc { run, session });
            }
            Role::Worker(i) => {
                if let Some(old) = p.workers[i].take() {
                    old.session.expire_session();
                    old.run.kill();
                }
                let worker = Worker::start(client, cfg, format!("worker-{i}-{n}"), &rng);
                p.statuses.push(worker.status().clone());
                p.workers[i] = Some(Proc {
                    run: worker,
                    session,
                });
            }
        }
        drop(p);
        self.note(format!("autorecovery: {role:?} starts (incarnation {n})"));
    }

    /// Starts the Auditor and the workers.
    pub(super) fn start_autorecovery(&self) {
        let Some(ar) = &self.ar else { return };
        let workers = ar.lock().workers();
        self.start_process(Role::Auditor);
        for i in 0..workers {
            self.start_process(Role::Worker(i));
        }
    }

    /// The injector's autorecovery fault: a process killed (aborted mid-whatever, its
    /// session gone with it) or its session expired (it lingers, failing), replaced
    /// `back` later.
    pub(super) fn fail_process(&self, role: Role, kill: bool, back: tokio::time::Instant) {
        let Some(ar) = &self.ar else { return };
        let mut p = ar.lock();
        if p.restarts.iter().any(|r| r.0 == role) {
            return;
        }
        let session = match role {
            Role::Auditor => p.auditor.as_ref().map(|a| a.session.clone()),
            Role::Worker(i) => p.workers[i].as_ref().map(|a| a.session.clone()),
        };
        let Some(session) = session else { return };
        session.expire_session();
        if kill {
            match role {
                Role::Auditor => {
                    if let Some(a) = p.auditor.take() {
                        a.run.kill();
                    }
                }
                Role::Worker(i) => {
                    if let Some(a) = p.workers[i].take() {
                        a.run.kill();
                    }
                }
            }
        }
        p.restarts.push((role, back));
        drop(p);
        let mut f = self.faults.lock();
        match (role, kill) {
            (Role::Auditor, true) => f.auditor_kills += 1,
            (Role::Worker(_), true) => f.worker_kills += 1,
            (_, false) => f.autorecovery_session_expiries += 1,
        }
        drop(f);
        let what = if kill { "killed" } else { "session expires" };
        self.note(format!("fault: autorecovery {role:?} {what}"));
    }

    /// Starts again the processes whose restart is due (all of them with a far `now`).
    pub(super) fn restart_processes_due(&self, now: tokio::time::Instant) {
        let Some(ar) = &self.ar else { return };
        let due: Vec<Role> = {
            let mut p = ar.lock();
            let (due, later) = p.restarts.drain(..).partition(|r| r.1 <= now);
            p.restarts = later;
            due.into_iter().map(|r| r.0).collect()
        };
        for role in due {
            self.start_process(role);
        }
    }

    /// Ends every process (at the end of the run).
    pub(super) fn stop_autorecovery(&self) {
        let Some(ar) = &self.ar else { return };
        let mut p = ar.lock();
        let (l, e) = p.repaired();
        let delayed: u64 = p
            .auditor_statuses
            .iter()
            .map(|s| s.audits_delayed.load(Ordering::Relaxed))
            .sum();
        let mut f = self.faults.lock();
        f.autorecovery_ledgers_repaired += l;
        f.autorecovery_entries_copied += e;
        f.autorecovery_audits_delayed += delayed;
        f.autorecovery_delay_runs += u64::from(p.cfg.lost_bookie_recovery_delay > 0);
        drop(f);
        if let Some(a) = p.auditor.take() {
            a.run.kill();
        }
        for w in p.workers.iter_mut() {
            if let Some(w) = w.take() {
                w.run.kill();
            }
        }
    }

    /// Records the ledgers that name `lost` now: they lost a bookie for good.
    pub(super) async fn record_lost(&self, lost: &BookieId) {
        let store = self.cluster.connect();
        let mut named = BTreeSet::new();
        let mut positions = BTreeSet::new();
        for ledger in all_ledgers(&store).await {
            if let Ok(m) = store.read_ledger(ledger).await
                && m.value.all_bookies().contains(lost)
            {
                named.insert(ledger);
                for f in fragments(&m.value) {
                    for (position, b) in f.ensemble.iter().enumerate() {
                        if b == lost {
                            positions.insert((ledger, f.first, position));
                        }
                    }
                }
            }
        }
        self.lost_positions.lock().extend(positions);
        self.note(format!(
            "autorecovery: {lost} lost for good; ledgers naming it: {named:?}"
        ));
        self.lost.lock().insert(lost.clone());
        self.lost_ledgers.lock().extend(named);
    }

    /// Forgets the bookie lost before: its copies were restored and checked, and it is
    /// back, reformatted, as a new bookie that repairs may now place copies on.
    pub(super) fn forget_lost(&self) {
        self.lost.lock().clear();
        self.lost_ledgers.lock().clear();
        self.lost_positions.lock().clear();
    }

    /// A spare bookie stands in for the lost one.
    async fn spare_joins(&self) {
        let spare = self.spare_id();
        if self.net.incarnation(&spare).is_none() {
            self.note(format!("autorecovery: spare bookie {spare} joins"));
            self.restart(&spare, folio_env::sim::SimFileSystem::new())
                .await;
        }
    }

    /// At quiescence, in a run without autorecovery: the operator restores the lost
    /// bookie's copies by hand, with BookKeeper's `recover` or `decommissionbookie` (drawn
    /// from the seed), onto a spare bookie; then invariant 10 is checked as after
    /// autorecovery.
    pub(super) async fn operator_restores(&self, lost: &BookieId) {
        self.spare_joins().await;
        let client = self.client();
        let copy = folio_autorecovery::CopyOptions {
            skip_copy_for_tests: self.cfg.break_autorecovery_copy,
            ..folio_autorecovery::CopyOptions::default()
        };
        let decommission = crate::rng::SimRng::new(self.seed ^ 0x6465_636f_6d6d).chance(1, 2);
        let mut quiet = |_: usize, _: Option<&folio_autorecovery::LedgerReport>| {};
        let outcome = if decommission {
            folio_autorecovery::decommission(&client, lost, false, &copy, &mut quiet)
                .await
                .map_err(|e| e.to_string())
        } else {
            let options = folio_autorecovery::RecoverOptions {
                copy,
                concurrency: 2,
                ..folio_autorecovery::RecoverOptions::default()
            };
            folio_autorecovery::recover(
                &client,
                &BTreeSet::from([lost.clone()]),
                &options,
                &mut quiet,
            )
            .await
            .map_err(|e| e.to_string())
        };
        let how = if decommission {
            "decommission"
        } else {
            "recover"
        };
        match outcome {
            Ok(summary) => {
                self.note(format!(
                    "operator: {how} of {lost}: {} ledgers, {} entries copied, {} left",
                    summary.ledgers,
                    summary.entries,
                    summary.failed.len()
                ));
                let mut f = self.faults.lock();
                f.operator_restores += 1;
                f.autorecovery_entries_copied += summary.entries;
                drop(f);
                if let Some(why) = summary.failure() {
                    self.history
                        .lock()
                        .invariant10
                        .push(format!("{how} of {lost} left ledgers: {why}"));
                    return;
                }
            }
            Err(e) => {
                self.history
                    .lock()
                    .invariant10
                    .push(format!("{how} of {lost} failed: {e}"));
                return;
            }
        }
        // `recover` restores what the lost bookie held, not holes on live bookies (those
        // are the Auditor's check of all ledgers' to find): only its positions are asked.
        let only = self.lost_positions.lock().clone();
        self.check_every_copy(Some(&only)).await;
    }

    /// At quiescence: waits until autorecovery has healed the lost bookie's ledgers
    /// (bounded), then checks invariant 10 on each of them by asking every bookie.
    pub(super) async fn autorecovery_heals(&self) {
        if self.ar.is_none() {
            return;
        }
        // Every process runs again, and a spare bookie stands in for the lost one.
        let far = tokio::time::Instant::now() + Duration::from_secs(3600);
        self.restart_processes_due(far);
        self.spare_joins().await;
        let lost: BTreeSet<BookieId> = self.lost.lock().clone();
        let store = self.cluster.connect();
        let started = tokio::time::Instant::now();
        let bound = Duration::from_secs(600);
        // Healed also means a check of all ledgers that began after quiescence has
        // ended (the second pass from now), so holes on live bookies are found too.
        let auditor = self.ar.as_ref().and_then(|a| a.lock().auditor_status());
        let passes = |a: &Option<Arc<AuditorStatus>>| {
            a.as_ref()
                .map_or(0, |s| s.checks_of_all_ledgers.load(Ordering::Relaxed))
        };
        let passes_before = passes(&auditor);
        loop {
            let queued: Option<Vec<LedgerId>> = store
                .list_underreplicated()
                .await
                .ok()
                .map(|q| q.into_iter().map(|m| m.ledger_id).collect());
            let mut naming = Vec::new();
            for ledger in all_ledgers(&store).await {
                if let Ok(m) = store.read_ledger(ledger).await
                    && m.value.all_bookies().iter().any(|b| lost.contains(b))
                {
                    naming.push(ledger);
                }
            }
            let checked = passes(&auditor) >= passes_before + 2;
            if checked && queued.as_ref().is_some_and(|q| q.is_empty()) && naming.is_empty() {
                self.note(format!(
                    "autorecovery: healed after {} ms of quiescence",
                    started.elapsed().as_millis()
                ));
                break;
            }
            if started.elapsed() >= bound {
                self.history.lock().invariant10.push(format!(
                    "autorecovery did not heal within {} s after the heal: queued {queued:?}, \
                     ledgers still naming {lost:?}: {naming:?}, checks of all ledgers since: {}",
                    bound.as_secs(),
                    passes(&auditor) - passes_before
                ));
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        self.check_every_copy(None).await;
        self.faults.lock().autorecovery_heals += 1;
    }

    /// Invariant 10: every entry of every fragment of every ledger on every bookie of its
    /// write set, asked of each bookie; every ledger closed. With `only`, just those
    /// (ledger, fragment's first entry, position) triples.
    async fn check_every_copy(&self, only: Option<&BTreeSet<(LedgerId, i64, usize)>>) {
        let lost_ledgers: BTreeSet<LedgerId> = self.lost_ledgers.lock().clone();
        let store = self.cluster.connect();
        let client = self.client();
        // Every ledger: those that named the lost bookie (DESIGN's invariant 10), and the
        // others, whose holes (a crash, a dropped add under Qa < Qw) the check of all
        // ledgers finds and the workers fill.
        for ledger in all_ledgers(&store).await {
            let lost_one = if lost_ledgers.contains(&ledger) {
                "lost a bookie and"
            } else {
                "(no bookie lost)"
            };
            let meta = match store.read_ledger(ledger).await {
                Ok(m) => m.value,
                Err(e) => {
                    self.history.lock().invariant10.push(format!(
                        "ledger {ledger}: metadata unreadable after healing: {e}"
                    ));
                    continue;
                }
            };
            if !meta.is_closed() {
                self.history
                    .lock()
                    .invariant10
                    .push(format!("ledger {ledger} is not closed after healing"));
                continue;
            }
            self.history.lock().closed_meta.push((
                ledger,
                meta.last_entry_id,
                Some(meta.length),
                "healed".into(),
            ));
            let Ok(q) = meta.quorum() else { continue };
            let digest = DigestManager::new(ledger, proto_digest(meta.digest_type), PASSWORD);
            let mut missing = Vec::new();
            let mut probes = 0u64;
            for f in fragments(&meta) {
                for (position, bookie) in f.ensemble.iter().enumerate() {
                    if only.is_some_and(|o| !o.contains(&(ledger, f.first, position))) {
                        continue;
                    }
                    for entry in f.entries_of(&q, position) {
                        probes += 1;
                        let mut answer = client.probe_entry(bookie, &digest, entry).await;
                        for _ in 0..3 {
                            if !matches!(answer, ReplicaAnswer::Failed(_)) {
                                break;
                            }
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            answer = client.probe_entry(bookie, &digest, entry).await;
                        }
                        if answer != ReplicaAnswer::Present {
                            missing.push(format!(
                                "entry {entry} on {bookie} (fragment {}, position {position}): {answer:?}",
                                f.first
                            ));
                        }
                    }
                }
            }
            self.note(format!(
                "autorecovery: ledger {ledger}: {probes} copies asked, {} not present",
                missing.len()
            ));
            if !missing.is_empty() {
                let n = missing.len();
                missing.truncate(5);
                self.history.lock().invariant10.push(format!(
                    "ledger {ledger} {lost_one} has {n} copies short of Qw={} after healing: {}{}",
                    q.write_quorum,
                    missing.join("; "),
                    if n > 5 { "; ..." } else { "" }
                ));
            }
        }
    }
}

/// Every ledger in the store.
async fn all_ledgers(store: &MemMetadataStore) -> Vec<LedgerId> {
    let mut out = Vec::new();
    let mut after = None;
    while let Ok(page) = store.list_ledgers(after, 1000).await {
        out.extend(page.ledgers);
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    out
}

/// The digest of a ledger's entries as the wire layer names it.
fn proto_digest(d: DigestType) -> folio_proto::DigestType {
    match d {
        DigestType::Crc32 => folio_proto::DigestType::Crc32,
        DigestType::Mac => folio_proto::DigestType::Mac,
        DigestType::Crc32c => folio_proto::DigestType::Crc32c,
        DigestType::Dummy => folio_proto::DigestType::Dummy,
    }
}
