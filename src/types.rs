//! The shapes, element types and per-row parameters that every backend shares.

use crate::error::{Error, Result};
use bytemuck::{Pod, Zeroable};

/// `batch` rows of `vocab` values, row `r` starting at element `r * stride`. A stride above the
/// vocabulary covers padded vocabularies (a model's 151936 columns of which 151643 are tokens).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Rows (requests) in the batch.
    pub batch: usize,
    /// Columns of each row that are tokens.
    pub vocab: usize,
    /// Elements from the start of one row to the next (at least `vocab`).
    pub stride: usize,
}

impl Shape {
    /// Rows packed back to back.
    pub fn dense(batch: usize, vocab: usize) -> Self {
        Shape { batch, vocab, stride: vocab }
    }

    /// Elements a buffer of this shape must hold: the last row need not be padded.
    pub fn elements(&self) -> usize {
        (self.batch - 1) * self.stride + self.vocab
    }

    /// Checks that the shape can be launched: non-empty, stride at least the vocabulary, and
    /// every element index within the 32-bit range the kernels index with.
    pub fn validate(&self) -> Result<()> {
        if self.batch == 0 {
            return Err(Error::Shape("batch is 0; a call needs at least one row".into()));
        }
        if self.vocab == 0 {
            return Err(Error::Shape("vocab is 0; a row needs at least one column".into()));
        }
        if self.stride < self.vocab {
            return Err(Error::Shape(format!("stride {} is below vocab {}", self.stride, self.vocab)));
        }
        let last = (self.batch as u128) * (self.stride as u128);
        if last > u32::MAX as u128 {
            return Err(Error::Shape(format!(
                "batch {} x stride {} = {last} elements exceeds the 32-bit indexing limit ({}); split the batch",
                self.batch,
                self.stride,
                u32::MAX
            )));
        }
        Ok(())
    }
}

/// Per-row parameters, one 48-byte record per row, as the kernels read them.
///
/// `seed` and `offset` key the row's noise (see [`crate::reference::philox`]): an engine passes the
/// request's seed and its decode step, so a token never depends on the row it sits in.
/// The filters (top-k, top-p, min-p and their order) are read by the filter kernels and by
/// [`crate::Backend::sample`]; a zeroed record is a greedy row without filters.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct RowParams {
    /// Temperature; below [`GREEDY_EPS`] the row is greedy.
    pub temperature: f32,
    /// Which sampler the unified kernels run for the row ([`RowMode`]).
    mode: u32,
    /// Keep the `top_k` most likely tokens; 0 or `u32::MAX`: no top-k.
    top_k: u32,
    /// Keep the tokens whose mass before them is at most `top_p`; 1: no top-p.
    top_p: f32,
    /// Keep the tokens at least `min_p` times as likely as the most likely; 0: no min-p.
    min_p: f32,
    /// [`crate::generated::ORDER_TOP_K_FIRST`], [`crate::generated::ORDER_MIN_P_FIRST`], or 0 for
    /// joint.
    order: u32,
    /// [`crate::generated::HASH_SORTED_RANK`] ([`SeededHash::SortedRank`]), or 0.
    hash: u32,
    /// 0 (the routing's choice), [`crate::generated::PATH_ONE_READ`] or
    /// [`crate::generated::PATH_FILTER_KERNEL`] ([`FilterPath`]).
    path: u32,
    seed: [u32; 2],
    offset: [u32; 2],
}

