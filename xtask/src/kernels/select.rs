//! The workgroup's select of the `want` largest of `n` keys (a part's columns, the parts'
//! candidates, the lowest columns of a tie): one pass over the keys bins them by their distance
//! below a key known to be the largest, a second lists the keys of the bin where the `want`-th
//! lies, and the list is ranked by counting, on chip. Where the top-k boundary lies, that bin
//! holds a few keys (a numpy run on Zipf, flat and peaked parts of 4096: a median of 3 to 20 at
//! `want` 21 and 51, docs/filters-design.md), so the select costs two passes over the keys,
//! where the 4-bit radix select it replaces ([`radix_select`], now the fallback) took eight,
//! each with a block-wide sum of 16 counters.
//!
//! The bins are logarithmic in the distance `d = top - key`, an integer: `d` itself below 32,
//! then its highest bit and the four after it (a sixteenth of an octave), so they are fine near
//! the top whatever the keys' scale: logits of spread 1e-3 and of 30 alike. A bin below 32
//! holds one key value: a flat part (every key equal) is decided by the first pass. A bin too
//! full to list (over [`LIST_CAP`] keys of several values) takes the radix select over all
//! keys.

use crate::ir::*;

/// Bins of the distance `d`: `d` itself below 32, then 16 a power of two (`d`'s highest bit
/// and the four bits after it), 464 in all.
const BINS: u32 = 32 + 27 * 16;
/// Distances below this have a bin each.
const EXACT: u32 = 32;
/// Words of the scratch array a select takes: the bins, whose place the list takes once a bin
/// is chosen, then the control words.
pub const WORDS: u32 = 512;
/// Control words: the chosen bin plus one (0: no key), the keys above it, in it, the keys in
/// all bins, and the list's length.
const CHOSEN: u32 = WORDS - 5;
const ABOVE: u32 = WORDS - 4;
const AT: u32 = WORDS - 3;
const TOTAL: u32 = WORDS - 2;
const LISTED: u32 = WORDS - 1;
/// The most keys the list holds.
pub const LIST_CAP: u32 = CHOSEN;
const _: () = assert!(BINS <= LIST_CAP);
/// The passes of the fallback [`radix_select`]: 4-bit digits of a 32-bit key.
pub const RADIX_PASSES: u32 = 8;

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
    b.if_(key.clone().ne_(u(0)), |b| {
        let bin = bin_of(b, top - key);
        b.atomic_add(scratch, bin, u(1), "t_old");
    });
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
    b.for_("ti", builtin(Builtin::LocalId), items.n.clone(), builtin(Builtin::BlockSize), |b, i| {
        let key = (items.key_at)(b, i);
        count(b, items.scratch, top.clone(), key);
    });
    decide(b, Items { top, ..items }, want);
}

/// [`select_top`] after each item's [`count`]: the bin where the `want`-th lies, then its keys
/// listed and ranked, or its one distance, or the radix select where it holds too many.
pub(super) fn decide(b: &mut Block, items: Items, want: Expr) {
    let Items { n, top, scratch, key_at } = items;
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    for name in ["t_key", "t_above", "t_at"] {
        b.let_(name, Ty::U32, u(0));
    }
    b.barrier();
    choose_bin(b, want.clone(), scratch);
    let (chosen, above, at) = (var("t_chosen"), var("t_bin_above"), var("t_bin_at"));
    b.if_(chosen.clone().ne_(u(0)), |b| {
        let bin = b.let_("t_bin", Ty::U32, chosen - u(1));
        b.set("t_above", above.clone());
        b.set("t_at", at.clone());
        // The bin's distances: `lo` and the `width - 1` after it.
        let e = b.let_("t_be", Ty::U32, ((bin.clone() + u(5 * 16 - EXACT)) / u(16)).max(u(5)));
        let exact = bin.clone().lt(u(EXACT));
        let lo = select(exact.clone(), bin.clone(), (u(16) + (bin.clone() & u(15))) << (e.clone() - u(4)));
        let lo = b.let_("t_lo_d", Ty::U32, lo);
        let width = b.let_("t_width", Ty::U32, select(exact.clone(), u(1), u(1) << (e - u(4))));
        b.if_else(
            exact,
            |b| b.set("t_key", top.clone() - lo.clone()),
            |b| {
                b.if_else(
                    at.le(u(LIST_CAP)),
                    |b| {
                        b.for_("ti", lid.clone(), n.clone(), bs.clone(), |b, i| {
                            let key = key_at(b, i);
                            let k = b.let_("tk", Ty::U32, key);
                            let listed =
                                k.clone().ne_(u(0)).and((top.clone() - k.clone() - lo.clone()).lt(width.clone()));
                            b.if_(listed, |b| {
                                let at = b.atomic_add(scratch, u(LISTED), u(1), "t_slot");
                                b.store_shared(scratch, at, k);
                            });
                        });
                        b.barrier();
                        rank_listed(b, want.clone().min(var("t_total")) - above.clone(), scratch);
                    },
                    |b| {
                        b.set("t_above", u(0));
                        b.set("t_at", u(0));
                        radix_select(b, n.clone(), want.clone(), key_at);
                    },
                )
            },
        );
    });
    b.barrier();
    b.let_("t_take", Ty::U32, var("t_at").min(want - var("t_above")));
}

