//! Philox4x32-10 (Salmon et al., SC'11) in the IR, and the map from its words to noise.
//!
//! Keying (documented for users in `src/philox.rs`): key = (seed lo, seed hi); counter =
//! (column / 4, stream, offset lo, offset hi); column `c` takes word `c % 4`. Stream 0 is the race
//! noise. So a row's noise is a function of its request's (seed, offset) alone, never of its row.

use super::abi::{buffer, for_each_column, for_each_item, for_each_row, kernel, philox_block};
use super::math;
use crate::ir::*;

pub const PHILOX: &str = "sk_philox";
pub const UNIFORM: &str = "sk_uniform";
pub const EXPONENTIAL: &str = "sk_exponential";
pub const GUMBEL: &str = "sk_gumbel";

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Ten rounds of Philox4x32 on `ctr` under key (`k0`, `k1`), fully unrolled.
pub fn philox() -> Function {
    function(PHILOX, &[("ctr", Ty::U32x4), ("k0", Ty::U32), ("k1", Ty::U32)], Ty::U32x4, |b| {
        for (n, name) in STATE.iter().enumerate() {
            b.let_(name, Ty::U32, var("ctr").comp(n as u8));
        }
        for round in 0..10 {
            if round > 0 {
                b.set("k0", var("k0") + u(W0));
                b.set("k1", var("k1") + u(W1));
            }
            b.scope(|b| philox_round(b, &STATE, var("k0"), var("k1")));
        }
        b.ret(state(&STATE));
    })
}

const STATE: [&str; 4] = ["c0", "c1", "c2", "c3"];

fn state(names: &[&str; 4]) -> Expr {
    u32x4(var(names[0]), var(names[1]), var(names[2]), var(names[3]))
}

/// One Philox4x32 round on the state words `names` under the round's key (`k0`, `k1`).
fn philox_round(b: &mut Block, names: &[&str; 4], k0: Expr, k1: Expr) {
    let [c0, c1, c2, c3] = names.map(var);
    let hi0 = b.let_("hi0", Ty::U32, mulhi(u(M0), c0.clone()));
    let lo0 = b.let_("lo0", Ty::U32, u(M0) * c0);
    let hi1 = b.let_("hi1", Ty::U32, mulhi(u(M1), c2.clone()));
    let lo1 = b.let_("lo1", Ty::U32, u(M1) * c2);
    b.set(names[0], hi1 ^ c1 ^ k0);
    b.set(names[2], hi0 ^ c3 ^ k1);
    b.set(names[1], lo1);
    b.set(names[3], lo0);
}

/// Words in a row's Philox table ([`row_table`]).
pub const TABLE_WORDS: u32 = 20;

/// What a row's Philox blocks share, for [`block_from_table`]. A row's counters are
/// `(q, 0, offset lo, offset hi)` ([`block_for`]): only `q` varies, so most of the first two
/// rounds is the same for every block of the row. The table holds, under key (`k0`, `k1`) =
/// the seed and with `W0`, `W1` the key's increments:
/// - `A = off_hi ^ k1`, `B = lo(M1 off_lo) ^ (k0 + W0)`, `C = hi(M0 P) ^ (k1 + W1)` and
///   `D = lo(M0 P)`, where `P = hi(M1 off_lo) ^ k0` is the first round's `c0`;
/// - the keys of rounds 2 to 9, `k0 + r W0` and `k1 + r W1`, in pairs.
///
/// So a block costs two multiplies and three xors for its first two rounds instead of four
/// multiplies, four xors and the key's additions, and no key addition after.
pub fn row_table(seed_lo: Expr, seed_hi: Expr, off_lo: Expr, off_hi: Expr) -> Vec<Expr> {
    let p = mulhi(u(M1), off_lo.clone()) ^ seed_lo.clone();
    let mut table = vec![
        off_hi ^ seed_hi.clone(),
        (u(M1) * off_lo) ^ (seed_lo.clone() + u(W0)),
        mulhi(u(M0), p.clone()) ^ (seed_hi.clone() + u(W1)),
        u(M0) * p,
    ];
    for r in 2..10u32 {
        table.push(seed_lo.clone() + u(W0.wrapping_mul(r)));
        table.push(seed_hi.clone() + u(W1.wrapping_mul(r)));
    }
    table
}

pub const PHILOX_TABLE: &str = "sk_philox_table";

