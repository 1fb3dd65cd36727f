//! One simulated run: start bookies, run writers, recovering readers and the fault
//! injector concurrently, heal, check liveness, then judge the history.

use folio_metadata::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use folio_client::{Client, ClientConfig, CreateOptions, OpenOptions};
use folio_env::sim::{CrashMode, CutAt, Fault, SimFileSystem};
use folio_metadata::mem::{MemCluster, MemMetadataStore};
use folio_metadata::{BookieMode, BookieRegistration, BookieServiceInfo};
use folio_types::{BookieId, LedgerId};
use parking_lot::Mutex;

use crate::bookie::{BookieKnobs, Incarnation};
use crate::clock::{EPOCH_MS, VirtualClock};
use crate::history::{History, LacBound, LacRead, Read};
use crate::meta::{FlakyStore, Outage};
use crate::net::{FNV_START, Net, NetFaults, ProtocolBreaks, fnv};
use crate::rng::SimRng;

mod autorecovery;

pub use autorecovery::AutoRecoveryRuns;

const PASSWORD: &[u8] = b"sim";

/// What a run does.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub bookies: usize,
    pub ledgers: usize,
    /// Appends each writer attempts.
    pub entries: u64,
    /// Inject faults (off: a fault-free run, for sanity).
    pub faults: bool,
    /// Inject fsync failures (off: the same draws are made, the fault is skipped, so the
    /// rest of the run stays the same; to tell whether a violation needs one).
    pub fsync_faults: bool,
    pub knobs: BookieKnobs,
    /// Negative controls on the wire (off: the real protocol).
    pub breaks: ProtocolBreaks,
    /// Keep every network message as a line in [`Outcome::net_log`] (to find where two
    /// runs of a seed part; costs memory).
    pub keep_log: bool,
    /// Which seeds run an Auditor and ReplicationWorkers (see [`AutoRecoveryRuns`]).
    pub autorecovery: AutoRecoveryRuns,
    /// Negative control: the workers move replicas in the metadata without copying them
    /// (`AutoRecoveryConfig::skip_copy_for_tests`); invariant 10 must catch it.
    pub break_autorecovery_copy: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            bookies: 5,
            ledgers: 3,
            entries: 40,
            faults: true,
            fsync_faults: true,
            knobs: BookieKnobs::default(),
            breaks: ProtocolBreaks::default(),
            keep_log: false,
            autorecovery: AutoRecoveryRuns::Half,
            break_autorecovery_copy: false,
        }
    }
}

/// How many faults of each kind a run injected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub crashes: u64,
    pub power_losses: u64,
    pub restarts: u64,
    pub partitions: u64,
    pub fsync_eio: u64,
    pub enospc: u64,
    pub slow_disks: u64,
    pub session_expiries: u64,
    pub metadata_outages: u64,
    /// Metadata calls failed by an outage, and of those, changes applied anyway.
    pub metadata_calls_failed: u64,
    pub metadata_applied_then_failed: u64,
    /// Bookies restarted on an empty disk and refused by the cookie check.
    pub wiped_disks: u64,
    pub checkpoints: u64,
    /// Checkpoints taken after a request left enough unflushed (not faults: the ledger
    /// store's own rhythm, on the simulator's thread).
    pub store_checkpoints: u64,
    /// Requests that reached a bookie at the same instant as others and shared a journal
    /// group commit with them.
    pub batched_requests: u64,
    /// Reads a bookie answered without blocking (the entry in memory or, on the simulated
    /// disk's rule, in the page cache), as a bookie's connection task does.
    pub reads_without_blocking: u64,
    /// Long polls a bookie took without blocking (their LAC known in memory), as a
    /// bookie's connection task does.
    pub long_polls_without_blocking: u64,
    /// Steps of the force-write path (bookies started with `force_write`), and the
    /// journal groups they made durable (more groups than steps: groups were written
    /// while earlier ones awaited their fdatasync).
    pub force_write_steps: u64,
    pub force_write_groups: u64,
    /// Compaction and garbage collection rounds at seeded moments.
    pub compactions: u64,
    pub gc_rounds: u64,
    /// Live entries compaction moved, entry logs garbage collection removed.
    pub compaction_entries_moved: u64,
    pub gc_logs_removed: u64,
    /// Power cuts inside a checkpoint, compaction or garbage collection round (the
    /// bookie restarts from a disk image taken at a seeded operation within it).
    pub mid_op_crashes: u64,
    /// Entries a restarted bookie had acknowledged, read back from it after its replay.
    pub bookie_entries_checked: u64,
    /// Reads of entry -1 (LAC reads, fencing reads) answered by a bookie that owed an
    /// entry of the ledger, checked against the last one it acknowledged.
    pub last_entries_checked: u64,
    /// readLastConfirmed of an open ledger by a reader's open, and of those the ones held
    /// to what was acknowledged before them (answers covering every ack quorum).
    pub lac_reads: u64,
    pub lac_reads_judged: u64,
    /// Scratch ledgers written straight into a bookie and deleted later (dead bytes).
    pub scratch_ledgers: u64,
    pub writer_crashes: u64,
    pub zombies: u64,
    pub concurrent_recoveries: u64,
    pub dropped_requests: u64,
    pub dropped_responses: u64,
    pub duplicates: u64,
    pub slow_writes: u64,
    /// Runs with autorecovery, and of those with two workers.
    pub autorecovery_runs: u64,
    pub two_worker_runs: u64,
    /// Autorecovery processes killed (aborted wherever they were, session gone).
    pub auditor_kills: u64,
    pub worker_kills: u64,
    /// Autorecovery processes whose metadata session expired (replaced later).
    pub autorecovery_session_expiries: u64,
    /// Runs whose lost bookie was healed and checked (invariant 10), ledgers repaired and
    /// entries copied by the workers.
    pub autorecovery_heals: u64,
    pub autorecovery_ledgers_repaired: u64,
    pub autorecovery_entries_copied: u64,
    /// Lost bookies restored by the operator's `recover` or `decommissionbookie` (runs
    /// without autorecovery).
    pub operator_restores: u64,
    /// Runs that lost a second bookie for good after the first was restored (and read
    /// every ledger back after restoring that one too).
    pub second_losses: u64,
    /// Runs with a lost-bookie delay above 0, and the audits their Auditors delayed.
    pub autorecovery_delay_runs: u64,
    pub autorecovery_audits_delayed: u64,
}

impl FaultCounts {
    /// Every fault injected (message faults included).
    pub fn total(&self) -> u64 {
        self.crashes
            + self.power_losses
            + self.partitions
            + self.fsync_eio
            + self.enospc
            + self.slow_disks
            + self.session_expiries
            + self.metadata_outages
            + self.wiped_disks
            + self.writer_crashes
            + self.zombies
            + self.concurrent_recoveries
            + self.dropped_requests
            + self.dropped_responses
            + self.duplicates
            + self.auditor_kills
            + self.worker_kills
            + self.autorecovery_session_expiries
    }

