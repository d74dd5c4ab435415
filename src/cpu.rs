//! The CPU backend: plain Rust in float64, written for obviousness, not speed. It is the oracle
//! every GPU result is checked against, and a working backend for machines without a GPU.

use crate::backend::LogProbs;
use crate::backend::{Backend, Job, Logits, Output};
use crate::error::Result;
use crate::types::{Element, RowParams, Shape};
use crate::{murmur, philox};

/// Runs every kernel on the host, one row after another.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend;

/// One row of logits widened to f64, NaN read as -inf (NaN is never sampled).
pub fn row_values(logits: Logits<'_, CpuBackend>, shape: Shape, row: usize) -> Vec<f64> {
    let range = row * shape.stride..row * shape.stride + shape.vocab;
    let wide: Vec<f64> = match logits {
        Logits::F32(b) => b[range].iter().map(|&x| x as f64).collect(),
        Logits::F16(b) => b[range].iter().map(|&x| x.to_f64()).collect(),
        Logits::Bf16(b) => b[range].iter().map(|&x| x.to_f64()).collect(),
    };
    wide.into_iter().map(|x| if x.is_nan() { f64::NEG_INFINITY } else { x }).collect()
}

/// The lowest index of the largest value.
pub fn argmax(values: &[f64]) -> usize {
    let mut best = 0;
    for (j, &v) in values.iter().enumerate() {
        if v > values[best] {
            best = j;
        }
    }
    best
}

/// The temperature a row's softmax uses: its own, or 1 for greedy rows.
fn temperature(row: &RowParams) -> f64 {
    if row.is_sampled() {
        row.temperature as f64
    } else {
        1.0
    }
}

