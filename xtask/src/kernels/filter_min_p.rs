//! Min-p alone on the one-read path (`filter_top_k.rs`): where the parts' candidates cannot
//! hold its set, a part races it on chip instead of selecting, so a flat row (min-p 0.05 keeps
//! every token) is decided in its one read, not by the top-p cut's second.
//!
//! A part knows its own maximum `m`, not the row's `mx >= m`. Every token min-p keeps lies in
//! the part's band, the values at or above [`band_floor`] of `m`, since a token's weight at
//! `mx` is at most its weight at `m`. Where over [`RACE_FROM`] of the part's keys lie in its
//! band (by the select's bins, [`select::count_nearer`]), the part races the band's
//! tokens on the plain race's noise ([`race_part`]) and writes its winner in place of its
//! candidates (`RACED`), and the row's last part sends the row to the merge with `GO` 2
//! ([`any_raced`]). The merge knows `mx`: a raced part's winner is the winner of its tokens
//! min-p keeps where min-p keeps the winner (it races a superset of them), and the part has
//! none where min-p does not keep its maximum. A part whose winner min-p does not keep though
//! it keeps some of its tokens (a Zipf row's part whose maximum lies a little below the row's:
//! its band reaches far below the row's threshold) is read once more by the merge and raced
//! exactly. The merge races the listed parts' kept candidates and the raced parts' kept
//! winners ([`over_parts`]): the plain race's token inside the set, as the filter kernel's.
//!
//! A numpy simulation of the rule (parts of 4096, Zipf rows of exponent 1.1 and flat rows):
//! no part of a Zipf row races at T 0.6 to 1.0 with min-p 0.01 to 0.1 (their bands hold at most
//! 600 keys), and every part of a flat row does, its winner kept; at T 1.5 and min-p 0.01 about
//! one part a row races, and half the rows read it again.

use super::abi::{part_columns, quads_per_part, row_is_ranked, row_is_seeded, PhiloxKey, NONE};
use super::filter_top_k::{finish_race, keep_lower, own_word, race_one, race_philox, record, slot_word, Read};
use super::filter_top_k::{row_estimate, CAP, SCRATCH};
use super::filter_top_k::{HEAD_WORDS, KEYS};
use super::filter_values as values;
use super::filters::{declare_best, declare_best32, key_value, order_key, Input};
use super::math::{self, is_finite};
use super::select;
use crate::ir::*;

/// Word 2 of a part's record (the count of its candidates) where the part raced instead.
const RACED: u32 = u32::MAX;
/// A raced part's winner, in its record's area: the score (f32 bits), the column and its key.
const WIN_SCORE: u32 = HEAD_WORDS;
const WIN_COL: u32 = HEAD_WORDS + 1;
const WIN_KEY: u32 = HEAD_WORDS + 2;
/// A part races where over this many of its keys lie in its band: a flat part's 4096, none
/// of a Zipf row's (at most 600 in the simulation of the module's doc), whose candidates hold
/// its set wherever its maximum lies near the row's, and whose band reaches far below the
/// row's threshold where it does not (a winner there would be read again).
const RACE_FROM: u32 = 2048;

/// Whether min-p keeps a token of weight `w` (its probability over the row's largest): one with
/// mass, at least `mp`.
pub(super) fn keeps(w: Expr) -> Expr {
    w.clone().gt(f(0.0)).and(w.ge(var("mp")))
}

/// A row of min-p alone that its parts may race: one that does not hash (the race is the
/// Philox one; a seeded row keeps its candidates).
pub(super) fn row_races() -> Expr {
    var("min_p_cut").and(row_is_seeded().not())
}

/// The lowest value a token min-p keeps can have in a part whose largest is the finite `m`
/// (the part's band starts there): a token below weighs under `min_p` at any row maximum at
/// least `m`.
///
/// From logits `m + ln(min_p) - (2^-10 + |m| 2^-20)`: the kept test is `exp(fl(z - mx)) >=
/// min_p` with the IR's `exp` (about one ulp); `fl(z - mx) <= fl(z - m)`, which rounds by at
/// most `104 2^-24` where the weight is not 0, the IR's `ln` is within `104 2^-23`, and the
/// band's three roundings within `(|m| + 104) 2^-23`; the margin covers them all with room, so
/// a token below the band has `fl(z - mx) < ln(min_p) - 2^-12` and weighs under `min_p`.
/// From probabilities `min_p m (1 - 2^-20)`, where it is normal (else no part races): below
/// it, `p / m < min_p (1 - 2^-21)`, which rounds below `min_p`, and `p / mx <= p / m`.
fn band_floor(input: Input, m: Expr) -> Expr {
    match input {
        Input::Logits(_) => {
            let margin = f(1.0 / 1024.0) + m.clone().abs() * f(1.0 / 1_048_576.0);
            m + call(math::LOG, vec![var("mp")]) - margin
        }
        Input::Probs => var("mp") * m * f(1.0 - 1.0 / 1_048_576.0),
    }
}

