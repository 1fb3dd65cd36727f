//! docs/deploy.md, run on one machine: every host in its own network namespace with its
//! own address (a metadata host running etcd, four bookie hosts on port 3181 of their own
//! addresses, a client host running autorecovery and the commands), linked by veth pairs
//! to a bridge in a namespace of the test's own, so nothing outside the namespaces is
//! touched. The bookies run deploy/bookie.toml with only the host's values changed. A
//! bookie host loses its network while a ledger is written: every acknowledged entry reads
//! back, and once autorecovery has run the ledger no longer names the lost bookie and
//! nothing stays under-replicated.
//!
//! Needs root (`ip netns`), as the test command has on its machine.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Proc, TIMEOUT, run};

const SUBNET: &str = "10.77.0";
const META: &str = "10.77.0.2";
const CLIENT: &str = "10.77.0.20";

/// The test's namespaces; deleted (with everything in them) on drop.
struct Net {
    prefix: String,
    hub: String,
    hosts: Vec<String>,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("running ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Net {
    fn new() -> Net {
        let prefix = format!("folio{}", std::process::id());
        let hub = format!("{prefix}-hub");
        ip(&["netns", "add", &hub]);
        let net = Net {
            prefix,
            hub,
            hosts: Vec::new(),
        };
        ip(&["-n", &net.hub, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &net.hub, "link", "set", "br0", "up"]);
        net
    }

    /// A host `name` at `addr`, linked to the bridge; returns its namespace.
    fn host(&mut self, name: &str, addr: &str) -> String {
        let ns = format!("{}-{name}", self.prefix);
        ip(&["netns", "add", &ns]);
        self.hosts.push(ns.clone());
        let port = format!("v{}", self.hosts.len());
        ip(&[
            "-n", &self.hub, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
            &ns,
        ]);
        ip(&["-n", &self.hub, "link", "set", &port, "master", "br0", "up"]);
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            "eth0",
        ]);
        ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        ns
    }

    /// Takes a host off the network, or puts it back.
    fn link(&self, ns: &str, up: bool) {
        ip(&[
            "-n",
            ns,
            "link",
            "set",
            "eth0",
            if up { "up" } else { "down" },
        ]);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.hosts.iter().chain([&self.hub]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// `program` run inside namespace `ns`.
fn on(ns: &str, program: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, program])
        .env_remove("FOLIO_METADATA")
        .env_remove("FOLIO_LOG");
    c
}

fn folio_on(ns: &str, uri: &str, args: &[&str]) -> Command {
    let mut c = on(ns, env!("CARGO_BIN_EXE_folio"));
    c.arg("--metadata").arg(uri).args(args);
    c
}

/// deploy/bookie.toml with `key = value` lines replaced (or added).
fn bookie_config(overrides: &[(&str, String)]) -> String {
    let template = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/bookie.toml"),
    )
    .expect("deploy/bookie.toml");
    let mut lines: Vec<String> = template.lines().map(str::to_string).collect();
    for (key, value) in overrides {
        let line = format!("{key} = {value}");
        match lines
            .iter_mut()
            .find(|l| l.split('=').next().map(str::trim) == Some(key))
        {
            Some(l) => *l = line,
            None => lines.push(line),
        }
    }
    lines.join("\n") + "\n"
}

fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {TIMEOUT:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn the_deploy_guide_runs_on_separate_hosts_and_heals_a_host_that_lost_its_network() {
    let dir = tempfile::tempdir().unwrap();
    let mut net = Net::new();
    let meta = net.host("meta", META);
    let client = net.host("client", CLIENT);
    let bookie_hosts: Vec<(String, String)> = (1..=4)
        .map(|i| {
            let addr = format!("{SUBNET}.1{i}");
            (net.host(&format!("b{i}"), &addr), addr)
        })
        .collect();

    // 1. The metadata service: one etcd member on the metadata host.
    let url = format!("http://{META}:2379");
    let peer = format!("http://{META}:2380");
    let mut etcd = on(&meta, "etcd");
    etcd.args(["--name", "meta", "--data-dir"])
        .arg(dir.path().join("etcd"))
        .args([
            "--listen-client-urls",
            &url,
            "--advertise-client-urls",
            &url,
        ])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .args(["--initial-cluster", &format!("meta={peer}")])
        .args(["--logger=zap", "--log-outputs=stderr"]);
    let etcd = Proc::spawn(etcd);
    let uri = format!("etcd://{META}:2379/ledgers");
    until("the cluster initialised from the client host", || {
        let out = run(folio_on(&client, &uri, &["shell", "initnewcluster"]), b"");
        out.status.success().then_some(())
    });

    // 2. Bookies, from deploy/bookie.toml, each on port 3181 of its own address.
    let token = dir.path().join("http-token");
    std::fs::write(&token, "secret\n").unwrap();
    let mut bookies: Vec<Proc> = Vec::new();
    for (ns, addr) in &bookie_hosts {
        let home = dir.path().join(ns);
        std::fs::create_dir_all(&home).unwrap();
        let quoted = |p: &Path| format!("{:?}", p.display().to_string());
        let config = bookie_config(&[
            ("metadata_service_uri", format!("{uri:?}")),
            ("advertised_address", format!("{addr:?}")),
            (
                "journal_dirs",
                format!("[{}]", quoted(&home.join("journal"))),
            ),
            (
                "ledger_dirs",
                format!("[{}]", quoted(&home.join("ledgers"))),
            ),
            ("http_auth_token_file", quoted(&token)),
            // Quicker than the default 10 s, so that the loss is noticed soon.
            ("metadata_session_timeout_ms", "4000".into()),
            // The machine's disk is shared with build artefacts.
            ("disk_usage_threshold", "0.999".into()),
            ("disk_usage_lwm_threshold", "0.998".into()),
        ]);
        let file = home.join("bookie.toml");
        std::fs::write(&file, config).unwrap();
        let mut cmd = on(ns, env!("CARGO_BIN_EXE_folio"));
        cmd.arg("bookie").arg("--config").arg(&file);
        let mut p = Proc::spawn(cmd);
        p.wait_line(|l| l == "ready");
        bookies.push(p);
    }
    let listed = run(
        folio_on(&client, &uri, &["shell", "listbookies", "-rw"]),
        b"",
    )
    .ok()
    .text();
    for (_, addr) in &bookie_hosts {
        assert!(listed.contains(&format!("{addr}:3181")), "{listed}");
    }
    let info = run(folio_on(&client, &uri, &["shell", "clusterinfo"]), b"")
        .ok()
        .text();
    assert!(info.contains("\"totalBookiesCount\": 4"), "{info}");
    // Prometheus on another host scrapes each bookie's admin endpoint at its address.
    for (_, addr) in &bookie_hosts {
        let mut curl = on(&client, "curl");
        curl.args(["-sSf", &format!("http://{addr}:8000/metrics")]);
        let metrics = run(curl, b"").ok().text();
        assert!(
            metrics.contains("bookie_SERVER_STATUS"),
            "{addr}: {metrics}"
        );
    }

    // 3. Autorecovery on the client host.
    let mut ar = folio_on(
        &client,
        &uri,
        &["autorecovery", "--id", &format!("{CLIENT}:3181")],
    );
    ar.arg("--open-ledger-grace-period-ms").arg("1000");
    let _autorecovery = Proc::spawn(ar);

    // 4. A writer on the client host; a bookie host of its ensemble loses its network.
    let mut writer = Proc::spawn(folio_on(
        &client,
        &uri,
        &["ledger", "write", "-e", "3", "-w", "3", "-a", "2"],
    ));
    let line = |i: u32| format!("entry {i} written across hosts\n");
    for i in 0..100 {
        writer.send(line(i).as_bytes());
    }
    let id: u64 = writer
        .wait_line(|l| l.starts_with("ledger "))
        .trim_start_matches("ledger ")
        .parse()
        .unwrap();
    writer.wait_line(|l| l == "acked 99");
    let meta_text = run(
        folio_on(&client, &uri, &["shell", "ledgermetadata", &id.to_string()]),
        b"",
    )
    .ok()
    .text();
    let (lost_ns, lost_addr) = bookie_hosts
        .iter()
        .find(|(_, a)| meta_text.contains(&format!("{a}:3181")))
        .cloned()
        .expect("a bookie of the ensemble");
    let lost = format!("{lost_addr}:3181");
    net.link(&lost_ns, false);
    for i in 100..200 {
        writer.send(line(i).as_bytes());
    }
    writer.close_stdin();
    writer.wait_line(|l| l == "closed 199");
    assert!(writer.wait().success(), "{}", writer.stderr());

    // 5. Healed: the lost bookie's registration expired, autorecovery moved its replicas,
    // nothing is queued; every acknowledged entry reads back.
    until("the ledger healed", || {
        let meta_text = run(
            folio_on(&client, &uri, &["shell", "ledgermetadata", &id.to_string()]),
            b"",
        )
        .ok()
        .text();
        let queued = run(
            folio_on(&client, &uri, &["shell", "listunderreplicated", "-c"]),
            b"",
        )
        .ok()
        .text();
        (!meta_text.contains(&lost) && queued.trim() == "0").then_some(())
    });
    let read = run(
        folio_on(&client, &uri, &["ledger", "read", &id.to_string()]),
        b"",
    )
    .ok()
    .text();
    let want: String = (0..200).map(|i| format!("{i}\t{}", line(i))).collect();
    assert_eq!(read, want);

    // The host comes back: its bookie registers again.
    net.link(&lost_ns, true);
    until("the lost bookie registered again", || {
        let listed = run(
            folio_on(&client, &uri, &["shell", "listbookies", "-rw"]),
            b"",
        )
        .ok()
        .text();
        listed.contains(&lost).then_some(())
    });
    drop(bookies);
    drop(etcd);
}
