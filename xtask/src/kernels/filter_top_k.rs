//! The filtered path with one read of the row, for rows with top-k of at most [`CAP`] (alone or
//! with top-p and min-p, either order): Qwen3's top-k 20 + top-p 0.95, the common case. Rows of
//! top-p, min-p or a larger top-k with no such top-k take it too ("capped", see
//! [`one_read_row`]): min-p alone with `CAP + 1` candidates, which decide it where the set is
//! shorter, and otherwise the union of the parts' own `CAP + 1` largest
//! (`filter_min_p.rs`, which also races a flat row's parts on chip); the others through the top-p cut (`filter_top_p.rs`), a launch
//! between these two.
//!
//! Two launches. `top_k_parts_*` splits each row into parts of at most [`PART_COLS`] columns,
//! one workgroup each; a part reads its columns once into workgroup memory as order keys of
//! `z = l / T` and, on chip, selects its `k + 1` largest by (value descending, index ascending)
//! ([`select_top`], in workgroup memory), and
//! writes them in index order with its maximum `m` and `sum exp(z - m)` ([`read_part`]).
//! `top_k_merge_*` (one workgroup per row) selects the row's `k + 1` largest from the parts'
//! lists with the same select, ranks them by the filter kernels' order (`z - max` rounded to
//! f32, then index), weighs them with the filter kernels' fixed-point masses and decides the set
//! and the race as `filters.rs` does, on `k + 1` tokens ([`merge_row`]).
//!
//! The candidates decide the row exactly unless one of these holds, and then the merge kernel
//! runs the one-workgroup filter kernel's body on the row in the same launch (per-row routing,
//! no host sync), so a row's token is always the one the filter kernels give:
//! - the order on `z` and the filters' order on `z - max` differ only where two values of `z`
//!   round to the same `z - max`: the set is exact when the candidates are the first tokens of
//!   the filters' order, ties at the boundary included ([`prefix_is_exact`]: no token left out
//!   and no candidate above the boundary shares the boundary's `z - max` with another `z`), or
//!   the last kept token's `z - max` is above the boundary's, or the candidates hold every token
//!   with probability;
//! - joint top-p is measured against the whole row's mass, which the parts give only
//!   approximately (their sums at their own maxima): the set is taken when it is the same for
//!   every mass within [`MASS_MARGIN`] of the estimate; where it is not, the merge reads the
//!   row once more for its exact mass ([`row_mass`]) and decides as the filter kernels do;
//! - the row's maximum is not finite, or a part would exceed [`PART_COLS`].
//!
//! Seeded rows (SGLang's deterministic sampler) race as the filter kernel races them: the
//! float64 score of `z - max` plus the Murmur-hashed noise of the column, on the kept candidates;
//! those that hash ranks (SGLang's filtered path) take the noise of each candidate's rank, which
//! the merge has in hand.
//!
//! Top-k first needs only the top-k mass, which the candidates give exactly. The log-probability
//! divides by the estimated row mass, so it may differ from the filter kernels' in the last bits.
//! Reads of the row: 1 on this path (the pass count says so); a row that falls back reads once
//! more than the filter kernel's count.

use super::abi::{
    atomic_partials_buffer, buffer, for_each_row_group_at, for_each_row_part_at, kernel, part_buffers, quads_per_part,
    row_is_ranked, row_is_seeded, row_temperature, row_word, word, write_results, Dtype, PhiloxKey, FLAG_CUT_HERE,
    FLAG_PASSES, PARTS_SHIFT, PATH_FILTER_KERNEL,
};
use super::filter_min_p::{self, keeps};
use super::filter_top_p;
use super::filter_values as values;
use super::filters::{
    declare_best, filter_body, filter_buffers, filter_inputs, filter_shared, functions, key_value, listed_row,
    max_passes, order_key, row_is_filtered, takes_row, Build, Input, Output, FIXED, FIXED_F32, FRACTION, LIST,
    LIST_CAP,
};
use super::math::is_finite;
use super::seeded::score64;
use super::select::{self, select_top};
use crate::ir::*;
use crate::tuning::Workgroup;

/// The largest top-k this path takes; larger ones take the filter kernels.
pub const CAP: u32 = 256;
/// The most columns of a part: the host splits a row into `ceil(vocab / PART_COLS)` parts.
pub const PART_COLS: u32 = 4096;
/// Words of a part's record in `partials`: its maximum (f32 bits), its sum of `exp(z - m)` (f32
/// bits; 0 from a top-p row's part, whose histograms give the row's mass), how many candidates it lists, the largest key it leaves out below its boundary key,
/// and its boundary key where it leaves some of it out (0: none); then `(key, column)` per
/// candidate.
pub const HEAD_WORDS: u32 = 5;
/// A slot: the head, the candidates (or a top-p row's histogram, then its listed tokens), then
/// the words of the top-p cut launch (`filter_top_p.rs`).
pub const SLOT_WORDS: u32 = HEAD_WORDS + AREA_WORDS + super::filter_top_p::TAIL_WORDS;
/// A slot's area after its head: the candidates' `(key, column)` pairs, or a histogram, or a
/// top-p row's listed range tokens.
pub(super) const AREA_WORDS: u32 = {
    let (candidates, histogram) = (2 * (CAP + 1), super::filter_top_p::HIST_WORDS);
    if candidates > histogram {
        candidates
    } else {
        histogram
    }
};
/// Relative margin on the estimated row mass within which joint top-p must give one set: 3.8
/// times a bound on the estimate's error against the exact fixed-point mass (8.0e-6). The parts
/// weigh their columns with the target's fast exponential, which Vulkan allows 3 + 2|x| ulp
/// (CUDA's `__expf` is closer): at most 13 units from the maximum on average under the weights
/// (a token further off weighs under e^-13 / n), 29 ulp, 3.5e-6 of the sum. The rest is as
/// before the fast exponential: the exponentials' arguments `z - m` round to 2^-24 of
/// themselves, 1.6e-6 for the two ways round; the merge's two exponentials within 4 ulp, 5e-7;
/// the parts' sums (16 terms an invocation, then 8 levels of the block's tree) and the merge's
/// (a part an invocation, 9 levels), 2e-6; the products, `top_p` and the conversions, 3e-7;
/// truncations to 2^-40 of the largest weight (1), 1.4e-7 for 151936 tokens. Unlike the top-p
/// cut's margin, this one keeps the set exact (a row outside it is not checked again), so it
/// keeps a factor over the bound. Was 2^-10, which left many rows unsure (the merge's second
/// read): on Zipf rows at T 0.6, top-k 50 and top-p 0.9, 40% of them (a numpy simulation of the
/// rule); then 2^-13: 18 of 1344 joint rows on lavapipe (top-k 20, 40 and 50 with top-p 0.95,
/// 0.8 and 0.9 at T 0.6 to 1.0, Zipf rows of 32768 and 151936); now 5.
const MASS_MARGIN: f32 = 1.0 / 32768.0;
pub(super) const SCRATCH: &str = "partials";
pub(super) const KEYS: &str = "part_keys";
/// The merge's scratch for [`select_top`] (the parts take theirs in the top-p histogram's array).
pub(super) const SELECT_SCRATCH: &str = "select_scratch";
const _: () = assert!(select::WORDS <= filter_top_p::BINS);
/// The merge's arrays of `CAP + 1` words each, in the filter kernel's list (`filters::LIST`),
/// which the fallback overwrites only after the merge is done with them: the candidates' keys,
/// columns, `z - max` (f32 bits) and masses (u64 in two words), then by rank the keys, columns
/// and masses before (two words).
const M_KEY: u32 = 0;
const M_COL: u32 = 1;
const M_OV: u32 = 2;
const M_MASS: u32 = 3;
const S_KEY: u32 = 5;
const S_COL: u32 = 6;
const S_BEFORE: u32 = 7;
const ARRAYS: u32 = 9;
const _: () = assert!(ARRAYS * (CAP + 1) <= LIST_CAP);