// The kernels read the record by word index: the layout must be the one the IR declares.
const _: () = {
    use crate::generated as g;
    use std::mem::offset_of;
    assert!(size_of::<RowParams>() == 4 * g::ROW_WORDS);
    assert!(offset_of!(RowParams, temperature) == 4 * g::WORD_TEMPERATURE);
    assert!(offset_of!(RowParams, mode) == 4 * g::WORD_MODE);
    assert!(offset_of!(RowParams, top_k) == 4 * g::WORD_TOP_K);
    assert!(offset_of!(RowParams, top_p) == 4 * g::WORD_TOP_P);
    assert!(offset_of!(RowParams, min_p) == 4 * g::WORD_MIN_P);
    assert!(offset_of!(RowParams, order) == 4 * g::WORD_ORDER);
    assert!(offset_of!(RowParams, hash) == 4 * g::WORD_HASH);
    assert!(offset_of!(RowParams, path) == 4 * g::WORD_PATH);
    assert!(offset_of!(RowParams, seed) == 4 * g::WORD_SEED);
    assert!(offset_of!(RowParams, offset) == 4 * g::WORD_OFFSET);
};

/// Which sampler a row uses in [`crate::Backend::sample`]: one launch serves every mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RowMode {
    /// The Philox race from logits (greedy below [`GREEDY_EPS`]).
    Race,
    /// SGLang's seeded float64 race (`--enable-deterministic-inference`).
    Seeded,
}

/// Temperatures below this are greedy, as in SGLang (`_SAMPLING_EPS`).
pub const GREEDY_EPS: f32 = crate::generated::GREEDY_EPS;

