//! The web dashboard in a real browser: `folio standalone` (three bookies) plus one `folio
//! bookie` process, a ledger written through the CLI, and Debian's headless Chromium loading
//! the pages the first bookie serves. Chromium runs its own JavaScript against the real
//! endpoints; the test reads the DOM it dumps (`--dump-dom`, after the page's fetches, with a
//! virtual time budget) and takes one screenshot per page.
//!
//! Checked: the cluster page lists every bookie as writable; the ledgers page lists the
//! written ledger and its page shows its ensemble and its first and last entries; the bookie
//! process, once stopped, shows as gone, and the autorecovery page shows why the worker is
//! stuck on a ledger written on all four bookies (none is left to take its copies). Pages
//! that have not caught up yet are loaded again until a generous deadline.
//!
//! Screenshots go to `<target>/tmp/dashboard-browser/`; with `FOLIO_DASHBOARD_DOCS=1` one of
//! each page is also copied to `docs/dashboard-<page>.png` (how the README's pictures are
//! made; the autorecovery one shows the stuck ledger).
//! Chromium must be installed (`scripts/test` installs Debian's `chromium`): without it the
//! test fails saying so, it does not skip.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// How long a page may take to show what the test waits for (the machine is slow and shared).
const PAGE_DEADLINE: Duration = Duration::from_secs(120);
/// How long one Chromium run may take before it counts as hung.
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(90);

/// The Chromium binary: `FOLIO_CHROMIUM`, else Debian's `chromium` on the PATH.
fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("FOLIO_CHROMIUM") {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser"] {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "Chromium is not installed: the dashboard's browser test needs Debian's `chromium` \
         package (scripts/test installs it; by hand: apt-get install chromium), or \
         FOLIO_CHROMIUM=/path/to/chromium"
    );
}

