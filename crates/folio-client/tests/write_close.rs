//! BP-32's advisory write close from the client: closing a ledger sends it, best effort,
//! to every bookie of the ledger; with an entry log per ledger each bookie then rotates the
//! ledger's log at its next checkpoint. (A bookie that does not support it is covered by
//! `conn::tests::a_bookie_answering_write_close_with_ebadreq_is_not_asked_again`.)

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_ledger_write_closes_it_on_every_bookie() {
    let cluster = Cluster::start_per_ledger_logs(3).await;
    let client = cluster.client().await;
    write_closed_ledger(&client, (3, 3, 2), 10).await;
    // The write closes go out after the close, on their own task: wait (generously) until
    // every bookie has rotated the ledger's log because of one.
    for b in &cluster.bookies {
        let Store::Engine(engine) = &b.store else {
            unreachable!("real storage only")
        };
        patient(async {
            loop {
                engine.engine().checkpoint().unwrap();
                let rotated = engine
                    .entry_log_stats()
                    .removed_by_write_close
                    .load(Ordering::Relaxed);
                if rotated >= 1 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }
}
