//! Samples a small batch on the best backend present: CUDA, then wgpu, then the CPU.
//!
//! `cargo run --release --example quickstart`

use sampling_kernels::{Backend, CpuBackend, Logits, Output, RowParams, Shape};

/// Four requests over an 8-token vocabulary: a sampled one, a cold one, a hot one, a greedy one.
fn sample<B: Backend>(backend: &B) -> sampling_kernels::Result<()> {
    let shape = Shape::dense(4, 8);
    let row = [1.0f32, 3.0, 0.5, 2.5, -1.0, 2.9, 0.0, 1.5];
    let logits: Vec<f32> = row.iter().copied().cycle().take(shape.elements()).collect();
    let rows = [RowParams::new(1.0, 42, 0), RowParams::new(0.2, 7, 0), RowParams::new(5.0, 9, 0), RowParams::greedy()];
    let x = backend.upload(&logits)?;
    let r = backend.upload(&rows)?;
    let mut tokens = backend.zeros::<u32>(shape.batch)?;
    let mut logprobs = backend.zeros::<f32>(shape.batch)?;
    let out = Output::new(&mut tokens).with_logprobs(&mut logprobs);
    backend.race_from_logits(shape, Logits::F32(&x), &r, out)?;
    let (tokens, logprobs) = (backend.download(&tokens)?, backend.download(&logprobs)?);
    println!("backend: {}", backend.describe());
    for (i, p) in rows.iter().enumerate() {
        println!(
            "row {i}: temperature {:<4} seed {:<3} -> token {} (log-probability {:.4})",
            p.temperature,
            p.seed(),
            tokens[i],
            logprobs[i]
        );
    }
    Ok(())
}

fn main() -> sampling_kernels::Result<()> {
    #[cfg(feature = "cuda")]
    match sampling_kernels::CudaBackend::new(0) {
        Ok(b) => return sample(&b),
        Err(e) => eprintln!("CUDA: {e}; trying wgpu"),
    }
    #[cfg(feature = "wgpu")]
    match sampling_kernels::WgpuBackend::new() {
        Ok(b) => return sample(&b),
        Err(e) => eprintln!("wgpu: {e}; using the CPU"),
    }
    sample(&CpuBackend)
}
