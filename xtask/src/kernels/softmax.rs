//! Softmax with temperature (two reads and a write, rows split over workgroups), and the online
//! log-sum-exp pairs that the races' log-probabilities and the combine of split rows use.

use super::abi::{
    buffer, for_each_column, for_each_column_then, for_each_row_part, kernel, load_quad, logits_input, partials_buffer,
    row_temperature, scaled_quad, Dtype,
};
use super::abi::{STAGE_BITS, STAGE_SHIFT};
use super::math;
use crate::ir::*;

/// Adds `weight * exp(v)` to the online log-sum-exp `(m, s)`, `m` the largest value so far and
/// `s` the sum of `exp(value - m)`: a column's scaled value with weight 1, or in the combine a
/// part's pair `(m, s)`.
pub(super) fn online_logsumexp(b: &mut Block, v: Expr, weight: Expr) {
    b.if_else(
        v.clone().gt(var("m")),
        |b| {
            let rescale = call(math::EXP, vec![var("m") - v.clone()]);
            b.set("s", var("s") * rescale + weight.clone());
            b.set("m", v.clone());
        },
        |b| {
            b.if_(v.clone().gt(f(f32::NEG_INFINITY)), |b| {
                b.set("s", var("s") + weight.clone() * call(math::EXP, vec![v.clone() - var("m")]));
            })
        },
    );
}

/// The block's `(max, sum of exp(sv - max))` from every invocation's online pair `(m, s)`.
pub(super) fn logsumexp_pair(b: &mut Block) -> (Expr, Expr) {
    let mx = b.reduce(ReduceOp::Max, Ty::F32, var("m"), "row_max");
    let mine =
        select(var("m").eq_(f(f32::NEG_INFINITY)), f(0.0), var("s") * call(math::EXP, vec![var("m") - mx.clone()]));
    let total = b.reduce(ReduceOp::Sum, Ty::F32, mine, "row_sum");
    (mx, total)
}

/// The unnormalized softmax weight of `z` in a row whose maximum is `mx`: `exp(z - mx)`, except
/// that when the maximum is +inf every +inf column weighs 1 and every other 0 (the limit of the
/// softmax), and when it is -inf (no valid value) everything weighs 0.
pub(super) fn softmax_weight(z: Expr, mx: Expr) -> Expr {
    let inf = f(f32::INFINITY);
    let finite = select(mx.clone().eq_(f(f32::NEG_INFINITY)), f(0.0), call(math::EXP, vec![z.clone() - mx.clone()]));
    select(mx.eq_(inf.clone()), select(z.eq_(inf), f(1.0), f(0.0)), finite)
}

/// Merges `weight x exp(v)` into this invocation's softmax pair `(m, s)` (the largest value so
/// far and the sum of `exp(value - m)`): `s` is rescaled when the maximum grows. Values at +inf
/// weigh 1 each once the maximum is +inf (the softmax's limit) and -inf weighs nothing, as
/// [`softmax_weight`] says, so no `inf - inf` is ever taken. Returns what is added to `s` after
/// the rescale (the compensated sum's term).
pub(super) fn softmax_merge(b: &mut Block, v: Expr, weight: Expr, rescaled: &[&str]) -> Expr {
    b.if_(v.clone().gt(var("m")), |b| {
        // exp(-inf) = 0: the first value, or a first +inf, starts the sum afresh.
        let r = b.let_("r", Ty::F32, call(math::EXP, vec![var("m") - v.clone()]));
        for name in rescaled {
            b.set(name, var(name) * r.clone());
        }
        b.set("m", v.clone());
    });
    // The exponential on every value, then selected: under a branch (which the compiler makes
    // of a select around a call) the cost model's cheapest path would skip it.
    let ex = b.let_("ex", Ty::F32, call(math::EXP, vec![v.clone() - var("m")]));
    let e = select(v.clone().eq_(var("m")), weight.clone(), weight * ex);
    select(v.eq_(f(f32::NEG_INFINITY)), f(0.0), e)
}

/// One read of the invocation's columns: its running maximum `m` and a compensated (Kahan) sum
/// `s - comp` of `exp(z - m)`, rescaled when the maximum grows (about `ln n` times over `n`
/// columns, each a rounding the compensation does not see). `also` runs for every column with
/// its scaled value `z`, so a kernel that needs more of the row than its softmax pair (the
/// seeded race's screen) still reads it once; `between` as in [`for_each_column_then`].
pub(super) fn softmax_pass(b: &mut Block, also: impl Fn(&mut Block, Expr, Expr), between: Option<&dyn Fn(&mut Block)>) {
    b.let_("m", Ty::F32, f(f32::NEG_INFINITY));
    b.let_("s", Ty::F32, f(0.0));
    b.let_("comp", Ty::F32, f(0.0));
    // The quad's four loads first, in flight together: one round trip a quad, not four.
    for_each_column_then(
        b,
        load_quad,
        |b, col, j| {
            let z = b.let_("z", Ty::F32, scaled_quad(j));
            also(b, col, z.clone());
            let e = softmax_merge(b, z, f(1.0), &["s", "comp"]);
            let y = b.let_("y", Ty::F32, e - var("comp"));
            let t = b.let_("t", Ty::F32, var("s") + y.clone());
            b.set("comp", (t.clone() - var("s")) - y);
            b.set("s", t);
        },
        between,
    );
    b.set("s", var("s") - var("comp"));
}

