//! What every kernel shares with the host (`src/generated.rs` exports the constants, so the
//! host's layout is checked against them at compile time), and the loops they are built on:
//! - the input is `batch` rows of `vocab` values, row `r` starting at `r * stride`;
//! - `rows` holds `ROW_WORDS` u32 per row (see [`word`]): temperature (f32 bits), the row's
//!   mode, the filters' four words, the seeded race's hashing, the filter path a row asks for,
//!   seed lo, seed hi, offset lo, offset hi;
//! - params are `batch, vocab, stride, flags`; flag bit 0 asks for log-probabilities;
//! - one workgroup per row or per part of a row (rows past the grid are taken in a grid-stride
//!   loop), each invocation taking four consecutive columns per step so one Philox block serves
//!   four columns.

use super::math::is_nan;
use super::philox;
use crate::ir::*;

/// The per-row record, in u32 words (`RowParams` on the host; `src/generated.rs` exports these so
/// the host layout is checked against them at compile time).
pub const ROW_WORDS: u32 = 12;
/// Word indices in the row record.
pub mod word {
    pub const TEMPERATURE: u32 = 0;
    /// How the unified `sample_*` kernels treat the row ([`super::MODE_SEEDED`] or the race).
    pub const MODE: u32 = 1;
    /// The filters (see `filters.rs`): top-k count, top-p and min-p (f32 bits), their order.
    pub const TOP_K: u32 = 2;
    pub const TOP_P: u32 = 3;
    pub const MIN_P: u32 = 4;
    pub const ORDER: u32 = 5;
    /// What a seeded row with a filter hashes: the vocabulary id, or with
    /// [`super::HASH_SORTED_RANK`] the token's rank in its kept set (SGLang's filtered path).
    pub const HASH: u32 = 6;
    /// The filter path the row asks for: 0 the routing's choice, [`super::PATH_ONE_READ`] or
    /// [`super::PATH_FILTER_KERNEL`].
    pub const PATH: u32 = 7;
    pub const SEED_LO: u32 = 8;
    pub const SEED_HI: u32 = 9;
    pub const OFFSET_LO: u32 = 10;
    pub const OFFSET_HI: u32 = 11;
}
/// Row mode of SGLang's seeded float64 race; any other value is the Philox race (greedy below
/// [`GREEDY_EPS`]).
pub const MODE_SEEDED: u32 = 1;
/// Hash word of a seeded row whose filtered race hashes each kept token's rank (probability
/// descending, ties to the lower index), as SGLang's sort-based filtered path does; any other
/// value hashes the vocabulary id.
pub const HASH_SORTED_RANK: u32 = 1;
/// Path word of a row forced onto the one-read path: the host lists it there even where the
/// path cannot decide it, so the merge's fallback (the filter kernel's body) samples it.
pub const PATH_ONE_READ: u32 = 1;
/// Path word of a row forced onto the filter kernels: the one-read path does not take it.
pub const PATH_FILTER_KERNEL: u32 = 2;
pub const PARAMS: [&str; 4] = ["batch", "vocab", "stride", "flags"];
pub const FLAG_LOGPROBS: u32 = 1;
/// Flag bit 1 asks for a status per row: 1 if a token with a valid value was chosen, 0 if the
/// row had none (all NaN or -inf; then the token is 0, inside the vocabulary).
pub const FLAG_STATUS: u32 = 2;
/// Flag bit 2 asks the filter kernels for the number of passes each row took.
pub const FLAG_PASSES: u32 = 4;
/// Flag bit 3: the filter kernels take only the rows with a filter (the per-row sampler's
/// launch after `sample_*`, which leaves those rows to them).
pub const FLAG_FILTERED_ONLY: u32 = 8;
/// Flag bit 4: the seeded kernel takes only the seeded rows without a filter (the per-row
/// sampler's launch after `sample_*`, which leaves those rows to it).
pub const FLAG_SEEDED_ONLY: u32 = 16;
/// Flag bit 5: the filter and seeded kernels take the rows `listed[0..batch]` instead of rows
/// `0..batch` (the per-row sampler's host knows which rows have a filter or a seed, so it
/// launches only those).
pub const FLAG_ROW_LIST: u32 = 32;
/// Flag bit 6: the merge of the one-read path is also the top-p cut's launch, a workgroup per
/// part of each row, the row's last part to arrive merging it (`filter_top_k.rs`,
/// `merge_kernel`): the host sets it where the parts all run at once, so a top-p row takes two
/// launches, not three.
pub const FLAG_CUT_HERE: u32 = 64;
/// Flag bit 7: the WGSL merge dispatch of a kernel that splits rows, after the parts' dispatch
/// (`last_part.rs`): part 0 of each row merges its parts' records, and nothing else runs.
pub const FLAG_MERGE: u32 = 128;
/// Flag bits 8 to 13: a staged kernel's stage ([`STAGE_SHIFT`]).
pub const STAGE_SHIFT: u32 = 8;
pub const STAGE_BITS: u32 = 0x3f;
/// Flag bit 14: the call's allowed-token bitmask is bound as `allowed`, `[batch, ceil(vocab /
/// 32)]` words, bit `c % 32` of word `c / 32` set where column `c` may be sampled; every read of
/// a logit takes a column whose bit is clear as -inf ([`logit_at`]). Without it `allowed` is
/// bound to the input itself and never read.
pub const FLAG_ALLOWED: u32 = 1 << 14;
/// Flag bit 15: a NaN logit reads as -1e5 (SGLang's `--enable-nan-detection`), not -inf.
pub const FLAG_NAN_AS_FINITE: u32 = 1 << 15;
/// SGLang's value for a NaN logit under [`FLAG_NAN_AS_FINITE`].
pub const NAN_AS: f32 = -1e5;
/// Temperatures below this are greedy (SGLang's `_SAMPLING_EPS`).
pub const GREEDY_EPS: f32 = 1e-6;
/// No column (a race without a winner yet).
pub(super) const NONE: u32 = u32::MAX;
/// A record's top-k word for no top-k (`RowParams`'s encoding; 0 means none too).
pub(super) const NO_TOP_K: u32 = u32::MAX;

