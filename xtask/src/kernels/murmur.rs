//! MurmurHash3_x86_32 (seed 0) of four u32 words, as SGLang's `multinomial_with_seed` hashes
//! `[seed lo, seed hi, position, column]`, and the float64 Gumbel noise it derives from a hash.

use super::math;
use crate::ir::*;

pub const MURMUR: &str = "sk_murmur3";
pub const SEEDED_GUMBEL64: &str = "sk_seeded_gumbel64";
pub const SEEDED_GUMBEL32: &str = "sk_seeded_gumbel32";
pub const SEEDED_GUMBEL_SCREEN: &str = "sk_seeded_gumbel_screen";

fn rotl(x: Expr, r: u32) -> Expr {
    (x.clone() << u(r)) | (x >> u(32 - r))
}

pub fn murmur3() -> Function {
    let params = [("w0", Ty::U32), ("w1", Ty::U32), ("w2", Ty::U32), ("w3", Ty::U32)];
    function(MURMUR, &params, Ty::U32, |b| {
        b.let_("h", Ty::U32, u(0));
        for (word, _) in params {
            b.scope(|b| {
                let k = b.let_("k", Ty::U32, var(word) * u(0xcc9e_2d51));
                b.set("k", rotl(k.clone(), 15) * u(0x1b87_3593));
                b.set("h", var("h") ^ k);
                b.set("h", rotl(var("h"), 13) * u(5) + u(0xe654_6b64));
            });
        }
        b.set("h", var("h") ^ u(16));
        b.set("h", var("h") ^ (var("h") >> u(16)));
        b.set("h", var("h") * u(0x85eb_ca6b));
        b.set("h", var("h") ^ (var("h") >> u(13)));
        b.set("h", var("h") * u(0xc2b2_ae35));
        b.ret(var("h") ^ (var("h") >> u(16)));
    })
}

/// SGLang's noise of a column that hashes to 0: `ln 0 = -inf` is clamped to float64's most
/// negative value (`torch.finfo(float64).min`), so `g = -ln(f64::MAX) = -709.78`, finite. The
/// kernels return it directly, as the IR's log takes positive finite arguments only.
fn hash_zero_noise() -> f64 {
    -f64::MAX.ln()
}

/// SGLang's noise from a hash: `x = h / (2^32 - 1)`, `e = clamp(ln x, f64::MIN, -2^-32)`,
/// `g = -ln(-e)`. `h = 0` gives the clamp's -709.78 ([`hash_zero_noise`]); `h = 2^32 - 1` the
/// cap's 22.18.
pub fn seeded_gumbel64() -> Function {
    function(SEEDED_GUMBEL64, &[("h", Ty::U32)], Ty::F64, |b| {
        b.if_(var("h").eq_(u(0)), |b| b.ret(f64_(hash_zero_noise())));
        let x = var("h").cast(Ty::F64) / f64_(4_294_967_295.0);
        let e = b.let_("e", Ty::F64, call(math::LOG64, vec![x]).min(f64_(-(2f64.powi(-32)))));
        b.ret(-call(math::LOG64, vec![-e]));
    })
}

