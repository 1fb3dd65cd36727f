//! Spawning server processes that die with the test binary.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process.
//! Test harnesses run each test on its own thread, and shared servers may outlive the test that
//! started them, so every child is forked from one spawner thread that lives as long as the
//! process: the children get SIGKILL exactly when the test binary goes away.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::Mutex;
use std::sync::mpsc::{Sender, channel};

type Request = (Command, Sender<std::io::Result<Child>>);

static SPAWNER: Mutex<Option<Sender<Request>>> = Mutex::new(None);

/// Spawns `cmd` from the long-lived spawner thread, with SIGKILL as its parent-death signal.
pub(crate) fn spawn(cmd: Command) -> std::io::Result<Child> {
    let tx = {
        let mut guard = SPAWNER.lock().unwrap_or_else(|p| p.into_inner());
        match &*guard {
            Some(tx) => tx.clone(),
            None => {
                let tx = start_spawner()?;
                *guard = Some(tx.clone());
                tx
            }
        }
    };
    let (reply_tx, reply_rx) = channel();
    tx.send((cmd, reply_tx))
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}

fn start_spawner() -> std::io::Result<Sender<Request>> {
    let (tx, rx) = channel::<Request>();
    std::thread::Builder::new()
        .name("folio-testsvc-spawner".into())
        .spawn(move || {
            for (mut cmd, reply) in rx {
                // SAFETY: the closure runs in the forked child before exec and only calls
                // prctl(2) and getppid(2), both async-signal-safe.
                unsafe {
                    cmd.pre_exec(|| {
                        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        // The parent may have died between fork and prctl.
                        if libc::getppid() == 1 {
                            return Err(std::io::Error::other("parent exited"));
                        }
                        Ok(())
                    });
                }
                let _ = reply.send(cmd.spawn());
            }
        })?;
    Ok(tx)
}