/// Word `i` of the merge's array `a` (see [`M_KEY`]).
fn at(a: u32, i: Expr) -> Expr {
    u(a * (CAP + 1)) + i
}

fn get(a: u32, i: Expr) -> Expr {
    load_shared(LIST, at(a, i))
}

fn put(b: &mut Block, a: u32, i: Expr, v: Expr) {
    b.store_shared(LIST, at(a, i), v);
}

fn get64(a: u32, i: Expr) -> Expr {
    let word = |k: u32| load_shared(LIST, at(a + k, i.clone())).cast(Ty::U64);
    (word(1) << u(32)) | word(0)
}

fn put64(b: &mut Block, a: u32, i: Expr, v: Expr) {
    put(b, a, i.clone(), (v.clone() & Expr::Lit(Lit::U64(0xffff_ffff))).cast(Ty::U32));
    put(b, a + 1, i, (v >> u(32)).cast(Ty::U32));
}

/// Declares `one_read`: whether this path takes the row (after `takes_row`, with `parts`
/// declared), `capped` (it takes the row for its top-p, min-p or a top-k above [`CAP`], not for
/// a top-k of at most [`CAP`]), `kc` (the row's candidates less one: its top-k, or [`CAP`]
/// where capped) and `top_p_cut` (a capped row with top-p or a top-k, which takes the histogram
/// and the cut launch of `filter_top_p.rs` instead of candidates). Every kernel of the path
/// computes them alike, so they agree on every row.
///
/// A seeded row that hashes ranks takes this path where its candidates are ranked here (a
/// top-k of at most [`CAP`], or min-p alone), not the cut.
///
/// A capped row (top-p, min-p or both, joint with any top-k above [`CAP`] or with none; or a
/// top-k above [`CAP`] alone) keeps a prefix of the order. Min-p alone takes the `CAP + 1`
/// largest, which decide it whenever its set is shorter than them: wherever the row has a clear
/// maximum (Zipf rows at 0.8 keep 10 to 30 tokens at 0.05); a longer set, wherever the parts'
/// own lists hold it, or their races (`filter_min_p.rs`). The others take the cut, which
/// finds where top-p or top-k ends from the histogram. Top-p after a prefix (top-k first with a
/// top-k above [`CAP`], or min-p first) needs that prefix's mass before the cut, which neither
/// gives, and is not capped.
pub(super) fn one_read_row(b: &mut Block) -> Expr {
    let fits = (quads_per_part(var("parts")) * u(4)).le(u(PART_COLS));
    let has_k = b.let_("has_k", Ty::Bool, var("kk").lt(param("vocab")));
    let by_k = has_k.clone().and(var("kk").le(u(CAP)));
    let cuts = var("pp").lt(f(1.0)).or(var("mp").gt(f(0.0))).or(has_k.clone());
    let capped = b.let_("capped", Ty::Bool, var("kk").gt(u(CAP)).and(var("k_first").not()).and(cuts));
    b.let_("kc", Ty::U32, select(capped.clone(), u(CAP), var("kk")));
    let cut = capped.clone().and(var("pp").lt(f(1.0)).or(has_k));
    // The cut races the tokens above its range where they lie, unranked: a row that hashes
    // ranks takes the filter kernel's body instead (`filter_rank.rs`), and so does min-p first
    // with min-p and top-p (the merge measures top-p on the top-k mass, not on what min-p
    // keeps of it). A row forced onto the filter kernels (its path word) is not taken either.
    let taken = var("filtered").and(by_k.or(capped.clone())).and(fits).and(cut.clone().and(row_is_ranked()).not());
    let taken = taken.and(var("mp_first").not()).and(row_word(word::PATH).ne_(u(PATH_FILTER_KERNEL)));
    let one = b.let_("one_read", Ty::Bool, taken);
    b.let_("top_p_cut", Ty::Bool, one.clone().and(cut.clone()));
    // Min-p alone takes the cut where its parts find its set longer than their lists
    // (`filter_top_p::min_p_state`): unranked, as the cut races.
    let min_p_cut = one.clone().and(capped).and(cut.not()).and(row_is_ranked().not());
    b.let_("min_p_cut", Ty::Bool, min_p_cut);
    one
}

/// The routing of a row with a filter, for the host (`host.rs` lowers it to Rust): the record's
/// words and the vocabulary decide, as in every kernel of the path ([`one_read_row`]), whether
/// the path takes the row, and whether it may take the top-p cut for its top-p or top-k, or for
/// min-p alone. `parts` is the path's parts per row (`ceil(vocab / PART_COLS)`).
pub fn route() -> Kernel {
    let mut b = Block::new();
    b.let_("row", Ty::U32, u(0));
    row_temperature(&mut b);
    row_is_filtered(&mut b);
    b.let_("parts", Ty::U32, param("parts"));
    one_read_row(&mut b);
    let doc = "The kernels' routing of a row record (`filter_top_k::route`): whether the one-read path takes\nthe row, and whether it may take the top-p cut for its top-p or top-k, or for min-p alone.";
    let mut k = kernel("filter_route".into(), doc, 0, vec![buffer("rows", Storage::U32, false)], vec![], b);
    k.params = vec!["vocab".into(), "parts".into()];
    k
}