/// The same noise in float32, for screening: |g32 - g64| <= 3.2e-6 for `h > 0`, 2^-15 for `h = 0`
/// (see [`SCREEN_ABS`]).
///
/// `h = 0` gives [`hash_zero_noise`] rounded to f32 (half an ulp of 709.78: 2^-15), so the screen
/// keeps such a column wherever float64 could choose it. Otherwise `t = -ln x` is computed
/// without cancellation: for `h >= 2^31` as `log1p(c / h)` with the exact complement
/// `c = 2^32 - 1 - h` (Goldberg's log1p), else as `-ln(h / 2^32)`; either way `t` is within 8 f32
/// ulps relative. Then `g = -ln(max(t, 2^-32))`: an 8-ulp relative error in `t` is 4.8e-7
/// absolute in `g`, and the log and the rounding of `|g| <= 22.2` add 2.7e-6.
///
/// Branch-free (the two halves share one log, `log(a) * k`, and `h = 0` is a final select), so
/// the cost model's common path, the cheapest through a loop, is every column's: a branch on
/// `h = 0` made it a path with no noise at all. The values are the branching form's, bit for bit.
pub fn seeded_gumbel32() -> Function {
    function(SEEDED_GUMBEL32, &[("h", Ty::U32)], Ty::F32, |b| {
        let high = b.let_("high", Ty::Bool, var("h").ge(u(0x8000_0000)));
        let q = b.let_("q", Ty::F32, (u(u32::MAX) - var("h")).cast(Ty::F32) / var("h").cast(Ty::F32));
        let up = b.let_("up", Ty::F32, f(1.0) + q.clone());
        let x = var("h").cast(Ty::F32) * f(1.0 / 4_294_967_296.0);
        let l = b.let_("l", Ty::F32, call(math::LOG, vec![select(high.clone(), up.clone(), x)]));
        // `q` itself where `1 + q` rounds to 1 (then `log(1 + q) = q` to float32).
        let low1p = select(up.clone().ne_(f(1.0)), l.clone() * q.clone() / (up - f(1.0)), q);
        let t = b.let_("t", Ty::F32, select(high, low1p, -l));
        let g = -call(math::LOG, vec![t.max(f(2f32.powi(-32)))]);
        b.ret(select(var("h").eq_(u(0)), f(hash_zero_noise() as f32), g));
    })
}

/// SGLang's noise in float32 with the target's fast log ([`approx_log`]), for the screen of the
/// race from logits: within 3.5e-5 of the float64 noise for `h > 0`, 2^-15 for `h = 0` (the
/// constant, as [`seeded_gumbel32`]); the screen's budget is `LOGITS_SCREEN_ABS` in `seeded.rs`.
///
/// Why. `t = !h 2^-32` is `1 - x` within 2^-24 relative (the f32 rounding of the complement;
/// `2^32 - 1` against `2^32`, 2^-32). Below 2^-6, `E = -ln x` is the series, within 2^-20
/// relative ([`math::screen_neg_log`]). Above, `x = h 2^-32 <= 1 - 2^-6` (within 2^-24
/// relative), so `E >= 0.0157`, and the fast log is within 2^-21.41 absolute on [0.5, 1] and
/// 3 ulp elsewhere (Vulkan's and CUDA's `__logf` bounds): `E` within 2.7e-5 relative. Then
/// `g = -ln(max(E, 2^-32))` takes that relative error as absolute, plus the fast log's own (2^-21.41, or 3 ulp of at most
/// 22.2, 5.7e-6) and its rounding (1e-6): under 3.5e-5. The clamp is SGLang's: `h = 2^32 - 1`
/// gives `t = 0`, `E = 2^-32` after the maximum, `g = 22.18`. Two fast logs and no division:
/// about 20 instructions where [`seeded_gumbel32`]'s two exact logs and two divisions take
/// over 80.
pub fn seeded_gumbel_screen() -> Function {
    function(SEEDED_GUMBEL_SCREEN, &[("h", Ty::U32)], Ty::F32, |b| {
        let scale = f(1.0 / 4_294_967_296.0);
        let t = b.let_("t", Ty::F32, (var("h") ^ u(u32::MAX)).cast(Ty::F32) * scale.clone());
        let x = var("h").cast(Ty::F32) * scale;
        let e = b.let_("e", Ty::F32, math::screen_neg_log(x, t));
        let g = -approx_log(e.max(f(2f32.powi(-32))));
        b.ret(select(var("h").eq_(u(0)), f(hash_zero_noise() as f32), g));
    })
}

/// Screening bound: |score32 - score64| <= SCREEN_ABS + (|logprob| + |g32|) * SCREEN_REL, with a
/// factor of about four to spare over the analysis above: the noise's error (3.2e-6), the
/// logprob's f32 rounding (2^-24 |logprob|) and the sum's (2^-24 (|logprob| + |g|)). For `h = 0`
/// the noise's 2^-15 and the sum's 2^-24 * 709.78 (7.3e-5 together) are within
/// `709.78 * SCREEN_REL` = 3.4e-4.
pub const SCREEN_ABS: f32 = 1.6e-5;
pub const SCREEN_REL: f32 = 1.0 / 2_097_152.0; // 2^-21
