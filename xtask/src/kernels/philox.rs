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
        for (n, name) in ["c0", "c1", "c2", "c3"].iter().enumerate() {
            b.let_(name, Ty::U32, var("ctr").comp(n as u8));
        }
        for round in 0..10 {
            if round > 0 {
                b.set("k0", var("k0") + u(W0));
                b.set("k1", var("k1") + u(W1));
            }
            b.scope(|b| {
                let hi0 = b.let_("hi0", Ty::U32, mulhi(u(M0), var("c0")));
                let lo0 = b.let_("lo0", Ty::U32, u(M0) * var("c0"));
                let hi1 = b.let_("hi1", Ty::U32, mulhi(u(M1), var("c2")));
                let lo1 = b.let_("lo1", Ty::U32, u(M1) * var("c2"));
                b.set("c0", hi1 ^ var("c1") ^ var("k0"));
                b.set("c2", hi0 ^ var("c3") ^ var("k1"));
                b.set("c1", lo1);
                b.set("c3", lo0);
            });
        }
        b.ret(u32x4(var("c0"), var("c1"), var("c2"), var("c3")));
    })
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
    vec![math::log(), philox(), uniform(), exponential(), gumbel()]
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
