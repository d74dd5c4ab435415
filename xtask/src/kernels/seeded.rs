//! SGLang's deterministic sampler (`multinomial_with_seed`): the first index of the maximum of
//! `logprob + g` in float64, with `g` the Murmur-hashed Gumbel noise of (seed, position, column).
//! The row's seed is words 4-5 of its record and the position word 6 (the low 32 bits, which is
//! all SGLang hashes). Greedy rows (temperature below 1e-6) take the argmax of the log-probabilities.
//!
//! Variants:
//! - `seeded_*`: every column in float64 (one read). Cheap on an H200 (float64 at half rate).
//! - `seeded_screened_*`: for a T4 (float64 at 1/32 rate). A first read computes the scores in
//!   float32 with a proven error bound and finds the float32 winner `m`; a second read redoes in
//!   float64 only the columns whose float32 score could still reach the true maximum
//!   (`s32 + err >= s32[m] - err[m]`), so the token is always the one full float64 gives.
//! - `seeded_logits_*`: from logits and temperature, computing the log-probabilities as SGLang
//!   does (float32 log of the float32 softmax), then the float64 race. Three reads.
//!
//! The `_probs` variants of the first two read float32 probabilities and take their float32 log
//! first, as SGLang's unfiltered path from probabilities (`sampling_from_probs_torch`) hands
//! `torch.log(probs)` to `multinomial_with_seed`.

use super::filters::{listed_row, row_is_filtered};
use super::math;
use super::murmur::{self, SCREEN_ABS, SCREEN_REL};
use super::sampling::{
    buffer, for_each_column, for_each_item, for_each_row, for_each_row_at, kernel, output_buffers, row_is_seeded,
    row_temperature, row_word, scaled, softmax_stats, softmax_weight, word, write_results, Dtype, FLAG_SEEDED_ONLY,
};
use crate::ir::*;

const NONE: u32 = u32::MAX;

/// What the `lp` buffer holds.
#[derive(Clone, Copy, PartialEq)]
enum Lp {
    F64,
    F32,
    /// float32 probabilities, whose float32 log is the log-probability.
    Probs,
}

impl Lp {
    fn storage(self) -> Storage {
        match self {
            Lp::F64 => Storage::F64,
            Lp::F32 | Lp::Probs => Storage::F32,
        }
    }
    fn suffix(self) -> &'static str {
        match self {
            Lp::F64 => "f64",
            Lp::F32 => "f32",
            Lp::Probs => "probs",
        }
    }
}

/// `torch.log` of a float32 probability, in float32: 0 gives -inf, and so do NaN and negative
/// values (whose log is NaN, which SGLang's argmax would return and this crate never samples)
/// and +inf (no probability; the IR's log is not defined there).
fn log32(p: Expr) -> Expr {
    let valid = p.clone().gt(f(0.0)).and(p.clone().le(f(f32::MAX)));
    select(valid, call(math::LOG, vec![p]), f(f32::NEG_INFINITY))
}

/// The column's hash: Murmur3 of (seed lo, seed hi, position lo, column).
fn hash(col: Expr) -> Expr {
    call(murmur::MURMUR, vec![row_word(word::SEED_LO), row_word(word::SEED_HI), row_word(word::OFFSET_LO), col])
}

/// The log-probability at `col` as f64. NaN and +inf (no log-probability is positive) are read
/// as -inf, so they are never chosen.
fn load_lp64(lp: Lp, col: Expr) -> Expr {
    let x = load("lp", var("base") + col);
    let x = match lp {
        Lp::F64 => x,
        Lp::F32 => x.cast(Ty::F64),
        Lp::Probs => log32(x).cast(Ty::F64),
    };
    select(nan_or_pinf_f64(x.clone()), f64_(f64::NEG_INFINITY), x)
}

/// NaN or +inf, by the bits (a driver may fold `x != x`): every pattern at or above +inf's, sign
/// bit clear, or any NaN with it set.
fn nan_or_pinf_f64(x: Expr) -> Expr {
    let bits = x.bitcast(Ty::U64);
    let abs = bits.clone() & Expr::Lit(Lit::U64(0x7fff_ffff_ffff_ffff));
    abs.clone().gt(Expr::Lit(Lit::U64(0x7ff0_0000_0000_0000))).or(bits.eq_(Expr::Lit(Lit::U64(0x7ff0_0000_0000_0000))))
}

/// Keeps (`best`, `best_i`) the running float64 maximum with the lowest index on ties (columns
/// arrive in increasing order per invocation).
fn keep_best(b: &mut Block, best: &str, best_i: &str, score: Expr, col: Expr) {
    b.if_(score.clone().gt(var(best)).or(var(best_i).eq_(u(NONE))), |b| {
        b.set(best, score);
        b.set(best_i, col);
    });
}

