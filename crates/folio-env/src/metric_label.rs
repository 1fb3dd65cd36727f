//! The `bookie` label of the metrics recorded on this thread, for a process that runs
//! several bookies (`folio standalone`): each bookie's runtime threads carry its label, and
//! the threads a bookie starts itself (journal writers, force-write and reaper threads, the
//! checkpointer, read pools) take it from the thread that starts them with [`spawn`] or
//! [`carry`]. The process's metrics recorder (folio-http's) adds the label to every metric
//! recorded on a labelled thread. A thread with no label (a process with one bookie) records
//! its metrics unlabelled.

use std::cell::RefCell;
use std::sync::Arc;

thread_local! {
    static LABEL: RefCell<Option<Arc<str>>> = const { RefCell::new(None) };
}

/// Sets (or clears) this thread's label.
pub fn set(label: Option<Arc<str>>) {
    LABEL.with(|l| *l.borrow_mut() = label);
}

/// This thread's label, if any.
pub fn current() -> Option<Arc<str>> {
    LABEL.with(|l| l.borrow().clone())
}

/// Wraps `f` so that, wherever it runs, it runs under this thread's label (for threads
/// started with `spawn_scoped` or by other means).
pub fn carry<T>(f: impl FnOnce() -> T) -> impl FnOnce() -> T {
    let label = current();
    move || {
        set(label);
        f()
    }
}

/// `builder.spawn(f)`, the new thread under this thread's label.
pub fn spawn<F, T>(
    builder: std::thread::Builder,
    f: F,
) -> std::io::Result<std::thread::JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    builder.spawn(carry(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_started_here_carry_the_label() {
        set(Some("b1".into()));
        let seen = spawn(std::thread::Builder::new(), current)
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(seen.as_deref(), Some("b1"));
        let plain = std::thread::spawn(current).join().unwrap();
        assert_eq!(plain, None);
        set(None);
        assert_eq!(current(), None);
    }
}
