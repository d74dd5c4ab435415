//! Top-k, top-p and min-p: the exact kept set `S` of each row without sorting, in at most a
//! number of passes over the row fixed by the row's parameters, then the same race as the plain
//! path inside `S`.
//!
//! Tokens are ordered by (value descending, index ascending), the value being `z - max z` rounded
//! to f32, `z = l / T` (logits; the order of the float32 softmax's probabilities), or `p`
//! (probabilities). Every filter keeps a prefix of that order, so `S` is the shortest
//! prefix. The search for its last element is a radix select over an order-preserving u32 key of
//! the value, four bits a pass (eight passes): each pass counts, per digit of the candidates, how
//! many tokens there are and their mass, and keeps the lowest digit whose first token is still
//! kept. Masses are fixed-point integers (`w * 2^40`, `w = p / p_max`), so their sums are exact and
//! the same set comes out on every run, block size and backend; no float atomics. Tokens tied at
//! the boundary key all have the same mass, so how many of them are kept is arithmetic; which
//! ones (the lowest indices) comes from a block-wide exclusive scan of per-invocation tie counts:
//! the last digit pass and the pass that uses the set walk one contiguous chunk of the row per
//! invocation, in index order; the other passes read coalesced.
//!
//! Seeded rows (SGLang's deterministic sampler) run its float64 race on hashed noise inside `S`
//! instead of the Philox race, so deterministic inference keeps its filters.
//!
//! Once a select's candidates fit in [`LIST_CAP`], the one-workgroup kernels list them in
//! workgroup memory and read only the list for the select's later passes (see [`find_set`]), so
//! the passes below are a bound; the split kernels always take them (plus one).
//!
//! Passes over the row at most, by parameters:
//! - min-p only: 2 (the maximum, then the race);
//! - any top-k or top-p (joint, or top-k first without both): 10 (maximum, 8 digit passes, race);
//! - top-k first with both top-k and top-p: 18 (a first select finds the top-k mass that top-p is
//!   measured against, then the joint select);
//! - the renormalizing kernel reads once more, for the kept mass before it writes.
//!
//! Sampling from logits goes through `filter_top_k.rs` (the one-read path for top-k up to its
//! cap), whose merge kernel runs this kernel's body ([`filter_body`]) on every row it does not
//! decide from its candidates; these kernels stay for probabilities, masks and renormalizing.
//!
//! These kernels give each row one workgroup. `filter_split.rs` samples rows split over several
//! (a launch per pass) from the same pieces: the digit counts, the select's step, the tie count,
//! the race in the set and the results are functions here that both call.
//!
//! Row record words (see `abi::word`): top_k (u32; 0 or at least the vocabulary: none),
//! top_p (f32 bits; outside (0, 1): none), min_p (f32 bits; at most 0 or NaN: none; above 1:
//! 1), order (1: top-k first; 2: min-p first; else joint). A zeroed record is a plain row.

use super::abi::{
    buffer, for_each_row, for_each_row_at, kernel, logits_input, output_buffers, row_is_ranked, row_is_seeded,
    row_temperature, row_word, scaled, word, write_results, Dtype, PhiloxKey, FLAG_FILTERED_ONLY, FLAG_PASSES,
    FLAG_ROW_LIST, NO_TOP_K,
};
use super::filter_rank;
use super::filter_values as values;
use super::math;
use super::philox;
use super::seeded::{self, score64};
use super::softmax::softmax_weight;
use crate::ir::*;

/// Order word value: top-p measured on the top-k set (FlashInfer); else joint (SGLang).
pub const ORDER_TOP_K_FIRST: u32 = 1;
/// Order word value: min-p first, then top-k, then top-p measured on what both keep (vLLM v1).
pub const ORDER_MIN_P_FIRST: u32 = 2;
/// Bits resolved per digit pass, and the passes that resolve the 32-bit key.
const DIGIT_BITS: u32 = 4;
pub(super) const DIGITS: u32 = 1 << DIGIT_BITS;
pub(super) const DIGIT_PASSES: u32 = 32 / DIGIT_BITS;
/// Fixed-point scale of the masses: `w * 2^40` with `w <= 1`, so a row of up to 2^23 tokens sums
/// below 2^63 (the host refuses longer rows for these kernels).
pub const MASS_BITS: u32 = 40;
pub const MAX_VOCAB: u32 = 1 << (63 - MASS_BITS);
pub(super) const NONE: u32 = u32::MAX;
/// The workgroup array the one-workgroup kernels list a select's last candidates in (16 KiB of
/// column indices): once a prefix's bucket holds at most this many tokens, the select's later
/// passes read the list, not the row. A bucket after three digit passes is an eighth of an
/// octave of `z - max`: about 3000 tokens of the benchmarks' 151936-token rows of evenly spread
/// logits, so the list takes them after three reads of the row.
pub const LIST_CAP: u32 = 4096;
pub(super) const LIST: &str = "listed_cols";
/// A listed select whose bucket holds at most this many tokens ends at once: each of them is
/// ranked against all the others in workgroup memory (see [`select_in_bucket`]).
const BUCKET_CAP: u32 = 64;
const BUCKET_COLS: &str = "bucket_cols";
const BUCKET_KEYS: &str = "bucket_keys";
const BUCKET_MASSES: &str = "bucket_masses";
pub(super) const ALL: u64 = u64::MAX;

/// What the filter kernels read.
#[derive(Clone, Copy)]
pub enum Input {
    Logits(Dtype),
    Probs,
}

impl Input {
    /// The kernel names' input part: `logits_f32`, or `probs`.
    pub(super) fn suffix(self) -> String {
        match self {
            Input::Logits(d) => format!("logits_{}", d.suffix()),
            Input::Probs => "probs".into(),
        }
    }
}

/// What they write.
#[derive(Clone, Copy, PartialEq)]
pub enum Output {
    /// A token per row (and on request its log-probability, status and pass count).
    Sample,
    /// The logits with every token outside `S` set to -inf (f32, the input's stride).
    Mask,
    /// The probabilities renormalized over `S`, zero outside (the input's stride).
    Renorm,
}

/// The devices a filter kernel is built for.
#[derive(Clone, Copy, PartialEq)]
pub enum Build {
    /// float64, 64-bit integers and 32 KiB of workgroup memory (`WgpuBackend::FEATURES`, every
    /// CUDA device): every row, the seeded races too, with a list of [`LIST_CAP`].
    Full,
    /// None of those (a Metal device, an engine's default wgpu device): the Philox race alone
    /// (a seeded row is not taken; the host refuses it first), u64 held as two u32 words in
    /// WGSL, and a list of [`PORTABLE_LIST_CAP`], so the kernel fits wgpu's default 16 KiB.
    Portable,
}

impl Build {
    /// The select's list in workgroup memory, in u32.
    pub(super) fn list_cap(self) -> u32 {
        match self {
            Build::Full => LIST_CAP,
            Build::Portable => PORTABLE_LIST_CAP,
        }
    }
}

/// [`Build::Portable`]'s list: 8 KiB.
pub const PORTABLE_LIST_CAP: u32 = 2048;

