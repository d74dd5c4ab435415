//! The logits stage on one row, as plain float32 loops: what vLLM and SGLang do to the logits
//! before they sample (penalties, logit bias, banned tokens, the grammar's allowed-token bitmask),
//! each in its engine's order and float32 arithmetic, since both engines run it as float32 torch
//! ops. docs/logits-stage.md gives the order and each formula with the engines' files.

use crate::types::{Definitions, RepetitionScope, StageRow};

/// SGLang's replacement for a NaN logit under `--enable-nan-detection`.
pub const NAN_AS: f32 = -1e5;

/// One row's inputs to the logits stage, as plain slices. Token ids at or above the row's length
/// are padding and change nothing (vLLM and SGLang pad their id lists with the vocabulary size);
/// the parallel slices (`bias_ids` and `bias_values`, `output_ids` and `output_counts`) are read
/// pairwise up to the shorter one.
#[derive(Clone, Copy, Debug, Default)]
pub struct RowStage<'a> {
    /// The row's penalties and definitions.
    pub params: StageRow,
    /// Logit bias: `bias_values[i]` is added to column `bias_ids[i]` (a column listed twice gets
    /// both).
    pub bias_ids: &'a [u32],
    /// The biases, one per id.
    pub bias_values: &'a [f32],
    /// The prompt's token ids (repeats allowed; only presence counts).
    pub prompt_ids: &'a [u32],
    /// The distinct output token ids so far (an id listed twice: its counts add).
    pub output_ids: &'a [u32],
    /// How many times each output id was generated.
    pub output_counts: &'a [u32],
    /// Columns set to -inf: min-tokens' stop ids while the row is short of its minimum (or any
    /// other ban an engine computes per step, such as vLLM's bad words).
    pub banned: &'a [u32],
    /// The grammar's packed bitmask, `ceil(len / 32)` words, bit `j % 32` of word `j / 32` set
    /// where column `j` is allowed (xgrammar's int32 layout); bits past the row are ignored.
    /// `None`: every column is allowed.
    pub allowed: Option<&'a [u32]>,
    /// Replace NaN by -1e5 after the stage (SGLang's `--enable-nan-detection`); otherwise NaN
    /// stays NaN, which the samplers never pick.
    pub nan_as_finite: bool,
}

/// The row's output counts per column (0 where never generated).
fn counts(stage: &RowStage, len: usize) -> Vec<u64> {
    let mut count = vec![0u64; len];
    for (&id, &n) in stage.output_ids.iter().zip(stage.output_counts) {
        if let Some(c) = count.get_mut(id as usize) {
            *c += n as u64;
        }
    }
    count
}

/// Whether the repetition penalty applies to each column under the row's scope.
fn repeated(stage: &RowStage, count: &[u64]) -> Vec<bool> {
    let mut seen: Vec<bool> = count.iter().map(|&c| c > 0).collect();
    if stage.params.repetition_scope() == RepetitionScope::PromptAndOutput {
        for &id in stage.prompt_ids {
            if let Some(s) = seen.get_mut(id as usize) {
                *s = true;
            }
        }
    }
    seen
}

/// Whether the bitmask allows column `j` (every column without one).
pub fn allowed(mask: Option<&[u32]>, j: usize) -> bool {
    mask.is_none_or(|m| m.get(j / 32).is_some_and(|w| w >> (j % 32) & 1 == 1))
}

