//! Logits held in a candle tensor on the CPU, sampled by the CPU backend after copying the
//! tensor's data out (candle owns its storage, so there is nothing to wrap in place). A candle
//! tensor on a CUDA device would instead go through its `CudaSlice` and `CudaBackend`.
//!
//! `cargo run --release --example candle_tensor --features candle`

use candle_core::{DType, Device, Tensor};
use sampling_kernels::{Backend, CpuBackend, Logits, Output, RowParams, Shape};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A model's output for 3 requests over a 50-token vocabulary, in bfloat16 as models emit it.
    let (batch, vocab) = (3, 50);
    let logits = (Tensor::arange(0f32, (batch * vocab) as f32, &Device::Cpu)?.reshape((batch, vocab))? * 0.37)?
        .sin()?
        .affine(3.0, 0.0)?
        .to_dtype(DType::BF16)?;

    // Row-major data of the whole batch; `contiguous` first in case the tensor is a strided view.
    let data = logits.contiguous()?.flatten_all()?.to_vec1::<half::bf16>()?;
    let shape = Shape::dense(batch, vocab);
    let params: Vec<RowParams> = (0..batch as u64).map(|r| RowParams::new(0.8, 1234 + r, 0)).collect();
    let mut tokens = vec![0u32; batch];
    let mut logprobs = vec![0f32; batch];
    let out = Output::new(&mut tokens).with_logprobs(&mut logprobs);
    CpuBackend.race_from_logits(shape, Logits::Bf16(&data), &params, out)?;

    println!("backend: {}", CpuBackend.describe());
    for r in 0..batch {
        println!("row {r}: token {} (log-probability {:.4})", tokens[r], logprobs[r]);
    }
    Ok(())
}
