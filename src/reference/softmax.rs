//! Softmax as every backend defines it: PyTorch's float32 softmax of `l / T`, computed here in
//! float64 and rounded once, plus the log-probabilities SGLang's seeded sampler reads.

use crate::types::RowParams;

/// The temperature a row's softmax uses: its own, or 1 for greedy rows.
pub fn temperature(row: &RowParams) -> f64 {
    if row.is_sampled() {
        row.temperature as f64
    } else {
        1.0
    }
}

/// Softmax of one row as PyTorch's float32 softmax computes it: the scaled logits and their
/// distance to the maximum round to f32; the exponentials and their sum are exact here.
///
/// Columns whose scaled value is +inf share the whole probability equally (the softmax's
/// limit); a row with no value above -inf has probability 0 everywhere.
pub fn softmax_f32(values: &[f64], row: &RowParams) -> Vec<f32> {
    softmax(values, row).into_iter().map(|p| p as f32).collect()
}

/// [`softmax_f32`] before its final rounding to f32.
pub fn softmax(values: &[f64], row: &RowParams) -> Vec<f64> {
    let z = scaled_f32(values, row);
    let m = z.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
    let e: Vec<f64> = z
        .iter()
        .map(|&v| match m {
            f32::INFINITY => (v == m) as u8 as f64,
            f32::NEG_INFINITY => 0.0,
            _ => ((v - m) as f64).exp(),
        })
        .collect();
    let sum: f64 = e.iter().sum();
    e.iter().map(|&x| if sum > 0.0 { x / sum } else { 0.0 }).collect()
}

/// The scaled values `z = l / T` rounded to f32, as every backend defines them: +inf (or an
/// overflow of the division) marks the row's top class.
pub fn scaled_f32(values: &[f64], row: &RowParams) -> Vec<f32> {
    let t = temperature(row) as f32;
    values.iter().map(|&v| v as f32 / t).collect()
}

/// SGLang's log-probabilities from logits: the float32 log of the float32 softmax.
pub fn sglang_logprobs(values: &[f64], row: &RowParams) -> Vec<f64> {
    softmax_f32(values, row).iter().map(|&p| log32(p)).collect()
}

/// `torch.log` of a float32 probability, rounded to float32: 0 gives -inf, and so do NaN and
/// negative values (whose log, NaN, this crate never samples) and +inf (no probability).
pub fn log32(p: f32) -> f64 {
    if p > 0.0 && p.is_finite() {
        (p as f64).ln() as f32 as f64
    } else {
        f64::NEG_INFINITY
    }
}

/// log-softmax(values / T) at `token`.
pub fn log_softmax_at(values: &[f64], t: f64, token: usize) -> f64 {
    let m = values.iter().fold(f64::NEG_INFINITY, |a, &v| a.max(v / t));
    let sum: f64 = values.iter().map(|&v| (v / t - m).exp()).sum();
    values[token] / t - m - sum.ln()
}
