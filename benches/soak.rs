//! Soak: 100,000 steps of one [`Sampler`] with buffers allocated once, resident memory measured
//! after warm-up and at the end; then two threads, each with its own device, queue and sampler,
//! must give the tokens one thread gives.
//!
//! `cargo bench --bench soak` (wgpu when an adapter is present, else the CPU backend;
//! `SOAK_CALLS` overrides the call count).

use sampling_kernels::{Backend, CpuBackend, Logits, Output, RowParams, Sampler, Shape};
use std::time::Instant;

const BATCH: usize = 8;
const VOCAB: usize = 4096;

/// Resident set size in KiB, from /proc (Linux).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn logits(step: u64) -> Vec<f32> {
    (0..BATCH * VOCAB).map(|i| (((i as u64 * 2654435761 + step) % 1000) as f32) / 100.0).collect()
}

/// A mix of plain, greedy and seeded rows at decode step `step`.
fn rows(step: u64) -> Vec<RowParams> {
    (0..BATCH as u64)
        .map(|r| match r % 4 {
            0 => RowParams::greedy(),
            1 => RowParams::seeded(0.8, 1000 + r, step),
            _ => RowParams::new(0.8, 1000 + r, step),
        })
        .collect()
}

/// Samples `steps` decode steps with buffers made once, returning every token.
fn run_steps<B: Backend>(b: &B, steps: std::ops::Range<u64>, mut on_step: impl FnMut(u64)) -> Vec<u32> {
    let shape = Shape::dense(BATCH, VOCAB);
    let x = b.upload(&logits(0)).unwrap();
    let mut sampler = Sampler::new(b, BATCH).unwrap();
    let mut t = b.zeros::<u32>(BATCH).unwrap();
    let mut out = Vec::new();
    for step in steps {
        sampler.step(shape, Logits::F32(&x), &rows(step), Output::new(&mut t)).unwrap();
        // An engine reads its tokens every step; that is also when wgpu retires finished work.
        out.extend(b.download(&t).unwrap());
        on_step(step);
    }
    out
}

fn soak<B: Backend + Sync>(b: &B, make: impl Fn() -> B + Sync, calls: u64) {
    println!("backend: {}", b.describe());
    run_steps(b, 0..1000, |_| {});
    let start_rss = rss_kib();
    let started = Instant::now();
    let mut peak = start_rss;
    run_steps(b, 0..calls, |step| {
        if step % 10_000 == 0 {
            peak = peak.max(rss_kib());
        }
    });
    let end_rss = rss_kib();
    println!(
        "{calls} calls in {:.1} s ({:.1} us a call); RSS after warm-up {start_rss} KiB, peak {peak} KiB, end {end_rss} KiB, growth {} KiB",
        started.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64() * 1e6 / calls as f64,
        end_rss as i64 - start_rss as i64
    );

    let steps = 2000u64;
    let one = run_steps(b, 0..steps, |_| {});
    let (first, second) = std::thread::scope(|s| {
        let a = s.spawn(|| run_steps(&make(), 0..steps / 2, |_| {}));
        let z = s.spawn(|| run_steps(&make(), steps / 2..steps, |_| {}));
        (a.join().unwrap(), z.join().unwrap())
    });
    let two: Vec<u32> = first.into_iter().chain(second).collect();
    let same = one == two;
    println!("two threads on two queues: {} tokens, identical to one thread: {same}", two.len());
    assert!(same, "two threads disagree with one");
}

fn main() {
    let calls = std::env::var("SOAK_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    #[cfg(feature = "wgpu")]
    if let Ok(b) = sampling_kernels::WgpuBackend::new() {
        return soak(&b, || sampling_kernels::WgpuBackend::new().unwrap(), calls);
    }
    soak(&CpuBackend, || CpuBackend, calls);
}
