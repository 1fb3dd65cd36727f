//! Helpers for tests that run the real `folio` binary: child processes killed on drop (a
//! failed test leaves nothing running), their output read line by line as it comes, free
//! ports, and a `folio standalone` cluster in a temporary directory.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Generous: the machine is slow and shared; nothing is asserted about speed.
pub const TIMEOUT: Duration = Duration::from_secs(180);

pub fn folio() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_folio"));
    c.env_remove("FOLIO_METADATA").env_remove("FOLIO_LOG");
    c
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The names in `dir` (none if it does not exist yet).
fn entries(dir: &Path) -> Vec<std::ffi::OsString> {
    std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.file_name())).collect())
        .unwrap_or_default()
}

/// A first port such that it and the `n - 1` following ones are free right now.
pub fn free_ports(n: u16) -> u16 {
    for _ in 0..200 {
        let first = free_port();
        if u32::from(first) + u32::from(n) > 65535 {
            continue;
        }
        let held: Vec<_> = (0..n)
            .map_while(|i| TcpListener::bind(("127.0.0.1", first + i)).ok())
            .collect();
        if held.len() == usize::from(n) {
            return first;
        }
    }
    panic!("no {n} consecutive free ports found");
}

/// A running child: stdout lines arrive on a channel, stderr is collected; killed on drop.
pub struct Proc {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    lines: Receiver<Vec<u8>>,
    /// Every stdout line so far (lossy UTF-8, without the newline).
    pub seen: Vec<String>,
    /// Every stdout byte so far, exactly.
    pub raw: Vec<u8>,
    stderr: Arc<Mutex<Vec<u8>>>,
    stderr_thread: Option<std::thread::JoinHandle<()>>,
}

impl Proc {
    pub fn spawn(mut cmd: Command) -> Proc {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning folio");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = Vec::new();
                match r.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut err_pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        let stderr_thread = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let stdin = child.stdin.take();
        Proc {
            child,
            stdin,
            lines,
            seen: Vec::new(),
            raw: Vec::new(),
            stderr,
            stderr_thread: Some(stderr_thread),
        }
    }

    /// Waits for a stdout line satisfying `pred` (every line is kept in `seen`).
    pub fn wait_line(&mut self, pred: impl Fn(&str) -> bool) -> String {
        self.try_wait_line(pred).unwrap_or_else(|()| {
            panic!(
                "process ended without the expected line; stdout {:?}, stderr {:?}",
                self.seen,
                self.stderr()
            )
        })
    }

    /// As `wait_line`, but a process that ends first is `Err` (its stderr is kept).
    pub fn try_wait_line(&mut self, pred: impl Fn(&str) -> bool) -> Result<String, ()> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let line = self.keep(line);
                    if pred(&line) {
                        return Ok(line);
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "no expected line within {TIMEOUT:?}; stdout so far {:?}, stderr {:?}",
                    self.seen,
                    self.stderr()
                ),
                Err(RecvTimeoutError::Disconnected) => return Err(()),
            }
        }
    }

    fn keep(&mut self, bytes: Vec<u8>) -> String {
        self.raw.extend_from_slice(&bytes);
        let text =
            String::from_utf8_lossy(bytes.strip_suffix(b"\n").unwrap_or(&bytes)).into_owned();
        self.seen.push(text.clone());
        text
    }

    /// Writes to stdin (errors ignored: the process may have exited).
    pub fn send(&mut self, bytes: &[u8]) {
        if let Some(s) = self.stdin.as_mut() {
            let _ = s.write_all(bytes).and_then(|()| s.flush());
        }
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Waits for the exit (killing it after the timeout), then collects the rest of stdout.
    pub fn wait(&mut self) -> ExitStatus {
        self.close_stdin();
        let deadline = Instant::now() + TIMEOUT;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "process did not exit within {TIMEOUT:?}; stdout {:?}, stderr {:?}",
                    self.seen,
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(10)) {
            self.keep(line);
        }
        if let Some(t) = self.stderr_thread.take() {
            let _ = t.join();
        }
        status
    }

    /// The rest of the first stdout line seen so far that starts with `prefix` (what the
    /// process printed after it, e.g. `http ` and its admin endpoint).
    pub fn printed(&self, prefix: &str) -> String {
        self.seen
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no line starting with {prefix:?} in {:?}", self.seen))
            .to_owned()
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        self.signal("TERM");
    }

    /// Sends a signal by name (`TERM`, `INT`).
    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name} failed");
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `folio standalone` in `dir`, started and ready.
pub struct Standalone {
    pub proc: Proc,
    pub uri: String,
    pub bookies: Vec<String>,
    pub dir: PathBuf,
    pub port: u16,
}

