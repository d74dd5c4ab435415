//! Mixed batches through the per-row sampler (`Sampler::step`, as an engine calls it), against the same batches the way SGLang's batch
//! flags would send them, measured in one run: 32 plain rows; 31 plain + 1 top-p; 31 plain + 1
//! greedy; 31 plain + 1 seeded; 16 plain + 16 seeded; 32 top-p. SGLang sends a batch with any
//! seeded request (deterministic inference) wholly through its seeded path (here
//! `seeded_from_logits` on every row), and a batch with any top-p or greedy request wholly
//! through its filtered path (here `sample_filtered` on every row, each with its own filters).
//!
//! `cargo bench --bench mixed`: on every device backend present (CUDA, wgpu), else on the CPU
//! backend. Each call is timed by the backend's clock (CUDA events, wgpu timestamp queries; the
//! wall clock on the CPU and on devices without timestamps), so a figure is the device's work for
//! the step (the row records' upload and every launch); median and interquartile range of `REPS`
//! calls.

mod common;

use common::{Stats, Timed};
use sampling_kernels::{Backend, Clock, CpuBackend, Input, Logits, Output, RowParams, Sampler, Shape};

const BATCH: usize = 32;
const VOCAB: usize = 151_936;
const REPS: usize = 15;

type Launch<B> =
    fn(&B, Shape, Logits<'_, B>, &<B as Backend>::Buffer<RowParams>, Output<'_, B>) -> sampling_kernels::Result<()>;

/// `greedy` greedy rows, then `seeded` seeded rows, then `top_p` rows with top-p 0.9, then plain.
fn rows(greedy: usize, seeded: usize, top_p: usize) -> Vec<RowParams> {
    (0..BATCH as u64)
        .map(|r| match r as usize {
            r if r < greedy => RowParams::greedy(),
            r if r < greedy + seeded => RowParams::seeded(0.8, 100 + r as u64, 9),
            r if r < greedy + seeded + top_p => RowParams::new(0.8, 100 + r as u64, 9).with_top_p(0.9),
            _ => RowParams::new(0.8, 100 + r, 9),
        })
        .collect()
}

/// SGLang's filtered path for a whole batch: here the filter kernel on every row.
fn filtered<B: Backend>(
    b: &B,
    shape: Shape,
    logits: Logits<'_, B>,
    rows: &B::Buffer<RowParams>,
    out: Output<'_, B>,
) -> sampling_kernels::Result<()> {
    b.sample_filtered(shape, Input::Logits(logits), rows, out)
}

/// Median and interquartile range, in microseconds, of `REPS` timed calls of `call` after one
/// warm-up, and the clock that timed them.
fn time<B: Timed>(
    b: &B,
    x: &B::Buffer<f32>,
    mut call: impl FnMut(&B, Logits<'_, B>, Output<'_, B>) -> sampling_kernels::Result<()>,
) -> (Stats, Clock) {
    let mut t = b.zeros::<u32>(BATCH).unwrap();
    let mut clock = Clock::Device;
    let mut once = || {
        let took = b.time(&mut |b| call(b, Logits::F32(x), Output::new(&mut t))).unwrap();
        clock = took.clock;
        took.elapsed.as_secs_f64() * 1e6
    };
    once();
    let mut us: Vec<f64> = (0..REPS).map(|_| once()).collect();
    (Stats::of(&mut us), clock)
}

/// `launch` on the rows, uploaded once.
fn launched<B: Timed>(b: &B, x: &B::Buffer<f32>, rows: &[RowParams], launch: Launch<B>) -> (Stats, Clock) {
    let r = b.upload(rows).unwrap();
    time(b, x, |b, logits, out| launch(b, Shape::dense(BATCH, VOCAB), logits, &r, out))
}

/// `Sampler::step` on the rows: what an engine calls each step (it writes the row records and
/// the list of filtered rows, then launches).
fn stepped<B: Timed>(b: &B, x: &B::Buffer<f32>, rows: &[RowParams]) -> (Stats, Clock) {
    let mut sampler = Sampler::new(b, BATCH).unwrap();
    time(b, x, |_, logits, out| sampler.step(Shape::dense(BATCH, VOCAB), logits, rows, out))
}