impl RowParams {
    /// A row sampled at `temperature` with the noise of request `seed` at step `offset`.
    pub fn new(temperature: f32, seed: u64, offset: u64) -> Self {
        RowParams {
            temperature,
            mode: 0,
            top_k: NO_TOP_K,
            top_p: 1.0,
            min_p: 0.0,
            order: 0,
            hash: 0,
            path: 0,
            seed: [seed as u32, (seed >> 32) as u32],
            offset: [offset as u32, (offset >> 32) as u32],
        }
    }
    /// A row of the seeded float64 sampler: SGLang hashes the low 32 bits of `position` (the
    /// position of the token being decoded, or of the last input token in prefill).
    pub fn seeded(temperature: f32, seed: u64, position: u64) -> Self {
        RowParams { mode: crate::generated::MODE_SEEDED, ..Self::new(temperature, seed, position) }
    }
    /// The row's sampler.
    pub fn mode(&self) -> RowMode {
        if self.mode == crate::generated::MODE_SEEDED {
            RowMode::Seeded
        } else {
            RowMode::Race
        }
    }
    /// A greedy row: no noise, the lowest index among the largest logits.
    pub fn greedy() -> Self {
        Self::new(0.0, 0, 0)
    }
    /// The request's seed.
    pub fn seed(&self) -> u64 {
        self.seed[0] as u64 | (self.seed[1] as u64) << 32
    }
    /// The step (offset) the noise is drawn at; the position, for the seeded sampler.
    pub fn offset(&self) -> u64 {
        self.offset[0] as u64 | (self.offset[1] as u64) << 32
    }
    /// Whether the row draws noise (temperature at or above [`GREEDY_EPS`]; NaN is greedy).
    pub fn is_sampled(&self) -> bool {
        self.temperature >= GREEDY_EPS
    }
    /// The same row at another step (offset): the next decode step's noise.
    pub fn with_offset(self, offset: u64) -> Self {
        RowParams { offset: [offset as u32, (offset >> 32) as u32], ..self }
    }
    /// Keep only the `k` most likely tokens (ties to the lower index); `k >= vocab` keeps all.
    pub fn with_top_k(self, k: u32) -> Self {
        RowParams { top_k: k, ..self }
    }
    /// Keep the tokens whose probability mass ranked strictly before them is at most `p`, in
    /// (0, 1]; 1 keeps all.
    pub fn with_top_p(self, p: f32) -> Self {
        RowParams { top_p: p, ..self }
    }
    /// Keep the tokens at least `p` times as likely as the most likely, `p` in [0, 1].
    pub fn with_min_p(self, p: f32) -> Self {
        RowParams { min_p: p, ..self }
    }
    /// How top-k and top-p combine (joint unless set).
    pub fn with_order(self, order: Order) -> Self {
        let order = match order {
            Order::Joint => 0,
            Order::TopKFirst => crate::generated::ORDER_TOP_K_FIRST,
            Order::MinPFirst => crate::generated::ORDER_MIN_P_FIRST,
        };
        RowParams { order, ..self }
    }
    /// What a seeded row's race inside its filters hashes (the vocabulary id unless set); rows
    /// without a filter, or not seeded, hash the vocabulary id whatever this says, as SGLang's
    /// unfiltered `multinomial_with_seed` does.
    pub fn with_seeded_hash(self, hash: SeededHash) -> Self {
        let hash = match hash {
            SeededHash::VocabId => 0,
            SeededHash::SortedRank => crate::generated::HASH_SORTED_RANK,
        };
        RowParams { hash, ..self }
    }
    /// The row's hashing, as set by [`with_seeded_hash`](Self::with_seeded_hash).
    pub fn seeded_hash(&self) -> SeededHash {
        if self.hash == crate::generated::HASH_SORTED_RANK {
            SeededHash::SortedRank
        } else {
            SeededHash::VocabId
        }
    }
    /// Forces the device path of the row's filters (see [`FilterPath`]); the token is the same
    /// on every path.
    pub fn with_filter_path(self, path: FilterPath) -> Self {
        let path = match path {
            FilterPath::Auto => 0,
            FilterPath::OneRead => crate::generated::PATH_ONE_READ,
            FilterPath::FilterKernel => crate::generated::PATH_FILTER_KERNEL,
        };
        RowParams { path, ..self }
    }
    /// The path the row asks for, as set by [`with_filter_path`](Self::with_filter_path).
    pub fn filter_path(&self) -> FilterPath {
        match self.path {
            crate::generated::PATH_ONE_READ => FilterPath::OneRead,
            crate::generated::PATH_FILTER_KERNEL => FilterPath::FilterKernel,
            _ => FilterPath::Auto,
        }
    }
    /// Whether the row's filtered race hashes ranks: seeded, sampled, with a filter and
    /// [`SeededHash::SortedRank`].
    pub fn hashes_ranks(&self) -> bool {
        self.mode() == RowMode::Seeded
            && self.seeded_hash() == SeededHash::SortedRank
            && self.is_sampled()
            && self.has_filters()
    }
    /// The row's filters as the reference computes them (raw encodings read as the kernels read
    /// them: top-k 0 is none, top-p outside (0, 1) is none, min-p at most 0 is none).
    pub fn filters(&self) -> Filters {
        Filters {
            top_k: (self.top_k != 0 && self.top_k != NO_TOP_K).then_some(self.top_k as usize),
            top_p: if self.top_p > 0.0 && self.top_p < 1.0 { self.top_p as f64 } else { 1.0 },
            min_p: if self.min_p > 0.0 { self.min_p.min(1.0) as f64 } else { 0.0 },
            order: match self.order {
                crate::generated::ORDER_TOP_K_FIRST => Order::TopKFirst,
                crate::generated::ORDER_MIN_P_FIRST => Order::MinPFirst,
                _ => Order::Joint,
            },
        }
    }
    /// Whether any filter is set (top-k, top-p below 1 or min-p above 0).
    pub fn has_filters(&self) -> bool {
        self.filters().is_active()
    }
    /// Whether the device backends sample this row of `vocab` logits on the one-read path: the
    /// kernels' own rule (`one_read_row` in `xtask/src/kernels/filter_top_k.rs`, lowered to Rust
    /// as `generated::filter_route`), written once. A sampled row whose top-k is below
    /// the vocabulary and at most [`ONE_READ_TOP_K`], in any order, reads once where its `k + 1`
    /// largest tokens decide it. A row of top-p, min-p or a larger top-k without such a top-k
    /// (joint) is *capped*: min-p alone reads once where the parts' lists or races hold its set
    /// (twice through the cut otherwise: [`may_take_cut`](Self::may_take_cut)), and top-p or the
    /// larger top-k read twice ([`takes_top_p_cut`](Self::takes_top_p_cut)), unless the row
    /// [hashes ranks](Self::hashes_ranks), which the cut cannot give. The path does not take
    /// top-p after a prefix (top-k first with a top-k above the cap, min-p first with min-p and
    /// top-p), nor a row forced onto the filter kernels ([`FilterPath::FilterKernel`]): they take
    /// the filter kernels' passes. A row the path takes but cannot decide reads once or twice
    /// more than those passes (the path's reads, then the filter kernel's body).
    pub fn takes_one_read(&self, vocab: usize) -> bool {
        self.route(vocab)[0]
    }
    /// Whether the row [takes the one-read path](Self::takes_one_read) for its top-p or its
    /// top-k above [`ONE_READ_TOP_K`]: where the set ends is found from a histogram of the first
    /// read and a second read split over workgroups (a launch between the parts and the merge).
    pub fn takes_top_p_cut(&self, vocab: usize) -> bool {
        self.route(vocab)[1]
    }
    /// Whether the row may take the top-p cut's launch: a row that
    /// [takes it](Self::takes_top_p_cut), or min-p alone unranked, which takes it where its
    /// parts find its set longer than their lists (a seeded flat row's: min-p 0.05 keeps all of
    /// it; an unseeded one's parts race it instead).
    /// A batch without such a row needs no cut launch.
    pub fn may_take_cut(&self, vocab: usize) -> bool {
        let [_, top_p, min_p] = self.route(vocab);
        top_p || min_p
    }
    /// [`crate::generated::filter_route`] of the record over `vocab` columns.
    fn route(&self, vocab: usize) -> [bool; 3] {
        let parts = one_read_parts(vocab);
        crate::generated::filter_route(bytemuck::cast_ref(self), u32::try_from(vocab).unwrap_or(u32::MAX), parts)
    }
}

