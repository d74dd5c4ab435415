//! Greedy argmax and the two exponential races (from logits, fused with the softmax, and from
//! probabilities), each for f32, f16 and bf16 inputs; a row split over workgroups is combined
//! by its last part in the same launch (`combine.rs`).

use super::abi::{
    buffer, clean, for_each_column, for_each_row_part, kernel, load_clean, load_quad, logits_input, output_buffers,
    part, part_buffers, philox_block, row_temperature, row_word, word, write_results, Dtype, FLAG_LOGPROBS, NONE,
    PART_WORDS,
};
use super::combine;
use super::math;
use super::philox;
use super::softmax::{logsumexp_pair, online_logsumexp};
use crate::ir::*;

/// What the argmax kernels race on.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Race {
    /// `l` for every row.
    Greedy,
    /// `l / T + Gumbel` (greedy rows: `l`).
    Logits,
    /// `p / Exponential` (greedy rows: `p`).
    Probs,
}

/// Screening bounds of the race from logits (see [`screened_pass`]): the approximate score
/// `a = x * (1/T) + g~` of a column is within `|x * (1/T)| * ZREL + GABS` of its exact score.
///
/// The budget, with each part's worst case: `x * (1/T)` against `x / T`, three roundings (2.5
/// ulp on Vulkan's division) under 2^-21 relative; the approximate Gumbel noise `g~`, two fast
/// logs (Vulkan: absolute error below 2^-21 on [0.5, 2], 3 ulp elsewhere; CUDA's `__logf` is
/// closer), where the first log's absolute error becomes the relative error of the
/// exponential `E = -log u`, at most 2^-21 / 2^-6 = 2^-15 because `E < 2^-6` takes its series
/// instead; the second log adds 2^-21 and the sums round twice. So the noise is within about
/// 2^-14.9 and the bounds leave a margin of 8 over each part.
pub(super) const SCREEN_ZREL: f32 = 1.0 / 1_048_576.0; // 2^-20
const SCREEN_GABS: f32 = 1.0 / 2048.0; // 2^-11
/// `|x * (1/T)|` at or above this may round to (or away from) infinity: such a column is
/// scored exactly where it is read.
const SCREEN_HUGE: f32 = 1.7014118e38; // 2^127

/// The exact race score of a finite-class column `col` with Philox word `wj`, as [`race_row`]
/// computes it: `x / T + Gumbel(wj)`.
fn exact_score(sv: Expr, wj: Expr) -> Expr {
    sv + call(philox::GUMBEL, vec![wj])
}

/// Word `j` (0..4, a runtime value) of a Philox block.
fn word_at(w: Expr, j: Expr) -> Expr {
    let pick = |k: u8, rest: Expr| select(j.clone().eq_(u(k as u32)), w.clone().comp(k), rest);
    pick(0, pick(1, pick(2, w.clone().comp(3))))
}

/// `if value > top (or nothing kept yet): top, top_i = value, col` (the +inf class's race).
fn keep_top(b: &mut Block, value: Expr, col: Expr) {
    b.if_(value.clone().gt(var("top")).or(var("top_i").eq_(u(NONE))), |b| {
        b.set("top", value);
        b.set("top_i", col);
    });
}

/// `if score > best (or nothing kept yet): best, best_i, best_z = score, col, z`, where `z` is
/// the column's scaled value (its probability in the race from probabilities), which a split
/// row's combine needs for the log-probability.
fn keep(b: &mut Block, score: Expr, col: Expr, z: Expr) {
    b.if_(score.clone().gt(var("best")).or(var("best_i").eq_(u(NONE))), |b| {
        b.set("best", score);
        b.set("best_i", col);
        b.set("best_z", z);
    });
}