pub(super) const FIXED: &str = "sk_fixed";
pub(super) const FIXED_F32: &str = "sk_fixed_f32";
pub(super) const FRACTION: &str = "sk_fraction";

/// `w` in [0, 1] as a u64 multiple of 2^-40, truncated: exact for `w >= 2^-16`, and within 2^-40
/// below. `w * 2^8` splits exactly into integer and fraction parts in f32.
pub(super) fn fixed() -> Function {
    function(FIXED, &[("w", Ty::F32)], Ty::U64, |b| {
        let s = b.let_("s", Ty::F32, var("w") * f((1u32 << (MASS_BITS - 32)) as f32));
        let hi = b.let_("hi", Ty::F32, floor(s.clone()));
        let lo = b.let_("lo", Ty::F32, (s - hi.clone()) * f(4294967296.0));
        b.ret((hi.cast(Ty::U32).cast(Ty::U64) << u(32)) | lo.cast(Ty::U32).cast(Ty::U64));
    })
}

/// A fixed-point mass back to f32 (relative to the row's largest weight).
fn fixed_f32() -> Function {
    function(FIXED_F32, &[("m", Ty::U64)], Ty::F32, |b| {
        let hi = (var("m") >> u(32)).cast(Ty::U32).cast(Ty::F32);
        let lo = (var("m") & Expr::Lit(Lit::U64(0xffff_ffff))).cast(Ty::U32).cast(Ty::F32);
        b.ret(hi * f(2f32.powi(32 - MASS_BITS as i32)) + lo * f(2f32.powi(-(MASS_BITS as i32))));
    })
}

/// `floor(p * m)` for `p` in (0, 1] and a mass `m < 2^63`, in integers: `p` is taken to 2^-31.
fn fraction() -> Function {
    function(FRACTION, &[("p", Ty::F32), ("m", Ty::U64)], Ty::U64, |b| {
        let q = b.let_("q", Ty::U64, (var("p") * f(2147483648.0)).cast(Ty::U32).cast(Ty::U64));
        let hi = var("m") >> u(32);
        let lo = var("m") & Expr::Lit(Lit::U64(0xffff_ffff));
        b.ret(u(2).cast(Ty::U64) * q.clone() * hi + ((q * lo) >> u(31)));
    })
}

/// One read of the workgroup's columns `[col_lo, col_hi)` (the row, or a split row's part),
/// counted in `sweeps`. Where `chunked` holds, each invocation walks one contiguous chunk in
/// index order, four columns a step (whole quads, so each quad's Philox block, from `per_quad`,
/// is the plain path's): for the passes that rank the tokens tied at the boundary by index and
/// for the race. Where it does not, the invocations take neighbouring columns (coalesced on a
/// GPU, one vector load on lavapipe, where the quads' stride of four is a gather) and
/// `per_quad` is not called: for the passes that only count and sum. The layout is a runtime
/// value, so a pass is written once whichever it takes.
pub(super) fn sweep(
    b: &mut Block,
    input: Input,
    chunked: Expr,
    per_quad: impl Fn(&mut Block, Expr),
    per_col: impl Fn(&mut Block, Expr, u8, Expr),
) {
    b.set("sweeps", var("sweeps") + u(1));
    // A sweep's own names, in a scope: a pass may hold several sweeps.
    b.scope(|b| {
        let n = b.let_("sweep_n", Ty::U32, var("col_hi") - var("col_lo"));
        let per_col = |b: &mut Block, i: Expr, j: u8, x: Expr| {
            let col = b.let_("col", Ty::U32, var("col_lo") + i);
            per_col(b, col, j, x);
        };
        b.if_else(
            chunked,
            |b| {
                let quads = b.let_("quads", Ty::U32, (n.clone() + u(3)) >> u(2));
                let bs = builtin(Builtin::BlockSize);
                let per = b.let_("per", Ty::U32, (quads.clone() + bs.clone() - u(1)) / bs);
                let lid = builtin(Builtin::LocalId);
                let first = (lid.clone() * per.clone()).min(quads.clone()) * u(4);
                let last = (lid * per.clone() + per).min(quads) * u(4);
                b.for_("c0", first, last, u(4), |b, c0| {
                    let quad = |b: &mut Block| per_quad(b, var("col_lo") + c0.clone());
                    values::read_step(b, input, (n.clone(), None), 4, (c0.clone(), u(1)), quad, &per_col)
                });
            },
            |b| values::for_each_read(b, input, (n.clone(), None), 4, per_col),
        );
    });
}

/// A sweep over the `n_list` columns listed in workgroup memory, neighbouring positions per
/// invocation; not a read of the row, so `sweeps` does not count it. There is no chunked
/// layout: the list is in no index order, so a listed select never ranks its ties from it.
fn sweep_list(b: &mut Block, input: Input, per_col: &impl Fn(&mut Block, Expr, Expr)) {
    let bs = builtin(Builtin::BlockSize);
    b.for_("at", builtin(Builtin::LocalId), var("n_list"), bs, |b, at| {
        let col = b.let_("col", Ty::U32, load_shared(LIST, at));
        let x = values::read(b, input, col.clone(), "lx");
        per_col(b, col, x);
    });
}

/// Declares, for a column whose element `x` was read ([`values::read`]), `zv` (the value the
/// race scores: `z` or `p`), `ov` (the value the order is on) and `key` (u32, larger first),
/// and `wv`, `ok`, `mv` unset (see [`weigh`]).
pub(super) fn element(b: &mut Block, input: Input, x: Expr) {
    match input {
        Input::Logits(_) => {
            let z = b.let_("zv", Ty::F32, x / var("temp"));
            // The order is on `z - max` rounded to f32, as the softmax's probabilities are (two
            // values of `z` that round to the same distance have the same probability).
            let inf = f(f32::INFINITY);
            let top = select(z.clone().eq_(inf.clone()), f(0.0), f(f32::NEG_INFINITY));
            b.let_("ov", Ty::F32, select(var("mx").eq_(inf), top, z - var("mx")));
        }
        Input::Probs => {
            let x = b.let_("zv", Ty::F32, x);
            b.let_("ov", Ty::F32, x);
        }
    }
    b.let_("key", Ty::U32, order_key(var("ov")));
    b.let_("wv", Ty::F32, f(0.0));
    b.let_("ok", Ty::Bool, boolean(false));
    b.let_("mv", Ty::U64, Expr::Lit(Lit::U64(0)));
}

/// The u32 key of an f32 value, in the same order (larger first): flip every bit of negatives,
/// the sign bit of the rest. -inf gets `0x007f_ffff`; no value gets 0, which the one-read path
/// uses for "no token". -0 is +0 first: the two are one value (tied, as the oracle has them), and
/// a maximum of either sign must key at or above every value (a part whose largest came out as
/// -0 once left out its +0: no token at all). The test is on the bits, which no compiler's
/// float rules (signed zeros not honoured, say) may fold away.
pub(super) fn order_key(v: Expr) -> Expr {
    let bits = v.bitcast(Ty::U32);
    let bits = select(bits.clone().eq_(u(0x8000_0000)), u(0), bits);
    // Every bit flipped where the sign bit is set, else the sign bit alone.
    bits.clone() ^ (top_bit_filled(bits) | u(0x8000_0000))
}

