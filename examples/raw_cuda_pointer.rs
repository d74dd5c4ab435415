//! An engine that holds its CUDA memory as raw device pointers and its stream as the driver's
//! handle, as burn and CubeCL do: the sampler is given only those (`CudaBackend::from_raw_stream`,
//! `CudaBackend::alias_raw`), reads the logits where they lie and writes the tokens into the
//! engine's own allocation, on the engine's stream, with no copy.
//!
//! `cargo run --release --example raw_cuda_pointer` (needs a CUDA driver and NVRTC; without them
//! it says it was not run and exits cleanly)

use sampling_kernels::backend::cuda;
use sampling_kernels::cudarc::driver::{CudaContext, DevicePtr};
use sampling_kernels::{Backend, CpuBackend, CudaBackend, Logits, Output, RowParams, Shape};

const BATCH: usize = 3;
const VOCAB: usize = 1000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // cudarc panics on its first driver call when libcuda cannot be loaded, so ask first.
    if !cuda::libraries_present() {
        eprintln!("no CUDA driver or NVRTC on the library path; not run");
        return Ok(());
    }
    let ctx = match CudaContext::new(0) {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("no CUDA device ({e}); not run");
            return Ok(());
        }
    };
    let shape = Shape::dense(BATCH, VOCAB);
    // Logits in [-4, 4) from a hash of (row, column), the engine's "model".
    let host: Vec<f32> =
        (0..shape.elements() as u32).map(|i| ((i.wrapping_mul(2_654_435_761) >> 24) as f32) / 32.0 - 4.0).collect();

    // The engine's side, as burn or CubeCL hold it: memory allocated with cudarc, kept as raw
    // device addresses, and the stream as the driver's handle.
    let stream = ctx.new_stream()?;
    let logits_memory = stream.clone_htod(&host)?;
    let tokens_memory = stream.alloc_zeros::<u32>(BATCH)?;
    let (logits_ptr, _) = logits_memory.device_ptr(&stream);
    let (tokens_ptr, _) = tokens_memory.device_ptr(&stream);
    let raw_stream = stream.cu_stream();

    // The sampler's side: only the raw handles.
    // SAFETY: the stream is `ctx`'s and outlives the sampler (dropped at the end of `main`,
    // after it); both allocations are `ctx`'s, hold `shape.elements()` f32 and `BATCH` u32, and
    // outlive the aliases, which are dropped first; the engine queues nothing else on them.
    let sampler = unsafe { CudaBackend::from_raw_stream(&ctx, raw_stream) }?;
    let logits = unsafe { sampler.alias_raw::<f32>(logits_ptr, shape.elements()) }?;
    let mut tokens = unsafe { sampler.alias_raw::<u32>(tokens_ptr, BATCH) }?;
    let params = [RowParams::new(1.0, 42, 0), RowParams::new(0.7, 7, 3), RowParams::greedy()];
    let rows = sampler.upload(&params)?;
    sampler.race_from_logits(shape, Logits::F32(&*logits), &rows, Output::aliased(&mut tokens))?;
    let got = sampler.download(&tokens)?;

    // A check for this example only: the CPU oracle on the same logits. The race's noise is the
    // same on both, so the tokens agree unless two scores tie within float32 rounding.
    let mut oracle = vec![0u32; BATCH];
    CpuBackend.race_from_logits(shape, Logits::F32(&host), &params.to_vec(), Output::new(&mut oracle))?;
    println!("backend: {}", sampler.describe());
    for (r, p) in params.iter().enumerate() {
        println!("row {r}: temperature {:<4} -> token {:>3} (CPU oracle: {})", p.temperature, got[r], oracle[r]);
    }
    Ok(())
}