/// A column of a greedy row (the greedy kernel's, and the race's rows below `GREEDY_EPS`, the
/// only ones the screen leaves to an exact pass): the score is the scaled value itself, and the
/// +inf class keeps its lowest column.
/// `x` is the column's value, NaN read as -inf.
fn greedy_column(b: &mut Block, x: Expr, col: Expr) {
    let want_lp = (param("flags") & u(FLAG_LOGPROBS)).ne_(u(0));
    let sv = b.let_("sv", Ty::F32, x / var("temp"));
    b.if_else(
        sv.clone().eq_(f(f32::INFINITY)),
        |b| {
            b.set("top_n", var("top_n") + u(1));
            keep_top(b, f(0.0), col.clone());
        },
        |b| {
            keep(b, sv.clone(), col.clone(), sv.clone());
            b.if_(want_lp, |b| online_logsumexp(b, sv.clone(), f(1.0)));
        },
    );
}

/// Records a column's bounds `[lo, up]` on its exact score: `lo_best` the largest lower bound,
/// `up1` the largest upper bound (at `up1_i`) and `up2` the next (ties included).
pub(super) fn bound(b: &mut Block, lo: Expr, up: Expr, col: Expr) {
    b.set("lo_best", var("lo_best").max(lo));
    b.if_else(
        up.clone().gt(var("up1")),
        |b| {
            b.set("up2", var("up1"));
            b.set("up1", up.clone());
            b.set("up1_i", col.clone());
        },
        |b| b.set("up2", var("up2").max(up.clone())),
    );
}

/// An upper bound on the race's Gumbel noise as the kernels compute it: the uniform is at most
/// `1 - 2^-24`, whose noise `-ln(-ln(1 - 2^-24))` is 16.63553, and the IR's `log` (about one
/// ulp, [`math::log`]) moves the computed value by under 1e-5; the rest (0.0044) is margin for
/// the roundings of the pruning test (see [`prune_test`]).
const NOISE_MAX: f32 = 16.64;

/// Whether a quad of four columns can hold the race's winner, given `floor`, a lower bound on
/// the exact score of a column already scored (or -inf): the quad's largest `za = x * (1/T)`
/// is `qmax`, and the quad is kept when `qmax + |qmax| 2^-20 + 16.64 >= floor`, or when `qmax`
/// is at least 2^127 (the column may be in the +inf class, which beats every finite score).
/// [`can_win`] with the largest noise of any word.
fn prune_test(qmax: Expr, floor: Expr) -> Expr {
    can_win(qmax, f(NOISE_MAX), floor)
}

/// Whether columns whose largest `za = x * (1/T)` is `qmax` and whose computed noise is at
/// most `noise - 0.0044` can score at least `floor` (see [`prune_test`]).
///
/// Why a quad that fails the test holds no winner (exact pruning). A column's exact score is
/// `s = fl(sv + g)` with `sv = fl(x / T)` and `g` its computed Gumbel noise, as [`exact_score`]
/// computes it and as every screened candidate is rescored; `floor` is `a - d` of a column the
/// screen scored, at most that column's exact score (see [`SCREEN_ZREL`]).
/// - `sv <= za + |za| 2^-21`: `za = fl(x * fl(1/T))` and `sv` are within 6 ulp (2.5 for each
///   Vulkan division, 0.5 for the product), so within `|za| 6 2^-24`; `z -> z + |z| 2^-20` is
///   increasing, so the quad's largest column bounds every column of the quad.
/// - `g <= noise - 0.0044` (for the quad test `16.63554` and `NOISE_MAX`, above), so
///   `sv + g <= za + |za| 2^-21 + noise - 0.0044` in reals.
/// - The test's two roundings (the product `|za| 2^-20` is exact) lose at most 2 ulp of a value
///   of size `|za| + 17`, below what the slack `|za| 2^-21 + 0.0044` covers; so the computed
///   bound `U >= sv + g` in reals, and as `U` is a float and rounding is monotone, `s <= U`.
/// - A pruned quad has `U < floor <= s_c`, the exact score of another column: its columns
///   score strictly less than a column already seen, so none is the argmax or ties with it.
///
/// Columns read as -inf (NaN, -inf, past the row) give `qmax = -inf` and never win.
pub(super) fn can_win(qmax: Expr, noise: Expr, floor: Expr) -> Expr {
    qmax.clone().gt(f(f32::NEG_INFINITY)).and(reaches(qmax, noise, floor))
}

