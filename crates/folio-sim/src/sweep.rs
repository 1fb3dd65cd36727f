//! Many seeds in a row: the one loop shared by the test suite and the `sweep` example,
//! so a seed runs the same way in both (same configuration, same code path).

use std::time::{Duration, Instant};

use crate::scenario::{FaultCounts, Outcome, SimConfig, run};

/// What a sweep found.
#[derive(Debug, Default)]
pub struct SweepReport {
    pub seeds: u64,
    pub failing: Vec<u64>,
    pub acked: usize,
    pub late_completions: u64,
    /// Faults of every run added up.
    pub faults: FaultCounts,
    pub wall: Duration,
}

impl SweepReport {
    pub fn seeds_per_second(&self) -> f64 {
        self.seeds as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// One summary line: seeds, failures, seeds per second and faults per run.
    pub fn summary(&self) -> String {
        let per_run = self.faults.total() as f64 / self.seeds.max(1) as f64;
        format!(
            "{} seeds in {:.1} s ({:.2} seeds/s), {} failing {:?}, {} acked, {} late completions; \
             {per_run:.1} faults per run; totals: {}",
            self.seeds,
            self.wall.as_secs_f64(),
            self.seeds_per_second(),
            self.failing.len(),
            self.failing,
            self.acked,
            self.late_completions,
            self.faults
        )
    }
}

/// One line about one run.
pub fn line(o: &Outcome) -> String {
    format!(
        "seed {}: {} violations, {} acked, {} closed reads, {} late completions, {} messages, \
         {} virtual ms, {} faults, digest {:016x}",
        o.seed,
        o.violations.len(),
        o.acked,
        o.closed_reads,
        o.late_completions,
        o.net_events,
        o.virtual_ms,
        o.faults.total(),
        o.digest
    )
}

/// Runs `count` seeds from `first`, calling `each` after every run.
pub fn sweep(
    first: u64,
    count: u64,
    cfg: &SimConfig,
    mut each: impl FnMut(&Outcome),
) -> SweepReport {
    let started = Instant::now();
    let mut report = SweepReport::default();
    for seed in first..first + count {
        let o = run(seed, cfg);
        report.seeds += 1;
        report.acked += o.acked;
        report.late_completions += o.late_completions;
        report.faults.add(&o.faults);
        if !o.violations.is_empty() {
            report.failing.push(seed);
        }
        each(&o);
    }
    report.wall = started.elapsed();
    report
}