/// The f32 value of an [`order_key`].
pub(super) fn key_value(k: Expr) -> Expr {
    // The top bit flipped where it is set (a value at or above +0), else every bit.
    (k.clone() ^ ((top_bit_filled(k) ^ u(u32::MAX)) | u(0x8000_0000))).bitcast(Ty::F32)
}

/// All ones where the 32-bit `x`'s top bit is set, else zero: one arithmetic shift, so that
/// [`order_key`] and [`key_value`] are a shift and one three-input logic operation.
fn top_bit_filled(x: Expr) -> Expr {
    (x.bitcast(Ty::I32) >> u(31)).bitcast(Ty::U32)
}

/// Sets, after [`element`], `wv` (the token's weight relative to the row's largest, in [0, 1]),
/// `ok` (it has probability) and `mv` (its fixed-point mass). Only the tokens a pass can still
/// count pay for the exponential.
fn weigh(b: &mut Block, input: Input) {
    let w = match input {
        Input::Logits(_) => softmax_weight(var("zv"), var("mx")),
        Input::Probs => {
            let x = var("zv");
            let valid = x.clone().gt(f(0.0)).and(x.clone().lt(f(f32::INFINITY)));
            // The largest is weighed 1 without a division: Vulkan's division is only within
            // 2.5 ulp, and p_max / p_max below 1 would drop the top token under min-p 1.
            select(valid, select(x.clone().eq_(var("mx")), f(1.0), x / var("mx")), f(0.0))
        }
    };
    b.set("wv", w);
    b.set("ok", var("wv").gt(f(0.0)));
    b.set("mv", call(FIXED, vec![var("wv")]));
}

/// [`element`] for the column `col`, weighed when its key matches the select's prefix: `ok`
/// then says it is one of the prefix's tokens with probability (a candidate of the select).
/// Min-p first: the first select's candidates are only the tokens min-p keeps, so its mass is
/// that of the top-k of what min-p keeps (min-p keeps a prefix, so the two intersect as
/// prefixes do).
fn candidate(b: &mut Block, input: Input, x: Expr) {
    element(b, input, x);
    b.if_((var("key") & var("sel_mask")).eq_(var("sel_key")), |b| {
        weigh(b, input);
        let dropped = var("in_a").and(var("mp_first")).and(var("wv").lt(var("mp")));
        b.if_(dropped, |b| b.set("ok", boolean(false)));
    });
}

/// The largest value among this workgroup's tokens with probability, into the new `part_max`
/// (one pass).
pub(super) fn part_max(b: &mut Block, input: Input) -> Expr {
    b.let_("m", Ty::F32, f(f32::NEG_INFINITY));
    sweep(
        b,
        input,
        boolean(false),
        |_, _| {},
        |b, _, _, x| match input {
            Input::Logits(_) => b.set("m", var("m").max(x / var("temp"))),
            Input::Probs => {
                let valid = x.clone().gt(f(0.0)).and(x.clone().lt(f(f32::INFINITY)));
                b.if_(valid, |b| b.set("m", var("m").max(x)));
            }
        },
    );
    b.reduce(ReduceOp::Max, Ty::F32, var("m"), "part_max")
}

/// The select's state, carried from one digit pass to the next: `sel_key` (the last kept
/// token's key so far), `sel_mask` (its resolved bits), `sel_n` and `sel_m` (count and mass
/// strictly above the prefix), `sel_tn` and `sel_tm` (those of the prefix), `lim` (the mass
/// limit; no limit until top-p sets one), `row_mass` and `tie_col` (no token of the boundary key
/// past this index is kept; none unless a select ends in workgroup memory).
pub(super) fn declare_select(b: &mut Block) {
    for name in ["sel_key", "sel_mask", "sel_n", "sel_tn"] {
        b.let_(name, Ty::U32, u(0));
    }
    for name in ["sel_m", "sel_tm", "row_mass"] {
        b.let_(name, Ty::U64, Expr::Lit(Lit::U64(0)));
    }
    b.let_("lim", Ty::U64, Expr::Lit(Lit::U64(ALL)));
    b.let_("tie_col", Ty::U32, u(NONE));
}

/// The row's digit passes: with top-k first and both filters, 8 for the first select (which
/// finds the top-k mass top-p is measured against), then 8 for the second, with top-k or top-p.
/// Declares `sel_a` (the first select's passes) and `digits` (all of them).
pub(super) fn digit_schedule(b: &mut Block) {
    b.let_("sel_a", Ty::U32, select(var("k_first"), u(DIGIT_PASSES), u(0)));
    b.let_("digits", Ty::U32, var("sel_a") + select(var("searched"), u(DIGIT_PASSES), u(0)));
}

/// Declares, for the digit pass `st` (1 to `digits`), `in_a` (it is the first select's),
/// `digit_pass` (0..8 within its select) and `shift` (of its digit in the key).
pub(super) fn digit_pass(b: &mut Block, st: Expr) {
    b.let_("in_a", Ty::Bool, st.clone().le(var("sel_a")));
    b.let_("digit_pass", Ty::U32, select(var("in_a"), st.clone() - u(1), st - u(1) - var("sel_a")));
    b.let_("shift", Ty::U32, u(32 - DIGIT_BITS) - var("digit_pass") * u(DIGIT_BITS));
}

/// One digit pass over the workgroup's columns: per digit, each invocation's count and mass of
/// the candidates (the tokens whose key matches the prefix so far), in the histograms `cnt` and
/// `mas`, and the workgroup's, in `cnt_s*` and `mas_s*`. With `listing` (the one-workgroup
/// kernels), the pass reads the list instead of the row where `listed` holds.
pub(super) fn digit_counts(b: &mut Block, input: Input, chunked: Expr, listing: bool) {
    count_digits(b, |b| {
        let count = |b: &mut Block, x: Expr| {
            candidate(b, input, x);
            b.if_(var("ok"), |b| add_digit(b, var("key"), var("mv")));
        };
        if listing {
            b.if_(var("listed"), |b| sweep_list(b, input, &|b, _, x| count(b, x)));
            b.if_(var("listed").not(), |b| sweep(b, input, chunked.clone(), |_, _| {}, |b, _, _, x| count(b, x)));
        } else {
            sweep(b, input, chunked, |_, _| {}, |b, _, _, x| count(b, x));
        }
    });
}

/// A digit pass's histograms around `visit`, which calls [`add_digit`] for each candidate: the
/// invocation's count and mass per digit in `cnt` and `mas`, then the workgroup's in `cnt_s*`
/// and `mas_s*`.
pub(super) fn count_digits(b: &mut Block, visit: impl FnOnce(&mut Block)) {
    b.let_bins("cnt", Ty::U32, DIGITS);
    b.let_bins("mas", Ty::U64, DIGITS);
    visit(b);
    b.sum_many(Ty::U32, (0..DIGITS).map(|d| bin_value("cnt", d)).collect(), &digit_names("cnt_s"));
    b.sum_many(Ty::U64, (0..DIGITS).map(|d| bin_value("mas", d)).collect(), &digit_names("mas_s"));
}