/// Parts per row of the one-read path: every part at most `TOP_K_PART_COLS` columns, so it fits
/// the parts kernel's workgroup array.
pub(crate) fn one_read_parts(vocab: usize) -> u32 {
    vocab.div_ceil(crate::generated::TOP_K_PART_COLS).max(1) as u32
}

/// The top-k value of a row without top-k.
const NO_TOP_K: u32 = u32::MAX;

mod sealed {
    pub trait Sealed {}
}

/// What a device backend needs of an element type (cudarc's traits, when CUDA is built).
#[cfg(feature = "cuda")]
pub trait DeviceElement: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits {}
/// What a device backend needs of an element type (cudarc's traits, when CUDA is built).
#[cfg(not(feature = "cuda"))]
pub trait DeviceElement {}

/// Types a backend buffer may hold.
pub trait Element: Pod + Send + Sync + std::fmt::Debug + DeviceElement + sealed::Sealed {
    /// Checks values on the host before they reach a device (row parameters have rules).
    fn validate(_data: &[Self]) -> Result<()> {
        Ok(())
    }
}

macro_rules! element {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl DeviceElement for $t {}
        impl Element for $t {}
    )*};
}
element!(f32, f64, u32, half::f16, half::bf16);

impl sealed::Sealed for RowParams {}
impl DeviceElement for RowParams {}
impl Element for RowParams {
    /// SGLang's rule: a temperature is a non-negative finite number (NaN and infinities are
    /// refused here, before any launch, naming the row).
    fn validate(rows: &[Self]) -> Result<()> {
        for (row, p) in rows.iter().enumerate() {
            let fail =
                |field: &'static str, value: String, rule: &'static str| Err(Error::Param { row, field, value, rule });
            if !(p.temperature.is_finite() && p.temperature >= 0.0) {
                return fail("temperature", p.temperature.to_string(), "must be a non-negative finite number");
            }
            if p.top_k == 0 {
                return fail("top_k", "0".into(), "must be at least 1 (u32::MAX for none)");
            }
            if !(p.top_p > 0.0 && p.top_p <= 1.0) {
                return fail("top_p", p.top_p.to_string(), "must be in (0, 1]");
            }
            if !(0.0..=1.0).contains(&p.min_p) {
                return fail("min_p", p.min_p.to_string(), "must be in [0, 1]");
            }
            if p.order > crate::generated::ORDER_MIN_P_FIRST {
                return fail("order", p.order.to_string(), "must be 0 (joint), 1 (top-k first) or 2 (min-p first)");
            }
            if p.hash > crate::generated::HASH_SORTED_RANK {
                return fail("hash", p.hash.to_string(), "must be 0 (vocabulary id) or 1 (sorted rank)");
            }
        }
        Ok(())
    }
}

