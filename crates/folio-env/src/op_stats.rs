//! Latency op stats cheap enough to record on every request and every journal entry, and
//! their Prometheus text. Through the `metrics` exporter each sample was a timestamp and a
//! push into a lock-free queue, folded into a sketch a second later; a bookie's add
//! recorded four of them (Folio's request histogram, BookKeeper's request and processing
//! op stats, the journal's add), 8-9% of its CPU at 1 KiB adds (perf, docs/performance.md).
//! Here a sample is three relaxed atomic additions into fixed buckets of one [`OpStats`],
//! however many families show it: the families are rendered from the buckets at a scrape.
//!
//! Each [`OpStats`] counts into log-linear buckets (16 per power of two of nanoseconds, so a
//! quantile is within 3.2% of the sample it stands for) and into Folio's histogram buckets
//! ([`HISTOGRAM_BUCKETS`], exact `le` counts). A series ([`expose`]) shows the sum of one or
//! more op stats under a family name and labels, as a summary with BookKeeper's quantiles
//! in milliseconds (its Prometheus provider's op stats) or as a histogram in seconds.
//! Summary quantiles cover the last 40 to 60 seconds ([`rotate`] keeps the windows), as the
//! exporter's and BookKeeper's rolling summaries do; counts and sums are cumulative.
//!
//! The op stats and series of a thread with a `bookie` label ([`crate::metric_label`]) carry
//! that label, as the process's recorder labels everything else. Like the exporter's
//! handles, op stats are kept per key and label for the life of the process: a bookie
//! started again in one process (a restart in a test, thousands in the simulator) counts on
//! into the same ones, so memory stays bounded and counts never go back.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The quantiles of BookKeeper's op-stats summaries.
pub const QUANTILES: &[f64] = &[0.5, 0.75, 0.95, 0.99, 0.999, 0.9999, 1.0];

/// The `le` bounds (seconds) of a histogram series: 100 µs to 10 s.
pub const HISTOGRAM_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// How long a summary window is kept before [`rotate`] starts the next one; quantiles read
/// the counts since the oldest of the last [`WINDOWS`] starts.
const WINDOW: Duration = Duration::from_secs(20);
const WINDOWS: usize = 3;

/// Sub-buckets per power of two (2^SUB_BITS): bucket widths are 1/16 of their lower bound.
const SUB_BITS: u32 = 4;
const SUB: u64 = 1 << SUB_BITS;
/// Samples are capped at 2^40 ns (18 minutes); the last bucket holds everything above.
const MAX_EXP: u32 = 40;
const FINE: usize = ((MAX_EXP - SUB_BITS + 2) as usize) * SUB as usize;

/// One op's latencies: what [`record`](OpStats::record) adds up, shown by the series that
/// [`expose`] it.
pub struct OpStats {
    fine: Box<[AtomicU64]>,
    /// Samples at or below each of [`HISTOGRAM_BUCKETS`] and above the last (not
    /// cumulative: rendering adds them up).
    coarse: [AtomicU64; HISTOGRAM_BUCKETS.len() + 1],
    sum_ns: AtomicU64,
    /// The fine counts at the start of each kept window, oldest first.
    windows: Mutex<VecDeque<(Instant, Box<[u64]>)>>,
}

impl OpStats {
    fn new() -> OpStats {
        OpStats {
            fine: (0..FINE).map(|_| AtomicU64::new(0)).collect(),
            coarse: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: AtomicU64::new(0),
            windows: Mutex::new(VecDeque::new()),
        }
    }

    /// Counts one sample.
    pub fn record(&self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.fine[fine_index(ns)].fetch_add(1, Relaxed);
        let secs = took.as_secs_f64();
        let coarse = HISTOGRAM_BUCKETS.partition_point(|&le| le < secs);
        self.coarse[coarse].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
    }

    fn counts(&self) -> Box<[u64]> {
        self.fine.iter().map(|c| c.load(Relaxed)).collect()
    }

    /// Starts a window if the newest is [`WINDOW`] old (or there is none), dropping the
    /// oldest beyond [`WINDOWS`].
    fn rotate(&self, now: Instant) {
        let mut w = self.windows.lock();
        if w.back()
            .is_none_or(|(at, _)| now.duration_since(*at) >= WINDOW)
        {
            w.push_back((now, self.counts()));
            if w.len() > WINDOWS {
                w.pop_front();
            }
        }
    }

