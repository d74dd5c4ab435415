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
//!   does (float32 log of the float32 softmax), then the float64 race. One read: the softmax
//!   pair online and a float32 screen whose bound covers the later shift by the row's maximum
//!   and log-sum, then float64 for the few columns that can still win (see
//!   `seeded_logits_row`); rows split over workgroups by their length.
//!
//! The `_probs` variants of the first two read float32 probabilities and take their float32 log
//! first, as SGLang's unfiltered path from probabilities (`sampling_from_probs_torch`) hands
//! `torch.log(probs)` to `multinomial_with_seed`.

use super::abi::{
    buffer, counters_buffer, for_each_column, for_each_item, for_each_row, for_each_row_part_at, kernel, load_quad_as,
    logits_input, output_buffers, row_is_seeded, row_temperature, row_word, scaled, word, write_results, Dtype,
    FLAG_PASSES, FLAG_SEEDED_ONLY, PART_WORDS,
};
use super::combine;
use super::filters::{listed_row, row_is_filtered};
use super::math;
use super::murmur::{self, SCREEN_ABS, SCREEN_REL};
use super::race::{bound, can_win};
use super::softmax::{softmax_block_pair, softmax_merge, softmax_pass, softmax_weight};
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
    lp64_at(lp, var("base") + col)
}

/// [`load_lp64`] of the element at index `at` of the buffer.
fn lp64_at(lp: Lp, at: Expr) -> Expr {
    let x = load("lp", at);
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
    vec![
        math::log(),
        math::log64(),
        murmur::murmur3(),
        murmur::seeded_gumbel64(),
        murmur::seeded_gumbel32(),
        murmur::seeded_gumbel_screen(),
    ]
}

/// The float64 race over the columns for which `candidate` holds (evaluated per column), then
/// the row's results. The scores are SGLang's; the log-probabilities come from the input.
fn float64_race(b: &mut Block, lp: Lp, candidate: impl Fn(&mut Block, Expr, Expr) -> Expr) {
    b.let_("best", Ty::F64, f64_(f64::NEG_INFINITY));
    b.let_("best_i", Ty::U32, u(NONE));
    for_each_column(
        b,
        |b, c0| lp_quad(b, lp, c0),
        |b, col, j| {
            let v = quad_lp(j);
            let keep = candidate(b, col.clone(), v.clone());
            b.if_(keep, |b| {
                let s = score64(b, v, col.clone());
                keep_best(b, "best", "best_i", s, col);
            });
        },
    );
    let (win, tok) = b.argmax_of(Ty::F64, var("best"), var("best_i"), "win", "tok");
    finish(b, win, tok.clone(), |_| load_lp64(lp, tok));
}

/// Declares `lq0` .. `lq3`, [`load_lp64`] of the quad's four columns from `c0`, loaded together
/// ([`load_quad_as`]).
fn lp_quad(b: &mut Block, lp: Lp, c0: Expr) {
    load_quad_as(b, c0, "lq", Ty::F64, f64_(f64::NEG_INFINITY), |at, _| lp64_at(lp, at));
}

/// Column `j`'s value of [`lp_quad`].
fn quad_lp(j: u8) -> Expr {
    var(&format!("lq{j}"))
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
        float64_race(b, lp, |_, _, _| boolean(true));
    });
    let doc = "SGLang's seeded float64 Gumbel race over log-probabilities, every column in float64";
    lp_kernel("seeded", lp, doc, 1, b)
}

/// Float32 screen, then float64 for the columns that could still win: two reads.
fn seeded_screened(lp: Lp) -> Kernel {
    let mut b = Block::new();
    // The float32 score and its error bound at `col`, whose value (`load_lp64`) is `v`.
    let score32 = |b: &mut Block, col: Expr, v: Expr| -> (Expr, Expr) {
        let lp32 = b.let_("lp32", Ty::F32, v.cast(Ty::F32));
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
            |b, c0| lp_quad(b, lp, c0),
            |b, col, j| {
                let (s, _) = score32(b, col.clone(), quad_lp(j));
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
            let (_, err_m) = score32(b, m.clone(), load_lp64(lp, m));
            b.set("floor", m32.clone() - err_m);
        });
        let all = b.let_("all", Ty::Bool, m32.eq_(f(f32::NEG_INFINITY)));
        float64_race(b, lp, |b, col, v| {
            let (s, err) = score32(b, col, v);
            all.clone().or((s + err).ge(floor.clone()))
        });
    });
    let doc = "the seeded float64 race, screened in float32 so only possible winners are redone in float64";
    lp_kernel("seeded_screened", lp, doc, 2, b)
}