#[cfg(feature = "cuda")]
// SAFETY: RowParams is `repr(C)` plain data of 32-bit fields, as the kernels read it.
unsafe impl cudarc::driver::DeviceRepr for RowParams {}
#[cfg(feature = "cuda")]
// SAFETY: all-zero bits are a valid RowParams (a greedy row).
unsafe impl cudarc::driver::ValidAsZeroBits for RowParams {}

/// What SGLang's seeded race hashes, per row, when the row has a filter (see
/// [`RowParams::with_seeded_hash`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SeededHash {
    /// The token's vocabulary id, as SGLang's unfiltered path does: a token's noise does not
    /// move when the filters change. The default.
    #[default]
    VocabId,
    /// The token's rank in its kept set (probability descending, ties to the lower index), as
    /// SGLang's sort-based filtered path (`top_k_top_p_min_p_sampling_from_probs_torch`) does,
    /// with its log-probabilities: SGLang's token, for a kept set of any length.
    SortedRank,
}

/// Which device path samples a filtered row ([`RowParams::with_filter_path`]). Every path gives
/// the same token; forcing one is for tests, benchmarks and replaying an engine's dump
/// (`--filter-path` on the command line). The CPU backend, the oracle, has one path. The third
/// device path, the portable lowering for devices without float64, 64-bit integers or 32 KiB
/// of workgroup memory, is a backend's, not a row's (`WgpuBackend::with_portable_filters`).
/// docs/filters-design.md draws the paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FilterPath {
    /// The routing's choice: the one-read path where it takes the row
    /// ([`RowParams::takes_one_read`]), else the filter kernels.
    #[default]
    Auto,
    /// The one-read path (`Sampler::step`): a row it cannot decide takes the filter kernel's
    /// body inside its merge launch, the path's one fallback edge.
    OneRead,
    /// The filter kernels (the one-workgroup radix select, or its split over workgroups).
    FilterKernel,
}

/// The order in which the filters apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Order {
    /// SGLang's torch path: every filter on the original distribution; the set is their
    /// intersection.
    Joint,
    /// FlashInfer's: top-p measured on the distribution renormalized over the top-k set (min-p
    /// is a ratio to the maximum, which renormalizing does not change, and is not in that mass).
    TopKFirst,
    /// vLLM v1's: min-p first (a logits processor that drops the tokens below it), then top-k,
    /// then top-p measured on the distribution renormalized over what min-p and top-k kept.
    /// The same as [`Order::TopKFirst`] where min-p is off.
    MinPFirst,
}

/// One row's filters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Filters {
    /// Keep the `k` first tokens of the order (`None`, or `k` at least the vocabulary: all).
    pub top_k: Option<usize>,
    /// Keep a token when the mass ranked strictly before it is at most `top_p` (1: all).
    pub top_p: f64,
    /// Keep a token whose probability is at least `min_p` times the largest (0: all).
    pub min_p: f64,
    /// How top-k and top-p combine.
    pub order: Order,
}

