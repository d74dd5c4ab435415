//! SGLang's filtered seeded race (`top_k_top_p_min_p_sampling_from_probs_torch` with a seed),
//! for the seeded rows whose hash word asks for it (`abi::HASH_SORTED_RANK`): SGLang sorts the
//! row, zeroes what the filters drop and runs `multinomial_with_seed` on the sorted tensor, so a
//! kept token's noise is the hash of its rank (probability descending, ties to the lower index),
//! not of its vocabulary id.
//!
//! The one-workgroup filter kernel runs it after its select, in place of the race sweep
//! ([`race`]):
//! 1. one read of the row lists the keys of the kept tokens in workgroup memory (the select's
//!    list, free by then), in any order;
//! 2. a bitonic sort orders them, largest first: a rank's key;
//! 3. each rank scores its key's log-probability plus the noise of the rank's hash; the lowest
//!    of the best ranks wins (SGLang's argmax);
//! 4. the winner is the `t`-th token of its key in index order, `t` its rank less the ranks of
//!    larger keys: one read finds it, and one more before it counts each invocation's tokens of
//!    that key where several share it.
//!
//! The key list holds [`LIST_CAP`] tokens. A longer set is raced on the vocabulary id as the
//! default hashing does, with the status `abi::STATUS_UNRANKED`: a valid token from the set,
//! never a wrong one passed off as SGLang's. The one-read path ranks its candidates itself
//! (`filter_top_k.rs`); the top-p cut and the split kernels never take these rows.

use super::abi::{row_is_ranked, NONE};
use super::filter_top_k::keep_lower;
use super::filter_values as values;
use super::filters::{declare_best64, element, key_value, sweep, sweep_set, Input, LIST, LIST_CAP};
use super::seeded::score64;
use crate::ir::*;

/// The atomic workgroup counter the kept tokens take their list places from.
pub(super) const COUNT: &str = "rank_count";
/// Reads of the row this race takes beyond the race sweep it replaces: the count of the
/// winner's key and the read that finds its token.
pub const READS: u32 = 2;
/// log2 of [`LIST_CAP`]: the most doublings of the sort.
const LOG_CAP: u32 = LIST_CAP.trailing_zeros();
const _: () = assert!(1 << LOG_CAP == LIST_CAP);

/// The outcome of [`race`], uniform over the workgroup.
pub(super) struct Ranked {
    /// The row was raced on its ranks: `col` is its token (`NONE` where its set is empty).
    pub done: Expr,
    pub col: Expr,
    /// The row hashes ranks, but its set is longer than the list: the caller races it on the
    /// vocabulary id.
    pub over: Expr,
}

/// The race on ranks of a row that hashes them (after the select, `set_bounds` declared): see
/// the module. For any other row nothing runs, a row without a filter (`filtered`, which
/// `sample_filtered` gives this kernel too) among them: SGLang hashes its ids.
pub(super) fn race(b: &mut Block, input: Input) -> Ranked {
    let done = b.let_("rank_done", Ty::Bool, boolean(false));
    let over = b.let_("rank_over", Ty::Bool, boolean(false));
    let col = b.let_("rank_col", Ty::U32, u(NONE));
    b.if_(row_is_ranked().and(var("filtered")), |b| {
        let n = gather(b, input);
        b.if_else(
            n.clone().le(u(LIST_CAP)),
            |b| {
                sort(b, n.clone());
                let rank = race_ranks(b, input, n.clone());
                let token = token_at(b, input, rank, n);
                b.set("rank_col", token);
                b.set("rank_done", boolean(true));
            },
            |b| {
                // The race on the vocabulary id sums the row's mass again.
                b.set("rank_over", boolean(true));
                b.set("all_mass", Expr::Lit(Lit::U64(0)));
            },
        );
    });
    Ranked { done, col, over }
}

/// One read of the row: the keys of the tokens in `S` into the list (those past its end only
/// counted); returns how many there are.
fn gather(b: &mut Block, input: Input) -> Expr {
    b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| b.store_shared(COUNT, u(0), u(0)));
    b.barrier();
    sweep_set(
        b,
        input,
        |_, _| {},
        |b, _, _, keep| {
            b.if_(keep, |b| {
                let at = b.atomic_add(COUNT, u(0), u(1), "rank_at");
                b.if_(at.clone().lt(u(LIST_CAP)), |b| b.store_shared(LIST, at, var("key")));
            });
        },
    );
    b.barrier();
    b.uniform(load_shared(COUNT, u(0)), "rank_n")
}