/// Screening bounds of the seeded race from logits (see [`seeded_logits_row`]): a column's
/// screen value `b = fl(z + g32)` (`z = x / T`, `g32` its float32 noise) is within
/// `LOGITS_SCREEN_ABS + (|z| + |g32|) * SCREEN_REL` of `S + C`, where `S` is its exact float64
/// score (`lp + g64`, `lp` the float32 log of the float32 softmax) and `C = M - ln(inv)` is a row
/// constant (`M` the row's maximum of `z`, `inv` the computed `1 / sum`), for every column with
/// `z >= M - 64` (a *near* column).
///
/// Why. The kernel computes `lp = fl(log(fl(exp(fl(z - M)) * inv)))`. For a near column,
/// `|z - M| <= 64`, so `fl(z - M)` is off by at most 2^-19; the IR's `exp` (about one ulp) and
/// the product with `inv` (normal: `exp(-64) / n` is far above 2^-126 for `n < 2^32`) add
/// under 4e-7 relative, that is absolute after the log; `|lp| <= 64 + ln n < 87`, so the IR's
/// log and its rounding add at most 1.5 ulp of 87, 1.2e-5. So `|lp - (z - C)| < 1.4e-5`. The
/// noise, with the fast log ([`murmur::seeded_gumbel_screen`]): `|g32 - g64| < 3.5e-5`, or
/// 2^-15 for a hash of 0. The sum `z + g32` rounds by half an ulp of `|z| + |g32|`, which
/// `SCREEN_REL` (2^-21) covers eight times over, with the roundings of `b -/+ err` themselves;
/// float64's sum `lp + g64` is exact to 1e-13. In all, under 5e-5 absolute: 2^-11 leaves a
/// factor of nine.
const LOGITS_SCREEN_ABS: f32 = 1.0 / 2048.0; // 2^-11
/// A column more than this below the row's maximum is *far*: its score is at most
/// `-64 + 22.19` (its probability is at most `e^-64`, as `inv <= 1`, and the noise at most
/// 22.18), so it loses to any near column scoring above -41.8 (see [`seeded_logits_row`]).
const FAR: f32 = 64.0;
/// The screen's float32 values stay exact enough (ulp at most 1/8) while `|M|` is below this.
const SCREEN_MAX_ABS: f32 = 1_048_576.0; // 2^20

/// An upper bound, with no log, on the float32 noise of a column whose hash is `h`, plus 0.01:
/// what lets the read skip the screen (two logs and a division) of a column that cannot win.
///
/// With `x = h / (2^32 - 1)` and `c = !h = (2^32 - 1) x'` the complement, `-ln x >= 1 - x =
/// c / (2^32 - 1)`, so for `c >= 1` the noise `-ln(max(-ln x, 2^-32))` is at most
/// `ln(2^32 - 1) - ln c < (32 - log2 c) ln 2`, and `log2 c >= log2_lower(c)` ([`math::log2_lower`];
/// `c` rounds to f32 by 2^-24 relative, 1e-7 in the log). `h = 2^32 - 1` (`c = 0`) is the
/// clamp's 22.18, and `log2_lower(0) = -127` bounds it with room; a hash of 0 gives -709.78.
/// The float32 noise is within 3.2e-6 of float64's, and the f32 roundings of this bound are
/// below 1e-5; numpy over 2 x 10^7 hashes and the edges finds the bound at least 0.0100003
/// above the float64 noise. The 0.01 then covers the screen's error term beside `|z|` (2^-11
/// plus 22.2 2^-21, 5e-4) and the test's own slack ([`can_win`]'s 0.0044), so a column it
/// rejects has its screen's upper bound below the floor.
fn noise_bound(h: Expr) -> Expr {
    let c = (h ^ u(u32::MAX)).cast(Ty::F32);
    let ln2 = std::f32::consts::LN_2;
    f(32.0 * ln2 + 0.01) - math::log2_lower(c) * f(ln2)
}

