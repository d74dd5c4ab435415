//! The logits stage's inputs: what an engine changes in the logits before it samples (repetition,
//! frequency and presence penalties, logit bias, banned tokens such as min-tokens' stop ids, the
//! grammar's allowed-token bitmask, NaN as -1e5), given beside the row records of a call.
//!
//! Per-row scalars are a [`StageRow`] on the host, like [`RowParams`](crate::RowParams); the
//! token lists are sparse (CSR: row `r`'s entries are `offsets[r]..offsets[r + 1]`), never a
//! dense `[batch, vocab]` tensor, which would cost another full read; the bitmask is xgrammar's
//! packed `[batch, ceil(vocab / 32)]` words. [`crate::Sampler::step_staged`] takes them; the
//! oracle is [`crate::reference::stage`]. docs/logits-stage.md has the definitions.

use crate::backend::AtRead;
use crate::backend::{need, Backend};
use crate::error::{Error, Result};
use crate::reference::stage::RowStage;
use crate::types::{Shape, StageRow};

/// Rows' token lists in CSR layout: row `r`'s entries are `ids[offsets[r]..offsets[r + 1]]`,
/// each range clipped to `ids` (a reversed range is empty), ids at or above the vocabulary ignored.
pub struct TokenLists<'a, B: Backend + ?Sized> {
    /// `batch + 1` entry offsets.
    pub offsets: &'a B::Buffer<u32>,
    /// The token ids.
    pub ids: &'a B::Buffer<u32>,
}

/// [`TokenLists`] with a value per entry (`values` as long as `ids`).
pub struct ValuedLists<'a, B: Backend + ?Sized, V: crate::types::Element> {
    /// The rows' entries.
    pub lists: TokenLists<'a, B>,
    /// One value per id.
    pub values: &'a B::Buffer<V>,
}

/// One call's logits stage: a [`StageRow`] per row on the host and the optional sparse lists and
/// bitmask on the backend. Built with [`LogitsStage::new`] and the `with_` methods.
pub struct LogitsStage<'a, B: Backend + ?Sized> {
    rows: &'a [StageRow],
    bias: Option<ValuedLists<'a, B, f32>>,
    prompt: Option<TokenLists<'a, B>>,
    output: Option<ValuedLists<'a, B, u32>>,
    banned: Option<TokenLists<'a, B>>,
    allowed: Option<&'a B::Buffer<u32>>,
    nan_as_finite: bool,
}

impl<'a, B: Backend + ?Sized> LogitsStage<'a, B> {
    /// The stage of a call whose row `r` has penalties `rows[r]` and no lists yet.
    pub fn new(rows: &'a [StageRow]) -> Self {
        LogitsStage { rows, bias: None, prompt: None, output: None, banned: None, allowed: None, nan_as_finite: false }
    }
    /// Logit bias: `biases[i]` added to column `ids[i]` of its row.
    pub fn with_logit_bias(
        self,
        offsets: &'a B::Buffer<u32>,
        ids: &'a B::Buffer<u32>,
        biases: &'a B::Buffer<f32>,
    ) -> Self {
        LogitsStage { bias: Some(ValuedLists { lists: TokenLists { offsets, ids }, values: biases }), ..self }
    }
    /// The prompts' token ids (for the repetition penalty over the prompt).
    pub fn with_prompt(self, offsets: &'a B::Buffer<u32>, ids: &'a B::Buffer<u32>) -> Self {
        LogitsStage { prompt: Some(TokenLists { offsets, ids }), ..self }
    }
    /// The outputs' distinct token ids and how often each was generated.
    pub fn with_output(self, offsets: &'a B::Buffer<u32>, ids: &'a B::Buffer<u32>, counts: &'a B::Buffer<u32>) -> Self {
        LogitsStage { output: Some(ValuedLists { lists: TokenLists { offsets, ids }, values: counts }), ..self }
    }
    /// Columns set to -inf: min-tokens' stop ids for the rows short of their minimum.
    pub fn with_banned(self, offsets: &'a B::Buffer<u32>, ids: &'a B::Buffer<u32>) -> Self {
        LogitsStage { banned: Some(TokenLists { offsets, ids }), ..self }
    }
    /// The grammar's allowed-token bitmask, `[batch, ceil(vocab / 32)]` words (xgrammar's int32
    /// bits; `bytemuck::cast_slice` turns `&[i32]` into `&[u32]`). A row with nothing allowed
    /// samples nothing: status 0.
    pub fn with_allowed(self, bitmask: &'a B::Buffer<u32>) -> Self {
        LogitsStage { allowed: Some(bitmask), ..self }
    }
    /// Replace NaN by -1e5 after the stage, as SGLang's `--enable-nan-detection` does.
    pub fn with_nan_as_finite(self) -> Self {
        LogitsStage { nan_as_finite: true, ..self }
    }