/// Word `k` of part `p`'s slot of the row in slot `row_slot` of its launch's row loop.
pub(super) fn slot_word(row_slot: Expr, p: Expr, k: Expr) -> Expr {
    (row_slot * var("parts") + p) * u(SLOT_WORDS) + k
}

/// Word `k` of part `p`'s record of this row (slot `slot` of the row loop).
pub(super) fn record(p: Expr, k: Expr) -> Expr {
    slot_word(var("slot"), p, k)
}

/// Word `k` of this part's own slot (slot `slot` of the part loop: a row's slot times its
/// parts, plus the part).
pub(super) fn own_word(k: Expr) -> Expr {
    var("slot") * u(SLOT_WORDS) + k
}

/// After [`select_top`]: `emit(out, i, key)` for each taken item, `out` counting them in
/// position order (each invocation walks one contiguous run; two scans place the runs).
/// `each(key)` also sees every item's key (not 0) in the first walk.
fn gather(
    b: &mut Block,
    n: Expr,
    key_at: &dyn Fn(&mut Block, Expr) -> Expr,
    each: &dyn Fn(&mut Block, Expr),
    emit: &dyn Fn(&mut Block, Expr, Expr, Expr),
) {
    let bs = builtin(Builtin::BlockSize);
    let per = b.let_("g_per", Ty::U32, (n.clone() + bs.clone() - u(1)) / bs);
    let lo = b.let_("g_lo", Ty::U32, (builtin(Builtin::LocalId) * per.clone()).min(n.clone()));
    let hi = b.let_("g_hi", Ty::U32, (lo.clone() + per).min(n));
    b.let_("g_ties", Ty::U32, u(0));
    b.let_("g_above", Ty::U32, u(0));
    b.for_("gi", lo.clone(), hi.clone(), u(1), |b, i| {
        let key = key_at(b, i);
        let k = b.let_("gk", Ty::U32, key);
        b.if_(k.clone().ne_(u(0)), |b| {
            b.if_(k.clone().eq_(var("t_key")), |b| b.set("g_ties", var("g_ties") + u(1)));
            b.if_(k.clone().gt(var("t_key")), |b| b.set("g_above", var("g_above") + u(1)));
            each(b, k);
        });
    });
    let tie_start = b.scan(var("g_ties"), "g_tie_start");
    let left = select(var("t_take").gt(tie_start.clone()), var("t_take") - tie_start.clone(), u(0));
    let out = b.scan(var("g_above") + left.min(var("g_ties")), "g_out_start");
    b.let_("g_rank", Ty::U32, tie_start);
    b.let_("g_out", Ty::U32, out);
    b.for_("gj", lo, hi, u(1), |b, i| {
        let key = key_at(b, i.clone());
        let k = b.let_("gk", Ty::U32, key);
        b.if_(k.clone().ne_(u(0)), |b| {
            let tie = k.clone().eq_(var("t_key"));
            let take = b.let_(
                "g_take",
                Ty::Bool,
                k.clone().gt(var("t_key")).or(tie.clone().and(var("g_rank").lt(var("t_take")))),
            );
            b.if_(tie, |b| b.set("g_rank", var("g_rank") + u(1)));
            b.if_(take, |b| {
                emit(b, var("g_out"), i, k);
                b.set("g_out", var("g_out") + u(1));
            });
        });
    });
}

/// What a part's read ([`load_part`]) leaves in workgroup memory, a word a column.
#[derive(Clone, Copy)]
pub(super) enum Stored {
    /// The order key of its value (0 for a token without mass): what a select compares.
    Keys,
    /// Its value's bits, and for a token without mass these (a value the top-p histograms'
    /// bins never take, `filter_top_p::unbinned`): what a histogram bins.
    Values(u32),
}

/// The part's one read of its `n` columns, into workgroup memory as `stored` from their values
/// `v` (`z` or `p`, [`values::column()`]), and its largest `v`, returned (-inf for none).
pub(super) fn load_part(b: &mut Block, input: Input, n: Expr, stored: Stored) -> Expr {
    b.let_("m", Ty::F32, f(f32::NEG_INFINITY));
    // From logits an invocation's whole share of a part (16 columns at 256 invocations) in
    // flight at once: one round trip a part, not four. From probabilities four, since their
    // value's tests took the kernel past the registers five blocks an SM leave (it spilled 28
    // bytes on sm_90 at eight, and on sm_75 too at sixteen).
    let width = match input {
        Input::Logits(_) => 16,
        Input::Probs => 4,
    };
    // Every column of a step is weighed, one past the part as nothing: only its store is
    // skipped.
    let past = Some(values::weightless(input));
    values::for_each_read(b, input, (n.clone(), past), width, |b, i, _, x| {
        let v = b.let_("z", Ty::F32, values::value(input, x));
        let valid = b.let_("z_ok", Ty::Bool, values::has_mass(input, v.clone()));
        let word = match stored {
            Stored::Keys => select(valid.clone(), order_key(v.clone()), u(0)),
            Stored::Values(none) => select(valid.clone(), v.clone().bitcast(Ty::U32), u(none)),
        };
        b.if_(i.clone().lt(n.clone()), |b| b.store_shared(KEYS, i, word));
        b.if_(valid, |b| b.set("m", var("m").max(v)));
    });
    let m = b.reduce(ReduceOp::Max, Ty::F32, var("m"), "part_m");
    b.barrier();
    m
}

/// Words a step of a part's loops over its workgroup array ([`for_each_word`]) takes an
/// invocation, all read before any is worked on: the loop's overhead once for them all.
const UNROLL: u32 = 4;
const _: () = assert!(PART_COLS.is_multiple_of(UNROLL * 1024));

/// Pads the part's workgroup array of `n` words with `pad` to a whole step of [`UNROLL`] words
/// an invocation (`PART_COLS` is a whole number of steps, blocks being powers of two of at most
/// 1024, so the padding stays in the array), before [`load_part`], whose barrier orders it;
/// returns the padded length, for [`for_each_word`].
pub(super) fn pad_part(b: &mut Block, n: Expr, pad: u32) -> Expr {
    let bs = builtin(Builtin::BlockSize);
    let step = bs.clone() * u(UNROLL);
    let padded = b.let_("n_padded", Ty::U32, (n.clone() + step.clone() - u(1)) / step.clone() * step);
    b.for_("i", builtin(Builtin::LocalId) + n, padded.clone(), bs, |b, i| b.store_shared(KEYS, i, u(pad)));
    padded
}

