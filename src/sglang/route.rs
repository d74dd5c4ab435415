//! Which sampler path a batch takes: SGLang's rule for a whole batch, and this crate's per row.
//!
//! SGLang v0.5.20 reduces a batch to four flags (`SamplingBatchInfo.from_schedule_batch`) and
//! picks one path for every row from them, so one filtered or greedy request moves all the others
//! off the Gumbel fast path. Routing each row by its own flags is the same rule applied to a batch
//! of one, which is why both go through [`BatchFlags`].

use std::fmt;

use serde::Serialize;

use super::params::{NormalizedParams, TOP_K_ALL};

/// A sampler path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Path {
    /// Plain argmax: every row greedy (`top_k <= 1`).
    Greedy,
    /// The exponential race with no filter: SGLang v0.5.20's new fast path.
    Gumbel,
    /// Seeded multinomial, which `--enable-deterministic-inference` puts in place of Gumbel.
    Deterministic,
    /// top-k / top-p / min-p filtering before the draw: the path the release left untouched.
    Filtered,
}

impl Path {
    /// Whether the path skips the filters: Greedy or Gumbel.
    pub fn is_fast(self) -> bool {
        matches!(self, Path::Greedy | Path::Gumbel)
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Path::Greedy => "greedy",
            Path::Gumbel => "gumbel",
            Path::Deterministic => "deterministic",
            Path::Filtered => "filtered",
        })
    }
}

/// A batch had no rows; SGLang raises on it too, since `all([])` would call it greedy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a batch needs at least one request")]
pub struct EmptyBatch;

/// SGLang's batch flags, the only thing its sampler routes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchFlags {
    /// Every row has `top_k <= 1`.
    pub is_all_greedy: bool,
    /// Some row has `top_p != 1.0`.
    pub need_top_p: bool,
    /// Some row has `top_k != TOP_K_ALL`; a greedy row (`top_k == 1`) sets it.
    pub need_top_k: bool,
    /// Some row has `min_p > 0`.
    pub need_min_p: bool,
}

impl BatchFlags {
    /// The flags of a batch holding only `row`.
    pub fn of_row(row: &NormalizedParams) -> Self {
        BatchFlags {
            is_all_greedy: row.top_k() <= 1,
            need_top_p: row.top_p() != 1.0,
            need_top_k: row.top_k() != TOP_K_ALL,
            need_min_p: row.min_p() > 0.0,
        }
    }

    /// The flags of `rows` together: `all()` for greedy, `any()` for the filters.
    pub fn of_batch(rows: &[NormalizedParams]) -> Result<Self, EmptyBatch> {
        rows.iter().map(BatchFlags::of_row).reduce(BatchFlags::merge).ok_or(EmptyBatch)
    }

    /// The flags after two batches join, as `SamplingBatchInfo.merge_batch` does.
    pub fn merge(self, other: Self) -> Self {
        BatchFlags {
            is_all_greedy: self.is_all_greedy && other.is_all_greedy,
            need_top_p: self.need_top_p || other.need_top_p,
            need_top_k: self.need_top_k || other.need_top_k,
            need_min_p: self.need_min_p || other.need_min_p,
        }
    }

    /// The path these flags select (`Sampler.forward` in v0.5.20).
    pub fn path(self, deterministic: bool) -> Path {
        if self.is_all_greedy {
            Path::Greedy
        } else if self.need_top_p || self.need_top_k || self.need_min_p {
            Path::Filtered
        } else if deterministic {
            Path::Deterministic
        } else {
            Path::Gumbel
        }
    }
}

/// SGLang's path for a decode batch of `rows`; `deterministic` is `--enable-deterministic-inference`.
pub fn path_for_batch(rows: &[NormalizedParams], deterministic: bool) -> Result<Path, EmptyBatch> {
    Ok(BatchFlags::of_batch(rows)?.path(deterministic))
}

/// This crate's path for one row: the row pays for its own filters and nobody else's.
pub fn row_path(row: &NormalizedParams, deterministic: bool) -> Path {
    BatchFlags::of_row(row).path(deterministic)
}
