//! What the benchmarks share: the summary of repeated timings, and each backend's clock.

use sampling_kernels::{Backend, Clock, CpuBackend, LaunchTime};
use std::time::Instant;

/// Median and quartiles of repeated timings, by rank on the sorted samples: the samples at
/// n/2, n/4 and 3n/4, so `q1..q3` is the interquartile range and no value is interpolated.
///
/// Not criterion: its `iter_custom` takes a device clock, but it sums `iters` calls into each
/// sample (1, 2, ... n times a base count, at least 10 samples), and at its default 3 s of
/// warm-up and 5 s of samples a cell the quick subset (about 400 cells, a minute and a half on
/// lavapipe now) takes an hour, and the full grid (over a thousand) far more than the 150 s the
/// bundle gives it on an H200; its estimates are a mean, a median and a slope with bootstrap
/// intervals, not the quartiles of single calls the CSVs carry (its statistics module is private
/// in 0.7); it writes `target/criterion/`, not `bench-results/<backend>.csv`; and its command
/// line rejects the benches' `--full`.
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

/// A backend a bench can time, and what it is called in file names.
// Each bench compiles this module on its own and uses part of it (`mixed` needs no file stem).
#[allow(dead_code)]
pub trait Timed: Backend {
    /// The CSV and plot file stem.
    const LABEL: &'static str;
    /// The largest batch x vocabulary it is given (the CPU oracle is slow by design).
    const MAX_ELEMENTS: usize = usize::MAX;
    fn time(
        &self,
        launch: &mut dyn FnMut(&Self) -> sampling_kernels::Result<()>,
    ) -> sampling_kernels::Result<LaunchTime>;
}

impl Timed for CpuBackend {
    const LABEL: &'static str = "cpu";
    const MAX_ELEMENTS: usize = 8 * 32768;
    fn time(
        &self,
        launch: &mut dyn FnMut(&Self) -> sampling_kernels::Result<()>,
    ) -> sampling_kernels::Result<LaunchTime> {
        // The CPU backend returns when its work is done.
        let start = Instant::now();
        launch(self)?;
        Ok(LaunchTime { elapsed: start.elapsed(), clock: Clock::Wall })
    }
}

/// The device backends time with their own clocks (`time_launches`).
macro_rules! timed_on_device {
    ($feature:literal, $backend:ty, $label:literal) => {
        #[cfg(feature = $feature)]
        impl Timed for $backend {
            const LABEL: &'static str = $label;
            fn time(
                &self,
                launch: &mut dyn FnMut(&Self) -> sampling_kernels::Result<()>,
            ) -> sampling_kernels::Result<LaunchTime> {
                self.time_launches(|b| launch(b)).map(|(_, t)| t)
            }
        }
    };
}
timed_on_device!("wgpu", sampling_kernels::WgpuBackend, "wgpu");
timed_on_device!("cuda", sampling_kernels::CudaBackend, "cuda");