/// Element formats of an input row.
#[derive(Clone, Copy, Debug)]
pub enum Dtype {
    F32,
    F16,
    Bf16,
}

impl Dtype {
    pub const ALL: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::Bf16];
    pub fn suffix(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
        }
    }
    pub(super) fn storage(self) -> Storage {
        match self {
            Dtype::F32 => Storage::F32,
            Dtype::F16 => Storage::F16,
            Dtype::Bf16 => Storage::Bf16,
        }
    }
}

pub(super) fn buffer(name: &str, storage: Storage, writable: bool) -> BufferDecl {
    BufferDecl { name: name.to_string(), storage, writable }
}

pub(super) fn kernel(
    name: String,
    doc: &str,
    passes: u32,
    buffers: Vec<BufferDecl>,
    functions: Vec<Function>,
    body: Block,
) -> Kernel {
    Kernel {
        name,
        doc: doc.to_string(),
        passes,
        stages: 1,
        workgroup: crate::tuning::Workgroup::Fitted,
        buffers,
        params: PARAMS.iter().map(|p| p.to_string()).collect(),
        shared: vec![],
        functions,
        procedures: vec![],
        body: body.stmts,
        u64_as_words: false,
        occupancy: Occupancy::Any,
    }
}

/// The row loop: one workgroup per row, grid-stride over rows; the workgroup takes the row's
/// columns `[col_lo, col_hi)`, all of them.
pub(super) fn for_each_row(b: &mut Block, body: impl FnOnce(&mut Block)) {
    for_each_row_at(b, |slot| slot, body)
}

/// [`for_each_row`] over `batch` slots, slot `i` taking the row `row(i)`.
pub(super) fn for_each_row_at(b: &mut Block, row: impl FnOnce(Expr) -> Expr, body: impl FnOnce(&mut Block)) {
    b.for_("slot", builtin(Builtin::GroupId), param("batch"), builtin(Builtin::NumGroups), |b, slot| {
        whole_row(b, row(slot), body)
    });
}

