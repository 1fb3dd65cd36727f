//! Runs many seeds and prints one line per seed (and the violations of failing ones),
//! through the same loop as the test suite (`folio_sim::sweep`):
//! `cargo run -p folio-sim --release --example sweep -- <first seed> <count>`.
//! `FOLIO_SIM_NO_FSYNC_FAULTS=1`: the same runs without fsync failures;
//! `FOLIO_SIM_BREAK_{NO_SYNC,IGNORE_FENCE,UNFENCED_READS,LOST_READ_AS_NO_ENTRY}=1` and, on
//! the ledger store's path, `FOLIO_SIM_BREAK_{ENTRY_LOG_NO_SYNC,INDEX_FIRST,JOURNAL_DELETED_EARLY,STALE_LAST_ENTRY}=1`:
//! the negative controls.

fn main() {
    // `RUST_LOG=folio_autorecovery=info` (for example) logs what the processes do.
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse()
                .unwrap_or_else(|e| panic!("{a:?} is not a number: {e}"))
        })
        .collect();
    let first = args.first().copied().unwrap_or(1);
    let count = args.get(1).copied().unwrap_or(100);
    let cfg = folio_sim::SimConfig {
        fsync_faults: std::env::var_os("FOLIO_SIM_NO_FSYNC_FAULTS").is_none(),
        // Negative controls, to see how soon the checker catches each.
        knobs: folio_sim::BookieKnobs {
            no_sync: std::env::var_os("FOLIO_SIM_BREAK_NO_SYNC").is_some(),
            ignore_fence: std::env::var_os("FOLIO_SIM_BREAK_IGNORE_FENCE").is_some(),
            storage: folio_storage::NegativeControls {
                skip_entry_log_sync: std::env::var_os("FOLIO_SIM_BREAK_ENTRY_LOG_NO_SYNC")
                    .is_some(),
                index_before_entry_log_sync: std::env::var_os("FOLIO_SIM_BREAK_INDEX_FIRST")
                    .is_some(),
                delete_journal_before_flush: std::env::var_os(
                    "FOLIO_SIM_BREAK_JOURNAL_DELETED_EARLY",
                )
                .is_some(),
                skip_rotated_entry_log_sync: std::env::var_os(
                    "FOLIO_SIM_BREAK_ROTATED_LOG_NO_SYNC",
                )
                .is_some(),
                deferred_force_skips_flush: std::env::var_os("FOLIO_SIM_BREAK_FORCE_SKIPS_FLUSH")
                    .is_some(),
                marks_past_a_staged_index: std::env::var_os(
                    "FOLIO_SIM_BREAK_MARKS_PAST_STAGED_INDEX",
                )
                .is_some(),
            },
            skip_last_entry_lookup: std::env::var_os("FOLIO_SIM_BREAK_STALE_LAST_ENTRY").is_some(),
            // Chosen per bookie from the seed by the scenario.
            per_ledger_logs: false,
            force_write: false,
            direct_entry_logs: false,
            read_ahead: false,
        },
        breaks: folio_sim::ProtocolBreaks {
            unfenced_recovery_reads: std::env::var_os("FOLIO_SIM_BREAK_UNFENCED_READS").is_some(),
            lost_read_as_no_entry: std::env::var_os("FOLIO_SIM_BREAK_LOST_READ_AS_NO_ENTRY")
                .is_some(),
        },
        autorecovery: match std::env::var("FOLIO_SIM_AUTORECOVERY").as_deref() {
            Ok("off") => folio_sim::AutoRecoveryRuns::Off,
            Ok("every") => folio_sim::AutoRecoveryRuns::Every,
            Ok("half") | Err(_) => folio_sim::AutoRecoveryRuns::Half,
            Ok(other) => panic!("FOLIO_SIM_AUTORECOVERY={other:?}: off, half or every"),
        },
        break_autorecovery_copy: std::env::var_os("FOLIO_SIM_BREAK_AUTORECOVERY_COPY").is_some(),
        ..folio_sim::SimConfig::default()
    };
    let report = folio_sim::sweep::sweep(first, count, &cfg, |o| {
        println!("{}", folio_sim::sweep::line(o));
        for v in &o.violations {
            println!("  {v}");
        }
        if std::env::var_os("FOLIO_SIM_TRACE").is_some() {
            for t in &o.trace {
                println!("    {t}");
            }
        }
    });
    println!("{}", report.summary());
    if !report.failing.is_empty() {
        std::process::exit(1);
    }
}
