//! `--top-logprobs`, `--logprob-ids` and `--logprobs-mode`: the log-probability request the
//! flags make, and the JSON each row prints. `--logprob-ids` reads a text file of one line per
//! row, each a comma-separated list of token ids (an empty line asks for none), or a single
//! line that every row asks for.

use anyhow::{bail, Context, Result};
use sampling_kernels::{Backend, LogprobsMode, LogprobsOutput, LogprobsRequest};
use serde::Serialize;
use std::path::Path;

/// The request of one run, on the host.
pub struct Asked {
    pub mode: LogprobsMode,
    top_n: Vec<u32>,
    offsets: Vec<u32>,
    ids: Vec<u32>,
}

impl Asked {
    /// The request of `batch` rows: `top_n` one count or one per row (none: 0), the ids file.
    pub fn new(mode: LogprobsMode, top_n: &[u32], ids: Option<&Path>, batch: usize) -> Result<Self> {
        let top_n = match top_n {
            [] => vec![0; batch],
            n => crate::args::per_row("--top-logprobs", n, batch)?,
        };
        let lists = match ids {
            Some(path) => read_ids(path, batch)?,
            None => vec![Vec::new(); batch],
        };
        let mut offsets = vec![0u32];
        for list in &lists {
            offsets.push(offsets[offsets.len() - 1] + list.len() as u32);
        }
        Ok(Asked { mode, top_n, offsets, ids: lists.concat() })
    }

    /// The output's stride: the largest count asked for.
    pub fn n_max(&self) -> usize {
        self.top_n.iter().copied().max().unwrap_or(0) as usize
    }

    pub fn request(&self) -> LogprobsRequest<'_> {
        LogprobsRequest::new(self.mode, self.n_max(), &self.top_n).with_ids(&self.offsets, &self.ids)
    }

    /// Row `r`'s JSON from the downloaded buffers.
    pub fn row(&self, r: usize, got: &Returned) -> RowLogprobs {
        let n_max = self.n_max();
        let top =
            (0..self.top_n[r] as usize).map(|i| Entry::new(got.top_ids[r * n_max + i], got.top_values[r * n_max + i]));
        let request = self.request();
        let requested = request.id_range(r).map(|k| Entry::new(self.ids[k], got.requested[k]));
        RowLogprobs {
            mode: self.mode.name(),
            sampled: finite(got.sampled[r]),
            rank: got.rank[r],
            top: top.collect(),
            requested: requested.collect(),
        }
    }
}

/// One line of ids per row, or one line for every row.
fn read_ids(path: &Path, batch: usize) -> Result<Vec<Vec<u32>>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let lines: Vec<&str> = text.lines().collect();
    let parse = |(n, line): (usize, &&str)| -> Result<Vec<u32>> {
        let ids = line.split(',').map(str::trim).filter(|s| !s.is_empty());
        ids.map(|id| {
            id.parse::<u32>().with_context(|| format!("{} line {}: `{id}` is not a token id", path.display(), n + 1))
        })
        .collect()
    };
    let lists = lines.iter().enumerate().map(parse).collect::<Result<Vec<_>>>()?;
    match lists.as_slice() {
        [one] => Ok(vec![one.clone(); batch]),
        _ if lists.len() == batch => Ok(lists),
        _ => bail!("{} has {} lines for {batch} rows; give one, or one per row", path.display(), lists.len()),
    }
}

/// The log-probability buffers of a run on a backend (at least one element each, as a device
/// buffer cannot be empty).
pub struct Buffers<B: Backend> {
    top_values: B::Buffer<f32>,
    top_ids: B::Buffer<u32>,
    sampled: B::Buffer<f32>,
    rank: B::Buffer<u32>,
    requested: B::Buffer<f32>,
}

impl<B: Backend> Buffers<B> {
    pub fn new(backend: &B, batch: usize, asked: &Asked) -> Result<Self> {
        let top = (batch * asked.n_max()).max(1);
        Ok(Buffers {
            top_values: backend.zeros(top)?,
            top_ids: backend.zeros(top)?,
            sampled: backend.zeros(batch)?,
            rank: backend.zeros(batch)?,
            requested: backend.zeros(asked.ids.len().max(1))?,
        })
    }

    pub fn output(&mut self) -> LogprobsOutput<'_, B> {
        LogprobsOutput::new(&mut self.top_values, &mut self.top_ids, &mut self.sampled, &mut self.rank)
            .with_requested(&mut self.requested)
    }

    pub fn download(&self, backend: &B) -> Result<Returned> {
        Ok(Returned {
            top_values: backend.download(&self.top_values)?,
            top_ids: backend.download(&self.top_ids)?,
            sampled: backend.download(&self.sampled)?,
            rank: backend.download(&self.rank)?,
            requested: backend.download(&self.requested)?,
        })
    }
}

/// The log-probability buffers of a run, downloaded.
pub struct Returned {
    pub top_values: Vec<f32>,
    pub top_ids: Vec<u32>,
    pub sampled: Vec<f32>,
    pub rank: Vec<u32>,
    pub requested: Vec<f32>,
}

/// A row's log-probabilities as printed: non-finite values as `null` (JSON has no infinities).
#[derive(Serialize)]
pub struct RowLogprobs {
    mode: &'static str,
    sampled: Option<f32>,
    rank: u32,
    top: Vec<Entry>,
    requested: Vec<Entry>,
}

#[derive(Serialize)]
struct Entry {
    token: u32,
    logprob: Option<f32>,
}

impl Entry {
    fn new(token: u32, value: f32) -> Self {
        Entry { token, logprob: finite(value) }
    }
}

fn finite(x: f32) -> Option<f32> {
    x.is_finite().then_some(x)
}