/// [`for_each_row_at`] with `per_row` workgroups per row slot (1 or the row's parts): each
/// visits its row whole, with `part` its place among them.
pub(super) fn for_each_row_group_at(
    b: &mut Block,
    per_row: Expr,
    row: impl FnOnce(Expr) -> Expr,
    body: impl FnOnce(&mut Block),
) {
    let groups = param("batch") * per_row.clone();
    b.for_("group", builtin(Builtin::GroupId), groups, builtin(Builtin::NumGroups), |b, g| {
        let slot = b.let_("slot", Ty::U32, g.clone() / per_row.clone());
        b.let_("part", Ty::U32, g - slot.clone() * per_row);
        whole_row(b, row(slot), body)
    });
}

/// The row loop's variables for `row` taken whole, then `body`.
fn whole_row(b: &mut Block, row: Expr, body: impl FnOnce(&mut Block)) {
    let row = b.let_("row", Ty::U32, row);
    b.let_("base", Ty::U32, row * param("stride"));
    b.let_("col_lo", Ty::U32, u(0));
    b.let_("col_hi", Ty::U32, param("vocab"));
    body(b);
}

/// Words of a part's record in the `partials` buffer (see `race.rs`, `race_row`, and `combine.rs`): its
/// winner's score (f32 bits), index and scaled value (f32 bits), the winner of its +inf class
/// (noise, f32 bits) and index, that class's size, and the log-sum-exp pair `(m, s)` of its
/// scaled values (f32 bits; written with log-probabilities only).
pub const PART_WORDS: u32 = 8;
pub mod part {
    pub const BEST: u32 = 0;
    pub const BEST_I: u32 = 1;
    pub const BEST_Z: u32 = 2;
    pub const TOP: u32 = 3;
    pub const TOP_I: u32 = 4;
    pub const TOP_N: u32 = 5;
    pub const M: u32 = 6;
    pub const S: u32 = 7;
}
/// `flags >> PARTS_SHIFT` is the number of workgroups per row of the split kernels (0 reads as
/// 1). The host chooses it per call from the batch and the device's size (`src/launch.rs`).
pub const PARTS_SHIFT: u32 = 16;

/// The row loop of the kernels that split a row: `parts` workgroups per row, part `p` taking
/// the `p`-th of `parts` runs of whole quads, `[col_lo, col_hi)`; `slot` is the part's record.
/// With one part this is [`for_each_row`].
pub(crate) fn for_each_row_part(b: &mut Block, body: impl FnOnce(&mut Block)) {
    for_each_row_part_at(b, |i| i, body)
}

/// [`for_each_row_part`] over `batch` row slots, slot `i` taking the row `row(i)`; `slot` is
/// still the part's own record (`i * parts + part`).
pub(super) fn for_each_row_part_at(b: &mut Block, row: impl FnOnce(Expr) -> Expr, body: impl FnOnce(&mut Block)) {
    b.let_("parts", Ty::U32, (param("flags") >> u(PARTS_SHIFT)).max(u(1)));
    let groups = param("batch") * var("parts");
    b.for_("slot", builtin(Builtin::GroupId), groups, builtin(Builtin::NumGroups), |b, slot| {
        let index = b.let_("row_slot", Ty::U32, slot.clone() / var("parts"));
        b.let_("part", Ty::U32, slot - index.clone() * var("parts"));
        b.let_("row", Ty::U32, row(index));
        b.let_("base", Ty::U32, var("row") * param("stride"));
        let per = b.let_("quads_per_part", Ty::U32, quads_per_part(var("parts")));
        let (lo, hi) = part_columns(var("part"), per);
        b.let_("col_lo", Ty::U32, lo);
        b.let_("col_hi", Ty::U32, hi);
        body(b);
    });
}

/// The columns `[col_lo, col_hi)` of part `part` of a row split in parts of `per` quads (the
/// high end read after `col_lo` is set).
pub(super) fn part_columns(part: Expr, per: Expr) -> (Expr, Expr) {
    ((part * per.clone() * u(4)).min(param("vocab")), (var("col_lo") + per * u(4)).min(param("vocab")))
}

/// Quads (four columns) per part when a row of `vocab` columns is split in `parts`.
pub(super) fn quads_per_part(parts: Expr) -> Expr {
    let quads = (param("vocab") + u(3)) >> u(2);
    (quads + parts.clone() - u(1)) / parts
}

