//! What the one-read path (`filter_top_k.rs`, `filter_top_p.rs`) reads of a column, from logits
//! or from probabilities: one value `v` per column (`z = l / T`, or `p`), ordered and weighed as
//! the filter kernels order and weigh it (`filters.rs`, `element` and `weigh`), so the path's
//! sets are theirs whichever the input.

use super::abi::{load_logit_quad, load_quad_as, logit_at};
use super::filters::Input;
use super::math;
use super::philox;
use super::race::{self, noise_bound, reaches};
use super::softmax::softmax_weight;
use crate::ir::*;

/// The column's value: `z = l / T` (NaN as -inf), or `p` (0 where it is no probability: NaN,
/// negative or infinite, which weighs nothing, as in the filter kernels).
pub(super) fn column(b: &mut Block, input: Input, col: Expr, name: &str) -> Expr {
    let x = read(b, input, col, &format!("{name}_x"));
    b.let_(name, Ty::F32, value(input, x))
}

/// One step of `width` columns, at the indices `first + stride j` (`j` in `0..width`) from
/// `col_lo` of its `n`: their reads ([`read`]) first and unconditional (an index at or past `n`
/// reads the last column), so they are in flight together, one round trip a step, not one a
/// column; then `between`, then `body(i, j, x)` for each index inside, with its place `j` in
/// the step and its element. A step wholly inside (every one but a part's last) reads from one
/// address at offsets `stride j` (see the CUDA emitter's `index`: no address, clamp or test a
/// column). Where `past` is given, an index at or past `n` reads as it (an element that weighs
/// nothing) and `body` runs on every index of the step with no test of it, so that each
/// column's work is on the loop's common path; such a body tests the index only before a store
/// by it.
pub(super) fn read_step(
    b: &mut Block,
    input: Input,
    (n, past): (Expr, Option<Expr>),
    width: u8,
    (first, stride): (Expr, Expr),
    between: impl FnOnce(&mut Block),
    body: &dyn Fn(&mut Block, Expr, u8, Expr),
) {
    // `stride j`, a literal where the stride is one.
    let offset = |j: u32| match stride {
        Expr::Lit(Lit::U32(s)) => u(s * j),
        _ => stride.clone() * u(j),
    };
    let at = |j: u32| if j == 0 { first.clone() } else { first.clone() + offset(j) };
    for j in 0..width as u32 {
        b.let_(&format!("li{j}"), Ty::U32, at(j));
        b.let_(&format!("zx{j}"), Ty::F32, f(0.0));
    }
    let last = var(&format!("li{}", width - 1));
    b.if_else(
        last.lt(n.clone()),
        |b| {
            let from = b.let_("zx_at", Ty::U32, var("base") + var("col_lo") + first.clone());
            for j in 0..width as u32 {
                let at = if j == 0 { from.clone() } else { from.clone() + offset(j) };
                b.set(&format!("zx{j}"), element_at(input, at));
            }
        },
        |b| {
            for j in 0..width as u32 {
                let (i, name) = (var(&format!("li{j}")), format!("zx{j}"));
                let inside = i.clone().lt(n.clone());
                let x = element_at(input, var("base") + var("col_lo") + select(inside.clone(), i, n.clone() - u(1)));
                b.set(
                    &name,
                    match &past {
                        Some(past) => select(inside, x, past.clone()),
                        None => x,
                    },
                );
            }
        },
    );
    between(b);
    for j in 0..width {
        let i = var(&format!("li{j}"));
        let x = var(&format!("zx{j}"));
        match past {
            Some(_) => b.scope(|b| body(b, i, j, x)),
            None => b.if_(i.clone().lt(n.clone()), |b| body(b, i, j, x)),
        }
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
    (n, past): (Expr, Option<Expr>),
    width: u8,
    body: impl Fn(&mut Block, Expr, u8, Expr),
) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    b.for_("i0", lid, n.clone(), bs.clone() * u(width as u32), |b, i0| {
        read_step(b, input, (n.clone(), past.clone()), width, (i0, bs.clone()), |_| {}, &body)
    });
}

