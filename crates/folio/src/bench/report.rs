//! What every `folio bench` subcommand prints: throughput and latency percentiles
//! from an HDR histogram, as text or as the one JSON object of DESIGN.md section 7
//! (`entries`, `seconds`, `entries_per_sec`, `mb_per_sec`, `latency_ms`), to which a
//! subcommand adds its own fields.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{Map, Value, json};

/// Per-operation latencies in microseconds, 1 µs to 10 minutes, 3 significant digits;
/// with [`Latencies::with_series`], also each operation's start and latency in order, for
/// `--latency-file` (BookKeeper's benchmark's `-latencyFile`): a tail shows there as a
/// time, not just a percentile.
pub struct Latencies {
    hist: Histogram<u64>,
    /// The phase's start and (start offset, latency) of each operation, in µs.
    series: Option<(Instant, Vec<(u64, u64)>)>,
}

impl Latencies {
    pub fn new() -> Self {
        Latencies {
            hist: Histogram::new_with_bounds(1, 600_000_000, 3)
                .expect("static histogram bounds are valid"),
            series: None,
        }
    }

    /// Latencies that also keep every operation's start (from `origin`) and latency.
    pub fn with_series(origin: Instant) -> Self {
        Latencies {
            series: Some((origin, Vec::new())),
            ..Self::new()
        }
    }

    /// Records an operation started at `start` and done at `end` (the caller's clock
    /// reading, which it may use again: one reading per operation keeps the benchmark's own
    /// cost out of what it measures).
    pub fn record_between(&mut self, start: Instant, end: Instant) {
        let took = end.saturating_duration_since(start);
        self.record(took);
        if let Some((origin, v)) = &mut self.series {
            let at = start.saturating_duration_since(*origin);
            v.push((at.as_micros() as u64, took.as_micros() as u64));
        }
    }

    /// Writes the series kept by [`Latencies::with_series`] to `path`, one operation per
    /// line in start order (sorted in place): `start_ms latency_ms`.
    pub fn write_series(&mut self, path: &Path) -> anyhow::Result<()> {
        use anyhow::Context as _;
        let Some((_, sorted)) = &mut self.series else {
            anyhow::bail!("no latency series was kept");
        };
        sorted.sort_unstable();
        let f = std::fs::File::create(path)
            .with_context(|| format!("cannot create the latency file {}", path.display()))?;
        let mut w = std::io::BufWriter::new(f);
        sorted
            .iter()
            .try_for_each(|(at, took)| {
                writeln!(w, "{:.3} {:.3}", *at as f64 / 1000.0, *took as f64 / 1000.0)
            })
            .and_then(|()| w.flush())
            .with_context(|| format!("cannot write the latency file {}", path.display()))
    }

    pub fn record(&mut self, d: Duration) {
        // Past the upper bound (10 minutes) the value is clamped rather than lost.
        let us = (d.as_micros() as u64).clamp(1, self.hist.high());
        self.hist.saturating_record(us);
    }

    #[cfg(test)]
    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    /// The latency at quantile `q` (0..=1), in milliseconds.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }

    pub fn max_ms(&self) -> f64 {
        self.hist.max() as f64 / 1000.0
    }

    pub fn mean_ms(&self) -> f64 {
        self.hist.mean() / 1000.0
    }
}

impl Default for Latencies {
    fn default() -> Self {
        Self::new()
    }
}

/// The outcome of a run: `entries` operations of `bytes` payload bytes in total.
pub struct Summary {
    pub entries: u64,
    pub bytes: u64,
    pub elapsed: Duration,
    pub latencies: Latencies,
    /// This process's CPU seconds over the measured phase, when it was measured
    /// ([`PhaseCpu`]); printed as `phase_cpu_s`.
    pub cpu_seconds: Option<f64>,
}

/// This process's CPU (user + system, every thread) from the start of a measured phase:
/// the driver's own cost beside the bookies', without its start-up and set-up, as the Java
/// drivers of `scripts/bench-vs-bookkeeper` report theirs. Ticks of `/proc/self/stat`
/// (10 ms), so it means something over phases of a second or more.
pub struct PhaseCpu(Option<f64>);

impl PhaseCpu {
    pub fn start() -> Self {
        PhaseCpu(folio_http::process_cpu_seconds())
    }

    /// The CPU seconds since [`PhaseCpu::start`]; `None` where `/proc` cannot be read.
    pub fn seconds(&self) -> Option<f64> {
        Some(folio_http::process_cpu_seconds()? - self.0?)
    }
}

