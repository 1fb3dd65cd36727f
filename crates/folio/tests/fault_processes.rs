//! Real processes under faults: five `folio bookie` processes on `sqlite://` metadata, two
//! writers through `folio ledger write -e 3 -w 3 -a 2` fed from a pipe, while the test
//! kills bookies with SIGKILL (one at a time, or two at once so that an ensemble loses two
//! of its three bookies) and restarts them on the same data directory and port, and cuts
//! one bookie off behind a TCP proxy that drops its traffic. A writer that fails
//! (not enough bookies, an ensemble change that cannot complete) is replaced by a new
//! one on a new ledger. At the end every ledger is read with `folio ledger read` (which
//! recovers and closes it), twice, and judged against what the writers sent and what
//! `acked` lines they printed:
//!
//! - every acknowledged entry is read back byte for byte (payloads encode the ledger,
//!   the entry and a checksum of both, so a wrong or misplaced byte shows);
//! - nothing is read that the writer did not send as that entry, ids are contiguous;
//! - the closed ledger ends at or after the last acknowledged entry, and exactly at the
//!   writer's `closed N` when it printed one; both reads agree.
//!
//! At the end of the fault phase one bookie's disk is wiped: it must be refused by its
//! cookie, and is then formatted (`bookieformat -deleteCookie`) and started as a new
//! bookie; what it held is read back from the other copies.
//!
//! Power loss for real (`power_loss_run`): three bookies whose data directories are on
//! `LossyFs` mounts (FUSE; every write not yet fsynced is dropped at a cut, page cache
//! included) lose power one, two and all three at once under a live writer, restart on
//! what is left, and every acknowledged entry must read back; the negative control runs
//! the same with `journalSyncData=false` and must lose some.
//!
//! The fault phase lasts `FOLIO_FAULT_SECONDS` (default 40) of real time; the fault
//! choices come from `FOLIO_FAULT_SEED` (printed; default: from the clock). Nothing is
//! asserted about speed: timeouts are generous and only bound a hung process.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bounds a hung process only: the machine is slow and shared.
const TIMEOUT: Duration = Duration::from_secs(120);
const BOOKIES: usize = 5;
/// The bookie behind the proxy.
const CUT: usize = 4;
/// Short, so that a killed bookie's registration expires soon and its restart can register.
const SESSION_TIMEOUT_MS: u64 = 2000;

fn folio(uri: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_folio"));
    c.env_remove("FOLIO_METADATA")
        .env_remove("FOLIO_LOG")
        .arg("--metadata")
        .arg(uri);
    c
}

/// A seeded generator for the fault choices (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }

    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

/// A child process whose stdout lines arrive on a channel; SIGKILLed on drop.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    stderr_reader: Option<std::thread::JoinHandle<()>>,
}

impl Proc {
    fn spawn(mut cmd: Command) -> Proc {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning folio");
        let (tx, lines) = channel();
        let stdout = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().expect("piped stderr");
        let sink = stderr.clone();
        let stderr_reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    return;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let stdin = child.stdin.take();
        Proc {
            child,
            stdin,
            lines,
            stderr,
            stderr_reader: Some(stderr_reader),
        }
    }

    /// The next stdout line, or None at EOF or after `TIMEOUT`.
    fn next_line(&self) -> Option<String> {
        self.lines.recv_timeout(TIMEOUT).ok()
    }

    fn try_line(&self) -> Result<String, TryRecvError> {
        self.lines.try_recv()
    }

    fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// All the process wrote to stderr: ends it if it still runs, then waits for the
    /// reader thread to drain the pipe. Stdout's EOF can come before the last of stderr
    /// is read, so `stderr()` right after an exit may miss why it exited.
    fn stderr_at_exit(&mut self) -> String {
        self.kill();
        if let Some(reader) = self.stderr_reader.take() {
            let _ = reader.join();
        }
        self.stderr()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the exit after stdin is closed; SIGKILL after `TIMEOUT`.
    fn finish(&mut self) -> std::process::ExitStatus {
        self.stdin = None;
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return s;
            }
            if Instant::now() > deadline {
                self.kill();
                panic!("a folio process did not exit; stderr {}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

/// A TCP proxy in front of one bookie. Cut: every byte either way is dropped (connections
/// stay open, so clients see timeouts, not resets), new connections are accepted and
/// black-holed. Heal: the connections that lived through the cut are closed (their
/// streams lost bytes) and new ones are forwarded again.
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    generation: Arc<AtomicU64>,
    conns: Arc<Mutex<Vec<(u64, TcpStream)>>>,
}

impl Proxy {
    fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy listener");
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let generation = Arc::new(AtomicU64::new(0));
        let conns: Arc<Mutex<Vec<(u64, TcpStream)>>> = Arc::default();
        let (c, g, cs) = (cut.clone(), generation.clone(), conns.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let my_gen = g.load(Ordering::SeqCst);
                let server = if c.load(Ordering::SeqCst) {
                    None
                } else {
                    match TcpStream::connect(("127.0.0.1", target)) {
                        Ok(s) => Some(s),
                        // The bookie is down: refuse as it would.
                        Err(_) => continue,
                    }
                };
                {
                    let mut list = cs.lock().unwrap();
                    list.retain(|(gen_, _)| *gen_ >= g.load(Ordering::SeqCst));
                    list.push((my_gen, client.try_clone().unwrap()));
                    if let Some(s) = &server {
                        list.push((my_gen, s.try_clone().unwrap()));
                    }
                }
                match server {
                    Some(server) => {
                        pump(client.try_clone().unwrap(), server.try_clone().unwrap(), &c);
                        pump(server, client, &c);
                    }
                    None => {
                        // Accepted during a cut: read and drop until the heal closes it.
                        std::thread::spawn(move || {
                            let mut client = client;
                            let mut buf = [0u8; 16 * 1024];
                            while matches!(client.read(&mut buf), Ok(n) if n > 0) {}
                        });
                    }
                }
            }
        });
        Proxy {
            port,
            cut,
            generation,
            conns,
        }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
        let now = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let mut list = self.conns.lock().unwrap();
        for (_, s) in list.iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
        list.retain(|(g, _)| *g >= now);
    }
}