/// Counts a candidate of order key `key` and fixed-point mass `mass` under its digit at `shift`.
pub(super) fn add_digit(b: &mut Block, key: Expr, mass: Expr) {
    let digit = b.let_("digit", Ty::U32, (key >> var("shift")) & u(DIGITS - 1));
    b.add_to_bin("cnt", digit.clone(), u(1));
    b.add_to_bin("mas", digit, mass);
}

pub(super) fn digit_names(prefix: &str) -> Vec<String> {
    (0..DIGITS).map(|d| format!("{prefix}{d}")).collect()
}

/// The select's step after a digit pass, from the row's counts and masses per digit (`cnt_s*`,
/// `mas_s*`): the prefix grows by the lowest non-empty digit whose first token is kept (its
/// count before it below `kk`, its mass before it at most `lim`). The joint select's first pass
/// sets `lim` to `pp` of the row's whole mass (which it sums into `row_mass`); after the first
/// select's last pass, `lim` becomes `pp` of the top-k mass and the second select starts. With
/// `mine`, the invocation's own count of the chosen digit (of `cnt`) goes to `mine`, which the last
/// pass's ranks of the tied tokens need.
pub(super) fn decide(b: &mut Block, mine: bool) {
    // The first pass counts every token: its masses sum to the row's.
    b.if_(var("digit_pass").eq_(u(0)), |b| {
        b.set("row_mass", (1..DIGITS).fold(var("mas_s0"), |acc, d| acc + var(&format!("mas_s{d}"))));
        b.if_(var("in_a").not().and(var("k_first").not()), |b| {
            b.set("lim", call(FRACTION, vec![var("pp"), var("row_mass")]))
        });
    });
    select_step(b, mine);
}

/// [`decide`]'s step, with `lim` already set: for a select over some of the row's tokens (the
/// rest counted in `sel_n` and `sel_m` beforehand), whose first pass does not see the row's mass.
pub(super) fn select_step(b: &mut Block, mine: bool) {
    // From the highest digit down: the lowest non-empty digit whose first token is kept.
    let nb = b.let_("nb", Ty::U32, var("sel_n"));
    let mb = b.let_("mb", Ty::U64, var("sel_m"));
    let chosen = b.let_("chosen", Ty::U32, u(NONE));
    b.let_("cn", Ty::U32, var("sel_n"));
    b.let_("cm", Ty::U64, var("sel_m"));
    for d in (0..DIGITS).rev() {
        let (cs, ws) = (var(&format!("cnt_s{d}")), var(&format!("mas_s{d}")));
        b.if_(cs.clone().gt(u(0)), |b| {
            b.if_(nb.clone().lt(var("kk")).and(mb.clone().le(var("lim"))), |b| {
                b.set("chosen", u(d));
                b.set("cn", nb.clone());
                b.set("cm", mb.clone());
            });
            b.set("nb", nb.clone() + cs);
            b.set("mb", mb.clone() + ws);
        });
    }
    b.if_(chosen.clone().ne_(u(NONE)), |b| {
        b.set("sel_key", var("sel_key") | (chosen.clone() << var("shift")));
        b.set("sel_n", var("cn"));
        b.set("sel_m", var("cm"));
        let pick = |value: &dyn Fn(u32) -> Expr, zero: Expr| {
            (0..DIGITS).fold(zero, |e, d| select(chosen.clone().eq_(u(d)), value(d), e))
        };
        b.set("sel_tn", pick(&|d| var(&format!("cnt_s{d}")), u(0)));
        b.set("sel_tm", pick(&|d| var(&format!("mas_s{d}")), Expr::Lit(Lit::U64(0))));
        if mine {
            b.set("mine", pick(&|d| bin_value("cnt", d), u(0)));
        }
    });
    b.set("sel_mask", var("sel_mask") | (u(DIGITS - 1) << var("shift")));
    b.if_(var("in_a").and(var("digit_pass").eq_(u(DIGIT_PASSES - 1))), |b| {
        // Top-k first: the mass of the top-k set is what top-p is measured against.
        ties(b);
        let mass = var("sel_m") + var("ties").cast(Ty::U64) * var("tie_v");
        b.set("lim", call(FRACTION, vec![var("pp"), mass]));
        for name in ["sel_key", "sel_mask", "sel_n", "sel_tn"] {
            b.set(name, u(0));
        }
        for name in ["sel_m", "sel_tm"] {
            b.set(name, Expr::Lit(Lit::U64(0)));
        }
    });
}

/// After a select's last pass: `ties`, how many tokens of the boundary key `sel_key` are kept
/// (the lowest indices; all of them weigh the same, `tie_v`, so it is arithmetic: as many as
/// top-k and the mass limit allow).
pub(super) fn ties(b: &mut Block) {
    let zero64 = || Expr::Lit(Lit::U64(0));
    let tn = b.let_("tn64", Ty::U64, var("sel_tn").cast(Ty::U64));
    let nonzero = |e: Expr| select(e.clone().eq_(zero64()), Expr::Lit(Lit::U64(1)), e);
    let v = b.let_("tie_v", Ty::U64, var("sel_tm") / nonzero(tn.clone()));
    let by_k = (var("kk") - var("sel_n")).cast(Ty::U64);
    let room = var("lim") - var("sel_m");
    let by_p = select(v.clone().eq_(zero64()), tn.clone(), room / nonzero(v) + Expr::Lit(Lit::U64(1)));
    b.let_("ties", Ty::U32, tn.min(by_k).min(by_p).cast(Ty::U32));
}

/// The per-row filter settings, read and clamped so that any bits are safe: `kk` (top-k count,
/// at most the vocabulary), `pp` (top-p in (0, 1]), `mp` (min-p in [0, 1]), `k_first` (top-p
/// measured after a prefix, `Filters::top_p_after_a_prefix`: a first select finds its mass),
/// `mp_first` (min-p first with min-p and top-p: that select counts only what min-p keeps) and
/// `searched` (top-k or top-p is active: the select runs).
fn row_filters(b: &mut Block) {
    let k = b.let_("k_raw", Ty::U32, row_word(word::TOP_K));
    b.let_("kk", Ty::U32, select(k.clone().eq_(u(0)).or(k.clone().gt(param("vocab"))), param("vocab"), k));
    let p = b.let_("p_raw", Ty::F32, row_word(word::TOP_P).bitcast(Ty::F32));
    b.let_("pp", Ty::F32, select(p.clone().gt(f(0.0)).and(p.clone().lt(f(1.0))), p, f(1.0)));
    let mp = b.let_("mp_raw", Ty::F32, row_word(word::MIN_P).bitcast(Ty::F32));
    b.let_("mp", Ty::F32, select(mp.clone().gt(f(0.0)), mp.min(f(1.0)), f(0.0)));
    let by_k = var("kk").lt(param("vocab"));
    let by_p = var("pp").lt(f(1.0));
    b.let_("searched", Ty::Bool, by_k.clone().or(by_p.clone()));
    let order = b.let_("order", Ty::U32, row_word(word::ORDER));
    let mp_first = order.clone().eq_(u(ORDER_MIN_P_FIRST)).and(var("mp").gt(f(0.0)));
    let mp_first = b.let_("mp_first", Ty::Bool, mp_first.and(by_p.clone()));
    let k_first = order.clone().eq_(u(ORDER_TOP_K_FIRST)).or(order.eq_(u(ORDER_MIN_P_FIRST))).and(by_k);
    b.let_("k_first", Ty::Bool, k_first.or(mp_first).and(by_p));
}

