//! What the one-read path (`filter_top_k.rs`, `filter_top_p.rs`) reads of a column, from logits
//! or from probabilities: one value `v` per column (`z = l / T`, or `p`), ordered and weighed as
//! the filter kernels order and weigh it (`filters.rs`, `element` and `weigh`), so the path's
//! sets are theirs whichever the input.

use super::abi::load_clean;
use super::filters::Input;
use super::math;
use super::philox;
use super::softmax::softmax_weight;
use crate::ir::*;

/// The column's value: `z = l / T` (NaN as -inf), or `p` (0 where it is no probability: NaN,
/// negative or infinite, which weighs nothing, as in the filter kernels).
pub(super) fn column(b: &mut Block, input: Input, col: Expr, name: &str) -> Expr {
    let x = read(b, input, col, &format!("{name}_x"));
    b.let_(name, Ty::F32, value(input, x))
}

/// One step of `width` columns, at the indices `at(0..width)` from `col_lo` of its `n`: their
/// reads ([`read`]) first and unconditional (an index at or past `n` reads the last column), so
/// they are in flight together, one round trip a step, not one a column; then `between`, then
/// `body(i, j, x)` for each index inside, with its place `j` in the step and its element.
pub(super) fn read_step(
    b: &mut Block,
    input: Input,
    n: Expr,
    width: u8,
    at: &dyn Fn(u32) -> Expr,
    between: impl FnOnce(&mut Block),
    body: &dyn Fn(&mut Block, Expr, u8, Expr),
) {
    for j in 0..width as u32 {
        let i = b.let_(&format!("li{j}"), Ty::U32, at(j));
        let clamped = select(i.clone().lt(n.clone()), i, n.clone() - u(1));
        read(b, input, var("col_lo") + clamped, &format!("zx{j}"));
    }
    between(b);
    for j in 0..width {
        let i = var(&format!("li{j}"));
        b.if_(i.clone().lt(n.clone()), |b| body(b, i, j, var(&format!("zx{j}"))));
    }
}

/// Visits this invocation's columns of the `n` from `col_lo` in the order a loop of stride
/// `bs` would, `width` a step ([`read_step`]), `bs` apart (coalesced, and no bank conflict on
/// stores by index): `body(i, j, x)` with the column's index `i` from `col_lo`. Four a step
/// where many workgroups share a multiprocessor; more where one workgroup reads a row alone and
/// only its own reads in flight hide the latency.
pub(super) fn for_each_read(
    b: &mut Block,
    input: Input,
    n: Expr,
    width: u8,
    body: impl Fn(&mut Block, Expr, u8, Expr),
) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    b.for_("i0", lid, n.clone(), bs.clone() * u(width as u32), |b, i0| {
        read_step(b, input, n.clone(), width, &|j| i0.clone() + bs.clone() * u(j), |_| {}, &body)
    });
}

/// The column's element as read (NaN as -inf from logits), into `name`: [`value`] makes it the
/// column's value, so a loop can issue several reads before it works on any.
pub(super) fn read(b: &mut Block, input: Input, col: Expr, name: &str) -> Expr {
    match input {
        Input::Logits(_) => b.let_(name, Ty::F32, load_clean(col)),
        Input::Probs => b.let_(name, Ty::F32, load("x", var("base") + col)),
    }
}

/// The value ([`column()`]) of an element as [`read`].
pub(super) fn value(input: Input, x: Expr) -> Expr {
    match input {
        Input::Logits(_) => x / var("temp"),
        Input::Probs => {
            let valid = x.clone().gt(f(0.0)).and(x.clone().lt(f(f32::INFINITY)));
            select(valid, x, f(0.0))
        }
    }
}

/// Whether a [`column()`] value is a token the row may keep (the parts list only those).
pub(super) fn has_mass(input: Input, v: Expr) -> Expr {
    match input {
        Input::Logits(_) => v.gt(f(f32::NEG_INFINITY)),
        Input::Probs => v.gt(f(0.0)),
    }
}

