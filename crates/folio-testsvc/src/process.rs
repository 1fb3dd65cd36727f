//! One server child process in its own temporary directory: started with its output captured
//! to `<dir>/server.log`, polled until healthy, killed and deleted on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Error, READY_TIMEOUT, Result, log_tail};

/// How long a graceful stop waits before it kills the server.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(10);

pub(crate) struct ServerProcess {
    pub(crate) name: &'static str,
    child: Option<Child>,
    /// The command line, to start the same server again (same ports, same data).
    program: std::ffi::OsString,
    args: Vec<std::ffi::OsString>,
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
        let io = |context: String| crate::io_error(name, context);
        let out = std::fs::File::create(&log).map_err(io(format!("create {}", log.display())))?;
        let err = out.try_clone().map_err(io("dup log file".into()))?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .current_dir(dir.path());
        let program = cmd.get_program().to_owned();
        let args = cmd.get_args().map(|a| a.to_owned()).collect();
        let child = crate::spawn::spawn(cmd).map_err(io(format!("spawn {name}")))?;
        Ok(ServerProcess {
            name,
            child: Some(child),
            program,
            args,
            log,
            dir,
        })
    }

    /// Starts the same command again (after `stop` or `kill`), appending to the same log.
    pub(crate) fn respawn(&mut self) -> Result<()> {
        self.kill();
        let name = self.name;
        let io = |context: String| crate::io_error(name, context);
        let out = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.log)
            .map_err(io(format!("open {}", self.log.display())))?;
        let err = out.try_clone().map_err(io("dup log file".into()))?;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .current_dir(self.dir.path());
        self.child = Some(crate::spawn::spawn(cmd).map_err(io(format!("respawn {name}")))?);
        Ok(())
    }

    /// How many times the log so far contains `needle`.
    pub(crate) fn log_count(&self, needle: &str) -> usize {
        std::fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).matches(needle).count())
            .unwrap_or(0)
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

    /// Stops the server gracefully and starts it again with the same command (so the same
    /// ports and data); `probe`, made once the old process is gone, says when it is ready.
    pub(crate) fn restart<P: FnMut(&ServerProcess) -> Health>(
        &mut self,
        probe: impl FnOnce(&ServerProcess) -> P,
    ) -> Result<()> {
        self.stop(STOP_GRACE);
        let probe = probe(self);
        self.respawn()?;
        if self.wait_ready(READY_TIMEOUT, probe)? {
            Ok(())
        } else {
            Err(Error::NotReady {
                server: self.name,
                timeout: READY_TIMEOUT,
                attempts: 1,
                log: self.log_tail(),
            })
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

    /// Asks the server to exit (SIGTERM), waits up to `grace` for it, then kills it.
    /// Idempotent.
    pub(crate) fn stop(&mut self, grace: std::time::Duration) {
        if let Some(child) = self.child.as_mut() {
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: plain kill(2) on our own child's pid, which we have not reaped yet.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    self.child = None;
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.kill();
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