/// [`can_win`] for a `qmax` known to be above -inf (its bound would be NaN there), with no
/// test of it: what the caller knows need not cost a branch around the bound.
pub(super) fn reaches(qmax: Expr, noise: Expr, floor: Expr) -> Expr {
    let bound = qmax.clone() + qmax.clone().abs() * f(SCREEN_ZREL) + noise;
    bound.ge(floor).or(qmax.ge(f(SCREEN_HUGE)))
}

/// The margin [`can_win`] needs over a bound on the computed noise (see [`NOISE_MAX`]).
const NOISE_SLACK: f32 = 0.0045;

/// An upper bound on the Gumbel noise of word `w` as the kernels compute it, plus
/// [`NOISE_SLACK`], from the word's bits with no log: what lets a kept quad skip the screened
/// score of a column that cannot win ([`prune_step`]).
///
/// `t = 1 - u` is exact: `uniform(!w) = (2 (2^23 - 1 - (w >> 9)) + 1) 2^-24`. Then
/// `-ln u >= t`, so `g = -ln(-ln u) <= -ln t`; and with `t = 2^e (1 + m)` (`t` is normal, at
/// least 2^-24) and `b` its bits read as an integer, `log2 t >= e + m = b 2^-23 - 127`, so
/// `g <= (127 - b 2^-23) ln 2` ([`math::log2_lower`]). Computed in f32: `b` rounds by at most
/// 32 (2.7e-6 after the product), the product with `ln 2` and the sum by 1e-6 each, and the
/// IR's logs put the computed `g` within 1e-5 of the real one; 4e-4 of the 0.0045 added covers
/// them, the rest is the test's slack. A word of `n` leading ones has `t >= 2^-(n+1)`, so the bound is at most
/// `(n + 1) ln 2 + 0.0045`: half the words bound their noise by 0.70, one in 1024 by 7.6 (the
/// best of 2048 columns' noise), so on a row whose floor is a few units above most columns'
/// `za`, nearly every column of a kept quad is skipped (`docs/race-design.md`).
pub(super) fn noise_bound(w: Expr) -> Expr {
    let t = call(philox::UNIFORM, vec![w ^ u(u32::MAX)]);
    f(NOISE_SLACK) - math::log2_lower(t) * f(std::f32::consts::LN_2)
}

/// The most `log2(1 + m) - m` reaches for `m` in [0, 1) (at `m = 1/ln 2 - 1`), rounded up: so
/// [`math::log2_lower`] plus it bounds `log2 x` from above.
const LOG2_GAP: f32 = 0.0861;

/// A lower bound on the Gumbel noise of word `w` as the kernels compute it, less
/// [`NOISE_SLACK`], from the word's bits with no log: what gives the top-p cut's race a floor
/// before any column is screened (`filter_top_p.rs`, `cut_part`).
///
/// `u = uniform(w)` and `t = 1 - u` are exact (every uniform is a multiple of 2^-24 in (0, 1)).
/// `-ln u = ln(1/u) <= 1/u - 1 = t/u`, so `g = -ln(-ln u) >= ln u - ln t`; and
/// `log2 u >= log2_lower(u)`, `log2 t <= log2_lower(t) + LOG2_GAP`, so
/// `g >= (log2_lower(u) - log2_lower(t) - LOG2_GAP) ln 2`. Computed in f32: each bits' conversion
/// rounds by 4e-6 after the scaling, the differences, the product with `ln 2` and the slack's
/// subtraction by 1e-6 each, and the IR's logs put the computed `g` within 1e-5 of the real one,
/// all inside the slack subtracted. It is tight where the noise is large (`u` near 1, the
/// columns that win): within `0.0861 ln 2 + 0.0045`, 0.064.
pub(super) fn noise_floor(w: Expr) -> Expr {
    let un = call(philox::UNIFORM, vec![w]);
    let t = f(1.0) - un.clone();
    (math::log2_lower(un) - math::log2_lower(t) - f(LOG2_GAP)) * f(std::f32::consts::LN_2) - f(NOISE_SLACK)
}