/// The block's softmax pair `(max, sum)` from every invocation's `(m, s)`.
pub(super) fn softmax_block_pair(b: &mut Block) -> (Expr, Expr) {
    let mx = b.reduce(ReduceOp::Max, Ty::F32, var("m"), "row_max");
    let rescaled =
        select(var("m").eq_(f(f32::NEG_INFINITY)), f(0.0), var("s") * call(math::EXP, vec![var("m") - mx.clone()]));
    let total = b.reduce(ReduceOp::Sum, Ty::F32, select(var("m").eq_(mx.clone()), var("s"), rescaled), "row_sum");
    (mx, total)
}

/// Writes the softmax of this workgroup's columns from the row's `(max, sum)`.
fn softmax_write(b: &mut Block, mx: Expr, total: Expr) {
    // A row with no valid value (all -inf) has weight 0 everywhere and probabilities 0.
    let inv = b.let_("inv", Ty::F32, select(total.clone().gt(f(0.0)), f(1.0) / total, f(0.0)));
    for_each_column(b, load_quad, |b, col, j| {
        let p = softmax_weight(scaled_quad(j), mx.clone()) * inv.clone();
        b.store("probs", var("base") + col, p);
    });
}

/// Softmax of `l / T` per row into `probs` (same stride as the input), in two reads: the
/// maximum and a compensated sum of exponentials together ([`softmax_pass`]), then the
/// normalized write. A row split in `parts` (flags, as the argmax family's) takes two launches:
/// each part writes its pair `(max, sum)` to `partials` (two words at its slot), then each part
/// merges its row's pairs and writes its columns.
fn softmax_kernel(dtype: Dtype) -> Kernel {
    let mut b = Block::new();
    // The launch of a split row, in the staged kernels' flag bits: 0 for the parts' pairs, 1 for
    // their merge and the write.
    b.let_("stage", Ty::U32, (param("flags") >> u(STAGE_SHIFT)) & u(STAGE_BITS));
    for_each_row_part(&mut b, |b| {
        row_temperature(b);
        let pair = |slot: Expr, k: u32| slot * u(2) + u(k);
        b.if_else(
            var("parts").gt(u(1)).and(var("stage").gt(u(0))),
            |b| {
                // The row's parts' pairs, each invocation merging some, then the block's.
                b.let_("m", Ty::F32, f(f32::NEG_INFINITY));
                b.let_("s", Ty::F32, f(0.0));
                let first = var("row_slot") * var("parts");
                b.for_("p", builtin(Builtin::LocalId), var("parts"), builtin(Builtin::BlockSize), |b, p| {
                    let at = first.clone() + p;
                    let pm = b.let_("pm", Ty::F32, load("partials", pair(at.clone(), 0)).bitcast(Ty::F32));
                    let ps = b.let_("ps", Ty::F32, load("partials", pair(at, 1)).bitcast(Ty::F32));
                    let e = softmax_merge(b, pm, ps, &["s"]);
                    b.set("s", var("s") + e);
                });
                let (mx, total) = softmax_block_pair(b);
                softmax_write(b, mx, total);
            },
            |b| {
                softmax_pass(b, |_, _, _| {}, None);
                let (mx, total) = softmax_block_pair(b);
                b.if_else(
                    var("parts").le(u(1)),
                    |b| softmax_write(b, mx.clone(), total.clone()),
                    |b| {
                        b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| {
                            b.store("partials", pair(var("slot"), 0), mx.clone().bitcast(Ty::U32));
                            b.store("partials", pair(var("slot"), 1), total.clone().bitcast(Ty::U32));
                        });
                    },
                );
            },
        );
    });
    let [x, allowed] = logits_input(dtype);
    let buffers =
        vec![x, allowed, buffer("rows", Storage::U32, false), buffer("probs", Storage::F32, true), partials_buffer()];
    let doc = "softmax of l/T per row (greedy rows at T = 1), written with the input's stride";
    let mut k = kernel(format!("softmax_{}", dtype.suffix()), doc, 2, buffers, vec![math::exp()], b);
    k.stages = 2;
    // 34 registers on sm_90 left three blocks of 512 an H200 multiprocessor, so a split batch of
    // 32 rows (four blocks a multiprocessor) ran in two rounds; at 32 there are four and no spill.
    k.occupancy = Occupancy::Full;
    k
}

/// The softmax kernels, per dtype.
pub fn all() -> Vec<Kernel> {
    Dtype::ALL.iter().map(|&d| softmax_kernel(d)).collect()
}
