//! The filter kernels' sampling path with each row split over `parts` workgroups, for batches
//! too small to fill the device (one row of a 151936-token vocabulary holds one
//! multiprocessor for the ten passes of `filters.rs`, while the others idle).
//!
//! The passes need the whole row's counts before the next can start, so each is a launch of
//! its own (a stage; the host launches them in turn, the stage in `flags`): the maximum, the
//! digit passes, the race in the set, and the combine of the parts' winners. A part keeps its
//! state from one stage to the next in its own slot of the scratch buffer (`partials`), and
//! publishes what the row's other parts read at the next stage (its maximum, its count and mass
//! per digit, its winners) in one of two areas, alternating, so a stage never writes what its
//! other parts are still reading. Every part sums the same words in the same order, so all of
//! them take the same step; the set, the token and the pass count are those of the one-workgroup
//! kernel. Ties at the boundary are ranked as there, by index: the last digit pass's counts give
//! the tokens of the boundary key in earlier parts, and one more read counts them per
//! invocation (11 passes with top-k or top-p, 19 with both top-k first, 2 with min-p alone).
//!
//! A row's stages, by its parameters: 0 the maximum; 1 to `digits` the digit passes (see
//! `filters::digit_schedule`); `digits + 1` the race; `digits + 2` the combine (its first
//! part). Launches past a row's last stage leave it alone.

use super::abi::{for_each_row_part_at, kernel, partials_buffer, Dtype, STAGE_BITS, STAGE_SHIFT};
use super::filters::{
    count_ties, decide, declare_best, declare_select, digit_counts, digit_names, digit_pass, digit_schedule, functions,
    keep_best, listed_row, part_max, race_in_set, sample_buffers, set_bounds, set_results, takes_row, Build, Input,
    DIGITS, DIGIT_PASSES, SELECT_PASSES,
};
use crate::ir::*;

/// The launches one call takes: the maximum, two selects' digit passes, the race, the combine.
pub const STAGES: u32 = 1 + 2 * DIGIT_PASSES + 2;
/// Scratch words per (row, part) slot: the state, then the two areas.
pub const SLOT_WORDS: u32 = AREA + 2 * AREA_WORDS;
const SCRATCH: &str = "partials";
const NONE: u32 = u32::MAX;

/// A part's state from one stage to the next (u64 values take two words, low first).
const STATE: [(&str, Ty, u32); 10] = [
    ("sweeps", Ty::U32, 0),
    ("mx", Ty::F32, 1),
    ("sel_key", Ty::U32, 2),
    ("sel_mask", Ty::U32, 3),
    ("sel_n", Ty::U32, 4),
    ("sel_tn", Ty::U32, 5),
    ("sel_m", Ty::U64, 6),
    ("sel_tm", Ty::U64, 8),
    ("lim", Ty::U64, 10),
    ("row_mass", Ty::U64, 12),
];
const AREA: u32 = 14;
const AREA_WORDS: u32 = 48;
/// What a part publishes: after the maximum stage its maximum; after a digit pass its count
/// and mass per digit; after the race its winners and the mass it weighed.
mod area {
    pub const MAX: u32 = 0;
    pub const CNT: u32 = 0;
    pub const MAS: u32 = 16;
    pub const BEST: u32 = 0;
    pub const BEST_I: u32 = 1;
    pub const BEST64: u32 = 2;
    pub const BEST64_I: u32 = 4;
    pub const MASS: u32 = 5;
}

/// Word `k` of this part's own slot.
fn own(k: u32) -> Expr {
    var("slot") * u(SLOT_WORDS) + u(k)
}

/// Word `k` of what part `p` of this row published at stage `st`.
fn published(p: Expr, st: Expr, k: Expr) -> Expr {
    (var("slot0") + p) * u(SLOT_WORDS) + u(AREA) + (st & u(1)) * u(AREA_WORDS) + k
}

pub(super) fn load64(index: Expr) -> Expr {
    let word = |k: u32| load(SCRATCH, index.clone() + u(k)).cast(Ty::U64);
    (word(1) << u(32)) | word(0)
}

pub(super) fn store64(b: &mut Block, index: Expr, v: Expr) {
    b.store(SCRATCH, index.clone(), (v.clone() & Expr::Lit(Lit::U64(0xffff_ffff))).cast(Ty::U32));
    b.store(SCRATCH, index + u(1), (v >> u(32)).cast(Ty::U32));
}