/// Score of a column in float64: its log-probability plus the hashed noise (none for greedy rows).
pub(super) fn score64(b: &mut Block, lp64: Expr, col: Expr) -> Expr {
    let s = b.let_("s64", Ty::F64, lp64);
    b.if_(var("noisy"), |b| b.set("s64", s.clone() + call(murmur::SEEDED_GUMBEL64, vec![hash(col)])));
    s
}

/// Writes the winner of a row whose float64 maximum is `win`: valid when it is above -inf.
fn finish(b: &mut Block, win: Expr, tok: Expr, lp_of_token: impl FnOnce(&mut Block) -> Expr) {
    let valid = b.let_("valid", Ty::Bool, win.gt(f64_(f64::NEG_INFINITY)));
    write_results(b, tok, valid, |b| lp_of_token(b).cast(Ty::F32));
}

pub(super) fn functions() -> Vec<Function> {
    vec![math::log(), math::log64(), murmur::murmur3(), murmur::seeded_gumbel64(), murmur::seeded_gumbel32()]
}

/// The float64 race over the columns for which `candidate` holds (evaluated per column), then
/// the row's results. The scores are SGLang's; the log-probabilities come from the input.
fn float64_race(b: &mut Block, lp: Lp, candidate: impl Fn(&mut Block, Expr) -> Expr) {
    b.let_("best", Ty::F64, f64_(f64::NEG_INFINITY));
    b.let_("best_i", Ty::U32, u(NONE));
    for_each_column(
        b,
        |_, _| {},
        |b, col, _| {
            let keep = candidate(b, col.clone());
            b.if_(keep, |b| {
                let s = score64(b, load_lp64(lp, col.clone()), col.clone());
                keep_best(b, "best", "best_i", s, col);
            });
        },
    );
    let (win, tok) = b.argmax_of(Ty::F64, var("best"), var("best_i"), "win", "tok");
    finish(b, win, tok.clone(), |_| load_lp64(lp, tok));
}

fn lp_kernel(name: &str, lp: Lp, doc: &str, passes: u32, b: Block) -> Kernel {
    let mut buffers = vec![buffer("lp", lp.storage(), false), buffer("rows", Storage::U32, false)];
    buffers.extend(output_buffers());
    kernel(format!("{name}_{}", lp.suffix()), doc, passes, buffers, functions(), b)
}

/// Full float64: one read.
fn seeded_full(lp: Lp) -> Kernel {
    let mut b = Block::new();
    for_each_row(&mut b, |b| {
        row_temperature(b);
        float64_race(b, lp, |_, _| boolean(true));
    });
    let doc = "SGLang's seeded float64 Gumbel race over log-probabilities, every column in float64";
    lp_kernel("seeded", lp, doc, 1, b)
}

/// Float32 screen, then float64 for the columns that could still win: two reads.
fn seeded_screened(lp: Lp) -> Kernel {
    let mut b = Block::new();
    // The float32 score and its error bound at `col`.
    let score32 = |b: &mut Block, col: Expr| -> (Expr, Expr) {
        let lp32 = b.let_("lp32", Ty::F32, load_lp64(lp, col.clone()).cast(Ty::F32));
        let g32 = b.let_("g32", Ty::F32, f(0.0));
        b.if_(var("noisy"), |b| b.set("g32", call(murmur::SEEDED_GUMBEL32, vec![hash(col)])));
        let s = b.let_("s32", Ty::F32, lp32.clone() + g32.clone());
        let finite = lp32.abs().min(f(1e30));
        let err = b.let_("err", Ty::F32, f(SCREEN_ABS) + (finite + g32.abs()) * f(SCREEN_REL));
        (s, err)
    };
    for_each_row(&mut b, |b| {
        row_temperature(b);
        b.let_("best32", Ty::F32, f(f32::NEG_INFINITY));
        b.let_("best32_i", Ty::U32, u(NONE));
        for_each_column(
            b,
            |_, _| {},
            |b, col, _| {
                let (s, _) = score32(b, col.clone());
                b.if_(s.clone().gt(var("best32")).or(var("best32_i").eq_(u(NONE))), |b| {
                    b.set("best32", s);
                    b.set("best32_i", col);
                });
            },
        );
        let (m32, m) = b.argmax(var("best32"), var("best32_i"), "win32", "win32_i");
        // Every column whose float32 score plus its error reaches this floor may be the winner.
        let floor = b.let_("floor", Ty::F32, f(0.0));
        b.scope(|b| {
            let (_, err_m) = score32(b, m);
            b.set("floor", m32.clone() - err_m);
        });
        let all = b.let_("all", Ty::Bool, m32.eq_(f(f32::NEG_INFINITY)));
        float64_race(b, lp, |b, col| {
            let (s, err) = score32(b, col);
            all.clone().or((s + err).ge(floor.clone()))
        });
    });
    let doc = "the seeded float64 race, screened in float32 so only possible winners are redone in float64";
    lp_kernel("seeded_screened", lp, doc, 2, b)
}

