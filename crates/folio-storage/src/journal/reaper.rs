//! Deleting journal files that lie wholly before the mark, without stalling the journal.
//!
//! Unlinking a 2 GiB file frees its blocks in one ext4 transaction: every other
//! fdatasync on the file system (this bookie's journal groups, and its neighbours') then
//! waits behind it, 30-50 ms at a time for a quarter of a second (measured, and seen as
//! 300+ ms queueing in the journals of three bookies right after a roll). So a large
//! file is first truncated a step at a time, with a pause between steps, on a thread of
//! its own, and only then unlinked; each step frees 16 MiB, which costs the journal
//! nothing measurable. Small files (all of the simulator's) are removed at once.
//!
//! Safe at any point: the file is before the persisted mark, so replay never reads it,
//! and a file left half truncated (crash, shutdown, error) is deleted at a later
//! checkpoint.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use folio_env::{FileSystem, OpenOptions};
use parking_lot::Mutex;

/// Bytes freed per truncation step; files no larger are removed at once.
pub(crate) const STEP: u64 = 16 << 20;
/// Pause between steps: a 2 GiB file goes in about four seconds. With 5 ms, three
/// bookies reaping at once on one disk still slowed their journals for the 2 s it took
/// (groups 2-4 ms instead of 1, queues of 200+ ms); with 25 ms no stall was measurable.
const PAUSE: Duration = Duration::from_millis(25);

/// Shrinks the file at `path` by `step` bytes at a time, calling `between` after each
/// step (it returns false to stop, leaving the file shorter but present), then removes
/// it. Returns whether the file is gone.
pub(crate) fn remove_gradually(
    fs: &dyn FileSystem,
    path: &Path,
    step: u64,
    between: &mut dyn FnMut() -> bool,
) -> io::Result<bool> {
    let file = fs.open(
        path,
        OpenOptions {
            write: true,
            ..OpenOptions::default()
        },
    )?;
    let mut len = file.len()?;
    while len > step {
        // Down to a whole number of steps first, then a step at a time.
        len = if len % step != 0 {
            len - len % step
        } else {
            len - step
        };
        file.set_len(len)?;
        if !between() {
            return Ok(false);
        }
    }
    drop(file);
    fs.remove_file(path)?;
    Ok(true)
}

/// At most one background deletion at a time, stopped early at shutdown.
#[derive(Default)]
pub(crate) struct Reaper {
    running: Mutex<Option<JoinHandle<()>>>,
    stop: Arc<AtomicBool>,
}

impl Reaper {
    /// Whether a background deletion is still under way (its files are then left for
    /// a later checkpoint rather than handed to a second thread).
    pub(crate) fn busy(&self) -> bool {
        self.running
            .lock()
            .as_ref()
            .is_some_and(|t| !t.is_finished())
    }

    /// Deletes `files` gradually on a background thread. Failures are logged: the files
    /// stay before the mark and a later checkpoint tries again.
    pub(crate) fn start(&self, fs: Arc<dyn FileSystem>, files: Vec<PathBuf>) {
        if self.stop.load(Ordering::Relaxed) {
            return; // shut down: the next start deletes them
        }
        let mut running = self.running.lock();
        if let Some(t) = running.take()
            && t.join().is_err()
        {
            tracing::error!("a journal file reaper thread panicked");
        }
        let stop = Arc::clone(&self.stop);
        let spawned = folio_env::metric_label::spawn(
            std::thread::Builder::new().name("journal-reaper".into()),
            move || {
                for p in files {
                    let mut between = || {
                        std::thread::sleep(PAUSE);
                        !stop.load(Ordering::Relaxed)
                    };
                    match remove_gradually(&*fs, &p, STEP, &mut between) {
                        Ok(true) => {
                            tracing::debug!(file = %p.display(), "deleted journal file before the mark")
                        }
                        Ok(false) => return,
                        Err(e) => tracing::warn!(
                            file = %p.display(),
                            "deleting a journal file before the mark failed (retried at the next checkpoint): {e}"
                        ),
                    }
                }
            },
        );
        match spawned {
            Ok(t) => *running = Some(t),
            Err(e) => tracing::warn!("could not start the journal file reaper: {e}"),
        }
    }

    /// Stops a running deletion after its current step and waits for it.
    pub(crate) fn shutdown(&self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.running.lock().take()
            && t.join().is_err()
        {
            tracing::error!("a journal file reaper thread panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use folio_env::RealFileSystem;

    #[test]
    fn a_large_file_shrinks_a_step_at_a_time_before_it_is_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("0000000000000001.txn");
        let fs = RealFileSystem;
        let f = fs.open(&p, OpenOptions::create_new()).unwrap();
        f.set_len(10 * 1000 + 7).unwrap();
        drop(f);
        let mut seen = Vec::new();
        let gone = remove_gradually(&fs, &p, 1000, &mut || {
            seen.push(std::fs::metadata(&p).unwrap().len());
            true
        })
        .unwrap();
        assert!(gone);
        assert!(!p.exists());
        // Down to a whole number of steps first, then a step at a time, down to one
        // step, which the unlink frees.
        let expected: Vec<u64> = (1..=10).rev().map(|k| k * 1000).collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn a_stopped_deletion_leaves_the_file_shorter_and_a_small_file_goes_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let fs = RealFileSystem;
        let big = tmp.path().join("big.txn");
        fs.open(&big, OpenOptions::create_new())
            .unwrap()
            .set_len(5000)
            .unwrap();
        let mut calls = 0;
        let gone = remove_gradually(&fs, &big, 1000, &mut || {
            calls += 1;
            calls < 2
        })
        .unwrap();
        assert!(!gone);
        assert_eq!(std::fs::metadata(&big).unwrap().len(), 3000);

        let small = tmp.path().join("small.txn");
        fs.open(&small, OpenOptions::create_new())
            .unwrap()
            .set_len(1000)
            .unwrap();
        let gone = remove_gradually(&fs, &small, 1000, &mut || panic!("no step")).unwrap();
        assert!(gone && !small.exists());
    }
}