/// `f(word)` for each word of the part's workgroup array up to `padded` ([`pad_part`]), in a
/// scope of its own: [`UNROLL`] words an invocation a step, bound as `{name}0` and on, in the
/// order of a loop of one word a step.
pub(super) fn for_each_word(b: &mut Block, padded: Expr, name: &str, f: &dyn Fn(&mut Block, Expr)) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    b.for_("i", lid, padded, bs.clone() * u(UNROLL), |b, i| {
        let words: Vec<Expr> = (0..UNROLL)
            .map(|j| b.let_(&format!("{name}{j}"), Ty::U32, load_shared(KEYS, i.clone() + bs.clone() * u(j))))
            .collect();
        for w in words {
            b.scope(|b| f(b, w));
        }
    });
}

/// After [`load_part`] (its keys padded with zeros, [`pad_part`]): the part's sum of weights at
/// its largest `m` (`exp(z - m)`, `p / m`), by [`values::estimate_weight`] (`m` made finite),
/// returned; `each(key)` also sees every column's key with mass.
fn sum_part(b: &mut Block, (input, padded, m): (Input, Expr, Expr), each: &dyn Fn(&mut Block, Expr)) -> Expr {
    b.let_("s", Ty::F32, f(0.0));
    for_each_word(b, padded, "k", &|b, k| {
        b.if_(k.clone().ne_(u(0)), |b| {
            let z = b.let_("kz", Ty::F32, key_value(k.clone()));
            let w = b.let_("kw", Ty::F32, values::estimate_weight(input, z, m.clone()));
            b.set("s", var("s") + w);
            each(b, k);
        });
    });
    b.reduce(ReduceOp::Sum, Ty::F32, var("s"), "part_s")
}

/// One part (after [`one_read_row`]): one read of its columns into workgroup memory, its
/// maximum and sum, its `k + 1` candidates, and its record. The select's scratch is the top-p
/// histogram's array, which this row does not use; its counting rides on the sum's loop.
fn read_part(b: &mut Block, input: Input) {
    let n = b.let_("n_cols", Ty::U32, var("col_hi") - var("col_lo"));
    select::clear(b, filter_top_p::HIST);
    // Before the read, so that no word of the row's record is read after it.
    let raceable = b.let_("mr_row", Ty::Bool, filter_min_p::row_races());
    let padded = pad_part(b, n.clone(), 0);
    let m = load_part(b, input, n.clone(), Stored::Keys);
    let top = b.let_("top_key", Ty::U32, order_key(m.clone()));
    // The sum only estimates the row's mass (the merge keeps a margin that counts the fast
    // exponential's error, `MASS_MARGIN`). A part whose maximum is not finite leaves its row to
    // the fallback, so its sum may weigh at 0 instead.
    let at = b.let_("m_finite", Ty::F32, select(is_finite(m.clone()), m.clone(), f(0.0)));
    let count = |b: &mut Block, k: Expr| select::count(b, filter_top_p::HIST, top.clone(), k);
    let s = sum_part(b, (input, padded, at), &count);
    // Min-p alone on a flat part races its band instead (`filter_min_p.rs`).
    let races = filter_min_p::races(b, input, (raceable, m.clone(), top.clone()), filter_top_p::HIST);
    b.if_else(
        races,
        |b| filter_min_p::race_part(b, input, n.clone(), (m.clone(), s.clone())),
        |b| select_part(b, (n.clone(), top.clone()), (m.clone(), s.clone())),
    );
}

/// A part's select of its `kc + 1` candidates (after [`read_part`]'s sum counted its keys
/// below `top`), written in index order, and its record's head.
fn select_part(b: &mut Block, (n, top): (Expr, Expr), (m, s): (Expr, Expr)) {
    let key_at = |_: &mut Block, i: Expr| load_shared(KEYS, i);
    let items = select::Items { n: n.clone(), top, scratch: filter_top_p::HIST, key_at: &key_at };
    select::decide(b, items, var("kc") + u(1));
    // What the part leaves out, for the merge's test of the boundary (`prefix_is_exact`).
    b.let_("below", Ty::U32, u(0));
    let below = |b: &mut Block, k: Expr| b.if_(k.clone().lt(var("t_key")), |b| b.set("below", var("below").max(k)));
    gather(b, n, &key_at, &below, &|b, o, i, k| {
        let at = own_word(u(HEAD_WORDS) + o * u(2));
        b.store(SCRATCH, at.clone(), k);
        b.store(SCRATCH, at + u(1), var("col_lo") + i);
    });
    let below = b.reduce(ReduceOp::Max, Ty::U32, var("below"), "part_below");
    b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| {
        b.store(SCRATCH, own_word(u(0)), m.bitcast(Ty::U32));
        b.store(SCRATCH, own_word(u(1)), s.bitcast(Ty::U32));
        b.store(SCRATCH, own_word(u(2)), var("t_above") + var("t_take"));
        b.store(SCRATCH, own_word(u(3)), below);
        b.store(SCRATCH, own_word(u(4)), select(var("t_at").gt(var("t_take")), var("t_key"), u(0)));
    });
}

/// Declares `prefix_exact`: whether the merge's candidates (after its select, with `t_key` the
/// boundary key) are the first tokens of the filters' order, ties at the boundary included, so
/// that their ranks are the row's. The candidates are the largest by `(z, index)`, the filters'
/// order is by `(z - max, index)`, and the two differ only where distinct values of `z` round to
/// one `z - max`. So the candidates are a prefix unless a token left out shares the boundary's
/// `z - max` with a smaller `z` (it would rank among the candidates by its index), or a candidate
/// above the boundary value shares it (a left-out token at the boundary value would then rank
/// before that candidate by index). Every value a left-out token can have that could share it
/// is in the parts' lists (the items the merge leaves out) or in their records (the largest key
/// a part leaves out below its boundary, and that boundary where it leaves some of it out); the
/// tokens left out at the boundary value itself rank after the candidates there, by index, as
/// the selects take the lowest indices. `complete` (every token with probability is a
/// candidate) is exact as it is. The lists are searched only where `needed` (the same on every
/// invocation: the merge's plain test, which needs no search, failed); elsewhere the result is
/// `complete`.
fn prefix_is_exact(
    b: &mut Block,
    complete: Expr,
    needed: Expr,
    ov: &dyn Fn(Expr) -> Expr,
    key_at: &dyn Fn(&mut Block, Expr) -> Expr,
) -> Expr {
    b.let_("prefix_exact", Ty::Bool, complete.clone());
    b.if_(complete.not().and(needed), |b| {
        let n = count_shared_boundary(b, ov, key_at);
        b.set("prefix_exact", n.eq_(u(0)));
    });
    var("prefix_exact")
}

