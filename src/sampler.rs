//! The per-step API for engines: one call per decode step, any mix of greedy, sampled, filtered
//! and seeded rows in two launches, the row records' device buffer made once and rewritten in
//! place.

use crate::backend::{Backend, Logits, Output};
use crate::error::{Error, Result};
use crate::planner::NormalizedParams;
use crate::types::{RowParams, Shape};

/// SGLang's seed for requests that give none, in deterministic inference.
pub const DEFAULT_SEED: u64 = 42;

/// Samples one decode step at a time on a backend, routing each row by its own parameters.
pub struct Sampler<'b, B: Backend> {
    backend: &'b B,
    rows: B::Buffer<RowParams>,
    capacity: usize,
}

impl<'b, B: Backend> Sampler<'b, B> {
    /// A sampler for batches of up to `max_batch` rows (its row buffer is made here, once).
    pub fn new(backend: &'b B, max_batch: usize) -> Result<Self> {
        let rows = backend.zeros::<RowParams>(max_batch)?;
        Ok(Sampler { backend, rows, capacity: max_batch })
    }

    /// One decode step: row `r` of `logits` is sampled as `rows[r]` asks (see
    /// [`Backend::sample`]). Tokens, and on request log-probabilities and statuses, go to `out`
    /// on the device; nothing waits for the host.
    pub fn step(&mut self, shape: Shape, logits: Logits<'_, B>, rows: &[RowParams], out: Output<'_, B>) -> Result<()> {
        if rows.len() != shape.batch {
            return Err(Error::Shape(format!("{} row records for a batch of {}", rows.len(), shape.batch)));
        }
        if rows.len() > self.capacity {
            return Err(Error::Shape(format!("batch {} exceeds the sampler's {} rows", rows.len(), self.capacity)));
        }
        self.backend.write(&mut self.rows, rows)?;
        self.backend.sample(shape, logits, &self.rows, out)
    }
}

impl RowParams {
    /// The row record of a request with SGLang-normalized parameters at decode step (position)
    /// `step`: greedy when SGLang would be (`top_k = 1`); SGLang's seeded race under
    /// deterministic inference (seed 42 when the request gives none); else the Philox race keyed
    /// by the request's seed and step. Either race runs inside the request's top-k / top-p /
    /// min-p set, in SGLang's joint order. (SGLang's deterministic filtered path hashes a token's
    /// rank in the sorted set; this crate hashes its vocabulary id, see [`crate::murmur`].)
    pub fn from_request(params: &NormalizedParams, step: u64, deterministic: bool) -> Result<Self> {
        let seed = params.seed().unwrap_or(if deterministic { DEFAULT_SEED } else { 0 });
        if params.top_k() == 1 {
            return Ok(if deterministic { RowParams::seeded(0.0, seed, step) } else { RowParams::greedy() });
        }
        let temperature = params.temperature() as f32;
        let row = if deterministic {
            RowParams::seeded(temperature, seed, step)
        } else {
            RowParams::new(temperature, seed, step)
        };
        let top_k = match params.top_k() {
            crate::planner::TOP_K_ALL => u32::MAX,
            k => u32::try_from(k).unwrap_or(u32::MAX),
        };
        let row = row.with_top_k(top_k).with_top_p(params.top_p() as f32).with_min_p(params.min_p() as f32);
        <RowParams as crate::types::Element>::validate(std::slice::from_ref(&row))?;
        Ok(row)
    }
}