/// Visits this invocation's columns in `[col_lo, col_hi)` in increasing order, four
/// consecutive ones per step: `per_quad` runs once per step (with `c0`, the first column), then
/// `per_col` for each of the four columns inside the range, with the column and its place
/// (0..4) in the quad. `col_lo` is a multiple of 4, so a quad is a Philox block.
pub(super) fn for_each_column(
    b: &mut Block,
    per_quad: impl Fn(&mut Block, Expr),
    per_col: impl Fn(&mut Block, Expr, u8),
) {
    for_each_column_then(b, per_quad, per_col, None)
}

/// [`for_each_column`], with `between` (if any) run by every invocation after the workgroup's
/// first step of columns and outside any branch, so that it may hold a barrier: a floor shared
/// there serves every invocation's later columns.
pub(super) fn for_each_column_then(
    b: &mut Block,
    per_quad: impl Fn(&mut Block, Expr),
    per_col: impl Fn(&mut Block, Expr, u8),
    between: Option<&dyn Fn(&mut Block)>,
) {
    let first = var("col_lo") + builtin(Builtin::LocalId) * u(4);
    let step = builtin(Builtin::BlockSize) * u(4);
    let quad = |b: &mut Block, c0: Expr| {
        per_quad(b, c0.clone());
        for j in 0..4u8 {
            b.scope(|b| {
                let col = b.let_("col", Ty::U32, c0.clone() + u(j as u32));
                b.if_(col.clone().lt(var("col_hi")), |b| per_col(b, col, j));
            });
        }
    };
    match between {
        None => b.for_("c0", first, var("col_hi"), step, quad),
        Some(between) => {
            b.if_(first.clone().lt(var("col_hi")), |b| quad(b, first.clone()));
            between(b);
            b.for_("c0", first + step.clone(), var("col_hi"), step, quad);
        }
    }
}

/// The Philox block of the four columns from `c0`, keyed by the row's seed and offset.
pub(super) fn philox_block(c0: Expr) -> Expr {
    PhiloxKey::loaded().block(c0)
}

/// A row's Philox key and offset words (seed low and high, offset low and high).
pub(super) struct PhiloxKey([Expr; 4]);