    /// Adds `o`'s counts to these.
    pub fn add(&mut self, o: &FaultCounts) {
        self.crashes += o.crashes;
        self.power_losses += o.power_losses;
        self.restarts += o.restarts;
        self.partitions += o.partitions;
        self.fsync_eio += o.fsync_eio;
        self.enospc += o.enospc;
        self.slow_disks += o.slow_disks;
        self.session_expiries += o.session_expiries;
        self.metadata_outages += o.metadata_outages;
        self.metadata_calls_failed += o.metadata_calls_failed;
        self.metadata_applied_then_failed += o.metadata_applied_then_failed;
        self.wiped_disks += o.wiped_disks;
        self.checkpoints += o.checkpoints;
        self.store_checkpoints += o.store_checkpoints;
        self.batched_requests += o.batched_requests;
        self.reads_without_blocking += o.reads_without_blocking;
        self.long_polls_without_blocking += o.long_polls_without_blocking;
        self.force_write_steps += o.force_write_steps;
        self.force_write_groups += o.force_write_groups;
        self.compactions += o.compactions;
        self.gc_rounds += o.gc_rounds;
        self.compaction_entries_moved += o.compaction_entries_moved;
        self.gc_logs_removed += o.gc_logs_removed;
        self.mid_op_crashes += o.mid_op_crashes;
        self.bookie_entries_checked += o.bookie_entries_checked;
        self.last_entries_checked += o.last_entries_checked;
        self.lac_reads += o.lac_reads;
        self.lac_reads_judged += o.lac_reads_judged;
        self.scratch_ledgers += o.scratch_ledgers;
        self.writer_crashes += o.writer_crashes;
        self.zombies += o.zombies;
        self.concurrent_recoveries += o.concurrent_recoveries;
        self.dropped_requests += o.dropped_requests;
        self.dropped_responses += o.dropped_responses;
        self.duplicates += o.duplicates;
        self.slow_writes += o.slow_writes;
        self.autorecovery_runs += o.autorecovery_runs;
        self.two_worker_runs += o.two_worker_runs;
        self.auditor_kills += o.auditor_kills;
        self.worker_kills += o.worker_kills;
        self.autorecovery_session_expiries += o.autorecovery_session_expiries;
        self.autorecovery_heals += o.autorecovery_heals;
        self.autorecovery_ledgers_repaired += o.autorecovery_ledgers_repaired;
        self.autorecovery_entries_copied += o.autorecovery_entries_copied;
        self.autorecovery_delay_runs += o.autorecovery_delay_runs;
        self.operator_restores += o.operator_restores;
        self.second_losses += o.second_losses;
        self.autorecovery_audits_delayed += o.autorecovery_audits_delayed;
    }
}

impl std::fmt::Display for FaultCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "crash {}, power-loss {}, restart {}, partition {}, fsync-eio {}, enospc {}, \
             slow-disk {} ({} slow writes), session-expiry {}, metadata-outage {} ({} calls \
             failed, {} applied then failed), wiped-disk {}, checkpoint {} (+{} by the store), \
             requests processed together {}, reads without blocking {}, long polls without blocking {}, force-write steps {} ({} groups), \
             compaction {} ({} entries moved), gc {} ({} logs removed), scratch-ledger {}, mid-op power cut {}, bookie entries checked {}, \
             last entries checked {}, LAC reads {} ({} judged), \
             writer-crash {}, \
             zombie {}, concurrent-recovery {}, dropped-request {}, dropped-response {}, \
             duplicate {}; autorecovery runs {} ({} with two workers, {} healed and checked): \
             auditor-kill {}, worker-kill {}, autorecovery-session-expiry {}, {} ledgers \
             repaired, {} entries copied, {} runs with a lost-bookie delay ({} audits delayed); \
             operator recover/decommission {}; second bookie lost {}",
            self.crashes,
            self.power_losses,
            self.restarts,
            self.partitions,
            self.fsync_eio,
            self.enospc,
            self.slow_disks,
            self.slow_writes,
            self.session_expiries,
            self.metadata_outages,
            self.metadata_calls_failed,
            self.metadata_applied_then_failed,
            self.wiped_disks,
            self.checkpoints,
            self.store_checkpoints,
            self.batched_requests,
            self.reads_without_blocking,
            self.long_polls_without_blocking,
            self.force_write_steps,
            self.force_write_groups,
            self.compactions,
            self.compaction_entries_moved,
            self.gc_rounds,
            self.gc_logs_removed,
            self.scratch_ledgers,
            self.mid_op_crashes,
            self.bookie_entries_checked,
            self.last_entries_checked,
            self.lac_reads,
            self.lac_reads_judged,
            self.writer_crashes,
            self.zombies,
            self.concurrent_recoveries,
            self.dropped_requests,
            self.dropped_responses,
            self.duplicates,
            self.autorecovery_runs,
            self.two_worker_runs,
            self.autorecovery_heals,
            self.auditor_kills,
            self.worker_kills,
            self.autorecovery_session_expiries,
            self.autorecovery_ledgers_repaired,
            self.autorecovery_entries_copied,
            self.autorecovery_delay_runs,
            self.autorecovery_audits_delayed,
            self.operator_restores,
            self.second_losses
        )
    }
}

/// The result of one run.
#[derive(Debug)]
pub struct Outcome {
    pub seed: u64,
    pub violations: Vec<String>,
    pub acked: usize,
    pub closed_reads: usize,
    /// Requests whose storage completion outlived the blocking wait (0 in a replayable run).
    pub late_completions: u64,
    /// A hash of the event trace, equal across replays of a seed when the run is exact.
    pub trace_hash: u64,
    /// A hash of everything the run did: every network message in order with its virtual
    /// time, the event trace, and the history the checkers judged. Two runs of a seed
    /// with the same digest are the same run.
    pub digest: u64,
    /// Network messages delivered and answered.
    pub net_events: u64,
    /// The messages as lines, when `SimConfig::keep_log` is set.
    pub net_log: Vec<String>,
    pub faults: FaultCounts,
    /// Virtual time the run took.
    pub virtual_ms: u64,
    pub trace: Vec<String>,
}

struct World {
    cfg: SimConfig,
    seed: u64,
    rng: SimRng,
    net: Net,
    cluster: MemCluster,
    clock: Arc<VirtualClock>,
    ids: Vec<BookieId>,
    /// Each registered bookie's metadata session and registration.
    regs: Mutex<BTreeMap<BookieId, Registered>>,
    /// Bookies whose session expired, and when they register again.
    reregister: Mutex<Vec<(BookieId, tokio::time::Instant)>>,
    /// How many times each bookie was started (its entry log layout is drawn per start).
    starts: Mutex<BTreeMap<BookieId, u64>>,
    /// Bookies with a full disk, and when space is freed (and the bookie restarted).
    full: Mutex<Vec<(BookieId, tokio::time::Instant)>>,
    /// A bookie whose disk was wiped: refused by its cookie, down until the operator
    /// reformats it (in the liveness phase).
    wiped: Mutex<Option<BookieId>>,
    outage: Arc<Outage>,
    faults: Mutex<FaultCounts>,
    history: Mutex<History>,
    next_client: Mutex<usize>,
    /// Crashed bookies: their surviving disk and when they restart.
    down: Mutex<Vec<(BookieId, SimFileSystem, tokio::time::Instant)>>,
    /// Per bookie, how many scratch ledgers it was given (see `storage_work`).
    scratch: Mutex<BTreeMap<BookieId, i64>>,
    /// The autorecovery processes, in a run with autorecovery.
    ar: Option<Mutex<autorecovery::Processes>>,
    /// Bookies lost for good (wiped, not reformatted yet) and the ledgers that named them.
    lost: Mutex<BTreeSet<BookieId>>,
    lost_ledgers: Mutex<BTreeSet<LedgerId>>,
    /// The (ledger, fragment's first entry, ensemble position) the lost bookies held:
    /// what the operator's `recover` must restore.
    lost_positions: Mutex<BTreeSet<(LedgerId, i64, usize)>>,
}

impl World {
    fn note(&self, what: impl Into<String>) {
        let at = self.clock.elapsed_ms();
        self.history.lock().note(at, what);
    }

    fn client(&self) -> Client {
        self.client_session().0
    }

    /// A client of its own, and its number on the network (`Net::connector`).
    fn numbered_client(&self) -> (Client, usize) {
        let (client, _, n) = self.new_client();
        (client, n)
    }

    /// The bookie the operator adds for a lost one.
    fn spare_id(&self) -> BookieId {
        BookieId::new(format!("10.0.0.{}:3181", self.ids.len() + 1)).expect("valid id")
    }

