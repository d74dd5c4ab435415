//! What the benchmarks share: the summary of repeated timings.

/// Median and quartiles of repeated timings, by rank on the sorted samples: the samples at
/// n/2, n/4 and 3n/4, so `q1..q3` is the interquartile range and no value is interpolated.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    pub median: f64,
    pub q1: f64,
    pub q3: f64,
}

impl Stats {
    /// Of one or more samples (it sorts them).
    pub fn of(samples: &mut [f64]) -> Stats {
        samples.sort_by(f64::total_cmp);
        let n = samples.len();
        Stats { median: samples[n / 2], q1: samples[n / 4], q3: samples[3 * n / 4] }
    }
}