/// Sorts the list's first `n` keys, largest first: a bitonic sort over the next power of two,
/// padded with key 0 (no token: below every key).
fn sort(b: &mut Block, n: Expr) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    let size = b.let_("sort_n", Ty::U32, u(1));
    let log = b.let_("sort_log", Ty::U32, u(0));
    b.for_("doubling", u(0), u(LOG_CAP), u(1), |b, _| {
        b.if_(size.clone().lt(n.clone()), |b| {
            b.set("sort_n", size.clone() * u(2));
            b.set("sort_log", log.clone() + u(1));
        });
    });
    b.for_("pad", n + lid.clone(), size.clone(), bs.clone(), |b, i| b.store_shared(LIST, i, u(0)));
    b.barrier();
    b.for_("stage", u(1), log + u(1), u(1), |b, stage| {
        let block = b.let_("sort_block", Ty::U32, u(1) << stage.clone());
        b.for_("step", u(1), stage + u(1), u(1), |b, step| {
            let half = b.let_("sort_half", Ty::U32, block.clone() >> step);
            b.for_("i", lid.clone(), size.clone(), bs.clone(), |b, i| {
                let other = b.let_("sort_other", Ty::U32, i.clone() ^ half.clone());
                b.if_(other.clone().gt(i.clone()), |b| {
                    let x = b.let_("sort_x", Ty::U32, load_shared(LIST, i.clone()));
                    let y = b.let_("sort_y", Ty::U32, load_shared(LIST, other.clone()));
                    // Blocks with the bit clear sort largest first, the others smallest first, so
                    // each doubling merges two sorted runs into a bitonic one; the last is all
                    // largest first.
                    let down = (i.clone() & block.clone()).eq_(u(0));
                    let swap = select(down, x.clone().lt(y.clone()), x.clone().gt(y.clone()));
                    b.if_(swap, |b| {
                        b.store_shared(LIST, i, y);
                        b.store_shared(LIST, other, x);
                    });
                });
            });
            b.barrier();
        });
    });
}

/// SGLang's float64 race over the sorted list's `n` ranks: each rank's log-probability (up to
/// the row's constant, as the id race takes it) plus the noise of the rank's hash; returns the
/// lowest of the best ranks.
fn race_ranks(b: &mut Block, input: Input, n: Expr) -> Expr {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    declare_best64(b, "rk");
    b.for_("r", lid, n, bs, |b, r| {
        // The list holds order keys: of `z - max` from logits, of `p` from probabilities.
        let v = b.let_("rk_v", Ty::F32, key_value(load_shared(LIST, r.clone())));
        let s = score64(b, values::seeded_log(input, v.clone(), v), r.clone());
        keep_lower(b, "rk64", s, r);
    });
    let (_, rank) = b.argmax_of(Ty::F64, var("bestrk64"), var("bestrk64_i"), "rk_win", "rk_rank");
    rank
}

/// The column of rank `rank` of the sorted list's `n`: the `t`-th token of its key in index
/// order, `t` its rank less the list's larger keys. `NONE` where `rank` is (an empty set).
fn token_at(b: &mut Block, input: Input, rank: Expr, n: Expr) -> Expr {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    let won = b.let_("rk_key", Ty::U32, load_shared(LIST, rank.clone().min(u(LIST_CAP - 1))));
    b.let_("rk_above", Ty::U32, u(0));
    b.let_("rk_same", Ty::U32, u(0));
    b.for_("r", lid, n, bs, |b, r| {
        let k = b.let_("rk_k", Ty::U32, load_shared(LIST, r));
        b.if_(k.clone().gt(won.clone()), |b| b.set("rk_above", var("rk_above") + u(1)));
        b.if_(k.eq_(won.clone()), |b| b.set("rk_same", var("rk_same") + u(1)));
    });
    let outs = ["rk_above_n".to_string(), "rk_same_n".to_string()];
    b.sum_many(Ty::U32, vec![var("rk_above"), var("rk_same")], &outs);
    let t = b.let_("rk_t", Ty::U32, rank.clone() - var("rk_above_n"));
    // The key alone picks out its tokens (no NaN or -inf has a kept key). A read in chunks, in
    // index order.
    let each_of_key = |b: &mut Block, on: &dyn Fn(&mut Block, Expr)| {
        sweep(
            b,
            input,
            boolean(true),
            |_, _| {},
            |b, col, _, x| {
                element(b, input, x);
                b.if_(var("key").eq_(won.clone()), |b| on(b, col));
            },
        )
    };
    b.let_("rk_start", Ty::U32, u(0));
    b.if_(var("rk_same_n").gt(u(1)), |b| {
        b.let_("rk_mine", Ty::U32, u(0));
        each_of_key(b, &|b, _| b.set("rk_mine", var("rk_mine") + u(1)));
        let start = b.scan(var("rk_mine"), "rk_before");
        b.set("rk_start", start);
    });
    // The key's tokens need not all be in `S`: a top-k or top-p cut may fall inside a run of
    // ties, keeping its lowest columns. With one of them listed, `t` is 0 and the token is the
    // key's lowest column anywhere in the row; with more, the scan above numbered them across
    // the workgroup, and one invocation holds the `t`-th. `NONE - col`, so a max over the
    // workgroup finds the lowest match (0: none).
    b.let_("rk_seen", Ty::U32, var("rk_start"));
    b.let_("rk_found", Ty::U32, u(0));
    let first = var("rk_same_n").le(u(1));
    each_of_key(b, &|b, col| {
        b.if_(first.clone().or(var("rk_seen").eq_(t.clone())), |b| {
            b.set("rk_found", var("rk_found").max(u(NONE) - col))
        });
        b.set("rk_seen", var("rk_seen") + u(1));
    });
    let found = b.reduce(ReduceOp::Max, Ty::U32, var("rk_found"), "rk_found_all");
    select(rank.lt(u(NONE)).and(found.clone().gt(u(0))), u(NONE) - found, u(NONE))
}