    /// A client of its own metadata session (behind the run's outages), and the session.
    fn client_session(&self) -> (Client, MemMetadataStore) {
        let (client, session, _) = self.new_client();
        (client, session)
    }

    fn new_client(&self) -> (Client, MemMetadataStore, usize) {
        let session = self.cluster.connect();
        let n = {
            let mut c = self.next_client.lock();
            *c += 1;
            *c
        };
        let config = ClientConfig {
            add_entry_timeout: Duration::from_secs(2),
            add_entry_quorum_timeout: Some(Duration::from_secs(20)),
            read_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(1),
            reconnect_backoff: Duration::from_millis(50),
            max_reconnect_backoff: Duration::from_secs(1),
            ..ClientConfig::default()
        };
        let client = Client::with_seams(
            Arc::new(FlakyStore::new(session.clone(), self.outage.clone())),
            config,
            Arc::new(self.net.connector(n)),
            Arc::new(self.rng.fork()),
            self.clock.clone(),
        );
        (client, session, n)
    }

    async fn register(&self, id: &BookieId, mode: BookieMode) {
        let store = self.cluster.connect();
        let reg = store
            .register_bookie(
                id,
                mode,
                &BookieServiceInfo {
                    properties: folio_bookie::registration::service_properties(
                        &folio_bookie::config::BookieConfig::default(),
                    ),
                    ..BookieServiceInfo::default()
                },
            )
            .await;
        match reg {
            Ok(r) => {
                self.regs.lock().insert(id.clone(), (store, r));
            }
            Err(e) => self.note(format!("register {id} failed: {e}")),
        }
    }

    /// Starts a bookie on `fs` as `folio bookie` does: the cookie check first (the real
    /// `folio_bookie::registration::check_cookies`, on the simulated disk and the
    /// metadata store), then the journal replay, then the registration.
    async fn start_bookie(&self, id: &BookieId, fs: SimFileSystem) -> Start {
        let store = self.cluster.connect();
        let env = folio_env::Env {
            clock: Arc::new(folio_env::SystemClock),
            fs: Arc::new(fs.clone()),
            rng: Arc::new(folio_env::SystemRng::with_seed(0)),
        };
        let instance = match store.read_cluster().await {
            Ok(c) => c.instance_id,
            Err(e) => return Start::Refused(format!("read cluster: {e}")),
        };
        let (journal, ledgers, index) = crate::bookie::dirs();
        let expected = folio_bookie::registration::expected_cookie(
            id,
            &instance,
            std::slice::from_ref(&journal),
            std::slice::from_ref(&ledgers),
            std::slice::from_ref(&index),
        );
        let checked = folio_bookie::registration::check_cookies(&env, &store, &expected).await;
        if let Err(e) = checked {
            return Start::Refused(e.to_string());
        }
        let start = {
            let mut starts = self.starts.lock();
            let n = starts.entry(id.clone()).or_insert(0);
            *n += 1;
            *n
        };
        let mut knobs = self.cfg.knobs;
        // Half the incarnations lay out an entry log per ledger, drawn without the run's
        // generator: a restarted bookie may come back in the other mode and must read
        // every log the earlier one wrote.
        knobs.per_ledger_logs = per_ledger_logs(self.seed, id, start);
        knobs.force_write = force_write(self.seed, id, start);
        knobs.direct_entry_logs = direct_entry_logs(self.seed, id, start);
        knobs.read_ahead = (start_hash(self.seed, id, start) >> 60) & 1 == 1;
        match Incarnation::open(fs, knobs, self.rng.next_u64()) {
            Ok(inc) => {
                if !inc.quiesce() {
                    self.net.count_late();
                }
                // Every entry this bookie acknowledged (in any earlier incarnation on
                // this disk) must read back from it, byte for byte, after its replay: a
                // bookie that acknowledged an add has made it durable. Checked per
                // bookie, because the client-level checks forgive one bookie's loss as
                // long as another copy survives.
                let (checked, lost) = self.net.check_acknowledged(id, &inc);
                self.faults.lock().bookie_entries_checked += checked;
                if !lost.is_empty() {
                    self.history.lock().liveness.push(format!(
                        "durability: {id} lost {} entries it acknowledged, after a restart: {}",
                        lost.len(),
                        lost[..lost.len().min(3)].join("; ")
                    ));
                }
                self.net.bring_up(id, Arc::new(inc));
                self.register(id, BookieMode::Writable).await;
                Start::Up
            }
            Err(e) => {
                // A bookie that cannot restart from its own crash image is a storage bug.
                self.history
                    .lock()
                    .liveness
                    .push(format!("{id} cannot restart after a crash: {e}"));
                Start::Failed
            }
        }
    }

    /// Starts a bookie that must come up (its own disk): a refusal is a violation.
    async fn restart(&self, id: &BookieId, fs: SimFileSystem) {
        self.faults.lock().restarts += 1;
        if let Start::Refused(e) = self.start_bookie(id, fs).await {
            self.history
                .lock()
                .liveness
                .push(format!("{id} refused to restart on its own disk: {e}"));
        }
    }

    /// The disk of `id` is replaced by an empty one: the bookie must refuse to start
    /// (its cookie is in the metadata store, not on the new disk), else it would answer
    /// "no such entry" for entries it acknowledged. It stays down until reformatted.
    async fn wipe(&self, id: &BookieId) {
        self.crash_bookie(id);
        self.faults.lock().wiped_disks += 1;
        match self.start_bookie(id, SimFileSystem::new()).await {
            Start::Refused(e) => {
                self.note(format!("wipe: {id} refuses to start on an empty disk: {e}"));
                *self.wiped.lock() = Some(id.clone());
                self.record_lost(id).await;
            }
            Start::Up => self.history.lock().liveness.push(format!(
                "{id} started on a wiped disk: the cookie check let it serve without its data"
            )),
            Start::Failed => {}
        }
    }

    /// The operator's answer to a wiped disk (`bookieformat`): the bookie's cookie is
    /// removed from the metadata store and it starts empty, as a new bookie.
    async fn reformat(&self, id: &BookieId) {
        let store = self.cluster.connect();
        match store.read_cookie(id).await {
            Ok(v) => {
                if let Err(e) = store.delete_cookie(id, v.version).await {
                    self.note(format!("reformat {id}: delete cookie: {e}"));
                }
            }
            Err(e) => self.note(format!("reformat {id}: read cookie: {e}")),
        }
        self.note(format!("reformat: {id} starts empty"));
        // A new bookie: what the old disk acknowledged is gone with it, by the operator.
        self.net.forget_acknowledged(id);
        if let Start::Refused(e) = self.start_bookie(id, SimFileSystem::new()).await {
            self.history
                .lock()
                .liveness
                .push(format!("{id} refused to start after a reformat: {e}"));
        }
        *self.wiped.lock() = None;
    }

    /// A new scratch ledger id for `id` (ids per bookie, above the workload's).
    fn next_scratch_ledger(&self, id: &BookieId) -> i64 {
        self.faults.lock().scratch_ledgers += 1;
        let mut s = self.scratch.lock();
        let n = s.entry(id.clone()).or_insert(0);
        *n += 1;
        self.scratch_base(id) + *n - 1
    }

    /// Every scratch ledger id `id` was given so far.
    fn scratch_ledgers(&self, id: &BookieId) -> std::ops::Range<i64> {
        let n = self.scratch.lock().get(id).copied().unwrap_or(0);
        let base = self.scratch_base(id);
        base..base + n
    }

    fn scratch_base(&self, id: &BookieId) -> i64 {
        let i = self
            .ids
            .iter()
            .position(|b| b == id)
            .unwrap_or(self.ids.len());
        crate::bookie::SCRATCH_LEDGER_BASE + (i as i64) * (1 << 20)
    }

    /// Crashes a bookie (power loss, torn writes): returns its surviving disk.
    fn crash_bookie(&self, id: &BookieId) -> Option<SimFileSystem> {
        self.crash_bookie_to(id, None)
    }