/// After a part's sum counted its keys into the select's bins below `top` (the key of its
/// largest, `m`): whether the part races its band ([`RACE_FROM`]), into `mr_races`, with the
/// band's lowest key in `mr_band`, where its row may (`raceable`, [`row_races`]). The same on
/// every invocation.
pub(super) fn races(b: &mut Block, input: Input, (raceable, m, top): (Expr, Expr, Expr), scratch: &str) -> Expr {
    b.let_("mr_races", Ty::Bool, boolean(false));
    b.let_("mr_band", Ty::U32, u(0));
    b.if_(raceable.and(is_finite(m.clone())), |b| {
        let floor = b.let_("mr_floor_v", Ty::F32, band_floor(input, m));
        let usable = match input {
            Input::Logits(_) => is_finite(floor.clone()),
            Input::Probs => floor.clone().ge(f(f32::MIN_POSITIVE)),
        };
        b.set("mr_band", order_key(floor));
        let near = select::count_nearer(b, scratch, top - var("mr_band"));
        b.set("mr_races", usable.and(near.gt(u(RACE_FROM))));
    });
    var("mr_races")
}

/// A part's race over its band (after [`races`]): its keys in workgroup memory, a quad (a
/// Philox block) an invocation a step, each key in the band tested against the best so far by
/// its word's noise bound (`values::may_win`) before it is scored, as the top-p cut races; the
/// workgroup's best is shared as a floor after the first column and the first quad (a flat
/// part races every key: the cut's simulation, `docs/cut_scored.py`, has warps score 11% of
/// them so). Then its record: its largest `m`, its sum `s`, [`RACED`], nothing left out, and
/// its winner.
pub(super) fn race_part(b: &mut Block, input: Input, n: Expr, (m, s): (Expr, Expr)) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    // The head first, so that neither `m` nor `s` is live in the loop.
    b.if_(lid.clone().eq_(u(0)), |b| {
        for (k, w) in [m.bitcast(Ty::U32), s.bitcast(Ty::U32), u(RACED), u(0), u(0)].into_iter().enumerate() {
            b.store(SCRATCH, own_word(u(k as u32)), w);
        }
    });
    declare_best32(b, "");
    let pkey = PhiloxKey::bound(b);
    b.let_("mr_floor", Ty::F32, f(f32::NEG_INFINITY));
    b.let_("mr_in", Ty::U32, u(0));
    // Column `j` of quad `q`'s key (0 past the part).
    let key = |q: &Expr, j: u32| {
        let i = q.clone() * u(4) + u(j);
        select(i.clone().lt(n.clone()), load_shared(KEYS, i.min(n.clone() - u(1))), u(0))
    };
    // Which of the quad's keys lie in the band (bit `j`); the keys are read again where scored.
    let keys = |b: &mut Block, q: &Expr| {
        b.set("mr_in", u(0));
        for j in 0..4u32 {
            b.if_(key(q, j).ge(var("mr_band")), |b| b.set("mr_in", var("mr_in") | u(1 << j)));
        }
    };
    // Columns `js` of the quad, against the best so far or the floor.
    let columns = |b: &mut Block, q: &Expr, js: std::ops::Range<u32>| {
        for j in js {
            let word = b.let_(&format!("mr_w{j}"), Ty::U32, var("mr_w4").comp(j as u8));
            b.scope(|b| {
                let v = b.let_("mr_v", Ty::F32, key_value(key(q, j)));
                let best = var("best").max(var("mr_floor"));
                let may = values::may_win(b, input, v.clone(), f(1.0), word.clone(), best, "mr_may");
                b.if_(may.and((var("mr_in") & u(1 << j)).ne_(u(0))), |b| {
                    let score = b.let_("score", Ty::F32, values::philox_score(input, v, word));
                    keep_lower(b, "", score, var("col_lo") + q.clone() * u(4) + u(j));
                });
            });
        }
    };
    let block = |q: &Expr| pkey.block(var("col_lo") + q.clone() * u(4));
    let quads = b.let_("mr_quads", Ty::U32, (n.clone() + u(3)) >> u(2));
    // The first quad apart, so that the floor's reductions are outside any branch.
    let q = b.let_("mr_q0", Ty::U32, lid.clone());
    keys(b, &q);
    b.let_("mr_w4", Ty::U32x4, u32x4(u(0), u(0), u(0), u(0)));
    let raced = || var("mr_in").ne_(u(0));
    b.if_(raced(), |b| {
        b.set("mr_w4", block(&q));
        columns(b, &q, 0..1);
    });
    let floor = b.reduce(ReduceOp::Max, Ty::F32, var("best"), "mr_first");
    b.set("mr_floor", floor);
    b.if_(raced(), |b| columns(b, &q, 1..4));
    let floor = b.reduce(ReduceOp::Max, Ty::F32, var("best"), "mr_step");
    b.set("mr_floor", floor);
    b.for_("mr_q", lid.clone() + bs, quads, builtin(Builtin::BlockSize), |b, q| {
        keys(b, &q);
        b.if_(raced(), |b| {
            b.set("mr_w4", block(&q));
            columns(b, &q, 0..4);
        });
    });
    let (win, tok) = b.argmax(var("best"), var("best_i"), "mr_win", "mr_tok");
    b.if_(lid.eq_(u(0)), |b| {
        let key =
            select(tok.clone().eq_(u(NONE)), u(0), load_shared(KEYS, (tok.clone() - var("col_lo")).min(n - u(1))));
        b.store(SCRATCH, own_word(u(WIN_SCORE)), win.bitcast(Ty::U32));
        b.store(SCRATCH, own_word(u(WIN_COL)), tok);
        b.store(SCRATCH, own_word(u(WIN_KEY)), key);
    });
}

