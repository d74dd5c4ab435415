//! The oracle: what every backend computes, written as plain float64 loops for obviousness, not
//! speed (SEMANTICS.md in prose). [`crate::CpuBackend`] samples with these functions and every
//! GPU result is tested against them. Nothing here depends on a backend.

pub mod filters;
pub mod logprobs;
pub mod murmur;
pub mod philox;
pub mod race;
pub mod softmax;
pub mod stage;

pub use race::{argmax, race_scores, seeded_scores};
pub use softmax::{sglang_logprobs, softmax, softmax_f32};