/// Steps queued back to back by [`host_returns`].
const STEPS: usize = 20;

/// Wall-clock microseconds until the host has queued [`STEPS`] steps on `rows`, and until the
/// device has run them (a download waits). If a step waited for the device (a copy from
/// pageable memory synchronizes a CUDA stream), the two would be about equal.
fn host_returns<B: Backend>(b: &B, x: &B::Buffer<f32>, rows: &[RowParams]) -> (f64, f64) {
    let shape = Shape::dense(BATCH, VOCAB);
    let mut sampler = Sampler::new(b, BATCH).unwrap();
    let mut t = b.zeros::<u32>(BATCH).unwrap();
    sampler.step(shape, Logits::F32(x), rows, Output::new(&mut t)).unwrap();
    b.download(&t).unwrap();
    let start = std::time::Instant::now();
    for _ in 0..STEPS {
        sampler.step(shape, Logits::F32(x), rows, Output::new(&mut t)).unwrap();
    }
    let queued = start.elapsed().as_secs_f64() * 1e6;
    b.download(&t).unwrap();
    (queued, start.elapsed().as_secs_f64() * 1e6)
}

fn bench<B: Timed>(b: &B) {
    let logits: Vec<f32> = (0..BATCH * VOCAB).map(|i| ((i * 7919 % 10007) as f32) / 1000.0 - 5.0).collect();
    let x = b.upload(&logits).unwrap();
    let (race, clock) = launched(b, &x, &rows(0, 0, 0), B::race_from_logits);
    let (plain, _) = stepped(b, &x, &rows(0, 0, 0));
    println!(
        "backend: {}; batch {BATCH} x vocab {VOCAB} f32; {REPS} calls each, {clock:?} clock; \
         32 plain rows: race {:.1} us, `Sampler::step` {:.1} us",
        b.describe(),
        race.median,
        plain.median
    );
    println!("| batch | `Sampler::step` (us, median [IQR]) | x race | x step on 32 plain | as SGLang routes it (us) | x race |");
    println!("|---|---|---|---|---|---|");
    let cases: [(&str, usize, usize, usize, Launch<B>); 6] = [
        ("32 plain", 0, 0, 0, B::race_from_logits),
        ("31 plain + 1 top-p", 0, 0, 1, filtered),
        ("31 plain + 1 greedy", 1, 0, 0, filtered),
        ("31 plain + 1 seeded", 0, 1, 0, B::seeded_from_logits),
        ("16 plain + 16 seeded", 0, 16, 0, B::seeded_from_logits),
        ("32 top-p", 0, 0, 32, filtered),
    ];
    for (name, greedy, seeded, top_p, sglang) in cases {
        let r = rows(greedy, seeded, top_p);
        let (Stats { median: m, q1, q3 }, _) = stepped(b, &x, &r);
        let (Stats { median: fm, q1: fq1, q3: fq3 }, _) = launched(b, &x, &r, sglang);
        println!(
            "| {name} | {m:.1} [{q1:.1}, {q3:.1}] | {:.2} | {:.2} | {fm:.1} [{fq1:.1}, {fq3:.1}] | {:.2} |",
            m / race.median,
            m / plain.median,
            fm / race.median
        );
    }
    let (queued, done) = host_returns(b, &x, &rows(1, 1, 1));
    println!(
        "{STEPS} steps of 29 plain + 1 greedy + 1 seeded + 1 top-p rows: queued by the host in {queued:.0} us, \
         run by the device after {done:.0} us (host / device {:.2})",
        queued / done
    );
}

fn main() {
    let mut ran = false;
    #[cfg(feature = "cuda")]
    if let Ok(b) = sampling_kernels::CudaBackend::new(0) {
        bench(&b);
        ran = true;
    }
    #[cfg(feature = "wgpu")]
    if let Ok(b) = sampling_kernels::WgpuBackend::new() {
        bench(&b);
        ran = true;
    }
    if !ran {
        bench(&CpuBackend);
    }
}
