//! A single-member etcd server (Debian's `etcd-server`) on free loopback client and peer ports.
//!
//! Readiness is `/health` answering `{"health":"true"}` *and* our own log saying it is
//! "serving client traffic" on our address: a foreign etcd that grabbed the port would answer
//! the probe, but only ours writes to our log.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;

use crate::process::{Health, ServerProcess};
use crate::{Error, READY_TIMEOUT, Result, port, probe};

const NAME: &str = "etcd";

/// Ready when `/health` is true and our log shows one more "serving client traffic" than
/// `serving_before` (the count before this start).
fn probe_ready(p: &ServerProcess, addr: SocketAddr, serving_before: usize) -> Health {
    let healthy = probe::http_get(addr, "/health")
        .is_ok_and(|body| body.replace(' ', "").contains(r#""health":"true""#));
    if healthy
        && p.log_count("serving client traffic") > serving_before
        && p.log_contains(&addr.to_string())
    {
        Health::Ready
    } else {
        Health::NotYet
    }
}

/// A running etcd server; killed and its directory deleted on drop.
pub struct EtcdServer {
    process: ServerProcess,
    addr: SocketAddr,
}

impl EtcdServer {
    /// Starts a server on free loopback ports and waits (up to [`READY_TIMEOUT`]) until healthy.
    pub fn start() -> Result<Self> {
        let etcd = match std::env::var("FOLIO_ETCD") {
            Ok(bin) => bin,
            Err(_) => crate::zookeeper::find_on_path("etcd").ok_or(Error::MissingBinary {
                what: "the etcd server",
                looked_for: "etcd on PATH or $FOLIO_ETCD".into(),
            })?,
        };
        Self::start_with_binary(std::path::Path::new(&etcd))
    }

    /// Like [`EtcdServer::start`] with an explicit `etcd` binary.
    pub fn start_with_binary(etcd: &std::path::Path) -> Result<Self> {
        if !etcd.is_file() {
            return Err(Error::MissingBinary {
                what: "the etcd server",
                looked_for: etcd.display().to_string(),
            });
        }
        let etcd = etcd.display().to_string();
        crate::start_with_retries(NAME, || Self::try_start(&etcd))
    }

    fn try_start(etcd: &str) -> Result<std::result::Result<Self, String>> {
        let io = |context: &str| crate::io_error(NAME, context.to_string());
        let dir = tempfile::Builder::new()
            .prefix("folio-etcd-")
            .tempdir()
            .map_err(io("create temp dir"))?;
        let client = port::free_port().map_err(io("find a free port"))?;
        let peer = port::free_port().map_err(io("find a free port"))?;
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut cmd = Command::new(etcd);
        cmd.arg("--name")
            .arg("folio")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--logger=zap", "--log-outputs=stderr"])
            .arg("--listen-client-urls")
            .arg(&client_url)
            .arg("--advertise-client-urls")
            .arg(&client_url)
            .arg("--listen-peer-urls")
            .arg(&peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer_url)
            .arg("--initial-cluster")
            .arg(format!("folio={peer_url}"));
        let mut process = ServerProcess::spawn(NAME, cmd, dir)?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, client));
        let ready = process.wait_ready(READY_TIMEOUT, |p| probe_ready(p, addr, 0))?;
        if ready {
            Ok(Ok(EtcdServer { process, addr }))
        } else {
            Ok(Err(process.log_tail()))
        }
    }

    /// `127.0.0.1:<port>`, the client endpoint (without scheme).
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// `etcd://127.0.0.1:<port><prefix>`, Folio's metadata URI for this server.
    pub fn metadata_uri(&self, prefix: &str) -> String {
        format!("etcd://{}{prefix}", self.addr)
    }

    /// Starts the server again (after `stop`, `kill`, or while running: then it is stopped
    /// first) on the same ports with the same data.
    pub fn restart(&mut self) -> Result<()> {
        let addr = self.addr;
        self.process.restart(|p| {
            let before = p.log_count("serving client traffic");
            move |p: &ServerProcess| probe_ready(p, addr, before)
        })
    }

    server_controls!();
}