impl PhiloxKey {
    const WORDS: [(u32, &'static str); 4] = [
        (word::SEED_LO, "pk_seed_lo"),
        (word::SEED_HI, "pk_seed_hi"),
        (word::OFFSET_LO, "pk_off_lo"),
        (word::OFFSET_HI, "pk_off_hi"),
    ];

    /// The words as loads from the row's record, where they are used.
    fn loaded() -> Self {
        PhiloxKey(Self::WORDS.map(|(k, _)| row_word(k)))
    }

    /// The words loaded once into variables, before a loop that draws blocks on some of its
    /// columns: the loop then loads only its columns (and the cost model's common path is a
    /// column's, not the record's words counted as four more columns).
    pub(super) fn bound(b: &mut Block) -> Self {
        PhiloxKey(Self::WORDS.map(|(k, name)| b.let_(name, Ty::U32, row_word(k))))
    }

    /// The Philox block of counter `c0` (a multiple of 4) under this key.
    pub(super) fn block(&self, c0: Expr) -> Expr {
        let [seed_lo, seed_hi, off_lo, off_hi] = self.0.clone();
        philox::block_for(c0, seed_lo, seed_hi, off_lo, off_hi)
    }
}

pub(super) fn row_word(k: u32) -> Expr {
    load("rows", var("row") * u(ROW_WORDS) + u(k))
}

/// Whether the row is one of SGLang's seeded sampler (its mode word).
pub(super) fn row_is_seeded() -> Expr {
    row_word(word::MODE).eq_(u(MODE_SEEDED))
}

/// Whether the row is seeded and its filtered race hashes ranks ([`HASH_SORTED_RANK`]).
pub(super) fn row_is_ranked() -> Expr {
    row_is_seeded().and(row_word(word::HASH).eq_(u(HASH_SORTED_RANK)))
}

/// Declares `temp` (the row's temperature, 1 for greedy rows) and `noisy` (not greedy).
pub(super) fn row_temperature(b: &mut Block) {
    let t = b.let_("t_raw", Ty::F32, row_word(word::TEMPERATURE).bitcast(Ty::F32));
    b.let_("noisy", Ty::Bool, t.clone().ge(f(GREEDY_EPS)));
    b.let_("temp", Ty::F32, select(var("noisy"), t, f(1.0)));
}

/// The input of a kernel that reads logits, and the allowed-token bitmask its reads apply
/// ([`FLAG_ALLOWED`]).
pub(super) fn logits_input(dtype: Dtype) -> [BufferDecl; 2] {
    [buffer("x", dtype.storage(), false), buffer("allowed", Storage::U32, false)]
}

fn flag_set(bit: u32) -> Expr {
    (param("flags") & u(bit)).ne_(u(0))
}

/// The bitmask word of column `col` of row `row`.
fn allowed_word(col: Expr) -> Expr {
    let words = (param("vocab") + u(31)) >> u(5);
    load("allowed", var("row") * words + (col >> u(5)))
}

/// The logit at index `at` of the input as every sampling read takes it: -inf where the call's
/// bitmask clears column `at - base` of row `row`, NaN as -inf (or -1e5,
/// [`FLAG_NAN_AS_FINITE`]), so NaN is never chosen unless SGLang's mode makes it a value.
/// Without [`FLAG_ALLOWED`] the word is never loaded.
pub(super) fn logit_at(at: Expr) -> Expr {
    let col = at.clone() - var("base");
    let allowed = flag_set(FLAG_ALLOWED).not().or(((allowed_word(col.clone()) >> (col & u(31))) & u(1)).ne_(u(0)));
    select(allowed, clean(load("x", at)), f(f32::NEG_INFINITY))
}

/// The logit at `col` ([`logit_at`]).
pub(super) fn load_clean(col: Expr) -> Expr {
    logit_at(var("base") + col)
}

/// Declares `{prefix}0` .. `{prefix}3`, the logits of the quad's four columns from `c0` (a
/// column past the part as -inf) as [`logit_at`] takes them, with one bitmask word a quad:
/// `c0` is a multiple of 4, so its columns share a word. The word is loaded after the quad's
/// four elements, so those are in flight together as without a bitmask. With `raw`, a NaN the
/// call leaves NaN stays NaN, for reads whose every test is a comparison that NaN fails as -inf
/// fails it.
pub(super) fn load_logit_quad(b: &mut Block, c0: Expr, prefix: &str, raw: bool) {
    let value = |at: Expr, _| {
        let x = load("x", at);
        match raw {
            true => select(flag_set(FLAG_NAN_AS_FINITE).and(is_nan(x.clone())), f(NAN_AS), x),
            false => clean(x),
        }
    };
    load_quad_as(b, c0.clone(), prefix, Ty::F32, f(f32::NEG_INFINITY), value);
    b.if_(flag_set(FLAG_ALLOWED), |b| {
        let bits = b.let_(&format!("{prefix}_allowed"), Ty::U32, allowed_word(c0.clone()) >> (c0 & u(31)));
        for j in 0..4u32 {
            let name = format!("{prefix}{j}");
            b.set(&name, select((bits.clone() & u(1 << j)).ne_(u(0)), var(&name), f(f32::NEG_INFINITY)));
        }
    });
}

/// Declares `x0` .. `x3`, the logits of the quad's four columns from `c0` ([`load_logit_quad`]).
pub(super) fn load_quad(b: &mut Block, c0: Expr) {
    load_logit_quad(b, c0, "x", false);
}

/// Declares `{prefix}0` .. `{prefix}3`, `value` of the input's element at each of the quad's
/// four columns from `c0` (`fill` for a column past the part), loaded first and together so
/// that they are in flight at once: one round trip a quad, not four. A quad inside the part
/// (every one but a part's last) loads from one address at offsets 0 to 3 (see the CUDA
/// emitter's `index`); the others clamp each column to the part's last, which they read again.
/// `value` takes the element's index in the input and its place in the quad.
pub(super) fn load_quad_as(
    b: &mut Block,
    c0: Expr,
    prefix: &str,
    ty: Ty,
    fill: Expr,
    value: impl Fn(Expr, u32) -> Expr,
) {
    let names: Vec<String> = (0..4).map(|j| format!("{prefix}{j}")).collect();
    for name in &names {
        b.let_(name, ty, fill.clone());
    }
    let at = b.let_(&format!("{prefix}_at"), Ty::U32, var("base") + c0.clone());
    // The workgroup's first step may start past the part (a short row): then the slow way.
    b.if_else(
        c0.clone().lt(var("col_hi")).and((var("col_hi") - c0.clone()).ge(u(4))),
        |b| {
            for (j, name) in names.iter().enumerate() {
                b.set(name, value(at.clone() + u(j as u32), j as u32));
            }
        },
        |b| {
            for (j, name) in names.iter().enumerate() {
                let col = c0.clone() + u(j as u32);
                let inside = col.clone().lt(var("col_hi"));
                let x = value(var("base") + select(inside.clone(), col, var("col_hi") - u(1)), j as u32);
                b.set(name, select(inside, x, fill.clone()));
            }
        },
    );
}

/// An input value with NaN read as -inf (as -1e5 under [`FLAG_NAN_AS_FINITE`], which only
/// calls from logits set).
pub(super) fn clean(x: Expr) -> Expr {
    let nan = select(flag_set(FLAG_NAN_AS_FINITE), f(NAN_AS), f(f32::NEG_INFINITY));
    select(is_nan(x.clone()), nan, x)
}

/// Writes a sampling kernel's per-row results from invocation 0: the token, and on request its
/// log-probability and its status (`valid`: the row had a value to sample).
pub(super) fn write_results(b: &mut Block, tok: Expr, valid: Expr, logprob: impl FnOnce(&mut Block) -> Expr) {
    let flag = |bit: u32| (param("flags") & u(bit)).ne_(u(0));
    b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| {
        b.store("tokens", var("row"), select(valid.clone(), tok, u(0)));
        b.if_(flag(FLAG_STATUS), |b| b.store("status", var("row"), select(valid.clone(), u(1), u(0))));
    });
    // The log-probability may need collectives, so every invocation takes this (uniform) branch.
    b.if_(flag(FLAG_LOGPROBS), |b| {
        let lp = logprob(b);
        b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| {
            b.store("logprobs", var("row"), select(valid, lp, f(f32::NEG_INFINITY)));
        });
    });
}