/// After the binning pass: declares `t_total` (the items), `t_chosen` (the bin holding the
/// `want`-th item, or the last item where there are fewer, plus one; 0 for no item),
/// `t_bin_above` and `t_bin_at` (items in the bins before it and in it). Each invocation sums a
/// run of bins, a block scan places the runs, and the invocation whose run holds the item
/// writes the bin.
fn choose_bin(b: &mut Block, want: Expr, scratch: &str) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    // A run of `per` bins from `lo` (a count the compiler knows where the block size is a
    // constant, so it unrolls both walks), past the last bin empty.
    let per = b.let_("t_per", Ty::U32, (u(BINS) + bs.clone() - u(1)) / bs.clone());
    let lo = b.let_("t_lo", Ty::U32, lid.clone() * per.clone());
    let bin = |j: Expr| {
        select((lo.clone() + j.clone()).lt(u(BINS)), load_shared(scratch, (lo.clone() + j).min(u(BINS - 1))), u(0))
    };
    b.let_("t_run", Ty::U32, u(0));
    b.for_("tj", u(0), per.clone(), u(1), |b, j| b.set("t_run", var("t_run") + bin(j)));
    let start = b.scan(var("t_run"), "t_start");
    b.if_(lid.eq_(bs - u(1)), |b| b.store_shared(scratch, u(TOTAL), start.clone() + var("t_run")));
    b.barrier();
    let total = b.let_("t_total", Ty::U32, load_shared(scratch, u(TOTAL)));
    let want = b.let_("t_want", Ty::U32, want.min(total));
    b.set("t_run", start);
    b.for_("tj", u(0), per, u(1), |b, j| {
        let c = b.let_("t_c", Ty::U32, bin(j.clone()));
        let j = lo.clone() + j;
        let holds = var("t_run").lt(want.clone()).and((var("t_run") + c.clone()).ge(want.clone()));
        b.if_(holds, |b| {
            b.store_shared(scratch, u(CHOSEN), j + u(1));
            b.store_shared(scratch, u(ABOVE), var("t_run"));
            b.store_shared(scratch, u(AT), c.clone());
        });
        b.set("t_run", var("t_run") + c);
    });
    b.barrier();
    b.let_("t_chosen", Ty::U32, load_shared(scratch, u(CHOSEN)));
    b.let_("t_bin_above", Ty::U32, load_shared(scratch, u(ABOVE)));
    b.let_("t_bin_at", Ty::U32, load_shared(scratch, u(AT)));
    // The list overwrites the bins: every invocation has read them.
    b.barrier();
}

/// The chosen bin's keys, listed in `scratch` (as many as `t_bin_at`): the `need`-th largest
/// (from 1) by counting, for each listed key, the keys above it and equal to it. Sets `t_key`,
/// `t_above` (adding the keys above it in the list) and `t_at`.
fn rank_listed(b: &mut Block, need: Expr, scratch: &str) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    let n = var("t_bin_at");
    let need = b.let_("t_need", Ty::U32, need);
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
        // Every key equal to the boundary writes the same words.
        b.if_(holds, |b| {
            b.store_shared(scratch, u(CHOSEN), ki.clone());
            b.store_shared(scratch, u(ABOVE), var("t_gt"));
            b.store_shared(scratch, u(AT), var("t_eq"));
        });
    });
    b.barrier();
    b.set("t_key", load_shared(scratch, u(CHOSEN)));
    b.set("t_above", var("t_above") + load_shared(scratch, u(ABOVE)));
    b.set("t_at", load_shared(scratch, u(AT)));
}

/// The fallback: a radix select of 4-bit digits over all items, each pass counting per digit
/// the items matching the prefix so far, with `t_key`, `t_above` and `t_at` declared 0.
fn radix_select(b: &mut Block, n: Expr, want: Expr, key_at: &dyn Fn(&mut Block, Expr) -> Expr) {
    b.let_("t_mask", Ty::U32, u(0));
    b.for_("t_pass", u(0), u(RADIX_PASSES), u(1), |b, ps| {
        let shift = b.let_("t_shift", Ty::U32, u(28) - ps * u(4));
        b.let_bins("t_cnt", Ty::U32, 16);
        b.for_("ti", builtin(Builtin::LocalId), n.clone(), builtin(Builtin::BlockSize), |b, i| {
            let key = key_at(b, i);
            let k = b.let_("tk", Ty::U32, key);
            let matches = k.clone().ne_(u(0)).and((k.clone() & var("t_mask")).eq_(var("t_key")));
            b.if_(matches, |b| b.add_to_bin("t_cnt", (k >> shift.clone()) & u(15), u(1)));
        });
        let names: Vec<String> = (0..16).map(|d| format!("t_cs{d}")).collect();
        b.sum_many(Ty::U32, (0..16).map(|d| bin_value("t_cnt", d)).collect(), &names);
        // From the highest digit down: the digit holding the `want`-th item (or the lowest
        // non-empty one when there are fewer).
        let nb = b.let_("t_nb", Ty::U32, var("t_above"));
        let chosen = b.let_("t_digit", Ty::U32, u(u32::MAX));
        b.let_("t_cn", Ty::U32, var("t_above"));
        for d in (0..16).rev() {
            let cs = var(&names[d as usize]);
            b.if_(cs.clone().gt(u(0)), |b| {
                b.if_(nb.clone().lt(want.clone()), |b| {
                    b.set("t_digit", u(d));
                    b.set("t_cn", nb.clone());
                });
                b.set("t_nb", nb.clone() + cs);
            });
        }
        b.if_(chosen.clone().ne_(u(u32::MAX)), |b| {
            b.set("t_key", var("t_key") | (chosen.clone() << shift.clone()));
            b.set("t_above", var("t_cn"));
            let at = (0..16u32).fold(u(0), |e, d| select(chosen.clone().eq_(u(d)), var(&names[d as usize]), e));
            b.set("t_at", at);
        });
        b.set("t_mask", var("t_mask") | (u(15) << shift));
    });
}