/// The screen value of a column with scaled value `z` and hash `h` and its bounds on `S + C`
/// (see [`LOGITS_SCREEN_ABS`]): `(lower, upper)`, both -inf where `z` is not finite (-inf never
/// wins; +inf makes the row's maximum +inf, which takes the exact rescan).
fn logits_screen(b: &mut Block, h: Expr, z: Expr) -> (Expr, Expr) {
    // Computed on every row and then selected, not under a branch on `noisy`: the cost model
    // counts a loop's cheapest path, which a branch (or a select the compiler turns into one)
    // would make a greedy row's.
    let noise = b.let_("g32_any", Ty::F32, call(murmur::SEEDED_GUMBEL_SCREEN, vec![h]));
    let g32 = b.let_("g32", Ty::F32, select(var("noisy"), noise, f(0.0)));
    let finite = b.let_("finite", Ty::Bool, z.clone().abs().lt(f(f32::INFINITY)));
    let zf = select(finite.clone(), z, f(0.0));
    let v = b.let_("sv32", Ty::F32, zf.clone() + g32.clone());
    let err = b.let_("serr", Ty::F32, f(LOGITS_SCREEN_ABS) + (zf.abs() + g32.abs()) * f(SCREEN_REL));
    let none = f(f32::NEG_INFINITY);
    (select(finite.clone(), v.clone() - err.clone(), none.clone()), select(finite, v + err, none))
}

/// From logits, one read: SGLang's float32 log-softmax and the float64 race, with float64 only
/// for the columns that can still win. One row, inside the row loop.
///
/// The read takes the row's softmax pair `(M, sum)` online ([`softmax_pass`], as the softmax
/// kernel does) and screens each column in float32 ([`logits_screen`]), keeping per invocation
/// the largest lower bound and the two largest upper bounds ([`bound`], the race's). Then, with
/// `M` and `inv = 1 / sum` final, the floor `F` (the block's largest lower bound) and each
/// invocation's candidate are known:
/// - The floor is a near column's lower bound when `F - M >= ln(sum) - 41` (checked): a far
///   column's screen value is below `M - 64 + 22.19 = M - 41.8`, and its lower bound too. Then
///   `F - C >= -41 - ln(sum) + ln(sum)` up to 1e-6 (`-ln(inv)` against the computed `ln(sum)`),
///   and some near column scores at least `F - C > -41.8`: no far column wins or ties (their
///   scores are at most -41.8), and every near column that does has its upper bound at or
///   above `F`.
/// - So an invocation whose second upper bound is below `F` holds at most one possible winner,
///   its first, which it scores exactly as the three-read kernel did (float32 softmax value,
///   its float32 log, float64 noise). The block's float64 argmax, ties to the lower column, is
///   the full race's token.
/// - An invocation with two possible winners rescans its own columns, scoring exactly those
///   whose upper bound reaches `F`; when the check fails (a row whose maximum is infinite, all
///   -inf, `|M|` at or above 2^20, or whose near columns all hash to 0) every invocation
///   rescans and scores all its columns. That rescan is the row's second read (the `passes`
///   count says 2); the common path reads the row once.
pub(super) fn seeded_logits_row(b: &mut Block) {
    row_temperature(b);
    for (name, ty, init) in screen_state() {
        b.let_(name, ty, init);
    }
    // A column whose noise bound cannot reach the floor skips its screen; after the workgroup's
    // first step of columns the floor is the workgroup's, as in the race.
    let share_floor = |b: &mut Block| {
        let floor = b.reduce(ReduceOp::Max, Ty::F32, var("lo_best"), "floor_first");
        b.set("lo_best", floor);
    };
    let screen = |b: &mut Block, col: Expr, z: Expr| {
        let h = b.let_("sh", Ty::U32, hash(col.clone()));
        b.if_(can_win(z.clone(), noise_bound(h.clone()), var("lo_best")), |b| {
            let (lo, up) = logits_screen(b, h, z);
            bound(b, lo, up, col);
        });
    };
    softmax_pass(b, screen, Some(&share_floor));
    let (mx, total) = softmax_block_pair(b);
    b.let_("row_m", Ty::F32, mx);
    b.let_("row_s", Ty::F32, total);
    // A split row: each part writes its record, and the last to arrive takes the parts'
    // state in place of its own and finishes the row, in this launch.
    let combining = b.let_("combining", Ty::Bool, boolean(false));
    b.if_(var("parts").gt(u(1)), |b| {
        write_seeded_part(b);
        combine::last_part(b, |b| {
            b.scope(|b| {
                for (name, _, init) in screen_state() {
                    b.set(name, init);
                }
                combine_parts(b);
            });
            // The rare rescan takes the whole row: this workgroup is the row's only one now.
            b.set("col_lo", u(0));
            b.set("col_hi", param("vocab"));
            b.set("combining", boolean(true));
        });
    });
    b.if_(var("parts").le(u(1)).or(combining.clone()), |b| seeded_logits_finish(b, combining));
}

