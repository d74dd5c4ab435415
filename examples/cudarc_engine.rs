//! An engine that owns its CUDA context and stream: its own kernel writes the logits into its
//! own `CudaSlice<f32>`, and the sampler launches on the same stream, so nothing waits on the
//! host until the tokens are downloaded.
//!
//! `cargo run --release --example cudarc_engine` (needs a CUDA driver and NVRTC; without them it
//! says so and exits cleanly)

use sampling_kernels::backend::cuda;
use sampling_kernels::cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use sampling_kernels::cudarc::nvrtc::compile_ptx;
use sampling_kernels::{Backend, CpuBackend, CudaBackend, Logits, Output, RowParams, Shape};

/// A padded vocabulary, as models have: rows are `STRIDE` apart, only `VOCAB` columns are tokens.
const BATCH: u32 = 4;
const VOCAB: u32 = 1000;
const STRIDE: u32 = 1024;

/// The engine's "model": a hash of (row, column) as logits in [-4, 4). The padding columns get
/// 1e30, which would win every draw if the sampler ever read past the vocabulary.
const FILL_LOGITS: &str = r#"
extern "C" __global__ void fill_logits(float* logits, unsigned int n, unsigned int vocab, unsigned int stride) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int row = i / stride, col = i % stride;
    if (col >= vocab) { logits[i] = 1e30f; return; }
    unsigned int h = (col * 2654435761u) ^ (row * 40503u + 0x9e3779b9u);
    logits[i] = (float)(h >> 24) / 32.0f - 4.0f;
}
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // cudarc panics on its first driver call when libcuda cannot be loaded, so ask first.
    if !cuda::libraries_present() {
        eprintln!("no CUDA driver or NVRTC on the library path; nothing to run");
        return Ok(());
    }
    let ctx = match CudaContext::new(0) {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("no CUDA device ({e}); nothing to run");
            return Ok(());
        }
    };
    let stream = ctx.new_stream()?;

    // The engine's slice and kernel.
    let elements = BATCH * STRIDE;
    let mut logits = stream.alloc_zeros::<f32>(elements as usize)?;
    let fill = ctx.load_module(compile_ptx(FILL_LOGITS)?)?.load_function("fill_logits")?;
    let mut launch = stream.launch_builder(&fill);
    launch.arg(&mut logits).arg(&elements).arg(&VOCAB).arg(&STRIDE);
    // SAFETY: the arguments match the kernel's signature and `logits` holds `elements` floats.
    unsafe { launch.launch(LaunchConfig::for_num_elems(elements)) }?;

    // The sampler on the engine's stream reads the slice where it is. Parameter and token
    // buffers would be made once and rewritten per step with `write`.
    let sampler = CudaBackend::from_stream(stream.clone())?;
    let shape = Shape { batch: BATCH as usize, vocab: VOCAB as usize, stride: STRIDE as usize };
    let params =
        [RowParams::new(1.0, 42, 0), RowParams::new(0.7, 7, 3), RowParams::new(1.5, 9, 0), RowParams::greedy()];
    let rows = sampler.upload(&params)?;
    // The tokens go into the engine's own slice, at an offset, in place.
    let mut engine_tokens = stream.alloc_zeros::<u32>(64)?;
    let mut at = engine_tokens.slice_mut(16..16 + shape.batch);
    let mut tokens = sampler.alias_mut(&mut at)?;
    let mut logprobs = sampler.zeros::<f32>(shape.batch)?;
    let out = Output::aliased(&mut tokens).with_logprobs(&mut logprobs);
    sampler.race_from_logits(shape, Logits::F32(&logits), &rows, out)?;
    let (tokens, logprobs) = (sampler.download(&tokens)?, sampler.download(&logprobs)?);

    // A check for this example only: the CPU oracle on a copy of the same logits. The race's
    // noise is the same on both, so the tokens agree unless two scores tie within float32 rounding.
    let host = sampler.download(&logits)?;
    let mut oracle = vec![0u32; shape.batch];
    CpuBackend.race_from_logits(shape, Logits::F32(&host), &params.to_vec(), Output::new(&mut oracle))?;

    println!("backend: {}", sampler.describe());
    for (r, p) in params.iter().enumerate() {
        println!(
            "row {r}: temperature {:<4} seed {:<3} offset {} -> token {:>3} (log-probability {:.4}; CPU oracle: {})",
            p.temperature,
            p.seed(),
            p.offset(),
            tokens[r],
            logprobs[r],
            oracle[r]
        );
    }
    Ok(())
}