impl Filters {
    /// Whether any filter can drop a token.
    pub fn is_active(&self) -> bool {
        self.top_k.is_some() || self.top_p < 1.0 || self.min_p > 0.0
    }
    /// Whether top-p is measured on the mass of a prefix that another filter keeps first (a
    /// top-k below `vocab` top-k first; a top-k or min-p, min-p first), rather than the row's:
    /// the filter kernels find that mass with a select of its own before top-p's.
    pub fn top_p_after_a_prefix(&self, vocab: usize) -> bool {
        let k = self.top_k.is_some_and(|k| k < vocab);
        self.top_p < 1.0
            && match self.order {
                Order::Joint => false,
                Order::TopKFirst => k,
                Order::MinPFirst => k || self.min_p > 0.0,
            }
    }
}

/// The largest top-k the device backends' one-read path takes (`filter_top_k.rs` in xtask;
/// see [`RowParams::takes_one_read`]).
pub const ONE_READ_TOP_K: usize = crate::generated::TOP_K_CAP as usize;

/// Whose order and float32 arithmetic a row's stage follows (docs/logits-stage.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Definitions {
    /// vLLM v1: bitmask and bans, logit bias, then repetition, `l - f * count` and
    /// `l - presence`. The default.
    #[default]
    Vllm,
    /// SGLang: frequency (accumulated a token at a time), presence and min-tokens summed into
    /// one term and added, repetition, the grammar mask, then logit bias.
    Sglang,
}

/// Which tokens the repetition penalty applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RepetitionScope {
    /// The prompt's and the output's (vLLM's; [`Definitions::Vllm`]'s default).
    PromptAndOutput,
    /// The output's only (SGLang's; [`Definitions::Sglang`]'s default).
    Output,
}

const FLAG_SGLANG: u32 = 1;
const FLAG_OUTPUT_ONLY: u32 = 2;

/// One row's penalties and definitions, 16 bytes of plain data; a zeroed record is not neutral
/// (repetition 0 is refused): make rows with [`StageRow::vllm`] or [`StageRow::sglang`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct StageRow {
    repetition: f32,
    frequency: f32,
    presence: f32,
    flags: u32,
}

impl Default for StageRow {
    fn default() -> Self {
        Self::vllm()
    }
}