/// Each invocation's screen state, as the read starts it: its largest lower bound, its two
/// largest upper bounds and the first's column ([`bound`]).
fn screen_state() -> [(&'static str, Ty, Expr); 4] {
    [
        ("lo_best", Ty::F32, f(f32::NEG_INFINITY)),
        ("up1", Ty::F32, f(f32::NEG_INFINITY)),
        ("up1_i", Ty::U32, u(NONE)),
        ("up2", Ty::F32, f(f32::NEG_INFINITY)),
    ]
}

/// Words of a part's record (a split row's, [`PART_WORDS`] each, the first [`USED`](record::USED)
/// written): its softmax pair (f32 bits), its largest lower bound, its largest upper bound and
/// that column, and its second upper bound.
mod record {
    pub const M: u32 = 0;
    pub const S: u32 = 1;
    pub const FLOOR: u32 = 2;
    pub const UP1: u32 = 3;
    pub const UP1_I: u32 = 4;
    pub const UP2: u32 = 5;
    pub const USED: u32 = 6;
}

/// Word `k` of part `p`'s record of the current row, in `counters` after the launch's `batch`
/// row counters. The records live beside the counters, not in `partials`, so that the kernel
/// binds eight storage buffers, WebGPU's default limit per stage; the row's last part clears
/// what it merged ([`combine_parts`]), so the buffer is all zeros between launches, as the
/// counters need.
fn record_word(p: Expr, k: u32) -> Expr {
    param("batch") + (var("row_slot") * var("parts") + p) * u(PART_WORDS) + u(k)
}

/// A part of a split row: its record, the block's screen state as one invocation's.
fn write_seeded_part(b: &mut Block) {
    let floor = b.reduce(ReduceOp::Max, Ty::F32, var("lo_best"), "part_floor");
    let (up1, up1_i) = b.argmax(var("up1"), var("up1_i"), "part_up1", "part_up1_i");
    // The second: every invocation's second, and the first of those that do not hold the part's.
    let other = select(var("up1_i").eq_(up1_i.clone()), var("up2"), var("up1"));
    let up2 = b.reduce(ReduceOp::Max, Ty::F32, other, "part_up2");
    let bits = |e: Expr| e.bitcast(Ty::U32);
    b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| {
        let at = |k| record_word(var("part"), k);
        b.store("counters", at(record::M), bits(var("row_m")));
        b.store("counters", at(record::S), bits(var("row_s")));
        b.store("counters", at(record::FLOOR), bits(floor));
        b.store("counters", at(record::UP1), bits(up1));
        b.store("counters", at(record::UP1_I), up1_i);
        b.store("counters", at(record::UP2), bits(up2));
    });
}

/// A split row, in its last part to arrive: the parts' records merged (and cleared) as the
/// invocations' own state is in one workgroup (each invocation takes parts in increasing order,
/// so a part's first upper bound enters [`bound`] as a column would): the softmax pairs as the
/// softmax kernel merges its parts', the floors by their maximum, and a part's second upper
/// bound as the invocation's second.
fn combine_parts(b: &mut Block) {
    b.let_("m", Ty::F32, f(f32::NEG_INFINITY));
    b.let_("s", Ty::F32, f(0.0));
    b.for_("p", builtin(Builtin::LocalId), var("parts"), builtin(Builtin::BlockSize), |b, p| {
        let word = |k| load("counters", record_word(p.clone(), k));
        let float = |k| word(k).bitcast(Ty::F32);
        let pm = b.let_("pm", Ty::F32, float(record::M));
        let ps = b.let_("ps", Ty::F32, float(record::S));
        let e = softmax_merge(b, pm, ps, &["s"]);
        b.set("s", var("s") + e);
        bound(b, float(record::FLOOR), float(record::UP1), word(record::UP1_I));
        b.set("up2", var("up2").max(float(record::UP2)));
        // Read: this invocation alone reads part `p`'s record, so it clears it at once.
        for k in 0..record::USED {
            b.store("counters", record_word(p.clone(), k), u(0));
        }
    });
    let (mx, total) = softmax_block_pair(b);
    b.set("row_m", mx);
    b.set("row_s", total);
}

