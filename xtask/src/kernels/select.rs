//! The workgroup's select of the `want` largest of `n` keys (a part's columns, the parts'
//! candidates, the lowest columns of a tie): one pass over the keys bins them by their distance
//! below a key known to be the largest, a second lists the keys of the bin where the `want`-th
//! lies, and the list is ranked by counting, on chip. Where the top-k boundary lies, that bin
//! holds a few keys (a numpy run on Zipf, flat and peaked parts of 4096: a median of 3 to 20 at
//! `want` 21 and 51, `docs/select_bins.py`), so the select costs two passes over the keys,
//! where the 4-bit radix select it replaced took eight, each with a block-wide sum of 16
//! counters.
//!
//! The bins are logarithmic in the distance `d = top - key`, an integer: `d` itself below 32,
//! then its highest bit and the four after it (a sixteenth of a power of two), so they are fine
//! near the top whatever the keys' scale: logits of spread 1e-3 and of 30 alike. A bin below 32
//! holds one key value: a flat part (every key equal) is decided by the first pass. A bin too
//! full to list (over [`LIST_CAP`] keys of several values) is binned again by the distances
//! within it, at most [`ROUNDS`] rounds in all.

use crate::ir::*;

/// Bins of the distance `d`: `d` itself below 32, then 16 a power of two (`d`'s highest bit
/// and the four bits after it), 464 in all.
const BINS: u32 = 32 + 27 * 16;
/// Distances below this have a bin each.
const EXACT: u32 = 32;
/// Words of the scratch array a select takes: the bins, whose place the list takes once a bin
/// is chosen, then the control words.
pub const WORDS: u32 = 512;
/// The control word: the list's length.
const LISTED: u32 = WORDS - 1;
/// The most keys the list holds.
pub const LIST_CAP: u32 = LISTED;
const _: () = assert!(BINS <= LIST_CAP);
/// Binning rounds at most: each after the first bins the distances of the last round's bin, a
/// sixteenth of its power of two at most: spans of at most 2^27, 2^22, 2^17, 2^12, 2^7 and 4
/// distances after the first six, so the seventh's bins hold one distance each. Seven are
/// reached: two adjacent keys of 2000 copies each, 3,462,479,408 below the part's largest (a
/// search over distances in plain Python).
pub const ROUNDS: u32 = 7;

/// The bin of distance `d`, monotone in `d`.
fn bin_of(b: &mut Block, d: Expr) -> Expr {
    let d = b.let_("t_d", Ty::U32, d);
    // At least 5, so that the shift below is in range where `d` is its own bin.
    let e = b.let_("t_e", Ty::U32, high_bit(d.clone() | u(EXACT)));
    let log = e.clone() * u(16) - u(5 * 16 - EXACT) + ((d.clone() >> (e - u(4))) & u(15));
    select(d.clone().lt(u(EXACT)), d, log)
}

/// Sets the scratch array's words to 0: before the barrier that precedes [`count`].
pub(super) fn clear(b: &mut Block, scratch: &str) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    b.for_("i", lid, u(WORDS), bs, |b, i| b.store_shared(scratch, i, u(0)));
}

/// Counts `key` (0: no item) into its bin of the distance below `top`, a key at least every
/// item's: in each invocation's loop over the items, between [`clear`] and [`decide`].
pub(super) fn count(b: &mut Block, scratch: &str, top: Expr, key: Expr) {
    b.if_(key.clone().ne_(u(0)), |b| count_distance(b, scratch, top - key));
}

/// What a select chooses from: `n` items, `key_at(i)` giving item `i`'s key (0: no item), `top` a
/// key at least every item's, and `scratch`, an atomic workgroup array of [`WORDS`].
pub(super) struct Items<'a> {
    pub n: Expr,
    pub top: Expr,
    pub scratch: &'a str,
    pub key_at: &'a dyn Fn(&mut Block, Expr) -> Expr,
}