impl StageRow {
    /// No penalties, vLLM's definitions.
    pub fn vllm() -> Self {
        StageRow { repetition: 1.0, frequency: 0.0, presence: 0.0, flags: 0 }
    }
    /// No penalties, SGLang's definitions (repetition over the output only).
    pub fn sglang() -> Self {
        StageRow { flags: FLAG_SGLANG | FLAG_OUTPUT_ONLY, ..Self::vllm() }
    }
    /// Divide a positive logit of a repeated token by `penalty`, multiply any other (1: none).
    pub fn with_repetition(self, penalty: f32) -> Self {
        StageRow { repetition: penalty, ..self }
    }
    /// Subtract `penalty` times the token's output count.
    pub fn with_frequency(self, penalty: f32) -> Self {
        StageRow { frequency: penalty, ..self }
    }
    /// Subtract `penalty` from every token in the output.
    pub fn with_presence(self, penalty: f32) -> Self {
        StageRow { presence: penalty, ..self }
    }
    /// Override the definitions' repetition scope.
    pub fn with_repetition_scope(self, scope: RepetitionScope) -> Self {
        let flags = match scope {
            RepetitionScope::PromptAndOutput => self.flags & !FLAG_OUTPUT_ONLY,
            RepetitionScope::Output => self.flags | FLAG_OUTPUT_ONLY,
        };
        StageRow { flags, ..self }
    }
    /// The repetition penalty (1: none).
    pub fn repetition(&self) -> f32 {
        self.repetition
    }
    /// The frequency penalty.
    pub fn frequency(&self) -> f32 {
        self.frequency
    }
    /// The presence penalty.
    pub fn presence(&self) -> f32 {
        self.presence
    }
    /// Whose order and arithmetic the row follows.
    pub fn definitions(&self) -> Definitions {
        if self.flags & FLAG_SGLANG != 0 {
            Definitions::Sglang
        } else {
            Definitions::Vllm
        }
    }
    /// Which tokens the repetition penalty applies to.
    pub fn repetition_scope(&self) -> RepetitionScope {
        if self.flags & FLAG_OUTPUT_ONLY != 0 {
            RepetitionScope::Output
        } else {
            RepetitionScope::PromptAndOutput
        }
    }
    /// The first penalty the row sets, by name.
    pub(crate) fn penalty(&self) -> Option<&'static str> {
        [
            (self.repetition != 1.0, "repetition penalty"),
            (self.frequency != 0.0, "frequency penalty"),
            (self.presence != 0.0, "presence penalty"),
        ]
        .into_iter()
        .find_map(|(set, name)| set.then_some(name))
    }
    /// Penalties are finite, repetition above 0, and the flags are the builders'.
    pub(crate) fn validate(&self, row: usize) -> Result<()> {
        let fail = |field: &'static str, value: f32, rule: &'static str| {
            Err(Error::Param { row, field, value: value.to_string(), rule })
        };
        if !(self.repetition.is_finite() && self.repetition > 0.0) {
            return fail("repetition_penalty", self.repetition, "must be a finite number above 0 (1: none)");
        }
        if !self.frequency.is_finite() {
            return fail("frequency_penalty", self.frequency, "must be finite");
        }
        if !self.presence.is_finite() {
            return fail("presence_penalty", self.presence, "must be finite");
        }
        if self.flags > (FLAG_SGLANG | FLAG_OUTPUT_ONLY) {
            return fail("flags", self.flags as f32, "unknown definition flags");
        }
        Ok(())
    }
}

/// Which values a call's log-probabilities are (docs/logprobs.md): vLLM's four
/// `LogprobsMode`s and SGLang's default. Every mode reads NaN as -inf, as the samplers do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LogprobsMode {
    /// log_softmax of the logits as given, before the logits stage and the temperature (vLLM's
    /// default, and the crate's).
    #[default]
    RawLogprobs,
    /// The logits as given.
    RawLogits,
    /// log_softmax of the processed logits ([`ProcessedLogits`](Self::ProcessedLogits)).
    ProcessedLogprobs,
    /// The logits after the stage, divided by the row's temperature (1 for greedy rows), with
    /// every token outside the row's kept set (top-k, top-p, min-p; none for greedy rows) at -inf.
    ProcessedLogits,
    /// SGLang's: the float32 log of the float32 softmax of the staged `l / T` over the whole row
    /// (before the filters), -inf clamped to `f32::MIN`; greedy rows log_softmax of the staged
    /// logits, unclamped.
    Sglang,
}

impl LogprobsMode {
    /// Every mode, in the order of the enum.
    pub const ALL: [LogprobsMode; 5] = [
        LogprobsMode::RawLogprobs,
        LogprobsMode::RawLogits,
        LogprobsMode::ProcessedLogprobs,
        LogprobsMode::ProcessedLogits,
        LogprobsMode::Sglang,
    ];

    /// The mode's name: vLLM's spelling (`raw_logprobs`, ...), and `sglang`.
    pub fn name(self) -> &'static str {
        match self {
            LogprobsMode::RawLogprobs => "raw_logprobs",
            LogprobsMode::RawLogits => "raw_logits",
            LogprobsMode::ProcessedLogprobs => "processed_logprobs",
            LogprobsMode::ProcessedLogits => "processed_logits",
            LogprobsMode::Sglang => "sglang",
        }
    }

    /// The mode of a [name](Self::name).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether the mode reads the logits after the stage (otherwise as given).
    pub fn is_processed(self) -> bool {
        !matches!(self, LogprobsMode::RawLogprobs | LogprobsMode::RawLogits)
    }
}
