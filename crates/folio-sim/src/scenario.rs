//! One simulated run: start bookies, run writers, recovering readers and the fault
//! injector concurrently, heal, check liveness, then judge the history.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use folio_client::{Client, ClientConfig, CreateOptions, OpenOptions};
use folio_env::sim::{CrashMode, Fault, SimFileSystem};
use folio_metadata::mem::MemCluster;
use folio_metadata::{BookieMode, BookieRegistration, BookieServiceInfo, MetadataStore};
use folio_types::{BookieId, LedgerId};
use parking_lot::Mutex;

use crate::bookie::{BookieKnobs, Incarnation};
use crate::clock::{EPOCH_MS, VirtualClock};
use crate::history::{History, Read};
use crate::net::{Net, NetFaults};
use crate::rng::SimRng;

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
        }
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
    regs: Mutex<BTreeMap<BookieId, Box<dyn BookieRegistration>>>,
    history: Mutex<History>,
    next_client: Mutex<usize>,
    /// Crashed bookies: their surviving disk and when they restart.
    down: Mutex<Vec<(BookieId, SimFileSystem, tokio::time::Instant)>>,
}

impl World {
    fn note(&self, what: impl Into<String>) {
        let at = self.clock.elapsed_ms();
        self.history.lock().note(at, what);
    }

    fn client(&self) -> Client {
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
        Client::with_seams(
            Arc::new(self.cluster.connect()),
            config,
            Arc::new(self.net.connector(n)),
            Arc::new(self.rng.fork()),
            self.clock.clone(),
        )
    }

    async fn register(&self, id: &BookieId, mode: BookieMode) {
        let store = self.cluster.connect();
        let reg = store
            .register_bookie(id, mode, &BookieServiceInfo::default())
            .await;
        match reg {
            Ok(r) => {
                self.regs.lock().insert(id.clone(), r);
            }
            Err(e) => self.note(format!("register {id} failed: {e}")),
        }
    }

    async fn start_bookie(&self, id: &BookieId, fs: SimFileSystem) -> bool {
        match Incarnation::open(fs, self.cfg.knobs, self.rng.next_u64()) {
            Ok(inc) => {
                self.net.bring_up(id, Arc::new(inc));
                self.register(id, BookieMode::Writable).await;
                true
            }
            Err(e) => {
                // A bookie that cannot restart from its own crash image is a storage bug.
                self.history
                    .lock()
                    .liveness
                    .push(format!("{id} cannot restart after a crash: {e}"));
                false
            }
        }
    }

    /// Crashes a bookie (power loss, torn writes): returns its surviving disk.
    fn crash_bookie(&self, id: &BookieId) -> Option<SimFileSystem> {
        self.regs.lock().remove(id);
        let inc = self.net.take_down(id)?;
        let image = inc.crash(CrashMode::Torn {
            seed: self.rng.next_u64(),
        });
        Some(image)
    }
}

use folio_env::Rng;

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
        let net = Net::new(Arc::new(rng.fork()));
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
            history: Mutex::default(),
            next_client: Mutex::new(0),
            down: Mutex::default(),
        });
        simulate(world.clone()).await;
        world
    });
    // Stop every journal thread before the runtime goes.
    for id in &world.ids {
        if let Some(inc) = world.net.take_down(id) {
            inc.crash(CrashMode::Clean);
        }
    }
    drop(rt);
    let h = world.history.lock();
    let violations = h.check();
    let trace_hash = h.trace.iter().fold(0xcbf2_9ce4_8422_2325u64, |acc, line| {
        line.bytes()
            .fold(acc, |a, b| (a ^ b as u64).wrapping_mul(0x100_0000_01b3))
    });
    Outcome {
        seed: world.seed,
        violations,
        acked: h.acked.len(),
        closed_reads: h.reads.iter().filter(|r| r.closed).count(),
        late_completions: world.net.late_completions(),
        trace_hash,
        trace: h.trace.clone(),
    }
}