impl Standalone {
    /// On ports free when it starts. Between finding them and binding them, another test's
    /// process (or one of this standalone's own bookies' ephemeral HTTP ports) may take one;
    /// then standalone fails naming the port, and it is started again on others, with what
    /// the failed try wrote into `dir` removed (its cookies name the old ports).
    pub fn start(dir: &Path, bookies: u16) -> Standalone {
        let before: Vec<_> = entries(dir);
        for _ in 0..5 {
            let port = free_ports(bookies);
            match Standalone::try_start_on(dir, bookies, port) {
                Ok(sa) => return sa,
                Err(stderr) if stderr.contains("Address already in use") => {
                    eprintln!(
                        "standalone lost a port to another process; starting it on other ports: {stderr}"
                    );
                    for e in entries(dir) {
                        if !before.contains(&e) {
                            let path = dir.join(&e);
                            let _ = std::fs::remove_dir_all(&path)
                                .or_else(|_| std::fs::remove_file(&path));
                        }
                    }
                }
                Err(stderr) => panic!("standalone failed to start: {stderr}"),
            }
        }
        panic!("standalone lost its ports to other processes five times");
    }

    pub fn start_on(dir: &Path, bookies: u16, port: u16) -> Standalone {
        Standalone::try_start_on(dir, bookies, port)
            .unwrap_or_else(|stderr| panic!("standalone failed to start: {stderr}"))
    }

    /// Started and ready, or the stdout and stderr of a standalone that exited first.
    fn try_start_on(dir: &Path, bookies: u16, port: u16) -> Result<Standalone, String> {
        let mut cmd = folio();
        cmd.arg("standalone")
            .arg("--data-dir")
            .arg(dir)
            .arg("--bookies")
            .arg(bookies.to_string())
            .arg("--port")
            .arg(port.to_string())
            .arg("--http-port")
            .arg(free_port().to_string())
            // standalone_http reads ledgers over HTTP (off by default: 403).
            .arg("--http-ledger-read")
            // The machine's disk is shared with build artefacts; a bookie past the default
            // 95% threshold turns read-only and the tests' writes find no bookies.
            .env("BK_diskUsageThreshold", "0.999")
            .env("BK_diskUsageLwmThreshold", "0.998");
        let mut proc = Proc::spawn(cmd);
        if proc.try_wait_line(|l| l == "ready").is_err() {
            let _ = proc.wait();
            return Err(format!(
                "stdout {:?}, stderr {:?}",
                proc.seen,
                proc.stderr()
            ));
        }
        let uri = proc
            .seen
            .iter()
            .find_map(|l| l.strip_prefix("metadata "))
            .expect("a metadata line")
            .to_owned();
        let bookies = proc
            .seen
            .iter()
            .filter_map(|l| l.strip_prefix("bookie "))
            .map(str::to_owned)
            .collect();
        Ok(Standalone {
            proc,
            uri,
            bookies,
            dir: dir.to_owned(),
            port,
        })
    }

    /// The first bookie's admin endpoint (`host:port`), as standalone printed it.
    pub fn http_addr(&self) -> String {
        self.proc.printed("http ")
    }

    /// SIGTERM, then a clean exit.
    pub fn stop(self) {
        self.stop_with("TERM");
    }

