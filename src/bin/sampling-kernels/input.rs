//! What the tool samples from, held in any backend's buffers: the file's values, typed by the
//! flag that named the file and the sampler that reads them. Host values are [`CpuBackend`]
//! buffers (`Vec`s), so the oracle reads them as they are and other backends get an upload.

use crate::logprobs::{Asked, Buffers, Returned};
use crate::stage::Stage;
use crate::tensor::{Tensor, Values};
use anyhow::{bail, ensure, Context, Result};
use half::{bf16, f16};
use sampling_kernels::reference::filters::kept;
use sampling_kernels::{
    Backend, CpuBackend, Element, Input as Kept, LogProbs, Logits, Output, RowMode, RowParams, Sampler, SeededMode,
    Shape,
};

/// The flag an input file came from.
#[derive(Clone, Copy)]
pub enum Role {
    Logits,
    Probs,
    LogProbs,
}

impl Role {
    fn flag(self) -> &'static str {
        match self {
            Role::Logits => "--logits",
            Role::Probs => "--probs",
            Role::LogProbs => "--logprobs",
        }
    }

    fn dtypes(self) -> &'static str {
        match self {
            Role::Logits => "f32, f16 or bf16",
            Role::Probs => "f32",
            Role::LogProbs => "f64 or f32",
        }
    }
}

pub enum LogitsIn<B: Backend> {
    F32(B::Buffer<f32>),
    F16(B::Buffer<f16>),
    Bf16(B::Buffer<bf16>),
}

pub enum LogProbsIn<B: Backend> {
    F64(B::Buffer<f64>),
    F32(B::Buffer<f32>),
}

/// An input with the sampler that reads it; each variant is one `Backend` call.
pub enum Input<B: Backend> {
    /// The per-row sampler: the rows' records say which are seeded, greedy or filtered.
    Logits(LogitsIn<B>),
    /// `race_from_probs`, or for seeded rows `seeded` on their float32 log (`mode`); filtered
    /// rows of either kind, `sample_filtered`.
    Probs { values: B::Buffer<f32>, mode: SeededMode },
    /// `seeded`.
    LogProbs { values: LogProbsIn<B>, mode: SeededMode },
}

/// Turns one buffer into another, element type kept: an upload, or a row repeated.
trait Transfer<To: Backend> {
    fn apply<T: Element>(&self, buf: &[T]) -> Result<To::Buffer<T>>;
}

struct Upload<'a, To>(&'a To);

impl<To: Backend> Transfer<To> for Upload<'_, To> {
    fn apply<T: Element>(&self, buf: &[T]) -> Result<To::Buffer<T>> {
        Ok(self.0.upload(buf)?)
    }
}

/// Row `row` of a `vocab`-wide tensor, `copies` times back to back.
struct Repeat {
    row: usize,
    vocab: usize,
    copies: usize,
}

impl Transfer<CpuBackend> for Repeat {
    fn apply<T: Element>(&self, buf: &[T]) -> Result<Vec<T>> {
        let values = buf.get(self.row * self.vocab..(self.row + 1) * self.vocab).context("row out of range")?;
        Ok(values.repeat(self.copies))
    }
}

/// What one launch gave each row.
pub struct Sampled {
    pub tokens: Vec<u32>,
    /// 1 where the row had a valid value to sample, 0 where it had none (its token is then 0).
    pub status: Vec<u32>,
    pub logprobs: Option<Vec<f32>>,
    /// The log-probabilities asked for with `--top-logprobs`, `--logprob-ids` or `--logprobs-mode`.
    pub asked: Option<Returned>,
}