/// The screened score of column `col` (its value scaled, `za`, and its Philox word `wj`):
/// approximate with the fast log (two per column instead of two exact logs and a division) and
/// bounds on the exact score (see [`SCREEN_ZREL`]). A column past the approximation's range
/// (`|x / T|` at or above 2^127, where the +inf class begins) sets `up1` and `up2` to +inf,
/// which sends its invocation to the exact rescoring of all its columns ([`screened_pass`]);
/// -inf never wins.
/// So a kept quad has no exact scoring on its path, and the cost model's rare path is just it.
fn screened_column(b: &mut Block, za: Expr, wj: Expr, col: Expr) {
    let (a, d, in_range) = screen(b, za.clone(), wj);
    // Branch-free in range (out of it the bounds are -inf, which record nothing), so the cost
    // model, whose common path is the cheapest, counts the screen and not the rare exit.
    let none = f(f32::NEG_INFINITY);
    let col_at = col.clone();
    bound(b, select(in_range.clone(), a.clone() - d.clone(), none.clone()), select(in_range.clone(), a + d, none), col);
    // Both of the largest upper bounds at +inf, so that no later column moves the second down.
    b.if_(in_range.not().and(za.gt(f(f32::NEG_INFINITY))), |b| {
        b.set("up1", f(f32::INFINITY));
        b.set("up1_i", col_at);
        b.set("up2", f(f32::INFINITY));
    });
}

/// A column's screened score `a` (its value scaled, `za`, and its Philox word `wj`: the fast
/// log, two a column), within `d` of its exact score where `in_range` (see [`SCREEN_ZREL`]);
/// bound as `an`, `dn` and `in_range`.
pub(super) fn screen(b: &mut Block, za: Expr, wj: Expr) -> (Expr, Expr, Expr) {
    let e = screened_exponential(b, wj);
    let a = b.let_("an", Ty::F32, za.clone() - approx_log(e));
    let d = b.let_("dn", Ty::F32, za.clone().abs() * f(SCREEN_ZREL) + f(SCREEN_GABS));
    let in_range = b.let_("in_range", Ty::Bool, za.abs().lt(f(SCREEN_HUGE)));
    (a, d, in_range)
}

/// The exponential noise `-ln u` of Philox word `wj` by the screens' fast log
/// ([`math::screen_neg_log`], within 2^-15 relative), bound as `en` (its uniform as `un`, and
/// `1 - u`, exact, as `tn`): the screens' of both races (from logits `-ln E`, from
/// probabilities `p / E`).
pub(super) fn screened_exponential(b: &mut Block, wj: Expr) -> Expr {
    let un = b.let_("un", Ty::F32, call(philox::UNIFORM, vec![wj]));
    let t = b.let_("tn", Ty::F32, f(1.0) - un.clone());
    b.let_("en", Ty::F32, math::screen_neg_log(un, t))
}

/// The workgroup memory holding the row's Philox table ([`philox::row_table`]) during the
/// pruned pass, declared by every kernel that races from logits ([`race_shared`]).
const RACE_KEY: &str = "race_key";

/// The Philox block of the four columns from `c0`, from the row's table in [`RACE_KEY`]: what
/// [`philox_block`] gives, for fewer instructions a block.
fn keyed_block(c0: Expr) -> Expr {
    philox::block_from_table(c0 >> u(2), |k| load_shared(RACE_KEY, u(k)))
}

/// The workgroup memory of [`screened_pass`], for the kernels that race from logits.
pub(super) fn race_shared() -> SharedDecl {
    SharedDecl::new(RACE_KEY, Ty::U32, philox::TABLE_WORDS)
}

