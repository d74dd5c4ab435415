//! Log-probabilities of one row as the engines return them (docs/logprobs.md): the row's values
//! under a [`LogprobsMode`], its `n` largest (ties to the lower index) and a token's rank, as
//! vLLM v1 counts it. Each log_softmax is computed in float64 and rounded once to float32 (the
//! processed logits are the float32 `l / T`, and SGLang's mode rounds where SGLang does); the
//! ordering and the rank are taken on the float32 values, the ones an engine receives.

use super::filters::kept_from_logits;
use super::softmax::{scaled_f32, sglang_logprobs};
use crate::types::{LogprobsMode, RowParams};
use std::cmp::Ordering;

/// log_softmax of one row: `x - max - ln(sum exp(x - max))`. A row with nothing above -inf is
/// -inf everywhere; where values are +inf they share the mass (`-ln(count)` each, the rest
/// -inf), the softmax's limit, as [`super::softmax::softmax`] defines it.
pub fn log_softmax(values: &[f64]) -> Vec<f64> {
    let m = values.iter().fold(f64::NEG_INFINITY, |a, &v| a.max(v));
    match m {
        f64::NEG_INFINITY => vec![f64::NEG_INFINITY; values.len()],
        f64::INFINITY => {
            let count = values.iter().filter(|&&v| v == m).count() as f64;
            values.iter().map(|&v| if v == m { -count.ln() } else { f64::NEG_INFINITY }).collect()
        }
        _ => {
            let log_sum = values.iter().map(|&v| (v - m).exp()).sum::<f64>().ln();
            values.iter().map(|&v| v - m - log_sum).collect()
        }
    }
}

/// The processed logits of one row: the staged logits divided by the temperature in float32
/// (greedy rows at T = 1, as vLLM keeps them), and for a sampled row with a filter, -inf outside
/// the kept set it samples in (a greedy row takes the largest value, which every filter keeps,
/// and vLLM clears a greedy request's filters).
fn processed(staged: &[f64], row: &RowParams) -> Vec<f32> {
    let z = scaled_f32(staged, row);
    if !(row.is_sampled() && row.has_filters()) {
        return z;
    }
    let keep = kept_from_logits(staged, row, &row.filters());
    z.into_iter().zip(keep).map(|(z, k)| if k { z } else { f32::NEG_INFINITY }).collect()
}

fn rounded(values: Vec<f64>) -> Vec<f32> {
    values.into_iter().map(|v| v as f32).collect()
}

/// One row's values under `mode`, as float32: `raw` is the row as given, `staged` after the
/// logits stage (the same row where the call has none), both widened to float64 with NaN read
/// as -inf. `row` gives the temperature and the filters of the processed modes and SGLang's.
pub fn values(mode: LogprobsMode, raw: &[f64], staged: &[f64], row: &RowParams) -> Vec<f32> {
    let widened = |x: Vec<f32>| x.into_iter().map(f64::from).collect::<Vec<_>>();
    match mode {
        LogprobsMode::RawLogits => rounded(raw.to_vec()),
        LogprobsMode::RawLogprobs => rounded(log_softmax(raw)),
        LogprobsMode::ProcessedLogits => processed(staged, row),
        LogprobsMode::ProcessedLogprobs => rounded(log_softmax(&widened(processed(staged, row)))),
        // SGLang's sampled rows: `torch.log(probs).clamp(min=finfo.min)`; its greedy rows:
        // `log_softmax(logits)`.
        LogprobsMode::Sglang if row.is_sampled() => {
            sglang_logprobs(staged, row).into_iter().map(|v| (v as f32).max(f32::MIN)).collect()
        }
        LogprobsMode::Sglang => rounded(log_softmax(staged)),
    }
}

/// Values ordered largest first, ties (zeros of either sign included) to the lower index.
fn descending(values: &[f32], a: usize, b: usize) -> Ordering {
    let key = |j: usize| if values[j] == 0.0 { 0.0 } else { values[j] };
    key(b).total_cmp(&key(a)).then(a.cmp(&b))
}

/// The `n` largest values with their ids, largest first, ties to the lower index (`n` at most
/// the row's length).
pub fn top(values: &[f32], n: usize) -> Vec<(u32, f32)> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| descending(values, a, b));
    order.into_iter().take(n).map(|j| (j as u32, values[j])).collect()
}

/// vLLM v1's rank of `token` (`batched_count_greater_than`): how many values are at least its
/// value, so 1 is the largest and tied tokens share the rank of the last of them.
pub fn rank(values: &[f32], token: usize) -> u32 {
    values.iter().filter(|&&v| v >= values[token]).count() as u32
}
