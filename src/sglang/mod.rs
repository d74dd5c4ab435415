//! SGLang as this crate reproduces it: its sampling-parameter rules and batch routing, exactly,
//! next to this crate's per-row routing.
//!
//! SGLang v0.5.20 sends a decode batch to its Gumbel fast path only when no request in it asks
//! for top-k, top-p or min-p, and the answer for a request depends on its endpoint, the model's
//! `generation_config.json` and server flags as much as on its body. This module answers, without
//! a server: which parameters a request really runs with ([`ServerDefaults::effective`]), which
//! path SGLang takes for a batch ([`path_for_batch`]) and over a running trace ([`Simulation`]),
//! and what routing each row by its own parameters ([`row_path`]) would save. The
//! `sampling-audit` binary runs all of it on request and trace files.
//!
//! Pipeline for one request: body → [`SamplingParams`] → [`ServerDefaults::effective`] →
//! [`SamplingParams::normalize`] → [`NormalizedParams`] → [`Path`].

mod effective;
mod json;
mod params;
mod route;
mod running;

pub use effective::{Endpoint, GenerationConfig, Request, SamplingDefaults, ServerDefaults};
pub use json::FieldError;
pub use params::{NormalizedParams, ParamError, SamplingParams, DEFAULTS, SAMPLING_EPS, TOP_K_ALL};
pub use route::{path_for_batch, row_path, BatchFlags, EmptyBatch, Path};
pub use running::{
    BatchDependence, RunningBatch, Share, Shares, Simulation, StepRecord, TraceError, TraceErrorKind, TraceStep,
};