/// One step of [`screened_pass`] for the invocation's quad at `cb + 4 x local id`: its four
/// values read (and entered in the online log-sum-exp on request), then, if [`prune_test`] keeps
/// the quad, its Philox block and its four screened scores.
fn prune_step(b: &mut Block, cb: Expr) {
    let want_lp = (param("flags") & u(FLAG_LOGPROBS)).ne_(u(0));
    let c0 = b.let_("c0", Ty::U32, cb + builtin(Builtin::LocalId) * u(4));
    b.let_("qmax", Ty::F32, f(f32::NEG_INFINITY));
    load_quad(b, c0.clone());
    for j in 0..4u8 {
        let name = format!("x{j}");
        b.set("qmax", var("qmax").max(var(&name) * var("rcp_t")));
        b.if_(want_lp.clone(), |b| {
            let sv = b.let_("lse_v", Ty::F32, var(&name) / var("temp"));
            b.if_(sv.clone().lt(f(f32::INFINITY)), |b| online_logsumexp(b, sv, f(1.0)));
        });
    }
    b.if_(prune_test(var("qmax"), var("lo_best")), |b| {
        b.set("w", keyed_block(c0.clone()));
        // The quad's largest word bounds the noise of all four (`noise_bound` is monotone in
        // the word, `can_win` in both arguments): one test a quad, and the columns' own tests
        // only where it passes, so most kept quads cost their block and this test alone.
        let w = |j: u8| var("w").comp(j);
        let wmax = w(0).max(w(1)).max(w(2).max(w(3)));
        b.if_(can_win(var("qmax"), noise_bound(wmax), var("lo_best")), |b| {
            for j in 0..4u8 {
                b.scope(|b| {
                    let col = c0.clone() + u(j as u32);
                    // `za` again rather than kept from the read: four registers fewer.
                    let za = b.let_("za", Ty::F32, var(&format!("x{j}")) * var("rcp_t"));
                    let wj = b.let_("wj", Ty::U32, w(j));
                    // The column's own noise bound, from its word: most columns stop here,
                    // before the two logs of their screened score.
                    b.if_(can_win(za.clone(), noise_bound(wj.clone()), var("lo_best")), |b| {
                        screened_column(b, za, wj, col)
                    });
                });
            }
        });
    });
}

