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
//! The key list holds [`LIST_CAP`] tokens. A longer set is ranked a chunk at a time, from the
//! largest keys down ([`race_long`]): each chunk is the keys of a range that holds at most
//! [`LIST_CAP`] of the set's tokens, found by histograms of the keys' bytes from the top, each a
//! read of the row; the chunk is listed, sorted and raced on its ranks after the chunks before
//! it. A single key with more tokens than the list needs no list: its ranks follow one another,
//! all with one log-probability. The one-read path ranks its candidates itself
//! (`filter_top_k.rs`); the top-p cut and the split kernels never take these rows.

use super::abi::{row_is_ranked, NONE};
use super::filter_top_k::{keep_lower, keep_lower_and};
use super::filter_values as values;
use super::filters::{declare_best64, element, key_value, sweep, sweep_set, Input, LIST, LIST_CAP};
use super::seeded::score64;
use crate::ir::*;

/// The atomic workgroup counter the kept tokens take their list places from.
pub(super) const COUNT: &str = "rank_count";
/// The long race's atomic workgroup array: a histogram of [`DIGITS`] counts of a key byte, then
/// the words invocation 0 publishes from it ([`LOW`] and after).
pub(super) const BINS: &str = "rank_bins";
/// The bins of a histogram: one byte of a key.
const DIGITS: u32 = 256;
/// Words of [`BINS`] after the histogram: the lowest bin of the chunk (or [`DIGITS`]: none), the
/// chunk's tokens, the bin past the chunk and its tokens; at the end the winner's key and the
/// rank of its key's first token.
const LOW: u32 = DIGITS;
const TAKEN: u32 = DIGITS + 1;
const NEXT: u32 = DIGITS + 2;
const NEXT_COUNT: u32 = DIGITS + 3;
pub(super) const BINS_WORDS: u32 = DIGITS + 4;
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
}

/// The race on ranks of a row that hashes them (after the select, `set_bounds` declared): see
/// the module. For any other row nothing runs, a row without a filter (`filtered`, which
/// `sample_filtered` gives this kernel too) among them: SGLang hashes its ids.
pub(super) fn race(b: &mut Block, input: Input) -> Ranked {
    let done = b.let_("rank_done", Ty::Bool, boolean(false));
    let col = b.let_("rank_col", Ty::U32, u(NONE));
    b.if_(row_is_ranked().and(var("filtered")), |b| {
        let n = gather(b, input);
        b.if_else(
            n.clone().le(u(LIST_CAP)),
            |b| {
                sort(b, n.clone());
                let rank = race_ranks(b, input, n.clone());
                let token = token_at(b, input, rank, n.clone());
                b.set("rank_col", token);
            },
            |b| {
                let token = race_long(b, input, n.clone());
                b.set("rank_col", token);
            },
        );
        b.set("rank_done", boolean(true));
    });
    Ranked { done, col }
}

/// One read of the row: the keys of the tokens in `S` into the list (those past its end only
/// counted); returns how many there are.
fn gather(b: &mut Block, input: Input) -> Expr {
    list_keys(b, input, boolean(true), "rank_n")
}

/// One read of the row: the keys of the tokens in `S` for which `inside` holds (of `key`) into
/// the list, those past its end only counted; returns how many there are, in `out`.
fn list_keys(b: &mut Block, input: Input, inside: Expr, out: &str) -> Expr {
    b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| b.store_shared(COUNT, u(0), u(0)));
    b.barrier();
    sweep_set(
        b,
        input,
        |_, _| {},
        |b, _, _, keep| {
            b.if_(keep.and(inside.clone()), |b| {
                let at = b.atomic_add(COUNT, u(0), u(1), "rank_at");
                b.if_(at.clone().lt(u(LIST_CAP)), |b| b.store_shared(LIST, at, var("key")));
            });
        },
    );
    b.barrier();
    b.uniform(load_shared(COUNT, u(0)), out)
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
    let found = column_of_key(b, input, won, t, var("rk_same_n").gt(u(1)));
    select(rank.lt(u(NONE)).and(found.clone().gt(u(0))), u(NONE) - found, u(NONE))
}