/// Whether the row has a filter that can change its token: the rows the filter kernels take
/// under [`FLAG_FILTERED_ONLY`] and the plain sampler leaves to them, seeded or not. Greedy rows
/// never (the largest value is always kept, and greedy takes it). A row that hashes ranks with
/// a top-k at or above the vocabulary is one too: SGLang still sorts it, so its noise is its
/// rank's (`RowParams::hashes_ranks`). Needs `noisy` (from `row_temperature`).
pub(super) fn row_is_filtered(b: &mut Block) -> Expr {
    row_filters(b);
    let k = var("k_raw");
    let sorted = row_is_ranked().and(k.clone().ne_(u(0))).and(k.ne_(u(NO_TOP_K)));
    b.let_("filtered", Ty::Bool, var("noisy").and(var("searched").or(var("mp").gt(f(0.0))).or(sorted)))
}

/// Finds the row's kept set with one workgroup: the digit passes, each deciding the select's
/// step at once; the last pass of each select walks chunks in index order, so the invocations'
/// counts of the boundary key rank its tied tokens (`tie_start`, from a scan). Afterwards a
/// sweep decides each token with [`kept`].
///
/// Once the prefix's bucket fits in [`LIST_CAP`], one read of the row lists its tokens in
/// workgroup memory and the select's later passes read only them: the row is read fewer times
/// (how many depends on the data), and the set is the same. The list is written in the previous
/// pass's layout, each invocation from the offset its count of the chosen digit gives, so it is
/// not in index order. Once the bucket holds at most [`BUCKET_CAP`] tokens, the select ends in
/// workgroup memory (`done`; [`select_in_bucket`]), its boundary being a key and the highest
/// index kept at it (`tie_col`). A listed select that never gets there ranks its tied tokens
/// with one more read of the row in chunks, unless they are all kept.
fn find_set(b: &mut Block, input: Input, list_cap: u32) {
    declare_select(b);
    b.let_("mine", Ty::U32, u(0));
    b.let_("listed", Ty::Bool, boolean(false));
    b.let_("n_list", Ty::U32, u(0));
    b.let_("done", Ty::Bool, boolean(false));
    digit_schedule(b);
    b.for_("stage", u(1), var("digits") + u(1), u(1), |b, st| {
        digit_pass(b, st);
        b.if_(var("digit_pass").eq_(u(0)), |b| b.set("listed", boolean(false)));
        // Not in a select's first pass, which has no counts yet.
        let fits = var("sel_tn").le(u(list_cap));
        let compact = var("listed").not().and(var("digit_pass").ge(u(1))).and(fits);
        b.if_(compact, |b| {
            list_bucket(b, input, list_cap);
            b.set("listed", boolean(true));
            b.set("n_list", var("sel_tn"));
        });
        // The first select (top-k first) needs its full counts for the top-k mass: it never ends early.
        let small = var("listed").and(var("in_a").not()).and(var("sel_tn").le(u(BUCKET_CAP)));
        b.if_(small.and(var("done").not()), |b| {
            select_in_bucket(b, input);
            b.set("done", boolean(true));
        });
        b.if_(var("done").not(), |b| {
            digit_counts(b, input, var("digit_pass").eq_(u(DIGIT_PASSES - 1)), true);
            decide(b, true);
        });
    });
    set_bounds(b);
    b.if_(var("searched"), |b| {
        b.if_(var("done"), |b| b.set("s_ties", u(NONE)));
        b.if_(var("listed").and(var("done").not()), |b| {
            // All of the boundary key's tokens kept needs no ranks; else one more read ranks them.
            b.if_else(var("s_ties").ge(var("sel_tn")), |b| b.set("s_ties", u(NONE)), |b| count_ties(b, input));
        });
        let before = b.scan(var("mine"), "ties_before");
        b.set("tie_start", before);
    });
}

/// One read of the row that lists the tokens of the select's prefix (the `sel_tn` the last
/// pass counted, at most `list_cap`) in workgroup memory. It reads in the last pass's layout
/// (coalesced: never after a select's last pass), so each invocation meets the tokens it
/// counted there and writes them from the offset its count (`mine`) gives.
fn list_bucket(b: &mut Block, input: Input, list_cap: u32) {
    let from = b.scan(var("mine"), "list_from");
    b.let_("list_at", Ty::U32, from);
    sweep(
        b,
        input,
        boolean(false),
        |_, _| {},
        |b, col, _, x| {
            candidate(b, input, x);
            // The offsets are exact; the bound only keeps a store inside the array whatever happens.
            b.if_(var("ok").and(var("list_at").lt(u(list_cap))), |b| {
                b.store_shared(LIST, var("list_at"), col);
                b.set("list_at", var("list_at") + u(1));
            });
        },
    );
    b.barrier();
}

