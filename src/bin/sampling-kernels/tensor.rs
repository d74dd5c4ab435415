//! Reads one tensor of rank 1 (one row) or 2 (batch x vocab) from a `.npy` or `.safetensors`
//! file. Every error names the file (and the tensor), so a user with several inputs knows which
//! one to fix.

use anyhow::{anyhow, bail, ensure, Context, Result};
use half::{bf16, f16};
use std::path::Path;

/// A tensor's elements as the file stores them, row-major.
pub enum Values {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    F64(Vec<f64>),
}

impl Values {
    pub fn dtype(&self) -> &'static str {
        match self {
            Values::F32(_) => "f32",
            Values::F16(_) => "f16",
            Values::Bf16(_) => "bf16",
            Values::F64(_) => "f64",
        }
    }
}

pub struct Tensor {
    pub values: Values,
    pub batch: usize,
    pub vocab: usize,
    /// The file, and the tensor's name in a safetensors file, for error messages.
    pub source: String,
}

/// Loads `path`; `name` selects the tensor of a safetensors file that holds several.
pub fn load(path: &Path, name: Option<&str>) -> Result<Tensor> {
    let file = path.display().to_string();
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or_default();
    if !matches!(extension, "npy" | "safetensors") {
        bail!("{file}: unknown extension `{extension}`; expected .npy or .safetensors");
    }
    let bytes = std::fs::read(path).with_context(|| format!("{file}: cannot read"))?;
    match (extension, name) {
        ("npy", None) => load_npy(file, &bytes),
        ("npy", Some(name)) => bail!("{file}: --tensor {name} selects a tensor of a .safetensors file, not a .npy"),
        _ => load_safetensors(file, &bytes, name),
    }
}

fn load_npy(source: String, bytes: &[u8]) -> Result<Tensor> {
    let npy = npyz::NpyFile::new(bytes).with_context(|| format!("{source}: not a valid .npy file"))?;
    ensure!(npy.order() == npyz::Order::C, "{source}: Fortran order; save a C-ordered array (np.ascontiguousarray)");
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let (batch, vocab) = rows(&source, &shape)?;
    let dtype = npy.dtype();
    let float_bytes = match &dtype {
        npyz::DType::Plain(t) if t.type_char() == npyz::TypeChar::Float => t.size_field(),
        _ => 0,
    };
    let read = |e: std::io::Error| anyhow!("{source}: reading the data: {e}");
    let values = match float_bytes {
        2 => Values::F16(npy.into_vec().map_err(read)?),
        4 => Values::F32(npy.into_vec().map_err(read)?),
        8 => Values::F64(npy.into_vec().map_err(read)?),
        // numpy has no bfloat16; safetensors does.
        _ => bail!("{source}: dtype {} is not f16, f32 or f64 (bf16 needs a .safetensors file)", dtype.descr()),
    };
    Ok(Tensor { values, batch, vocab, source })
}

fn load_safetensors(file: String, bytes: &[u8], name: Option<&str>) -> Result<Tensor> {
    let st = safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| anyhow!("{file}: not a valid .safetensors file: {e}"))?;
    let mut names = st.names();
    names.sort_unstable();
    let listed = names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    let name = match (name, names.as_slice()) {
        (Some(name), _) => name,
        (None, [only]) => only,
        (None, _) => bail!("{file}: holds {} tensors ({listed}); choose one with --tensor", names.len()),
    };
    let view = st.tensor(name).map_err(|_| anyhow!("{file}: no tensor `{name}`; it holds {listed}"))?;
    let source = format!("{file}, tensor `{name}`");
    let (batch, vocab) = rows(&source, view.shape())?;
    let values = match view.dtype() {
        safetensors::Dtype::F32 => Values::F32(little_endian(view.data())),
        safetensors::Dtype::F16 => Values::F16(little_endian(view.data())),
        safetensors::Dtype::BF16 => Values::Bf16(little_endian(view.data())),
        safetensors::Dtype::F64 => Values::F64(little_endian(view.data())),
        other => bail!("{source}: dtype {other:?} is not f32, f16, bf16 or f64"),
    };
    Ok(Tensor { values, batch, vocab, source })
}

/// Safetensors data is little-endian and need not be aligned for `T`, so it is copied out.
fn little_endian<T: bytemuck::Pod>(bytes: &[u8]) -> Vec<T> {
    bytes.chunks_exact(size_of::<T>()).map(bytemuck::pod_read_unaligned).collect()
}

/// `(batch, vocab)` of a rank-1 or rank-2 shape with no empty dimension.
fn rows(source: &str, shape: &[usize]) -> Result<(usize, usize)> {
    let (batch, vocab) = match *shape {
        [vocab] => (1, vocab),
        [batch, vocab] => (batch, vocab),
        _ => bail!("{source}: rank {} (shape {shape:?}); expected 1 (one row) or 2 (batch x vocab)", shape.len()),
    };
    ensure!(batch > 0 && vocab > 0, "{source}: shape {shape:?} has no elements");
    Ok((batch, vocab))
}