async fn simulate(w: Arc<World>) {
    let meta = w.cluster.connect();
    if let Err(e) = meta.init_cluster().await {
        w.note(format!("init cluster: {e}"));
    }
    for id in w.ids.clone() {
        w.start_bookie(&id, SimFileSystem::new()).await;
    }
    if w.cfg.faults {
        w.net.set_faults(NetFaults {
            drop_request: w.rng.range(0, 20),
            drop_response: w.rng.range(0, 20),
            duplicate: w.rng.range(0, 30),
            max_delay_ms: w.rng.range(0, 30),
        });
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
    let zombie_at = w.rng.chance(1, 3).then(|| w.rng.range(0, w.cfg.entries));
    let crash_at = w.rng.chance(1, 4).then(|| w.rng.range(0, w.cfg.entries));
    let mut k: u64 = 0;
    'write: while k < w.cfg.entries {
        if crash_at.is_some_and(|c| k >= c) {
            w.note(format!("writer {l}: crashes at entry {k}"));
            drop(lh);
            while readers.join_next().await.is_some() {}
            return;
        }
        if zombie_at.is_some_and(|z| k == z) {
            // Stalls long enough for a reader to recover the ledger, then resumes.
            w.note(format!("writer {l}: stalls (zombie) at entry {k}"));
            tokio::time::sleep(Duration::from_millis(w.rng.range(3000, 9000))).await;
            w.note(format!("writer {l}: zombie resumes"));
        }
        let batch = w.rng.range(1, 8).min(w.cfg.entries - k);
        let mut acks = Vec::new();
        for _ in 0..batch {
            let payload = Bytes::from(format!("L{ledger}:E{k}:{:016x}", w.rng.next_u64()));
            w.history
                .lock()
                .issued
                .insert((ledger, k as i64), payload.clone());
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
                    w.history.lock().acked.push((ledger, id, payload));
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
            Ok(()) => w.note(format!("writer {l}: closed ledger {ledger}")),
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
    w.history.lock().closes.push((ledger, end, who.to_string()));
    w.note(format!("{who}: ledger {ledger} closed at {end}"));
    if end < 0 {
        return Ok(());
    }
    let entries = rh
        .read(0, end)
        .await
        .map_err(|e| format!("read 0..={end}: {e}"))?;
    let mut h = w.history.lock();
    for e in entries {
        h.reads.push(Read {
            ledger,
            entry: e.entry_id,
            payload: e.payload,
            closed: true,
            who: who.to_string(),
        });
    }
    Ok(())
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

/// Reads an open ledger up to the LAC it learns (never beyond): checks for dirty reads.
async fn tailer(w: Arc<World>, ledger: LedgerId, who: String, at_ms: u64) {
    tokio::time::sleep(Duration::from_millis(at_ms)).await;
    let client = w.client();
    let Ok(rh) = client
        .open_ledger(ledger, PASSWORD, OpenOptions::no_recovery())
        .await
    else {
        return;
    };
    let lac = rh.last_add_confirmed();
    if lac < 0 {
        return;
    }
    if let Ok(entries) = rh.read(0, lac).await {
        w.note(format!("{who}: read ledger {ledger} up to LAC {lac}"));
        let mut h = w.history.lock();
        for e in entries {
            h.reads.push(Read {
                ledger,
                entry: e.entry_id,
                payload: e.payload,
                closed: rh.is_closed(),
                who: who.clone(),
            });
        }
    }
}

/// Crashes, restarts, wipes, partitions and fsync failures at seeded moments.
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
            w.start_bookie(&id, fs).await;
        }
        let down_now = w.down.lock().len();
        if partitioned_until.is_some_and(|t| t <= now) {
            w.note("fault: partitions heal");
            w.net.heal_partitions();
            partitioned_until = None;
        }
        // A bookie whose journal failed an fsync is read-only: say so in its registration.
        for id in &w.ids {
            if w.net.incarnation(id).is_some_and(|i| i.is_read_only())
                && let Some(reg) = w.regs.lock().get_mut(id)
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
        match w.rng.below(10) {
            0 | 1 if up.is_some() && down_now < 2 => {
                w.note(format!("fault: crash {id}"));
                if let Some(fs) = w.crash_bookie(&id) {
                    // Mid-run a crashed bookie always keeps its durable disk; the
                    // bookie that comes back empty is simulated once every ledger is
                    // closed (see `liveness`), where the copies elsewhere must serve.
                    let back = now + Duration::from_millis(w.rng.range(300, 3000));
                    w.down.lock().push((id, fs, back));
                }
            }
            2 if down_now == 0 && w.rng.chance(1, 3) => {
                w.note("fault: power loss on every bookie");
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
                w.net.partition(client, &id);
                partitioned_until = Some(now + Duration::from_millis(w.rng.range(500, 4000)));
            }
            4 if up.is_some() => {
                let after = w.rng.range(0, 40);
                if let Some(inc) = up.filter(|_| w.cfg.fsync_faults) {
                    w.note(format!("fault: fsync EIO on {id} after {after} ops"));
                    inc.fs.inject(Fault::SyncEio { after_ops: after });
                }
            }
            5 | 6 if up.is_some() => {
                if let Some(inc) = up
                    && let Err(e) = inc.checkpoint()
                {
                    w.note(format!("checkpoint on {id} failed: {e}"));
                }
            }
            _ => {}
        }
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

/// Ends every fault: network faults off, partitions healed, every bookie up and writable.
async fn heal(w: &World) {
    w.note("heal: all faults end");
    w.net.set_faults(NetFaults::default());
    w.net.heal_partitions();
    let down: Vec<_> = w.down.lock().drain(..).collect();
    for (id, fs, _) in down {
        w.note(format!("heal: restart {id}"));
        w.start_bookie(&id, fs).await;
    }
    for id in w.ids.clone() {
        // Scheduled fsync failures that have not fired yet are faults too.
        if let Some(inc) = w.net.incarnation(&id) {
            inc.fs.clear_faults();
        }
        match w.net.incarnation(&id) {
            Some(inc) if !inc.is_read_only() => {}
            Some(_) => {
                w.note(format!("heal: restart read-only {id}"));
                // Restart the read-only bookie (a failed fsync needs an operator restart).
                let fs = w.crash_bookie(&id).expect("it was up");
                w.start_bookie(&id, fs).await;
            }
            None => w.note(format!("heal: {id} is still down")),
        }
    }
}

/// After healing, every ledger recovers, closes and reads in full; then one bookie is
/// wiped and every ledger still reads in full from the other copies.
async fn liveness(w: &Arc<World>) {
    let ledgers = w.history.lock().ledgers.clone();
    for (round, wipe) in [(0, false), (1, true)] {
        if wipe {
            // What every bookie holds now explains a violation found so far.
            describe(w).await;
            if ledgers.is_empty() {
                return;
            }
            let id = w.ids[w.rng.below(w.ids.len() as u64) as usize].clone();
            w.note(format!("wipe: {id} comes back with an empty disk"));
            w.crash_bookie(&id);
            w.start_bookie(&id, SimFileSystem::new()).await;
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