/// Ends a listed select whose bucket (the `sel_tn` tokens of the prefix) holds at most
/// [`BUCKET_CAP`]: the bucket's tokens are copied from the list with their keys and masses, then
/// each counts the tokens before it in the order (larger key, or the same key and a lower index)
/// and their mass. A token is kept when those, with the `sel_n` tokens and `sel_m` mass above
/// the bucket, leave it within top-k and the mass limit; the last kept one (kept, and the token
/// after it not) gives the set's boundary: its key, in `sel_key` as a finished select leaves it,
/// and `tie_col`, the highest index kept at that key. At least the bucket's first token is kept (that is how the select chose it), and
/// nothing after the bucket is.
fn select_in_bucket(b: &mut Block, input: Input) {
    let in_bucket = |b: &mut Block, col: Expr, x: Expr, then: &dyn Fn(&mut Block, Expr)| {
        candidate(b, input, x);
        b.if_(var("ok"), |b| then(b, col));
    };
    b.set("mine", u(0));
    sweep_list(b, input, &|b, col, x| in_bucket(b, col, x, &|b, _| b.set("mine", var("mine") + u(1))));
    let from = b.scan(var("mine"), "bucket_from");
    b.let_("bucket_at", Ty::U32, from);
    sweep_list(b, input, &|b, col, x| {
        in_bucket(b, col, x, &|b, col| {
            let at = var("bucket_at");
            b.if_(at.clone().lt(u(BUCKET_CAP)), |b| {
                b.store_shared(BUCKET_COLS, at.clone(), col);
                b.store_shared(BUCKET_KEYS, at.clone(), var("key"));
                b.store_shared(BUCKET_MASSES, at, var("mv"));
            });
            b.set("bucket_at", var("bucket_at") + u(1));
        })
    });
    b.barrier();
    let n = var("sel_tn").min(u(BUCKET_CAP));
    b.let_("found_key", Ty::U32, u(0));
    b.let_("found_col", Ty::U32, u(0));
    b.for_("t", builtin(Builtin::LocalId), n.clone(), builtin(Builtin::BlockSize), |b, t| {
        let kt = b.let_("kt", Ty::U32, load_shared(BUCKET_KEYS, t.clone()));
        let ct = b.let_("ct", Ty::U32, load_shared(BUCKET_COLS, t.clone()));
        let mt = b.let_("mt", Ty::U64, load_shared(BUCKET_MASSES, t));
        b.let_("before", Ty::U32, var("sel_n"));
        b.let_("mass_before", Ty::U64, var("sel_m"));
        b.for_("v", u(0), n.clone(), u(1), |b, v| {
            let kv = b.let_("kv", Ty::U32, load_shared(BUCKET_KEYS, v.clone()));
            let earlier = kv
                .clone()
                .gt(kt.clone())
                .or(kv.eq_(kt.clone()).and(load_shared(BUCKET_COLS, v.clone()).lt(ct.clone())));
            b.if_(earlier, |b| {
                b.set("before", var("before") + u(1));
                b.set("mass_before", var("mass_before") + load_shared(BUCKET_MASSES, v));
            });
        });
        let keeps = |count: Expr, mass: Expr| count.lt(var("kk")).and(mass.le(var("lim")));
        let kept = keeps(var("before"), var("mass_before"));
        let last_in_bucket = (var("before") + u(1)).eq_(var("sel_n") + n.clone());
        let next_kept = keeps(var("before") + u(1), var("mass_before") + mt);
        b.if_(kept.and(last_in_bucket.or(next_kept.not())), |b| {
            b.set("found_key", kt);
            b.set("found_col", ct);
        });
    });
    // One token is the last kept, so the sums are its key and index.
    b.sum_many(Ty::U32, vec![var("found_key"), var("found_col")], &["last_key".to_string(), "last_col".to_string()]);
    b.set("sel_key", var("last_key"));
    b.set("tie_col", var("last_col"));
}

/// One read of the row in chunks that counts, per invocation, the tokens of the boundary key
/// `s_key` into `mine` (declared), which a scan turns into the ranks of the tied tokens.
pub(super) fn count_ties(b: &mut Block, input: Input) {
    b.set("mine", u(0));
    sweep(
        b,
        input,
        boolean(true),
        |_, _| {},
        |b, _, _, x| {
            element(b, input, x);
            b.if_(var("key").eq_(var("s_key")), |b| weigh(b, input));
            b.if_(var("ok"), |b| b.set("mine", var("mine") + u(1)));
        },
    );
}

/// After the select: the set's boundary `s_key` and how many of its tokens are kept, `s_ties`
/// (rows without top-k or top-p keep min-p's set, with no boundary), and `tie_start` (how many
/// tokens of that key come before this invocation's chunk; 0 until the caller ranks them), and
/// the counters of the sweep that uses the set.
pub(super) fn set_bounds(b: &mut Block) {
    b.let_("s_key", Ty::U32, var("sel_key"));
    b.let_("s_ties", Ty::U32, u(0));
    b.let_("tie_start", Ty::U32, u(0));
    b.if_(var("searched"), |b| {
        ties(b);
        b.set("s_ties", var("ties"));
    });
    b.let_("tie_rank", Ty::U32, u(0));
    b.let_("all_mass", Ty::U64, Expr::Lit(Lit::U64(0)));
}

/// Inside a sweep, after [`weigh`]: whether the token at `col` is in `S`. Advances `tie_rank`.
fn kept(b: &mut Block, col: Expr) -> Expr {
    let tie = b.let_("tie", Ty::Bool, var("ok").and(var("key").eq_(var("s_key"))));
    let ranked = var("tie_rank").lt(var("s_ties")).and(col.le(var("tie_col")));
    let in_prefix = var("key").gt(var("s_key")).or(tie.clone().and(ranked));
    let by_min_p = var("wv").ge(var("mp"));
    let kept = b.let_("in_set", Ty::Bool, var("ok").and(by_min_p).and(var("searched").not().or(in_prefix)));
    b.if_(tie, |b| b.set("tie_rank", var("tie_rank") + u(1)));
    kept
}

/// A chunked sweep over the row that decides each token: `per_col` gets the column, its place
/// in the quad and whether it is in `S` (after [`element`]; the weights are set for the tokens
/// at or above the boundary key, the only ones that can be in `S`). Without top-k or top-p every
/// token is weighed, and `all_mass` sums the row's mass.
pub(super) fn sweep_set(
    b: &mut Block,
    input: Input,
    per_quad: impl Fn(&mut Block, Expr),
    per_col: impl Fn(&mut Block, Expr, u8, Expr),
) {
    b.set("tie_rank", var("tie_start"));
    sweep(b, input, boolean(true), per_quad, |b, col, j, x| {
        element(b, input, x);
        b.let_("kept", Ty::Bool, boolean(false));
        b.if_(var("searched").not().or(var("key").ge(var("s_key"))), |b| {
            weigh(b, input);
            b.if_(var("ok"), |b| b.set("all_mass", var("all_mass") + var("mv")));
            let keep = kept(b, col.clone());
            b.set("kept", keep);
        });
        per_col(b, col, j, var("kept"));
    });
}

/// One row of a filter kernel.
fn filter_row(b: &mut Block, input: Input, output: Output, build: Build) {
    let takes = takes_row(b);
    let takes = match build {
        Build::Full => takes,
        Build::Portable => takes.and(row_is_seeded().not()),
    };
    b.if_(takes, |b| filter_body(b, input, output, u(0), build));
}

/// A row the kernel takes (after [`takes_row`]), its reads counted from `sweeps0`: the maximum,
/// the select, then the output. The one-read path (`filter_top_k.rs`) runs it for the rows it
/// cannot decide from its candidates, which it has read once already.
pub(super) fn filter_body(b: &mut Block, input: Input, output: Output, sweeps0: Expr, build: Build) {
    {
        b.let_("sweeps", Ty::U32, sweeps0);
        let m = part_max(b, input);
        b.let_("mx", Ty::F32, m);
        find_set(b, input, build.list_cap());
        match output {
            Output::Sample => sample_in_set(b, input, build),
            Output::Mask => sweep_set(
                b,
                input,
                |_, _| {},
                |b, col, _, keep| {
                    let x = load("x", var("base") + col.clone());
                    b.store("out", var("base") + col, select(keep, x, f(f32::NEG_INFINITY)));
                },
            ),
            Output::Renorm => {
                b.let_("km", Ty::U64, Expr::Lit(Lit::U64(0)));
                sweep_set(b, input, |_, _| {}, |b, _, _, keep| b.if_(keep, |b| b.set("km", var("km") + var("mv"))));
                let total = b.reduce(ReduceOp::Sum, Ty::U64, var("km"), "kept_mass");
                let scale = b.let_("kept_w", Ty::F32, call(FIXED_F32, vec![total]));
                sweep_set(
                    b,
                    input,
                    |_, _| {},
                    |b, col, _, keep| {
                        b.store("out", var("base") + col, select(keep, var("wv") / scale.clone(), f(0.0)));
                    },
                );
            }
        }
    }
}

