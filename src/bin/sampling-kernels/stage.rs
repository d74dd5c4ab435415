//! `--logit-bias`, `--bitmask`, the penalties with `--token-ids`, and `--nan-as-finite`: the
//! logits stage an engine applies before it samples (docs/logits-stage.md), read from files so a
//! dump from an engine can be replayed. The rows' lists become the library's CSR layout.

use anyhow::{bail, ensure, Context, Result};
use sampling_kernels::{Backend, LogitsStage, StageRow};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// `--logit-bias`: OpenAI's `logit_bias`, token id to bias, for every row or one per row.
#[derive(Deserialize)]
#[serde(untagged)]
enum BiasFile {
    Each(Vec<BTreeMap<String, f32>>),
    All(BTreeMap<String, f32>),
}

/// `--token-ids`: a row's prompt and output token ids, and the ids banned while the output is
/// short of its minimum (min-tokens' stop ids).
#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
struct RowIds {
    #[serde(default)]
    prompt: Vec<u32>,
    #[serde(default)]
    output: Vec<u32>,
    #[serde(default)]
    banned: Vec<u32>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum IdsFile {
    Each(Vec<RowIds>),
    All(RowIds),
}

/// One run's stage on the host, in CSR lists (row `r`'s entries `offsets[r]..offsets[r + 1]`).
pub struct Stage {
    rows: Vec<StageRow>,
    bias: Option<(Vec<u32>, Vec<u32>, Vec<f32>)>,
    prompt: Option<(Vec<u32>, Vec<u32>)>,
    output: Option<(Vec<u32>, Vec<u32>, Vec<u32>)>,
    banned: Option<(Vec<u32>, Vec<u32>)>,
    bitmask: Option<Vec<u32>>,
    nan_as_finite: bool,
}

/// What the flags give for a batch, before it is read.
pub struct Flags<'a> {
    pub rows: Vec<StageRow>,
    pub bias: Option<&'a Path>,
    pub ids: Option<&'a Path>,
    pub bitmask: Option<&'a Path>,
    pub nan_as_finite: bool,
}

impl Stage {
    /// Whether it asks for more than the device kernels read with the logits (a bitmask, NaN as
    /// -1e5): the library's `LogitsStage::sparse_feature`, over host copies of the lists.
    pub fn sparse(&self) -> Result<bool> {
        Ok(self.upload(&sampling_kernels::CpuBackend)?.stage().sparse_feature().is_some())
    }

    /// The stage of `batch` rows of `vocab` columns, reading the files the flags name.
    pub fn new(flags: Flags<'_>, batch: usize, vocab: usize) -> Result<Self> {
        let bias = flags.bias.map(|p| read_bias(p, batch)).transpose()?;
        let ids = flags.ids.map(|p| read_ids(p, batch)).transpose()?;
        let lists = |pick: fn(&RowIds) -> &Vec<u32>| ids.as_ref().map(|rows| csr(rows.iter().map(|r| pick(r).clone())));
        let output = ids.as_ref().map(|rows| {
            let counted = rows.iter().map(|r| {
                let mut counts = BTreeMap::<u32, u32>::new();
                r.output.iter().for_each(|&id| *counts.entry(id).or_default() += 1);
                counts
            });
            let (offsets, ids, counts) = counted.fold((vec![0u32], vec![], vec![]), |(mut o, mut i, mut c), row| {
                i.extend(row.keys());
                c.extend(row.values());
                o.push(i.len() as u32);
                (o, i, c)
            });
            (offsets, ids, counts)
        });
        let bitmask = flags.bitmask.map(|p| read_bitmask(p, batch, vocab)).transpose()?;
        Ok(Stage {
            rows: flags.rows,
            bias,
            prompt: lists(|r| &r.prompt),
            output,
            banned: lists(|r| &r.banned),
            bitmask,
            nan_as_finite: flags.nan_as_finite,
        })
    }

    /// Uploads the lists to `backend`, for [`Uploaded::stage`].
    pub fn upload<B: Backend>(&self, backend: &B) -> Result<Uploaded<'_, B>> {
        let up = |v: &Vec<u32>| backend.upload(v);
        let pair = |l: &(Vec<u32>, Vec<u32>)| -> Result<_> { Ok((up(&l.0)?, up(&l.1)?)) };
        Ok(Uploaded {
            host: self,
            bias: self
                .bias
                .as_ref()
                .map(|(o, i, v)| Ok::<_, anyhow::Error>((up(o)?, up(i)?, backend.upload(v)?)))
                .transpose()?,
            prompt: self.prompt.as_ref().map(pair).transpose()?,
            output: self
                .output
                .as_ref()
                .map(|(o, i, c)| Ok::<_, anyhow::Error>((up(o)?, up(i)?, up(c)?)))
                .transpose()?,
            banned: self.banned.as_ref().map(pair).transpose()?,
            bitmask: self.bitmask.as_ref().map(up).transpose()?,
        })
    }
}

