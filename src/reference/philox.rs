//! Philox4x32-10 on the host, and the documented map from (seed, offset, column) to noise.
//!
//! Every backend computes exactly these integers; the kernels' version is written in the IR
//! (`xtask/src/kernels/philox.rs`) and checked against this one and Random123's known answers.
//!
//! - key = (seed & 0xffffffff, seed >> 32)
//! - counter = (column / 4, stream, offset & 0xffffffff, offset >> 32), stream 0 for the race
//! - column `c` uses word `c % 4` of that block.
//! - uniform `u = (2 (w >> 9) + 1) 2^-24`: 2^23 equally spaced values in [2^-24, 1 - 2^-24], each
//!   an exact f32, never 0 or 1. So Exponential noise `-ln u` lies in [5.96e-8, 16.64] and Gumbel
//!   noise `-ln(-ln u)` in [-2.81, 16.63]: the Gumbel tail beyond 16.63 (probability 6e-8 per
//!   draw) is cut, and each token's share is exact to the 2^-23 lattice of the uniform.

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Ten rounds of Philox4x32 (Salmon et al., SC'11).
pub fn philox4x32_10(mut ctr: [u32; 4], mut key: [u32; 2]) -> [u32; 4] {
    for round in 0..10 {
        if round > 0 {
            key[0] = key[0].wrapping_add(W0);
            key[1] = key[1].wrapping_add(W1);
        }
        let p0 = M0 as u64 * ctr[0] as u64;
        let p1 = M1 as u64 * ctr[2] as u64;
        ctr = [(p1 >> 32) as u32 ^ ctr[1] ^ key[0], p1 as u32, (p0 >> 32) as u32 ^ ctr[3] ^ key[1], p0 as u32];
    }
    ctr
}

/// The random word of `column` for a row keyed by (`seed`, `offset`).
pub fn word(seed: u64, offset: u64, column: u32) -> u32 {
    let block =
        philox4x32_10([column / 4, 0, offset as u32, (offset >> 32) as u32], [seed as u32, (seed >> 32) as u32]);
    block[(column % 4) as usize]
}

/// The uniform in (0, 1) that a word maps to (exact in f32).
pub fn uniform(w: u32) -> f32 {
    (w >> 9) as f32 * (1.0 / 8_388_608.0) + 1.0 / 16_777_216.0
}

/// Exponential(1) noise of a word, in f64 (the oracle's precision).
pub fn exponential(w: u32) -> f64 {
    -(uniform(w) as f64).ln()
}

/// Gumbel(0, 1) noise of a word, in f64.
pub fn gumbel(w: u32) -> f64 {
    -exponential(w).ln()
}
