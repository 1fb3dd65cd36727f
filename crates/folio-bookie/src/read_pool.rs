//! A fixed set of threads for reads, which may block on disk: BookKeeper's read worker threads
//! (`numReadWorkerThreads`, 8 by default). A fixed pool bounds the threads a burst of pipelined
//! reads can start, where tokio's blocking pool would grow to hundreds.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{Condvar, Mutex};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The jobs waiting for a thread, and whether the pool is dropped.
struct Queue {
    jobs: Mutex<(VecDeque<Job>, bool)>,
    /// Signalled once per job queued, and to every thread when the pool is dropped.
    ready: Condvar,
    /// Threads still running (a job that panics ends its thread).
    alive: AtomicUsize,
}

/// The senders' side: dropping the last clone of the pool tells the threads to stop once
/// the queue is empty.
struct Senders(Arc<Queue>);

impl Drop for Senders {
    fn drop(&mut self) {
        self.0.jobs.lock().1 = true;
        self.0.ready.notify_all();
    }
}

/// Counts a thread out however it ends, a panicking job included.
struct Alive(Arc<Queue>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.alive.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Cheap to clone; the threads stop once every clone is dropped and the queue is empty.
///
/// One queue and a condition variable woken once per job: each job wakes one idle thread.
/// The threads used to share a channel's receiver behind a mutex, so a job woke the thread
/// waiting in the receiver and then, as it let the mutex go, the next thread waiting for
/// the mutex: two wake-ups per job, half of them wasted (docs/performance.md, "2026-12-07
/// (11:24)": 51,388 against 27,946 over 10,000 tailed entries).
#[derive(Clone)]
pub struct ReadPool {
    senders: Arc<Senders>,
}

impl ReadPool {
    /// Starts `threads` workers (at least one).
    pub fn new(threads: usize) -> std::io::Result<ReadPool> {
        let queue = Arc::new(Queue {
            jobs: Mutex::new((VecDeque::new(), false)),
            ready: Condvar::new(),
            alive: AtomicUsize::new(0),
        });
        // Dropped on an early return, it stops the threads already started.
        let senders = Arc::new(Senders(queue.clone()));
        for i in 0..threads.max(1) {
            let q = queue.clone();
            q.alive.fetch_add(1, Ordering::SeqCst);
            let alive = Alive(q.clone());
            folio_env::metric_label::spawn(
                std::thread::Builder::new().name(format!("bookie-read-{i}")),
                move || {
                    let _alive = alive;
                    while let Some(job) = next_job(&q) {
                        job();
                    }
                },
            )?;
        }
        Ok(ReadPool { senders })
    }

    /// Queues `job`; it runs on one of the pool's threads.
    pub fn execute(&self, job: impl FnOnce() + Send + 'static) {
        let q = &self.senders.0;
        // If every thread somehow died, run the job here rather than drop a request
        // unanswered.
        if q.alive.load(Ordering::SeqCst) == 0 {
            job();
            return;
        }
        q.jobs.lock().0.push_back(Box::new(job));
        q.ready.notify_one();
    }
}

/// The next job, waiting for one; `None` once the pool is dropped and the queue empty.
fn next_job(q: &Queue) -> Option<Job> {
    let mut jobs = q.jobs.lock();
    loop {
        if let Some(job) = jobs.0.pop_front() {
            return Some(job);
        }
        if jobs.1 {
            return None;
        }
        q.ready.wait(&mut jobs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn runs_every_job_on_the_pool_threads() {
        let pool = ReadPool::new(3).unwrap();
        let (tx, rx) = mpsc::channel();
        for i in 0..100 {
            let tx = tx.clone();
            pool.execute(move || {
                let name = std::thread::current()
                    .name()
                    .unwrap_or_default()
                    .to_string();
                tx.send((i, name)).unwrap();
            });
        }
        let mut seen: Vec<(i32, String)> = (0..100)
            .map(|_| rx.recv_timeout(std::time::Duration::from_secs(60)).unwrap())
            .collect();
        seen.sort();
        assert_eq!(
            seen.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            (0..100).collect::<Vec<_>>()
        );
        assert!(seen.iter().all(|(_, n)| n.starts_with("bookie-read-")));
    }

    fn wait_until(what: &str, done: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn dropping_the_pool_runs_what_is_queued_then_stops_the_threads() {
        let pool = ReadPool::new(2).unwrap();
        let queue = pool.senders.0.clone();
        assert_eq!(queue.alive.load(Ordering::SeqCst), 2);
        let (tx, rx) = mpsc::channel();
        for i in 0..20 {
            let tx = tx.clone();
            pool.execute(move || {
                std::thread::sleep(std::time::Duration::from_millis(2));
                tx.send(i).unwrap();
            });
        }
        drop(pool);
        let mut done: Vec<i32> = (0..20)
            .map(|_| rx.recv_timeout(std::time::Duration::from_secs(60)).unwrap())
            .collect();
        done.sort();
        assert_eq!(done, (0..20).collect::<Vec<_>>());
        wait_until("the threads did not stop", || {
            queue.alive.load(Ordering::SeqCst) == 0
        });
    }

    #[test]
    fn a_job_still_runs_when_every_thread_has_died() {
        let pool = ReadPool::new(1).unwrap();
        pool.execute(|| panic!("a job that panics (expected by this test)"));
        wait_until("the panicking job did not end its thread", || {
            pool.senders.0.alive.load(Ordering::SeqCst) == 0
        });
        let (tx, rx) = mpsc::channel();
        pool.execute(move || tx.send(std::thread::current().id()).unwrap());
        // Run here, at once: no thread is left to run it.
        assert_eq!(rx.try_recv().unwrap(), std::thread::current().id());
    }
}