/// The `want` largest items by (key descending, position ascending). Declares `t_key` (the
/// boundary key: the smallest taken), `t_above` (items above it), `t_at` (items at it) and
/// `t_take` (how many of those are taken, the lowest positions). With fewer than `want` items,
/// all are taken. Every invocation of the workgroup calls it alike (it has barriers).
pub(super) fn select_top(b: &mut Block, items: Items, want: Expr) {
    let top = b.let_("t_top", Ty::U32, items.top);
    clear(b, items.scratch);
    b.barrier();
    let items = Items { top, ..items };
    within(b, &items, items.top.clone(), None, &|b, _, d| count_distance(b, items.scratch, d));
    decide(b, items, want);
}

/// Each item's key `k` (not 0) whose distance `base - k` is below `span` (every item where it is
/// `None`): `f(k, distance)`, in each invocation's loop over the items.
fn within(b: &mut Block, items: &Items, base: Expr, span: Option<Expr>, f: &dyn Fn(&mut Block, Expr, Expr)) {
    b.for_("ti", builtin(Builtin::LocalId), items.n.clone(), builtin(Builtin::BlockSize), |b, i| {
        let key = (items.key_at)(b, i);
        let k = b.let_("tk", Ty::U32, key);
        b.if_(k.clone().ne_(u(0)), |b| {
            let d = b.let_("t_in", Ty::U32, base.clone() - k.clone());
            match &span {
                Some(span) => b.if_(d.clone().lt(span.clone()), |b| f(b, k, d)),
                None => f(b, k, d),
            }
        });
    });
}

/// After each item's [`count`] and a barrier: how many items lie in the bins wholly nearer `top`
/// than `d` (a lower bound on the items at distance at most `d`, exact where `d` is below 32),
/// the same on every invocation. The bins stay as they are, for a [`decide`] after.
pub(super) fn count_nearer(b: &mut Block, scratch: &str, d: Expr) -> Expr {
    let bin = bin_of(b, d);
    let last = b.let_("t_near_bin", Ty::U32, bin);
    let run = BinRun::new(b, "t_near");
    b.let_("t_near", Ty::U32, u(0));
    b.for_("tj", u(0), run.per.clone(), u(1), |b, j| {
        let count = select(run.at(j.clone()).lt(last.clone()), run.count(scratch, j), u(0));
        b.set("t_near", var("t_near") + count)
    });
    b.reduce(ReduceOp::Sum, Ty::U32, var("t_near"), "t_near_sum")
}

/// An invocation's run of the bins: `per` of them from `lo`, a count the compiler knows where
/// the block size is a constant, so it unrolls each walk over them.
struct BinRun {
    per: Expr,
    lo: Expr,
}

impl BinRun {
    /// This invocation's run, bound as `{name}_per` and `{name}_lo`.
    fn new(b: &mut Block, name: &str) -> BinRun {
        let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
        let per = b.let_(&format!("{name}_per"), Ty::U32, (u(BINS) + bs.clone() - u(1)) / bs);
        let lo = b.let_(&format!("{name}_lo"), Ty::U32, lid * per.clone());
        BinRun { per, lo }
    }

    /// The bin of the run's `j`-th.
    fn at(&self, j: Expr) -> Expr {
        self.lo.clone() + j
    }

    /// The count in the run's `j`-th bin of `scratch`, 0 past the last bin.
    fn count(&self, scratch: &str, j: Expr) -> Expr {
        let at = self.at(j);
        select(at.clone().lt(u(BINS)), load_shared(scratch, at.min(u(BINS - 1))), u(0))
    }
}

/// Adds one to the bin of distance `d`.
fn count_distance(b: &mut Block, scratch: &str, d: Expr) {
    let bin = bin_of(b, d);
    b.atomic_add(scratch, bin, u(1), "t_old");
}