/// One headless Chromium run on `url` with a fresh profile; `what` are the extra flags
/// (`--dump-dom`, `--screenshot=...`). Returns stdout.
fn run_chromium(profiles: &Path, url: &str, what: &[String]) -> String {
    let profile = tempfile::tempdir_in(profiles).unwrap();
    let mut cmd = Command::new(chromium());
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        // Virtual time runs the page's timers, and waits for its fetches, up to this budget.
        "--virtual-time-budget=8000",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .args(what)
    .arg(url);
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromium().display()));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(CHROMIUM_TIMEOUT) {
        Ok(out) => out.expect("chromium's output"),
        Err(_) => {
            // Our own child, by its id.
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("chromium did not finish {url} within {CHROMIUM_TIMEOUT:?}");
        }
    };
    assert!(
        out.status.success(),
        "chromium failed on {url} ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Loads `url` until its DOM satisfies `ok`, within [`PAGE_DEADLINE`]; the last DOM.
fn dom_until(profiles: &Path, url: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + PAGE_DEADLINE;
    loop {
        let dom = run_chromium(profiles, url, &["--dump-dom".to_string()]);
        if ok(&dom) {
            return dom;
        }
        assert!(
            Instant::now() < deadline,
            "{url} never showed {what} within {PAGE_DEADLINE:?}; its last DOM:\n{dom}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Chromium on the dashboard at `base`, with fresh profiles under `profiles` and screenshots
/// written to `out`.
struct Browser {
    profiles: tempfile::TempDir,
    out: PathBuf,
    base: String,
}

impl Browser {
    fn url(&self, route: &str) -> String {
        format!("{}#/{route}", self.base)
    }

    /// Loads `route` until its DOM satisfies `ok` (see [`dom_until`]), then screenshots it
    /// to `<out>/dashboard-<shot>.png`; the DOM.
    fn page(&self, route: &str, what: &str, shot: &str, ok: impl Fn(&str) -> bool) -> String {
        let url = self.url(route);
        let dom = dom_until(self.profiles.path(), &url, what, ok);
        self.screenshot(&url, shot, &[]);
        dom
    }

    /// `extra`: flags such as a window size or the dark theme.
    fn screenshot(&self, url: &str, shot: &str, extra: &[&str]) {
        let file = self.out.join(format!("dashboard-{shot}.png"));
        let _ = std::fs::remove_file(&file);
        let mut flags = vec![format!("--screenshot={}", file.display())];
        if !extra.iter().any(|f| f.starts_with("--window-size=")) {
            flags.push("--window-size=1280,860".to_string());
        }
        flags.extend(extra.iter().map(|f| f.to_string()));
        run_chromium(self.profiles.path(), url, &flags);
        let png = std::fs::read(&file)
            .unwrap_or_else(|e| panic!("no screenshot {}: {e}", file.display()));
        assert!(
            png.starts_with(b"\x89PNG"),
            "{} is not a PNG",
            file.display()
        );
    }
}

/// The row of bookie `id` on the cluster page shows `state`.
fn bookie_row(dom: &str, id: &str, state: &str) -> bool {
    dom.contains(&format!("data-bookie=\"{id}\" data-state=\"{state}\""))
}

#[test]
fn the_dashboard_shows_the_cluster_its_ledgers_and_a_stopped_bookie_in_chromium() {
    let started = Instant::now();
    chromium(); // fails first, and clearly, when Chromium is missing
    let dir = tempfile::tempdir().unwrap();
    let profiles = tempfile::tempdir().unwrap();
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-browser");
    std::fs::create_dir_all(&out).unwrap();

    let s = Standalone::start(&dir.path().join("cluster"), 3);
    let http = s.http_addr();
    let base = format!("http://{http}/");
    // One more bookie in a process of its own, so that the test can stop it.
    let mut extra = bookie_process(
        &dir.path().join("extra"),
        &s.uri,
        "listen_address = \"127.0.0.1\"\nhttp_port = 0\n\
         disk_usage_threshold = 0.999\ndisk_usage_lwm_threshold = 0.998\n",
    );
    let extra_id = extra
        .seen
        .iter()
        .find_map(|l| l.strip_prefix("bookie ")?.split_whitespace().next())
        .expect("the bookie prints its id")
        .to_owned();
    let mut every: Vec<String> = s.bookies.clone();
    every.push(extra_id.clone());

    let (ledger, meta) = s.write_ledger(&["-e", "3", "-w", "2", "-a", "2"], b"one\ntwo\nthree\n");
    let ensemble: Vec<String> = meta["ensembles"]["0"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ensemble.len(), 3, "{meta}");
    // A ledger on all four bookies: once the extra one stops, no bookie is left to take its
    // copies, and the in-process ReplicationWorker is stuck on it.
    let (wide, _) = s.write_ledger(&["-e", "4", "-w", "4", "-a", "4"], b"wide\n");

    let browser = Browser {
        profiles,
        out: out.clone(),
        base,
    };
    // The cluster page: every bookie, writable; also on a phone, in the dark theme.
    browser.page("cluster", "every bookie writable", "cluster", |dom| {
        every.iter().all(|b| bookie_row(dom, b, "writable"))
    });
    browser.screenshot(
        &browser.url("cluster"),
        "phone-dark",
        &["--window-size=390,844", "--force-dark-mode"],
    );

    // The ledgers page lists the ledger; its own page draws its ensemble.
    browser.page("ledgers", "the written ledger", "ledgers", |dom| {
        dom.contains(&format!("data-ledger=\"{ledger}\""))
    });
    let dom = browser.page(
        &format!("ledger/{ledger}"),
        "the ledger's ensemble",
        "ledger",
        // The standalone serves ledger reads without a token: the page shows the first and
        // last entries at once.
        |dom| {
            dom.contains(&format!("data-ledger-detail=\"{ledger}\""))
                && dom.contains("data-entry=\"2\"")
        },
    );
    for (entry, payload) in [("0", "one"), ("2", "three")] {
        let shown =
            format!("data-entry=\"{entry}\"><strong>entry {entry}</strong><pre>{payload}</pre>");
        assert!(dom.contains(&shown), "no {shown} in:\n{dom}");
    }
    for b in &ensemble {
        assert!(
            dom.contains(&format!("data-ensemble-bookie=\"{b}\"")),
            "ledger {ledger}'s page does not show {b} of its ensemble {ensemble:?}:\n{dom}"
        );
    }
    assert!(dom.contains("data-first=\"0\""), "{dom}");
    browser.page(
        "autorecovery",
        "the autorecovery page",
        "autorecovery",
        |dom| dom.contains("data-loaded=\"autorecovery\""),
    );
    browser.page("metrics", "the charts", "metrics", |dom| {
        dom.contains("data-loaded=\"metrics\"") && dom.matches("<canvas").count() == 4
    });

    // The bookie process stops: it unregisters, and the page shows it gone.
    extra.terminate();
    assert!(extra.wait().success(), "{}", extra.stderr());
    browser.page(
        "cluster",
        "the stopped bookie gone",
        "cluster-gone",
        |dom| {
            bookie_row(dom, &extra_id, "gone")
                && s.bookies.iter().all(|b| bookie_row(dom, b, "writable"))
        },
    );
    // The autorecovery page shows why the worker cannot repair the wide ledger.
    let dom = browser.page(
        "autorecovery",
        "the wide ledger stuck",
        "autorecovery-stuck",
        |dom| dom.contains(&format!("data-stuck=\"{wide}\"")),
    );
    let why = format!("no bookie can take the replica of {extra_id}");
    assert!(dom.contains(&why), "no {why:?} in:\n{dom}");
    s.stop();

    if std::env::var_os("FOLIO_DASHBOARD_DOCS").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
        // (screenshot, picture in docs/): the autorecovery picture is the stuck queue.
        for (shot, page) in [
            ("cluster", "cluster"),
            ("ledgers", "ledgers"),
            ("ledger", "ledger"),
            ("autorecovery-stuck", "autorecovery"),
            ("metrics", "metrics"),
            ("phone-dark", "phone-dark"),
        ] {
            std::fs::copy(
                out.join(format!("dashboard-{shot}.png")),
                docs.join(format!("dashboard-{page}.png")),
            )
            .unwrap();
        }
    }
    eprintln!(
        "dashboard browser test: screenshots in {}; took {:?}",
        out.display(),
        started.elapsed()
    );
}