/// `NONE` less the column of the `t`-th token (in index order) of the key `won`, or 0 where there
/// is none; `many` where more than one token may have the key, which takes one more read.
fn column_of_key(b: &mut Block, input: Input, won: Expr, t: Expr, many: Expr) -> Expr {
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
    b.if_(many.clone(), |b| {
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
    let first = many.not();
    each_of_key(b, &|b, col| {
        b.if_(first.clone().or(var("rk_seen").eq_(t.clone())), |b| {
            b.set("rk_found", var("rk_found").max(u(NONE) - col))
        });
        b.set("rk_seen", var("rk_seen") + u(1));
    });
    b.reduce(ReduceOp::Max, Ty::U32, var("rk_found"), "rk_found_all")
}

/// The race on the ranks of a set of `n` tokens, more than the list holds (see the module): its
/// token's column. Each chunk reads the row once for each byte of the keys its range needs (one
/// to four) and once to list its keys; the winner's column takes one or two reads more.
fn race_long(b: &mut Block, input: Input, n: Expr) -> Expr {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    declare_best64(b, "rl");
    b.let_("rl_key", Ty::U32, u(0));
    b.let_("rl_first", Ty::U32, u(0));
    // `sweep_set` adds the row's mass as it reads, which the caller takes from one read.
    let mass = b.let_("rl_mass", Ty::U64, var("all_mass"));
    let (r0, hi) = (b.let_("rl_r0", Ty::U32, u(0)), b.let_("rl_hi", Ty::U32, u(u32::MAX)));
    // Every chunk ranks a token at least, so `n` chunks are enough; most sets take a few.
    b.for_("rl_chunk", u(0), n.clone(), u(1), |b, _| {
        b.if_(r0.clone().ge(n.clone()), |b| b.stmts.push(Stmt::Break));
        let (lo, count, run) = chunk(b, input, hi.clone(), mass.clone());
        b.if_else(
            run,
            |b| {
                // One key: ranks `r0 ..= r0 + count - 1`, one log-probability.
                let v = b.let_("rl_v", Ty::F32, key_value(lo.clone()));
                let lp = b.let_("rl_lp", Ty::F64, values::seeded_log(input, v.clone(), v));
                b.for_("rl_i", lid.clone(), count.clone(), bs.clone(), |b, i| {
                    let r = b.let_("rl_r", Ty::U32, r0.clone() + i);
                    let s = score64(b, lp.clone(), r.clone());
                    keep_lower_and(b, "rl64", s, r, |b| {
                        b.set("rl_key", lo.clone());
                        b.set("rl_first", r0.clone());
                    });
                });
            },
            |b| {
                list_range(b, input, lo.clone(), hi.clone(), mass.clone());
                sort(b, count.clone());
                b.for_("rl_i", lid.clone(), count.clone(), bs.clone(), |b, i| {
                    let k = b.let_("rl_k", Ty::U32, load_shared(LIST, i.clone()));
                    let v = b.let_("rl_v", Ty::F32, key_value(k.clone()));
                    let s = score64(b, values::seeded_log(input, v.clone(), v), r0.clone() + i.clone());
                    keep_lower_and(b, "rl64", s, r0.clone() + i, |b| {
                        let first = first_of(b, k.clone(), count.clone());
                        b.set("rl_key", k);
                        b.set("rl_first", r0.clone() + first);
                    });
                });
                b.barrier();
            },
        );
        b.set("rl_r0", r0.clone() + count);
        b.set("rl_hi", lo);
    });
    let (_, rank) = b.argmax_of(Ty::F64, var("bestrl64"), var("bestrl64_i"), "rl_win", "rl_rank");
    // The winning invocation publishes its key and the rank of the key's first token.
    b.if_(var("bestrl64_i").eq_(rank.clone()), |b| {
        b.store_shared(BINS, u(LOW), var("rl_key"));
        b.store_shared(BINS, u(TAKEN), var("rl_first"));
    });
    b.barrier();
    let won = b.uniform(load_shared(BINS, u(LOW)), "rl_won");
    let first = b.uniform(load_shared(BINS, u(TAKEN)), "rl_won_first");
    let found = column_of_key(b, input, won, rank - first, boolean(true));
    select(found.clone().gt(u(0)), u(NONE) - found, u(NONE))
}

/// The first place of `key` in the sorted list's `n` keys (largest first): a binary search.
fn first_of(b: &mut Block, key: Expr, n: Expr) -> Expr {
    let (lo, hi) = (b.let_("fo_lo", Ty::U32, u(0)), b.let_("fo_hi", Ty::U32, n));
    b.for_("fo_step", u(0), u(LOG_CAP + 1), u(1), |b, _| {
        b.if_(lo.clone().lt(hi.clone()), |b| {
            let mid = b.let_("fo_mid", Ty::U32, (lo.clone() + hi.clone()) >> u(1));
            b.if_else(
                load_shared(LIST, mid.clone()).gt(key.clone()),
                |b| b.set("fo_lo", mid.clone() + u(1)),
                |b| b.set("fo_hi", mid.clone()),
            );
        });
    });
    lo
}

/// The next chunk of the set below the key `hi` (exclusive): `(lo, count, run)`, its lowest key,
/// its tokens and whether it is one key of more tokens than the list holds. One histogram of a
/// key byte a level, from the top: the bins from the top that fit the list together are the
/// chunk; where the top bin alone does not fit, its next byte is counted (a fourth byte's bin is
/// one key, a run). Uniform over the workgroup.
fn chunk(b: &mut Block, input: Input, hi: Expr, mass: Expr) -> (Expr, Expr, Expr) {
    let lid = builtin(Builtin::LocalId);
    let base = b.let_("ch_base", Ty::U32, u(0));
    let found = b.let_("ch_found", Ty::Bool, boolean(false));
    let (lo, count) = (b.let_("ch_lo", Ty::U32, u(0)), b.let_("ch_count", Ty::U32, u(0)));
    let run = b.let_("ch_run", Ty::Bool, boolean(false));
    b.for_("ch_level", u(0), u(4), u(1), |b, level| {
        b.if_(found.clone().not(), |b| {
            let shift = b.let_("ch_shift", Ty::U32, u(24) - level.clone() * u(8));
            b.for_("ch_i", lid.clone(), u(DIGITS), builtin(Builtin::BlockSize), |b, i| b.store_shared(BINS, i, u(0)));
            b.barrier();
            // The keys below `hi` whose bytes above this level's are `base`'s (a shift of 32
            // taken as 0: every key, which the first level counts).
            let above = (shift.clone() + u(8)) & u(31);
            let same = level.clone().eq_(u(0)).or(((var("key") ^ base.clone()) >> above).eq_(u(0)));
            sweep_set(
                b,
                input,
                |_, _| {},
                |b, _, _, keep| {
                    b.if_(keep.and(var("key").lt(hi.clone())).and(same.clone()), |b| {
                        let digit = (var("key") >> shift.clone()) & u(DIGITS - 1);
                        b.atomic_add(BINS, digit, u(1), "ch_old");
                    });
                },
            );
            b.set("all_mass", mass.clone());
            b.barrier();
            b.if_(lid.clone().eq_(u(0)), |b| walk_bins(b));
            b.barrier();
            let low = b.uniform(load_shared(BINS, u(LOW)), "ch_low");
            let taken = b.uniform(load_shared(BINS, u(TAKEN)), "ch_taken");
            let next = b.uniform(load_shared(BINS, u(NEXT)), "ch_next");
            let next_count = b.uniform(load_shared(BINS, u(NEXT_COUNT)), "ch_next_count");
            b.if_else(
                low.clone().lt(u(DIGITS)),
                |b| {
                    b.set("ch_lo", base.clone() | (low << shift.clone()));
                    b.set("ch_count", taken);
                    b.set("ch_found", boolean(true));
                },
                |b| {
                    b.set("ch_base", base.clone() | (next << shift.clone()));
                    b.if_(level.clone().eq_(u(3)), |b| {
                        b.set("ch_lo", base.clone());
                        b.set("ch_count", next_count);
                        b.set("ch_run", boolean(true));
                        b.set("ch_found", boolean(true));
                    });
                },
            );
        });
    });
    (lo, count, run)
}

/// Invocation 0's walk of the histogram from the top bin down: the bins that fit the list
/// together ([`LOW`], the lowest, and [`TAKEN`], their tokens), and the first that does not
/// ([`NEXT`], [`NEXT_COUNT`]).
fn walk_bins(b: &mut Block) {
    let (taken, low) = (b.let_("wb_taken", Ty::U32, u(0)), b.let_("wb_low", Ty::U32, u(DIGITS)));
    let (stop, next) = (b.let_("wb_stop", Ty::Bool, boolean(false)), b.let_("wb_next", Ty::U32, u(0)));
    b.for_("wb_i", u(0), u(DIGITS), u(1), |b, i| {
        let bin = b.let_("wb_bin", Ty::U32, u(DIGITS - 1) - i);
        let c = b.let_("wb_c", Ty::U32, load_shared(BINS, bin.clone()));
        b.if_(stop.clone().not().and(c.clone().gt(u(0))), |b| {
            b.if_else(
                (taken.clone() + c.clone()).le(u(LIST_CAP)),
                |b| {
                    b.set("wb_taken", taken.clone() + c.clone());
                    b.set("wb_low", bin.clone());
                },
                |b| {
                    b.set("wb_stop", boolean(true));
                    b.set("wb_next", bin.clone());
                },
            );
        });
    });
    b.store_shared(BINS, u(LOW), low);
    b.store_shared(BINS, u(TAKEN), taken);
    b.store_shared(BINS, u(NEXT_COUNT), load_shared(BINS, next.clone()));
    b.store_shared(BINS, u(NEXT), next);
}

/// One read of the row: the keys of the set's tokens in `[lo, hi)` into the list.
fn list_range(b: &mut Block, input: Input, lo: Expr, hi: Expr, mass: Expr) {
    let inside = var("key").ge(lo).and(var("key").lt(hi));
    list_keys(b, input, inside, "rl_listed");
    b.set("all_mass", mass);
}