/// An element that weighs nothing, as [`read`] would give it: -inf from logits, 0 from
/// probabilities.
pub(super) fn weightless(input: Input) -> Expr {
    match input {
        Input::Logits(_) => f(f32::NEG_INFINITY),
        Input::Probs => f(0.0),
    }
}

/// The column's element as read (NaN as -inf from logits), into `name`: [`value`] makes it the
/// column's value, so a loop can issue several reads before it works on any.
pub(super) fn read(b: &mut Block, input: Input, col: Expr, name: &str) -> Expr {
    b.let_(name, Ty::F32, element_at(input, var("base") + col))
}

/// The input's element at index `at` of the buffer, as [`read`] takes it.
fn element_at(input: Input, at: Expr) -> Expr {
    match input {
        Input::Logits(_) => logit_at(at),
        Input::Probs => load("x", at),
    }
}

/// Visits this invocation's quads of the `n` columns from `col_lo` (a multiple of 4, so that a
/// quad's four columns share one Philox block), the workgroup's quads side by side a step:
/// the quad's four elements read first and together, as `zx0` to `zx3` (one address inside
/// the part, [`load_quad_as`]), then `body(i, j, x)` for each of its four columns, with its
/// index `i` from `col_lo` and its place `j`, then `after(i0, first)`, `i0` the quad's first
/// index. A column past the part reads as [`weightless`], and `body` runs on all four with no
/// test of its index (as [`read_step`] with `past`): a weightless column must do nothing there.
/// From logits a NaN element reaches `body` as NaN, not cleaned to -inf ([`read`]): three
/// instructions a column fewer, for bodies whose every test of an element is a comparison
/// that NaN fails. The workgroup's first step is written apart (`first`), outside the loop and
/// any branch, so that `after` may hold a barrier there.
pub(super) fn for_each_quad(
    b: &mut Block,
    input: Input,
    n: Expr,
    body: impl Fn(&mut Block, Expr, u8, Expr),
    after: impl Fn(&mut Block, Expr, bool),
) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    let step = |b: &mut Block, i0: Expr, first: bool| {
        let c0 = var("col_lo") + i0.clone();
        match input {
            Input::Logits(_) => load_logit_quad(b, c0, "zx", true),
            Input::Probs => load_quad_as(b, c0, "zx", Ty::F32, weightless(input), |at, _| load("x", at)),
        }
        for j in 0..4u8 {
            let i = b.let_(&format!("li{j}"), Ty::U32, i0.clone() + u(j as u32));
            b.scope(|b| body(b, i, j, var(&format!("zx{j}"))));
        }
        after(b, i0, first);
    };
    b.scope(|b| {
        let i0 = b.let_("i0", Ty::U32, lid.clone() * u(4));
        step(b, i0, true)
    });
    b.for_("i0", (lid + bs.clone()) * u(4), n.clone(), bs * u(4), |b, i0| step(b, i0, false));
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

