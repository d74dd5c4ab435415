//! Log-probabilities as engines return them, beside a step's tokens: per row the top-n values
//! with their ids, the values of requested ids, and the sampled token's value and rank, under a
//! [`LogprobsMode`] (docs/logprobs.md). The request's counts and ids are on the host, where they
//! are checked (an id out of the vocabulary is refused, not clipped: an engine that asked for it
//! expects its value); the results go to the engine's own buffers, written in place, so a step
//! allocates nothing for them. [`crate::Sampler::step_with_logprobs`] takes them; the oracle is
//! [`crate::reference::logprobs`].

use crate::backend::{need, Backend};
use crate::error::{Error, Result};
use crate::types::{LogprobsMode, Shape, ONE_READ_TOP_K};
use std::ops::Range;

/// The most top log-probabilities a row may ask for: the largest top-k the device backends'
/// one-read path selects ([`ONE_READ_TOP_K`], 256), so their kernels can find the top-n with the
/// selection they have, in the read that samples. It covers vLLM's default `max_logprobs` (20)
/// and the OpenAI API's cap on `top_logprobs` (20); an engine that wants more (vLLM's -1, the
/// whole row) reads the values of every id instead.
pub const MAX_TOP_LOGPROBS: usize = ONE_READ_TOP_K;

/// One call's log-probability request, on the host: the mode, each row's top-n count (the rows'
/// slots are `n_max` apart in the output) and, optionally, ids whose values each row wants, in
/// CSR form (row `r`'s ids are `ids[offsets[r]..offsets[r + 1]]`).
#[derive(Clone, Copy, Debug)]
pub struct LogprobsRequest<'a> {
    mode: LogprobsMode,
    n_max: usize,
    top_n: &'a [u32],
    offsets: &'a [u32],
    ids: &'a [u32],
}

impl<'a> LogprobsRequest<'a> {
    /// A request in `mode` where row `r` wants its `top_n[r]` largest values (0: none), each at
    /// most `n_max`, the output's stride, at most [`MAX_TOP_LOGPROBS`] (an engine keeps its
    /// buffers and `n_max` from step to step while the counts change).
    pub fn new(mode: LogprobsMode, n_max: usize, top_n: &'a [u32]) -> Self {
        LogprobsRequest { mode, n_max, top_n, offsets: &[], ids: &[] }
    }
    /// Also the values of `ids`: row `r`'s are `ids[offsets[r]..offsets[r + 1]]` (`batch + 1`
    /// non-decreasing offsets, each id below the vocabulary), written in the same places of the
    /// requested values' buffer.
    pub fn with_ids(self, offsets: &'a [u32], ids: &'a [u32]) -> Self {
        LogprobsRequest { offsets, ids, ..self }
    }
    /// The mode.
    pub fn mode(&self) -> LogprobsMode {
        self.mode
    }
    /// The output's stride: row `r`'s top values are at `r * n_max..`.
    pub fn n_max(&self) -> usize {
        self.n_max
    }
    /// How many top values row `r` wants; the request must have been validated for its batch.
    pub fn top_n(&self, r: usize) -> usize {
        self.top_n[r] as usize
    }
    /// Where row `r`'s requested ids (and their values) are; empty without ids.
    pub fn id_range(&self, r: usize) -> Range<usize> {
        match self.offsets {
            [] => 0..0,
            o => o[r] as usize..o[r + 1] as usize,
        }
    }
    /// The requested ids, all rows'.
    pub fn ids(&self) -> &'a [u32] {
        self.ids
    }
    /// Where the ids of a batch of `batch` rows end (0 without ids).
    fn ids_end(&self, batch: usize) -> usize {
        self.offsets.get(batch).map_or(0, |&o| o as usize)
    }

    /// The refusal of a backend that does not compute log-probabilities.
    pub(crate) fn unsupported(&self) -> Error {
        Error::UnsupportedLogprobs { mode: self.mode.name() }
    }

    /// Checks the counts, the ids and every output buffer's length against `shape`.
    pub fn validate<B: Backend + ?Sized>(&self, shape: Shape, out: &LogprobsOutput<'_, B>) -> Result<()> {
        let batch = shape.batch;
        if self.top_n.len() != batch {
            return Err(Error::Shape(format!("{} top-logprob counts for a batch of {batch}", self.top_n.len())));
        }
        if self.n_max > MAX_TOP_LOGPROBS {
            return Err(Error::Logprobs {
                field: "n_max",
                value: self.n_max,
                rule: "must be at most MAX_TOP_LOGPROBS",
            });
        }
        let param = |row: usize, field: &'static str, value: u32, rule: &'static str| {
            Err(Error::Param { row, field, value: value.to_string(), rule })
        };
        for (row, &n) in self.top_n.iter().enumerate() {
            if n as usize > self.n_max.min(shape.vocab) {
                return param(row, "top_logprobs", n, "must be at most the request's n_max and the vocabulary");
            }
        }
        if !self.offsets.is_empty() || !self.ids.is_empty() {
            need("logprob id offsets", self.offsets.len(), batch + 1)?;
            for row in 0..batch {
                let (start, end) = (self.offsets[row], self.offsets[row + 1]);
                if start > end || end as usize > self.ids.len() {
                    return param(row, "logprob_id_offsets", end, "must not decrease nor pass the ids' end");
                }
                if let Some(&id) = self.ids[start as usize..end as usize].iter().find(|&&id| id as usize >= shape.vocab)
                {
                    return param(row, "logprob_ids", id, "must be below the vocabulary");
                }
            }
        }
        need("top_logprobs", B::len(out.top_values), batch * self.n_max)?;
        need("top_logprob_ids", B::len(out.top_ids), batch * self.n_max)?;
        need("sampled_logprob", B::len(out.sampled), batch)?;
        need("sampled_rank", B::len(out.rank), batch)?;
        need("requested_logprobs", out.requested.as_ref().map_or(0, |b| B::len(*b)), self.ids_end(batch))
    }
}

/// Where a call's log-probabilities go, the engine's buffers written in place: row `r`'s top
/// values and ids at `r * n_max..r * n_max + top_n[r]` (largest first, ties to the lower id; the
/// slots after them are not written), the requested ids' values where the ids are, and per row
/// the sampled token's value and rank (1 = the largest; vLLM's count of values at least its
/// value). Built with [`LogprobsOutput::new`] and [`with_requested`](LogprobsOutput::with_requested).
pub struct LogprobsOutput<'a, B: Backend + ?Sized> {
    pub(crate) top_values: &'a mut B::Buffer<f32>,
    pub(crate) top_ids: &'a mut B::Buffer<u32>,
    pub(crate) sampled: &'a mut B::Buffer<f32>,
    pub(crate) rank: &'a mut B::Buffer<u32>,
    pub(crate) requested: Option<&'a mut B::Buffer<f32>>,
}

impl<'a, B: Backend + ?Sized> LogprobsOutput<'a, B> {
    /// The top values (`[batch * n_max]`), their ids (`[batch * n_max]`), and per row the
    /// sampled token's value and rank (`[batch]` each).
    pub fn new(
        top_values: &'a mut B::Buffer<f32>,
        top_ids: &'a mut B::Buffer<u32>,
        sampled: &'a mut B::Buffer<f32>,
        rank: &'a mut B::Buffer<u32>,
    ) -> Self {
        LogprobsOutput { top_values, top_ids, sampled, rank, requested: None }
    }
    /// Also the requested ids' values, one per id (needed where the request has ids).
    pub fn with_requested(self, values: &'a mut B::Buffer<f32>) -> Self {
        LogprobsOutput { requested: Some(values), ..self }
    }
}