impl Summary {
    pub fn seconds(&self) -> f64 {
        self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn entries_per_sec(&self) -> f64 {
        self.entries as f64 / self.seconds()
    }

    /// Megabytes (10^6 bytes, as fio reports) per second.
    pub fn mb_per_sec(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.seconds()
    }

    /// The JSON object of DESIGN.md section 7, plus `extra` fields.
    pub fn to_json(&self, extra: Map<String, Value>) -> Value {
        let l = &self.latencies;
        let mut v = json!({
            "entries": self.entries,
            "seconds": round(self.seconds(), 3),
            "entries_per_sec": round(self.entries_per_sec(), 1),
            "mb_per_sec": round(self.mb_per_sec(), 2),
            "latency_ms": {
                "p50": round(l.quantile_ms(0.50), 3),
                "p99": round(l.quantile_ms(0.99), 3),
                "p999": round(l.quantile_ms(0.999), 3),
                "max": round(l.max_ms(), 3),
                "mean": round(l.mean_ms(), 3),
            },
        });
        let obj = v.as_object_mut().expect("a JSON object");
        if let Some(cpu) = self.cpu_seconds {
            obj.insert("phase_cpu_s".into(), json!(round(cpu, 3)));
        }
        obj.extend(extra);
        v
    }

    /// Two human-readable lines: throughput, then latency.
    pub fn to_text(&self) -> String {
        let l = &self.latencies;
        format!(
            "{} entries in {:.2} s: {:.0} entries/s, {:.2} MB/s\n\
             latency ms: p50 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}  mean {:.3}",
            self.entries,
            self.seconds(),
            self.entries_per_sec(),
            self.mb_per_sec(),
            l.quantile_ms(0.50),
            l.quantile_ms(0.99),
            l.quantile_ms(0.999),
            l.max_ms(),
            l.mean_ms(),
        )
    }
}

fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latency_series_is_written_in_start_order() {
        let origin = Instant::now() - Duration::from_millis(50);
        let mut l = Latencies::with_series(origin);
        // Recorded out of order (a later start answered first), written in start order.
        let now = Instant::now();
        l.record_between(origin + Duration::from_millis(20), now);
        l.record_between(origin + Duration::from_millis(10), now);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lat.txt");
        l.write_series(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let rows: Vec<(f64, f64)> = text
            .lines()
            .map(|line| {
                let (a, b) = line.split_once(' ').unwrap();
                (a.parse().unwrap(), b.parse().unwrap())
            })
            .collect();
        assert_eq!(rows.len(), 2, "{text}");
        assert!((9.9..10.1).contains(&rows[0].0), "{text}");
        assert!((19.9..20.1).contains(&rows[1].0), "{text}");
        // The one started 10 ms after the origin waited longer than the one at 20 ms.
        assert!(rows[0].1 >= 39.9 && rows[0].1 > rows[1].1, "{text}");
        assert_eq!(l.len(), 2);
        let e = Latencies::new().write_series(&path).unwrap_err();
        assert!(e.to_string().contains("no latency series"), "{e}");
    }

    #[test]
    fn json_has_the_design_fields_and_the_extra_ones() {
        let mut latencies = Latencies::new();
        for ms in 1..=100u64 {
            latencies.record(Duration::from_millis(ms));
        }
        let s = Summary {
            entries: 100,
            bytes: 100 * 1_000_000,
            elapsed: Duration::from_secs(4),
            latencies,
            cpu_seconds: None,
        };
        let mut extra = Map::new();
        extra.insert("entry_size".into(), json!(1_000_000));
        let v = s.to_json(extra);
        assert_eq!(v["entries"], 100);
        assert_eq!(v["seconds"], 4.0);
        assert_eq!(v["entries_per_sec"], 25.0);
        assert_eq!(v["mb_per_sec"], 25.0);
        assert_eq!(v["entry_size"], 1_000_000);
        let p50 = v["latency_ms"]["p50"].as_f64().unwrap();
        assert!((49.9..=50.1).contains(&p50), "p50 {p50}");
        let max = v["latency_ms"]["max"].as_f64().unwrap();
        assert!((99.9..=100.1).contains(&max), "max {max}");
        assert!(v["latency_ms"]["p99"].as_f64().unwrap() <= max);
        assert!(v["latency_ms"]["p999"].as_f64().unwrap() <= max);
        assert!(
            v.get("phase_cpu_s").is_none(),
            "no CPU measured, none printed"
        );
    }

    #[test]
    fn the_phase_cpu_counts_this_process_work_and_is_printed() {
        let cpu = PhaseCpu::start();
        // Work until this phase has counted 0.2 s of the process's CPU; a slow, shared
        // machine only makes that take longer (the wall clock bounds it at 120 s).
        let t0 = std::time::Instant::now();
        let mut x = 0u64;
        while cpu.seconds().expect("/proc/self/stat is readable on Linux") < 0.2 {
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "no CPU counted in 120 s"
            );
        }
        let spent = cpu.seconds().unwrap();
        assert!(spent >= 0.2, "{spent}");
        let s = Summary {
            entries: 1,
            bytes: 1,
            elapsed: Duration::from_secs(1),
            latencies: Latencies::new(),
            cpu_seconds: Some(spent),
        };
        let printed = s.to_json(Map::new())["phase_cpu_s"].as_f64().unwrap();
        assert!((printed - spent).abs() < 0.001, "{printed} against {spent}");
        // A phase counts from its own start, not the process's: this one has spent nothing
        // (within the 10 ms ticks), though the process has spent 0.2 s.
        let fresh = PhaseCpu::start().seconds().unwrap();
        assert!(fresh < 0.05, "a new phase starts at {fresh} s");
    }

    #[test]
    fn latencies_past_the_bound_are_clamped_not_lost() {
        let mut l = Latencies::new();
        l.record(Duration::from_secs(3600));
        l.record(Duration::ZERO);
        assert_eq!(l.len(), 2);
        assert!(l.max_ms() >= 599_000.0);
    }
}