/// The tokens that break [`prefix_is_exact`]: left out with the boundary's `z - max` and a
/// smaller `z`, or candidates above the boundary value with its `z - max`.
fn count_shared_boundary(b: &mut Block, ov: &dyn Fn(Expr) -> Expr, key_at: &dyn Fn(&mut Block, Expr) -> Expr) -> Expr {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    let ot = b.let_("ov_t", Ty::F32, ov(key_value(var("t_key"))));
    b.let_("tie_bad", Ty::U32, u(0));
    let bad = |b: &mut Block| b.set("tie_bad", var("tie_bad") + u(1));
    let shares = |k: Expr| ov(key_value(k)).eq_(ot.clone());
    b.for_("i", lid.clone(), var("n_sel"), bs.clone(), |b, i| {
        let k = b.let_("ek", Ty::U32, get(M_KEY, i));
        b.if_(k.clone().gt(var("t_key")).and(shares(k)), bad);
    });
    let left_out = |k: Expr| k.clone().ne_(u(0)).and(k.clone().lt(var("t_key"))).and(shares(k));
    b.for_("pos", lid.clone(), var("n_items"), bs.clone(), |b, pos| {
        let key = key_at(b, pos);
        let k = b.let_("lk", Ty::U32, key);
        b.if_(left_out(k), bad);
    });
    b.for_("p", lid, var("parts"), bs, |b, p| {
        for word in [3, 4] {
            let k = b.let_(&format!("rk{word}"), Ty::U32, load_settled(SCRATCH, record(p.clone(), u(word))));
            b.if_(left_out(k), bad);
        }
    });
    b.reduce(ReduceOp::Sum, Ty::U32, var("tie_bad"), "tie_bad_n")
}

/// Races the kept token `col`, of value `v` (`z` or `p`) and order value `ov`, into
/// [`declare_best`]'s variables (`best{suffix}`, `best{suffix}64` and their columns) with the
/// filter kernels' noise: for a seeded row the float64 log-probability plus the column's hashed
/// noise, else the plain path's race on the column's Philox noise. Ties go to the lower column,
/// so any order of visits gives the same winner.
pub(super) fn race_one(
    b: &mut Block,
    input: Input,
    suffix: &str,
    (seeded, key): (Expr, &PhiloxKey),
    col: Expr,
    v: Expr,
    ov: Expr,
) {
    b.if_else(
        seeded,
        |b| {
            let s = score64(b, values::seeded_log(input, v.clone(), ov), col.clone());
            keep_lower(b, &format!("{suffix}64"), s, col.clone());
        },
        |b| race_philox(b, input, suffix, key, col.clone(), v.clone()),
    );
}

/// [`race_one`]'s Philox race: column `col`, of value `v`, scored on its word of its quad's
/// block.
pub(super) fn race_philox(b: &mut Block, input: Input, suffix: &str, key: &PhiloxKey, col: Expr, v: Expr) {
    let w4 = b.let_("w4", Ty::U32x4, key.block(col.clone() & u(!3)));
    let lane = col.clone() & u(3);
    let bits = (1..4u8).fold(w4.clone().comp(0), |e, j| select(lane.clone().eq_(u(j as u32)), w4.clone().comp(j), e));
    let score = b.let_("score", Ty::F32, values::philox_score(input, v, bits));
    keep_lower(b, suffix, score, col);
}

/// `best{suffix}`, `best{suffix}_i` take `(score, col)` where it scores higher, or the same with a
/// lower column.
pub(super) fn keep_lower(b: &mut Block, suffix: &str, score: Expr, col: Expr) {
    keep_lower_and(b, suffix, score, col, |_| {});
}

/// [`keep_lower`], running `also` where it takes the pair (to keep more of the winner).
pub(super) fn keep_lower_and(b: &mut Block, suffix: &str, score: Expr, col: Expr, also: impl FnOnce(&mut Block)) {
    let (best, best_i) = (format!("best{suffix}"), format!("best{suffix}_i"));
    let better = score.clone().gt(var(&best)).or(score.clone().eq_(var(&best)).and(col.clone().lt(var(&best_i))));
    b.if_(better, |b| {
        b.set(&best, score);
        b.set(&best_i, col);
        also(b);
    });
}

/// After a race into [`declare_best`]'s variables: the row's token (the seeded race's winner
/// where `seeded`, its index taken to a column by `column`), its log-probability under the whole
/// row (from logits `z - mx - ln(mass)`, `mass` the row's softmax sum at `mx`; from
/// probabilities `ln p`), status, and `passes` as its pass count.
pub(super) fn finish_race(
    b: &mut Block,
    input: Input,
    (seeded, column): (Expr, &dyn Fn(Expr) -> Expr),
    mx: Expr,
    mass: Expr,
    passes: Expr,
) {
    let (_, tok32) = b.argmax(var("best"), var("best_i"), "ow_win", "ow_tok32");
    let (_, tok64) = b.argmax_of(Ty::F64, var("best64"), var("best64_i"), "ow_win64", "ow_tok64");
    let tok = b.let_("ow_tok", Ty::U32, select(seeded, column(tok64), tok32));
    let valid = b.let_("ow_valid", Ty::Bool, tok.clone().lt(param("vocab")));
    let safe = b.let_("ow_at", Ty::U32, select(valid.clone(), tok.clone(), u(0)));
    write_results(b, tok, valid, |b| {
        let v = values::column(b, input, safe, "ow_v");
        values::log_probability(input, v, mx, mass)
    });
    let want_passes = (param("flags") & u(FLAG_PASSES)).ne_(u(0));
    b.if_(want_passes.and(builtin(Builtin::LocalId).eq_(u(0))), |b| b.store("passes", var("row"), passes));
}

/// How a kernel reads its scratch: [`load`] where other workgroups of the launch wrote the word
/// (a row's last part reads its parts' records), [`load_settled`] where an earlier launch did
/// (the merge reads the parts launch's records through L1 on CUDA).
pub(super) type Read = fn(&str, Expr) -> Expr;

/// The maximum of part `p` of the row in slot `row_slot`, from its record.
pub(super) fn part_m(row_slot: Expr, p: Expr, read: Read) -> Expr {
    read(SCRATCH, slot_word(row_slot, p, u(0))).bitcast(Ty::F32)
}

/// The maximum `z` of the row in slot `row_slot` from its parts' records, into `row_m`,
/// returned with whether it is finite (the merge's candidates and the top-p histograms need a
/// finite one).
pub(super) fn row_max(b: &mut Block, row_slot: Expr, read: Read) -> (Expr, Expr) {
    b.let_("m", Ty::F32, f(f32::NEG_INFINITY));
    b.for_("p", builtin(Builtin::LocalId), var("parts"), builtin(Builtin::BlockSize), |b, p| {
        b.set("m", var("m").max(part_m(row_slot.clone(), p, read)))
    });
    let mx = b.reduce(ReduceOp::Max, Ty::F32, var("m"), "row_m");
    let finite = is_finite(mx.clone());
    (mx, finite)
}