/// `f` added `n` times to a float32 zero, one rounding per addition: SGLang's frequency
/// accumulator (`scatter_add_` once per generated token), which is not `f * n`.
///
/// Taken a binade at a time, so a huge `n` cannot hang: while the sum stays inside one binade the
/// grid it rounds to is fixed, so every addition adds the same amount once two in a row inside it
/// have (an exact tie to even settles after one addition), and the rest are taken at once.
pub fn running_sum(f: f32, n: u64) -> f32 {
    if f < 0.0 {
        return -running_sum(-f, n);
    }
    let binade = |x: f32| x.to_bits() >> 23;
    let (mut sum, mut left) = (0f32, n);
    let (mut last, mut before) = (f32::NAN, 0f32);
    while left > 0 {
        let next = sum + f;
        let step = next - sum;
        left -= 1;
        if step == 0.0 || !next.is_finite() {
            return next;
        }
        if step == last && binade(before) == binade(next) {
            // The binade's top, and how many more steps of `step` keep the sum and its
            // result two ulps below it (f64 holds these float32 sums exactly).
            let ulp = (f32::from_bits(next.to_bits() + 1) - next) as f64;
            let top = 2f64.powi(next.to_bits() as i32 >> 23) * 2f64.powi(-126);
            let top = if next.to_bits() >> 23 == 0 { 2f64.powi(-126) } else { top };
            let room = (top - 2.0 * ulp - f as f64 - next as f64) / step as f64;
            let jump = (room.floor() as i64 - 1).clamp(0, left as i64) as u64;
            sum = (next as f64 + jump as f64 * step as f64) as f32;
            left -= jump;
            last = f32::NAN;
            continue;
        }
        (last, before) = (step, sum);
        sum = next;
    }
    sum
}

/// The repetition penalty `r` on one logit: a positive one divided, otherwise multiplied (vLLM's
/// CUDA kernel and SGLang's `apply_scaling_penalties` agree, zero and NaN included).
fn repetition(x: f32, r: f32) -> f32 {
    if x > 0.0 {
        x / r
    } else {
        x * r
    }
}

/// Applies the stage to one row of float32 logits in place, in the order and arithmetic of the
/// row's [`Definitions`].
pub fn apply(logits: &mut [f32], stage: &RowStage) {
    let len = logits.len();
    let p = stage.params;
    let count = counts(stage, len);
    let seen = repeated(stage, &count);
    let mut banned = vec![false; len];
    for &id in stage.banned {
        if let Some(b) = banned.get_mut(id as usize) {
            *b = true;
        }
    }
    let mut bias = vec![0f32; len];
    let mut biased = vec![false; len];
    for (&id, &b) in stage.bias_ids.iter().zip(stage.bias_values) {
        if let Some(x) = bias.get_mut(id as usize) {
            *x += b;
            biased[id as usize] = true;
        }
    }
    for (j, x) in logits.iter_mut().enumerate() {
        let rep = (seen[j] && p.repetition() != 1.0).then_some(p.repetition());
        match p.definitions() {
            // vllm/v1/sample/sampler.py `apply_logits_processors`: the bitmask, the bans, the
            // bias, then `apply_penalties` (repetition, then `logits -= f * count`, then
            // `logits -= presence * (count > 0)`).
            Definitions::Vllm => {
                if !allowed(stage.allowed, j) || banned[j] {
                    *x = f32::NEG_INFINITY;
                }
                if biased[j] {
                    *x += bias[j];
                }
                if let Some(r) = rep {
                    *x = repetition(*x, r);
                }
                if count[j] > 0 {
                    *x -= p.frequency() * count[j] as f32;
                    *x -= p.presence();
                }
            }
            // SGLang's `apply_logits_bias`: the additive penalties summed into one float32
            // term (frequency accumulated one output token at a time, presence, min-tokens'
            // -inf), the repetition scaling, the grammar mask, then the bias.
            Definitions::Sglang => {
                let mut additive = 0f32;
                if count[j] > 0 {
                    additive = -running_sum(p.frequency(), count[j]) - p.presence();
                }
                if banned[j] {
                    additive = f32::NEG_INFINITY;
                }
                *x += additive;
                if let Some(r) = rep {
                    *x = repetition(*x, r);
                }
                if !allowed(stage.allowed, j) {
                    *x = f32::NEG_INFINITY;
                }
                if biased[j] {
                    *x += bias[j];
                }
            }
        }
        if stage.nan_as_finite && x.is_nan() {
            *x = NAN_AS;
        }
    }
}
