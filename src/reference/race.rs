//! The races as plain loops: the exponential (Gumbel-max) race from logits and from
//! probabilities on the row's Philox noise, and SGLang's seeded race on its Murmur noise, each
//! optionally inside a kept set.

use super::softmax::{log_softmax_at, scaled_f32, temperature};
use super::{filters, murmur, philox};
use crate::types::RowParams;

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

/// One row of the race (or greedy, for `greedy` rows) from logits: the token, whether the row had
/// a valid value, and the token's log-probability.
///
/// If some scaled values are +inf, the race is among those alone on the noise (greedy: the
/// lowest index) and the log-probability is `-ln(count)`. Otherwise the float64 race.
pub fn race_logits_row(values: &[f64], row: &RowParams) -> (usize, bool, f64) {
    race_logits_in(values, row, |_| true)
}

/// [`race_logits_row`] among the columns `keep` accepts (the others never win); the
/// log-probability stays the token's under the whole row.
pub fn race_logits_in(values: &[f64], row: &RowParams, keep: impl Fn(usize) -> bool) -> (usize, bool, f64) {
    let z = scaled_f32(values, row);
    let top: Vec<usize> = (0..values.len()).filter(|&j| z[j] == f32::INFINITY).collect();
    if !top.is_empty() {
        let noise: Vec<f64> = top
            .iter()
            .map(|&j| match (keep(j), row.is_sampled()) {
                (false, _) => f64::NEG_INFINITY,
                (true, true) => philox::gumbel(philox::word(row.seed(), row.offset(), j as u32)),
                (true, false) => 0.0,
            })
            .collect();
        let best = argmax(&noise);
        return (top[best], noise[best] > f64::NEG_INFINITY, -(top.len() as f64).ln());
    }
    let scores = kept_scores(race_scores(values, row, false), keep);
    let token = argmax(&scores);
    let valid = scores[token] > f64::NEG_INFINITY;
    (token, valid, log_softmax_at(values, temperature(row), token))
}

/// One row of the race from probabilities among the columns `keep` accepts: the token, whether
/// it is valid, and the log of its probability.
pub fn race_probs_in(x: &[f64], row: &RowParams, keep: impl Fn(usize) -> bool) -> (usize, bool, f64) {
    let scores = kept_scores(race_scores(x, row, true), keep);
    let token = argmax(&scores);
    (token, scores[token] > 0.0, x[token].ln())
}

/// The race's scores with every column `keep` refuses at -inf (it never wins).
pub fn kept_scores(scores: Vec<f64>, keep: impl Fn(usize) -> bool) -> Vec<f64> {
    scores.into_iter().enumerate().map(|(j, s)| if keep(j) { s } else { f64::NEG_INFINITY }).collect()
}

/// SGLang's seeded race among the columns `keep` accepts, on log-probabilities `lp`: the token,
/// whether it is valid, and its log-probability.
pub fn seeded_in(lp: &[f64], row: &RowParams, keep: impl Fn(usize) -> bool) -> (usize, bool, f64) {
    let scores = kept_scores(seeded_scores(lp, row), keep);
    let token = argmax(&scores);
    (token, scores[token] > f64::NEG_INFINITY, lp[token])
}

/// SGLang's filtered seeded race (`top_k_top_p_min_p_sampling_from_probs_torch` with a seed),
/// for a row that [hashes ranks](RowParams::hashes_ranks): the tokens `keep` accepts in the
/// filters' order of `probs` ([`filters::order`]), rank `r` scored by the float64 log of its
/// float32 probability `p32` plus the noise of the hash of `r`; the token at the lowest of the
/// best ranks, whether it is valid, and its log-probability.
pub fn seeded_ranked_in(
    probs: &[f64],
    p32: &[f32],
    row: &RowParams,
    keep: impl Fn(usize) -> bool,
) -> (usize, bool, f64) {
    let ranked: Vec<usize> = filters::order(probs).into_iter().filter(|&j| keep(j)).collect();
    let lp = |j: usize| if p32[j] > 0.0 { (p32[j] as f64).ln() } else { f64::NEG_INFINITY };
    let scores: Vec<f64> = ranked
        .iter()
        .enumerate()
        .map(|(r, &j)| lp(j) + murmur::gumbel(murmur::hash(row.seed(), row.offset(), r as u32)))
        .collect();
    match ranked.get(argmax(&scores)) {
        Some(&token) => (token, lp(token) > f64::NEG_INFINITY, lp(token)),
        None => (0, false, f64::NEG_INFINITY),
    }
}

/// SGLang's seeded scores of one row: `logprob + g(hash(seed, position, column))` in float64
/// (greedy rows: the log-probabilities alone).
pub fn seeded_scores(logprobs: &[f64], row: &RowParams) -> Vec<f64> {
    logprobs
        .iter()
        .enumerate()
        .map(|(j, &lp)| {
            // NaN and +inf are not log-probabilities: never chosen.
            let lp = if lp.is_nan() || lp == f64::INFINITY { f64::NEG_INFINITY } else { lp };
            if row.is_sampled() {
                lp + murmur::gumbel(murmur::hash(row.seed(), row.offset(), j as u32))
            } else {
                lp
            }
        })
        .collect()
}

/// What the race compares for each column of one row.
///
/// From logits: `l / T + Gumbel`, where `l / T` rounded to f32 (every backend's `z`) is -inf
/// never wins: a finite logit whose scaled value overflows has no probability, as in softmax;
/// from probabilities: `p / Exponential` (negative, infinite or NaN `p` never wins); greedy rows:
/// the values themselves. The noise is the row's Philox stream.
pub fn race_scores(values: &[f64], row: &RowParams, from_probs: bool) -> Vec<f64> {
    values
        .iter()
        .enumerate()
        .map(|(j, &x)| {
            let invalid = if from_probs {
                !(0.0..f64::INFINITY).contains(&x)
            } else {
                row.is_sampled() && x as f32 / row.temperature == f32::NEG_INFINITY
            };
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