/// The weight of a token from its [`order_value`] `ov` in a row whose largest is `mx`: from
/// logits `exp(z - mx)`, by [`math::exp_nonpositive`] (an order value is at most 0): [`weight`]'s
/// value, without its tests of the softmax's limits.
pub(super) fn order_weight(input: Input, ov: Expr, mx: Expr) -> Expr {
    match input {
        Input::Logits(_) => call(math::EXP_NONPOSITIVE, vec![ov]),
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
            Input::Probs => self.bits_index(v).cast(Ty::F32),
        }
    }

    /// A probability's index on the grid as a u32: its bits shifted right by `23 - shift` (its
    /// exponent and first `shift` bits of mantissa), what [`Grid::index`] converts.
    pub fn bits_index(&self, p: Expr) -> Expr {
        p.bitcast(Ty::U32) >> (u(23) - self.shift.clone())
    }

    /// `t`, a whole number as f32 (a bin counted from the grid's origin, subtracted from it),
    /// bound to `name` in the terms [`Grid::reaches`] compares in: the f32 from logits, a u32
    /// (at least 0) from probabilities, whose indices are the bits of a probability shifted.
    pub fn threshold(&self, b: &mut Block, input: Input, t: Expr, name: &str) -> Expr {
        match input {
            Input::Logits(_) => b.let_(name, Ty::F32, t),
            Input::Probs => b.let_(name, Ty::U32, t.max(f(0.0)).cast(Ty::U32)),
        }
    }

    /// Whether value `v`'s index ([`Grid::index`]) is at least `t` ([`Grid::threshold`]),
    /// without forming the index: `floor(z 2^shift) >= t` is `z 2^shift >= t` for a whole `t`
    /// (the product by a power of two is exact, an overflow to +inf included), and a
    /// probability's shifted bits are compared as integers, with no conversion.
    pub fn reaches(&self, input: Input, v: Expr, t: Expr) -> Expr {
        match input {
            Input::Logits(_) => (v * self.scale.clone()).ge(t),
            Input::Probs => self.bits_index(v).ge(t),
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

/// Whether a column whose element is `x` (as [`read`]) and whose Philox word is `word` may
/// reach `best`, at most the exact [`philox_score`] of a column already raced (that score, or
/// a lower bound on it: a [`screen`]'s or a [`score_floor`]; or -inf), in the race that keeps
/// the higher score (a tie to the lower column): false only where its score is certainly below
/// `best`, so a column ruled out could not have won and skips its noise's logs; bound to `name`
/// and returned. `rcp_t` is `1/T` (from logits).
///
/// From logits, [`reaches`] (`can_win`) of `za = x (1/T)` with the word's [`noise_bound`], whose
/// doc comments carry the proof (the score there is `x / T + Gumbel`, as here); `x` above -inf,
/// as a raced column's is (its weight is above 0); for another the answer may be either.
///
/// From probabilities the score is `fl(p / E)`, `E` the IR's `-log u`. `t = 1 - u` is exact
/// (`uniform(!w)`, as in [`noise_bound`]) and `-ln u >= t`; the log is within about one ulp, so
/// `E >= t (1 - 2^-22)`, and the division is within 2.5 ulp (Vulkan; CUDA rounds), so the score
/// is at most `(p / t)(1 + 2^-20)` (plus 2^-149 where it is subnormal). The column is ruled out
/// where `fl(p (1 + 2^-16)) < fl(best t)` and `fl(best t)` is normal and finite: the two
/// products round by 2^-24 relative (or 2^-150 absolute, at most `best t 2^-24` here), so
/// `p / t < best (1 - 2^-16 + 2^-22)`, and the score is below `best (1 - 2^-17)`, strictly
/// under `best` (`best` is at least `best t`, normal).
pub(super) fn may_win(b: &mut Block, input: Input, x: Expr, rcp_t: Expr, word: Expr, best: Expr, name: &str) -> Expr {
    let may = match input {
        Input::Logits(_) => reaches(x * rcp_t, noise_bound(word), best),
        Input::Probs => {
            let t = call(philox::UNIFORM, vec![word ^ u(u32::MAX)]);
            let edge = b.let_(&format!("{name}_edge"), Ty::F32, best * t);
            let sure = edge.clone().ge(f(f32::MIN_POSITIVE)).and(edge.clone().lt(f(f32::INFINITY)));
            sure.and((x * f(1.0 + 1.0 / 65_536.0)).lt(edge)).not()
        }
    };
    b.let_(name, Ty::Bool, may)
}

/// A lower bound on the exact [`philox_score`] of a raced column whose element is `x` (with
/// weight) and whose Philox word is `word`, with no log (-inf where none is claimed): what sets
/// a race's floor before any column is screened. `rcp_t` is `1/T` (from logits).
///
/// From logits `za - |za| 2^-20 + noise_floor(word)` for `za = x (1/T)`: the mirror of
/// [`reaches`]' bound (`sv >= za - |za| 2^-21`, the computed noise at least
/// [`race::noise_floor`] plus its slack, and the sums' two roundings inside `|za| 2^-21` and the
/// slack), so the computed bound is at most the exact score.
///
/// From probabilities the score is `fl(p / E)`, `E` the IR's `-log u`, at most
/// `(t/u)(1 + 2^-22)` (`-ln u <= t/u`, `t = 1 - u` exact): so the score is at least
/// `p (u/t) (1 - 2^-20.5)`; `u/t` by the fast division (within 2.5 ulp) and the products
/// (2^-24 each) stay inside the factor `1 - 2^-16` taken off. Only where the bound lies in
/// `[2^-100, 2^100)` (normal products, no subnormal rounding, no overflow).
pub(super) fn score_floor(input: Input, x: Expr, rcp_t: Expr, word: Expr) -> Expr {
    match input {
        Input::Logits(_) => {
            let za = x * rcp_t;
            za.clone() - za.abs() * f(race::SCREEN_ZREL) + race::noise_floor(word)
        }
        Input::Probs => {
            let un = call(philox::UNIFORM, vec![word]);
            let v = x * approx_div(un.clone(), f(1.0) - un) * f(1.0 - 1.0 / 65_536.0);
            select(screenable(v.clone()), v, f(f32::NEG_INFINITY))
        }
    }
}

/// Bounds `(lo, up)` on the exact [`philox_score`] of a raced column whose element is `x` (a
/// value with weight, as a raced column's is) and whose Philox word is `word`, from two fast logs
/// (the race's screen): `lo` at most the score and `up` at least it, or -inf and +inf where the
/// screen cannot bound it. `rcp_t` is `1/T` (from logits).
///
/// From logits, [`race::screen`] of `za = x (1/T)`, whose doc comments carry the proof.
///
/// From probabilities the score is `s = fl(p / E)`, `E` the IR's `-log u` (within 2^-22 of
/// `-ln u`); the screen is `a = p / E~` by the target's fast division (2.5 ulp on Vulkan, 2 on
/// CUDA, so within 2^-21.6), `E~` [`race::screened_exponential`] (within 2^-15 of `-ln u`). So `s`
/// and `a` are within `2^-15 + 2^-20` of each other, relative, and the bounds `a (1 -+ 2^-12)`
/// (each product rounding by 2^-24 of itself) leave a margin of seven. Where `a` lies outside
/// `[2^-100, 2^100)` (a subnormal `p` among them) the relative bounds are not claimed.
pub(super) fn screen(b: &mut Block, input: Input, x: Expr, rcp_t: Expr, word: Expr) -> (Expr, Expr) {
    let (lo, up, in_range) = match input {
        Input::Logits(_) => {
            let (a, d, in_range) = race::screen(b, x * rcp_t, word);
            (a.clone() - d.clone(), a + d, in_range)
        }
        Input::Probs => {
            let e = race::screened_exponential(b, word);
            let a = b.let_("pa", Ty::F32, approx_div(x, e));
            let in_range = screenable(a.clone());
            (a.clone() * f(1.0 - SCREEN_REL), a * f(1.0 + SCREEN_REL), in_range)
        }
    };
    let in_range = b.let_("screened", Ty::Bool, in_range);
    (select(in_range.clone(), lo, f(f32::NEG_INFINITY)), select(in_range, up, f(f32::INFINITY)))
}

/// [`screen`]'s relative bound from probabilities, 2^-12.
const SCREEN_REL: f32 = 1.0 / 4096.0;
/// The least screened score from probabilities that [`screen`] bounds, 2^-100.
const SCREEN_LEAST: f32 = 7.888_609e-31;

/// Whether a bound or screen `v` from probabilities lies in `[2^-100, 2^100)`, where
/// [`score_floor`] and [`screen`] claim their relative bounds (normal products, no subnormal
/// rounding, no overflow).
fn screenable(v: Expr) -> Expr {
    v.clone().ge(f(SCREEN_LEAST)).and(v.lt(f(1.0 / SCREEN_LEAST)))
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
