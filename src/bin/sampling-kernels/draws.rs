//! `--draws N`: one request sampled at N consecutive decode steps, as a histogram, optionally
//! against the distribution the CPU oracle says it draws from.

use crate::input::Input;
use anyhow::{Context, Result};
use sampling_kernels::{Backend, CpuBackend, RowParams};
use serde::Serialize;

/// The most bytes of repeated input one launch holds, so a 151936-token vocabulary with a
/// million draws needs 64 MiB of device memory rather than 600 GB.
const LAUNCH_BYTES: usize = 64 << 20;

#[derive(Serialize)]
pub struct Histogram {
    row: usize,
    draws: u64,
    /// Draws that found nothing valid to sample (a row of NaN or -inf), counted in no bin.
    #[serde(skip_serializing_if = "is_zero")]
    nothing_to_sample: u64,
    /// Tokens drawn at least once, and with --compare also those expected at least once.
    tokens: Vec<Bin>,
    /// Total variation distance, `sum |count / N - p| / 2` over the whole vocabulary.
    #[serde(skip_serializing_if = "Option::is_none")]
    tv: Option<f64>,
}

#[derive(Serialize)]
struct Bin {
    token: usize,
    count: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    prob: Option<f64>,
}

/// Draws row `row` of `input` `draws` times at offsets `params.offset()..+draws` on `backend`:
/// the row is repeated in one buffer, uploaded once, and sampled a launch at a time.
pub fn histogram<B: Backend>(
    backend: &B,
    input: &Input<CpuBackend>,
    vocab: usize,
    row: usize,
    params: RowParams,
    draws: u64,
    compare: bool,
) -> Result<Histogram> {
    params.offset().checked_add(draws).with_context(|| format!("row {row}: --offset + --draws overflows 64 bits"))?;
    let per_launch = (LAUNCH_BYTES / input.row_bytes(vocab)).clamp(1, usize::try_from(draws).unwrap_or(usize::MAX));
    let repeated = input.repeat_row(row, vocab, per_launch)?.upload(backend)?;
    let (mut counts, mut nothing_to_sample) = (vec![0u64; vocab], 0);
    let mut step = 0;
    while step < draws {
        let end = draws.min(step + per_launch as u64);
        let rows: Vec<RowParams> = (step..end).map(|i| params.with_offset(params.offset() + i)).collect();
        let got = repeated.sample(backend, vocab, &rows, false, None, None)?;
        for (token, status) in got.tokens.into_iter().zip(got.status) {
            if status == 0 {
                nothing_to_sample += 1;
                continue;
            }
            *counts
                .get_mut(token as usize)
                .with_context(|| format!("row {row}: token {token} is outside the vocabulary"))? += 1;
        }
        step = end;
    }
    let probs = if compare { Some(input.distribution(row, vocab, params)?) } else { None };
    let n = draws as f64;
    let prob = |j: usize| probs.as_ref().map(|p| p[j]);
    let tokens = (0..vocab)
        .filter(|&j| counts[j] > 0 || prob(j).is_some_and(|p| p * n >= 1.0))
        .map(|j| Bin { token: j, count: counts[j], prob: prob(j) })
        .collect();
    let tv = probs.as_ref().map(|p| p.iter().zip(&counts).map(|(p, &c)| (c as f64 / n - p).abs()).sum::<f64>() / 2.0);
    Ok(Histogram { row, draws, nothing_to_sample, tokens, tv })
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
