//! Runs many seeds and prints one line per seed (and the violations of failing ones):
//! `cargo run -p folio-sim --release --example sweep -- <first seed> <count>`.

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse()
                .unwrap_or_else(|e| panic!("{a:?} is not a number: {e}"))
        })
        .collect();
    let first = args.first().copied().unwrap_or(1);
    let count = args.get(1).copied().unwrap_or(100);
    let mut failing = Vec::new();
    for seed in first..first + count {
        let cfg = folio_sim::SimConfig {
            // FOLIO_SIM_NO_FSYNC_FAULTS=1: the same runs without fsync failures.
            fsync_faults: std::env::var_os("FOLIO_SIM_NO_FSYNC_FAULTS").is_none(),
            ..folio_sim::SimConfig::default()
        };
        let o = folio_sim::run(seed, &cfg);
        println!(
            "seed {seed}: {} violations, {} acked, {} closed reads, {} late completions",
            o.violations.len(),
            o.acked,
            o.closed_reads,
            o.late_completions
        );
        for v in &o.violations {
            println!("  {v}");
        }
        if !o.violations.is_empty() {
            failing.push(seed);
        }
    }
    println!("failing seeds: {failing:?}");
    if !failing.is_empty() {
        std::process::exit(1);
    }
}