    /// Adds this op stats' samples since its oldest window start into `into`.
    fn add_window(&self, into: &mut [u64]) {
        let w = self.windows.lock();
        let base = w.front().map(|(_, c)| &c[..]);
        for (i, (sum, c)) in into.iter_mut().zip(self.fine.iter()).enumerate() {
            *sum += c.load(Relaxed) - base.map_or(0, |b| b[i]);
        }
    }
}

/// The fine bucket of `ns`: exact below 16 ns, then 16 per power of two.
fn fine_index(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let exp = (63 - ns.leading_zeros()).min(MAX_EXP);
    let ns = ns.min((1 << (MAX_EXP + 1)) - 1);
    (((exp - SUB_BITS + 1) as u64) * SUB + ((ns >> (exp - SUB_BITS)) & (SUB - 1))) as usize
}

/// The lower bound and width (ns) of fine bucket `i`.
fn fine_bounds(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < SUB {
        return (i, 1);
    }
    let exp = (i / SUB) as u32 + SUB_BITS - 1;
    let width = 1 << (exp - SUB_BITS);
    ((SUB + i % SUB) * width, width)
}

/// The sample at quantile `q` of fine `counts` (the middle of its bucket, ns), or `None`
/// when there are none.
fn quantile(counts: &[u64], total: u64, q: f64) -> Option<f64> {
    if total == 0 {
        return None;
    }
    // The rank of the sample, 1-based: the smallest with at least q of the samples at or
    // below it.
    let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    for (i, &c) in counts.iter().enumerate() {
        seen += c;
        if seen >= rank {
            let (low, width) = fine_bounds(i);
            return Some(low as f64 + (width as f64 - 1.0) / 2.0);
        }
    }
    None
}

/// How a series is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A summary in milliseconds with [`QUANTILES`] (BookKeeper's op stats).
    Summary,
    /// A histogram in seconds with [`HISTOGRAM_BUCKETS`].
    Histogram,
}

struct Series {
    family: &'static str,
    kind: Kind,
    /// Rendered labels, `a="x",b="y"` (without braces).
    labels: String,
    parts: Vec<Arc<OpStats>>,
}

#[derive(Default)]
struct Registry {
    series: Vec<Series>,
    /// Every op stats, by key and `bookie` label.
    stats: Vec<(String, Option<Arc<str>>, Arc<OpStats>)>,
}

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(Mutex::default)
}

/// The op stats of `key` under this thread's `bookie` label, made at the first call: every
/// call with the same key on a thread with the same label gets the same one.
pub fn op_stats(key: &str) -> Arc<OpStats> {
    let bookie = crate::metric_label::current();
    let mut r = registry().lock();
    if let Some((_, _, s)) = r.stats.iter().find(|(k, b, _)| k == key && *b == bookie) {
        return Arc::clone(s);
    }
    let s = Arc::new(OpStats::new());
    r.stats.push((key.to_string(), bookie, Arc::clone(&s)));
    s
}

/// Shows the sum of `parts` as series `family{labels}` of `kind`, with this thread's
/// `bookie` label after `labels`; a series already shown is left as it is (its parts are
/// the same op stats, [`op_stats`]).
pub fn expose(family: &'static str, kind: Kind, labels: &[(&str, &str)], parts: &[&Arc<OpStats>]) {
    let mut rendered = String::new();
    let bookie = crate::metric_label::current();
    let bookie = bookie.as_deref().map(|b| ("bookie", b));
    for (k, v) in labels.iter().copied().chain(bookie) {
        if !rendered.is_empty() {
            rendered.push(',');
        }
        // Label values here are Folio's own names; escape what the format requires anyway.
        let v = v
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        let _ = write!(rendered, "{k}=\"{v}\"");
    }
    let mut r = registry().lock();
    if r.series
        .iter()
        .any(|s| s.family == family && s.labels == rendered)
    {
        return;
    }
    r.series.push(Series {
        family,
        kind,
        labels: rendered,
        parts: parts.iter().map(|p| Arc::clone(p)).collect(),
    });
}

/// Starts new summary windows where the newest is [`WINDOW`] old (call it every few
/// seconds; a scrape calls it too).
pub fn rotate(now: Instant) {
    let all: Vec<Arc<OpStats>> = registry()
        .lock()
        .stats
        .iter()
        .map(|(_, _, s)| s.clone())
        .collect();
    for s in all {
        s.rotate(now);
    }
}

