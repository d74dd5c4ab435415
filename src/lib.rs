//! # sampling-kernels
//!
//! Turns a batch of LLM logits into next tokens on the GPU, exactly, with one read of the
//! logits. Every kernel is written once in a typed IR (`xtask/`) and printed as WGSL (run by
//! [`WgpuBackend`]) and CUDA (run by `CudaBackend` through NVRTC); [`CpuBackend`] is the plain
//! float64 oracle every GPU result is tested against.
//!
//! Sampling is the exponential race: the token is `argmax_j l_j / T + G_j` with Gumbel noise
//! `G` from Philox4x32-10 keyed by the request's (seed, offset), never by its row, so every
//! backend draws the same numbers and a token does not depend on its batch. See [`reference::philox`].
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

/// The README's Rust blocks, compiled by `cargo test --doc`.
#[cfg(all(doctest, feature = "wgpu"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub mod backend;
pub mod error;
#[rustfmt::skip]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod generated;
pub mod kernels;
pub mod reference;
pub mod sampler;
pub mod sglang;
pub mod types;

pub use backend::cpu::CpuBackend;
#[cfg(feature = "cuda")]
pub use backend::cuda::{CudaAlias, CudaAliasMut, CudaBackend, CudaBuffer};
pub use backend::logprobs::{LogprobsOutput, LogprobsRequest, MAX_TOP_LOGPROBS};
pub use backend::stage::{LogitsStage, TokenLists, ValuedLists};
pub use backend::timing::{Clock, LaunchTime};
#[cfg(feature = "wgpu")]
pub use backend::wgpu::{WgpuBackend, WgpuBuffer};
pub use backend::{Backend, Diagnostics, Input, LogProbs, Logits, Output, RowLists, SeededMode};
/// The cudarc this crate was built against, so an engine shares its stream and slice types.
#[cfg(feature = "cuda")]
pub use cudarc;
pub use error::{Error, Result};
pub use sampler::Sampler;
pub use types::{
    Definitions, Element, FilterPath, Filters, LogprobsMode, Order as FilterOrder, RepetitionScope, RowMode, RowParams,
    SeededHash, Shape, StageRow, GREEDY_EPS,
};
/// The wgpu this crate was built against, so an engine shares its device types.
#[cfg(feature = "wgpu")]
pub use wgpu;