/// The weight of the value `v` in a row (or part) whose largest is `m`: `exp(v - m)` (with the
/// softmax's limits), or `p / m`, the largest weighed 1 without a division (Vulkan's division
/// is only within 2.5 ulp, and a quotient below 1 there would drop the top token under min-p 1).
pub(super) fn weight(input: Input, v: Expr, m: Expr) -> Expr {
    match input {
        Input::Logits(_) => softmax_weight(v, m),
        Input::Probs => probs_weight(v, m),
    }
}

/// [`weight`] where `m` is finite (no test of the limits, which a loop's compiler would
/// unswitch into a copy of the loop for each), for a sum that is only an estimate: the target's
/// fast exponential ([`approx_exp`], within 3 + 2|x| ulp), or `p / m`.
pub(super) fn estimate_weight(input: Input, v: Expr, m: Expr) -> Expr {
    match input {
        Input::Logits(_) => approx_exp(v - m),
        Input::Probs => probs_weight(v, m),
    }
}

fn probs_weight(p: Expr, m: Expr) -> Expr {
    select(p.clone().eq_(m.clone()), f(1.0), p / m)
}

/// The value the filters' order is on: `z - max` rounded to f32 (two values of `z` that round
/// to the same distance have the same probability), or `p`.
pub(super) fn order_value(input: Input, v: Expr, mx: Expr) -> Expr {
    match input {
        Input::Logits(_) => v - mx,
        Input::Probs => v,
    }
}

/// The weight of a token from its [`order_value`] `ov` in a row whose largest is `mx`.
pub(super) fn order_weight(input: Input, ov: Expr, mx: Expr) -> Expr {
    match input {
        Input::Logits(_) => call(math::EXP, vec![ov]),
        Input::Probs => weight(input, ov, mx),
    }
}

/// The value the top-p histograms bin, monotone in `v`, in units of which a bin is
/// `1 / BIN_SCALE` (16): `z`, or `p`'s exponent and first four bits of mantissa (a sixteenth of
/// an octave a bin, as an exact integer over 16), so a bin is found without a logarithm.
pub(super) fn bin_value(input: Input, v: Expr) -> Expr {
    match input {
        Input::Logits(_) => v,
        Input::Probs => (v.bitcast(Ty::U32) >> u(19)).cast(Ty::F32) * f(1.0 / 16.0),
    }
}

/// The value (`z` or `p`) at the upper edge of the bin whose [`bin_value`]s lie in
/// `[(k - 1) / 16, k / 16)`, `k` an integer as f32: what a top-p histogram weighs the bin's
/// tokens against, so that each weighs at least `e^(-1/16)` (from logits) or 16/17 (from
/// probabilities) of its unit whatever its depth.
pub(super) fn bin_edge(input: Input, k: Expr) -> Expr {
    match input {
        Input::Logits(_) => k * f(1.0 / 16.0),
        Input::Probs => (k.cast(Ty::U32) << u(19)).bitcast(Ty::F32),
    }
}

/// The Philox race's score of the column with value `v` and noise word `bits`: `z + Gumbel`, or
/// `p / Exponential` (the plain path's races).
pub(super) fn philox_score(input: Input, v: Expr, bits: Expr) -> Expr {
    match input {
        Input::Logits(_) => v + call(philox::GUMBEL, vec![bits]),
        Input::Probs => v / call(philox::EXPONENTIAL, vec![bits]),
    }
}

/// The float64 log-probability, up to the row's constant, that the seeded race scores: `z - max`
/// (its [`order_value`]), or `ln p`.
pub(super) fn seeded_log(input: Input, v: Expr, ov: Expr) -> Expr {
    match input {
        Input::Logits(_) => ov.cast(Ty::F64),
        Input::Probs => call(math::LOG64, vec![v.cast(Ty::F64)]),
    }
}

/// The token's log-probability under the whole row: `z - mx - ln(mass)` (`mass` the row's
/// softmax sum at `mx`), or `ln p` (the filter kernels' for each input).
pub(super) fn log_probability(input: Input, v: Expr, mx: Expr, mass: Expr) -> Expr {
    match input {
        Input::Logits(_) => (v - mx) - call(math::LOG, vec![mass]),
        Input::Probs => select(v.clone().gt(f(0.0)), call(math::LOG, vec![v]), f(f32::NEG_INFINITY)),
    }
}