/// [`select_top`] after each item's [`count`]: the bin where the `want`-th lies, then its keys
/// listed and ranked, or its one distance; where it holds too many keys of several values, the
/// keys are binned again by their distance within it, until a bin is listed or holds one value.
pub(super) fn decide(b: &mut Block, items: Items, want: Expr) {
    let (top, scratch) = (items.top.clone(), items.scratch);
    for name in ["t_key", "t_above", "t_at"] {
        b.let_(name, Ty::U32, u(0));
    }
    // The distances in play: `span` of them from `from` (every distance at the first round, whose
    // count the caller made).
    let (from, span) = (b.let_("t_span_from", Ty::U32, u(0)), b.let_("t_span", Ty::U32, u(0)));
    let more = b.let_("t_more", Ty::Bool, boolean(true));
    // Where a round ends on a bin it lists: its distances below `top`, its keys, and the rank
    // sought among them.
    let (list_lo, list_width) = (b.let_("t_list_lo", Ty::U32, u(0)), b.let_("t_list_width", Ty::U32, u(0)));
    let (listed, need) = (b.let_("t_listed", Ty::U32, u(0)), b.let_("t_need", Ty::U32, u(0)));
    b.for_("t_round", u(0), u(ROUNDS), u(1), |b, round| {
        b.if_(more.clone(), |b| {
            b.if_(round.gt(u(0)), |b| {
                clear(b, scratch);
                b.barrier();
                let base = top.clone() - from.clone();
                within(b, &items, base, Some(span.clone()), &|b, _, d| count_distance(b, scratch, d));
            });
            b.barrier();
            choose_bin(b, want.clone(), scratch);
            b.set("t_more", boolean(false));
            b.if_(var("t_chosen").ne_(u(0)), |b| {
                let bin = b.let_("t_bin", Ty::U32, var("t_chosen") - u(1));
                b.set("t_above", var("t_above") + var("t_bin_above"));
                b.set("t_at", var("t_bin_at"));
                // The bin's distances into the span: `lo` and the `width - 1` after it.
                let e = b.let_("t_be", Ty::U32, ((bin.clone() + u(5 * 16 - EXACT)) / u(16)).max(u(5)));
                let exact = bin.clone().lt(u(EXACT));
                let lo = select(exact.clone(), bin.clone(), (u(16) + (bin.clone() & u(15))) << (e.clone() - u(4)));
                let lo = b.let_("t_lo_d", Ty::U32, lo);
                let width = b.let_("t_width", Ty::U32, select(exact.clone(), u(1), u(1) << (e - u(4))));
                b.if_else(
                    exact,
                    |b| b.set("t_key", top.clone() - from.clone() - lo.clone()),
                    |b| {
                        b.if_else(
                            var("t_bin_at").le(u(LIST_CAP)),
                            |b| {
                                b.set("t_list_lo", from.clone() + lo.clone());
                                b.set("t_list_width", width.clone());
                                b.set("t_listed", var("t_bin_at"));
                                b.set("t_need", var("t_want") - var("t_above"));
                            },
                            |b| {
                                b.set("t_span_from", from.clone() + lo.clone());
                                b.set("t_span", width.clone());
                                b.set("t_more", boolean(true));
                            },
                        )
                    },
                );
            });
        });
    });
    // The listing, after the rounds (the cost model counts a key loop inside them as a round's).
    b.if_(need.clone().gt(u(0)), |b| {
        within(b, &items, top.clone() - list_lo.clone(), Some(list_width.clone()), &|b, k, _| {
            let at = b.atomic_add(scratch, u(LISTED), u(1), "t_slot");
            b.store_shared(scratch, at, k);
        });
        b.barrier();
        rank_listed(b, listed, need.clone(), scratch);
    });
    b.barrier();
    b.let_("t_take", Ty::U32, var("t_at").min(want - var("t_above")));
}