impl<B: Backend> Input<B> {
    /// Samples the first `rows.len()` rows, each `vocab` wide, in one call on `backend`: logits
    /// through the library's per-row [`Sampler::step`], each row on the path its own parameters
    /// choose (greedy, the race, seeded, filtered). The log-probabilities of the tokens are
    /// downloaded only when asked for; so are the log-probabilities `asked` for, which only
    /// logits give ([`Sampler::step_with_logprobs`]).
    pub fn sample(
        &self,
        backend: &B,
        vocab: usize,
        rows: &[RowParams],
        with_logprobs: bool,
        asked: Option<&Asked>,
        stage: Option<&Stage>,
    ) -> Result<Sampled> {
        let shape = Shape::dense(rows.len(), vocab);
        let mut tokens = backend.zeros::<u32>(rows.len())?;
        let mut status = backend.zeros::<u32>(rows.len())?;
        let mut logprobs = if with_logprobs { Some(backend.zeros::<f32>(rows.len())?) } else { None };
        let mut out = Output::new(&mut tokens).with_status(&mut status);
        if let Some(logprobs) = logprobs.as_mut() {
            out = out.with_logprobs(logprobs);
        }
        let params = || backend.upload(rows);
        let mut buffers = asked.map(|a| Buffers::new(backend, rows.len(), a)).transpose()?;
        match self {
            Input::Logits(values) => {
                let mut sampler = Sampler::new(backend, rows.len())?;
                let uploaded = stage.map(|s| s.upload(backend)).transpose()?;
                let stage = uploaded.as_ref().map(|u| u.stage());
                match (asked.zip(buffers.as_mut()), &stage) {
                    (Some((asked, buffers)), stage) => {
                        let request = asked.request();
                        let logits = values.get();
                        sampler.step_with_logprobs(shape, logits, rows, stage.as_ref(), &request, out, buffers.output())
                    }
                    (None, Some(stage)) => sampler.step_staged(shape, values.get(), rows, stage, out),
                    (None, None) => sampler.step(shape, values.get(), rows, out),
                }
            }
            _ if asked.is_some() => bail!("log-probabilities are computed from --logits only"),
            Input::Probs { values, .. } if rows.iter().any(RowParams::has_filters) => {
                backend.sample_filtered(shape, Kept::Probs(values), &params()?, out)
            }
            Input::Probs { values, mode } if rows.iter().any(|r| r.mode() == RowMode::Seeded) => {
                backend.seeded(shape, LogProbs::LogOf(values), &params()?, *mode, out)
            }
            Input::Probs { values, .. } => backend.race_from_probs(shape, values, &params()?, out),
            Input::LogProbs { values, mode } => backend.seeded(shape, values.get(), &params()?, *mode, out),
        }?;
        let logprobs = logprobs.map(|lp| backend.download(&lp)).transpose()?;
        let asked = buffers.map(|b| b.download(backend)).transpose()?;
        Ok(Sampled { tokens: backend.download(&tokens)?, status: backend.download(&status)?, logprobs, asked })
    }
}

impl<B: Backend> LogitsIn<B> {
    fn get(&self) -> Logits<'_, B> {
        match self {
            LogitsIn::F32(b) => Logits::F32(b),
            LogitsIn::F16(b) => Logits::F16(b),
            LogitsIn::Bf16(b) => Logits::Bf16(b),
        }
    }
}

impl<B: Backend> LogProbsIn<B> {
    fn get(&self) -> LogProbs<'_, B> {
        match self {
            LogProbsIn::F64(b) => LogProbs::F64(b),
            LogProbsIn::F32(b) => LogProbs::F32(b),
        }
    }
}

impl Input<CpuBackend> {
    /// Types a file's values by their role; `mode` was checked against the role by the argument
    /// parser (log-probabilities are always seeded, probabilities with `--seeded`).
    pub fn new(role: Role, tensor: Tensor, mode: SeededMode) -> Result<Self> {
        Ok(match (role, tensor.values) {
            (Role::Logits, Values::F32(v)) => Input::Logits(LogitsIn::F32(v)),
            (Role::Logits, Values::F16(v)) => Input::Logits(LogitsIn::F16(v)),
            (Role::Logits, Values::Bf16(v)) => Input::Logits(LogitsIn::Bf16(v)),
            (Role::Probs, Values::F32(v)) => Input::Probs { values: v, mode },
            (Role::LogProbs, Values::F64(v)) => Input::LogProbs { values: LogProbsIn::F64(v), mode },
            (Role::LogProbs, Values::F32(v)) => Input::LogProbs { values: LogProbsIn::F32(v), mode },
            (role, values) => bail!(
                "{}: dtype {} cannot be read by {}; expected {}",
                tensor.source,
                values.dtype(),
                role.flag(),
                role.dtypes()
            ),
        })
    }