/// The exact fixed-point mass of the row at its maximum `mx`, as the filter kernels' first pass
/// sums it (`filters::decide`'s `row_mass`): one more read of the row, counted in `reads_before`
/// by the caller.
fn row_mass(b: &mut Block, input: Input, mx: Expr) -> Expr {
    row_mass_and(b, input, mx, &|_, _, _| {})
}

/// [`row_mass`], calling `also(z, mass)` with each column's value and fixed-point mass.
pub(super) fn row_mass_and(b: &mut Block, input: Input, mx: Expr, also: &dyn Fn(&mut Block, Expr, Expr)) -> Expr {
    b.let_("rm_own", Ty::U64, Expr::Lit(Lit::U64(0)));
    let n = var("col_hi") - var("col_lo");
    // Sixteen reads in flight an invocation: the workgroup reads the row alone.
    values::for_each_read(b, input, (n, None), 16, |b, _, _, x| {
        let z = b.let_("rm_z", Ty::F32, values::value(input, x));
        let m = b.let_("rm_m", Ty::U64, call(FIXED, vec![values::weight(input, z.clone(), mx.clone())]));
        b.set("rm_own", var("rm_own") + m.clone());
        also(b, z, m);
    });
    b.reduce(ReduceOp::Sum, Ty::U64, var("rm_own"), "rm_row")
}

/// The row's maximum from its parts' records, whether it is finite, and its softmax sum at it
/// estimated from the parts' sums at their own maxima, in the merge.
pub(super) fn row_estimate(b: &mut Block, input: Input) -> (Expr, Expr, Expr) {
    let (mx, finite) = row_max(b, var("slot"), load_settled);
    let mass = parts_mass(b, input, (var("slot"), mx.clone()), load_settled);
    (mx, finite, mass)
}

/// The softmax sum at `mx` of the row in slot `row_slot`, estimated from its parts' sums at
/// their own maxima (their records' word 1, as `read_part` writes it).
pub(super) fn parts_mass(b: &mut Block, input: Input, (row_slot, mx): (Expr, Expr), read: Read) -> Expr {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    b.let_("s", Ty::F32, f(0.0));
    b.for_("p", lid, var("parts"), bs, |b, p| {
        let mp = b.let_("mp_p", Ty::F32, part_m(row_slot.clone(), p.clone(), read));
        let sp = read(SCRATCH, slot_word(row_slot.clone(), p, u(1))).bitcast(Ty::F32);
        b.if_(mp.clone().gt(f(f32::NEG_INFINITY)), |b| {
            b.set("s", var("s") + sp * values::weight(input, mp, mx.clone()))
        });
    });
    b.reduce(ReduceOp::Sum, Ty::F32, var("s"), "row_s")
}