/// From logits: SGLang's float32 log-softmax, then the float64 race. Three reads.
/// One row of the seeded race from logits (see [`seeded_logits`]), inside the row loop.
pub(super) fn seeded_logits_row(b: &mut Block) {
    row_temperature(b);
    let (mx, inv) = softmax_stats(b);
    b.let_("best", Ty::F64, f64_(f64::NEG_INFINITY));
    b.let_("best_i", Ty::U32, u(NONE));
    // log(softmax) in float32, as `torch.log(torch.softmax(logits / T))`: 0 gives -inf.
    let lp_at = |b: &mut Block, col: Expr| -> Expr {
        let p = b.let_("p", Ty::F32, softmax_weight(scaled(col), mx.clone()) * inv.clone());
        b.let_("lp", Ty::F64, log32(p).cast(Ty::F64))
    };
    for_each_column(
        b,
        |_, _| {},
        |b, col, _| {
            let lp = lp_at(b, col.clone());
            let s = score64(b, lp, col.clone());
            keep_best(b, "best", "best_i", s, col);
        },
    );
    let (win, tok) = b.argmax_of(Ty::F64, var("best"), var("best_i"), "win", "tok");
    finish(b, win, tok.clone(), |b| lp_at(b, tok));
}

pub(super) fn logits_buffers(dtype: Dtype) -> Vec<BufferDecl> {
    let mut buffers = vec![buffer("x", dtype.storage(), false), buffer("rows", Storage::U32, false)];
    buffers.extend(output_buffers());
    buffers
}

/// SGLang's seeded race from logits; with [`FLAG_SEEDED_ONLY`], the per-row sampler's launch for
/// its seeded rows without a filter (the rows of its list, with
/// [`FLAG_ROW_LIST`](super::sampling::FLAG_ROW_LIST)).
fn seeded_logits(dtype: Dtype) -> Kernel {
    let mut b = Block::new();
    for_each_row_at(&mut b, listed_row, |b| {
        b.let_("takes", Ty::Bool, boolean(true));
        b.if_((param("flags") & u(FLAG_SEEDED_ONLY)).ne_(u(0)), |b| {
            row_temperature(b);
            let filtered = row_is_filtered(b);
            b.set("takes", row_is_seeded().and(filtered.not()));
        });
        b.if_(var("takes"), seeded_logits_row);
    });
    let mut functions = vec![math::exp()];
    functions.extend(self::functions());
    let doc = "the seeded float64 race from logits, log-probabilities computed as SGLang does";
    let mut buffers = logits_buffers(dtype);
    buffers.push(buffer("listed", Storage::U32, false));
    kernel(format!("seeded_logits_{}", dtype.suffix()), doc, 3, buffers, functions, b)
}

/// Diagnostic: Murmur3 of `batch` items of four words.
fn murmur_kernel() -> Kernel {
    let mut b = Block::new();
    for_each_item(&mut b, |b, item| {
        let word = |k: u32| load("input", item.clone() * u(4) + u(k));
        b.store("output", item.clone(), call(murmur::MURMUR, vec![word(0), word(1), word(2), word(3)]));
    });
    let buffers = vec![buffer("input", Storage::U32, false), buffer("output", Storage::U32, true)];
    kernel("murmur3".into(), "MurmurHash3_x86_32 of four words, for tests", 0, buffers, vec![murmur::murmur3()], b)
}

/// Diagnostic: the IR's float64 log of `batch` values.
fn log64_kernel() -> Kernel {
    let mut b = Block::new();
    for_each_item(&mut b, |b, item| {
        b.store("output", item.clone(), call(math::LOG64, vec![load("input", item)]));
    });
    let buffers = vec![buffer("input", Storage::F64, false), buffer("output", Storage::F64, true)];
    kernel("log_f64".into(), "the IR's float64 natural log, for accuracy tests", 0, buffers, vec![math::log64()], b)
}

pub fn all() -> Vec<Kernel> {
    let lps = [Lp::F64, Lp::F32, Lp::Probs];
    let mut out: Vec<Kernel> =
        lps.iter().map(|&lp| seeded_full(lp)).chain(lps.iter().map(|&lp| seeded_screened(lp))).collect();
    out.extend(Dtype::ALL.iter().map(|&d| seeded_logits(d)));
    out.push(murmur_kernel());
    out.push(log64_kernel());
    out
}