    fn transfer<To: Backend>(&self, t: &impl Transfer<To>) -> Result<Input<To>> {
        Ok(match self {
            Input::Logits(values) => Input::Logits(match values {
                LogitsIn::F32(b) => LogitsIn::F32(t.apply(b)?),
                LogitsIn::F16(b) => LogitsIn::F16(t.apply(b)?),
                LogitsIn::Bf16(b) => LogitsIn::Bf16(t.apply(b)?),
            }),
            Input::Probs { values, mode } => Input::Probs { values: t.apply(values)?, mode: *mode },
            Input::LogProbs { values, mode } => Input::LogProbs {
                values: match values {
                    LogProbsIn::F64(b) => LogProbsIn::F64(t.apply(b)?),
                    LogProbsIn::F32(b) => LogProbsIn::F32(t.apply(b)?),
                },
                mode: *mode,
            },
        })
    }

    pub fn upload<To: Backend>(&self, backend: &To) -> Result<Input<To>> {
        self.transfer(&Upload(backend))
    }

    /// Row `row` of this `vocab`-wide input, `copies` times: one request's decode steps in one launch.
    pub fn repeat_row(&self, row: usize, vocab: usize, copies: usize) -> Result<Self> {
        self.transfer(&Repeat { row, vocab, copies })
    }

    /// Bytes one row of `vocab` values takes.
    pub fn row_bytes(&self, vocab: usize) -> usize {
        let size = match self {
            Input::Logits(LogitsIn::F32(_)) | Input::Probs { .. } => 4,
            Input::Logits(LogitsIn::F16(_) | LogitsIn::Bf16(_)) => 2,
            Input::LogProbs { values: LogProbsIn::F64(_), .. } => 8,
            Input::LogProbs { values: LogProbsIn::F32(_), .. } => 4,
        };
        size * vocab
    }

    /// The distribution the sampler draws row `row` from, as the CPU oracle computes it:
    /// softmax(l / T) for logits (either sampler), p / sum(p) for probabilities, exp of the
    /// log-probabilities renormalized, and all mass on the oracle's token for greedy rows.
    pub fn distribution(&self, row: usize, vocab: usize, params: RowParams) -> Result<Vec<f64>> {
        let one = self.repeat_row(row, vocab, 1)?;
        if !params.is_sampled() {
            let token = one.sample(&CpuBackend, vocab, &[params], false, None, None)?.tokens;
            return Ok((0..vocab).map(|j| if Some(&(j as u32)) == token.first() { 1.0 } else { 0.0 }).collect());
        }
        let softmax = |logits: Logits<'_, CpuBackend>, params: RowParams| -> Result<Vec<f64>> {
            let mut probs = vec![0f32; vocab];
            CpuBackend.softmax(Shape::dense(1, vocab), logits, &vec![params], &mut probs)?;
            Ok(probs.into_iter().map(f64::from).collect())
        };
        // Log-probabilities already carry their temperature; the sampler reads T only as "greedy or not".
        let unit = RowParams::new(1.0, 0, 0);
        let full = match &one {
            Input::Logits(values) => softmax(values.get(), params),
            Input::LogProbs { values: LogProbsIn::F32(lp), .. } => softmax(Logits::F32(lp), unit),
            Input::LogProbs { values: LogProbsIn::F64(lp), .. } => {
                softmax(Logits::F32(&lp.iter().map(|&x| x as f32).collect()), unit)
            }
            Input::Probs { values: p, .. } => {
                let valid: Vec<f64> = p.iter().map(|&x| if x >= 0.0 { f64::from(x) } else { 0.0 }).collect();
                let sum: f64 = valid.iter().sum();
                ensure!(sum > 0.0, "row {row} has no positive probability");
                Ok(valid.into_iter().map(|x| x / sum).collect())
            }
        }?;
        // Inside the row's top-k / top-p / min-p set, renormalized.
        let keep = kept(&full, &params.filters());
        let mass: f64 = full.iter().zip(&keep).filter(|(_, &k)| k).map(|(p, _)| p).sum();
        Ok(full.iter().zip(&keep).map(|(&p, &k)| if k { p / mass } else { 0.0 }).collect())
    }
}