/// The Philox block of counter `(q, 0, off lo, off hi)` from its row's table ([`row_table`],
/// words `t0` to `t19`): the same block as [`block_for`] gives.
pub fn philox_from_table() -> Function {
    let names: Vec<String> = (0..TABLE_WORDS).map(|k| format!("t{k}")).collect();
    let mut params = vec![("q", Ty::U32)];
    params.extend(names.iter().map(|n| (n.as_str(), Ty::U32)));
    let t = |k: u32| var(&names[k as usize]);
    function(PHILOX_TABLE, &params, Ty::U32x4, |b| {
        // Round 0: c0 = P and c1 = lo(M1 off_lo) are the row's; c2 = hi(M0 q) ^ A, c3 = lo(M0 q).
        let lo = b.let_("lo", Ty::U32, u(M0) * var("q"));
        let c2 = b.let_("c2_0", Ty::U32, mulhi(u(M0), var("q")) ^ t(0));
        // Round 1: c0 = hi(M1 c2) ^ B, c1 = lo(M1 c2), c2 = lo(M0 q) ^ C, c3 = D.
        b.let_(STATE[0], Ty::U32, mulhi(u(M1), c2.clone()) ^ t(1));
        b.let_(STATE[1], Ty::U32, u(M1) * c2);
        b.let_(STATE[2], Ty::U32, lo ^ t(2));
        b.let_(STATE[3], Ty::U32, t(3));
        for r in 0..8 {
            b.scope(|b| philox_round(b, &STATE, t(4 + 2 * r), t(5 + 2 * r)));
        }
        b.ret(state(&STATE));
    })
}

/// [`philox_from_table`] at `q`, with the table's word `k` read by `word(k)`.
pub fn block_from_table(q: Expr, word: impl Fn(u32) -> Expr) -> Expr {
    let mut args = vec![q];
    args.extend((0..TABLE_WORDS).map(word));
    call(PHILOX_TABLE, args)
}

/// A word to a uniform in the open interval (0, 1): `(2 (w >> 9) + 1) 2^-24`. Every value is an
/// exact f32, the smallest is 2^-24 and the largest 1 - 2^-24, so neither 0 nor 1 ever occurs.
pub fn uniform() -> Function {
    function(UNIFORM, &[("w", Ty::U32)], Ty::F32, |b| {
        b.ret((var("w") >> u(9)).cast(Ty::F32) * f(1.0 / 8_388_608.0) + f(1.0 / 16_777_216.0));
    })
}

/// Exponential(1) noise `-log(u)`: in [5.96e-8, 16.64], never 0.
pub fn exponential() -> Function {
    function(EXPONENTIAL, &[("w", Ty::U32)], Ty::F32, |b| {
        b.ret(-call(math::LOG, vec![call(UNIFORM, vec![var("w")])]));
    })
}

/// Gumbel(0, 1) noise `-log(-log(u))`: in [-2.81, 16.63], always finite.
pub fn gumbel() -> Function {
    function(GUMBEL, &[("w", Ty::U32)], Ty::F32, |b| {
        b.ret(-call(math::LOG, vec![call(EXPONENTIAL, vec![var("w")])]));
    })
}

/// The helpers the noise needs, in dependency order.
pub fn noise_functions() -> Vec<Function> {
    vec![math::log(), philox(), philox_from_table(), uniform(), exponential(), gumbel()]
}

/// Philox block for the four columns starting at `c0` of a row keyed by its row parameters.
pub fn block_for(c0: Expr, seed_lo: Expr, seed_hi: Expr, off_lo: Expr, off_hi: Expr) -> Expr {
    call(PHILOX, vec![u32x4(c0 >> u(2), u(0), off_lo, off_hi), seed_lo, seed_hi])
}

/// Diagnostic: Philox4x32-10 on `batch` (counter, key) items of six words, four words out each.
/// It lets the tests check Random123's known answers on every backend.
fn philox_kernel() -> Kernel {
    let mut b = Block::new();
    for_each_item(&mut b, |b, item| {
        let word = |k: u32| load("input", item.clone() * u(6) + u(k));
        let ctr = u32x4(word(0), word(1), word(2), word(3));
        let out = b.let_("out", Ty::U32x4, call(PHILOX, vec![ctr, word(4), word(5)]));
        for k in 0..4u8 {
            b.store("output", item.clone() * u(4) + u(k as u32), out.clone().comp(k));
        }
    });
    let buffers = vec![buffer("input", Storage::U32, false), buffer("output", Storage::U32, true)];
    kernel("philox4x32_10".into(), "Philox4x32-10 blocks, for known-answer tests", 0, buffers, vec![philox()], b)
}

/// Diagnostic: the Gumbel noise each row's race adds, written densely (`vocab` per row).
fn noise_kernel() -> Kernel {
    let mut b = Block::new();
    for_each_row(&mut b, |b| {
        b.let_("w", Ty::U32x4, u32x4(u(0), u(0), u(0), u(0)));
        for_each_column(
            b,
            |b, c0| b.set("w", philox_block(c0)),
            |b, col, j| {
                b.store("noise", var("row") * param("vocab") + col, call(GUMBEL, vec![var("w").comp(j)]));
            },
        );
    });
    let buffers = vec![buffer("rows", Storage::U32, false), buffer("noise", Storage::F32, true)];
    kernel(
        "gumbel_noise".into(),
        "the race's Gumbel noise per row and column, for tests",
        0,
        buffers,
        noise_functions(),
        b,
    )
}

/// The diagnostic kernels: Philox's blocks and the Gumbel noise.
pub fn all() -> Vec<Kernel> {
    vec![philox_kernel(), noise_kernel()]
}