/// Whether some part of the row in slot `row_slot`, whose maximum is `mx`, left out a token
/// min-p keeps (the largest key a part left out, its record's words 3 and 4, weighs at least
/// `min_p`; a raced part leaves none out): then the union of the parts' lists does not hold the
/// row's min-p set. Uniform.
pub(super) fn left_out_kept(b: &mut Block, input: Input, (row_slot, mx): (Expr, Expr), read: Read) -> Expr {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    b.let_("mo_left", Ty::U32, u(0));
    b.for_("p", lid, var("parts"), bs, |b, p| {
        let word = |k: u32| read(SCRATCH, slot_word(row_slot.clone(), p.clone(), u(k)));
        let left = b.let_("mo_lk", Ty::U32, word(3).max(word(4)));
        let kept = keeps(values::weight(input, key_value(left.clone()), mx.clone()));
        b.if_(left.ne_(u(0)).and(kept), |b| b.set("mo_left", u(1)));
    });
    b.reduce(ReduceOp::Max, Ty::U32, var("mo_left"), "mo_uncovered").ne_(u(0))
}

/// Whether any part of the row raced its band, by the row's last part
/// (`filter_top_p::min_p_state`). Uniform.
pub(super) fn any_raced(b: &mut Block) -> Expr {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    b.let_("mr_any", Ty::U32, u(0));
    b.for_("p", lid, var("parts"), bs, |b, p| {
        let raced = load(SCRATCH, slot_word(var("row_slot"), p, u(2))).eq_(u(RACED));
        b.if_(raced, |b| b.set("mr_any", u(1)));
    });
    b.reduce(ReduceOp::Max, Ty::U32, var("mr_any"), "mr_any_part").ne_(u(0))
}

/// Part `p`'s columns read again and raced where min-p keeps them at the row's maximum `mx`, a
/// column at a time, into the workgroup's race under the row's Philox key (a rare path: a raced
/// part whose winner min-p does not keep, though it keeps some of its tokens).
fn rerace(b: &mut Block, input: Input, (p, mx): (Expr, Expr), pkey: &PhiloxKey) {
    let (own_lo, own_hi) = (var("col_lo"), var("col_hi"));
    let (lo, hi) = part_columns(p, quads_per_part(var("parts")));
    b.set("col_lo", lo);
    b.set("col_hi", hi);
    let n = var("col_hi") - var("col_lo");
    values::for_each_read(b, input, (n, None), 4, |b, i, _, x| {
        let v = b.let_("rr_v", Ty::F32, values::value(input, x));
        b.if_(keeps(values::weight(input, v.clone(), mx.clone())), |b| {
            let col = b.let_("rr_col", Ty::U32, var("col_lo") + i);
            race_philox(b, input, "", pkey, col, v);
        });
    });
    b.set("col_lo", own_lo);
    b.set("col_hi", own_hi);
}