/// One read of a noisy row, pruned: each invocation reads a quad of four consecutive columns a
/// step ([`prune_step`]), and only a quad that [`prune_test`] keeps gets its Philox block and
/// its screened scores ([`screened_column`]); the others cost a load, a product and a
/// comparison a column. After the first step (which nothing can prune) the workgroup shares its
/// largest lower bound, so the high columns a row shows early prune every invocation's later
/// quads. That one reduction sits outside the loop (a barrier inside it would make the compiler
/// read the row's Philox table again every step). With log-probabilities, every column still
/// enters the online log-sum-exp.
fn screened_pass(b: &mut Block) {
    // The row's Philox table, once into workgroup memory (read from the row record inside the
    // kept quads' branch, the key was read again for every kept quad). nvcc holds its 20 words
    // in registers across the loop: 62 on sm_90, two blocks of 512 resident, where the key
    // alone took 40 and three; the table saves about 22 instructions a block, which the cost
    // model finds worth more (`docs/race-design.md`, stage H).
    b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| {
        let table = philox::row_table(
            row_word(word::SEED_LO),
            row_word(word::SEED_HI),
            row_word(word::OFFSET_LO),
            row_word(word::OFFSET_HI),
        );
        for (k, w) in table.into_iter().enumerate() {
            b.store_shared(RACE_KEY, u(k as u32), w);
        }
    });
    b.barrier();
    let step = builtin(Builtin::BlockSize) * u(4);
    b.scope(|b| prune_step(b, var("col_lo")));
    // The workgroup's largest lower bound after its first step is still one column's: it
    // serves as every invocation's own from here on.
    let shared = b.reduce(ReduceOp::Max, Ty::F32, var("lo_best"), "floor_first");
    b.set("lo_best", shared);
    b.for_("cb", var("col_lo") + step.clone(), var("col_hi"), step, prune_step);
    // Every exact score lies in its column's bounds, so the winner's upper bound reaches the
    // largest lower bound `floor`, and so does any column that ties with it. Each invocation
    // scores its best candidate exactly, and the rare invocation with a second candidate (or a
    // column past the screen's range, see `screened_column`) rescores all its columns.
    let floor = b.reduce(ReduceOp::Max, Ty::F32, var("lo_best"), "screen_floor");
    b.if_(var("up1_i").ne_(u(NONE)).and(var("up1").ge(floor.clone())), |b| {
        let c = var("up1_i");
        let w = keyed_block(c.clone() & u(!3));
        let sv = b.let_("sv", Ty::F32, load_clean(c.clone()) / var("temp"));
        b.set("best", exact_score(sv.clone(), word_at(w, c.clone() & u(3))));
        b.set("best_i", c);
        b.set("best_z", sv);
    });
    b.if_(var("up2").ge(floor.clone()), |b| {
        // From scratch, so that a tie goes to the lower column as in the exact pass; the +inf
        // class is raced here alone (the screen sent its columns here).
        for (name, init) in [("best", f(f32::NEG_INFINITY)), ("top", f(f32::NEG_INFINITY))] {
            b.set(name, init);
        }
        b.set("best_i", u(NONE));
        b.set("top_i", u(NONE));
        b.set("top_n", u(0));
        // A column that cannot win costs no Philox block here either (-inf, or below the floor
        // by the pruning bound); the others draw their block alone, this pass being rare.
        for_each_column(
            b,
            |_, _| {},
            |b, col, _| {
                let x = b.let_("xv", Ty::F32, load_clean(col.clone()));
                let za = x.clone() * var("rcp_t");
                b.if_(prune_test(za, floor.clone()), |b| {
                    let wj = b.let_("wj", Ty::U32, word_at(keyed_block(col.clone() & u(!3)), col.clone() & u(3)));
                    let sv = b.let_("sv", Ty::F32, x.clone() / var("temp"));
                    b.if_else(
                        sv.clone().eq_(f(f32::INFINITY)),
                        |b| {
                            b.set("top_n", var("top_n") + u(1));
                            keep_top(b, call(philox::GUMBEL, vec![wj.clone()]), col.clone());
                        },
                        |b| keep(b, exact_score(sv.clone(), wj.clone()), col.clone(), sv.clone()),
                    );
                });
            },
        );
    });
}

/// The race from probabilities: `p / Exponential` on every valid column (greedy rows: `p`);
/// negative, infinite and NaN values are invalid.
fn probs_pass(b: &mut Block) {
    for_each_column(
        b,
        |b, c0| b.if_(var("noisy"), |b| b.set("w", philox_block(c0))),
        |b, col, j| {
            let x = b.let_("xv", Ty::F32, clean(load("x", var("base") + col.clone())));
            let score = b.let_("score", Ty::F32, x.clone());
            let valid = x.clone().ge(f(0.0)).and(x.clone().lt(f(f32::INFINITY)));
            b.if_else(
                valid,
                |b| {
                    b.if_(var("noisy"), |b| {
                        b.set("score", x.clone() / call(philox::EXPONENTIAL, vec![var("w").comp(j)]));
                    })
                },
                |b| b.set("score", f(f32::NEG_INFINITY)),
            );
            keep(b, score, col, x);
        },
    );
}

