//! SGLang's hashed float64 Gumbel noise on the host (`multinomial_with_seed`), the reference the
//! generated kernels (`xtask/src/kernels/murmur.rs`) are checked against.
//!
//! `h = MurmurHash3_x86_32(seed 0)` of the little-endian words `[seed lo, seed hi, position lo,
//! column]`; `x = h / (2^32 - 1)`; `e = clamp(ln x, min = f64::MIN, max = -2^-32)` (SGLang's
//! `torch.finfo(float64).min` and PR #33423's cap, so that `h = 0` and `h = 2^32 - 1` both give
//! finite noise); `g = -ln(-e)`. This crate hashes the vocabulary id in the
//! filtered paths too, where SGLang hashes the sorted rank, so a token's noise does not change when
//! the filters do.

/// MurmurHash3_x86_32 with seed 0 over four u32 words (16 bytes, no tail).
pub fn murmur3(words: [u32; 4]) -> u32 {
    let mut h: u32 = 0;
    for w in words {
        let k = w.wrapping_mul(0xcc9e_2d51).rotate_left(15).wrapping_mul(0x1b87_3593);
        h = (h ^ k).rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    h ^= 16;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The hash of one column of a request at a position.
pub fn hash(seed: u64, position: u64, column: u32) -> u32 {
    murmur3([seed as u32, (seed >> 32) as u32, position as u32, column])
}

/// The float64 Gumbel noise of a hash. `h = 0` gives `ln 0 = -inf`, clamped to `f64::MIN`, so
/// `g = -ln(f64::MAX) = -709.78`: finite, as in SGLang, so such a column can still be chosen.
pub fn gumbel(h: u32) -> f64 {
    let x = h as f64 / 4_294_967_295.0;
    let e = x.ln().clamp(f64::MIN, -(2f64.powi(-32)));
    -(-e).ln()
}
