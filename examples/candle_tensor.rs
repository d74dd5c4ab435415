//! Logits held in a candle tensor, sampled where they are. On candle's CUDA backend
//! (`--features candle-cuda`, with a GPU) the sampler reads the tensor's own storage in place, on
//! the tensor's own stream: no copy of the logits and no wait on the host until the tokens are
//! read. On the CPU, candle owns its storage, so the data is copied out to the CPU backend.
//!
//! `cargo run --release --example candle_tensor --features candle` (CPU)
//! `cargo run --release --example candle_tensor --features candle-cuda` (and CUDA where present;
//! says "not run" otherwise)

use candle_core::{DType, Device, Tensor};
use sampling_kernels::{Backend, CpuBackend, Logits, Output, RowParams, Shape};

/// A model's output for 3 requests over a 50-token vocabulary, in bfloat16 as models emit it.
const BATCH: usize = 3;
const VOCAB: usize = 50;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let logits = (Tensor::arange(0f32, (BATCH * VOCAB) as f32, &Device::Cpu)?.reshape((BATCH, VOCAB))? * 0.37)?
        .sin()?
        .affine(3.0, 0.0)?
        .to_dtype(DType::BF16)?;
    let shape = Shape::dense(BATCH, VOCAB);
    let params: Vec<RowParams> = (0..BATCH as u64).map(|r| RowParams::new(0.8, 1234 + r, 0)).collect();

    // Row-major data of the whole batch; `contiguous` first in case the tensor is a strided view.
    let data = logits.contiguous()?.flatten_all()?.to_vec1::<half::bf16>()?;
    let mut tokens = vec![0u32; BATCH];
    let mut logprobs = vec![0f32; BATCH];
    let out = Output::new(&mut tokens).with_logprobs(&mut logprobs);
    CpuBackend.race_from_logits(shape, Logits::Bf16(&data), &params, out)?;
    println!("backend: {}", CpuBackend.describe());
    for r in 0..BATCH {
        println!("row {r}: token {} (log-probability {:.4})", tokens[r], logprobs[r]);
    }

    #[cfg(feature = "candle-cuda")]
    in_place::sample(&logits, shape, &params, &tokens)?;
    #[cfg(not(feature = "candle-cuda"))]
    println!("CUDA: not run (build with --features candle-cuda)");
    Ok(())
}

#[cfg(feature = "candle-cuda")]
mod in_place {
    use super::*;
    use sampling_kernels::backend::cuda;
    use sampling_kernels::CudaBackend;

    /// Samples `logits` on the GPU from the CUDA tensor's storage, and checks the tokens against
    /// the CPU's (`expected`): the race's noise is the same on every backend.
    pub fn sample(
        logits: &Tensor,
        shape: Shape,
        params: &[RowParams],
        expected: &[u32],
    ) -> Result<(), Box<dyn std::error::Error>> {
        // cudarc panics on its first driver call when libcuda cannot be loaded, so ask first.
        if !cuda::libraries_present() {
            println!("CUDA: not run (no CUDA driver or NVRTC on the library path)");
            return Ok(());
        }
        let device = match Device::new_cuda(0) {
            Ok(device) => device,
            Err(e) => {
                println!("CUDA: not run (no CUDA device: {e})");
                return Ok(());
            }
        };
        // The engine's model would have written the logits there; this copy stands in for it.
        let logits = logits.to_device(&device)?;

        let (storage, layout) = logits.storage_and_layout();
        let candle_core::Storage::Cuda(storage) = &*storage else {
            return Err("the tensor is not on a CUDA device".into());
        };
        // A contiguous tensor's rows start at its layout's offset into the storage.
        if !layout.is_contiguous() {
            return Err("a strided tensor: call `contiguous` first".into());
        }
        let start = layout.start_offset();
        let view = storage.as_cuda_slice::<half::bf16>()?.slice(start..start + shape.elements());

        // On the tensor's own stream, so the launches follow the work that wrote the logits.
        // An engine makes the backend and its buffers once, not per step.
        let backend = CudaBackend::from_stream(storage.device.cuda_stream())?;
        let rows = backend.upload(params)?;
        let mut tokens = backend.zeros::<u32>(shape.batch)?;
        let logits = backend.alias(&view)?;
        backend.race_from_logits(shape, Logits::Bf16(&*logits), &rows, Output::new(&mut tokens))?;
        let tokens = backend.download(&tokens)?;

        println!("backend: {} (the tensor's storage, in place)", backend.describe());
        for (r, token) in tokens.iter().enumerate() {
            println!("row {r}: token {token} (CPU: {})", expected[r]);
        }
        if tokens != expected {
            return Err("the CUDA tokens differ from the CPU's".into());
        }
        Ok(())
    }
}