/// The state: from the slot, or fresh at stage 0 (see `filters::declare_select`).
fn load_state(b: &mut Block) {
    declare_select(b);
    b.let_("sweeps", Ty::U32, u(0));
    b.let_("mx", Ty::F32, f(f32::NEG_INFINITY));
    b.if_(var("stage").gt(u(0)), |b| {
        for (name, ty, k) in STATE {
            let v = match ty {
                Ty::U64 => load64(own(k)),
                Ty::F32 => load(SCRATCH, own(k)).bitcast(Ty::F32),
                _ => load(SCRATCH, own(k)),
            };
            b.set(name, v);
        }
    });
}

fn store_state(b: &mut Block) {
    b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| {
        for (name, ty, k) in STATE {
            match ty {
                Ty::U64 => store64(b, own(k), var(name)),
                Ty::F32 => b.store(SCRATCH, own(k), var(name).bitcast(Ty::U32)),
                _ => b.store(SCRATCH, own(k), var(name)),
            }
        }
    });
}

/// The invocations take the row's parts in turn: `body` gets each part.
fn each_part(b: &mut Block, below: Expr, body: impl FnOnce(&mut Block, Expr)) {
    b.for_("pp_i", builtin(Builtin::LocalId), below, builtin(Builtin::BlockSize), body);
}

/// What the invocation 0 of this part publishes at this stage.
fn publish(b: &mut Block, body: impl FnOnce(&mut Block, &dyn Fn(u32) -> Expr)) {
    b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| body(b, &|k| published(var("part"), var("stage"), u(k))));
}

/// One stage of one part of a row.
fn stage(b: &mut Block, input: Input) {
    let (stage, prev) = (var("stage"), var("stage") - u(1));
    let set = var("digits") + u(1);
    b.if_else(
        stage.clone().eq_(u(0)),
        |b| {
            let m = part_max(b, input);
            publish(b, |b, at| b.store(SCRATCH, at(area::MAX), m.bitcast(Ty::U32)));
        },
        |b| {
            // What the previous stage published: the row's maximum, or its digit counts.
            b.if_(prev.clone().eq_(u(0)), |b| {
                b.let_("m", Ty::F32, f(f32::NEG_INFINITY));
                each_part(b, var("parts"), |b, p| {
                    let v = load(SCRATCH, published(p, u(0), u(area::MAX))).bitcast(Ty::F32);
                    b.set("m", var("m").max(v));
                });
                let mx = b.reduce(ReduceOp::Max, Ty::F32, var("m"), "row_max");
                b.set("mx", mx);
            });
            b.if_(prev.clone().gt(u(0)).and(prev.clone().lt(set.clone())), |b| {
                digit_pass(b, prev.clone());
                let (cnt, mas) = (digit_names("cnt_p"), digit_names("mas_p"));
                for d in 0..DIGITS as usize {
                    b.let_(&cnt[d], Ty::U32, u(0));
                    b.let_(&mas[d], Ty::U64, Expr::Lit(Lit::U64(0)));
                }
                each_part(b, var("parts"), |b, p| {
                    for d in 0..DIGITS {
                        let at = |k: u32| published(p.clone(), prev.clone(), u(k));
                        b.set(&cnt[d as usize], var(&cnt[d as usize]) + load(SCRATCH, at(area::CNT + d)));
                        b.set(&mas[d as usize], var(&mas[d as usize]) + load64(at(area::MAS + 2 * d)));
                    }
                });
                b.sum_many(Ty::U32, cnt.iter().map(|n| var(n)).collect(), &digit_names("cnt_s"));
                b.sum_many(Ty::U64, mas.iter().map(|n| var(n)).collect(), &digit_names("mas_s"));
                decide(b, false);
            });
            b.if_else(
                stage.clone().lt(set.clone()),
                |b| {
                    digit_pass(b, stage.clone());
                    digit_counts(b, input, boolean(false), false);
                    publish(b, |b, at| {
                        for d in 0..DIGITS {
                            b.store(SCRATCH, at(area::CNT + d), var(&format!("cnt_s{d}")));
                            store64(b, at(area::MAS + 2 * d), var(&format!("mas_s{d}")));
                        }
                    });
                },
                |b| b.if_else(stage.clone().eq_(set.clone()), |b| race(b, input), |b| combine(b, input)),
            );
        },
    );
}