/// One row of the argmax family (see [`argmax_kernel`]), inside the row loop.
pub(super) fn race_row(b: &mut Block, race: Race) {
    if race == Race::Greedy {
        b.let_("noisy", Ty::Bool, boolean(false));
        b.let_("temp", Ty::F32, f(1.0));
    } else {
        row_temperature(b);
    }
    b.let_("best", Ty::F32, f(f32::NEG_INFINITY));
    b.let_("best_i", Ty::U32, u(NONE));
    b.let_("best_z", Ty::F32, f(f32::NEG_INFINITY));
    // The top class (+inf scaled values): its own race, on the noise alone.
    b.let_("top", Ty::F32, f(f32::NEG_INFINITY));
    b.let_("top_i", Ty::U32, u(NONE));
    b.let_("top_n", Ty::U32, u(0));
    b.let_("m", Ty::F32, f(f32::NEG_INFINITY));
    b.let_("s", Ty::F32, f(0.0));
    b.let_("w", Ty::U32x4, u32x4(u(0), u(0), u(0), u(0)));
    // Greedy rows load a quad at a time, as noisy rows do (one address, four loads in flight).
    let greedy_pass = |b: &mut Block| {
        for_each_column(b, |b, c0| load_quad(b, c0), |b, col, j| greedy_column(b, var(&format!("x{j}")), col))
    };
    match race {
        Race::Logits => {
            // Noisy rows are screened; the branch is uniform (one row per workgroup).
            b.let_("rcp_t", Ty::F32, f(1.0) / var("temp"));
            b.let_("lo_best", Ty::F32, f(f32::NEG_INFINITY));
            b.let_("up1", Ty::F32, f(f32::NEG_INFINITY));
            b.let_("up1_i", Ty::U32, u(NONE));
            b.let_("up2", Ty::F32, f(f32::NEG_INFINITY));
            b.if_else(var("noisy"), screened_pass, greedy_pass);
        }
        Race::Greedy => greedy_pass(b),
        Race::Probs => probs_pass(b),
    }
    let (win, tok) = b.argmax(var("best"), var("best_i"), "win", "tok");
    let tops = match race {
        Race::Probs => u(0),
        _ => b.reduce(ReduceOp::Sum, Ty::U32, var("top_n"), "tops"),
    };
    b.if_else(
        var("parts").le(u(1)),
        |b| whole_row_results(b, race, win.clone(), tok.clone(), tops.clone()),
        |b| {
            write_part(b, race, win.clone(), tok.clone(), tops.clone());
            combine::last_part_combines(b, race == Race::Probs);
        },
    );
}

/// The results of a row raced by one workgroup.
fn whole_row_results(b: &mut Block, race: Race, win: Expr, tok: Expr, tops: Expr) {
    // A screened row with nothing valid has no candidate at all: keep the index in the row.
    b.if_(tok.clone().eq_(u(NONE)), |b| b.set("tok", u(0)));
    if race == Race::Probs {
        let valid = b.let_("valid", Ty::Bool, win.gt(f(0.0)));
        write_results(b, tok.clone(), valid, |b| {
            let pt = b.let_("pt", Ty::F32, clean(load("x", var("base") + tok.clone())));
            select(pt.clone().gt(f(0.0)), call(math::LOG, vec![pt]), f(f32::NEG_INFINITY))
        });
        return;
    }
    let valid = b.let_("valid", Ty::Bool, tops.clone().gt(u(0)).or(win.gt(f(f32::NEG_INFINITY))));
    b.if_(tops.clone().gt(u(0)), |b| {
        let (_, top_tok) = b.argmax(var("top"), var("top_i"), "top_win", "top_tok");
        b.set("tok", top_tok);
    });
    write_results(b, tok.clone(), valid, |b| {
        // Top class: uniform over its columns. Else log-softmax from the online sums.
        let (mx, total) = logsumexp_pair(b);
        let finite = load_clean(tok.clone()) / var("temp") - mx - call(math::LOG, vec![total]);
        select(tops.clone().gt(u(0)), -call(math::LOG, vec![tops.clone().cast(Ty::F32)]), finite)
    });
}

/// Word `k` of this workgroup's part record.
fn part_word(k: u32) -> Expr {
    var("slot") * u(PART_WORDS) + u(k)
}