/// After a binning round, with `t_above` items above the distances in play: declares `t_total`
/// (the items in play), `t_want` (`want`, or every item where there are fewer), `t_chosen`
/// (the bin holding the `t_want`-th item, plus one; 0 for no item), `t_bin_above` and
/// `t_bin_at` (items in play in the bins before it and in it). Each invocation sums a run of
/// bins, a block scan places the runs, and the invocation whose run holds the item gives the
/// bin to all.
fn choose_bin(b: &mut Block, want: Expr, scratch: &str) {
    let run = BinRun::new(b, "t");
    b.let_("t_run", Ty::U32, u(0));
    b.for_("tj", u(0), run.per.clone(), u(1), |b, j| b.set("t_run", var("t_run") + run.count(scratch, j)));
    let start = b.scan(var("t_run"), "t_start");
    let total = b.reduce(ReduceOp::Sum, Ty::U32, var("t_run"), "t_total");
    let want = b.let_("t_want", Ty::U32, want.min(var("t_above") + total));
    b.set("t_run", var("t_above") + start);
    // One invocation's run holds the bin where the count reaches `want` (none where it is not
    // reached): sums over the workgroup give its words to all, uniform as WGSL's branches
    // around barriers need them.
    let mine = ["t_my_bin", "t_my_above", "t_my_at"];
    for name in mine {
        b.let_(name, Ty::U32, u(0));
    }
    b.for_("tj", u(0), run.per.clone(), u(1), |b, j| {
        let c = b.let_("t_c", Ty::U32, run.count(scratch, j.clone()));
        let j = run.at(j);
        let holds = var("t_run").lt(want.clone()).and((var("t_run") + c.clone()).ge(want.clone()));
        b.if_(holds, |b| {
            b.set("t_my_bin", j + u(1));
            b.set("t_my_above", var("t_run") - var("t_above"));
            b.set("t_my_at", c.clone());
        });
        b.set("t_run", var("t_run") + c);
    });
    let outs = ["t_chosen", "t_bin_above", "t_bin_at"].map(String::from);
    b.sum_many(Ty::U32, mine.map(var).to_vec(), &outs);
    // The list overwrites the bins: every invocation has read them.
    b.barrier();
}

/// The chosen bin's `n` keys, listed in `scratch`: the `need`-th largest
/// (from 1) by counting, for each listed key, the keys above it and equal to it. Sets `t_key`,
/// `t_above` (adding the keys above it in the list) and `t_at`.
fn rank_listed(b: &mut Block, n: Expr, need: Expr, scratch: &str) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    for name in ["t_my_key", "t_my_gt", "t_my_eq"] {
        b.let_(name, Ty::U32, u(0));
    }
    b.for_("ri", lid, n.clone(), bs, |b, i| {
        let ki = b.let_("t_ki", Ty::U32, load_shared(scratch, i));
        b.let_("t_gt", Ty::U32, u(0));
        b.let_("t_eq", Ty::U32, u(0));
        b.for_("rj", u(0), n.clone(), u(1), |b, j| {
            let kj = b.let_("t_kj", Ty::U32, load_shared(scratch, j));
            b.set("t_gt", var("t_gt") + select(kj.clone().gt(ki.clone()), u(1), u(0)));
            b.set("t_eq", var("t_eq") + select(kj.eq_(ki.clone()), u(1), u(0)));
        });
        let holds = var("t_gt").lt(need.clone()).and((var("t_gt") + var("t_eq")).ge(need.clone()));
        // Every key equal to the boundary holds the same words, the others none: maxima over the
        // workgroup give them to all, uniform as WGSL's branches around barriers need them.
        b.if_(holds, |b| {
            b.set("t_my_key", ki.clone());
            b.set("t_my_gt", var("t_gt"));
            b.set("t_my_eq", var("t_eq"));
        });
    });
    let key = b.reduce(ReduceOp::Max, Ty::U32, var("t_my_key"), "t_key_all");
    let gt = b.reduce(ReduceOp::Max, Ty::U32, var("t_my_gt"), "t_gt_all");
    let eq = b.reduce(ReduceOp::Max, Ty::U32, var("t_my_eq"), "t_eq_all");
    b.set("t_key", key);
    b.set("t_above", var("t_above") + gt);
    b.set("t_at", eq);
}
