//! A fixed set of threads for reads, which may block on disk: BookKeeper's read worker threads
//! (`numReadWorkerThreads`, 8 by default). A fixed pool bounds the threads a burst of pipelined
//! reads can start, where tokio's blocking pool would grow to hundreds.

use std::sync::Arc;
use std::sync::mpsc;

use parking_lot::Mutex;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Cheap to clone; the threads stop once every clone is dropped and the queue is empty.
#[derive(Clone)]
pub struct ReadPool {
    tx: mpsc::Sender<Job>,
}

impl ReadPool {
    /// Starts `threads` workers (at least one).
    pub fn new(threads: usize) -> std::io::Result<ReadPool> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            folio_env::metric_label::spawn(
                std::thread::Builder::new().name(format!("bookie-read-{i}")),
                move || {
                    loop {
                        // The lock is held only while waiting for the next job.
                        let job = rx.lock().recv();
                        match job {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    }
                },
            )?;
        }
        Ok(ReadPool { tx })
    }

    /// Queues `job`; it runs on one of the pool's threads.
    pub fn execute(&self, job: impl FnOnce() + Send + 'static) {
        // The workers outlive every sender, so the send cannot fail while `self` exists; if
        // they somehow died, run the job here rather than drop a request unanswered.
        if let Err(mpsc::SendError(job)) = self.tx.send(Box::new(job)) {
            job();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
