//! Work a write callback leaves for the end of its batch, on the same thread.
//!
//! The journal completes a group's writes one callback at a time, after the group's
//! fdatasync ([`crate::journal`]). Each callback answers one request on its client's
//! connection, and a connection usually has many answers in one group. Writing each to its
//! socket at once would be one write per answer; handing each to the connection's writer
//! task costs a cross-thread wake-up per group and connection. Inside [`run`] a callback
//! instead leaves one action per connection with [`defer`] (say, "write what is queued"),
//! and each runs once when the batch ends: one write per connection and group, on the
//! thread that completed them.
//!
//! Outside a batch [`defer`] does nothing and says so, and the caller takes its usual path.

use std::cell::RefCell;

type Deferred = Vec<(usize, Box<dyn FnOnce()>)>;

thread_local! {
    /// The actions of the batch running on this thread; `None` outside a batch.
    static BATCH: RefCell<Option<Deferred>> = const { RefCell::new(None) };
}

/// Runs `f` as a batch, then each action [`defer`]red during it, in the order first left.
/// Within a batch already running on this thread, `f` simply joins it.
pub fn run<R>(f: impl FnOnce() -> R) -> R {
    let opened = BATCH.with(|b| {
        let mut b = b.borrow_mut();
        if b.is_some() {
            return false;
        }
        *b = Some(Vec::new());
        true
    });
    if !opened {
        return f();
    }
    // Run the actions however `f` ends: an answer queued before a panic still goes out.
    struct Close;
    impl Drop for Close {
        fn drop(&mut self) {
            let actions = BATCH.with(|b| b.borrow_mut().take()).unwrap_or_default();
            for (_, action) in actions {
                action();
            }
        }
    }
    let _close = Close;
    f()
}

/// Leaves the action `make` builds for the end of the batch running on this thread, once
/// per `key` (a second call with a key already left builds nothing: the first action does
/// the work of both). `false` outside a batch: nothing is left, `make` is not called.
pub fn defer(key: usize, make: impl FnOnce() -> Box<dyn FnOnce()>) -> bool {
    BATCH.with(|b| {
        let mut b = b.borrow_mut();
        let Some(actions) = b.as_mut() else {
            return false;
        };
        if !actions.iter().any(|(k, _)| *k == key) {
            actions.push((key, make()));
        }
        true
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    #[test]
    fn outside_a_batch_nothing_is_deferred() {
        let built = Cell::new(false);
        assert!(!defer(1, || {
            built.set(true);
            Box::new(|| {})
        }));
        assert!(!built.get());
    }

    #[test]
    fn each_key_runs_once_at_the_end_in_first_order() {
        let log = Rc::new(RefCell::new(Vec::new()));
        let leave = |key: usize, name: &'static str| {
            let log = log.clone();
            assert!(defer(key, move || Box::new(move || log
                .borrow_mut()
                .push(name))));
        };
        run(|| {
            leave(2, "two");
            leave(1, "one");
            leave(2, "two again");
            // Nested: joins the batch, runs nothing of its own at its end.
            run(|| leave(3, "three"));
            assert!(
                log.borrow().is_empty(),
                "nothing runs before the batch ends"
            );
        });
        assert_eq!(*log.borrow(), ["two", "one", "three"]);
        // The batch is closed: nothing more is deferred.
        assert!(!defer(4, || Box::new(|| {})));
    }

    #[test]
    fn actions_run_when_the_batch_panics() {
        let ran = Rc::new(Cell::new(false));
        let r = ran.clone();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run(|| {
                defer(1, move || Box::new(move || r.set(true)));
                panic!("a callback failed");
            })
        }));
        assert!(outcome.is_err());
        assert!(ran.get());
        assert!(!defer(1, || Box::new(|| {})), "the batch is closed");
    }
}