/// Softmax of one row as PyTorch's float32 softmax computes it: the scaled logits and their
/// distance to the maximum round to f32; the exponentials and their sum are exact here.
pub fn softmax_f32(values: &[f64], row: &RowParams) -> Vec<f32> {
    let t = temperature(row) as f32;
    let z: Vec<f32> = values.iter().map(|&v| v as f32 / t).collect();
    let m = z.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
    let e: Vec<f64> = z.iter().map(|&v| ((v - m) as f64).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.iter().map(|&x| (x / sum) as f32).collect()
}

/// SGLang's seeded scores of one row: `logprob + g(hash(seed, position, column))` in float64
/// (greedy rows: the log-probabilities alone).
pub fn seeded_scores(logprobs: &[f64], row: &RowParams) -> Vec<f64> {
    logprobs
        .iter()
        .enumerate()
        .map(|(j, &lp)| {
            let lp = if lp.is_nan() { f64::NEG_INFINITY } else { lp };
            if row.is_sampled() {
                lp + murmur::gumbel(murmur::hash(row.seed(), row.offset(), j as u32))
            } else {
                lp
            }
        })
        .collect()
}

/// SGLang's log-probabilities from logits: the float32 log of the float32 softmax.
pub fn sglang_logprobs(values: &[f64], row: &RowParams) -> Vec<f64> {
    softmax_f32(values, row).iter().map(|&p| (p as f64).ln() as f32 as f64).collect()
}

/// log-softmax(values / T) at `token`.
fn log_softmax_at(values: &[f64], t: f64, token: usize) -> f64 {
    let m = values.iter().fold(f64::NEG_INFINITY, |a, &v| a.max(v / t));
    let sum: f64 = values.iter().map(|&v| (v / t - m).exp()).sum();
    values[token] / t - m - sum.ln()
}

/// What the race compares for each column of one row.
///
/// From logits: `l / T + Gumbel`; from probabilities: `p / Exponential` (negative or NaN `p`
/// never wins); greedy rows: the values themselves. The noise is the row's Philox stream.
pub fn race_scores(values: &[f64], row: &RowParams, from_probs: bool) -> Vec<f64> {
    values
        .iter()
        .enumerate()
        .map(|(j, &x)| {
            let invalid = from_probs && !(x >= 0.0);
            if invalid {
                return f64::NEG_INFINITY;
            }
            if !row.is_sampled() {
                return x;
            }
            let w = philox::word(row.seed(), row.offset(), j as u32);
            if from_probs {
                x / philox::exponential(w)
            } else {
                x / row.temperature as f64 + philox::gumbel(w)
            }
        })
        .collect()
}

fn write_output(out: Output<'_, CpuBackend>, row: usize, token: usize, logprob: impl FnOnce() -> f64) {
    out.tokens[row] = token as u32;
    if let Some(lp) = out.logprobs {
        lp[row] = logprob() as f32;
    }
}

impl Backend for CpuBackend {
    type Buffer<T: Element> = Vec<T>;

    fn describe(&self) -> String {
        "cpu (reference, float64)".into()
    }
    fn upload<T: Element>(&self, data: &[T]) -> Result<Vec<T>> {
        Ok(data.to_vec())
    }
    fn zeros<T: Element>(&self, len: usize) -> Result<Vec<T>> {
        Ok(vec![T::zeroed(); len])
    }
    fn write<T: Element>(&self, buf: &mut Vec<T>, data: &[T]) -> Result<()> {
        crate::backend::check_write(buf.len(), data.len())?;
        buf[..data.len()].copy_from_slice(data);
        Ok(())
    }
    fn download<T: Element>(&self, buf: &Vec<T>) -> Result<Vec<T>> {
        Ok(buf.clone())
    }
    fn len<T: Element>(buf: &Vec<T>) -> usize {
        buf.len()
    }

    fn run(&self, job: Job<'_, Self>) -> Result<()> {
        match job {
            Job::Softmax { shape, logits, rows, probs } => {
                for r in 0..shape.batch {
                    let p = softmax_f32(&row_values(logits, shape, r), &rows[r]);
                    probs[r * shape.stride..r * shape.stride + shape.vocab].copy_from_slice(&p);
                }
            }
            Job::Greedy { shape, logits, mut out } => {
                for r in 0..shape.batch {
                    let x = row_values(logits, shape, r);
                    let token = argmax(&x);
                    let out = Output { tokens: &mut *out.tokens, logprobs: out.logprobs.as_deref_mut() };
                    write_output(out, r, token, || log_softmax_at(&x, 1.0, token));
                }
            }
            Job::RaceLogits { shape, logits, rows, mut out } => {
                for r in 0..shape.batch {
                    let x = row_values(logits, shape, r);
                    let token = argmax(&race_scores(&x, &rows[r], false));
                    let out = Output { tokens: &mut *out.tokens, logprobs: out.logprobs.as_deref_mut() };
                    write_output(out, r, token, || log_softmax_at(&x, temperature(&rows[r]), token));
                }
            }
            Job::RaceProbs { shape, probs, rows, mut out } => {
                for r in 0..shape.batch {
                    let x = row_values(Logits::F32(probs), shape, r);
                    let token = argmax(&race_scores(&x, &rows[r], true));
                    let out = Output { tokens: &mut *out.tokens, logprobs: out.logprobs.as_deref_mut() };
                    write_output(out, r, token, || if x[token] > 0.0 { x[token].ln() } else { f64::NEG_INFINITY });
                }
            }
            Job::Seeded { shape, logprobs, rows, mode: _, mut out } => {
                // Both modes give the full float64 token by definition; the oracle computes it.
                for r in 0..shape.batch {
                    let lp = match logprobs {
                        LogProbs::F64(b) => b[r * shape.stride..r * shape.stride + shape.vocab].to_vec(),
                        LogProbs::F32(b) => row_values(Logits::F32(b), shape, r),
                    };
                    let token = argmax(&seeded_scores(&lp, &rows[r]));
                    let out = Output { tokens: &mut *out.tokens, logprobs: out.logprobs.as_deref_mut() };
                    write_output(out, r, token, || lp[token]);
                }
            }
            Job::SeededLogits { shape, logits, rows, mut out } => {
                for r in 0..shape.batch {
                    let lp = sglang_logprobs(&row_values(logits, shape, r), &rows[r]);
                    let token = argmax(&seeded_scores(&lp, &rows[r]));
                    let out = Output { tokens: &mut *out.tokens, logprobs: out.logprobs.as_deref_mut() };
                    write_output(out, r, token, || lp[token]);
                }
            }
            Job::Murmur { items, words, out } => {
                for i in 0..items {
                    let w = &words[i * 4..i * 4 + 4];
                    out[i] = murmur::murmur3([w[0], w[1], w[2], w[3]]);
                }
            }
            Job::LogF64 { items, x, out } => {
                for i in 0..items {
                    out[i] = x[i].ln();
                }
            }
            Job::Philox { items, blocks, out } => {
                for i in 0..items {
                    let w = &blocks[i * 6..i * 6 + 6];
                    let block = philox::philox4x32_10([w[0], w[1], w[2], w[3]], [w[4], w[5]]);
                    out[i * 4..i * 4 + 4].copy_from_slice(&block);
                }
            }
            Job::GumbelNoise { shape, rows, noise } => {
                for r in 0..shape.batch {
                    for j in 0..shape.vocab {
                        let w = philox::word(rows[r].seed(), rows[r].offset(), j as u32);
                        noise[r * shape.vocab + j] = philox::gumbel(w) as f32;
                    }
                }
            }
        }
        Ok(())
    }
}