    /// Crashes a bookie; its surviving disk is `image` when given (a power cut at an
    /// earlier disk operation), else a torn image of its disk now.
    fn crash_bookie_to(
        &self,
        id: &BookieId,
        image: Option<SimFileSystem>,
    ) -> Option<SimFileSystem> {
        // A dead process's session ends with it (at once, here).
        if let Some((store, _)) = self.regs.lock().remove(id) {
            store.expire_session();
        }
        let inc = self.net.take_down(id)?;
        let now = inc.crash(CrashMode::Torn {
            seed: self.rng.next_u64(),
        });
        Some(image.unwrap_or(now))
    }
}

/// A bookie's metadata session and its registration in it.
type Registered = (MemMetadataStore, Box<dyn BookieRegistration>);

/// How a bookie start went.
enum Start {
    Up,
    /// Refused by the cookie check (or the metadata store).
    Refused(String),
    /// The storage could not open (recorded as a liveness violation).
    Failed,
}

use folio_env::Rng;

/// Whether start number `start` of bookie `id` in seed `seed` runs with an entry log per
/// ledger: a hash (FNV-1a) of the three.
fn per_ledger_logs(seed: u64, id: &BookieId, start: u64) -> bool {
    start_hash(seed, id, start) >> 63 == 1
}

/// Whether that start runs the journal's stepped force-write path (another bit of the
/// same hash: the two modes vary independently).
fn force_write(seed: u64, id: &BookieId, start: u64) -> bool {
    (start_hash(seed, id, start) >> 62) & 1 == 1
}

/// Whether that start writes its entry logs with direct I/O (a third bit: a log written
/// by one mode is read, garbage collected and compacted by an incarnation of the other).
fn direct_entry_logs(seed: u64, id: &BookieId, start: u64) -> bool {
    (start_hash(seed, id, start) >> 61) & 1 == 1
}

fn start_hash(seed: u64, id: &BookieId, start: u64) -> u64 {
    let h = fnv(FNV_START, &seed.to_le_bytes());
    fnv(fnv(h, id.to_string().as_bytes()), &start.to_le_bytes())
}

/// Runs one seed.
pub fn run(seed: u64, cfg: &SimConfig) -> Outcome {
    eprintln!("folio-sim: seed {seed} (replay: FOLIO_SIM_SEED={seed})");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    let world = rt.block_on(async {
        let rng = SimRng::new(seed);
        let net = Net::new(Arc::new(rng.fork()), cfg.keep_log);
        net.set_breaks(cfg.breaks);
        let outage = Arc::new(Outage::new(rng.fork()));
        let clock = Arc::new(VirtualClock::new());
        let c2 = clock.clone();
        let cluster = MemCluster::deterministic(
            format!("sim-{seed}"),
            rng.next_u64(),
            Arc::new(move || (EPOCH_MS + c2.elapsed_ms()) as i64),
        );
        let world = Arc::new(World {
            cfg: cfg.clone(),
            seed,
            ids: (0..cfg.bookies)
                .map(|i| BookieId::new(format!("10.0.0.{}:3181", i + 1)).expect("valid id"))
                .collect(),
            rng,
            net,
            cluster,
            clock,
            regs: Mutex::default(),
            reregister: Mutex::default(),
            starts: Mutex::default(),
            full: Mutex::default(),
            wiped: Mutex::default(),
            outage,
            ar: cfg.autorecovery.on(seed).then(|| {
                Mutex::new(autorecovery::Processes::new(
                    autorecovery::config(seed, cfg.break_autorecovery_copy),
                    1 + usize::from(SimRng::new(seed ^ 0x776f_726b).chance(1, 2)),
                ))
            }),
            lost: Mutex::default(),
            lost_ledgers: Mutex::default(),
            lost_positions: Mutex::default(),
            faults: Mutex::default(),
            history: Mutex::default(),
            next_client: Mutex::new(0),
            down: Mutex::default(),
            scratch: Mutex::default(),
        });
        simulate(world.clone()).await;
        let virtual_ms = world.clock.elapsed_ms();
        (world, virtual_ms)
    });
    let (world, virtual_ms) = world;
    // Stop every journal thread before the runtime goes.
    let spare = BookieId::new(format!("10.0.0.{}:3181", world.ids.len() + 1)).expect("valid id");
    for id in world.ids.iter().chain([&spare]) {
        if let Some(inc) = world.net.take_down(id) {
            inc.crash(CrashMode::Clean);
        }
    }
    drop(rt);
    let mut h = world.history.lock();
    let (last_entries_checked, stale) = world.net.stale_last_entries();
    h.stale_last_entries = stale;
    let violations = h.check();
    let trace_hash = h
        .trace
        .iter()
        .fold(FNV_START, |acc, line| fnv(acc, line.as_bytes()));
    let (net_digest, net_events) = world.net.digest();
    let mut digest = fnv(net_digest, &trace_hash.to_le_bytes());
    for (l, e, p) in &h.acked {
        digest = fnv(fnv(fnv(digest, &l.to_le_bytes()), &e.to_le_bytes()), p);
    }
    for r in &h.reads {
        digest = fnv(fnv(digest, &r.entry.to_le_bytes()), &r.payload);
        digest = fnv(digest, r.who.as_bytes());
    }
    for r in &h.lac_reads {
        digest = fnv(fnv(digest, &r.lac.to_le_bytes()), r.who.as_bytes());
        digest = fnv(digest, &[u8::from(r.bound.is_some())]);
    }
    let mut faults = world.faults.lock().clone();
    world.net.count_faults(&mut faults);
    faults.last_entries_checked = last_entries_checked;
    faults.metadata_calls_failed = world.outage.failed.load(Ordering::Relaxed);
    faults.metadata_applied_then_failed = world.outage.applied_then_failed.load(Ordering::Relaxed);
    Outcome {
        seed: world.seed,
        violations,
        acked: h.acked.len(),
        closed_reads: h.reads.iter().filter(|r| r.closed).count(),
        late_completions: world.net.late_completions(),
        trace_hash,
        digest,
        net_events,
        net_log: world.net.log(),
        faults,
        virtual_ms,
        trace: h.trace.clone(),
    }
}

