//! # sampling-kernels
//!
//! Turns a batch of LLM logits into next tokens on the GPU, exactly, with one read of the
//! logits. Every kernel is written once in a typed IR (`xtask/`) and printed as WGSL (run by
//! [`WgpuBackend`]) and CUDA (run by `CudaBackend` through NVRTC); [`CpuBackend`] is the plain
//! float64 oracle every GPU result is tested against.
//!
//! Sampling is the exponential race: the token is `argmax_j l_j / T + G_j` with Gumbel noise
//! `G` from Philox4x32-10 keyed by the request's (seed, offset), never by its row, so every
//! backend draws the same numbers and a token does not depend on its batch. See [`philox`].
//!
//! ```
//! use sampling_kernels::{Backend, CpuBackend, Logits, Output, RowParams, Shape};
//! let cpu = CpuBackend;
//! let logits = cpu.upload(&[0.5f32, 2.0, -1.0, 2.0]).unwrap();
//! let rows = cpu.upload(&[RowParams::new(0.7, 42, 0)]).unwrap();
//! let mut tokens = cpu.zeros::<u32>(1).unwrap();
//! let out = Output::new(&mut tokens);
//! cpu.race_from_logits(Shape::dense(1, 4), Logits::F32(&logits), &rows, out).unwrap();
//! assert!(tokens[0] < 4);
//! ```

#![warn(missing_docs)]

pub mod backend;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda_backend;
pub mod error;
pub mod filters;
#[rustfmt::skip]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod generated;
mod job;
pub mod kernels;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod launch;
pub mod murmur;
pub mod philox;
pub mod planner;
pub mod sampler;
pub mod timing;
pub mod types;
#[cfg(feature = "wgpu")]
pub mod wgpu_backend;

pub use backend::{Backend, Input, LogProbs, Logits, Output, RowLists, SeededMode};
pub use cpu::CpuBackend;
#[cfg(feature = "cuda")]
pub use cuda_backend::{CudaBackend, CudaBuffer};
/// The cudarc this crate was built against, so an engine shares its stream and slice types.
#[cfg(feature = "cuda")]
pub use cudarc;
pub use error::{Error, Result};
pub use filters::{Filters, Order as FilterOrder};
pub use sampler::Sampler;
pub use timing::{Clock, LaunchTime};
pub use types::{Element, RowMode, RowParams, Shape, GREEDY_EPS};
/// The wgpu this crate was built against, so an engine shares its device types.
#[cfg(feature = "wgpu")]
pub use wgpu;
#[cfg(feature = "wgpu")]
pub use wgpu_backend::{WgpuBackend, WgpuBuffer};
