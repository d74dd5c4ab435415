//! The per-step API for engines: one call per decode step, any mix of greedy, sampled and
//! seeded rows in one launch, the row records' device buffer made once and rewritten in place.

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
    /// `step`: greedy when SGLang would be (`top_k = 1`), SGLang's seeded race under
    /// deterministic inference (seed 42 when the request gives none), else the Philox race keyed
    /// by the request's seed and step. Top-k, top-p and min-p filters are not implemented yet:
    /// a request that asks for one is refused, not sampled without it.
    pub fn from_request(params: &NormalizedParams, step: u64, deterministic: bool) -> Result<Self> {
        let refuse = |field: &'static str, value: String| Error::Param {
            row: 0,
            field,
            value,
            rule: "filters (top-k, top-p, min-p) are not implemented yet",
        };
        let greedy = params.top_k() == 1;
        if !greedy {
            if params.top_k() != crate::planner::TOP_K_ALL {
                return Err(refuse("top_k", params.top_k().to_string()));
            }
            if params.top_p() != 1.0 {
                return Err(refuse("top_p", params.top_p().to_string()));
            }
            if params.min_p() > 0.0 {
                return Err(refuse("min_p", params.min_p().to_string()));
            }
        }
        let temperature = if greedy { 0.0 } else { params.temperature() as f32 };
        Ok(if deterministic {
            RowParams::seeded(temperature, params.seed().unwrap_or(DEFAULT_SEED), step)
        } else {
            RowParams::new(temperature, params.seed().unwrap_or(0), step)
        })
    }
}