/// The race of the plain path restricted to `S`, with the same noise, then the row's results.
/// A seeded row that hashes ranks races on its ranks instead (`filter_rank.rs`).
fn sample_in_set(b: &mut Block, input: Input, build: Build) {
    if build == Build::Portable {
        race_in_set(b, input, boolean(false), build);
        let (_, tok32) = b.argmax(var("best"), var("best_i"), "win", "tok32");
        let summed = b.reduce(ReduceOp::Sum, Ty::U64, var("all_mass"), "summed_mass");
        return set_results(b, input, tok32.clone(), tok32, summed);
    }
    let ranked = filter_rank::race(b, input);
    race_in_set(b, input, ranked.done.clone(), build);
    let (_, tok32) = b.argmax(var("best"), var("best_i"), "win", "tok32");
    let (_, tok64) = b.argmax_of(Ty::F64, var("best64"), var("best64_i"), "win64", "tok64");
    let tok64 = select(ranked.done, ranked.col, tok64);
    let summed = b.reduce(ReduceOp::Sum, Ty::U64, var("all_mass"), "summed_mass");
    set_results(b, input, tok32, tok64, summed);
}

/// `best`, `best_i` (the f32 race) and `best64`, `best64_i` (the float64 one), nothing kept yet.
pub(super) fn declare_best(b: &mut Block) {
    declare_best_as(b, "");
}

/// [`declare_best`]'s variables with `suffix` after `best` (`best{suffix}`, `best{suffix}64`).
pub(super) fn declare_best_as(b: &mut Block, suffix: &str) {
    declare_best32(b, suffix);
    declare_best64(b, suffix);
}

/// The float64 race's half of [`declare_best_as`].
pub(super) fn declare_best64(b: &mut Block, suffix: &str) {
    b.let_(&format!("best{suffix}64"), Ty::F64, f64_(f64::NEG_INFINITY));
    b.let_(&format!("best{suffix}64_i"), Ty::U32, u(NONE));
}

/// The f32 race's half of [`declare_best_as`].
pub(super) fn declare_best32(b: &mut Block, suffix: &str) {
    b.let_(&format!("best{suffix}"), Ty::F32, f(f32::NEG_INFINITY));
    b.let_(&format!("best{suffix}_i"), Ty::U32, u(NONE));
}

/// `if v > best (or nothing yet): best, best_i = v, i` for the f32 race (`suffix` "") or the
/// float64 one ("64").
pub(super) fn keep_best(b: &mut Block, suffix: &str, v: Expr, i: Expr) {
    let (best, best_i) = (format!("best{suffix}"), format!("best{suffix}_i"));
    b.if_(v.clone().gt(var(&best)).or(var(&best_i).eq_(u(NONE))), |b| {
        b.set(&best, v);
        b.set(&best_i, i);
    });
}

/// This invocation's part of the race inside `S` (after [`set_bounds`]): the plain path's race
/// with its noise, or for seeded rows (SGLang's deterministic sampler) its float64 race on
/// hashed noise, into [`declare_best`]'s variables; `all_mass` sums the mass it weighed. The
/// two races are separate sweeps under the row's (uniform) kind, not one sweep that tests each
/// token: lavapipe runs every branch inside a loop, taken or not, and the float64 race would
/// cost the Philox rows about 2 ms a row there. Where `done` (uniform) holds, no sweep runs and
/// nothing is kept. A [`Build::Portable`] kernel (which takes no seeded row) races Philox only,
/// with no float64.
pub(super) fn race_in_set(b: &mut Block, input: Input, done: Expr, build: Build) {
    if build == Build::Portable {
        declare_best32(b, "");
        b.let_("w", Ty::U32x4, u32x4(u(0), u(0), u(0), u(0)));
        return b.if_(done.not(), |b| race_sweep(b, input, false));
    }
    let seeded = b.let_("seeded_row", Ty::Bool, row_is_seeded());
    declare_best(b);
    b.let_("w", Ty::U32x4, u32x4(u(0), u(0), u(0), u(0)));
    b.if_(seeded.clone().and(done.clone().not()), |b| race_sweep(b, input, true));
    b.if_(seeded.not().and(done.not()), |b| race_sweep(b, input, false));
}

/// One race sweep over `S`: SGLang's float64 race on hashed noise (`seeded`), else the Philox one.
fn race_sweep(b: &mut Block, input: Input, seeded: bool) {
    let noisy = var("noisy");
    let key = (!seeded).then(|| PhiloxKey::bound(b));
    let per_quad = |b: &mut Block, c0: Expr| {
        if let Some(key) = &key {
            b.if_(noisy.clone(), |b| b.set("w", key.block(c0)));
        }
    };
    sweep_set(b, input, per_quad, |b, col, j, keep| {
        b.if_(keep, |b| {
            if seeded {
                // The log-probability up to the row's constant (which no argmax sees): `z - max`
                // from logits, `ln p` from probabilities; then SGLang's float64 race.
                let lp = match input {
                    Input::Logits(_) => var("ov").cast(Ty::F64),
                    Input::Probs => call(math::LOG64, vec![var("zv").cast(Ty::F64)]),
                };
                let s = score64(b, lp, col.clone());
                keep_best(b, "64", s, col.clone());
            } else {
                let z = var("zv");
                let score = match input {
                    Input::Logits(_) => {
                        let g = call(philox::GUMBEL, vec![var("w").comp(j)]);
                        select(z.clone().eq_(f(f32::INFINITY)), g.clone(), z.clone() + g)
                    }
                    Input::Probs => z.clone() / call(philox::EXPONENTIAL, vec![var("w").comp(j)]),
                };
                let s = b.let_("score", Ty::F32, select(var("noisy"), score, z));
                keep_best(b, "", s, col);
            }
        });
    });
}

/// The row's results from the race's winners (`tok32` of the Philox race, `tok64` of the seeded
/// one) and, for rows without a select, the mass `summed` by the race: the token, its
/// log-probability under the whole row (as on the plain path), its status (`sampled` where it
/// has a token) and the pass count.
pub(super) fn set_results(b: &mut Block, input: Input, tok32: Expr, tok64: Expr, summed: Expr) {
    let seeded = row_is_seeded();
    let tok = b.let_("tok", Ty::U32, select(seeded, tok64, tok32));
    let valid = b.let_("valid", Ty::Bool, tok.clone().lt(param("vocab")));
    let safe = b.let_("tok_at", Ty::U32, select(valid.clone(), tok.clone(), u(0)));
    // The row's mass: from the select's first pass, or summed by the race where none ran.
    let all = select(var("searched"), var("row_mass"), summed);
    write_results(b, tok, valid, |b| match input {
        // Under softmax(l / T) of the whole row, like the plain path's.
        Input::Logits(_) => {
            let w = b.let_("row_w", Ty::F32, call(FIXED_F32, vec![all]));
            let gap = select(var("mx").eq_(f(f32::INFINITY)), f(0.0), scaled(safe) - var("mx"));
            gap - call(math::LOG, vec![w])
        }
        Input::Probs => {
            let p = load("x", var("base") + safe);
            select(p.clone().gt(f(0.0)), call(math::LOG, vec![p]), f(f32::NEG_INFINITY))
        }
    });
    let want = (param("flags") & u(FLAG_PASSES)).ne_(u(0));
    b.if_(want.and(builtin(Builtin::LocalId).eq_(u(0))), |b| b.store("passes", var("row"), var("sweeps")));
}

