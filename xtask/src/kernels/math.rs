//! Transcendental functions written in the IR, so that every backend computes the same values.
//!
//! Vulkan allows `log` an absolute error of 2^-21 on [0.5, 2] and `exp` 3 + 2|x| ulp, which is
//! too loose for Gumbel noise (whose largest values come from `log` of uniforms next to 1) and for
//! softmax at 1e-6. These use only + - * / floor and bit operations, which every target rounds
//! the IEEE way, and stay within about one ulp of the true value.

use crate::ir::*;

pub const LOG: &str = "sk_log";
pub const EXP: &str = "sk_exp";
pub const EXP_NONPOSITIVE: &str = "sk_exp_nonpositive";

/// Natural log of a positive finite f32 (subnormals included), about one ulp.
///
/// Reduction `x = m 2^k` with `m` in [sqrt(1/2), sqrt(2)), then the odd series of
/// `log(m) = 2 atanh(s)`, `s = (m-1)/(m+1)`, with the minimax coefficients of fdlibm's logf and
/// `ln 2` split in two so that `k ln2_hi` is exact.
pub fn log() -> Function {
    let lg = |mantissa: u32, shift: i32| mantissa as f32 / (2f32).powi(shift);
    function(LOG, &[("x", Ty::F32)], Ty::F32, |b| {
        b.let_("ix", Ty::U32, var("x").bitcast(Ty::U32));
        b.let_("k", Ty::I32, i(0));
        b.if_(var("ix").lt(u(0x0080_0000)), |b| {
            // Subnormal: scale into the normal range first.
            b.set("x", var("x") * f(33_554_432.0));
            b.set("ix", var("x").bitcast(Ty::U32));
            b.set("k", i(-25));
        });
        b.set("ix", var("ix") + u(0x3f80_0000 - 0x3f35_04f3));
        b.set("k", var("k") + (var("ix") >> u(23)).cast(Ty::I32) - i(127));
        b.set("ix", (var("ix") & u(0x007f_ffff)) + u(0x3f35_04f3));
        let m = var("ix").bitcast(Ty::F32);
        let fr = b.let_("fr", Ty::F32, m - f(1.0));
        let s = b.let_("s", Ty::F32, fr.clone() / (f(2.0) + fr.clone()));
        let z = b.let_("z", Ty::F32, s.clone() * s.clone());
        let w = b.let_("w", Ty::F32, z.clone() * z.clone());
        let t1 = w.clone() * (f(lg(0xccce13, 25)) + w.clone() * f(lg(0xf89e26, 26)));
        let t2 = z * (f(lg(0xaaaaaa, 24)) + w * f(lg(0x91e9ee, 25)));
        let r = b.let_("r", Ty::F32, t2 + t1);
        let hfsq = b.let_("hfsq", Ty::F32, f(0.5) * fr.clone() * fr.clone());
        let dk = b.let_("dk", Ty::F32, var("k").cast(Ty::F32));
        let ln2_hi = f(f32::from_bits(0x3f31_7180));
        let ln2_lo = f(f32::from_bits(0x3717_f7d1));
        b.ret(s * (hfsq.clone() + r) + dk.clone() * ln2_lo - hfsq + fr + dk * ln2_hi);
    })
}

/// `e^x` for any f32 but NaN, about one ulp; 0 below -104 (-inf included), +inf above ln(MAX).
///
/// Cody-Waite reduction `x = k ln2 + r` with a 16-bit `ln2_hi` (so `k ln2_hi` is exact for
/// |k| < 256), the degree-7 Taylor polynomial of `e^r` on |r| <= ln2/2 (truncation 5e-9
/// relative), and the scaling by `2^k` done in two halves so subnormal results come out right.
pub fn exp() -> Function {
    exp_named(EXP, true)
}

/// [`exp`] of an `x` at most 0 (or NaN): the same values, without the test for overflow, which
/// no such `x` takes. A weight `exp(z - max)` in a row whose maximum is finite, where that
/// test was three instructions a column of the top-p cut's read, and a branch past the series.
pub fn exp_nonpositive() -> Function {
    exp_named(EXP_NONPOSITIVE, false)
}

/// [`exp`] as `name`, its test for overflow where `overflows`.
fn exp_named(name: &str, overflows: bool) -> Function {
    function(name, &[("x", Ty::F32)], Ty::F32, |b| {
        b.if_(var("x").lt(f(-104.0)), |b| b.ret(f(0.0)));
        if overflows {
            b.if_(var("x").gt(f(88.722_83)), |b| b.ret(f(f32::INFINITY)));
        }
        let kf = b.let_("kf", Ty::F32, floor(var("x") * f(std::f32::consts::LOG2_E) + f(0.5)));
        let r = b.let_(
            "r",
            Ty::F32,
            (var("x") - kf.clone() * f(f32::from_bits(0x3f31_7200))) - kf.clone() * f(f32::from_bits(0x35bf_be8e)),
        );
        let p = b.let_("p", Ty::F32, f(1.0 / 5040.0));
        for c in [1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
            b.set("p", p.clone() * r.clone() + f(c));
        }
        let k = b.let_("k", Ty::I32, kf.cast(Ty::I32));
        let k1 = b.let_("k1", Ty::I32, k.clone() >> u(1));
        let k2 = b.let_("k2", Ty::I32, k - k1.clone());
        let pow2 = |e: Expr| ((e + i(127)).cast(Ty::U32) << u(23)).bitcast(Ty::F32);
        b.ret(p * pow2(k1) * pow2(k2));
    })
}