/// A [`Stage`]'s lists on a backend.
pub struct Uploaded<'a, B: Backend> {
    host: &'a Stage,
    bias: Option<(B::Buffer<u32>, B::Buffer<u32>, B::Buffer<f32>)>,
    prompt: Option<(B::Buffer<u32>, B::Buffer<u32>)>,
    output: Option<(B::Buffer<u32>, B::Buffer<u32>, B::Buffer<u32>)>,
    banned: Option<(B::Buffer<u32>, B::Buffer<u32>)>,
    bitmask: Option<B::Buffer<u32>>,
}

impl<B: Backend> Uploaded<'_, B> {
    /// The library's stage over these buffers.
    pub fn stage(&self) -> LogitsStage<'_, B> {
        let mut s = LogitsStage::new(&self.host.rows);
        if let Some((o, i, v)) = &self.bias {
            s = s.with_logit_bias(o, i, v);
        }
        if let Some((o, i)) = &self.prompt {
            s = s.with_prompt(o, i);
        }
        if let Some((o, i, c)) = &self.output {
            s = s.with_output(o, i, c);
        }
        if let Some((o, i)) = &self.banned {
            s = s.with_banned(o, i);
        }
        if let Some(m) = &self.bitmask {
            s = s.with_allowed(m);
        }
        if self.host.nan_as_finite {
            s = s.with_nan_as_finite();
        }
        s
    }
}

/// CSR offsets and ids of per-row lists.
fn csr(rows: impl Iterator<Item = Vec<u32>>) -> (Vec<u32>, Vec<u32>) {
    rows.fold((vec![0u32], vec![]), |(mut offsets, mut ids), row| {
        ids.extend(row);
        offsets.push(ids.len() as u32);
        (offsets, ids)
    })
}

/// One value for every row, or one per row, of a file's JSON.
fn per_row<T: Clone>(path: &Path, each: Option<Vec<T>>, all: Option<T>, batch: usize) -> Result<Vec<T>> {
    match (each, all) {
        (Some(rows), _) if rows.len() == batch => Ok(rows),
        (Some(rows), _) => {
            bail!("{}: {} rows for a batch of {batch}; give one object, or one per row", path.display(), rows.len())
        }
        (None, Some(one)) => Ok(vec![one; batch]),
        (None, None) => unreachable!("the file is one of the two forms"),
    }
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not the JSON the flag's help describes", path.display()))
}

fn read_bias(path: &Path, batch: usize) -> Result<(Vec<u32>, Vec<u32>, Vec<f32>)> {
    let rows = match read_json::<BiasFile>(path)? {
        BiasFile::Each(rows) => per_row(path, Some(rows), None, batch)?,
        BiasFile::All(one) => per_row(path, None, Some(one), batch)?,
    };
    let (mut offsets, mut ids, mut biases) = (vec![0u32], vec![], vec![]);
    for row in rows {
        for (token, bias) in row {
            ids.push(token.parse::<u32>().with_context(|| format!("{}: token id {token:?}", path.display()))?);
            biases.push(bias);
        }
        offsets.push(ids.len() as u32);
    }
    Ok((offsets, ids, biases))
}

fn read_ids(path: &Path, batch: usize) -> Result<Vec<RowIds>> {
    match read_json::<IdsFile>(path)? {
        IdsFile::Each(rows) => per_row(path, Some(rows), None, batch),
        IdsFile::All(one) => per_row(path, None, Some(one), batch),
    }
}

/// xgrammar's bitmask as .npy: int32 or uint32, `[batch, ceil(vocab / 32)]` or one row of
/// `ceil(vocab / 32)` words for every row.
fn read_bitmask(path: &Path, batch: usize, vocab: usize) -> Result<Vec<u32>> {
    let words = vocab.div_ceil(32);
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let npy = npyz::NpyFile::new(&bytes[..]).with_context(|| format!("{}: not an .npy file", path.display()))?;
    ensure!(npy.order() == npyz::Order::C, "{}: Fortran order; save a C-ordered array", path.display());
    let shape = npy.shape().to_vec();
    let dtype = npy.dtype();
    let values: Vec<u32> = match &dtype {
        npyz::DType::Plain(t) if t.type_char() == npyz::TypeChar::Int && t.size_field() == 4 => {
            npy.into_vec::<i32>()?.into_iter().map(|w| w as u32).collect()
        }
        npyz::DType::Plain(t) if t.type_char() == npyz::TypeChar::Uint && t.size_field() == 4 => {
            npy.into_vec::<u32>()?
        }
        _ => bail!("{}: dtype {}; the bitmask is int32 (xgrammar's) or uint32", path.display(), dtype.descr()),
    };
    match shape.as_slice() {
        [w] if *w as usize == words => Ok(values.repeat(batch)),
        [b, w] if *b as usize == batch && *w as usize == words => Ok(values),
        _ => bail!(
            "{}: shape {shape:?}; a bitmask of {batch} rows of {vocab} tokens is [{batch}, {words}] or [{words}]",
            path.display()
        ),
    }
}
