//! The end of a split row: each part writes its record (`abi.rs`, [`PART_WORDS`] words), and
//! once all have, one workgroup reads every part's record and writes the row's token,
//! log-probability and status, exactly as one workgroup reading the whole row would have. It
//! reads no logits: the record carries the winner's scaled value, which is all the
//! log-probability needs. On CUDA that workgroup is the part that arrives last, in the same
//! launch; in WGSL, part 0 in a second dispatch (`last_part.rs`, [`Stmt::LastPart`]).
//!
//! The argmax is associative and ties go to the lower index in both steps, so the token is the
//! whole-row kernel's; the log-sum-exp pairs combine as the invocations' do inside a workgroup,
//! so the log-probability agrees with it to a few ulp.
//!
//! The counters (`counters`, one u32 per row slot of the batch, CUDA's) are zeroed once when the
//! host allocates them, and the last part sets its row's back to 0, so no call clears them. The
//! seeded sampler from logits counts its parts in the same way ([`last_part`]), with a record
//! and a merge of its own (`seeded.rs`); it keeps its records in `counters` after the row
//! counters, and its last part clears them, so that buffer stays all zeros between launches.

use super::abi::{part, quads_per_part, write_results, PART_WORDS};
use super::math;
use super::softmax::{logsumexp_pair, online_logsumexp};
use crate::ir::*;

const NONE: u32 = u32::MAX;

/// The record word `k` of part `p` of the current row.
fn word(p: Expr, k: u32) -> Expr {
    load("partials", (var("row_slot") * var("parts") + p) * u(PART_WORDS) + u(k))
}

fn float(p: Expr, k: u32) -> Expr {
    word(p, k).bitcast(Ty::F32)
}

/// [`last_part`] for the argmax family: the last part combines the row (the race from logits,
/// greedy and `sample`, or with `probs` the race from probabilities).
pub(super) fn last_part_combines(b: &mut Block, probs: bool) {
    last_part(b, |b| b.scope(|b| combine_row(b, probs)));
}

/// After this part wrote its record: the row's merge, `combine`, which reads every part's
/// record, runs once the row's parts all have ([`Stmt::LastPart`], counted on the row's word of
/// `counters`; each target lowers it, `last_part.rs`). The one arrival protocol of the kernels
/// that split a row (the argmax family, `sample`, the seeded sampler from logits, the one-read
/// path's parts). `combine` runs in uniform control flow, so it may hold barriers.
pub(super) fn last_part(b: &mut Block, combine: impl FnOnce(&mut Block)) {
    last_part_on(b, "counters", var("row_slot"), combine)
}

/// [`last_part`] with the row's counter at `at` of the atomic buffer `buf` (the merge that does
/// the top-p cut keeps it in the row's state in its scratch: it binds no `counters`).
pub(super) fn last_part_on(b: &mut Block, buf: &str, at: Expr, combine: impl FnOnce(&mut Block)) {
    b.last_part(buf, at, combine);
}

/// The row's results from its parts' records.
fn combine_row(b: &mut Block, probs: bool) {
    for (name, ty, init) in [
        ("best", Ty::F32, f(f32::NEG_INFINITY)),
        ("top", Ty::F32, f(f32::NEG_INFINITY)),
        ("m", Ty::F32, f(f32::NEG_INFINITY)),
        ("s", Ty::F32, f(0.0)),
    ] {
        b.let_(name, ty, init);
    }
    b.let_("best_i", Ty::U32, u(NONE));
    b.let_("top_i", Ty::U32, u(NONE));
    b.let_("top_n", Ty::U32, u(0));
    // Each invocation takes parts in increasing order, so a strict `>` keeps the lower index on
    // a tie, as the whole-row race does.
    let first = builtin(Builtin::LocalId);
    b.for_("p", first, var("parts"), builtin(Builtin::BlockSize), |b, p| {
        let (v, i) = (b.let_("pv", Ty::F32, float(p.clone(), part::BEST)), word(p.clone(), part::BEST_I));
        let i = b.let_("pi", Ty::U32, i);
        b.if_(i.clone().ne_(u(NONE)).and(v.clone().gt(var("best")).or(var("best_i").eq_(u(NONE)))), |b| {
            b.set("best", v);
            b.set("best_i", i);
        });
        let tv = b.let_("ptv", Ty::F32, float(p.clone(), part::TOP));
        let ti = b.let_("pti", Ty::U32, word(p.clone(), part::TOP_I));
        b.if_(ti.clone().ne_(u(NONE)).and(tv.clone().gt(var("top")).or(var("top_i").eq_(u(NONE)))), |b| {
            b.set("top", tv);
            b.set("top_i", ti);
        });
        b.set("top_n", var("top_n") + word(p.clone(), part::TOP_N));
        // The parts' log-sum-exp pairs, merged as the online sums are.
        let pm = b.let_("pm", Ty::F32, float(p.clone(), part::M));
        let ps = b.let_("ps", Ty::F32, float(p, part::S));
        online_logsumexp(b, pm, ps);
    });
    let (win, tok) = b.argmax(var("best"), var("best_i"), "win", "tok");
    let tops = b.reduce(ReduceOp::Sum, Ty::U32, var("top_n"), "tops");
    b.if_(tops.clone().gt(u(0)), |b| {
        let (_, top_tok) = b.argmax(var("top"), var("top_i"), "top_win", "top_tok");
        b.set("tok", top_tok);
    });
    // The winner's part, from the split's arithmetic; its record holds the scaled value. No
    // winner (nothing valid): no record to read, and WGSL's select evaluates both sides, so the
    // index stays in range.
    let none = tok.clone().eq_(u(NONE));
    let winner = select(none.clone(), u(0), (tok.clone() >> u(2)) / quads_per_part(var("parts")));
    let z = b.let_("z", Ty::F32, select(none.clone(), f(f32::NEG_INFINITY), float(winner, part::BEST_Z)));
    b.if_(none, |b| b.set("tok", u(0)));
    if probs {
        let valid = b.let_("valid", Ty::Bool, win.gt(f(0.0)));
        write_results(b, tok, valid, |_| {
            select(z.clone().gt(f(0.0)), call(math::LOG, vec![z.clone()]), f(f32::NEG_INFINITY))
        });
    } else {
        let valid = b.let_("valid", Ty::Bool, tops.clone().gt(u(0)).or(win.gt(f(f32::NEG_INFINITY))));
        write_results(b, tok, valid, |b| {
            let (mx, total) = logsumexp_pair(b);
            let finite = z.clone() - mx - call(math::LOG, vec![total]);
            select(tops.clone().gt(u(0)), -call(math::LOG, vec![tops.clone().cast(Ty::F32)]), finite)
        });
    }
}