/// The outputs every sampling kernel binds after its inputs.
pub(super) fn output_buffers() -> [BufferDecl; 3] {
    [buffer("tokens", Storage::U32, true), buffer("logprobs", Storage::F32, true), buffer("status", Storage::U32, true)]
}

/// The scratch of the staged kernels (softmax's split rows, the split filters), bound after the
/// outputs: what one launch writes there the next reads, so plain u32 does.
pub(super) fn partials_buffer() -> BufferDecl {
    buffer("partials", Storage::U32, true)
}

/// The part records of the argmax family's split rows and the rows' arrival counters, bound
/// after the outputs: atomic, since the row's last part reads them in the same launch
/// (`combine.rs`).
pub(super) fn part_buffers() -> [BufferDecl; 2] {
    [atomic_partials_buffer(), counters_buffer()]
}

/// The scratch where a launch's parts read each other's records (a row's last part), so atomic.
pub(super) fn atomic_partials_buffer() -> BufferDecl {
    buffer("partials", Storage::AtomicU32, true)
}

/// The split rows' arrival counters (and, after them, the seeded sampler's part records):
/// zeros between launches.
pub(super) fn counters_buffer() -> BufferDecl {
    buffer("counters", Storage::AtomicU32, true)
}

/// The scaled input `z = x / T` at `col` (NaN read as -inf; +inf, or an overflow of the
/// division, stays +inf: such columns share the row's whole probability).
pub(super) fn scaled(col: Expr) -> Expr {
    load_clean(col) / var("temp")
}

/// [`scaled`] of column `j` of the quad [`load_quad`] read.
pub(super) fn scaled_quad(j: u8) -> Expr {
    var(&format!("x{j}")) / var("temp")
}

/// A grid-stride loop over `batch` independent items (for the per-item diagnostic kernels).
pub(super) fn for_each_item(b: &mut Block, body: impl FnOnce(&mut Block, Expr)) {
    let first = builtin(Builtin::GroupId) * builtin(Builtin::BlockSize) + builtin(Builtin::LocalId);
    let step = builtin(Builtin::NumGroups) * builtin(Builtin::BlockSize);
    b.for_("item", first, param("batch"), step, body);
}