/// The race stage: the set's bounds, the ranks of its tied tokens, then this part's race.
fn race(b: &mut Block, input: Input) {
    set_bounds(b);
    b.if_(var("searched"), |b| {
        // Tokens of the boundary key in earlier parts: their last digit pass's count of it.
        let digits = var("stage") - u(1);
        let digit = var("s_key") & u(DIGITS - 1);
        b.let_("c", Ty::U32, u(0));
        each_part(b, var("part"), |b, p| {
            b.set("c", var("c") + load(SCRATCH, published(p, digits.clone(), u(area::CNT) + digit.clone())));
        });
        let earlier = b.reduce(ReduceOp::Sum, Ty::U32, var("c"), "ties_parts");
        // And in this part, before each invocation's chunk: one read that counts them.
        b.let_("mine", Ty::U32, u(0));
        count_ties(b, input);
        let before = b.scan(var("mine"), "ties_before");
        b.set("tie_start", earlier + before);
    });
    race_in_set(b, input, boolean(false), Build::Full);
    let (win, tok) = b.argmax(var("best"), var("best_i"), "win", "tok32");
    let (win64, tok64) = b.argmax_of(Ty::F64, var("best64"), var("best64_i"), "win64", "tok64");
    let mass = b.reduce(ReduceOp::Sum, Ty::U64, var("all_mass"), "part_mass");
    publish(b, |b, at| {
        b.store(SCRATCH, at(area::BEST), win.bitcast(Ty::U32));
        b.store(SCRATCH, at(area::BEST_I), tok);
        store64(b, at(area::BEST64), win64.bitcast(Ty::U64));
        b.store(SCRATCH, at(area::BEST64_I), tok64);
        store64(b, at(area::MASS), mass);
    });
}

/// The combine stage, by the row's first part: the parts' winners (each invocation takes parts
/// in increasing order and a strict `>` keeps the lower index on a tie, as one workgroup's race
/// does), then the row's results.
fn combine(b: &mut Block, input: Input) {
    b.if_(var("part").eq_(u(0)), |b| {
        declare_best(b);
        b.let_("all_mass", Ty::U64, Expr::Lit(Lit::U64(0)));
        let prev = var("stage") - u(1);
        each_part(b, var("parts"), |b, p| {
            let at = |k: u32| published(p.clone(), prev.clone(), u(k));
            let i = b.let_("pi", Ty::U32, load(SCRATCH, at(area::BEST_I)));
            b.if_(i.clone().ne_(u(NONE)), |b| keep_best(b, "", load(SCRATCH, at(area::BEST)).bitcast(Ty::F32), i));
            let i64 = b.let_("pi64", Ty::U32, load(SCRATCH, at(area::BEST64_I)));
            b.if_(i64.clone().ne_(u(NONE)), |b| keep_best(b, "64", load64(at(area::BEST64)).bitcast(Ty::F64), i64));
            b.set("all_mass", var("all_mass") + load64(at(area::MASS)));
        });
        let (_, tok32) = b.argmax(var("best"), var("best_i"), "win", "tok32");
        let (_, tok64) = b.argmax_of(Ty::F64, var("best64"), var("best64_i"), "win64", "tok64");
        let summed = b.reduce(ReduceOp::Sum, Ty::U64, var("all_mass"), "summed_mass");
        set_results(b, input, tok32, tok64, summed);
    });
}

fn split_kernel(input: Input) -> Kernel {
    let mut b = Block::new();
    b.let_("stage", Ty::U32, (param("flags") >> u(STAGE_SHIFT)) & u(STAGE_BITS));
    for_each_row_part_at(&mut b, listed_row, |b| {
        let takes = takes_row(b);
        digit_schedule(b);
        let last = var("digits") + u(2);
        // Every branch depends on the row and the stage only: uniform in the workgroup.
        b.if_(takes.and(var("stage").le(last)), |b| {
            b.let_("slot0", Ty::U32, var("slot") - var("part"));
            load_state(b);
            stage(b, input);
            store_state(b);
        });
    });
    let mut buffers = sample_buffers(input);
    buffers.push(partials_buffer());
    let name = format!("filter_split_{}", input.suffix());
    let doc = "top-k, top-p and min-p sampling with each row split over workgroups: one launch per stage";
    // One read more than the one-workgroup kernel: the count that ranks each part's ties.
    // One read more than the whole row's (the ties); rows that hash ranks are never split.
    let mut k = kernel(name, doc, SELECT_PASSES + 1, buffers, functions(true), b);
    k.stages = STAGES;
    k
}

/// Every kernel of this family.
pub fn all() -> Vec<Kernel> {
    let mut out: Vec<Kernel> = Dtype::ALL.iter().map(|&d| split_kernel(Input::Logits(d))).collect();
    out.push(split_kernel(Input::Probs));
    out
}
