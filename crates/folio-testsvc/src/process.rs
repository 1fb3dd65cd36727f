//! One server child process in its own temporary directory: started with its output captured
//! to `<dir>/server.log`, polled until healthy, killed and deleted on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Error, Result, log_tail};

pub(crate) struct ServerProcess {
    pub(crate) name: &'static str,
    child: Option<Child>,
    log: PathBuf,
    // Declared last: dropped after the child is killed.
    pub(crate) dir: tempfile::TempDir,
}

/// What a readiness poll found.
pub(crate) enum Health {
    Ready,
    NotYet,
}

impl ServerProcess {
    /// Spawns `cmd` with stdout and stderr going to the log file in `dir`.
    pub(crate) fn spawn(
        name: &'static str,
        mut cmd: Command,
        dir: tempfile::TempDir,
    ) -> Result<Self> {
        let log = dir.path().join("server.log");
        let io = |context: String| {
            move |source| Error::Io {
                server: name,
                context,
                source,
            }
        };
        let out = std::fs::File::create(&log).map_err(io(format!("create {}", log.display())))?;
        let err = out.try_clone().map_err(io("dup log file".into()))?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .current_dir(dir.path());
        let child = crate::spawn::spawn(cmd).map_err(io(format!("spawn {name}")))?;
        Ok(ServerProcess {
            name,
            child: Some(child),
            log,
            dir,
        })
    }

    /// Polls `probe` until it reports ready, the process exits (`Ok(false)`: the caller may
    /// retry on other ports) or `timeout` passes (an error carrying the server's output).
    pub(crate) fn wait_ready(
        &mut self,
        timeout: Duration,
        mut probe: impl FnMut(&Self) -> Health,
    ) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(_status)) = child.try_wait()
            {
                self.child = None;
                return Ok(false);
            }
            if let Health::Ready = probe(self) {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Err(Error::NotReady {
                    server: self.name,
                    timeout,
                    attempts: 1,
                    log: self.log_tail(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub(crate) fn log_tail(&self) -> String {
        log_tail(&self.log, 4000)
    }

    /// Whether the whole log so far contains `needle`.
    pub(crate) fn log_contains(&self, needle: &str) -> bool {
        std::fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).contains(needle))
            .unwrap_or(false)
    }

    pub(crate) fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Kills the server (SIGKILL) and reaps it. Idempotent.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