/// The merge of one row (after [`one_read_row`]): sets `one_read_done` where the candidates
/// decide it, and then writes its results.
fn merge_row(b: &mut Block, input: Input) {
    let lid = builtin(Builtin::LocalId);
    let bs = builtin(Builtin::BlockSize);
    let (mx, finite, mass) = row_estimate(b, input);
    b.if_(finite, |b| {
        let want = b.let_("want", Ty::U32, var("kc") + u(1));
        let n = b.let_("n_items", Ty::U32, var("parts") * want.clone());
        let w2 = want.clone();
        let key_at = move |b: &mut Block, pos: Expr| {
            let p = b.let_("ip", Ty::U32, pos.clone() / w2.clone());
            let s = b.let_("is", Ty::U32, pos - p.clone() * w2.clone());
            let listed = s.clone().lt(load_settled(SCRATCH, record(p.clone(), u(2))));
            let at = record(p, u(HEAD_WORDS) + s * u(2));
            // The record is read only where it lists the item (the rest is stale).
            b.let_("ik", Ty::U32, u(0));
            b.if_(listed, |b| b.set("ik", load_settled(SCRATCH, at)));
            var("ik")
        };
        let items =
            select::Items { n: n.clone(), top: order_key(mx.clone()), scratch: SELECT_SCRATCH, key_at: &key_at };
        select_top(b, items, want.clone());
        gather(b, n, &key_at, &|_, _| {}, &|b, o, pos, k| {
            let p = pos.clone() / want.clone();
            let s = pos - p.clone() * want.clone();
            put(b, M_KEY, o.clone(), k);
            put(b, M_COL, o, load_settled(SCRATCH, record(p, u(HEAD_WORDS + 1) + s * u(2))));
        });
        let n_sel = b.let_("n_sel", Ty::U32, var("t_above") + var("t_take"));
        b.barrier();
        // Each candidate's place in the filters' order and its fixed-point mass.
        let ov = |z: Expr| values::order_value(input, z, mx.clone());
        b.for_("i", lid.clone(), n_sel.clone(), bs.clone(), |b, i| {
            let z = b.let_("zi", Ty::F32, key_value(get(M_KEY, i.clone())));
            put(b, M_OV, i.clone(), ov(z.clone()).bitcast(Ty::U32));
            put64(b, M_MASS, i, call(FIXED, vec![values::weight(input, z, mx.clone())]));
        });
        b.barrier();
        b.let_("tk_mass", Ty::U64, Expr::Lit(Lit::U64(0)));
        b.for_("i", lid.clone(), n_sel.clone(), bs.clone(), |b, i| {
            let (oi, ci) = (
                b.let_("oi", Ty::F32, get(M_OV, i.clone()).bitcast(Ty::F32)),
                b.let_("ci", Ty::U32, get(M_COL, i.clone())),
            );
            b.let_("rank", Ty::U32, u(0));
            b.let_("before", Ty::U64, Expr::Lit(Lit::U64(0)));
            b.for_("j", u(0), n_sel.clone(), u(1), |b, j| {
                let oj = b.let_("oj", Ty::F32, get(M_OV, j.clone()).bitcast(Ty::F32));
                let ahead = oj.clone().gt(oi.clone()).or(oj.eq_(oi.clone()).and(get(M_COL, j.clone()).lt(ci.clone())));
                b.if_(ahead, |b| {
                    b.set("rank", var("rank") + u(1));
                    b.set("before", var("before") + get64(M_MASS, j));
                });
            });
            put(b, S_KEY, var("rank"), get(M_KEY, i.clone()));
            put(b, S_COL, var("rank"), ci);
            put64(b, S_BEFORE, var("rank"), var("before"));
            b.if_(var("rank").lt(var("kk")), |b| b.set("tk_mass", var("tk_mass") + get64(M_MASS, i)));
        });
        let tk_mass = b.reduce(ReduceOp::Sum, Ty::U64, var("tk_mass"), "top_k_mass");
        b.barrier();
        // The set: a prefix of the ranks, under top-k, min-p and top-p (exact against the top-k
        // mass; joint, the same for every row mass within the margin, or undecided).
        let by_p = var("pp").lt(f(1.0));
        let joint_p = b.let_("joint_p", Ty::Bool, by_p.clone().and(var("k_first").not()));
        let all = Expr::Lit(Lit::U64(u64::MAX));
        let lim = b.let_("lim_k", Ty::U64, select(by_p, call(FRACTION, vec![var("pp"), tk_mass]), all));
        let target = var("pp") * mass.clone();
        let lo = b.let_("lim_lo", Ty::F32, target.clone() * f(1.0 - MASS_MARGIN));
        let hi = b.let_("lim_hi", Ty::F32, target * f(1.0 + MASS_MARGIN));
        // Rank `r`'s mass before it, and whether top-k and min-p keep it (`base_r`).
        let rank_kept = |b: &mut Block, r: Expr| {
            let w = b.let_("wr", Ty::F32, values::weight(input, key_value(get(S_KEY, r.clone())), mx.clone()));
            let before = b.let_("br", Ty::U64, get64(S_BEFORE, r.clone()));
            let base = b.let_("base_r", Ty::Bool, keeps(w).and(r.lt(var("kk"))));
            (base, before)
        };
        b.let_("n_lo", Ty::U32, u(0));
        b.let_("n_unsure", Ty::U32, u(0));
        b.for_("r", lid.clone(), n_sel.clone(), bs.clone(), |b, r| {
            let (base, before) = rank_kept(b, r);
            let bf = b.let_("bf", Ty::F32, call(FIXED_F32, vec![before.clone()]));
            let exact = before.le(lim.clone());
            let keep_lo = b.let_(
                "keep_lo",
                Ty::Bool,
                base.clone().and(select(joint_p.clone(), bf.clone().le(lo.clone()), exact.clone())),
            );
            let keep_hi = base.and(select(joint_p.clone(), bf.le(hi.clone()), exact));
            b.if_(keep_lo.clone(), |b| b.set("n_lo", var("n_lo") + u(1)));
            b.if_(keep_lo.ne_(keep_hi), |b| b.set("n_unsure", var("n_unsure") + u(1)));
        });
        b.sum_many(Ty::U32, vec![var("n_lo"), var("n_unsure")], &["kept_n".to_string(), "unsure_n".to_string()]);
        // Where the estimated mass leaves the cut unsure (a mass before a rank within the margin
        // of `pp` of the row's: on Zipf rows at T 0.6, 1 to 6% of the rows of top-k 20 to 50 and
        // top-p 0.8 to 0.95), one more read of the row sums its exact mass, and the set is the
        // filter kernels' (`filters::decide`), not their body's passes after the read.
        b.if_(joint_p.clone().and(var("unsure_n").gt(u(0))), |b| {
            let exact = row_mass(b, input, mx.clone());
            let lim = b.let_("lim_row", Ty::U64, call(FRACTION, vec![var("pp"), exact]));
            b.set("n_lo", u(0));
            b.for_("r", lid.clone(), n_sel.clone(), bs.clone(), |b, r| {
                let (base, before) = rank_kept(b, r);
                b.if_(base.and(before.le(lim.clone())), |b| b.set("n_lo", var("n_lo") + u(1)));
            });
            let kept = b.reduce(ReduceOp::Sum, Ty::U32, var("n_lo"), "kept_exact");
            b.set("kept_n", kept);
            b.set("unsure_n", u(0));
            b.set("reads_before", var("reads_before") + u(1));
        });
        // Exact where the tokens at or above the last kept one's (and, top-k first, the k-th
        // one's) value are all candidates, or the candidates hold every token with probability.
        let zt = b.let_("zt", Ty::F32, key_value(var("t_key")));
        let all_in = n_sel.clone().lt(want).or(values::weight(input, zt.clone(), mx.clone()).le(f(0.0)));
        let complete = b.let_("all_in", Ty::Bool, all_in);
        let above = |b: &mut Block, r: Expr, name: &str| {
            let key = b.uniform(get(S_KEY, r), name);
            ov(key_value(key)).gt(ov(zt.clone()))
        };
        let kept_n = var("kept_n");
        let last_k = var("kk").min(n_sel.clone()).max(u(1)) - u(1);
        let cut_above = above(b, kept_n.clone().max(u(1)) - u(1), "cut_key");
        let cut_above = b.let_("cut_above", Ty::Bool, cut_above);
        let k_above = above(b, last_k, "k_key");
        let k_above = b.let_("k_above", Ty::Bool, var("k_first").not().or(k_above));
        let plain = cut_above.clone().and(k_above.clone());
        let exact = prefix_is_exact(b, complete.clone(), plain.not(), &ov, &key_at);
        let cut_ok = kept_n.clone().gt(u(0)).and(exact.clone().or(cut_above));
        let k_ok = exact.or(k_above);
        // A capped row's set is known only where it ends before the candidates do.
        let short = kept_n.clone().lt(n_sel.clone()).or(complete.clone());
        let cap_ok = var("capped").not().or(short);
        let decided = b.let_("decided", Ty::Bool, cut_ok.and(k_ok).and(cap_ok).and(var("unsure_n").eq_(u(0))));
        b.if_(decided.clone(), |b| {
            // The filter kernel's race inside the set: the same noise per column.
            // A row that hashes ranks (SGLang's) scores rank `r`'s hash and keeps the lowest
            // best rank; its column comes after.
            declare_best(b);
            let seeded = b.let_("ow_seeded", Ty::Bool, row_is_seeded());
            let ranked = b.let_("ow_ranked", Ty::Bool, row_is_ranked());
            let key = PhiloxKey::bound(b);
            b.for_("r", lid.clone(), kept_n.clone(), bs.clone(), |b, r| {
                let col = b.let_("rc", Ty::U32, get(S_COL, r.clone()));
                let z = b.let_("rz", Ty::F32, key_value(get(S_KEY, r.clone())));
                b.if_else(
                    ranked.clone(),
                    |b| {
                        let s = score64(b, values::seeded_log(input, z.clone(), ov(z.clone())), r.clone());
                        keep_lower(b, "64", s, r.clone());
                    },
                    |b| race_one(b, input, "", (seeded.clone(), &key), col.clone(), z.clone(), ov(z.clone())),
                );
            });
            let column = |t: Expr| {
                let at = get(S_COL, t.clone().min(u(CAP)));
                select(ranked.clone().and(t.clone().lt(kept_n.clone())), at, t)
            };
            finish_race(b, input, (seeded, &column), mx.clone(), mass.clone(), var("reads_before"));
            b.set("one_read_done", boolean(true));
        });
        let undecided = b.let_("undecided", Ty::Bool, decided.not());
        // A capped row here is min-p alone: with top-p or a top-k it takes the cut (`one_read_row`).
        b.if_(undecided.and(var("capped")), |b| filter_min_p::over_parts(b, input, mx.clone(), mass.clone()));
    });
}