/// A lower bound on `log2 x` for a positive normal f32 `x` (0 gives -127), from its bits with no
/// log: `x = 2^e (1 + m)` with `m` in [0, 1), and `log2(1 + m) >= m`, so `log2 x >= e + m`,
/// which is `b 2^-23 - 127` for the bits `b` read as an integer. The conversion of `b` to f32
/// rounds by at most 32 units (4e-6 after the scaling); the scaling is exact and the
/// subtraction is exact where the result is below 1 in size, else within half an ulp. What the
/// noise bounds of the races need (see `race.rs`, `seeded.rs`).
pub fn log2_lower(x: Expr) -> Expr {
    x.bitcast(Ty::U32).cast(Ty::F32) * f(1.0 / 8_388_608.0) - f(127.0)
}

/// Below this `t = 1 - x`, [`screen_neg_log`] takes the series: a fast log's absolute error
/// would be too large a part of `-ln x` there.
const SCREEN_SERIES: f32 = 1.0 / 64.0; // 2^-6

/// `-ln x` for the races' screens, given `x` in (0, 1] and `t = 1 - x` computed without
/// cancellation: the series `t + t^2/2 + t^3/3` below 2^-6 (relative error under `t^3/4`,
/// 2^-20), else the target's fast log ([`approx_log`]), within 2^-21.41 absolute on [0.5, 1]
/// and 3 ulp elsewhere, so within 2^-15 relative of `-ln x >= 2^-6`. For screening only: a
/// screen's bounds carry this error (`race.rs`, `murmur.rs`).
pub fn screen_neg_log(x: Expr, t: Expr) -> Expr {
    let series = t.clone() + t.clone() * t.clone() * (f(0.5) + t.clone() * f(1.0 / 3.0));
    select(t.lt(f(SCREEN_SERIES)), series, -approx_log(x))
}

/// `x` is NaN, by its bits (WGSL has no `isnan`, and `x != x` may be folded by a driver).
pub fn is_nan(x: Expr) -> Expr {
    (x.bitcast(Ty::U32) & u(0x7fff_ffff)).gt(u(0x7f80_0000))
}

/// `x` is neither infinite nor NaN (NaN fails both comparisons).
pub fn is_finite(x: Expr) -> Expr {
    x.clone().gt(f(f32::NEG_INFINITY)).and(x.lt(f(f32::INFINITY)))
}

pub const LOG64: &str = "sk_log64";

/// Natural log of a positive finite f64 (subnormals included), within one ulp.
///
/// Vulkan has no float64 `log` (naga accepts one and lavapipe returns garbage), so the seeded
/// sampler builds its own from + - * / and bit operations (which need SHADER_INT64 on wgpu).
/// Same scheme as [`log`] with fdlibm's float64 minimax coefficients (|error| < 2^-58.45 on the
/// series), so the result is within one ulp of the correctly rounded value.
pub fn log64() -> Function {
    let lg: [f64; 7] = [
        6.666666666666735130e-01,
        3.999999999940941908e-01,
        2.857142874366239149e-01,
        2.222219843214978396e-01,
        1.818357216161805012e-01,
        1.531383769920937332e-01,
        1.479819860511658591e-01,
    ];
    function(LOG64, &[("x", Ty::F64)], Ty::F64, |b| {
        b.let_("ix", Ty::U64, var("x").bitcast(Ty::U64));
        b.let_("k", Ty::I32, i(0));
        b.if_(var("ix").lt(Expr::Lit(Lit::U64(0x0010_0000_0000_0000))), |b| {
            b.set("x", var("x") * f64_(18_014_398_509_481_984.0)); // 2^54
            b.set("ix", var("x").bitcast(Ty::U64));
            b.set("k", i(-54));
        });
        let u64_ = |v: u64| Expr::Lit(Lit::U64(v));
        b.set("ix", var("ix") + u64_(0x3ff0_0000_0000_0000 - 0x3fe6_a09e_0000_0000));
        b.set("k", var("k") + (var("ix") >> u(52)).cast(Ty::I32) - i(1023));
        b.set("ix", (var("ix") & u64_(0x000f_ffff_ffff_ffff)) + u64_(0x3fe6_a09e_0000_0000));
        let fr = b.let_("fr", Ty::F64, var("ix").bitcast(Ty::F64) - f64_(1.0));
        let s = b.let_("s", Ty::F64, fr.clone() / (f64_(2.0) + fr.clone()));
        let z = b.let_("z", Ty::F64, s.clone() * s.clone());
        let w = b.let_("w", Ty::F64, z.clone() * z.clone());
        let c = |n: usize| f64_(lg[n - 1]);
        let t1 = w.clone() * (c(2) + w.clone() * (c(4) + w.clone() * c(6)));
        let t2 = z * (c(1) + w.clone() * (c(3) + w.clone() * (c(5) + w * c(7))));
        let r = b.let_("r", Ty::F64, t2 + t1);
        let hfsq = b.let_("hfsq", Ty::F64, f64_(0.5) * fr.clone() * fr.clone());
        let dk = b.let_("dk", Ty::F64, var("k").cast(Ty::F64));
        let ln2_hi = f64_(f64::from_bits(0x3fe6_2e42_fee0_0000));
        let ln2_lo = f64_(f64::from_bits(0x3dea_39ef_3579_3c76));
        b.ret(s * (hfsq.clone() + r) + dk.clone() * ln2_lo - hfsq + fr + dk * ln2_hi);
    })
}
