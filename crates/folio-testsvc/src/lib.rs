//! Real ZooKeeper and etcd servers for Folio's integration tests (dev-only, never shipped).
//!
//! `ZooKeeperServer::start()` and `EtcdServer::start()` each launch one standalone server from
//! the Debian packages (`zookeeper`, `etcd-server`) on free loopback ports inside a fresh
//! temporary directory, wait until it answers its health probe (ZooKeeper `conf`/`ruok`, etcd
//! `/health`), and kill it and delete the directory on drop. `stop()` (graceful) or `kill()`
//! (a crash) ends a server early so a test can check how a driver reports an unreachable
//! metadata service; `restart()` brings it back on the same ports with the same data.
//!
//! `TcpProxy` sits between one client and a server so a test can partition them.
//!
//! `LossyFs` mounts a FUSE file system that loses every write not yet fsynced when the test
//! cuts the power, for power-loss tests of real processes.
//!
//! Servers are spawned from one long-lived thread with `PR_SET_PDEATHSIG`, so a test binary that
//! is killed outright (a CI timeout) does not leave Java or etcd processes behind.
//!
//! Environment overrides: `FOLIO_ZOOKEEPER_CLASSPATH` (the server's classpath), `FOLIO_JAVA`
//! (the `java` binary), `FOLIO_ETCD` (the `etcd` binary).

#[macro_use]
mod controls;
mod port;
mod probe;
mod process;
mod spawn;

pub mod etcd;
pub mod lossyfs;
pub mod proxy;
pub mod zookeeper;

pub use etcd::EtcdServer;
pub use lossyfs::LossyFs;
pub use proxy::TcpProxy;
pub use zookeeper::ZooKeeperServer;

use std::time::Duration;

/// How long a server may take to become healthy. Generous: the machine is small and shared,
/// and a JVM's first start under load can take many seconds.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How many times a start is retried when the chosen port was taken by someone else between
/// our probe and the server's bind.
const START_ATTEMPTS: usize = 5;

/// Why a test server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{what} not found ({looked_for}): install the Debian packages zookeeper and etcd-server, \
         or run scripts/test"
    )]
    MissingBinary {
        what: &'static str,
        looked_for: String,
    },
    #[error("{server}: {context}: {source}")]
    Io {
        server: &'static str,
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{server} did not become ready within {timeout:?} after {attempts} attempt(s); last output:\n{log}"
    )]
    NotReady {
        server: &'static str,
        timeout: Duration,
        attempts: usize,
        log: String,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

/// `map_err` for an I/O failure of `server` while doing `context`.
fn io_error(
    server: &'static str,
    context: impl Into<String>,
) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io {
        server,
        context,
        source,
    }
}

/// Starts a server with up to [`START_ATTEMPTS`] attempts: `attempt` gives `Ok(Err(log))`
/// when the process exited early (e.g. another process took the chosen port first).
fn start_with_retries<S>(
    server: &'static str,
    mut attempt: impl FnMut() -> Result<std::result::Result<S, String>>,
) -> Result<S> {
    let mut last_log = String::new();
    for _ in 0..START_ATTEMPTS {
        match attempt()? {
            Ok(started) => return Ok(started),
            Err(log) => last_log = log,
        }
    }
    Err(Error::NotReady {
        server,
        timeout: READY_TIMEOUT,
        attempts: START_ATTEMPTS,
        log: last_log,
    })
}

/// The last `max` bytes of a server's log, for error messages.
fn log_tail(path: &std::path::Path, max: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let start = bytes.len().saturating_sub(max);
            String::from_utf8_lossy(&bytes[start..]).into_owned()
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}