async fn simulate(w: Arc<World>) {
    let meta = w.cluster.connect();
    if let Err(e) = meta.init_cluster().await {
        w.note(format!("init cluster: {e}"));
    }
    for id in w.ids.clone() {
        if let Start::Refused(e) = w.start_bookie(&id, SimFileSystem::new()).await {
            w.note(format!("{id} refused to start: {e}"));
        }
    }
    if w.cfg.faults {
        w.net.set_faults(NetFaults {
            drop_request: w.rng.range(0, 20),
            drop_response: w.rng.range(0, 20),
            duplicate: w.rng.range(0, 30),
            max_delay_ms: w.rng.range(0, 30),
        });
    }
    if let Some(ar) = &w.ar {
        let two = ar.lock().workers() > 1;
        let mut f = w.faults.lock();
        f.autorecovery_runs += 1;
        f.two_worker_runs += u64::from(two);
        drop(f);
        w.start_autorecovery();
    }
    let mut tasks = tokio::task::JoinSet::new();
    for l in 0..w.cfg.ledgers {
        tasks.spawn(writer(w.clone(), l));
    }
    let faults = w.cfg.faults.then(|| tokio::spawn(inject_faults(w.clone())));
    // The workload runs under faults for a bounded virtual time.
    let _ = tokio::time::timeout(Duration::from_secs(120), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if !tasks.is_empty() {
        w.note(format!(
            "{} workload tasks still running; stopped",
            tasks.len()
        ));
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
    if let Some(f) = faults {
        f.abort();
        let _ = f.await;
    }
    heal(&w).await;
    liveness(&w).await;
    w.stop_autorecovery();
    // The end every ledger has now: a closed ledger's must be the one it closed with.
    let store = w.cluster.connect();
    let ledgers = w.history.lock().ledgers.clone();
    for ledger in ledgers {
        if let Ok(m) = store.read_ledger(ledger).await
            && m.value.is_closed()
        {
            w.history.lock().closed_meta.push((
                ledger,
                m.value.last_entry_id,
                Some(m.value.length),
                "final metadata".into(),
            ));
        }
    }
}

/// Notes each ledger's ensembles and what each bookie holds, to explain a violation.
async fn describe(w: &World) {
    let ledgers = w.history.lock().ledgers.clone();
    let client = w.client();
    for ledger in ledgers {
        if let Ok(m) = client.ledger_metadata(ledger).await {
            w.note(format!("ledger {ledger}: {m:?}"));
        }
        for id in &w.ids {
            if let Some(inc) = w.net.incarnation(id) {
                use folio_bookie::BookieStorage;
                let ids = inc.storage.entry_ids(ledger);
                w.note(format!("ledger {ledger} on {id}: {ids:?}"));
            }
        }
    }
}

/// One writer, its recovering readers and a tailing reader, on one ledger.
async fn writer(w: Arc<World>, l: usize) {
    let client = w.client();
    let (e, qw, qa) =
        [(3, 2, 2), (3, 3, 2), (4, 2, 2), (5, 3, 2), (4, 3, 3)][w.rng.below(5) as usize];
    let e = e.min(w.cfg.bookies);
    let mut handle = None;
    for _ in 0..5 {
        let opts = CreateOptions::default()
            .quorum(e, qw, qa)
            .password(PASSWORD);
        match client.create_ledger(opts).await {
            Ok(h) => {
                handle = Some(h);
                break;
            }
            Err(err) => {
                w.note(format!("writer {l}: create failed: {err}"));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    let Some(lh) = handle else { return };
    let ledger = lh.id();
    w.history.lock().ledgers.push(ledger);
    w.note(format!("writer {l}: ledger {ledger} E={e} Qw={qw} Qa={qa}"));
    let mut readers = tokio::task::JoinSet::new();
    // Recovering readers: one or two, possibly at the same instant.
    let at = w.rng.range(300, 6000);
    let two = w.rng.chance(1, 2);
    let same_time = w.rng.chance(1, 2);
    readers.spawn(recoverer(w.clone(), ledger, format!("rec{l}a"), at));
    if two && same_time {
        w.faults.lock().concurrent_recoveries += 1;
    }
    if two {
        let at2 = if same_time {
            at
        } else {
            w.rng.range(300, 8000)
        };
        readers.spawn(recoverer(w.clone(), ledger, format!("rec{l}b"), at2));
    }
    readers.spawn(tailer(
        w.clone(),
        ledger,
        format!("tail{l}"),
        w.rng.range(100, 4000),
    ));
    readers.spawn(lac_reader(
        w.clone(),
        ledger,
        format!("lac{l}"),
        w.rng.range(200, 5000),
    ));
    let zombie_at = w.rng.chance(1, 3).then(|| w.rng.range(0, w.cfg.entries));
    let crash_at = w.rng.chance(1, 4).then(|| w.rng.range(0, w.cfg.entries));
    let mut k: u64 = 0;
    'write: while k < w.cfg.entries {
        if crash_at.is_some_and(|c| k >= c) {
            w.note(format!("writer {l}: crashes at entry {k}"));
            w.faults.lock().writer_crashes += 1;
            drop(lh);
            while readers.join_next().await.is_some() {}
            return;
        }
        if zombie_at.is_some_and(|z| k == z) {
            // Stalls long enough for a reader to recover the ledger, then resumes.
            w.note(format!("writer {l}: stalls (zombie) at entry {k}"));
            w.faults.lock().zombies += 1;
            tokio::time::sleep(Duration::from_millis(w.rng.range(3000, 9000))).await;
            w.note(format!("writer {l}: zombie resumes"));
        }
        let batch = w.rng.range(1, 8).min(w.cfg.entries - k);
        let mut acks = Vec::new();
        for _ in 0..batch {
            let payload = Bytes::from(format!("L{ledger}:E{k}:{:016x}", w.rng.next_u64()));
            {
                let mut h = w.history.lock();
                h.issued.insert((ledger, k as i64), payload.clone());
                let at = h.step();
                h.appended_at.insert((ledger, k as i64), at);
            }
            acks.push((k, payload.clone(), lh.append(payload)));
            k += 1;
        }
        let mut failed = false;
        for (n, payload, ack) in acks {
            match ack.await {
                Ok(id) => {
                    if id != n as i64 {
                        w.note(format!("writer {l}: append {n} acknowledged as entry {id}"));
                    }
                    let mut h = w.history.lock();
                    h.acked.push((ledger, id, payload));
                    let at = h.step();
                    h.acked_at.insert((ledger, id), at);
                }
                Err(err) => {
                    if !failed {
                        w.note(format!("writer {l}: append {n} failed: {err}"));
                    }
                    failed = true;
                }
            }
        }
        if failed {
            break 'write;
        }
        tokio::time::sleep(Duration::from_millis(w.rng.range(0, 200))).await;
    }
    if w.rng.chance(1, 2) {
        match lh.close().await {
            Ok(()) => {
                w.note(format!("writer {l}: closed ledger {ledger}"));
                let end = lh.last_add_confirmed();
                w.history
                    .lock()
                    .closed_meta
                    .push((ledger, end, None, format!("writer {l}")));
            }
            Err(err) => w.note(format!("writer {l}: close failed: {err}")),
        }
    }
    while readers.join_next().await.is_some() {}
}

/// Records a closed ledger's end and reads it whole.
async fn read_closed(
    w: &World,
    client: &Client,
    ledger: LedgerId,
    who: &str,
    recovery: bool,
) -> Result<(), String> {
    let opts = if recovery {
        OpenOptions::recovery()
    } else {
        OpenOptions::no_recovery()
    };
    let rh = client
        .open_ledger(ledger, PASSWORD, opts)
        .await
        .map_err(|e| format!("open: {e}"))?;
    if !rh.is_closed() {
        return Err("opened but not closed".into());
    }
    let end = rh.last_add_confirmed();
    let meta = rh.metadata();
    {
        let mut h = w.history.lock();
        h.closes.push((ledger, end, who.to_string()));
        h.closed_meta.push((
            ledger,
            meta.last_entry_id,
            Some(meta.length),
            who.to_string(),
        ));
    }
    w.note(format!("{who}: ledger {ledger} closed at {end}"));
    if end < 0 {
        return Ok(());
    }
    let entries = rh
        .read(0, end)
        .await
        .map_err(|e| format!("read 0..={end}: {e}"))?;
    record_reads(&mut w.history.lock(), entries, true, who);
    Ok(())
}

/// Records entries a reader read back, for the checker.
fn record_reads(h: &mut History, entries: Vec<folio_client::LedgerEntry>, closed: bool, who: &str) {
    for e in entries {
        h.reads.push(Read {
            ledger: e.ledger_id,
            entry: e.entry_id,
            payload: e.payload,
            closed,
            who: who.to_string(),
        });
    }
}

async fn recoverer(w: Arc<World>, ledger: LedgerId, who: String, at_ms: u64) {
    tokio::time::sleep(Duration::from_millis(at_ms)).await;
    let client = w.client();
    w.note(format!("{who}: recovers ledger {ledger}"));
    for attempt in 0..3 {
        match read_closed(&w, &client, ledger, &who, true).await {
            Ok(()) => return,
            Err(e) => w.note(format!("{who}: attempt {attempt}: {e}")),
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
}

/// Reads an open ledger up to the LAC it learns (never beyond), then follows its tail with
/// long polls as a tailing consumer does: checks for dirty reads, and that nothing a LAC
/// showed (served by a bookie before the add carrying it was durable there, or piggybacked
/// on a poll's answer) is missing from the ledger once it is closed.
async fn tailer(w: Arc<World>, ledger: LedgerId, who: String, at_ms: u64) {
    /// Long polls per tailer, each up to 1.5 simulated seconds.
    const POLLS: usize = 12;
    tokio::time::sleep(Duration::from_millis(at_ms)).await;
    let Some((_client, rh)) = open_asking_lac(&w, ledger, &who).await else {
        return;
    };
    let record = |entries: Vec<folio_client::LedgerEntry>, closed: bool| {
        record_reads(&mut w.history.lock(), entries, closed, &who);
    };
    let mut lac = rh.last_add_confirmed();
    if lac >= 0 {
        let Ok(entries) = rh.read(0, lac).await else {
            return;
        };
        w.note(format!("{who}: read ledger {ledger} up to LAC {lac}"));
        record(entries, rh.is_closed());
    }
    for _ in 0..POLLS {
        if rh.is_closed() && lac >= rh.metadata().last_entry_id {
            return;
        }
        let Ok(next) = rh
            .wait_for_lac_beyond(lac, Duration::from_millis(1500))
            .await
        else {
            return;
        };
        if next <= lac {
            continue;
        }
        let Ok(entries) = rh.read(lac + 1, next).await else {
            return;
        };
        w.note(format!(
            "{who}: long poll, read ledger {ledger} up to LAC {next}"
        ));
        record(entries, rh.is_closed());
        lac = next;
    }
}

/// Opens `ledger` without recovery on a client of its own, as a reader of a ledger being
/// written does: the open asks the bookies of the last fragment for their LAC
/// (`ReadHandle::read_last_add_confirmed`). The LAC it got is recorded, and held to what
/// was acknowledged before the open when the answers that reached the client (a new one,
/// so every LAC answer it got is this read's) cover every ack quorum of that fragment.
async fn open_asking_lac(
    w: &World,
    ledger: LedgerId,
    who: &str,
) -> Option<(Client, folio_client::ReadHandle)> {
    let (client, n) = w.numbered_client();
    let since = w.history.lock().step();
    let rh = client
        .open_ledger(ledger, PASSWORD, OpenOptions::no_recovery())
        .await
        .ok()?;
    let lac = rh.last_add_confirmed();
    let meta = rh.metadata();
    let mut bound = None;
    if meta.state == folio_types::metadata::LedgerState::Open
        && let Ok(quorum) = meta.quorum()
        && let Some((start, ensemble)) = meta.current_ensemble()
    {
        let answered = w.net.lac_answers(n, ledger);
        let has: Vec<bool> = ensemble.iter().map(|b| answered.contains(b)).collect();
        if folio_client::coverage::covers_ensemble(&quorum, &has) {
            bound = Some(LacBound {
                since,
                fragment_start: start,
            });
        }
    }
    if !meta.is_closed() {
        let mut f = w.faults.lock();
        f.lac_reads += 1;
        f.lac_reads_judged += u64::from(bound.is_some());
    }
    w.history.lock().lac_reads.push(LacRead {
        ledger,
        lac,
        bound,
        who: format!("{who} (open)"),
    });
    Some((client, rh))
}

/// A reader polling the LAC of a ledger being written, across crashes and restarts: each
/// round a client of its own opens the ledger without recovery (readLastConfirmed, held to
/// what was acknowledged before it, see [`open_asking_lac`]), asks again on that handle a
/// little later (`read_last_add_confirmed` or `try_read_last_add_confirmed`), and reads
/// the entry at the LAC it got; until the ledger is closed.
async fn lac_reader(w: Arc<World>, ledger: LedgerId, who: String, at_ms: u64) {
    const ROUNDS: usize = 4;
    tokio::time::sleep(Duration::from_millis(at_ms)).await;
    for _ in 0..ROUNDS {
        if let Some((_client, rh)) = open_asking_lac(&w, ledger, &who).await {
            if rh.is_closed() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(w.rng.range(50, 800))).await;
            let (asked, how) = if w.rng.chance(1, 2) {
                (
                    rh.read_last_add_confirmed().await,
                    "read_last_add_confirmed",
                )
            } else {
                (
                    rh.try_read_last_add_confirmed().await,
                    "try_read_last_add_confirmed",
                )
            };
            if let Ok(lac) = asked {
                w.history.lock().lac_reads.push(LacRead {
                    ledger,
                    lac,
                    bound: None,
                    who: format!("{who} ({how})"),
                });
                // Every entry up to the LAC is readable: the last one is read back (and
                // judged as a tail read).
                if lac >= 0
                    && let Ok(entries) = rh.read(lac, lac).await
                {
                    record_reads(&mut w.history.lock(), entries, false, &who);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(w.rng.range(200, 2000))).await;
    }
}

/// A checkpoint, a compaction round or a garbage collection round on one bookie, at a
/// seeded moment; in a quarter of them the power is cut inside that work: the bookie
/// restarts from a crash image taken before a seeded disk operation of it (torn), so
/// crashes also land between a flush's entry-log fdatasync and its index commit, between
/// a mark and the deletion of journal files, between compaction's copies and the removal
/// of the old log.
fn storage_work(
    w: &World,
    id: &BookieId,
    inc: &Incarnation,
    down_now: usize,
    now: tokio::time::Instant,
) {
    let cut = down_now < 2 && w.rng.chance(1, 2);
    let kind = w.rng.below(4);
    // With kinds 1-3, half the cuts are aimed at the compaction or GC round alone
    // (fewer operations to land among: its copies, index commit and removals).
    let cut_late = w.rng.chance(1, 2);
    // The power cut lands in the last part of the work (its checkpoint, compaction or GC
    // round), not among the scratch ledger's journal writes, which the request path
    // already crashes often.
    let start_cut = |span: u64| {
        if cut {
            // Half the time at any of the next operations, half the time while one of
            // the next fsyncs waits. Beyond the work's end, no cut.
            let at = if w.rng.chance(1, 2) {
                CutAt::Sync(w.rng.below(span))
            } else {
                CutAt::Op(w.rng.below(span * 8))
            };
            inc.fs.plan_power_cut(
                at,
                CrashMode::Torn {
                    seed: w.rng.next_u64(),
                },
            );
        }
    };
    // Dead bytes to come: a scratch ledger, flushed into the entry logs after the
    // workload's entries by the checkpoint (it rolls the log they are in, so that log is
    // finished, shared by live and soon dead entries).
    let ledger = w.next_scratch_ledger(id);
    let (entries, len) = (w.rng.range(10, 40) as i64, w.rng.range(50, 400) as usize);
    if let Err(e) = inc.write_scratch_ledger(ledger, entries, len) {
        w.note(format!("scratch ledger {ledger} on {id}: {e}"));
    }
    if kind == 0 {
        start_cut(12);
    }
    w.faults.lock().checkpoints += 1;
    if let Err(e) = inc.checkpoint() {
        w.note(format!("checkpoint on {id} failed: {e}"));
    }
    if kind > 0 {
        // The bookie's scratch ledgers are deleted (again: a crash before a deletion
        // was flushed brings a ledger back, as in BookKeeper, whose GC then deletes it
        // again), the deletion checkpointed, then a compaction (which must move the live
        // entries out of logs shared with them) or a GC round.
        for ledger in w.scratch_ledgers(id) {
            if let Err(e) = inc.delete_ledger(ledger) {
                w.note(format!(
                    "delete scratch ledger {ledger} on {id} failed: {e}"
                ));
            }
        }
        if !cut_late {
            start_cut(12);
        }
        if let Err(e) = inc.checkpoint() {
            w.note(format!("checkpoint on {id} failed: {e}"));
        }
        if cut_late {
            start_cut(6);
        }
        if kind <= 2 {
            // BookKeeper's minor and major thresholds, and everything not wholly live.
            let threshold = [0.2, 0.5, 0.8, 0.999][w.rng.below(4) as usize];
            w.faults.lock().compactions += 1;
            match inc.compact(threshold) {
                Ok(s) => {
                    w.faults.lock().compaction_entries_moved += s.entries_moved;
                    w.note(format!(
                        "compaction on {id} at {threshold}: {} compacted, {} removed, {} \
                         entries moved, {} failures",
                        s.logs_compacted,
                        s.logs_deleted,
                        s.entries_moved,
                        s.failures.len()
                    ))
                }
                Err(e) => w.note(format!("compaction on {id} failed: {e}")),
            }
        } else {
            w.faults.lock().gc_rounds += 1;
            match inc.collect_garbage() {
                Ok(s) => {
                    w.faults.lock().gc_logs_removed += s.logs_removed.len() as u64;
                    w.note(format!("gc on {id}: {} logs removed", s.logs_removed.len()))
                }
                Err(e) => w.note(format!("gc on {id} failed: {e}")),
            }
        }
    }
    if !cut {
        return;
    }
    let Some((at, image)) = inc.fs.take_power_cut() else {
        return;
    };
    w.note(format!(
        "fault: power cut on {id} before disk op {at}, inside that work"
    ));
    {
        let mut f = w.faults.lock();
        f.crashes += 1;
        f.mid_op_crashes += 1;
    }
    if let Some(fs) = w.crash_bookie_to(id, Some(image)) {
        let back = now + Duration::from_millis(w.rng.range(300, 3000));
        w.down.lock().push((id.clone(), fs, back));
    }
}

/// Crashes, restarts, partitions, disk faults, metadata faults and a wiped disk at
/// seeded moments.
async fn inject_faults(w: Arc<World>) {
    let mut partitioned_until: Option<tokio::time::Instant> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(w.rng.range(200, 1200))).await;
        let now = tokio::time::Instant::now();
        // Restarts due.
        let due: Vec<_> = {
            let mut down = w.down.lock();
            let (due, later) = down.drain(..).partition(|d| d.2 <= now);
            *down = later;
            due
        };
        for (id, fs, _) in due {
            w.note(format!("fault: restart {id}"));
            w.restart(&id, fs).await;
        }
        reregister_due(&w, now).await;
        w.restart_processes_due(now);
        // Space freed on full disks: the operator restarts the (read-only) bookie.
        let freed: Vec<_> = {
            let mut full = w.full.lock();
            let (due, later) = full.drain(..).partition(|f| f.1 <= now);
            *full = later;
            due
        };
        for (id, _) in freed {
            if let Some(inc) = w.net.incarnation(&id) {
                inc.fs.clear_faults();
                w.note(format!("fault: space freed on {id}, restart"));
                let fs = w.crash_bookie(&id).expect("it was up");
                w.restart(&id, fs).await;
            }
        }
        let down_now = w.down.lock().len() + usize::from(w.wiped.lock().is_some());
        if partitioned_until.is_some_and(|t| t <= now) {
            w.note("fault: partitions heal");
            w.net.heal_partitions();
            partitioned_until = None;
        }
        // A bookie whose journal failed (fsync EIO, ENOSPC) is read-only: say so in its
        // registration.
        for id in &w.ids {
            if w.net.incarnation(id).is_some_and(|i| i.is_read_only())
                && let Some((_, reg)) = w.regs.lock().get_mut(id)
                && reg.mode() == BookieMode::Writable
            {
                // set_mode is async; a mem:// registration completes without waiting.
                let fut = reg.set_mode(BookieMode::ReadOnly);
                let _ = futures_lite_block(fut);
                w.note(format!("fault: {id} is read-only"));
            }
        }
        let id = w.ids[w.rng.below(w.ids.len() as u64) as usize].clone();
        let up = w.net.incarnation(&id);
        match w.rng.below(16) {
            0 | 1 if up.is_some() && down_now < 2 => {
                w.note(format!("fault: crash {id}"));
                w.faults.lock().crashes += 1;
                if let Some(fs) = w.crash_bookie(&id) {
                    let back = now + Duration::from_millis(w.rng.range(300, 3000));
                    w.down.lock().push((id, fs, back));
                }
            }
            2 if down_now == 0 && w.rng.chance(1, 3) => {
                w.note("fault: power loss on every bookie");
                w.faults.lock().power_losses += 1;
                for id in w.ids.clone() {
                    if let Some(fs) = w.crash_bookie(&id) {
                        let back = now + Duration::from_millis(w.rng.range(300, 2000));
                        w.down.lock().push((id, fs, back));
                    }
                }
            }
            3 => {
                let client = w.rng.range(1, (*w.next_client.lock()).max(1) as u64) as usize;
                w.note(format!("fault: partition client {client} from {id}"));
                w.faults.lock().partitions += 1;
                w.net.partition(client, &id);
                partitioned_until = Some(now + Duration::from_millis(w.rng.range(500, 4000)));
            }
            4 if up.is_some() => {
                let after = w.rng.range(0, 40);
                if let Some(inc) = up.filter(|_| w.cfg.fsync_faults) {
                    w.note(format!("fault: fsync EIO on {id} after {after} ops"));
                    w.faults.lock().fsync_eio += 1;
                    inc.fs.inject(Fault::SyncEio { after_ops: after });
                }
            }
            5 | 6 | 14 | 15 if up.is_some() => {
                if let Some(inc) = up {
                    storage_work(&w, &id, &inc, down_now, now);
                }
            }
            7 if up.is_some() && !w.full.lock().iter().any(|f| f.0 == id) => {
                // The disk fills up: writes fail with ENOSPC, the journal stops, the
                // bookie turns read-only; space is freed 1-4 s later.
                let after = w.rng.range(0, 60);
                let freed = now + Duration::from_millis(w.rng.range(1000, 4000));
                if let Some(inc) = up {
                    w.note(format!("fault: disk of {id} full after {after} ops"));
                    w.faults.lock().enospc += 1;
                    inc.fs.inject(Fault::WriteEnospc { after_ops: after });
                    w.full.lock().push((id, freed));
                }
            }
            8 => {
                // A slow disk: every write request waits before the journal takes it.
                let per_write = w.rng.range(20, 400);
                let until = now + Duration::from_millis(w.rng.range(500, 5000));
                w.note(format!("fault: slow disk on {id}, {per_write} ms a write"));
                w.faults.lock().slow_disks += 1;
                w.net
                    .slow_disk(&id, until, Duration::from_millis(per_write));
            }
            9 if w.regs.lock().contains_key(&id) => {
                // The bookie's metadata session expires: its registration vanishes; it
                // opens a new session and registers again a little later.
                w.note(format!("fault: metadata session of {id} expires"));
                w.faults.lock().session_expiries += 1;
                if let Some((store, _)) = w.regs.lock().remove(&id) {
                    store.expire_session();
                }
                let back = now + Duration::from_millis(w.rng.range(200, 3000));
                w.reregister.lock().push((id, back));
            }
            10 => {
                // The clients lose the metadata store for a while.
                let until = now + Duration::from_millis(w.rng.range(300, 3000));
                w.note("fault: metadata store unreachable for the clients");
                w.faults.lock().metadata_outages += 1;
                w.outage.start(until);
            }
            11 if up.is_some()
                && down_now == 0
                && w.wiped.lock().is_none()
                && w.faults.lock().wiped_disks == 0
                && w.rng.chance(1, 3) =>
            {
                w.note(format!(
                    "fault: the disk of {id} is replaced by an empty one"
                ));
                w.wipe(&id).await;
            }
            12 if w.ar.is_some() => {
                // The Auditor fails; half the time at the instant a bookie crashes, so
                // it dies between the loss and its audit (an audit over mem:// takes no
                // virtual time, so "mid-audit" is this, or an outage failing it midway).
                if up.is_some() && down_now < 2 && w.rng.chance(1, 2) {
                    w.note(format!("fault: crash {id}"));
                    w.faults.lock().crashes += 1;
                    if let Some(fs) = w.crash_bookie(&id) {
                        let back = now + Duration::from_millis(w.rng.range(300, 3000));
                        w.down.lock().push((id, fs, back));
                    }
                }
                let kill = w.rng.chance(2, 3);
                let back = now + Duration::from_millis(w.rng.range(200, 3000));
                w.fail_process(autorecovery::Role::Auditor, kill, back);
            }
            13 if w.ar.is_some() => {
                let workers = w.ar.as_ref().map_or(1, |a| a.lock().workers());
                let i = w.rng.below(workers as u64) as usize;
                let kill = w.rng.chance(2, 3);
                let back = now + Duration::from_millis(w.rng.range(200, 3000));
                w.fail_process(autorecovery::Role::Worker(i), kill, back);
            }
            _ => {}
        }
    }
}

/// Registers again the bookies whose session expired, when due (if still up and not
/// registered by a restart meanwhile).
async fn reregister_due(w: &World, now: tokio::time::Instant) {
    let due: Vec<_> = {
        let mut r = w.reregister.lock();
        let (due, later) = r.drain(..).partition(|d| d.1 <= now);
        *r = later;
        due
    };
    for (id, _) in due {
        let Some(inc) = w.net.incarnation(&id) else {
            continue;
        };
        if w.regs.lock().contains_key(&id) {
            continue;
        }
        let mode = if inc.is_read_only() {
            BookieMode::ReadOnly
        } else {
            BookieMode::Writable
        };
        w.note(format!("fault: {id} registers again"));
        w.register(&id, mode).await;
    }
}

/// Polls a future that is known to complete without waiting (mem:// metadata calls).
fn futures_lite_block<F: std::future::Future>(fut: F) -> Option<F::Output> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut fut = std::pin::pin!(fut);
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

/// Ends every fault: network faults off, partitions healed, metadata reachable, every
/// bookie up, registered and writable, except a wiped one (down until reformatted).
async fn heal(w: &World) {
    w.note("heal: all faults end");
    w.net.set_faults(NetFaults::default());
    w.net.heal_partitions();
    w.net.heal_disks();
    w.outage.end();
    w.full.lock().clear();
    let down: Vec<_> = w.down.lock().drain(..).collect();
    for (id, fs, _) in down {
        w.note(format!("heal: restart {id}"));
        w.restart(&id, fs).await;
    }
    let far = tokio::time::Instant::now() + Duration::from_secs(3600);
    reregister_due(w, far).await;
    w.restart_processes_due(far);
    let wiped = w.wiped.lock().clone();
    if wiped.is_some() {
        // The operator adds a bookie for the lost one, so that ledgers whose ensemble
        // spans every bookie can still replace it (recovery writes back).
        let spare = BookieId::new(format!("10.0.0.{}:3181", w.ids.len() + 1)).expect("valid id");
        w.note(format!("heal: spare bookie {spare} joins"));
        w.restart(&spare, SimFileSystem::new()).await;
    }
    for id in w.ids.clone() {
        // Scheduled disk faults that have not fired yet are faults too.
        if let Some(inc) = w.net.incarnation(&id) {
            inc.fs.clear_faults();
        }
        match w.net.incarnation(&id) {
            Some(inc) if !inc.is_read_only() => {}
            Some(_) => {
                w.note(format!("heal: restart read-only {id}"));
                // Restart the read-only bookie (a failed fsync needs an operator restart).
                let fs = w.crash_bookie(&id).expect("it was up");
                w.restart(&id, fs).await;
            }
            None if wiped.as_ref() == Some(&id) => w.note(format!(
                "heal: {id} stays down (wiped, not reformatted yet)"
            )),
            None => w.note(format!("heal: {id} is still down")),
        }
    }
}

/// After healing, every ledger recovers, closes and reads in full; then one bookie is
/// wiped and every ledger still reads in full from the other copies; then, once its copies
/// are restored and it is back empty, a second bookie is lost for good and the same holds
/// again (a second failure after healing loses nothing: the first repair left Qw copies).
async fn liveness(w: &Arc<World>) {
    let ledgers = w.history.lock().ledgers.clone();
    let mut first_lost: Option<BookieId> = None;
    for (round, wipe) in [(0, false), (1, true), (2, true)] {
        if wipe {
            // What every bookie holds now explains a violation found so far.
            describe(w).await;
            if ledgers.is_empty() {
                return;
            }
            // An empty bookie may join only once every ledger it was in is closed: a
            // recovery would take its "no such entry" as proof of absence (that is why
            // BookKeeper's operators recover a lost bookie's ledgers before a reformat).
            // If round 0 could not close them all (a liveness violation, already
            // recorded), the operator does not reformat.
            if !w.history.lock().liveness.is_empty() {
                w.note("wipe: skipped, not every ledger could be closed");
                return;
            }
            // The bookie wiped mid-run, or else one now: refused by its cookie, then
            // reformatted by the operator, it starts empty; every ledger must still read
            // in full from the other copies.
            if let Some(first) = &first_lost {
                // The second loss: what the first one left to restore was restored (and
                // checked); only the second bookie's copies are lost now.
                w.note(format!(
                    "wipe: a second bookie is lost for good ({first} was restored and is back empty)"
                ));
                w.forget_lost();
            }
            let wiped = w.wiped.lock().clone();
            let id = match wiped {
                Some(id) => id,
                None => {
                    let id = if w.ar.is_some() || first_lost.is_some() {
                        // Lost for good: one that some ledger names, for autorecovery (and
                        // for the second loss: not the first one again).
                        let mut named = named_bookies(w, &ledgers).await;
                        named.retain(|b| Some(b) != first_lost.as_ref());
                        if named.is_empty() {
                            w.ids[w.rng.below(w.ids.len() as u64) as usize].clone()
                        } else {
                            named[w.rng.below(named.len() as u64) as usize].clone()
                        }
                    } else {
                        w.ids[w.rng.below(w.ids.len() as u64) as usize].clone()
                    };
                    w.note(format!(
                        "wipe: the disk of {id} is replaced by an empty one"
                    ));
                    w.wipe(&id).await;
                    id
                }
            };
            // Autorecovery heals the lost bookie's ledgers before the operator
            // reformats it (invariant 10 checked then); without autorecovery the
            // operator restores them with `recover` or `decommissionbookie`.
            if w.ar.is_some() {
                w.autorecovery_heals().await;
            } else {
                w.operator_restores(&id).await;
            }
            w.reformat(&id).await;
            if round == 2 {
                w.faults.lock().second_losses += 1;
            }
            first_lost = Some(id);
        }
        for &ledger in &ledgers {
            let who = format!("final{round}-{ledger}");
            let client = w.client();
            let mut last_err = String::new();
            let mut ok = false;
            for _ in 0..10 {
                match read_closed(w, &client, ledger, &who, true).await {
                    Ok(()) => {
                        ok = true;
                        break;
                    }
                    Err(e) => last_err = e,
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            if !ok {
                w.history.lock().liveness.push(format!(
                    "{who}: ledger {ledger} could not be recovered and read after healing: {last_err}"
                ));
            }
        }
    }
}

/// The bookies of `w.ids` that some ledger of `ledgers` names, in id order.
async fn named_bookies(w: &World, ledgers: &[LedgerId]) -> Vec<BookieId> {
    let store = w.cluster.connect();
    let mut named = BTreeSet::new();
    for &ledger in ledgers {
        if let Ok(m) = store.read_ledger(ledger).await {
            named.extend(m.value.all_bookies());
        }
    }
    w.ids
        .iter()
        .filter(|b| named.contains(*b))
        .cloned()
        .collect()
}
