//! Writes the small input files of `examples/data/` that the README and `tests/cli.rs` sample:
//!
//! - `logits_small.npy`: 4 x 32 float32 logits, each a multiple of 1/16 below 8 in magnitude, so
//!   they are exact in bfloat16 and the f32 and bf16 copies sample the same tokens;
//! - `logits_small.safetensors`: the same as tensor `logits` (f32) and `logits_bf16` (bf16).
//!
//! The seeded sampler's golden vectors are `tests/data/`'s, made by their own Python script.
//!
//! `cargo run --features cli --example make_data`

use half::bf16;
use npyz::WriterBuilder;
use safetensors::{tensor::TensorView, Dtype};
use std::path::Path;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const BATCH: usize = 4;
const VOCAB: usize = 32;

/// Row 0 broad, row 1 with one clear favourite, row 2 two-peaked, row 3 nearly flat: the
/// histogram test then covers both concentrated and spread-out distributions.
fn logits() -> Vec<f32> {
    let mut state = 0x9e37_79b9u32;
    let mut noise = move || {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        ((state >> 24) as f32 - 128.0) / 32.0 // in [-4, 4)
    };
    (0..BATCH * VOCAB)
        .map(|i| {
            let (row, col) = (i / VOCAB, i % VOCAB);
            let x = match row {
                0 => noise(),
                1 => noise() / 2.0 + if col == 7 { 3.5 } else { 0.0 },
                2 => noise() / 2.0 + if col == 3 || col == 20 { 2.0 } else { 0.0 },
                _ => noise() / 8.0,
            };
            (x * 16.0).round() / 16.0
        })
        .collect()
}

fn write_npy<T: npyz::AutoSerialize + Copy>(path: &Path, shape: &[u64], data: &[T]) -> Result<()> {
    let mut writer =
        npyz::WriteOptions::new().default_dtype().shape(shape).writer(std::fs::File::create(path)?).begin_nd()?;
    writer.extend(data.iter().copied())?;
    writer.finish()?;
    Ok(())
}

fn main() -> Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data");
    let logits = logits();
    write_npy(&dir.join("logits_small.npy"), &[BATCH as u64, VOCAB as u64], &logits)?;

    let narrow: Vec<bf16> = logits.iter().map(|&x| bf16::from_f32(x)).collect();
    let shape = vec![BATCH, VOCAB];
    let tensors = [
        ("logits", TensorView::new(Dtype::F32, shape.clone(), bytemuck::cast_slice(&logits))?),
        ("logits_bf16", TensorView::new(Dtype::BF16, shape, bytemuck::cast_slice(&narrow))?),
    ];
    safetensors::serialize_to_file(tensors, None, &dir.join("logits_small.safetensors"))?;

    println!("wrote {}", dir.display());
    Ok(())
}
