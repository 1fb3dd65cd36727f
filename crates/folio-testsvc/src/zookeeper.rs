//! A standalone ZooKeeper server (Debian's `/usr/share/java/zookeeper.jar`, run directly with
//! `QuorumPeerMain`) on a free loopback port.
//!
//! Readiness is the `conf` four-letter word reporting *our* data directory (so a foreign
//! server that grabbed the port is never mistaken for ours), then `ruok` answering `imok`.
//! `tickTime` is 1000 ms, so sessions may be as short as 2 s (tests of session expiry).

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;

use crate::process::{Health, ServerProcess};
use crate::{Error, READY_TIMEOUT, Result, port, probe};

const NAME: &str = "ZooKeeper";
const DEFAULT_CLASSPATH: &str =
    "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";

/// A running ZooKeeper server; killed and its directory deleted on drop.
pub struct ZooKeeperServer {
    process: ServerProcess,
    addr: SocketAddr,
    data_dir: String,
}

/// Ready when `conf` reports our data directory (not a foreign server's) and `ruok` is `imok`.
fn probe_ready(addr: SocketAddr, data_dir: &str) -> Health {
    let ours = probe::four_letter_word(addr, "conf")
        .is_ok_and(|conf| conf.contains(&format!("dataDir={data_dir}")));
    if ours && probe::four_letter_word(addr, "ruok").is_ok_and(|r| r == "imok") {
        Health::Ready
    } else {
        Health::NotYet
    }
}

impl ZooKeeperServer {
    /// Starts a server on a free loopback port and waits (up to [`READY_TIMEOUT`]) until it
    /// serves requests.
    pub fn start() -> Result<Self> {
        let java = find_java()?;
        let classpath =
            std::env::var("FOLIO_ZOOKEEPER_CLASSPATH").unwrap_or_else(|_| DEFAULT_CLASSPATH.into());
        let jar = classpath
            .split(':')
            .find(|p| p.ends_with("zookeeper.jar"))
            .unwrap_or("/usr/share/java/zookeeper.jar");
        if !std::path::Path::new(jar).exists() {
            return Err(Error::MissingBinary {
                what: "the ZooKeeper server jar",
                looked_for: jar.to_string(),
            });
        }
        crate::start_with_retries(NAME, || Self::try_start(&java, &classpath))
    }

    /// One attempt: `Ok(Err(log))` when the process exited early (e.g. the port was taken).
    fn try_start(java: &str, classpath: &str) -> Result<std::result::Result<Self, String>> {
        let io = |context: &str| crate::io_error(NAME, context.to_string());
        let dir = tempfile::Builder::new()
            .prefix("folio-zk-")
            .tempdir()
            .map_err(io("create temp dir"))?;
        let data = dir.path().join("data");
        std::fs::create_dir(&data).map_err(io("create data dir"))?;
        let port = port::free_port().map_err(io("find a free port"))?;
        let cfg = dir.path().join("zoo.cfg");
        std::fs::write(
            &cfg,
            format!(
                "tickTime=1000\n\
                 initLimit=10\n\
                 syncLimit=5\n\
                 dataDir={}\n\
                 clientPort={port}\n\
                 clientPortAddress=127.0.0.1\n\
                 maxClientCnxns=0\n\
                 admin.enableServer=false\n\
                 4lw.commands.whitelist=ruok,conf,srvr,mntr,stat,cons\n",
                data.display()
            ),
        )
        .map_err(io("write zoo.cfg"))?;
        let mut cmd = Command::new(java);
        cmd.args([
            "-Xms32m",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.forceSync=no",
        ])
        .arg(format!("-Dzookeeper.log.dir={}", dir.path().display()))
        .arg("-cp")
        .arg(classpath)
        .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
        .arg(&cfg);
        let mut process = ServerProcess::spawn(NAME, cmd, dir)?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let data_dir = data.display().to_string();
        let ready = process.wait_ready(READY_TIMEOUT, |_| probe_ready(addr, &data_dir))?;
        if ready {
            Ok(Ok(ZooKeeperServer {
                process,
                addr,
                data_dir,
            }))
        } else {
            Ok(Err(process.log_tail()))
        }
    }

    /// `127.0.0.1:<port>`, the ZooKeeper connect string.
    pub fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    /// `zk://127.0.0.1:<port><root>`, Folio's metadata URI for this server (root like `/ledgers`).
    pub fn metadata_uri(&self, root: &str) -> String {
        format!("zk://{}{root}", self.addr)
    }

    /// Starts the server again (after `stop`, `kill`, or while running: then it is stopped
    /// first) on the same port with the same data: sessions younger than their timeout
    /// survive, as on a real ZooKeeper restart.
    pub fn restart(&mut self) -> Result<()> {
        let (addr, data_dir) = (self.addr, self.data_dir.clone());
        self.process
            .restart(|_| move |_: &ServerProcess| probe_ready(addr, &data_dir))
    }

    server_controls!();
}

fn find_java() -> Result<String> {
    if let Ok(java) = std::env::var("FOLIO_JAVA") {
        return Ok(java);
    }
    if let Ok(home) = std::env::var("JAVA_HOME") {
        let java = format!("{home}/bin/java");
        if std::path::Path::new(&java).exists() {
            return Ok(java);
        }
    }
    find_on_path("java").ok_or(Error::MissingBinary {
        what: "java (needed by the ZooKeeper server)",
        looked_for: "java on PATH, $JAVA_HOME/bin/java or $FOLIO_JAVA".into(),
    })
}

pub(crate) fn find_on_path(name: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
}