/// The merge of a row its parts raced (its state's `GO` word at `filter_top_p::GO_RACED`): the
/// row's maximum and estimated mass, and the race over the parts ([`over_parts`]).
pub(super) fn merge(b: &mut Block, input: Input) {
    let (mx, finite, mass) = row_estimate(b, input);
    b.if_(finite, |b| over_parts(b, input, mx, mass));
}

/// Min-p alone whose set is longer than the row's `CAP + 1` largest (min-p 0.01 at T 1.5 on Zipf
/// rows keeps about 1,000 tokens; a flat row, every token), where the merge could not decide
/// it from them: each part listed its own `CAP + 1` largest or raced its band, so the union of
/// the lists and the raced parts' winners holds the set's winner wherever no part left out a
/// token min-p keeps (the largest key a part left out weighs under `min_p`), and the race runs
/// over the union's kept tokens and the kept winners, unranked, so a row that hashes ranks is
/// not taken. Elsewhere nothing: the merge runs the filter kernel's body.
pub(super) fn over_parts(b: &mut Block, input: Input, mx: Expr, mass: Expr) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    let kept = |z: Expr| keeps(values::weight(input, z, mx.clone()));
    let covered = left_out_kept(b, input, (var("slot"), mx.clone()), load_settled).not().and(row_is_ranked().not());
    b.if_(covered, |b| {
        declare_best(b);
        let seeded = b.let_("mo_seeded", Ty::Bool, row_is_seeded());
        let key = PhiloxKey::bound(b);
        let want = u(CAP + 1);
        b.for_("i", lid.clone(), var("parts") * want.clone(), bs.clone(), |b, i| {
            let p = b.let_("mo_p", Ty::U32, i.clone() / want.clone());
            let at = b.let_("mo_s", Ty::U32, i - p.clone() * want.clone());
            let listed = load_settled(SCRATCH, record(p.clone(), u(2)));
            b.if_(at.clone().lt(listed.clone()).and(listed.ne_(u(RACED))), |b| {
                let word = record(p, u(HEAD_WORDS) + at * u(2));
                let z = b.let_("mo_z", Ty::F32, key_value(load_settled(SCRATCH, word.clone())));
                b.if_(kept(z.clone()), |b| {
                    let col = b.let_("mo_col", Ty::U32, load_settled(SCRATCH, word + u(1)));
                    let ov = values::order_value(input, z.clone(), mx.clone());
                    race_one(b, input, "", (seeded.clone(), &key), col, z, ov);
                });
            });
        });
        // The raced parts' winners min-p keeps: the same score as `race_one`'s from the same
        // noise. A raced part whose winner it does not keep, though it keeps the part's largest,
        // is read again (one read more, said in the pass count).
        b.for_("p", lid, var("parts"), bs, |b, p| {
            let word = |k: u32| load_settled(SCRATCH, record(p.clone(), u(k)));
            b.if_(word(2).eq_(u(RACED)).and(kept(key_value(word(WIN_KEY)))), |b| {
                keep_lower(b, "", word(WIN_SCORE).bitcast(Ty::F32), word(WIN_COL))
            });
        });
        b.let_("mo_again", Ty::Bool, boolean(false));
        // Every invocation walks every part: a part read again is read by the workgroup.
        b.for_("mo_p", u(0), var("parts"), u(1), |b, p| {
            let word = |k: u32| load_settled(SCRATCH, record(p.clone(), u(k)));
            let holds = kept(word(0).bitcast(Ty::F32));
            b.if_(word(2).eq_(u(RACED)).and(holds).and(kept(key_value(word(WIN_KEY))).not()), |b| {
                b.set("mo_again", boolean(true));
                b.scope(|b| rerace(b, input, (p.clone(), mx.clone()), &key));
            });
        });
        b.if_(var("mo_again"), |b| b.set("reads_before", var("reads_before") + u(1)));
        finish_race(b, input, (seeded, &|t| t), mx.clone(), mass, var("reads_before"));
        b.set("one_read_done", boolean(true));
    });
}
