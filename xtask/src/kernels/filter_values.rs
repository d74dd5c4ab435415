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
        Input::Probs => probs_weight(v, m, |p, m| p / m),
    }
}

/// [`weight`] where `m` is finite (no test of the limits, which a loop's compiler would
/// unswitch into a copy of the loop for each), for a sum that is only an estimate: the target's
/// fast exponential ([`approx_exp`], within 3 + 2|x| ulp), or its fast division ([`approx_div`],
/// within 2.5 ulp).
pub(super) fn estimate_weight(input: Input, v: Expr, m: Expr) -> Expr {
    match input {
        Input::Logits(_) => approx_exp(v - m),
        Input::Probs => probs_weight(v, m, approx_div),
    }
}

/// `p / m` by `divide`, the largest weighed 1 whatever the division's rounding.
fn probs_weight(p: Expr, m: Expr, divide: fn(Expr, Expr) -> Expr) -> Expr {
    select(p.clone().eq_(m.clone()), f(1.0), divide(p, m))
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

/// A grid of the top-p histograms: bins `2^-shift` wide in `z`, or from probabilities
/// `2^-shift` of an octave of `p` (its exponent and first `shift` bits of mantissa), so a bin is
/// found without a logarithm and its edges are exact. `scale` is `2^shift` and `inv`
/// `2^-shift`, as f32 (made from their bits, exact on every target).
#[derive(Clone)]
pub(super) struct Grid {
    pub shift: Expr,
    pub scale: Expr,
    pub inv: Expr,
}

impl Grid {
    /// A grid whose shift is known when the kernel is written.
    pub fn fixed(shift: u32) -> Grid {
        let scale = (1u64 << shift) as f32;
        Grid { shift: u(shift), scale: f(scale), inv: f(1.0 / scale) }
    }

    /// The grid of shift `shift` (a row's state), its shift and scale bound once as
    /// `{name}_*` (its inverse is written where an edge uses it).
    pub fn bound(b: &mut Block, shift: Expr, name: &str) -> Grid {
        let shift = b.let_(&format!("{name}_shift"), Ty::U32, shift);
        let bits = |e: Expr| (e << u(23)).bitcast(Ty::F32);
        let scale = b.let_(&format!("{name}_scale"), Ty::F32, bits(u(127) + shift.clone()));
        Grid { inv: bits(u(127) - shift.clone()), shift, scale }
    }

    /// The index of the value `v` (`z` or `p`) on the grid, an integer as f32, monotone in `v`:
    /// `floor(z 2^shift)`, or `p`'s bits shifted right by `23 - shift`.
    pub fn index(&self, input: Input, v: Expr) -> Expr {
        match input {
            Input::Logits(_) => floor(v * self.scale.clone()),
            Input::Probs => (v.bitcast(Ty::U32) >> (u(23) - self.shift.clone())).cast(Ty::F32),
        }
    }

    /// The grid's origin for a largest value `m`: the smallest index at or above it, so `m`'s
    /// bin, counted down from the origin ([`Grid::index`] subtracted from it), is 0 or 1.
    pub fn origin(&self, input: Input, m: Expr) -> Expr {
        match input {
            Input::Logits(_) => -floor(-m * self.scale.clone()),
            Input::Probs => self.index(input, m),
        }
    }

    /// The value (`z` or `p`) at index `k`'s lower edge, `k` an integer as f32: the upper edge
    /// of the values of index `k - 1`.
    pub fn edge(&self, input: Input, k: Expr) -> Expr {
        match input {
            Input::Logits(_) => k * self.inv.clone(),
            Input::Probs => (k.cast(Ty::U32) << (u(23) - self.shift.clone())).bitcast(Ty::F32),
        }
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