/// Copies `from` to `to` on a thread, dropping the bytes while `cut` is set.
fn pump(mut from: TcpStream, mut to: TcpStream, cut: &Arc<AtomicBool>) {
    let cut = cut.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if cut.load(Ordering::SeqCst) {
                continue;
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}

struct Bookie {
    port: u16,
    dir: PathBuf,
    config: PathBuf,
    proc: Option<Proc>,
}

struct Cluster {
    uri: String,
    bookies: Vec<Bookie>,
}

impl Cluster {
    /// `BOOKIES` bookies with data under `root`, bookie `CUT` registered under the proxy's
    /// address (`cut_id_port`) and listening on `cut_port`.
    fn new(root: &Path, cut_id_port: u16, cut_port: u16) -> Cluster {
        Cluster::with(root, BOOKIES, |i| {
            let port = if i == CUT { cut_port } else { free_port() };
            // The cut bookie registers the proxy's address: every client dials the proxy.
            let id_port = if i == CUT { cut_id_port } else { port };
            (
                port,
                id_port,
                root.join(format!("bookie{i}")),
                String::new(),
            )
        })
    }

    /// `n` bookies; `bookie(i)` gives each its port, the port of its id, its data
    /// directory and more config lines.
    fn with(
        root: &Path,
        n: usize,
        mut bookie: impl FnMut(usize) -> (u16, u16, PathBuf, String),
    ) -> Cluster {
        let uri = format!("sqlite://{}/meta.db", root.display());
        let out = folio(&uri)
            .args(["shell", "initnewcluster"])
            .output()
            .expect("folio shell initnewcluster");
        assert!(
            out.status.success(),
            "initnewcluster: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut bookies = Vec::new();
        for i in 0..n {
            let (port, id_port, dir, extra) = bookie(i);
            std::fs::create_dir_all(&dir).unwrap();
            let config = root.join(format!("bookie{i}.toml"));
            std::fs::write(
                &config,
                format!(
                    "bookie_id = \"127.0.0.1:{id_port}\"\nlisten_address = \"127.0.0.1\"\n\
                     disk_usage_threshold = 0.999\ndisk_usage_lwm_threshold = 0.998\n\
                     metadata_session_timeout_ms = {SESSION_TIMEOUT_MS}\n{extra}"
                ),
            )
            .unwrap();
            bookies.push(Bookie {
                port,
                dir,
                config,
                proc: None,
            });
        }
        Cluster { uri, bookies }
    }

    /// Starts bookie `i` and waits for `ready`. A restart soon after a SIGKILL finds the
    /// old registration alive until its session expires and waits for that; should it
    /// still fail to start (a slow machine), it is started again a little later.
    fn start(&mut self, i: usize) {
        if let Err(e) = self.try_start(i, 60) {
            panic!("{e}");
        }
    }

    /// Starts bookie `i`, trying up to `attempts` times; the last error if it never got
    /// to `ready`.
    fn try_start(&mut self, i: usize, attempts: usize) -> Result<(), String> {
        let b = &mut self.bookies[i];
        let mut last = String::new();
        for _ in 0..attempts {
            let mut cmd = folio(&self.uri);
            cmd.arg("bookie")
                .arg("--port")
                .arg(b.port.to_string())
                .arg("--data-dir")
                .arg(&b.dir)
                .arg("--config")
                .arg(&b.config);
            let mut p = Proc::spawn(cmd);
            while let Some(line) = p.next_line() {
                if line == "ready" {
                    b.proc = Some(p);
                    return Ok(());
                }
            }
            last = p.stderr_at_exit();
            drop(p);
            std::thread::sleep(Duration::from_millis(500));
        }
        Err(format!("bookie {i} did not start: {last}"))
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.bookies[i].proc.take() {
            p.kill();
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The payload of entry `entry` of `ledger`: names both, with a checksum and padding
/// derived from them, so that any wrong byte or misplaced entry is detected.
fn payload(ledger: u64, entry: u64) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in format!("{ledger}/{entry}").bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    let pad: String = (0..40)
        .map(|i| char::from(b'a' + ((h >> (i % 60)) as u8 % 26)))
        .collect();
    format!("ledger={ledger} entry={entry} sum={h:016x} {pad}")
}

/// What one writer process did to one ledger.
#[derive(Debug, Default)]
struct Written {
    ledger: u64,
    sent: u64,
    acked: Vec<i64>,
    closed: Option<i64>,
    end: String,
}

/// Writer `w`: one `folio ledger write` after another until `stop`; `current` names the
/// ledger it is writing (for a recovery that fences it mid-run).
fn writer(
    uri: String,
    w: usize,
    stop: Arc<AtomicBool>,
    current: Arc<Mutex<Option<u64>>>,
) -> Vec<Written> {
    let mut done = Vec::new();
    let mut attempt = 0u64;
    while !stop.load(Ordering::SeqCst) {
        attempt += 1;
        let mut cmd = folio(&uri);
        cmd.args(["ledger", "write", "-e", "3", "-w", "3", "-a", "2"]);
        let mut p = Proc::spawn(cmd);
        let Some(ledger) = p
            .next_line()
            .and_then(|l| l.strip_prefix("ledger ")?.parse::<u64>().ok())
        else {
            // Could not create a ledger (not enough bookies): try again shortly.
            let _ = p.finish();
            std::thread::sleep(Duration::from_millis(300));
            continue;
        };
        *current.lock().unwrap() = Some(ledger);
        let mut rec = Written {
            ledger,
            ..Written::default()
        };
        // A ledger of 100-400 entries, then a clean close.
        let length = 100 + (attempt * 97 + w as u64 * 31) % 300;
        let read_lines = |p: &Proc, rec: &mut Written| {
            while let Ok(line) = p.try_line() {
                if let Some(n) = line.strip_prefix("acked ") {
                    rec.acked.push(n.parse().expect("acked <entry id>"));
                } else if let Some(n) = line.strip_prefix("closed ") {
                    rec.closed = Some(n.parse().expect("closed <entry id>"));
                }
            }
        };
        while rec.sent < length && !stop.load(Ordering::SeqCst) && !p.exited() {
            // Some in flight, not unbounded.
            if rec.sent < rec.acked.len() as u64 + 200 {
                let mut batch = String::new();
                for _ in 0..10.min(length - rec.sent) {
                    batch.push_str(&payload(ledger, rec.sent));
                    batch.push('\n');
                    rec.sent += 1;
                }
                if let Some(s) = p.stdin.as_mut() {
                    // The writer may have died meanwhile (a broken pipe): noticed above.
                    let _ = s.write_all(batch.as_bytes()).and_then(|()| s.flush());
                }
            }
            std::thread::sleep(Duration::from_millis(40));
            read_lines(&p, &mut rec);
        }
        let status = p.finish();
        // The rest of stdout (the reader thread ends at EOF).
        while let Some(line) = p.next_line() {
            if let Some(n) = line.strip_prefix("acked ") {
                rec.acked.push(n.parse().expect("acked <entry id>"));
            } else if let Some(n) = line.strip_prefix("closed ") {
                rec.closed = Some(n.parse().expect("closed <entry id>"));
            }
        }
        rec.end = if status.success() {
            "closed".into()
        } else {
            p.stderr_at_exit().lines().last().unwrap_or("").to_string()
        };
        done.push(rec);
    }
    done
}

/// Reads a ledger with recovery: its entries as (id, payload), retrying while bookies
/// are coming back.
fn read_ledger(uri: &str, ledger: u64) -> Result<Vec<(i64, String)>, String> {
    let mut last = String::new();
    for _ in 0..10 {
        let out = folio(uri)
            .args(["ledger", "read", &ledger.to_string()])
            .stdin(Stdio::null())
            .output()
            .expect("folio ledger read");
        if out.status.success() {
            let text = String::from_utf8(out.stdout).map_err(|e| e.to_string())?;
            return text
                .lines()
                .map(|l| {
                    let (id, p) = l.split_once('\t').ok_or(format!("bad line {l:?}"))?;
                    Ok((id.parse().map_err(|_| format!("bad id {l:?}"))?, p.into()))
                })
                .collect();
        }
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        std::thread::sleep(Duration::from_secs(1));
    }
    Err(last)
}

/// Bookie `i`'s disk is replaced by an empty one: the bookie must be refused by its cookie
/// (it would otherwise answer "no such entry" for what it acknowledged), and is then
/// formatted as a new bookie (`bookieformat -deleteCookie`) and started again. What it
/// held must still be read back from the other copies.
fn wipe_and_reformat(cluster: &mut Cluster, i: usize) {
    cluster.kill(i);
    let (dir, config) = (
        cluster.bookies[i].dir.clone(),
        cluster.bookies[i].config.clone(),
    );
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    let refused = cluster
        .try_start(i, 1)
        .expect_err("a wiped bookie joined as the old one");
    assert!(refused.to_lowercase().contains("cookie"), "{refused}");
    let out = folio(&cluster.uri)
        .args([
            "shell",
            "bookieformat",
            "-nonInteractive",
            "-force",
            "-deleteCookie",
        ])
        .arg("-datadir")
        .arg(&dir)
        .arg("-conf")
        .arg(&config)
        .stdin(Stdio::null())
        .output()
        .expect("folio shell bookieformat");
    assert!(
        out.status.success(),
        "bookieformat: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster.start(i);
    println!(
        "fault_processes: bookie {i} wiped: refused by its cookie, formatted, back as a new bookie"
    );
}

/// Reads every ledger twice (recovering and closing it) and judges what was read: every
/// violation found.
fn judge_all(uri: &str, written: &[Written]) -> Vec<String> {
    // Four at a time: each read is a `folio ledger read` process.
    let chunk = written.len().div_ceil(4).max(1);
    std::thread::scope(|s| {
        let parts: Vec<_> = written
            .chunks(chunk)
            .map(|part| s.spawn(move || judge_part(uri, part)))
            .collect();
        parts
            .into_iter()
            .flat_map(|h| h.join().expect("judging thread"))
            .collect()
    })
}

fn judge_part(uri: &str, written: &[Written]) -> Vec<String> {
    let mut violations = Vec::new();
    for rec in written {
        let first = read_ledger(uri, rec.ledger);
        let second = read_ledger(uri, rec.ledger);
        match (first, second) {
            (Ok(a), Ok(b)) => {
                println!(
                    "fault_processes: ledger {}: {} sent, {} acked, {} read; writer: {}",
                    rec.ledger,
                    rec.sent,
                    rec.acked.len(),
                    a.len(),
                    rec.end
                );
                violations.extend(judge(rec, &a));
                if a != b {
                    violations.push(format!(
                        "ledger {}: two reads of the closed ledger differ ({} and {} entries)",
                        rec.ledger,
                        a.len(),
                        b.len()
                    ));
                }
            }
            (Err(e), _) | (_, Err(e)) => {
                violations.push(format!("ledger {}: cannot be read: {e}", rec.ledger))
            }
        }
    }
    violations
}

/// Every violation of one ledger's record by what was read back.
fn judge(rec: &Written, entries: &[(i64, String)]) -> Vec<String> {
    let mut v = Vec::new();
    let l = rec.ledger;
    for (i, (id, p)) in entries.iter().enumerate() {
        if *id != i as i64 {
            v.push(format!("ledger {l}: entry {i} read with id {id}"));
        } else if *id >= rec.sent as i64 || *p != payload(l, *id as u64) {
            v.push(format!(
                "ledger {l}: entry {id} has bytes its writer never sent there: {p:?}"
            ));
        }
    }
    let last = entries.len() as i64 - 1;
    for (k, &a) in rec.acked.iter().enumerate() {
        if a != k as i64 {
            v.push(format!("ledger {l}: append {k} acknowledged as entry {a}"));
        }
        if a > last {
            v.push(format!(
                "ledger {l}: acknowledged entry {a} missing, the ledger ends at {last}"
            ));
        }
    }
    if let Some(c) = rec.closed
        && c != last
    {
        v.push(format!(
            "ledger {l}: the writer closed it at {c}, read ends at {last}"
        ));
    }
    v
}

#[test]
fn acknowledged_entries_survive_sigkills_restarts_and_a_cut_off_bookie() {
    let seconds: u64 = std::env::var("FOLIO_FAULT_SECONDS")
        .ok()
        .map(|s| s.parse().expect("FOLIO_FAULT_SECONDS is a number"))
        .unwrap_or(40);
    let seed: u64 = std::env::var("FOLIO_FAULT_SEED")
        .ok()
        .map(|s| s.parse().expect("FOLIO_FAULT_SEED is a number"))
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
        | 1;
    println!("fault_processes: seed {seed} (replay the choices: FOLIO_FAULT_SEED={seed})");
    let mut rng = Rng(seed);
    let root = tempfile::tempdir().unwrap();
    let cut_port = free_port();
    // The proxy forwards to the cut bookie's real port.
    let proxy = Proxy::start(cut_port);
    let mut cluster = Cluster::new(root.path(), proxy.port, cut_port);
    for i in 0..BOOKIES {
        cluster.start(i);
    }
    println!("fault_processes: {BOOKIES} bookies ready; bookie {CUT} behind a proxy");

    let stop = Arc::new(AtomicBool::new(false));
    let current: Vec<Arc<Mutex<Option<u64>>>> = (0..2).map(|_| Arc::default()).collect();
    let writers: Vec<JoinHandle<Vec<Written>>> = (0..2)
        .map(|w| {
            let (uri, stop, cur) = (cluster.uri.clone(), stop.clone(), current[w].clone());
            std::thread::spawn(move || writer(uri, w, stop, cur))
        })
        .collect();
    // Ledgers recovered while their writer was still writing, and what that read saw.
    let mut midrun: Vec<(u64, Vec<(i64, String)>)> = Vec::new();

    let started = Instant::now();
    let (mut rounds, mut kills, mut cuts, mut doubles) = (0, 0, 0, 0);
    while started.elapsed() < Duration::from_secs(seconds) {
        rounds += 1;
        std::thread::sleep(rng.millis(500, 2000));
        let victim = rng.below(BOOKIES as u64) as usize;
        cluster.kill(victim);
        kills += 1;
        // Now and then a second bookie goes down with it: an ensemble may lose two of its
        // three bookies, so its writer stalls (no ack quorum, or no bookie to change to)
        // until they come back, and then goes on with nothing lost.
        let second = (rng.below(3) == 0).then(|| (victim + 1 + rng.below(3) as usize) % BOOKIES);
        if let Some(s) = second {
            cluster.kill(s);
            kills += 1;
            doubles += 1;
        }
        let cut = rng.below(2) == 0;
        if cut {
            proxy.cut();
            cuts += 1;
        }
        std::thread::sleep(rng.millis(300, 2500));
        cluster.start(victim);
        if let Some(s) = second {
            cluster.start(s);
        }
        if cut {
            std::thread::sleep(rng.millis(0, 2000));
            proxy.heal();
        }
        println!(
            "fault_processes: round {rounds}: SIGKILL bookie {victim}{}, restarted{}",
            second.map_or(String::new(), |s| format!(" and bookie {s}")),
            if cut {
                ", bookie 4 cut off and healed"
            } else {
                ""
            }
        );
        // Now and then another client recovers a ledger under its live writer: the
        // writer is fenced, and nothing it has acknowledged may be lost.
        if rng.below(4) == 0 {
            let w = rng.below(2) as usize;
            let ledger = *current[w].lock().unwrap();
            if let Some(ledger) = ledger {
                match read_ledger(&cluster.uri, ledger) {
                    Ok(entries) => {
                        println!(
                            "fault_processes: recovered ledger {ledger} under writer {w}: {} entries",
                            entries.len()
                        );
                        midrun.push((ledger, entries));
                    }
                    Err(e) => println!("fault_processes: recovering ledger {ledger}: {e}"),
                }
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    let written: Vec<Written> = writers
        .into_iter()
        .flat_map(|h| h.join().expect("writer thread"))
        .collect();
    proxy.heal();
    wipe_and_reformat(&mut cluster, 0);

    let acked: usize = written.iter().map(|r| r.acked.len()).sum();
    // Straight to stderr, past the harness's capture: the test command's output shows
    // how much fault this run injected.
    let _ = writeln!(
        std::io::stderr().lock(),
        "fault_processes: {rounds} rounds, {kills} SIGKILLs and restarts ({doubles} rounds with \
         two bookies down at once), {cuts} cuts, {} recoveries under a live writer; {} ledgers, \
         {acked} entries acknowledged",
        midrun.len(),
        written.len()
    );
    let mut violations = judge_all(&cluster.uri, &written);
    for (ledger, early) in &midrun {
        if let Ok(late) = read_ledger(&cluster.uri, *ledger)
            && *early != late
        {
            violations.push(format!(
                "ledger {ledger}: recovered mid-run with {} entries, read at the end with {}",
                early.len(),
                late.len()
            ));
        }
    }
    for i in 0..BOOKIES {
        cluster.kill(i);
    }
    assert!(
        violations.is_empty(),
        "seed {seed}: {violations:#?}\nrecords: {written:#?}"
    );
    // The run must have done something for the checks to mean anything.
    assert!(acked > 0, "no entry was acknowledged: {written:#?}");
    assert!(kills > 0);
}

#[test]
fn the_judge_sees_a_lost_a_wrong_and_a_misplaced_entry() {
    let rec = Written {
        ledger: 7,
        sent: 3,
        acked: vec![0, 1, 2],
        closed: None,
        end: String::new(),
    };
    let good: Vec<(i64, String)> = (0..3).map(|e| (e, payload(7, e as u64))).collect();
    assert!(judge(&rec, &good).is_empty());
    assert!(judge(&rec, &good[..2])[0].contains("missing"));
    let mut wrong = good.clone();
    wrong[1].1.replace_range(0..1, "L");
    assert!(judge(&rec, &wrong)[0].contains("never sent"));
    let mut moved = good.clone();
    moved[2].1 = payload(7, 1);
    assert!(judge(&rec, &moved)[0].contains("never sent"));
}

/// What one power-loss run saw.
struct PowerLossRun {
    violations: Vec<String>,
    acked: usize,
    ledgers: usize,
    pages_dropped: u64,
    dir_ops_undone: u64,
}

/// Three bookies, each with its data directory on its own `LossyFs` mount (a FUSE file
/// system that drops every write not yet fsynced when its power is cut, page cache
/// included), under a live writer (E3 Qw3 Qa2). Each round SIGKILLs one, two or all
/// three bookies, cuts their power, and restarts them on what is left; then every ledger
/// is read back and judged. Checkpoints run every 3 s (entry logs and index written and
/// fsynced, journal files trimmed behind them), so a cut may strike one. With `sync`
/// false (`journalSyncData=false`) what was acknowledged since a bookie's last checkpoint
/// was never fsynced, and a cut of all three loses it.
fn power_loss_run(sync: bool) -> PowerLossRun {
    const N: usize = 3;
    let root = tempfile::tempdir().unwrap();
    let mounts: Vec<folio_testsvc::LossyFs> = (0..N)
        .map(|i| {
            let (backing, mnt) = (
                root.path().join(format!("backing{i}")),
                root.path().join(format!("mnt{i}")),
            );
            std::fs::create_dir_all(&backing).unwrap();
            std::fs::create_dir_all(&mnt).unwrap();
            folio_testsvc::LossyFs::mount(&backing, &mnt).expect("mount the lossy file system")
        })
        .collect();
    let extra = format!("flush_interval_ms = 3000\njournal_sync_data = {sync}\n");
    let mut cluster = Cluster::with(root.path(), N, |i| {
        let port = free_port();
        // Bookies 1 and 2 make their journals durable on BookKeeper's force-write thread
        // (the writer goes on writing groups while an fdatasync runs), bookie 0 inline: a
        // cut meets both paths, and the round that cuts 1 and 2 together loses whatever
        // the force-write path acknowledged before it was durable.
        let force_write = if i >= 1 {
            "journal_force_write_thread = true\n"
        } else {
            ""
        };
        (
            port,
            port,
            mounts[i].mountpoint().join("bookie"),
            format!("{extra}{force_write}"),
        )
    });
    for i in 0..N {
        cluster.start(i);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (uri, stop) = (cluster.uri.clone(), stop.clone());
        std::thread::spawn(move || writer(uri, 0, stop, Arc::default()))
    };
    let mut violations = Vec::new();
    let rounds: [&[usize]; 4] = [&[0], &[1, 2], &[0, 1, 2], &[0, 1, 2]];
    for (r, victims) in rounds.iter().enumerate() {
        std::thread::sleep(Duration::from_millis(2000));
        for &i in *victims {
            cluster.kill(i);
            mounts[i].cut_power();
        }
        std::thread::sleep(Duration::from_millis(300));
        for &i in *victims {
            // A bookie that cannot start on what the cut left is itself a finding.
            if let Err(e) = cluster.try_start(i, if sync { 60 } else { 10 }) {
                violations.push(format!("round {r}: after its power cut, {e}"));
            }
        }
        println!("fault_processes: power round {r}: bookies {victims:?} lost power and restarted");
    }
    std::thread::sleep(Duration::from_millis(2000));
    stop.store(true, Ordering::SeqCst);
    let written: Vec<Written> = writer.join().expect("writer thread");
    violations.extend(judge_all(&cluster.uri, &written));
    for i in 0..N {
        cluster.kill(i);
    }
    let pages_dropped = mounts.iter().map(|m| m.stats().pages_dropped).sum();
    let dir_ops_undone = mounts.iter().map(|m| m.stats().dir_ops_undone).sum();
    // Unmounted only now that no bookie uses the mounts.
    drop(mounts);
    PowerLossRun {
        violations,
        acked: written.iter().map(|r| r.acked.len()).sum(),
        ledgers: written.len(),
        pages_dropped,
        dir_ops_undone,
    }
}

#[test]
fn acknowledged_entries_survive_power_loss_of_one_two_and_all_bookies() {
    let run = power_loss_run(true);
    let _ = writeln!(
        std::io::stderr().lock(),
        "fault_processes: power loss: 4 rounds (one, two, all three bookies twice; bookies 1 \
         and 2 with the force-write thread), {} pages of unsynced writes dropped and {} \
         directory operations undone; {} ledgers, {} entries acknowledged",
        run.pages_dropped,
        run.dir_ops_undone,
        run.ledgers,
        run.acked
    );
    assert!(run.violations.is_empty(), "{:#?}", run.violations);
    assert!(run.acked > 0, "no entry was acknowledged");
}

/// The negative control: the same run with the journal's fdatasync off
/// (`journalSyncData=false`) must lose acknowledged entries (or leave a bookie unable
/// to start), or the power-loss test above could not see a missing fsync.
#[test]
fn negative_control_power_loss_without_journal_sync_loses_acknowledged_entries() {
    let run = power_loss_run(false);
    assert!(run.acked > 0, "no entry was acknowledged");
    assert!(
        !run.violations.is_empty(),
        "{} entries acknowledged without fsync all survived {} dropped pages",
        run.acked,
        run.pages_dropped
    );
    println!(
        "negative control caught: {:#?}",
        &run.violations[..run.violations.len().min(5)]
    );
}