    /// What the call asks of the stage, by name, if anything changes the logits.
    pub fn first_feature(&self) -> Option<&'static str> {
        self.sparse_feature().or_else(|| {
            [(self.allowed.is_some(), "allowed-token bitmask"), (self.nan_as_finite, "NaN as -1e5")]
                .into_iter()
                .find_map(|(set, name)| set.then_some(name))
        })
    }

    /// The first input, by name, that the device kernels do not read with the logits (the
    /// penalties and the sparse lists): the device backends refuse a call that has one
    /// ([`Error::UnsupportedStage`]).
    pub fn sparse_feature(&self) -> Option<&'static str> {
        let penalty = self.rows.iter().find_map(StageRow::penalty);
        penalty.or_else(|| {
            [(self.bias.is_some(), "logit bias"), (self.banned.is_some(), "banned tokens (min-tokens)")]
                .into_iter()
                .find_map(|(set, name)| set.then_some(name))
        })
    }

    /// What the device kernels apply as they read each logit.
    pub(crate) fn at_read(&self) -> AtRead<'a, B> {
        AtRead { allowed: self.allowed, nan_as_finite: self.nan_as_finite }
    }

    /// Checks the rows' parameters and every buffer's length against `shape`.
    pub fn validate(&self, shape: Shape) -> Result<()> {
        if self.rows.len() != shape.batch {
            return Err(Error::Shape(format!("{} stage rows for a batch of {}", self.rows.len(), shape.batch)));
        }
        for (row, r) in self.rows.iter().enumerate() {
            r.validate(row)?;
        }
        let lists = [
            (self.bias.as_ref().map(|v| (&v.lists, B::len(v.values))), "logit bias"),
            (self.prompt.as_ref().map(|l| (l, usize::MAX)), "prompt ids"),
            (self.output.as_ref().map(|v| (&v.lists, B::len(v.values))), "output ids"),
            (self.banned.as_ref().map(|l| (l, usize::MAX)), "banned ids"),
        ];
        for (list, name) in lists {
            if let Some((l, values)) = list {
                need(name, B::len(l.offsets), shape.batch + 1)?;
                need(name, values, B::len(l.ids))?;
            }
        }
        if let Some(mask) = self.allowed {
            need("allowed-token bitmask", B::len(mask), shape.batch * shape.vocab.div_ceil(32))?;
        }
        Ok(())
    }
}

/// Row `r`'s entries of CSR lists whose arrays are host slices (clipped, as [`TokenLists`] says).
fn row_range(offsets: &[u32], len: usize, r: usize) -> std::ops::Range<usize> {
    let start = (offsets[r] as usize).min(len);
    start..(offsets[r + 1] as usize).clamp(start, len)
}

impl<'a> LogitsStage<'a, super::cpu::CpuBackend> {
    /// Row `r`'s inputs as the oracle takes them (the CPU backend's buffers are host vectors).
    /// The stage must have been [validated](Self::validate) for a shape with more than `r` rows.
    pub(crate) fn row(&self, shape: Shape, r: usize) -> RowStage<'a> {
        let words = shape.vocab.div_ceil(32);
        let ids = |l: &TokenLists<'a, super::cpu::CpuBackend>| -> &'a [u32] {
            let ids: &'a [u32] = l.ids;
            &ids[row_range(l.offsets, ids.len(), r)]
        };
        let (bias_ids, bias_values): (&[u32], &[f32]) = match &self.bias {
            Some(v) => (ids(&v.lists), &v.values[row_range(v.lists.offsets, v.lists.ids.len(), r)]),
            None => (&[], &[]),
        };
        let (output_ids, output_counts): (&[u32], &[u32]) = match &self.output {
            Some(v) => (ids(&v.lists), &v.values[row_range(v.lists.offsets, v.lists.ids.len(), r)]),
            None => (&[], &[]),
        };
        RowStage {
            params: self.rows[r],
            bias_ids,
            bias_values,
            prompt_ids: self.prompt.as_ref().map_or(&[], ids),
            output_ids,
            output_counts,
            banned: self.banned.as_ref().map_or(&[], ids),
            allowed: self.allowed.map(|m| &m[r * words..(r + 1) * words]),
            nan_as_finite: self.nan_as_finite,
        }
    }
}