/// The most passes any row takes (the renormalizing kernel reads once more, and a sampled row
/// that hashes ranks [`filter_rank::READS`] more).
pub(super) fn max_passes(output: Output, build: Build) -> u32 {
    let extra = match (output, build) {
        (Output::Sample, Build::Full) => filter_rank::READS,
        (Output::Sample, Build::Portable) | (Output::Mask, _) => 0,
        (Output::Renorm, _) => 1,
    };
    SELECT_PASSES + extra
}

/// The most passes of the maximum, both selects' digit passes and the race.
pub(super) const SELECT_PASSES: u32 = 2 + 2 * DIGIT_PASSES;

/// Declares the row's temperature and filters and returns whether the kernel takes the row:
/// every row, or with [`FLAG_FILTERED_ONLY`] the rows with a filter.
pub(super) fn takes_row(b: &mut Block) -> Expr {
    row_temperature(b);
    let filtered = row_is_filtered(b);
    let only = (param("flags") & u(FLAG_FILTERED_ONLY)).ne_(u(0));
    only.not().or(filtered)
}

/// The row of slot `slot` of a sampling launch: from `listed` where the host gives a list
/// (FLAG_ROW_LIST), else the slot itself.
pub(super) fn listed_row(slot: Expr) -> Expr {
    let listed = (param("flags") & u(FLAG_ROW_LIST)).ne_(u(0));
    select(listed, load("listed", slot.clone()), slot)
}

/// What every filter kernel binds first: the input (from logits, with the bitmask its reads
/// apply) and the row records.
pub(super) fn filter_inputs(input: Input) -> Vec<BufferDecl> {
    let mut buffers = match input {
        Input::Logits(d) => logits_input(d).to_vec(),
        Input::Probs => vec![buffer("x", Storage::F32, false)],
    };
    buffers.push(buffer("rows", Storage::U32, false));
    buffers
}

/// What a filter kernel binds: the input and the row records, then its outputs (a sampling
/// kernel's, with the pass counts and the row list; or the filtered values).
pub(super) fn filter_buffers(input: Input, output: Output) -> Vec<BufferDecl> {
    let mut buffers = filter_inputs(input);
    match output {
        Output::Sample => {
            buffers.extend(output_buffers());
            buffers.push(buffer("passes", Storage::U32, true));
            buffers.push(buffer("listed", Storage::U32, false));
        }
        Output::Mask | Output::Renorm => buffers.push(buffer("out", Storage::F32, true)),
    }
    buffers
}

/// [`filter_buffers`] of a sampling kernel.
pub(super) fn sample_buffers(input: Input) -> Vec<BufferDecl> {
    filter_buffers(input, Output::Sample)
}

fn filter_kernel(input: Input, output: Output, build: Build) -> Kernel {
    let mut b = Block::new();
    // The body is one phase, which the outliner gives to a procedure: the unit names its builder.
    b.stmts.push(Stmt::Comment("built by kernels::filters::filter_kernel".into()));
    if output == Output::Sample {
        for_each_row_at(&mut b, listed_row, |b| filter_row(b, input, output, build));
    } else {
        for_each_row(&mut b, |b| filter_row(b, input, output, build));
    }
    let buffers = filter_buffers(input, output);
    let (what, doc) = match (output, input, build) {
        (Output::Sample, Input::Logits(_), Build::Full) => {
            ("filter", "top-k, top-p and min-p from logits: the race of the plain path inside the exact kept set")
        }
        (Output::Sample, Input::Probs, Build::Full) => (
            "filter",
            "top-k, top-p and min-p from probabilities: the race of the plain path inside the exact kept set",
        ),
        (Output::Sample, Input::Logits(_), Build::Portable) => (
            "filter_portable",
            "top-k, top-p and min-p from logits, the Philox race inside the exact kept set, on a device \
             without float64 or 64-bit integers and with 16 KiB of workgroup memory (seeded rows are not taken)",
        ),
        (Output::Mask, Input::Logits(_), Build::Full) => {
            ("mask", "the logits with every token outside the kept set at -inf (f32)")
        }
        (Output::Renorm, Input::Probs, Build::Full) => {
            ("renorm", "the probabilities renormalized over the kept set, zero outside")
        }
        _ => unreachable!("not generated"),
    };
    let name = format!("{what}_{}", input.suffix());
    let functions = functions(output == Output::Sample && build == Build::Full);
    let mut k = kernel(name, doc, max_passes(output, build), buffers, functions, b);
    k.shared.extend(filter_shared(build));
    k.u64_as_words = build == Build::Portable;
    k
}

/// The workgroup arrays [`filter_body`] uses: the select's list and its last bucket (and with
/// [`Build::Full`], the rank race's counter).
pub(super) fn filter_shared(build: Build) -> Vec<SharedDecl> {
    let mut arrays = vec![
        SharedDecl::new(LIST, Ty::U32, build.list_cap()),
        SharedDecl::new(BUCKET_COLS, Ty::U32, BUCKET_CAP),
        SharedDecl::new(BUCKET_KEYS, Ty::U32, BUCKET_CAP),
        SharedDecl::new(BUCKET_MASSES, Ty::U64, BUCKET_CAP),
    ];
    if build == Build::Full {
        arrays.insert(1, SharedDecl::atomic(filter_rank::COUNT, 1));
        arrays.insert(2, SharedDecl::atomic(filter_rank::BINS, filter_rank::BINS_WORDS));
    }
    arrays
}

/// The helpers the filter kernels call (with `sample`, the seeded race's hash and float64 log).
pub(super) fn functions(sample: bool) -> Vec<Function> {
    super::union([
        vec![math::exp(), math::exp_nonpositive(), math::log(), fixed(), fixed_f32(), fraction()],
        philox::noise_functions(),
        if sample { seeded::functions() } else { vec![] },
    ])
}

/// Every kernel of this family.
pub fn all() -> Vec<Kernel> {
    let inputs = Dtype::ALL.iter().map(|&d| Input::Logits(d)).chain([Input::Probs]);
    let mut out: Vec<Kernel> = inputs.map(|i| filter_kernel(i, Output::Sample, Build::Full)).collect();
    out.extend(Dtype::ALL.iter().map(|&d| filter_kernel(Input::Logits(d), Output::Mask, Build::Full)));
    out.push(filter_kernel(Input::Probs, Output::Renorm, Build::Full));
    // `Sampler::step`, the one call that takes the portable kernels, samples logits.
    out.extend(Dtype::ALL.iter().map(|&d| filter_kernel(Input::Logits(d), Output::Sample, Build::Portable)));
    out
}