/// Appends every series with samples, family by family in the order they were first
/// exposed, in the Prometheus text format.
pub fn render(out: &mut String) {
    let r = registry().lock();
    let mut families: Vec<&'static str> = Vec::new();
    for s in &r.series {
        if !families.contains(&s.family) {
            families.push(s.family);
        }
    }
    for family in families {
        let mut typed = false;
        for s in r.series.iter().filter(|s| s.family == family) {
            let count: u64 = s
                .parts
                .iter()
                .flat_map(|p| &p.coarse)
                .map(|c| c.load(Relaxed))
                .sum();
            if count == 0 {
                continue;
            }
            let kind = match s.kind {
                Kind::Summary => "summary",
                Kind::Histogram => "histogram",
            };
            if !typed {
                let _ = writeln!(out, "# TYPE {family} {kind}");
                typed = true;
            }
            let sum_ns: u64 = s.parts.iter().map(|p| p.sum_ns.load(Relaxed)).sum();
            let sep = if s.labels.is_empty() { "" } else { "," };
            let labels = &s.labels;
            let sum = match s.kind {
                Kind::Summary => {
                    let mut window = vec![0; FINE];
                    for p in &s.parts {
                        p.add_window(&mut window);
                    }
                    let total = window.iter().sum();
                    for &q in QUANTILES {
                        let ms = quantile(&window, total, q).map_or(0.0, |ns| ns / 1e6);
                        let _ = writeln!(out, "{family}{{{labels}{sep}quantile=\"{q}\"}} {ms}");
                    }
                    sum_ns as f64 / 1e6
                }
                Kind::Histogram => {
                    let mut below = 0;
                    for (i, le) in HISTOGRAM_BUCKETS.iter().enumerate() {
                        below += s
                            .parts
                            .iter()
                            .map(|p| p.coarse[i].load(Relaxed))
                            .sum::<u64>();
                        let _ =
                            writeln!(out, "{family}_bucket{{{labels}{sep}le=\"{le}\"}} {below}");
                    }
                    let _ = writeln!(out, "{family}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
                    sum_ns as f64 / 1e9
                }
            };
            let braced = if labels.is_empty() {
                String::new()
            } else {
                format!("{{{labels}}}")
            };
            let _ = writeln!(out, "{family}_sum{braced} {sum}");
            let _ = writeln!(out, "{family}_count{braced} {count}");
        }
        if typed {
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fine_buckets_are_contiguous_and_narrow() {
        let mut next = 0;
        for i in 0..FINE {
            let (low, width) = fine_bounds(i);
            assert_eq!(
                low,
                next,
                "bucket {i} starts where {} ends",
                i.saturating_sub(1)
            );
            assert!(
                width == 1 || width * 16 <= low,
                "bucket {i}: {low} + {width}"
            );
            assert_eq!(fine_index(low), i);
            assert_eq!(fine_index(low + width - 1), i);
            next = low + width;
        }
        assert_eq!(fine_index(u64::MAX), FINE - 1);
        assert_eq!(fine_index(1 << 50), FINE - 1);
    }

    #[test]
    fn quantiles_stay_within_the_bucket_error() {
        let s = OpStats::new();
        // 1..=1000 µs, once each.
        for us in 1..=1000u64 {
            s.record(Duration::from_micros(us));
        }
        let mut w = vec![0; FINE];
        s.add_window(&mut w);
        for (q, want_us) in [
            (0.5, 500.0),
            (0.99, 990.0),
            (0.999, 999.0),
            (1.0, 1000.0),
            (0.0, 1.0),
        ] {
            let got = quantile(&w, 1000, q).unwrap() / 1e3;
            assert!(
                (got - want_us).abs() <= want_us * 0.033,
                "q{q}: {got} µs, want {want_us}"
            );
        }
        assert_eq!(quantile(&w, 0, 0.5), None);
    }

    #[test]
    fn a_summary_and_a_histogram_render_the_same_samples() {
        let ok = op_stats("test x ok");
        let failed = op_stats("test x failed");
        expose("test_op", Kind::Summary, &[("success", "true")], &[&ok]);
        expose(
            "test_op",
            Kind::Summary,
            &[("success", "false")],
            &[&failed],
        );
        expose(
            "test_op_seconds",
            Kind::Histogram,
            &[("op", "x")],
            &[&ok, &failed],
        );
        expose(
            "test_unused",
            Kind::Summary,
            &[],
            &[&op_stats("test unused")],
        );
        for ms in [1, 2, 3, 300] {
            ok.record(Duration::from_millis(ms));
        }
        let mut text = String::new();
        render(&mut text);
        let has = |line: &str| assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        has("# TYPE test_op summary");
        has("test_op_count{success=\"true\"} 4");
        has("test_op_sum{success=\"true\"} 306");
        has("# TYPE test_op_seconds histogram");
        has("test_op_seconds_bucket{op=\"x\",le=\"0.001\"} 1");
        has("test_op_seconds_bucket{op=\"x\",le=\"0.0025\"} 2");
        has("test_op_seconds_bucket{op=\"x\",le=\"0.25\"} 3");
        has("test_op_seconds_bucket{op=\"x\",le=\"+Inf\"} 4");
        has("test_op_seconds_count{op=\"x\"} 4");
        assert!(
            !text.contains("success=\"false\""),
            "no failures yet:\n{text}"
        );
        assert!(!text.contains("test_unused"), "{text}");
        let p50: f64 = sample(&text, "test_op{success=\"true\",quantile=\"0.5\"}");
        assert!((p50 - 2.0).abs() < 0.07, "p50 {p50}");
        let max: f64 = sample(&text, "test_op{success=\"true\",quantile=\"1\"}");
        assert!((max - 300.0).abs() < 10.0, "max {max}");

        // A failure shows in its summary and in the histogram, which sums both.
        failed.record(Duration::from_secs(20));
        let mut text = String::new();
        render(&mut text);
        assert_eq!(sample(&text, "test_op_count{success=\"false\"}"), 1.0);
        assert_eq!(
            sample(&text, "test_op_seconds_bucket{op=\"x\",le=\"10\"}"),
            4.0
        );
        assert_eq!(
            sample(&text, "test_op_seconds_bucket{op=\"x\",le=\"+Inf\"}"),
            5.0
        );
        assert_eq!(text.matches("# TYPE test_op summary").count(), 1, "{text}");

        // Registered again (a bookie started again in this process): the same op stats
        // and series, counting on.
        let again = op_stats("test x ok");
        assert!(Arc::ptr_eq(&again, &ok));
        expose("test_op", Kind::Summary, &[("success", "true")], &[&again]);
        again.record(Duration::from_millis(4));
        let mut text = String::new();
        render(&mut text);
        assert_eq!(sample(&text, "test_op_count{success=\"true\"}"), 5.0);
        assert_eq!(text.matches("test_op_count{success=\"true\"}").count(), 1);
        // Another bookie's label gets its own.
        let other = std::thread::spawn(|| {
            crate::metric_label::set(Some("b2".into()));
            op_stats("test x ok")
        })
        .join()
        .unwrap();
        assert!(!Arc::ptr_eq(&other, &ok));
    }

    #[test]
    fn quantiles_forget_samples_older_than_the_windows() {
        let s = OpStats::new();
        let t0 = Instant::now();
        s.rotate(t0);
        s.record(Duration::from_millis(500));
        let p99 = |s: &OpStats| {
            let mut w = vec![0; FINE];
            s.add_window(&mut w);
            let total = w.iter().sum();
            quantile(&w, total, 0.99).map(|ns| ns / 1e6)
        };
        assert!(p99(&s).unwrap() > 480.0);
        // Too early for a new window: the count still covers the slow sample.
        s.rotate(t0 + WINDOW / 2);
        assert_eq!(s.windows.lock().len(), 1);
        for i in 1..=WINDOWS as u32 {
            s.rotate(t0 + WINDOW * i);
            s.record(Duration::from_millis(1));
        }
        let p = p99(&s).unwrap();
        assert!(p < 1.1, "the 500 ms sample has left the windows: p99 {p}");
        assert_eq!(s.windows.lock().len(), WINDOWS);
        // Counts and sums stay cumulative.
        assert_eq!(s.coarse.iter().map(|c| c.load(Relaxed)).sum::<u64>(), 4);
    }

    fn sample(text: &str, series: &str) -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .unwrap_or_else(|| panic!("{series} in\n{text}"));
        line[series.len() + 1..].parse().unwrap()
    }
}