/// Writes this part's record for `combine.rs` (see [`PART_WORDS`]).
fn write_part(b: &mut Block, race: Race, win: Expr, tok: Expr, tops: Expr) {
    let (top_win, top_tok) = match race {
        Race::Probs => (f(f32::NEG_INFINITY), u(NONE)),
        _ => {
            let (w, t) = b.argmax(var("top"), var("top_i"), "top_win", "top_tok");
            (w, t)
        }
    };
    let want_lp = (param("flags") & u(FLAG_LOGPROBS)).ne_(u(0));
    b.let_("part_m", Ty::F32, f(f32::NEG_INFINITY));
    b.let_("part_s", Ty::F32, f(0.0));
    if race != Race::Probs {
        b.if_(want_lp, |b| {
            let (mx, total) = logsumexp_pair(b);
            b.set("part_m", mx);
            b.set("part_s", total);
        });
    }
    let bits = |e: Expr| e.bitcast(Ty::U32);
    b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| {
        b.store("partials", part_word(part::BEST), bits(win));
        b.store("partials", part_word(part::BEST_I), tok.clone());
        b.store("partials", part_word(part::TOP), bits(top_win));
        b.store("partials", part_word(part::TOP_I), top_tok);
        b.store("partials", part_word(part::TOP_N), tops);
        b.store("partials", part_word(part::M), bits(var("part_m")));
        b.store("partials", part_word(part::S), bits(var("part_s")));
    });
    // The winner's scaled value, from the invocation that holds it.
    b.if_(var("best_i").eq_(tok.clone()).and(tok.ne_(u(NONE))), |b| {
        b.store("partials", part_word(part::BEST_Z), bits(var("best_z")));
    });
}

/// The argmax family: greedy, the race from logits and the race from probabilities. One read of
/// the row; with `FLAG_LOGPROBS`, the chosen token's log-probability from the same read.
///
/// Columns whose scaled value `z = x / T` is +inf form the row's top class: when there are any,
/// the race is among them alone on the noise (greedy: the lowest index), as the softmax's limit
/// puts all the probability there, uniformly. From probabilities, +inf is invalid like NaN.
fn argmax_kernel(race: Race, dtype: Dtype) -> Kernel {
    let (name, doc) = match race {
        Race::Greedy => ("greedy", "argmax of the logits, lowest index on ties; log-softmax at T = 1 on request"),
        Race::Logits => ("race_logits", "argmax of l/T + Gumbel noise from Philox (fused: no probabilities written)"),
        Race::Probs => ("race_probs", "argmax of p / Exponential noise from Philox (SGLang v0.5.20's rule)"),
    };
    let mut b = Block::new();
    let mut buffers = match race {
        Race::Probs => vec![buffer("x", dtype.storage(), false)],
        _ => logits_input(dtype).to_vec(),
    };
    if race != Race::Greedy {
        buffers.push(buffer("rows", Storage::U32, false));
    }
    buffers.extend(output_buffers());
    buffers.extend(part_buffers());
    for_each_row_part(&mut b, |b| race_row(b, race));

    let mut functions = vec![math::exp()];
    functions.extend(philox::noise_functions());
    let name = match race {
        Race::Probs => name.to_string(),
        _ => format!("{name}_{}", dtype.suffix()),
    };
    let mut k = kernel(name, doc, 1, buffers, functions, b);
    if race == Race::Logits {
        k.shared.push(race_shared());
    }
    k
}

/// Every kernel of this family: greedy and the race from logits per dtype, the race from
/// probabilities.
pub fn all() -> Vec<Kernel> {
    let mut out = Vec::new();
    for d in Dtype::ALL {
        out.push(argmax_kernel(Race::Greedy, d));
    }
    for d in Dtype::ALL {
        out.push(argmax_kernel(Race::Logits, d));
    }
    out.push(argmax_kernel(Race::Probs, Dtype::F32));
    out
}