    /// A signal (`TERM`, `INT` as Ctrl-C sends), then a clean exit.
    pub fn stop_with(mut self, signal: &str) {
        self.proc.signal(signal);
        let status = self.proc.wait();
        assert!(
            status.success(),
            "standalone did not stop cleanly: {status}, stderr {}",
            self.proc.stderr()
        );
        assert_eq!(self.proc.seen.last().map(String::as_str), Some("stopped"));
    }

    /// `folio ledger write <args>` with `stdin` as its entries: the ledger's id and its
    /// metadata as `folio ledger meta` prints it.
    pub fn write_ledger(&self, args: &[&str], stdin: &[u8]) -> (String, serde_json::Value) {
        let mut all = vec!["ledger", "write"];
        all.extend_from_slice(args);
        let text = self.run(&all, stdin).ok().text();
        let ledger = text
            .lines()
            .find_map(|l| l.strip_prefix("ledger "))
            .expect("ledger write prints the ledger id")
            .to_owned();
        let meta = self.run(&["ledger", "meta", &ledger], b"").ok().text();
        let meta = serde_json::from_str(&meta).unwrap_or_else(|e| panic!("{e}: {meta}"));
        (ledger, meta)
    }

    /// `folio --metadata <uri> <args>` to completion.
    pub fn run(&self, args: &[&str], stdin: &[u8]) -> Outcome {
        let mut cmd = folio();
        cmd.arg("--metadata").arg(&self.uri).args(args);
        run(cmd, stdin)
    }
}

/// A `folio bookie` process on `uri` with its data under `dir` and `config` (TOML) as its
/// config file, on a free port; returns once it printed `ready`.
pub fn bookie_process(dir: &Path, uri: &str, config: &str) -> Proc {
    std::fs::create_dir_all(dir).unwrap();
    let file = dir.join("bookie.toml");
    std::fs::write(&file, config).unwrap();
    let mut cmd = folio();
    cmd.arg("--metadata")
        .arg(uri)
        .args(["bookie", "--port", "0", "--config"])
        .arg(&file)
        .arg("--data-dir")
        .arg(dir.join("data"));
    let mut p = Proc::spawn(cmd);
    p.wait_line(|l| l == "ready");
    p
}

/// A finished command.
pub struct Outcome {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Outcome {
    pub fn ok(self) -> Self {
        assert!(
            self.status.success(),
            "command failed ({}): {}",
            self.status,
            self.stderr
        );
        self
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Asserts a clean failure: non-zero, one stderr line naming `cause`, no panic.
    pub fn fails_with(&self, cause: &str) {
        assert!(
            !self.status.success(),
            "should have failed: {}",
            self.text()
        );
        assert!(!self.stderr.contains("panicked"), "{}", self.stderr);
        assert_eq!(
            self.stderr.trim_end().lines().count(),
            1,
            "one line on stderr: {:?}",
            self.stderr
        );
        assert!(
            self.stderr.contains(cause),
            "stderr {:?} should name {cause:?}",
            self.stderr
        );
    }
}

pub fn run(mut cmd: Command, stdin: &[u8]) -> Outcome {
    let mut p = Proc::spawn({
        cmd.stdin(Stdio::piped());
        cmd
    });
    p.send(stdin);
    let status = p.wait();
    Outcome {
        status,
        stdout: std::mem::take(&mut p.raw),
        stderr: p.stderr(),
    }
}

/// The ledger id of a `ledger <id>` line in `out`.
pub fn ledger_id(out: &str) -> i64 {
    out.lines()
        .find_map(|l| l.strip_prefix("ledger "))
        .unwrap_or_else(|| panic!("no ledger line in {out:?}"))
        .parse()
        .unwrap()
}

/// The entry log files of the bookie whose data directory is `bookie_dir`, sorted.
pub fn entry_logs(bookie_dir: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(bookie_dir.join("ledgers/current"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    logs
}
