//! The CPU backend: plain Rust in float64, written for obviousness, not speed. It is the oracle
//! every GPU result is checked against, and a working backend for machines without a GPU.

use crate::backend::logprobs::{LogprobsOutput, LogprobsRequest};
use crate::backend::stage::LogitsStage;
use crate::backend::{need, Backend, Input, Job, LogProbs, Logits, Output};
use crate::error::Result;
use crate::reference::filters::{self, clean_probs};
use crate::reference::logprobs::{rank, top, values};
use crate::reference::race::{race_logits_in, race_logits_row, race_probs_in, seeded_in, seeded_ranked_in};
use crate::reference::softmax::{log32, sglang_logprobs, softmax, softmax_f32};
use crate::reference::{self, murmur, philox};
use crate::types::{Element, RowMode, RowParams, Shape};

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

/// One row of logits as float32 (f16 and bf16 widened, NaN kept), as the engines' stage reads it.
fn row_f32(logits: Logits<'_, CpuBackend>, shape: Shape, row: usize) -> Vec<f32> {
    let range = row * shape.stride..row * shape.stride + shape.vocab;
    match logits {
        Logits::F32(b) => b[range].to_vec(),
        Logits::F16(b) => b[range].iter().map(|x| x.to_f32()).collect(),
        Logits::Bf16(b) => b[range].iter().map(|x| x.to_f32()).collect(),
    }
}

/// The kept set of one row of the filter kernels' input.
fn kept_set(input: Input<'_, CpuBackend>, shape: Shape, r: usize, row: &RowParams) -> (Vec<f64>, Vec<bool>) {
    match input {
        Input::Logits(l) => {
            let x = row_values(l, shape, r);
            let keep = filters::kept_from_logits(&x, row, &row.filters());
            (x, keep)
        }
        Input::Probs(p) => {
            let x = row_values(Logits::F32(p), shape, r);
            let keep = filters::kept(&clean_probs(&x), &row.filters());
            (x, keep)
        }
    }
}

/// Whether the per-row sampler sends the row to the filter kernels: a sampled row with a filter
/// (greedy takes the largest value, which every filter keeps).
fn takes_filter_path(row: &RowParams) -> bool {
    row.is_sampled() && row.has_filters()
}

/// Row `r` sampled inside its kept set (the filter kernels' path), with its pass count. A row
/// that hashes ranks takes SGLang's race on them.
fn filtered_row(
    input: Input<'_, CpuBackend>,
    shape: Shape,
    r: usize,
    row: &RowParams,
    mut out: Output<'_, CpuBackend>,
) {
    let (x, keep) = kept_set(input, shape, r, row);
    let ranked = row.hashes_ranks().then(|| {
        let (probs, p32) = match input {
            Input::Logits(_) => (softmax(&x, row), softmax_f32(&x, row)),
            Input::Probs(_) => (clean_probs(&x), x.iter().map(|&p| p as f32).collect()),
        };
        seeded_ranked_in(&probs, &p32, row, |j| keep[j])
    });
    let (token, valid, lp) = match (ranked, input, row.mode()) {
        (Some(won), _, _) => won,
        (None, Input::Logits(_), RowMode::Race) => race_logits_in(&x, row, |j| keep[j]),
        (None, Input::Probs(_), RowMode::Race) => race_probs_in(&x, row, |j| keep[j]),
        (None, Input::Logits(_), RowMode::Seeded) => seeded_in(&sglang_logprobs(&x, row), row, |j| keep[j]),
        (None, Input::Probs(_), RowMode::Seeded) => {
            seeded_in(&x.iter().map(|p| p.ln()).collect::<Vec<_>>(), row, |j| keep[j])
        }
    };
    if let Some(passes) = out.passes.as_deref_mut() {
        passes[r] = filters::passes(&row.filters(), shape.vocab);
    }
    write_output(out, r, token, valid, || lp);
}

/// The seeded race of one row of log-probabilities, written to `out`.
fn seeded_row(out: Output<'_, CpuBackend>, r: usize, lp: &[f64], row: &RowParams) {
    let (token, valid, lp) = seeded_in(lp, row, |_| true);
    write_output(out, r, token, valid, || lp);
}

/// Writes one row's results; a row without a valid value gets token 0, log-probability -inf and
/// status 0.
fn write_output(out: Output<'_, CpuBackend>, row: usize, token: usize, valid: bool, logprob: impl FnOnce() -> f64) {
    out.tokens[row] = if valid { token as u32 } else { 0 };
    if let Some(lp) = out.logprobs {
        lp[row] = if valid { logprob() as f32 } else { f32::NEG_INFINITY };
    }
    if let Some(status) = out.status {
        status[row] = valid as u32;
    }
}

impl crate::backend::Sealed for CpuBackend {}

impl Backend for CpuBackend {
    type Buffer<T: Element> = Vec<T>;

    fn describe(&self) -> String {
        "cpu (reference, float64)".into()
    }
    fn upload_unchecked<T: Element>(&self, data: &[T]) -> Result<Vec<T>> {
        Ok(data.to_vec())
    }
    fn zeros<T: Element>(&self, len: usize) -> Result<Vec<T>> {
        Ok(vec![T::zeroed(); len])
    }
    unsafe fn write_unchecked<T: Element>(&self, buf: &mut Vec<T>, data: &[T]) -> Result<()> {
        buf[..data.len()].copy_from_slice(data);
        Ok(())
    }
    fn download<T: Element>(&self, buf: &Vec<T>) -> Result<Vec<T>> {
        Ok(buf.clone())
    }
    fn len<T: Element>(buf: &Vec<T>) -> usize {
        buf.len()
    }