fn parts_kernel(input: Input) -> Kernel {
    let mut b = Block::new();
    for_each_row_part_at(&mut b, listed_row, |b| {
        let takes = takes_row(b);
        let one = one_read_row(b);
        b.if_(takes.and(one), |b| {
            b.if_else(var("top_p_cut"), |b| filter_top_p::histogram_part(b, input), |b| read_part(b, input));
            // After both reads, so that ptxas lays out the two reads first (the cost model
            // takes the parts' first two streaming loops as their reads).
            let min_p = |b: &mut Block| b.scope(|b| filter_top_p::min_p_state(b, input));
            b.if_(var("min_p_cut"), |b| super::combine::last_part(b, min_p));
        });
    });
    let mut buffers = filter_inputs(input);
    buffers.push(buffer("listed", Storage::U32, false));
    // Atomic: a top-p row's last part reads the other parts' histograms in the same launch.
    buffers.extend(part_buffers());
    let doc = "top-k (at most CAP), one read of the row: each part's k + 1 candidates, maximum and sum \
               (a top-p row's histogram, and its last part the cut's estimate)";
    let name = format!("top_k_parts_{}", input.suffix());
    let mut k = kernel(name, doc, 1, buffers, functions(false), b);
    k.workgroup = Workgroup::Part;
    // 48 registers on sm_90, so an H200 multiprocessor holds five blocks of 256 where 64 held
    // four (at 32 x 151936, 1216 parts took three rounds of 528 blocks, and take two), with no
    // spill. Six (40 registers) cost more by the model: as many rounds at 32 rows, more work a
    // round. A T4 holds three by their workgroup memory whatever the registers.
    k.occupancy = Occupancy::AtLeast(5);
    k.shared.push(SharedDecl::new(KEYS, Ty::U32, PART_COLS));
    k.shared.extend(filter_top_p::histogram_shared(input));
    k
}

/// The merge, one workgroup a row; with `FLAG_CUT_HERE` also the top-p cut's launch, a
/// workgroup per part of each row ([`filter_top_p::cut_here`]), where the host knows the parts
/// all run at once.
fn merge_kernel(input: Input) -> Kernel {
    let mut b = Block::new();
    b.let_("parts", Ty::U32, (param("flags") >> u(PARTS_SHIFT)).max(u(1)));
    let here = b.let_("cut_here", Ty::Bool, (param("flags") & u(FLAG_CUT_HERE)).ne_(u(0)));
    let per_row = select(here.clone(), var("parts"), u(1));
    for_each_row_group_at(&mut b, per_row, listed_row, |b| {
        let takes = takes_row(b);
        b.if_(takes, |b| {
            b.let_("one_read_done", Ty::Bool, boolean(false));
            let one = one_read_row(b);
            // The reads of the row before this launch: the parts' and, for a top-p row, the cut's.
            b.let_("reads_before", Ty::U32, select(one.clone(), u(1), u(0)));
            b.let_("merges", Ty::Bool, var("part").eq_(u(0)));
            b.if_(here.and(filter_top_p::may_cut()), |b| b.scope(|b| filter_top_p::cut_here(b, input)));
            // Min-p alone is merged as the cut's where its parts sent it there, and from the
            // parts' races where they raced it.
            b.let_("min_p_raced", Ty::Bool, boolean(false));
            b.if_(var("min_p_cut"), |b| {
                // `GO` says where the parts sent the row (`filter_top_p::min_p_state`).
                let go = filter_top_p::row_go(b, var("slot"));
                b.set("top_p_cut", go.clone().eq_(u(1)));
                b.set("min_p_raced", go.ge(u(filter_top_p::GO_RACED)));
            });
            b.if_(var("merges"), |b| {
                b.if_(one, |b| {
                    b.if_else(
                        var("top_p_cut"),
                        |b| b.scope(|b| filter_top_p::merge_cut(b, input)),
                        |b| {
                            b.if_else(
                                var("min_p_raced"),
                                |b| b.scope(|b| filter_min_p::merge(b, input)),
                                |b| b.scope(|b| merge_row(b, input)),
                            )
                        },
                    )
                });
                b.if_(var("one_read_done").not(), |b| {
                    // The merge's arrays are the body's list: every read of them is done.
                    b.barrier();
                    filter_body(b, input, Output::Sample, var("reads_before"), Build::Full)
                });
            });
        });
    });
    let mut buffers = filter_buffers(input, Output::Sample);
    // Atomic: with `FLAG_CUT_HERE` a row's last part reads the other parts' records.
    buffers.push(atomic_partials_buffer());
    let doc = "top-k after top_k_parts (and top-p rows after top_p_cut, or with FLAG_CUT_HERE the cut too): \
               the set and the race from the parts' candidates or listed range, else the filter kernel's";
    let passes = 1 + max_passes(Output::Sample, Build::Full);
    let name = format!("top_k_merge_{}", input.suffix());
    let mut k = kernel(name, doc, passes, buffers, functions(true), b);
    k.shared.extend(filter_shared(Build::Full));
    k.shared.push(filter_top_p::cut_shared());
    k.shared.push(SharedDecl::atomic(SELECT_SCRATCH, select::WORDS));
    // One block an SM is enough for a workgroup a row doing k-sized work; asked for, ptxas
    // gives sm_75's 256 threads the 157 registers they need, where it capped them at 128 and
    // spilled 60 bytes since min-p rows may take the cut's merge. sm_90's 512 threads hold 128
    // either way.
    k.occupancy = Occupancy::AtLeast(1);
    k
}

/// The inputs of this path: logits of each dtype, then probabilities.
pub(super) fn inputs() -> Vec<Input> {
    Dtype::ALL.iter().map(|&d| Input::Logits(d)).chain([Input::Probs]).collect()
}

/// Every kernel of this path: the parts and the merge, per input.
pub fn all() -> Vec<Kernel> {
    inputs().into_iter().map(parts_kernel).chain(inputs().into_iter().map(merge_kernel)).collect()
}