/// The row's token from its softmax pair and screen state (`row_m`, `row_s`, and each
/// invocation's bounds; see [`seeded_logits_row`]). `combining`: the state is the parts'
/// records, so a rescan is the whole workgroup's over the whole row.
fn seeded_logits_finish(b: &mut Block, combining: Expr) {
    let (mx, total) = (var("row_m"), var("row_s"));
    // As the softmax kernel writes it: a row with no valid value has probabilities 0.
    let inv = b.let_("inv", Ty::F32, select(total.clone().gt(f(0.0)), f(1.0) / total.clone(), f(0.0)));
    let floor = b.reduce(ReduceOp::Max, Ty::F32, var("lo_best"), "screen_floor");
    let tame = mx.clone().abs().lt(f(SCREEN_MAX_ABS)).and(total.clone().gt(f(0.0)));
    let ln_total = call(math::LOG, vec![select(tame.clone(), total, f(1.0))]);
    let near = (floor.clone() - mx.clone()).ge(ln_total - f(FAR - 23.0));
    let screened = b.let_("screened", Ty::Bool, tame.and(near));
    // log(softmax) in float32, as `torch.log(torch.softmax(logits / T))`: 0 gives -inf.
    let lp_at = |b: &mut Block, col: Expr| -> Expr {
        let p = b.let_("p", Ty::F32, softmax_weight(scaled(col), mx.clone()) * inv.clone());
        b.let_("lp", Ty::F64, log32(p).cast(Ty::F64))
    };
    b.let_("best", Ty::F64, f64_(f64::NEG_INFINITY));
    b.let_("best_i", Ty::U32, u(NONE));
    let mine = b.let_("mine", Ty::Bool, screened.clone().not().or(var("up2").ge(floor.clone())));
    let any = b.reduce(ReduceOp::Max, Ty::U32, select(mine.clone(), u(1), u(0)), "any_rescan");
    let rescan = b.let_("rescan", Ty::Bool, select(combining, any.gt(u(0)), mine));
    b.if_else(
        rescan.clone(),
        |b| {
            for_each_column(
                b,
                |_, _| {},
                |b, col, _| {
                    // The read's test first: a column that skipped its screen there skips it here.
                    let z = b.let_("rz", Ty::F32, scaled(col.clone()));
                    let h = b.let_("rh", Ty::U32, hash(col.clone()));
                    let may = screened.clone().not().or(can_win(z.clone(), noise_bound(h.clone()), floor.clone()));
                    b.if_(may, |b| {
                        let (_, up) = logits_screen(b, h, z);
                        b.if_(screened.clone().not().or(up.ge(floor.clone())), |b| {
                            let lp = lp_at(b, col.clone());
                            let s = score64(b, lp, col.clone());
                            keep_best(b, "best", "best_i", s, col);
                        });
                    });
                },
            );
        },
        |b| {
            b.if_(var("up1_i").ne_(u(NONE)).and(var("up1").ge(floor.clone())), |b| {
                let lp = lp_at(b, var("up1_i"));
                let s = score64(b, lp, var("up1_i"));
                b.set("best", s);
                b.set("best_i", var("up1_i"));
            });
        },
    );
    let reads = b.reduce(ReduceOp::Max, Ty::U32, select(rescan, u(2), u(1)), "reads");
    let (win, tok) = b.argmax_of(Ty::F64, var("best"), var("best_i"), "win", "tok");
    b.if_((param("flags") & u(FLAG_PASSES)).ne_(u(0)).and(builtin(Builtin::LocalId).eq_(u(0))), |b| {
        b.store("passes", var("row"), reads)
    });
    finish(b, win, tok.clone(), |b| lp_at(b, tok));
}

pub(super) fn logits_buffers(dtype: Dtype) -> Vec<BufferDecl> {
    let mut buffers = logits_input(dtype).to_vec();
    buffers.push(buffer("rows", Storage::U32, false));
    buffers.extend(output_buffers());
    buffers
}

/// SGLang's seeded race from logits; with [`FLAG_SEEDED_ONLY`], the per-row sampler's launch for
/// its seeded rows without a filter (the rows of its list, with
/// [`FLAG_ROW_LIST`](super::abi::FLAG_ROW_LIST)).
///
/// A row split in `parts` (the flags, as the softmax kernel's) takes one launch: each part
/// reads its columns once and writes its record, and the part that arrives last
/// ([`combine::last_part`], the race's protocol) merges the records and scores the possible
/// winners. The host sets the parts from the row's length and the workgroup size alone, never
/// from the batch, so a request's token is the same in every batch (the float32 sum's rounding
/// follows the split).
fn seeded_logits(dtype: Dtype) -> Kernel {
    let mut b = Block::new();
    for_each_row_part_at(&mut b, listed_row, |b| {
        // Every part of a row decides alike, so all of them or none count in on its counter.
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
    buffers.push(buffer("passes", Storage::U32, true));
    buffers.push(counters_buffer());
    kernel(format!("seeded_logits_{}", dtype.suffix()), doc, 1, buffers, functions, b)
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