    fn apply_stage(
        &self,
        shape: Shape,
        logits: Logits<'_, Self>,
        stage: &LogitsStage<'_, Self>,
        staged: &mut Vec<f32>,
    ) -> Result<()> {
        shape.validate()?;
        stage.validate(shape)?;
        need("logits", logits.len(), shape.elements())?;
        need("staged", staged.len(), shape.elements())?;
        for r in 0..shape.batch {
            let mut x = row_f32(logits, shape, r);
            reference::stage::apply(&mut x, &stage.row(shape, r));
            staged[r * shape.stride..r * shape.stride + shape.vocab].copy_from_slice(&x);
        }
        Ok(())
    }

    fn computes_logprobs(&self) -> bool {
        true
    }

    fn write_logprobs(
        &self,
        shape: Shape,
        raw: Logits<'_, Self>,
        staged: Logits<'_, Self>,
        rows: &[RowParams],
        tokens: &Vec<u32>,
        request: &LogprobsRequest<'_>,
        mut out: LogprobsOutput<'_, Self>,
    ) -> Result<()> {
        let n_max = request.n_max();
        for (r, row) in rows.iter().enumerate().take(shape.batch) {
            let v = values(request.mode(), &row_values(raw, shape, r), &row_values(staged, shape, r), row);
            for (i, (id, x)) in top(&v, request.top_n(r)).into_iter().enumerate() {
                out.top_ids[r * n_max + i] = id;
                out.top_values[r * n_max + i] = x;
            }
            let token = tokens[r] as usize;
            out.sampled[r] = v[token];
            out.rank[r] = rank(&v, token);
            if let Some(requested) = out.requested.as_deref_mut() {
                for k in request.id_range(r) {
                    requested[k] = v[request.ids()[k] as usize];
                }
            }
        }
        Ok(())
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
                    let (token, valid, lp) = race_logits_row(&row_values(logits, shape, r), &RowParams::greedy());
                    write_output(out.reborrow(), r, token, valid, || lp);
                }
            }
            Job::RaceLogits { shape, logits, rows, mut out } => {
                for r in 0..shape.batch {
                    let (token, valid, lp) = race_logits_row(&row_values(logits, shape, r), &rows[r]);
                    write_output(out.reborrow(), r, token, valid, || lp);
                }
            }
            Job::RaceProbs { shape, probs, rows, mut out } => {
                for r in 0..shape.batch {
                    let x = row_values(Logits::F32(probs), shape, r);
                    let (token, valid, lp) = race_probs_in(&x, &rows[r], |_| true);
                    write_output(out.reborrow(), r, token, valid, || lp);
                }
            }
            Job::Seeded { shape, logprobs, rows, mode: _, mut out } => {
                // Both modes give the full float64 token by definition; the oracle computes it.
                for r in 0..shape.batch {
                    let lp = match logprobs {
                        LogProbs::F64(b) => b[r * shape.stride..r * shape.stride + shape.vocab].to_vec(),
                        LogProbs::F32(b) => row_values(Logits::F32(b), shape, r),
                        LogProbs::LogOf(b) => {
                            row_values(Logits::F32(b), shape, r).iter().map(|&p| log32(p as f32)).collect()
                        }
                    };
                    seeded_row(out.reborrow(), r, &lp, &rows[r]);
                }
            }
            Job::SeededLogits { shape, logits, rows, mut out } => {
                for r in 0..shape.batch {
                    let lp = sglang_logprobs(&row_values(logits, shape, r), &rows[r]);
                    seeded_row(out.reborrow(), r, &lp, &rows[r]);
                }
            }
            // The CPU applies a stage whole, before the step (`apply_stage`); its jobs read none.
            Job::Sample { shape, logits, rows, mut out, listed: _, at_read: _ } => {
                for r in 0..shape.batch {
                    if takes_filter_path(&rows[r]) {
                        filtered_row(Input::Logits(logits), shape, r, &rows[r], out.reborrow());
                        continue;
                    }
                    let x = row_values(logits, shape, r);
                    match rows[r].mode() {
                        RowMode::Seeded => seeded_row(out.reborrow(), r, &sglang_logprobs(&x, &rows[r]), &rows[r]),
                        RowMode::Race => {
                            let (token, valid, lp) = race_logits_row(&x, &rows[r]);
                            write_output(out.reborrow(), r, token, valid, || lp);
                        }
                    }
                }
            }
            Job::Filter { shape, input, rows, mut out } => {
                for r in 0..shape.batch {
                    filtered_row(input, shape, r, &rows[r], out.reborrow());
                }
            }
            Job::MaskLogits { shape, logits, rows, masked } => {
                for r in 0..shape.batch {
                    let (x, keep) = kept_set(Input::Logits(logits), shape, r, &rows[r]);
                    for j in 0..shape.vocab {
                        masked[r * shape.stride + j] = if keep[j] { x[j] as f32 } else { f32::NEG_INFINITY };
                    }
                }
            }
            Job::RenormProbs { shape, probs, rows, renormed } => {
                for r in 0..shape.batch {
                    let (x, keep) = kept_set(Input::Probs(probs), shape, r, &rows[r]);
                    let total: f64 = (0..shape.vocab).filter(|&j| keep[j]).map(|j| x[j]).sum();
                    for j in 0..shape.vocab {
                        renormed[r * shape.stride + j] = if keep[j] { (x[j] / total) as f32 } else { 0.0 };
                    }
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
            Job::ReadRows { shape, logits, sums } => {
                for (r, sum) in sums.iter_mut().enumerate().take(shape.batch) {
                    *sum = row_values(logits, shape, r).iter().sum::<f64>() as f32;
                }
            }
        }
        Ok(())
    }
}
