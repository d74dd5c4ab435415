//! Top-p rows without a small top-k (top-p alone, or joint with a top-k above `CAP`, with or
//! without min-p), and rows of a top-k above `CAP` alone, on the one-read path's two launches
//! and one between them: two reads of the row, every part of it a workgroup of its own.
//!
//! Such a row keeps from a few tokens to tens of thousands (Zipf rows at T 0.8 keep 300 to 700
//! at 0.9), more than the candidates hold. Its set is a prefix of the filters' order, ending
//! where the mass before a token passes `top_p` of the row's, so it is found from where the
//! row's mass, summed from the top, crosses that (or where a top-k ends, if it ends first):
//! 1. `top_k_parts_*` (the first read, [`histogram_part`]): besides its maximum `m_p`, each
//!    part weighs its columns (already in workgroup memory) into [`BINS`] bins of
//!    `1 / BIN_SCALE` in `z`, on a grid that is the same for every part (bin
//!    `ceil(m_p S) - floor(z S)`), with fixed-point masses `exp(z - e) 2^HIST_BITS`, rounded,
//!    `e` the bin's upper edge (so a token deep in the tail keeps 19 bits), and counts (u32
//!    workgroup atomics), and in the same pass counts those in the top `1/32` on the fine grid;
//!    it writes them into its slot. The row's part that arrives last ([`estimate_cut`]) shifts
//!    the parts' histograms by whole bins into the row's and weighs each bin by `exp(e - max)`,
//!    scaled so the row's mass (the bins' sum: they miss only tokens past their 32 units, under
//!    `e^-32` each) is [`ESTIMATE_UNITS`]; the bin where the mass from the
//!    top crosses `top_p` of the row's is where the cut should lie. The row's state gets that
//!    bin, and the neighbour on a side whose edge the limit lies within [`ESTIMATE_MARGIN`] of
//!    (a top-k's bin, both, [`RANGE`]), and bounds on the exact masses above the range and of
//!    the row ([`estimate_bounds`]: the coarse bins' masses are summed in integers, and each
//!    error the estimate carries is bounded, [`COARSE_ERROR`]).
//! 2. `top_p_cut_*` (the second read, [`cut_part`]): each token of a part is above the range, in
//!    it (listed in the part's slot, and weighed: the filter kernels' exact fixed-point mass,
//!    `w 2^40`) or below; no other column is weighed, and from logits a column far from both
//!    edges takes its class from its logit, with no division. The part counts its classes,
//!    races its tokens above the range (kept, if the checks below hold) and writes its record.
//!    It carries nothing else, so it holds few registers and many workgroups per
//!    multiprocessor: its read is the row's second.
//! 3. `top_k_merge_*` ([`merge_cut`], one workgroup a row) takes the range's tokens into
//!    workgroup memory, runs the filter kernels' select on them from the count above and the
//!    least mass above the bounds allow, against the largest limit (the largest set they
//!    allow), races the kept ones and combines the parts' winners; the winner is the row's
//!    where the least set the bounds allow holds it too. Where the bounds cannot tell (a check,
//!    or the winner, on the limit's edge: a few rows in ten thousand), one more read of the row
//!    sums the two masses exactly, and the merge decides again from them.
//!
//! Exact: the counts and the range's masses are integers, the bounds hold the exact masses, and
//! the merge checks that the set starts before the range's end and ends inside it (the first
//! range token is kept, no token below is) for every mass the bounds allow, that no token
//! outside the range has the order value of one inside or of the other side's (the classes
//! follow `z`, the order `z - max` rounded), and that the range fits in [`CUT_CAP`]. Where one
//! fails the merge runs the one-workgroup filter kernel's body on the row, as it does for rows
//! the candidates do not decide: rows whose cut lies in a bin of thousands of tokens of several
//! values (a bin of one tied value, a flat row, is ranked by column).

use super::abi::{
    buffer, for_each_row_part_at, kernel, part_columns, partials_buffer, quads_per_part, row_is_seeded, PhiloxKey,
};
use super::combine::last_part_on;
use super::filter_min_p::{self, left_out_kept};
use super::filter_split::{load64, store64};
use super::filter_top_k::{
    finish_race, for_each_word, keep_lower, load_part, one_read_row, own_word, pad_part, part_m, parts_mass, race_one,
    race_philox, row_mass_and, row_max, slot_word, Stored, AREA_WORDS, HEAD_WORDS, KEYS, SCRATCH, SELECT_SCRATCH,
    SLOT_WORDS,
};
use super::filter_values::{self as values, Grid};
use super::filters::{
    add_digit, count_digits, declare_best, declare_best_as, declare_select, filter_inputs, functions, key_value,
    listed_row, order_key, select_step, takes_row, ties, Input, ALL, DIGIT_PASSES, FIXED, FIXED_F32, FRACTION, LIST,
    LIST_CAP, MASS_BITS, NONE,
};
use super::select::{select_top, Items};
use crate::ir::*;
use crate::tuning::Workgroup;

/// Bins of a part's coarse histogram, each `1/16` of `z` wide (from probabilities, of an
/// octave): 32 units below the part's maximum, past which a row's tokens weigh under `e^-32`
/// each (so at `top_p < 1 - 2^-24` the cut never lies there in a row of fewer than 2^24 tokens).
pub const BINS: u32 = 512;
/// Bins of a part's fine histogram, each `2^-15` wide: the top `1/32` below the part's maximum,
/// where a flat row puts all of its tokens (the benchmark's, noise of 1e-3 at T 0.8: the whole
/// row within 0.017, one or two coarse bins, about 850 tokens a fine bin at the cut). From
/// probabilities, bins of `2^-14` of an octave: an octave is `ln 2` of `z`, so the window is
/// 0.043 of `z` (at `2^-15` it was 0.022, under a flat row's 0.022 at T 0.6), about 1,200 tokens
/// a bin.
pub const FINE_BINS: u32 = 1024;
/// The two grids of a top-p row's histograms (see the module's step 1).
const COARSE: Level = Level {
    bins: BINS,
    shift: (4, 4),
    masses: true,
    counts_at: BINS,
    margin: ESTIMATE_MARGIN,
    spread: (0.0, 0.0),
    name: "ec",
};
const FINE: Level = Level {
    bins: FINE_BINS,
    shift: (15, 14),
    masses: false,
    counts_at: BINS + BINS / 2,
    margin: FINE_MARGIN,
    spread: (1.0 / 65536.0, 1.0 / 32768.0),
    name: "ef",
};
/// What the row's mass (its coarse bins' sum) weighs in the cut's estimate, in u32: room under
/// 2^32 for the conversions' rounding.
const ESTIMATE_UNITS: f32 = 3.5e9;
/// How near (a share of the row's mass) the limit may lie to a bin's edge before the cut's range
/// takes the neighbouring bin too: twice [`COARSE_ERROR`], as the limit and the mass above the
/// edge may each be off by it, so that the merge's bounds ([`estimate_bounds`]) place the first
/// listed token inside the set and the first token below outside it for certain. So the
/// neighbour is listed only where the estimate may lie on the wrong side of the edge. It was 50
/// times a bound on the error (2^-12): on Zipf rows at T 1.0, a fifth of top-p 0.99 rows listed
/// two deep-tail bins, more tokens than the parts list, and read nine or ten times.
const ESTIMATE_MARGIN: f32 = 2.0 * COARSE_ERROR;
/// A bound on the coarse grid's estimate of a mass (the row's, or above a bin's edge) against
/// the exact one the merge would sum (`sk_fixed` of each token's `sk_exp(z - max)`), as a share
/// of the row's: each token's rounding to 2^-20 of its bin's edge weight (1.0e-6 of its own),
/// the target's fast exponential against the bin's edge (3.7e-7 on Vulkan, 3 + 2|x| ulp), the
/// rounding of `z - max` in the exact weight and of `edge - max` in the bin's (each 2^-24 of
/// the distance, 1.9e-6 at the grid's 32 units), the two `sk_exp`s, the products and the
/// conversions to f32 and to the estimate's units (4e-7 together): 5.8e-6. The parts' masses of
/// a bin are summed in integers, exactly; the exact sums' truncation to 2^-40 a token is bounded
/// apart ([`estimate_bounds`]).
const COARSE_ERROR: f32 = 1.0 / 131072.0;
/// Weight under which a token lies outside the row's coarse grid, which its bins miss (a NaN
/// counted among them weighs nothing): `e^-31.9` below the row's largest from logits, `2^-31`
/// from probabilities.
const TAIL_WEIGHT: (f32, f32) = (1.0 / 35_184_372_088_832.0, 1.0 / 2_147_483_648.0);
/// The same on the fine grid, whose bins carry counts only: each weighed at its middle, within
/// `2^-16` (relative) of its tokens' mass (from probabilities, `2^-15`, `Level::spread`), so the
/// mass above an edge is off by at most that share of it, besides [`COARSE_ERROR`], as is the
/// row's (from the coarse grid): twice the two together from logits (3.1e-5 of the row's mass),
/// 1.3 times from probabilities (4.6e-5).
const FINE_MARGIN: f32 = 1.0 / 16384.0;
/// 2^23: a float at or above it and below 2^24 is an integer, its bits that integer plus these.
const ROUNDER: f32 = 8_388_608.0;
/// 1.5 2^23: an integer within 2^22 of 0 added to its bits gives the float that integer plus it.
const MAGIC: f32 = 12_582_912.0;
/// The largest `|z|` of a row from logits whose parts' bins [`estimate_cut`] places: the
/// integer indices of [`histogram_part`] are the grids' within 2^16 of 0, and a part the
/// estimate weighs lies within 32 of its row's largest. The coarse grid's thresholds in f32
/// (its origin `z 2^4` less a bin's count, `Grid::reaches`) are whole numbers there too.
const PLACED: f32 = 32768.0;
/// The largest `|z|` of a row whose cut [`estimate_cut`] places on the fine grid: its
/// thresholds (the origin `z 2^15` less a bin's count) are the whole numbers they stand for
/// only below 2^24, so within 2^8 of 0 (at most 2^23 plus the grid's bins). Past it (a flat
/// row of logit 12 at T 0.01) a threshold rounds to a multiple of 2 or more and the set moves
/// by a bin, so the cut keeps the coarse grid's range.
const FINE_PLACED: f32 = 256.0;
/// Fixed-point bits of the histograms' masses: a part of 4096 columns sums below 2^31 in a bin.
const HIST_BITS: u32 = 19;
/// [`estimate_cut`] sums a grid's counts, each part's most and masses in the keys' array: the
/// coarse grid's masses in two words a bin (u64 halves), the fine grid's counts alone.
const _: () = assert!(4 * BINS <= super::filter_top_k::PART_COLS && 3 * FINE_BINS <= super::filter_top_k::PART_COLS);
/// Words of a part's histograms in its slot: the coarse bins' masses, then their counts and the
/// fine bins', two u16 a word (a part's bin holds at most `PART_COLS` = 4096 tokens).
pub const HIST_WORDS: u32 = BINS + (BINS + FINE_BINS) / 2;
const _: () = assert!(super::filter_top_k::PART_COLS < 1 << 16);
/// Bins listed either side of the estimated cut's.
const RANGE: u32 = 1;
/// The most range tokens a part lists: `(key, column)` pairs in its slot's area.
const PART_LIST: u32 = AREA_WORDS / 2;
/// The most range tokens the merge copies into workgroup memory (keys, then columns, in the
/// filter kernels' list); a longer range is selected where the parts listed it.
const CUT_CAP: u32 = LIST_CAP / 2;
pub(super) const HIST: &str = "part_hist";
const LISTING: &str = "cut_listing";

/// Words after a slot's candidates area: the row's state (in its part 0's slot), then the
/// part's record of the cut launch.
pub const TAIL_WORDS: u32 = 32;
mod tail {
    /// 1 where the cut launch takes the row (the estimate found its maximum finite); for min-p
    /// alone, [`super::GO_RACED`] where its parts raced it ([`super::min_p_state`]).
    pub const GO: u32 = 0;
    /// The listed bins, first and last (u32), the grid's origin `ceil(max S)` and the maximum
    /// (f32 bits).
    pub const LO: u32 = 1;
    pub const HI: u32 = 2;
    pub const R: u32 = 3;
    pub const MX: u32 = 4;
    /// The estimate's bounds on the exact masses above the range and of the row, least then
    /// most (f32 bits, in weights of the row's maximum: [`super::estimate_bounds`]).
    pub const BOUNDS: u32 = 5;
    /// A part's counts above and in the range, and its fixed-point mass in it (u64 in two
    /// words).
    pub const N_ABOVE: u32 = 9;
    pub const N_RANGE: u32 = 10;
    pub const M_RANGE: u32 = 11;
    /// How many range tokens it listed; the smallest key above and in the range (complemented:
    /// 0 for none), the largest in the range and below (0: none); the weight of the largest
    /// below (f32 bits).
    pub const LISTED: u32 = 13;
    pub const MIN_ABOVE_NOT: u32 = 14;
    pub const MIN_RANGE_NOT: u32 = 15;
    pub const MAX_RANGE: u32 = 16;
    pub const MAX_BELOW: u32 = 17;
    pub const W_BELOW: u32 = 18;
    /// Its winners above the range, then in it: the Philox race's score (f32 bits) and column,
    /// the seeded race's score (f64 bits, two words) and column.
    pub const BEST: u32 = 19;
    pub const RBEST: u32 = 24;
    /// In the row's state: its parts counted in so far where the merge launch is also the
    /// cut's (`FLAG_CUT_HERE`); the estimate sets it to 0, the last part back to 0.
    pub const ARRIVED: u32 = 29;
    /// In the row's state: the shift of the grid its bins are on (`Grid`, coarse or fine).
    pub const SHIFT: u32 = 30;
}
/// The row's `GO` where its parts raced min-p alone and the merge decides it (`filter_min_p.rs`).
pub(super) const GO_RACED: u32 = 2;
/// Words of a winners' record (see `tail::BEST`).
const WIN_WORDS: u32 = 5;
const _: () = assert!(tail::RBEST + WIN_WORDS <= tail::ARRIVED && tail::SHIFT < TAIL_WORDS);
const _: () = assert!(tail::BEST + WIN_WORDS <= tail::RBEST && tail::BOUNDS + 4 <= tail::N_ABOVE);

/// The first word of a slot's tail.
const TAIL: u32 = SLOT_WORDS - TAIL_WORDS;

/// Word `k` of the tail of part `p` of the row in slot `row_slot` of the launch.
fn tail_word(row_slot: Expr, p: Expr, k: u32) -> Expr {
    slot_word(row_slot, p, u(TAIL + k))
}

/// The workgroup array of [`histogram_part`]: the coarse bins' masses, then the coarse and the
/// fine bins' counts, a word each (the slot packs the counts two a word); from probabilities
/// then the bits of [`EDGE_RCP`]'s table.
pub(super) fn histogram_shared(input: Input) -> Vec<SharedDecl> {
    let table = match input {
        Input::Logits(_) => 0,
        Input::Probs => COARSE_STEPS,
    };
    vec![SharedDecl::atomic(HIST, HIST_SHARED + table)]
}

/// Where the reciprocals of a coarse bin's upper edge within its octave lie in [`HIST`],
/// `16 / (17 + j)` for the bin's place `j` in it: a probability's weight against its bin's edge
/// is its mantissa (`1 + m`, the octave's exponent cancels) times its bin's, one product where a
/// division took its range checks too. In the histograms' array, not one of its own, so that
/// its address is the histograms' base plus the place (nvcc rebuilt a second array's address
/// for every key).
const EDGE_RCP: u32 = HIST_SHARED;
/// Coarse bins an octave of probabilities.
const COARSE_STEPS: u32 = 1 << 4;

/// Words of [`histogram_shared`]: the histograms.
const HIST_SHARED: u32 = 2 * BINS + FINE_BINS;

/// One grid of a top-p row's histograms.
struct Level {
    /// Its bins, counted down from the grid's origin at a part's (or the row's) maximum.
    bins: u32,
    /// Its bins are `2^-shift` wide ([`Grid`]): from logits, then from probabilities.
    shift: (u32, u32),
    /// Whether the parts weigh its bins (else the estimate weighs a bin's count at its middle).
    masses: bool,
    /// Where its counts lie in a part's histograms (two u16 a word), from the masses' start.
    counts_at: u32,
    /// The estimate's margin on it (see [`ESTIMATE_MARGIN`]).
    margin: f32,
    /// How far (relative) its bins' tokens may weigh from what the estimate weighs them at,
    /// from logits, then from probabilities (besides [`COARSE_ERROR`]).
    spread: (f32, f32),
    /// The prefix of the estimate's variables for it.
    name: &'static str,
}

impl Level {
    fn shift(&self, input: Input) -> u32 {
        match input {
            Input::Logits(_) => self.shift.0,
            Input::Probs => self.shift.1,
        }
    }

    fn grid(&self, input: Input) -> Grid {
        Grid::fixed(self.shift(input))
    }

    /// A bound on its estimate of the mass above a bin's edge, as a share of the row's.
    fn error(&self, input: Input) -> f32 {
        COARSE_ERROR
            + match input {
                Input::Logits(_) => self.spread.0,
                Input::Probs => self.spread.1,
            }
    }
}

/// The first read of a part of a top-p row (`top_p_cut`): its columns into workgroup memory,
/// its maximum and its histograms (see the module's step 1), into its slot; the row's last part
/// to arrive estimates the cut.
pub(super) fn histogram_part(b: &mut Block, input: Input) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    // The workgroup's previous part may still be copying its histograms out.
    b.barrier();
    b.for_("i", lid.clone(), u(HIST_SHARED), bs.clone(), |b, i| b.store_shared(HIST, i, u(0)));
    let n = b.let_("n_cols", Ty::U32, var("col_hi") - var("col_lo"));
    let none = unbinned(input);
    let padded = pad_part(b, n.clone(), none);
    if matches!(input, Input::Probs) {
        // Read after `load_part`'s barrier.
        b.if_(lid.clone().lt(u(COARSE_STEPS)), |b| {
            let j = lid.clone().cast(Ty::F32);
            let rcp = f(COARSE_STEPS as f32) / (j + f((COARSE_STEPS + 1) as f32));
            b.store_shared(HIST, u(EDGE_RCP) + lid.clone(), rcp.bitcast(Ty::U32))
        });
    }
    let m = load_part(b, input, n.clone(), Stored::Values(none));
    let (coarse, fine) = (COARSE.grid(input), FINE.grid(input));
    // Each value's index on the fine grid, and on the coarse one the same shifted right (a floor
    // of a floor by a power of two is the floor), each counted down from the grid's origin in
    // u32: a value past the bins wraps past them. From logits the index is `floor(z 2^15)` as
    // an i32, one conversion a value, which saturates: the indices are the grids' (those the cut
    // compares in floats, `Grid::reaches`) wherever `z` lies within 2^16 of 0, and a row whose
    // largest does not lie within 2^15 of 0 takes the filter kernel's body ([`estimate_cut`]),
    // and a part within the 32 units of such a row's largest that the estimate weighs has no
    // value outside (a lower one saturates far below the bins). From probabilities the index is
    // the bits shifted.
    let coarser = u(FINE.shift(input) - COARSE.shift(input));
    let (r_at, rf_at) = match input {
        Input::Logits(_) => {
            let low = b.let_("grid_low", Ty::I32, floor_i32(-m.clone() * fine.scale.clone()));
            let ru = b.let_("grid_ru", Ty::U32, u(0) - (low.clone() >> coarser.clone()).bitcast(Ty::U32));
            (ru, b.let_("grid_rfu", Ty::U32, u(0) - low.bitcast(Ty::U32)))
        }
        Input::Probs => (
            b.let_("grid_ru", Ty::U32, coarse.bits_index(m.clone())),
            b.let_("grid_rfu", Ty::U32, fine.bits_index(m.clone())),
        ),
    };
    // Both grids in one pass over the values on chip, every count a word of its own (the bin's
    // address is its mass's, offset).
    let count = |b: &mut Block, at: u32, g: Expr, name: &str| {
        b.atomic_add(HIST, u(at) + g, u(1), name);
    };
    // A value's bits as the read stored them (past the part's columns `unbinned`'s), with no
    // test but its bins'.
    for_each_word(b, padded, "hk", &|b, k| {
        let z = b.let_("hz", Ty::F32, k.clone().bitcast(Ty::F32));
        let (fi, ci) = match input {
            Input::Logits(_) => {
                let fi = b.let_("hfi", Ty::I32, floor_i32(z.clone() * fine.scale.clone()));
                let ci = b.let_("hci", Ty::I32, fi.clone() >> coarser.clone());
                (fi.bitcast(Ty::U32), ci.bitcast(Ty::U32))
            }
            Input::Probs => {
                let fi = b.let_("hfi", Ty::U32, fine.bits_index(z.clone()));
                (fi.clone(), b.let_("hci", Ty::U32, fi >> coarser.clone()))
            }
        };
        let gf = b.let_("hfg", Ty::U32, rf_at.clone() - fi);
        b.if_(gf.clone().lt(u(FINE_BINS)), |b| count(b, 2 * BINS, gf, "hist_f_old"));
        let g = b.let_("hg", Ty::U32, r_at.clone() - ci.clone());
        b.if_(g.clone().lt(u(BINS)), |b| {
            // Against the bin's upper edge, not the part's maximum: a tail of thousands of
            // tokens under 2^-19 of the maximum each would round to a unit or to nothing.
            // An estimate within its bound (`COARSE_ERROR`), so the target's fast
            // exponential.
            let we = match input {
                // The edge `(ci + 1) 2^-4`: `ci + 1` (within 2^20 of 0) as f32 by the float
                // add of 1.5 2^23 to its bits, no conversion; its product by 2^-4 is exact,
                // so one fused step subtracts it.
                Input::Logits(_) => {
                    let above = (ci + u(MAGIC.to_bits() + 1)).bitcast(Ty::F32) - f(MAGIC);
                    approx_exp(fma(above, -coarse.inv.clone(), z.clone()))
                }
                // `p = 2^e (1 + m)` in bin `j` of its octave, whose upper edge is `2^e (1 +
                // (j + 1) / 16)` (`2^(e + 1)` for the last): the ratio is `(1 + m) 16 / (17
                // + j)`, within an ulp. A subnormal `p` lies in a bin only of a part whose
                // largest is under 2^-94, whose 4096 tokens weigh under 2^-64 of the row's
                // mass (its largest is at least 1 / 2^23): off by no more than that.
                Input::Probs => {
                    let bits = b.let_("hbits", Ty::U32, z.clone().bitcast(Ty::U32));
                    let j = ci & u(COARSE_STEPS - 1);
                    let mantissa = ((bits & u(0x007f_ffff)) | u(0x3f80_0000)).bitcast(Ty::F32);
                    mantissa * load_shared(HIST, u(EDGE_RCP) + j).bitcast(Ty::F32)
                }
            };
            // Rounded to an integer by the float add of 2^23 (the weight is at most about
            // 1, so the sum lies where floats are integers; the product by 2^19 is exact,
            // one fused step), its bits summed as they are: the copy into the slot takes
            // the 2^23's bits away, once a token (a sum below 2^31, so exact in u32).
            let placed = fma(we, f((1u32 << HIST_BITS) as f32), f(ROUNDER));
            b.atomic_add(HIST, g.clone(), placed.bitcast(Ty::U32), "hist_old");
            count(b, BINS, g, "hist_n_old");
        });
    });
    b.barrier();
    // Into the slot: the masses less their tokens' 2^23s, the counts (coarse, then fine) two a
    // word.
    b.for_("i", lid.clone(), u(HIST_WORDS), bs.clone(), |b, i| {
        let to = own_word(u(HEAD_WORDS) + i.clone());
        b.if_else(
            i.clone().lt(u(BINS)),
            |b| {
                let tokens = load_shared(HIST, u(BINS) + i.clone());
                b.store(SCRATCH, to.clone(), load_shared(HIST, i.clone()) - tokens * u(ROUNDER.to_bits()))
            },
            |b| {
                let pair = b.let_("hpair", Ty::U32, i.clone() * u(2) - u(BINS));
                b.store(
                    SCRATCH,
                    to.clone(),
                    load_shared(HIST, pair.clone()) | (load_shared(HIST, pair + u(1)) << u(16)),
                )
            },
        );
    });
    // No sum: the estimate weighs the row from its bins, and counts the tokens they miss.
    b.if_(lid.eq_(u(0)), |b| {
        b.store(SCRATCH, own_word(u(0)), m.bitcast(Ty::U32));
        for k in 1..HEAD_WORDS {
            b.store(SCRATCH, own_word(u(k)), u(0));
        }
    });
    super::combine::last_part(b, |b| b.scope(|b| estimate_cut(b, input)));
}

/// The bits [`histogram_part`]'s read stores for a token without mass, and its padding: a
/// value whose index no bin of either grid takes. From logits -inf, whose index saturates at
/// the i32's least, past the grids of any part whose largest is above -65504 (a part the
/// estimate weighs lies within 32 of its row's largest, within 2^15 of 0); from probabilities
/// -0, whose bits shifted lie past those of every probability, +inf's too, so its bins wrap
/// past the grids'.
fn unbinned(input: Input) -> u32 {
    match input {
        Input::Logits(_) => f32::NEG_INFINITY.to_bits(),
        Input::Probs => (-0.0f32).to_bits(),
    }
}

/// The estimate of a top-p row's cut, by its last part in the parts launch (see the module's
/// step 1), from every part's histograms, summed in the part's workgroup array of keys: the
/// bin where the mass from the top crosses `top_p` of the row's, or where the count reaches
/// the top-k (exact integers; a top-k above `CAP` takes this path too), whichever comes first,
/// on the fine grid where it lies there (the top 1/32 below the maximum), else on the coarse.
/// The row's state for the cut launch; where the maximum is not finite (from logits, not within
/// 2^15 of 0), `GO` 0 (the cut launch leaves the row, and the merge runs the filter kernel's
/// body on it).
fn estimate_cut(b: &mut Block, input: Input) {
    let lid = builtin(Builtin::LocalId);
    let state = |k: u32| tail_word(var("row_slot"), u(0), k);
    let (mx, finite) = row_max(b, var("row_slot"), load);
    // From logits, the parts' bins are the grids' only where the largest lies within 2^15 of 0
    // (`histogram_part`; a test that also fails for one not finite).
    let placeable = match input {
        Input::Logits(_) => mx.clone().abs().lt(f(PLACED)),
        Input::Probs => finite,
    };
    b.if_else(
        placeable,
        |b| {
            // The estimate in u32, scaled so the row's mass (its coarse bins' sum) is
            // `ESTIMATE_UNITS`: by the mass, not by the row's length, so a cut deep in a long
            // tail (top-p 0.99 on Zipf rows at T 0.6: bins of 4e-4 of the mass) keeps its bins
            // apart.
            let (coarse, unit) = place_cut(b, input, &COARSE, (mx.clone(), None));
            let coarse_inside = coarse.inside.clone();
            b.let_("e_shift", Ty::U32, u(COARSE.shift(input)));
            b.let_("e_lo", Ty::U32, coarse.lo);
            b.let_("e_hi", Ty::U32, coarse.hi);
            b.let_("e_r", Ty::F32, coarse.r);
            b.let_("e_above", Ty::F32, coarse.above);
            b.let_("e_error", Ty::F32, f(COARSE.error(input)));
            // The fine grid's 1/32 lies within the coarse bins 0 to 2.
            let fine_placed = match input {
                Input::Logits(_) => mx.clone().abs().lt(f(FINE_PLACED)),
                Input::Probs => boolean(true),
            };
            b.if_(coarse.bin.le(u(2)).and(fine_placed), |b| {
                let (fine, _) = place_cut(b, input, &FINE, (mx.clone(), Some(unit)));
                b.if_(fine.found, |b| {
                    b.set("e_shift", u(FINE.shift(input)));
                    b.set("e_lo", fine.lo);
                    b.set("e_hi", fine.hi);
                    b.set("e_r", fine.r);
                    b.set("e_above", fine.above);
                    b.set("e_error", f(FINE.error(input)));
                });
            });
            let range = (var("e_lo"), var("e_hi"));
            let bounds = estimate_bounds(b, input, (var("e_above"), var("e_error")), (var("ec_total"), coarse_inside));
            write_state(b, u(1), range, (var("e_r"), var("e_shift")), mx, bounds);
        },
        |b| b.if_(lid.clone().eq_(u(0)), |b| b.store(SCRATCH, state(tail::GO), u(0))),
    );
}

/// The row's bounds for its state (`tail::BOUNDS`): the exact mass above the range and the
/// row's, least then most, from the estimate's `above` (off by at most `error` of the row's
/// mass) and `total` (by [`COARSE_ERROR`] of it, less the row's tokens outside its coarse
/// grid, all but the `inside` its bins count: at most [`TAIL_WEIGHT`] each); the exact sums'
/// truncation takes at most 2^-40 a token from either. In weights of the row's maximum (f32:
/// each bound within 2^-24 of its own, inside the errors' margins).
fn estimate_bounds(
    b: &mut Block,
    input: Input,
    (above, error): (Expr, Expr),
    (total, inside): (Expr, Expr),
) -> [Expr; 4] {
    let tail = b.let_("tail_n", Ty::U32, param("vocab") - inside);
    let weight = match input {
        Input::Logits(_) => TAIL_WEIGHT.0,
        Input::Probs => TAIL_WEIGHT.1,
    };
    let total = b.let_("eb_total", Ty::F32, total);
    let cut = b.let_("eb_cut", Ty::F32, param("vocab").cast(Ty::F32) * f(1.0 / (1u64 << MASS_BITS) as f32));
    let off = b.let_("eb_off", Ty::F32, error * total.clone());
    let total_off = b.let_("eb_total_off", Ty::F32, total.clone() * f(COARSE_ERROR));
    [
        (above.clone() - off.clone() - cut.clone()).max(f(0.0)),
        above + off,
        (total.clone() - total_off.clone() - cut).max(f(0.0)),
        total + total_off + tail.cast(Ty::F32) * f(weight),
    ]
}

/// Where [`place_cut`] puts a row's cut on one grid: the bin and the range listed around it
/// (first and last bin), the grid's origin at the row's maximum, the mass above the range, and
/// whether the grid holds the crossing (else `bin` is the grid's last).
struct Placed {
    bin: Expr,
    lo: Expr,
    hi: Expr,
    r: Expr,
    /// The estimated mass above `lo`, in the row's weights.
    above: Expr,
    found: Expr,
    /// The row's tokens inside the grid (its bins' counts summed).
    inside: Expr,
}

/// [`estimate_cut`] on one grid of the parts' histograms: each part's shifted by whole bins
/// into the row's, weighed at the row's maximum `mx` in units of `unit` (the row's mass in
/// [`ESTIMATE_UNITS`]; with none, the grid weighs its bins' masses, and their sum is the row's
/// mass), and the crossing of the mass or of the count; returned with the unit.
fn place_cut(b: &mut Block, input: Input, level: &Level, (mx, unit): (Expr, Option<Expr>)) -> (Placed, Expr) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    let v = |s: &str| format!("{}_{s}", level.name);
    let (bins, grid) = (level.bins, level.grid(input));
    // Another grid's placing may still read its neighbours' counts in the array.
    b.barrier();
    let r = b.let_(&v("r"), Ty::F32, grid.origin(input, mx.clone()));
    let per = b.let_(&v("per"), Ty::U32, (u(bins) + bs.clone() - u(1)) / bs);
    let g0 = b.let_(&v("g0"), Ty::U32, (lid * per.clone()).min(u(bins)));
    let g1 = b.let_(&v("g1"), Ty::U32, (g0.clone() + per).min(u(bins)));
    // Counts at `g`, the most of any one part at `bins + g`, masses at `2 bins + g` (the sums
    // of the parts' fixed-point masses, their high words at `3 bins + g`, then weighed (f32),
    // then the estimate's u32 units).
    let (count, most, mass) = (|g: Expr| g, move |g: Expr| u(bins) + g, move |g: Expr| u(2 * bins) + g);
    let mass_hi = move |g: Expr| u(3 * bins) + g;
    b.for_("g", g0.clone(), g1.clone(), u(1), |b, g| {
        b.store_shared(KEYS, count(g.clone()), u(0));
        b.store_shared(KEYS, most(g.clone()), u(0));
        b.store_shared(KEYS, mass(g.clone()), u(0));
        if level.masses {
            b.store_shared(KEYS, mass_hi(g), u(0));
        }
    });
    b.for_("p", u(0), var("parts"), u(1), |b, p| {
        let mp = b.let_(&v("mp"), Ty::F32, part_m(var("row_slot"), p.clone(), load));
        b.if_(mp.clone().gt(f(f32::NEG_INFINITY)), |b| {
            let shift = b.let_(&v("shift"), Ty::F32, r.clone() - grid.origin(input, mp));
            b.for_("g", g0.clone(), g1.clone(), u(1), |b, g| {
                let at = b.let_(&v("at"), Ty::F32, g.clone().cast(Ty::F32) - shift.clone());
                b.if_(at.clone().ge(f(0.0)).and(at.clone().lt(f(bins as f32))), |b| {
                    let at = b.let_(&v("atu"), Ty::U32, at.cast(Ty::U32));
                    let hist = |k: Expr| load(SCRATCH, slot_word(var("row_slot"), p.clone(), u(HEAD_WORDS) + k));
                    let words = hist(u(level.counts_at) + (at.clone() >> u(1)));
                    let n = b.let_(&v("n"), Ty::U32, (words >> ((at.clone() & u(1)) * u(16))) & u(0xffff));
                    b.store_shared(KEYS, count(g.clone()), load_shared(KEYS, count(g.clone())) + n.clone());
                    b.store_shared(KEYS, most(g.clone()), load_shared(KEYS, most(g.clone())).max(n));
                    if level.masses {
                        // In integers: the merge bounds the estimate's error, which float sums
                        // would make grow with the parts.
                        let x = b.let_(&v("x"), Ty::U32, hist(at));
                        let sum = b.let_(&v("sum"), Ty::U32, load_shared(KEYS, mass(g.clone())) + x.clone());
                        b.store_shared(KEYS, mass(g.clone()), sum.clone());
                        b.if_(sum.lt(x), |b| {
                            b.store_shared(KEYS, mass_hi(g.clone()), load_shared(KEYS, mass_hi(g)) + u(1))
                        });
                    }
                });
            });
        });
    });
    b.let_(&v("own_w"), Ty::F32, f(0.0));
    b.for_("g", g0.clone(), g1.clone(), u(1), |b, g| {
        let k = b.let_(&v("k"), Ty::F32, r.clone() - g.clone().cast(Ty::F32) + f(1.0));
        let edge = b.let_(&v("edge"), Ty::F32, grid.edge(input, k.clone()));
        let weighed = if level.masses {
            // Each bin's masses are at its upper edge, the same value in every part's grid.
            let high = load_shared(KEYS, mass_hi(g.clone())).cast(Ty::F32) * f((1u64 << (32 - HIST_BITS)) as f32);
            let low = load_shared(KEYS, mass(g.clone())).cast(Ty::F32) * f(1.0 / (1u32 << HIST_BITS) as f32);
            (high + low) * values::weight(input, edge, mx.clone())
        } else {
            // A bin's tokens weigh within `2^-shift` of one another: its count at its middle.
            let middle = (edge + grid.edge(input, k - f(1.0))) * f(0.5);
            load_shared(KEYS, count(g.clone())).cast(Ty::F32) * values::weight(input, middle, mx.clone())
        };
        let weighed = b.let_(&v("w"), Ty::F32, weighed);
        b.store_shared(KEYS, mass(g), weighed.clone().bitcast(Ty::U32));
        b.set(&v("own_w"), var(&v("own_w")) + weighed);
    });
    let unit = match unit {
        Some(unit) => unit,
        None => {
            let total = b.reduce(ReduceOp::Sum, Ty::F32, var(&v("own_w")), &v("total"));
            b.let_(&v("unit"), Ty::F32, f(ESTIMATE_UNITS) / total)
        }
    };
    let own = (g0.clone(), g1.clone());
    // Each invocation's own bins: no barrier between the two loops.
    b.for_("g", g0.clone(), g1.clone(), u(1), |b, g| {
        let weighed = load_shared(KEYS, mass(g.clone())).bitcast(Ty::F32);
        b.store_shared(KEYS, mass(g), (weighed * unit.clone()).cast(Ty::U32));
    });
    let range = (g0, g1);
    let margin = u((ESTIMATE_UNITS * level.margin) as u32);
    let (by_mass, start, end, _) =
        crossing(b, (&v("m"), bins), 2 * bins, range.clone(), var("pp").lt(f(1.0)), margin, &|b, _| {
            b.let_(&v("lim"), Ty::U32, (var("pp") * f(ESTIMATE_UNITS)).cast(Ty::U32))
        });
    // The bin of the top-k's last token: the count before it at most `kk - 1`.
    let gate = var("kk").lt(param("vocab"));
    let (by_count, _, _, inside) = crossing(b, (&v("n"), bins), 0, range, gate, u(0), &|_, _| var("kk") - u(1));
    let first = b.let_(&v("first"), Ty::U32, by_mass.clone().max(by_count.clone()));
    let bin = b.let_(&v("cut"), Ty::U32, u(bins) - select(first.clone().gt(u(0)), first.clone(), u(1)));
    // Where the mass places the cut, the neighbour on a side is listed only where the limit
    // lies within the estimate's margin of that side: one bin, not three, in most rows (top-p
    // 0.99 on Zipf rows at T 1.0: 7,000 tokens where three bins held 20,000, more than the
    // parts list).
    let by_mass_first = by_mass.clone().gt(u(0)).and(by_mass.ge(by_count));
    let above = b.let_(&v("above"), Ty::U32, select(by_mass_first.clone(), start, u(RANGE)));
    let below = b.let_(&v("below"), Ty::U32, select(by_mass_first.clone(), end, u(RANGE)));
    // A neighbour that would overflow a part's list where the bin alone would not is left out:
    // the range would take the filter kernel's passes for certain, the bin alone only where the
    // estimate lies on the wrong side of the edge. A part's count in the range is bounded by
    // the sum of each bin's most in any part.
    let one = b.let_(&v("one"), Ty::U32, load_shared(KEYS, most(bin.clone())));
    let lo = bin.clone() - bin.clone().min(above.clone());
    let hi = (bin.clone() + below.clone()).min(u(bins - 1));
    b.let_(&v("wide"), Ty::U32, u(0));
    b.for_("g", lo, hi + u(1), u(1), |b, g| b.set(&v("wide"), var(&v("wide")) + load_shared(KEYS, most(g))));
    let spills = var(&v("wide")).gt(u(PART_LIST)).and(one.le(u(PART_LIST)));
    b.if_(by_mass_first.and(spills), |b| {
        b.set(&v("above"), u(0));
        b.set(&v("below"), u(0));
    });
    let lo = b.let_(&v("first_bin"), Ty::U32, bin.clone() - bin.clone().min(above));
    let hi = b.let_(&v("last_bin"), Ty::U32, bin.clone() + below);
    // The mass above the range, back in the row's weights.
    b.let_(&v("a_own"), Ty::U32, u(0));
    b.for_("g", own.0, own.1, u(1), |b, g| {
        b.if_(g.clone().lt(lo.clone()), |b| b.set(&v("a_own"), var(&v("a_own")) + load_shared(KEYS, mass(g))))
    });
    let above = b.reduce(ReduceOp::Sum, Ty::U32, var(&v("a_own")), &v("a_units"));
    let above = b.let_(&v("a_w"), Ty::F32, above.cast(Ty::F32) / unit.clone());
    (Placed { bin, lo, hi, r, above, found: first.gt(u(0)), inside }, unit)
}

/// After [`place_cut`] summed the row's histogram into the part's workgroup array of keys,
/// its bins' values (u32) at `at + g`, each invocation the bins `range.0..range.1` of the
/// grid's `bins`: where `gate` holds, the first bin whose values summed from the top pass
/// `limit(total)`, as `bins - bin` (0 for none; the largest over the workgroup is the first
/// bin), returned with whether the limit lies within `margin` of that bin's start and of its
/// end (1 or 0 each), and the total.
fn crossing(
    b: &mut Block,
    (name, bins): (&str, u32),
    at: u32,
    range: (Expr, Expr),
    gate: Expr,
    margin: Expr,
    limit: &dyn Fn(&mut Block, Expr) -> Expr,
) -> (Expr, Expr, Expr, Expr) {
    let v = |s: &str| format!("{name}_{s}");
    let bin = |g: Expr| load_shared(KEYS, u(at) + g);
    b.let_(&v("own"), Ty::U32, u(0));
    b.for_("g", range.0.clone(), range.1.clone(), u(1), |b, g| b.set(&v("own"), var(&v("own")) + bin(g)));
    let before = b.scan(var(&v("own")), &v("before"));
    let total = b.reduce(ReduceOp::Sum, Ty::U32, var(&v("own")), &v("total"));
    let lim = limit(b, total.clone());
    b.let_(&v("cum"), Ty::U32, before);
    b.let_(&v("first"), Ty::U32, u(0));
    b.let_(&v("near_start"), Ty::U32, u(0));
    b.let_(&v("near_end"), Ty::U32, u(0));
    b.for_("g", range.0, range.1, u(1), |b, g| {
        let x = b.let_(&v("x"), Ty::U32, bin(g.clone()));
        let cum = var(&v("cum"));
        let passes = gate.clone().and(cum.clone().le(lim.clone())).and((cum.clone() + x.clone()).gt(lim.clone()));
        b.if_(passes, |b| {
            b.set(&v("first"), var(&v("first")).max(u(bins) - g));
            b.set(&v("near_start"), select((lim.clone() - cum.clone()).le(margin.clone()), u(1), u(0)));
            b.set(&v("near_end"), select((cum.clone() + x - lim.clone()).le(margin.clone()), u(1), u(0)));
        });
        b.set(&v("cum"), cum + var(&v("x")));
    });
    let first = b.reduce(ReduceOp::Max, Ty::U32, var(&v("first")), &v("bin"));
    let near_start = b.reduce(ReduceOp::Max, Ty::U32, var(&v("near_start")), &v("bin_start"));
    let near_end = b.reduce(ReduceOp::Max, Ty::U32, var(&v("near_end")), &v("bin_end"));
    (first, near_start, near_end, total)
}

/// Writes this workgroup's winners (`best{suffix}`, `best{suffix}64`, after their block
/// argmaxes) at `at(0..WIN_WORDS)`, by its first invocation.
fn store_winners(b: &mut Block, suffix: &str, at: &dyn Fn(u32) -> Expr) {
    let name = |n: &str| format!("part_best{suffix}{n}");
    let (v, i) = b.argmax(var(&format!("best{suffix}")), var(&format!("best{suffix}_i")), &name(""), &name("_i"));
    let (v64, i64) = b.argmax_of(
        Ty::F64,
        var(&format!("best{suffix}64")),
        var(&format!("best{suffix}64_i")),
        &name("64"),
        &name("64_i"),
    );
    b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| {
        b.store(SCRATCH, at(0), v.bitcast(Ty::U32));
        b.store(SCRATCH, at(1), i);
        store64(b, at(2), v64.bitcast(Ty::U64));
        b.store(SCRATCH, at(4), i64);
    });
}

/// Races the winners a part wrote at `at(0..WIN_WORDS)` into [`declare_best`]'s variables.
fn take_winners(b: &mut Block, at: &dyn Fn(u32) -> Expr) {
    let i = b.let_("w_i", Ty::U32, load(SCRATCH, at(1)));
    b.if_(i.clone().ne_(u(NONE)), |b| keep_lower(b, "", load(SCRATCH, at(0)).bitcast(Ty::F32), i));
    let i64 = b.let_("w_i64", Ty::U32, load(SCRATCH, at(4)));
    b.if_(i64.clone().ne_(u(NONE)), |b| keep_lower(b, "64", load64(at(2)).bitcast(Ty::F64), i64));
}

/// A token above the range in [`cut_part`]'s word of counts (its high half).
const ABOVE_ONE: u32 = 1 << 16;
const _: () = assert!(super::filter_top_k::PART_COLS < ABOVE_ONE);

/// The cut's extreme order values of its classes, each with its start (see [`cut_part`]): the
/// smallest above the range and in it, the largest in it and below it.
const EXTREMES: [(&str, f32); 4] = [
    ("min_above", f32::INFINITY),
    ("min_range", f32::INFINITY),
    ("max_range_v", f32::NEG_INFINITY),
    ("max_below_v", f32::NEG_INFINITY),
];

/// Whether min-p keeps a token of order value `ov` in a row whose largest is `mx`: its weight at
/// least `mp` (every weight is, without min-p). Where a raced column is scored, not where it is
/// read: no column is weighed on the cut's common path.
fn min_p_keeps(input: Input, ov: Expr, mx: Expr) -> Expr {
    var("mp").le(f(0.0)).or(values::order_weight(input, ov, mx).ge(var("mp")))
}

/// The race among a part's range tokens into `bestr`, where they all share one value: only a
/// range of one value too long to list (`tied_range`) takes the parts' winners in it, so a part
/// whose range holds two values leaves its winner there empty, and the cut's loop races no range
/// token (a warp scored a flat row's range tokens one by one there, about 23 a part). From the
/// part's list, a token an invocation, where it holds them all; else (thousands of tied tokens)
/// from the part's `n` columns read again, those `in_range` of value `z`. `mx` is the row's
/// maximum; `race` the row's kind and Philox key.
fn race_tied_range(
    b: &mut Block,
    input: Input,
    race: (Expr, &PhiloxKey),
    (n, mx): (Expr, Expr),
    in_range: &dyn Fn(Expr) -> Expr,
) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    let token = |b: &mut Block, col: Expr, z: Expr| {
        let ov = b.let_("rt_ov", Ty::F32, values::order_value(input, z.clone(), mx.clone()));
        b.if_(min_p_keeps(input, ov.clone(), mx.clone()), |b| race_one(b, input, "r", race.clone(), col, z, ov));
    };
    let listed = b.let_("rt_listed", Ty::U32, load_shared(LISTING, u(0)));
    b.if_else(
        listed.clone().le(u(PART_LIST)),
        |b| {
            b.for_("r", lid, listed.clone(), bs, |b, r| {
                let at = u(HEAD_WORDS + 1) + r * u(2);
                let col = b.let_("rt_col", Ty::U32, load(SCRATCH, slot_word(var("row_slot"), var("part"), at)));
                let z = values::column(b, input, col.clone(), "rt_z");
                token(b, col, z);
            });
        },
        |b| {
            values::for_each_read(b, input, (n.clone(), None), 4, |b, i, _, x| {
                let z = b.let_("rt_z", Ty::F32, values::value(input, x));
                b.if_(in_range(z.clone()), |b| token(b, var("col_lo") + i, z));
            })
        },
    );
}

/// A part of a top-p row in the cut launch (see the module's step 2): its classes' counts, the
/// range's mass, its listed range tokens and its winners, into its record.
fn cut_part(b: &mut Block, input: Input) {
    let lid = builtin(Builtin::LocalId);
    let state = |k: u32| load_settled(SCRATCH, tail_word(var("row_slot"), u(0), k));
    let lo = b.let_("cut_lo", Ty::F32, state(tail::LO).cast(Ty::F32));
    let hi = b.let_("cut_hi", Ty::F32, state(tail::HI).cast(Ty::F32));
    let r = b.let_("grid_r", Ty::F32, state(tail::R).bitcast(Ty::F32));
    let grid = Grid::bound(b, state(tail::SHIFT), "cut_grid");
    let mx = b.let_("part_mx", Ty::F32, state(tail::MX).bitcast(Ty::F32));
    let seeded = b.let_("cut_seeded", Ty::Bool, row_is_seeded());
    let pkey = PhiloxKey::bound(b);
    b.if_(lid.clone().eq_(u(0)), |b| b.store_shared(LISTING, u(0), u(0)));
    b.barrier();
    // The counts above the range and in it, in one word: above in its high half (an
    // invocation reads at most `PART_COLS` columns of a part, under 2^16).
    b.let_("cut_counts", Ty::U32, u(0));
    b.let_("m_range", Ty::U64, Expr::Lit(Lit::U64(0)));
    // Each class's extreme order values as floats, one compare a column (their keys, and the
    // weight of the largest below, once the loop is done: both are monotone in the value).
    for (name, start) in EXTREMES {
        b.let_(name, Ty::F32, f(start));
    }
    // A column's class from its index on the grid, against the row's bounds in the grid's own
    // terms: above where its bin `r - index` is below `lo`, in the range where it is at most
    // `hi` (bins are whole numbers), so no bin is counted a column.
    let above_from = grid.threshold(b, input, r.clone() - lo + f(1.0), "cut_above_from");
    let range_from = grid.threshold(b, input, r.clone() - hi, "cut_range_from");
    // From logits, a column farther than `cut_guard` (in z) from both edges takes its class
    // from its logit alone, against the edges times the temperature: no division a column.
    // The guard, 2^-18 of the edges' and the maximum's sizes, is more than the division's and
    // the products' rounding (2.5 ulp on Vulkan) and than `z - max`'s (the order values of such
    // a column and of one on the edge's other side differ, so the merge's checks that no value
    // spans two classes need only the columns inside the guard, which take the division).
    let edge = |t: &Expr| t.clone() * grid.inv.clone();
    // The sizes summed in either order: the weight below forms the guard again after the loop
    // in the other (any order bounds the roundings, the guard has a margin of 16), so that
    // the compiler does not hold the loop's through it (it spilled there, on sm_75).
    let guard = |later: bool| {
        let sizes = [edge(&above_from).abs(), edge(&range_from).abs(), mx.clone().abs()];
        let size =
            if later { sizes.into_iter().rev().reduce(|a, b| a + b) } else { sizes.into_iter().reduce(|a, b| a + b) };
        size.expect("three sizes") * f(1.0 / 262_144.0) + f(f32::MIN_POSITIVE)
    };
    let sure = match input {
        Input::Logits(_) => {
            let guard = b.let_("cut_guard", Ty::F32, guard(false));
            let above = b.let_("cut_x_above", Ty::F32, (edge(&above_from) + guard.clone()) * var("temp"));
            let below = b.let_("cut_x_below", Ty::F32, (edge(&range_from) - guard) * var("temp"));
            Some((above, below))
        }
        Input::Probs => None,
    };
    b.let_("max_below_x", Ty::F32, f(f32::NEG_INFINITY));
    declare_best(b);
    // The loop once for seeded rows and once for the others (a row is one or the other), so
    // each races with only its own winners' registers live. Only the range's tokens are weighed
    // (the merge bounds the others' masses from the estimate), and min-p is tested where a
    // raced column is scored ([`min_p_keeps`]).
    //
    // A column's class from its value, exactly, its count, the range's mass and listing, the
    // classes' extreme order values and, above the range, its race: `race(b, (col, z, ov))`.
    // (The range's tokens race after the loop, where they may count: [`race_tied_range`].)
    // Every token at or above the range lies within the coarse grid's 32 units of the maximum:
    // it has mass. One below may have none (or be NaN, which no compare passes).
    let classify = |b: &mut Block, col: Expr, z: Expr, ov: Expr, race: &dyn Fn(&mut Block, [Expr; 3])| {
        let least = |b: &mut Block, name: &str| b.set(name, var(name).min(ov.clone()));
        let most = |b: &mut Block, name: &str| b.set(name, var(name).max(ov.clone()));
        b.if_else(
            grid.reaches(input, z.clone(), above_from.clone()),
            |b| {
                b.set("cut_counts", var("cut_counts") + u(ABOVE_ONE));
                least(b, "min_above");
                race(b, [col.clone(), z.clone(), ov.clone()]);
            },
            |b| {
                b.if_else(
                    grid.reaches(input, z.clone(), range_from.clone()),
                    |b| {
                        b.set("cut_counts", var("cut_counts") + u(1));
                        let w = values::order_weight(input, ov.clone(), mx.clone());
                        b.set("m_range", var("m_range") + call(FIXED, vec![w]));
                        least(b, "min_range");
                        most(b, "max_range_v");
                        let at = b.atomic_add(LISTING, u(0), u(1), "cut_at");
                        b.if_(at.clone().lt(u(PART_LIST)), |b| {
                            let own = |k: Expr| slot_word(var("row_slot"), var("part"), k);
                            b.store(SCRATCH, own(u(HEAD_WORDS) + at.clone() * u(2)), order_key(ov.clone()));
                            b.store(SCRATCH, own(u(HEAD_WORDS + 1) + at * u(2)), col.clone());
                        });
                    },
                    |b| b.if_(ov.clone().gt(var("max_below_v")), |b| b.set("max_below_v", ov.clone())),
                );
            },
        );
    };

    let column = |b: &mut Block, i: Expr, x: Expr, race: &dyn Fn(&mut Block, [Expr; 3])| {
        let col = b.let_("col", Ty::U32, var("col_lo") + i);
        // Its value and order value, bound where a branch needs them (the Philox race's
        // `race` uses neither: no division where the class is sure).
        let values = |b: &mut Block| {
            let z = b.let_("cz", Ty::F32, values::value(input, x.clone()));
            let ov = b.let_("cov", Ty::F32, values::order_value(input, z.clone(), mx.clone()));
            (z, ov)
        };
        // A sure column above counts and races; one below only its logit's largest (for its
        // weight, which min-p and `below_ends` need); the others take their class exactly.
        match &sure {
            Some((above, below)) => b.if_else(
                x.clone().ge(above.clone()),
                |b| {
                    b.set("cut_counts", var("cut_counts") + u(ABOVE_ONE));
                    let (z, ov) = values(b);
                    race(b, [col.clone(), z, ov]);
                },
                |b| {
                    b.if_else(
                        x.clone().lt(below.clone()),
                        |b| b.set("max_below_x", var("max_below_x").max(x.clone())),
                        |b| {
                            let (z, ov) = values(b);
                            classify(b, col.clone(), z, ov, race)
                        },
                    )
                },
            ),
            None => {
                let (z, ov) = values(b);
                classify(b, col, z, ov, race)
            }
        }
    };
    let n = var("col_hi") - var("col_lo");
    // The seeded race hashes each column alone: it races where the column is read.
    let seeded_columns = |b: &mut Block| {
        values::for_each_read(b, input, (n.clone(), None), 4, |b, i, _, x| {
            let race = |b: &mut Block, [col, z, ov]: [Expr; 3]| {
                b.if_(min_p_keeps(input, ov.clone(), mx.clone()), |b| {
                    race_one(b, input, "", (boolean(true), &pkey), col, z, ov)
                })
            };
            column(b, i, x, &race)
        })
    };
    // The Philox race reads a quad a step and draws its block once, after its four columns,
    // where any races (`cut_race`: bit `j` for column `j`), and tests the quad as the race from
    // logits does (`race::prune_step`): a flat row races most of its columns.
    let rcp_t = match input {
        Input::Logits(_) => b.let_("cut_rcp_t", Ty::F32, f(1.0) / var("temp")),
        Input::Probs => f(1.0),
    };
    // Whether min-p keeps a raced column of value `z` (tested where it is scored, not read).
    let keeps_value = |z: Expr| min_p_keeps(input, values::order_value(input, z, mx.clone()), mx.clone());
    let philox_columns = |b: &mut Block| {
        let one = |b: &mut Block, i: Expr, j: u8, x: Expr| {
            let race = |b: &mut Block, _: [Expr; 3]| b.set("cut_race", var("cut_race") | u(1 << j));
            column(b, i, x, &race)
        };
        // The quad's four columns at once (all four are read before the first's body). Whether
        // they all lie above the range, each compared on its own (a NaN element, read as it is,
        // fails its compare, where a minimum would pass over it): from logits against the
        // guarded edge (`sure`); from probabilities on their bits, exactly as `Grid::reaches`
        // classes them: at least the edge's bits and below +inf's, as unsigned integers (a
        // negative element's sign bit, a NaN's and +inf's bits fail).
        let quad_above = match &sure {
            Some((above, _)) => {
                let above = above.clone();
                Box::new(move |k: u8| var(&format!("zx{k}")).ge(above.clone())) as Box<dyn Fn(u8) -> Expr>
            }
            None => {
                let edge = b.let_("cut_p_edge", Ty::U32, above_from.clone() << (u(23) - grid.shift.clone()));
                let inf = u(f32::INFINITY.to_bits());
                let room = b.let_("cut_p_room", Ty::U32, inf.max(edge.clone()) - edge.clone());
                Box::new(move |k: u8| (var(&format!("zx{k}")).bitcast(Ty::U32) - edge.clone()).lt(room.clone()))
            }
        };
        // Where they do, as most of a flat row's quads, they count and race with one test and
        // no branch a column; else each column takes its class alone.
        let body = |b: &mut Block, i: Expr, j: u8, _: Expr| {
            if j > 0 {
                return;
            }
            // Set where a step starts, so that it is not live across steps.
            b.set("cut_race", u(0));
            let all = (0..4u8).map(&quad_above).reduce(|a, b| a.and(b)).expect("four columns");
            b.if_else(
                all,
                |b| {
                    b.set("cut_counts", var("cut_counts") + u(4 * ABOVE_ONE));
                    b.set("cut_race", var("cut_race") | u(0xf));
                },
                |b| {
                    for k in 0..4u8 {
                        b.scope(|b| one(b, i.clone() + u(u32::from(k)), k, var(&format!("zx{k}"))));
                    }
                },
            );
        };
        // A raced quad's one test: its raced columns' largest element with the largest of its
        // block's four words (which bounds each raced column's noise too: `values::may_win` is
        // monotone in both) against its invocation's largest screened lower bound (`lo_best`,
        // from the first step on at least the workgroup's). Most quads of a flat row cost their
        // block and this test alone. Where it passes, each raced column's own test, and where
        // that passes and min-p keeps the column, its screen (`values::screen`, two fast logs;
        // `race::bound` keeps the largest lower bound and the two largest upper bounds), not its
        // exact score. A warp screens a column where any of its lanes' does
        // (`docs/cut_scored.py`).
        let screen_quad = |b: &mut Block, i0: Expr| {
            let w = |j: u8| var("cw4").comp(j);
            let raced = |j: u8| (var("cut_race") & u(1 << j)).ne_(u(0));
            let xs = (0..4u8).map(|j| select(raced(j), var(&format!("zx{j}")), values::weightless(input)));
            let xmax = xs.reduce(|a, b| a.max(b)).expect("four columns");
            let wmax = w(0).max(w(1)).max(w(2).max(w(3)));
            let quad = values::may_win(b, input, xmax, rcp_t.clone(), wmax, var("lo_best"), "cut_quad");
            b.if_(quad, |b| {
                for j in 0..4u8 {
                    // The word bound outside the column's scope, so that the four columns'
                    // scopes differ only in names and literals: one procedure in the generated
                    // files.
                    let word = b.let_(&format!("cut_w{j}"), Ty::U32, w(j));
                    b.scope(|b| {
                        let x = var(&format!("zx{j}"));
                        let may = values::may_win(
                            b,
                            input,
                            x.clone(),
                            rcp_t.clone(),
                            word.clone(),
                            var("lo_best"),
                            "cut_may",
                        );
                        b.if_(may.and(raced(j)), |b| {
                            b.if_(keeps_value(values::value(input, x.clone())), |b| {
                                let col = var("col_lo") + i0.clone() + u(u32::from(j));
                                let (lo, up) = values::screen(b, input, x, rcp_t.clone(), word.clone());
                                super::race::bound(b, lo, up, col);
                            });
                        });
                    });
                }
            });
        };
        let raced = || var("cut_race").ne_(u(0));
        let block = |i0: &Expr| pkey.block(var("col_lo") + i0.clone());
        let after = |b: &mut Block, i0: Expr, first: bool| {
            if first {
                // The floor before any screen: the largest of the invocations' first columns'
                // lower bounds from their words' bits (`values::score_floor`, no log), where
                // they race (and min-p keeps them); after the first quads, the largest of
                // their screens' too.
                b.let_("cw4", Ty::U32x4, u32x4(u(0), u(0), u(0), u(0)));
                b.let_("cut_lo0", Ty::F32, f(f32::NEG_INFINITY));
                b.if_(raced(), |b| {
                    b.set("cw4", block(&i0));
                    let x = var("zx0");
                    let kept = (var("cut_race") & u(1)).ne_(u(0)).and(keeps_value(values::value(input, x.clone())));
                    b.if_(kept, |b| b.set("cut_lo0", values::score_floor(input, x, rcp_t.clone(), var("cw4").comp(0))));
                });
                let floor = b.reduce(ReduceOp::Max, Ty::F32, var("cut_lo0"), "cut_first");
                b.set("lo_best", floor);
                b.if_(raced(), |b| screen_quad(b, i0.clone()));
                let floor = b.reduce(ReduceOp::Max, Ty::F32, var("lo_best"), "cut_step");
                b.set("lo_best", floor);
            } else {
                b.if_(raced(), |b| {
                    b.let_("cw4", Ty::U32x4, block(&i0));
                    screen_quad(b, i0.clone());
                });
            }
        };
        b.let_("cut_race", Ty::U32, u(0));
        for (name, ty, start) in [
            ("lo_best", Ty::F32, f(f32::NEG_INFINITY)),
            ("up1", Ty::F32, f(f32::NEG_INFINITY)),
            ("up1_i", Ty::U32, u(NONE)),
            ("up2", Ty::F32, f(f32::NEG_INFINITY)),
        ] {
            b.let_(name, ty, start);
        }
        values::for_each_quad(b, input, n.clone(), body, after);
        // The winner above the range: every exact score lies within its column's bounds, so the
        // winner's upper bound reaches the workgroup's largest lower bound, as does that of any
        // column tied with it. Each invocation scores its best candidate exactly; the rare one
        // with a second (or a column the screen could not bound) scores each of its columns
        // above the range again, exactly (a block a column: a rare path).
        let floor = b.reduce(ReduceOp::Max, Ty::F32, var("lo_best"), "cut_screen_floor");
        b.if_(var("up1_i").ne_(u(NONE)).and(var("up1").ge(floor.clone())), |b| {
            let z = values::column(b, input, var("up1_i"), "cut_win");
            race_philox(b, input, "", &pkey, var("up1_i"), z);
        });
        b.if_(var("up2").ge(floor), |b| {
            // The invocation's own columns, as the loop read them.
            let column = |b: &mut Block, i: Expr, _: u8, x: Expr| {
                let z = b.let_("cut_rz", Ty::F32, values::value(input, x));
                let kept = grid.reaches(input, z.clone(), above_from.clone()).and(keeps_value(z.clone()));
                b.if_(kept, |b| race_philox(b, input, "", &pkey, var("col_lo") + i, z));
            };
            values::for_each_quad(b, input, n.clone(), column, |_, _, _| {})
        });
    };
    b.if_else(seeded.clone(), seeded_columns, philox_columns);
    // The list's stores seen by the whole workgroup (`race_tied_range` reads them).
    b.fence();
    let names = |v: &[&str]| v.iter().map(|n| format!("part_{n}")).collect::<Vec<_>>();
    let halves = vec![var("cut_counts") >> u(16), var("cut_counts") & u(ABOVE_ONE - 1)];
    b.sum_many(Ty::U32, halves, &names(&["n_above", "n_range"]));
    b.reduce(ReduceOp::Sum, Ty::U64, var("m_range"), "part_m_range");
    // The extremes as the merge takes them: keys (0 for a class with no token), the smallest
    // with its bits flipped, and the weight of the largest below (0 for none: exp(-inf)).
    let key_of = |v: &str, least: bool| {
        let empty = if least { var(v).eq_(f(f32::INFINITY)) } else { var(v).eq_(f(f32::NEG_INFINITY)) };
        let key = order_key(var(v));
        select(empty, u(0), if least { key ^ u(NONE) } else { key })
    };
    let weight =
        |ov: Expr| select(ov.clone().eq_(f(f32::NEG_INFINITY)), f(0.0), values::order_weight(input, ov, mx.clone()));
    let mut w_below = weight(var("max_below_v"));
    if sure.is_some() {
        // The sure ones' largest logit's order value, raised by the guard: at least theirs,
        // whatever the division's rounding.
        let ov = values::order_value(input, values::value(input, var("max_below_x")), mx.clone()) + guard(true);
        w_below = w_below.max(weight(ov.min(f(0.0))));
    }
    let w_below = b.reduce(ReduceOp::Max, Ty::F32, w_below, "part_w_below");
    let maxima = ["min_above_not", "min_range_not", "max_range", "max_below"];
    for (name, (v, start)) in maxima.iter().zip(EXTREMES) {
        b.reduce(ReduceOp::Max, Ty::U32, key_of(v, start > 0.0), &format!("part_{name}"));
    }
    // The record and the winners above the range first, so that their values are dead before
    // the range's rare race.
    let one_value = (var("part_min_range_not") ^ u(NONE)).eq_(var("part_max_range"));
    let one_value = b.let_("cut_one_value", Ty::Bool, one_value.and(var("part_n_range").gt(u(0))));
    let at = |k: u32| tail_word(var("row_slot"), var("part"), k);
    store_winners(b, "", &|k| at(tail::BEST + k));
    b.if_(lid.clone().eq_(u(0)), |b| {
        b.store(SCRATCH, at(tail::N_ABOVE), var("part_n_above"));
        b.store(SCRATCH, at(tail::N_RANGE), var("part_n_range"));
        store64(b, at(tail::M_RANGE), var("part_m_range"));
        b.store(SCRATCH, at(tail::LISTED), load_shared(LISTING, u(0)).min(u(PART_LIST)));
        for (name, k) in maxima.iter().zip([tail::MIN_ABOVE_NOT, tail::MIN_RANGE_NOT, tail::MAX_RANGE, tail::MAX_BELOW])
        {
            b.store(SCRATCH, at(k), var(&format!("part_{name}")));
        }
        b.store(SCRATCH, at(tail::W_BELOW), w_below.bitcast(Ty::U32));
    });
    declare_best_as(b, "r");
    b.if_(one_value, |b| {
        let in_range = |z: Expr| {
            grid.reaches(input, z.clone(), range_from.clone()).and(grid.reaches(input, z, above_from.clone()).not())
        };
        race_tied_range(b, input, (seeded.clone(), &pkey), (n.clone(), mx.clone()), &in_range)
    });
    store_winners(b, "r", &|k| at(tail::RBEST + k));
    b.barrier();
}

/// A top-p row in the merge (see the module's step 3), where the estimate found its maximum
/// finite (else the cut launch left it): the parts' records summed and the checks; then the
/// select over the range's tokens in workgroup memory where they fit, or, where they all share
/// one order value, the lowest columns of them that top-p and top-k keep; the race and the
/// results (`one_read_done`). Where a check fails, nothing: the merge runs the filter kernel's
/// body, after the two reads (`reads_before`).
pub(super) fn merge_cut(b: &mut Block, input: Input) {
    let row_slot = b.let_("row_slot", Ty::U32, var("slot"));
    let mx_word = load_settled(SCRATCH, tail_word(row_slot.clone(), u(0), tail::MX));
    let sent = sent_to_cut(b, row_slot.clone());
    b.if_(sent, |b| {
        b.set("reads_before", u(2));
        let mx = b.uniform(mx_word, "cut_mx_word");
        let mx = b.let_("cut_mx", Ty::F32, mx.bitcast(Ty::F32));
        let seeded = b.let_("cut_seeded", Ty::Bool, row_is_seeded());
        cut_row(b, input, mx, seeded);
    });
}

/// [`merge_cut`]'s row, its maximum `mx` known: the parts' records summed, then at most two
/// tries at its set. The first takes the masses above the range and of the row from the
/// estimate's bounds (`tail::BOUNDS`, as fixed-point masses), the second from one more read of
/// the row ([`exact_masses`]), where the first could not tell: where a check holds at one end
/// of the bounds and not at the other, or where the race's winner in the largest set the
/// bounds allow may lie outside the least ([`attempt_cut`]).
fn cut_row(b: &mut Block, input: Input, mx: Expr, seeded: Expr) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    let word = |p: Expr, k: u32| tail_word(var("row_slot"), p, k);
    let counts = ["n_above", "n_range", "short"];
    let maxima = [
        ("min_above_not", tail::MIN_ABOVE_NOT),
        ("min_range_not", tail::MIN_RANGE_NOT),
        ("max_range", tail::MAX_RANGE),
        ("max_below", tail::MAX_BELOW),
    ];
    let mine = |n: &str| format!("r_{n}");
    for name in counts.iter().chain(maxima.iter().map(|(n, _)| n)) {
        b.let_(&mine(name), Ty::U32, u(0));
    }
    b.let_("r_m_range", Ty::U64, Expr::Lit(Lit::U64(0)));
    b.let_("r_w_below", Ty::F32, f(0.0));
    b.for_("p", lid.clone(), var("parts"), bs.clone(), |b, p| {
        let get = |k: u32| load(SCRATCH, word(p.clone(), k));
        let n_range = b.let_("q_n_range", Ty::U32, get(tail::N_RANGE));
        b.set("r_n_above", var("r_n_above") + get(tail::N_ABOVE));
        b.set("r_n_range", var("r_n_range") + n_range.clone());
        b.if_(get(tail::LISTED).lt(n_range), |b| b.set("r_short", u(1)));
        b.set("r_m_range", var("r_m_range") + load64(word(p.clone(), tail::M_RANGE)));
        for (name, k) in maxima {
            b.set(&mine(name), var(&mine(name)).max(get(k)));
        }
        b.set("r_w_below", var("r_w_below").max(get(tail::W_BELOW).bitcast(Ty::F32)));
    });
    let all = |n: &str| format!("{n}_all");
    let outs: Vec<String> = counts.iter().map(|n| all(n)).collect();
    b.sum_many(Ty::U32, counts.iter().map(|n| var(&mine(n))).collect(), &outs);
    b.reduce(ReduceOp::Sum, Ty::U64, var("r_m_range"), "m_range_all");
    for (name, _) in maxima {
        b.reduce(ReduceOp::Max, Ty::U32, var(&mine(name)), &all(name));
    }
    let w_below = b.reduce(ReduceOp::Max, Ty::F32, var("r_w_below"), "w_below_all");
    // No token below the range has mass, or none that min-p keeps.
    b.let_("cut_below_ends", Ty::Bool, w_below.clone().le(f(0.0)).or(w_below.lt(var("mp"))));
    b.let_("cut_retry", Ty::Bool, boolean(false));
    b.for_("cut_try", u(0), u(2), u(1), |b, attempt| {
        b.if_(attempt.clone().eq_(u(0)).or(var("cut_retry")), |b| {
            // The bounds as fixed-point masses (truncated: the most's one unit more), and the
            // row's mass for the log-probability, their middle; each try reads them again, so
            // that nothing but the flag lives across the tries (the merge is at its registers).
            let words: Vec<Expr> = (0..4)
                .map(|k| {
                    let w = load_settled(SCRATCH, tail_word(var("row_slot"), u(0), tail::BOUNDS + k));
                    b.uniform(w, &format!("cut_bound{k}"))
                })
                .collect();
            let state_w = |k: usize| words[k].clone().bitcast(Ty::F32);
            let unit = || Expr::Lit(Lit::U64(1));
            b.let_("a_lo", Ty::U64, call(FIXED, vec![state_w(0)]));
            b.let_("a_hi", Ty::U64, call(FIXED, vec![state_w(1)]) + unit());
            b.let_("tot_lo", Ty::U64, call(FIXED, vec![state_w(2)]));
            b.let_("tot_hi", Ty::U64, call(FIXED, vec![state_w(3)]) + unit());
            b.let_("cut_mass", Ty::F32, (state_w(2) + state_w(3)) * f(0.5));
            b.if_(attempt.gt(u(0)), |b| {
                let (above, row) = exact_masses(b, input, mx.clone());
                for name in ["a_lo", "a_hi"] {
                    b.set(name, above.clone());
                }
                for name in ["tot_lo", "tot_hi"] {
                    b.set(name, row.clone());
                }
                b.set("cut_mass", call(FIXED_F32, vec![row]));
                b.set("reads_before", var("reads_before") + u(1));
            });
            b.set("cut_retry", boolean(false));
            b.scope(|b| attempt_cut(b, input, mx.clone(), seeded.clone()));
        });
    });
}

/// One try of [`cut_row`] at the row's set, from the masses above the range and of the row
/// between `a_lo` and `a_hi`, `tot_lo` and `tot_hi`. Each check holds for certain (at the bounds'
/// worst) or the row goes to the filter kernel's body where it fails at their best, else to
/// the next try (`cut_retry`). The select runs with the largest set the bounds allow (the least
/// mass above, the largest limit), whose race's winner is the row's where the least set holds
/// it too (`cut_sure`, [`winner_surely_kept`]); then the results (`one_read_done`).
///
/// Exact: the classes and counts are integers, the range's masses exact; the checks hold for
/// every mass between the bounds, so for the exact one; and the winner of a set holding the
/// row's set, which it lies in, is its winner.
fn attempt_cut(b: &mut Block, input: Input, mx: Expr, seeded: Expr) {
    let (n_above, n_range) = (var("n_above_all"), var("n_range_all"));
    let m_range = var("m_range_all");
    let min_above = var("min_above_not_all") ^ u(NONE);
    let (range_min, range_max) = (var("min_range_not_all") ^ u(NONE), var("max_range_all"));
    let max_below = var("max_below_all");
    let below_ends = var("cut_below_ends");
    let limit =
        |t: &str| select(var("pp").lt(f(1.0)), call(FRACTION, vec![var("pp"), var(t)]), Expr::Lit(Lit::U64(ALL)));
    let lim_lo = b.let_("lim_lo", Ty::U64, limit("tot_lo"));
    let lim_hi = b.let_("lim_hi", Ty::U64, limit("tot_hi"));
    let listed = b.let_("cut_listed", Ty::Bool, var("short_all").eq_(u(0)));
    let fits = b.let_("cut_fits", Ty::Bool, listed.clone().and(n_range.clone().le(u(CUT_CAP))));
    let apart = min_above.clone().gt(range_max.clone()).and(range_min.clone().gt(max_below.clone()));
    let apart = b.let_("cut_apart", Ty::Bool, apart.and(min_above.gt(max_below)));
    // The set starts before the range's end (its first token is kept: the mass above it within
    // the limit) and ends inside it (the mass through it past the limit, or the top-k's count),
    // or no token below could be kept.
    let checks = |(a_start, lim_start): (&str, Expr), (a_end, lim_end): (&str, Expr)| {
        let starts = n_above.clone().lt(var("kk")).and(var(a_start).le(lim_start));
        let through = (var(a_end) + m_range.clone())
            .gt(lim_end)
            .or((n_above.clone() + n_range.clone()).ge(var("kk")))
            .or(below_ends.clone());
        apart.clone().and(starts).and(through)
    };
    // Min-p alone has no range: every token with mass lies above it or below it, so its set is
    // the tokens above that min-p keeps, which the parts raced, where none below weighs `min_p`.
    // (A row here with neither top-p nor a top-k is min-p alone: from its parameters, not a
    // flag held from the row's start, which took the merge's registers past 128.)
    let min_p_alone = var("pp").ge(f(1.0)).and(var("kk").ge(param("vocab")));
    let sure = checks(("a_hi", lim_lo.clone()), ("a_lo", lim_hi.clone()));
    let sound = b.let_("cut_sound", Ty::Bool, select(min_p_alone.clone(), below_ends.clone(), sure));
    let maybe = checks(("a_lo", lim_hi.clone()), ("a_hi", lim_lo));
    b.if_(sound.clone().not().and(min_p_alone.not()).and(maybe), |b| b.set("cut_retry", boolean(true)));
    let sorted = b.let_("cut_sorted", Ty::Bool, sound.clone().and(fits.clone()));
    let tied = b.let_("cut_one_value", Ty::Bool, range_min.eq_(range_max.clone()).and(n_range.clone().gt(u(0))));
    let flat = b.let_("cut_tied", Ty::Bool, sound.clone().and(fits.clone().not()).and(tied.clone()));
    let dense = b.let_("cut_dense", Ty::Bool, sound.and(listed).and(fits.not()).and(tied.not()));
    // The select's state: what lies above the range, and the limit, at the largest set.
    declare_select(b);
    b.set("sel_n", n_above);
    b.set("sel_m", var("a_lo"));
    b.set("lim", lim_hi);
    // The parts' winners above the range.
    declare_best(b);
    b.for_("p", builtin(Builtin::LocalId), var("parts"), builtin(Builtin::BlockSize), |b, p| {
        take_winners(b, &|k| tail_word(var("row_slot"), p.clone(), tail::BEST + k))
    });
    b.let_("cut_sure", Ty::Bool, boolean(true));
    let pkey = PhiloxKey::bound(b);
    let race = (seeded.clone(), &pkey);
    let listing = sorted.clone().and(n_range.clone().gt(u(0)));
    b.if_(listing, |b| select_in_range(b, input, Range::Copied(n_range.clone()), race.clone(), mx.clone()));
    b.if_(dense.clone(), |b| select_in_range(b, input, Range::Listed, race.clone(), mx.clone()));
    b.if_(flat.clone(), |b| {
        b.set("sel_tn", n_range.clone());
        b.set("sel_tm", m_range.clone());
        tied_range(b, input, range_max, race, mx.clone());
    });
    b.if_(sorted.or(flat).or(dense), |b| {
        b.if_else(
            var("cut_sure"),
            |b| {
                finish_race(b, input, (seeded, &|t| t), mx, var("cut_mass"), var("reads_before"));
                b.set("one_read_done", boolean(true));
            },
            |b| b.set("cut_retry", boolean(true)),
        );
    });
}

/// The exact fixed-point masses above the range (the cut's class, from the row's state) and of
/// the row, where the estimate's bounds could not tell the row's set ([`cut_row`]): one more
/// read of the row, counted in `reads_before` by the caller.
fn exact_masses(b: &mut Block, input: Input, mx: Expr) -> (Expr, Expr) {
    let state = |k: u32| load_settled(SCRATCH, tail_word(var("row_slot"), u(0), k));
    let grid = Grid::bound(b, state(tail::SHIFT), "xm_grid");
    let r = state(tail::R).bitcast(Ty::F32);
    let above_from = grid.threshold(b, input, r - state(tail::LO).cast(Ty::F32) + f(1.0), "xm_above_from");
    b.let_("xm_above", Ty::U64, Expr::Lit(Lit::U64(0)));
    let row = row_mass_and(b, input, mx, &|b, z, m| {
        b.if_(grid.reaches(input, z, above_from.clone()), |b| b.set("xm_above", var("xm_above") + m))
    });
    let row = b.let_("xm_row", Ty::U64, row);
    let above = b.reduce(ReduceOp::Sum, Ty::U64, var("xm_above"), "xm_above_all");
    (above, row)
}

/// Where [`select_in_range`] reads the range's tokens.
enum Range {
    /// Copied into the filter kernels' list, keys then columns, each part's after the earlier
    /// parts': this many (at most [`CUT_CAP`]).
    Copied(Expr),
    /// Where the parts listed them, every part's [`PART_LIST`] places (an empty one's key 0),
    /// their counts copied into the list: a range too long to copy (thousands of tokens of
    /// several values, as Zipf rows at T 0.9 to 1.0 put in a few bins), read from L2 in each
    /// digit pass.
    Listed,
}

/// The range's tokens, from `range`; the filter kernels' digit select over them from the
/// select's state above the range; the race of the kept ones into [`declare_best`]'s variables.
fn select_in_range(b: &mut Block, input: Input, range: Range, race: (Expr, &PhiloxKey), mx: Expr) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    b.barrier();
    let listed = matches!(range, Range::Listed);
    let n = match range {
        Range::Copied(n) => {
            parts_in_order(b, "l", tail::LISTED, &|b, p, n, start| {
                b.for_("li", u(0), n, u(1), |b, i| {
                    let at = b.let_("l_at", Ty::U32, start.clone() + i.clone());
                    let slot = slot_word(var("row_slot"), p.clone(), u(HEAD_WORDS) + i * u(2));
                    b.store_shared(LIST, at.clone(), load(SCRATCH, slot.clone()));
                    b.store_shared(LIST, at + u(CUT_CAP), load(SCRATCH, slot + u(1)));
                });
            });
            n
        }
        Range::Listed => {
            b.for_("p", lid.clone(), var("parts"), bs.clone(), |b, p| {
                b.store_shared(LIST, p.clone(), load(SCRATCH, tail_word(var("row_slot"), p, tail::LISTED)))
            });
            var("parts") * u(PART_LIST)
        }
    };
    b.barrier();
    // Item `i`'s word `k` of its pair where the parts listed it.
    let pair = |i: Expr, k: u32| {
        let p = i.clone() / u(PART_LIST);
        slot_word(var("row_slot"), p.clone(), u(HEAD_WORDS + k) + (i - p * u(PART_LIST)) * u(2))
    };
    let key_of = |b: &mut Block, i: Expr| {
        if listed {
            let p = b.let_("ri_p", Ty::U32, i.clone() / u(PART_LIST));
            b.let_("ri_key", Ty::U32, u(0));
            b.if_((i.clone() - p.clone() * u(PART_LIST)).lt(load_shared(LIST, p)), |b| {
                b.set("ri_key", load(SCRATCH, pair(i, 0)))
            });
            var("ri_key")
        } else {
            load_shared(LIST, i)
        }
    };
    let col_of = |i: Expr| if listed { load(SCRATCH, pair(i, 1)) } else { load_shared(LIST, i + u(CUT_CAP)) };
    b.let_("in_a", Ty::Bool, boolean(false));
    b.for_("digit_pass", u(0), u(DIGIT_PASSES), u(1), |b, pass| {
        b.let_("shift", Ty::U32, u(32 - 4) - pass * u(4));
        count_digits(b, |b| {
            b.for_("i", lid.clone(), n.clone(), bs.clone(), |b, i| {
                let k = key_of(b, i);
                let k = b.let_("dk", Ty::U32, k);
                b.if_(k.clone().ne_(u(0)).and((k.clone() & var("sel_mask")).eq_(var("sel_key"))), |b| {
                    let mv = call(FIXED, vec![values::order_weight(input, key_value(k.clone()), mx.clone())]);
                    add_digit(b, k, mv);
                });
            });
        });
        select_step(b, false);
    });
    ties(b);
    // The tokens of the boundary key kept are the `ties` lowest columns.
    let tied = |b: &mut Block, i: Expr| {
        let k = key_of(b, i.clone());
        let k = b.let_("tk_key", Ty::U32, k);
        select(k.eq_(var("sel_key")), col_of(i) ^ u(NONE), u(0))
    };
    select_top(b, Items { n: n.clone(), top: u(NONE), scratch: SELECT_SCRATCH, key_at: &tied }, var("ties"));
    let tie_col = b.let_("tie_col_max", Ty::U32, var("t_key") ^ u(NONE));
    b.for_("i", lid, n.clone(), bs, |b, i| {
        let k = key_of(b, i.clone());
        let k = b.let_("rk", Ty::U32, k);
        let col = b.let_("rcol", Ty::U32, col_of(i));
        let ov = b.let_("rov", Ty::F32, key_value(k.clone()));
        let tie = k.clone().eq_(var("sel_key")).and(var("ties").gt(u(0))).and(col.clone().le(tie_col.clone()));
        let kept = k.gt(var("sel_key")).or(tie).and(min_p_keeps(input, ov.clone(), mx.clone()));
        b.if_(kept, |b| {
            let z = values::column(b, input, col.clone(), "rz");
            race_one(b, input, "", race.clone(), col, z, ov);
        });
    });
    let unsure = var("lim_lo").ne_(var("lim_hi")).or(var("a_lo").ne_(var("a_hi")));
    b.if_(var("pp").lt(f(1.0)).and(unsure), |b| {
        winner_surely_kept(b, input, (race.0.clone(), mx.clone()), (n.clone(), &key_of, &col_of))
    });
}

/// Sets `cut_sure` to whether the race's winner so far is kept at the least set the bounds
/// allow: the mass ahead of it (the range's tokens ahead of it in the order, from `key_of` and
/// `col_of` of the range's `n` items, with the most mass above the range) within the least
/// limit. A winner above the range has none of the range's ahead of it.
fn winner_surely_kept(
    b: &mut Block,
    input: Input,
    (seeded, mx): (Expr, Expr),
    (n, key_of, col_of): (Expr, &dyn Fn(&mut Block, Expr) -> Expr, &dyn Fn(Expr) -> Expr),
) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    let (_, tok32) = b.argmax(var("best"), var("best_i"), "sk_win", "sk_tok32");
    let (_, tok64) = b.argmax_of(Ty::F64, var("best64"), var("best64_i"), "sk_win64", "sk_tok64");
    let tok = b.let_("sk_tok", Ty::U32, select(seeded, tok64, tok32));
    let valid = b.let_("sk_valid", Ty::Bool, tok.clone().lt(param("vocab")));
    let z = values::column(b, input, select(valid.clone(), tok.clone(), u(0)), "sk_z");
    let key = b.let_("sk_key", Ty::U32, order_key(values::order_value(input, z, mx.clone())));
    b.let_("sk_ahead", Ty::U64, Expr::Lit(Lit::U64(0)));
    b.for_("i", lid, n, bs, |b, i| {
        let k = key_of(b, i.clone());
        let k = b.let_("sk_k", Ty::U32, k);
        let ahead = k.clone().gt(key.clone()).or(k.clone().eq_(key.clone()).and(col_of(i).lt(tok.clone())));
        b.if_(k.clone().ne_(u(0)).and(ahead), |b| {
            let w = values::order_weight(input, key_value(k), mx.clone());
            b.set("sk_ahead", var("sk_ahead") + call(FIXED, vec![w]));
        });
    });
    let ahead = b.reduce(ReduceOp::Sum, Ty::U64, var("sk_ahead"), "sk_ahead_all");
    b.set("cut_sure", valid.not().or((var("a_hi") + ahead).le(var("lim_lo"))));
}

/// Visits the row's parts in order, a block of them at once: `body(p, n, start)` with part `p`'s
/// record word `k` (`n`) and the sum of that word over the parts before it (`start`); `n` is 0
/// past the last part. `name` prefixes the variables it declares.
fn parts_in_order(b: &mut Block, name: &str, k: u32, body: &dyn Fn(&mut Block, Expr, Expr, Expr)) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    let v = |s: &str| format!("{name}_{s}");
    b.let_(&v("base"), Ty::U32, u(0));
    b.for_(&v("c0"), u(0), var("parts"), bs, |b, c0| {
        let p = b.let_(&v("p"), Ty::U32, c0 + lid);
        b.let_(&v("n"), Ty::U32, u(0));
        b.if_(p.clone().lt(var("parts")), |b| b.set(&v("n"), load(SCRATCH, tail_word(var("row_slot"), p.clone(), k))));
        let from = b.scan(var(&v("n")), &v("from"));
        let chunk = b.reduce(ReduceOp::Sum, Ty::U32, var(&v("n")), &v("chunk"));
        let start = b.let_(&v("start"), Ty::U32, var(&v("base")) + from);
        body(b, p, var(&v("n")), start);
        b.set(&v("base"), var(&v("base")) + chunk);
    });
}

/// A range whose tokens all have the order value of `key` (a flat row, say), too many to list:
/// they are ranked by column, and weigh the same, so top-p and top-k keep the lowest `ties` of
/// them (arithmetic; min-p keeps all or none), at the largest set the bounds allow. Those of
/// the parts before the part where that count ends are raced from the parts' winners in the
/// range; that part's kept ones by one more read of its columns (a part, not the row), in
/// order, those past the least set's count apart: `cut_sure` where they lie in that part and
/// none of them beats the rest.
fn tied_range(b: &mut Block, input: Input, key: Expr, race: (Expr, &PhiloxKey), mx: Expr) {
    let (lid, bs) = (builtin(Builtin::LocalId), builtin(Builtin::BlockSize));
    ties(b);
    // As many as the least set the bounds allow keeps (`attempt_cut`): ranks from it to `t` are
    // unsure.
    b.let_("t_least", Ty::U32, u(0));
    b.scope(|b| {
        // The least set's mass above and limit for the count, then the largest set's again.
        let held = (b.let_("t_sel_m", Ty::U64, var("sel_m")), b.let_("t_lim", Ty::U64, var("lim")));
        b.set("sel_m", var("a_hi"));
        b.set("lim", var("lim_lo"));
        ties(b);
        b.set("t_least", var("ties"));
        b.set("sel_m", held.0);
        b.set("lim", held.1);
    });
    let by_min_p = b.let_("t_min_p", Ty::Bool, min_p_keeps(input, key_value(key.clone()), mx.clone()));
    let t = b.let_("t_kept", Ty::U32, select(by_min_p.clone(), var("ties"), u(0)));
    let unsure = b.let_("t_unsure", Ty::U32, t.clone() - select(by_min_p, var("t_least"), u(0)));
    b.let_("t_part", Ty::U32, u(0));
    b.let_("t_left", Ty::U32, u(0));
    parts_in_order(b, "t", tail::N_RANGE, &|b, p, n, start| {
        b.if_(n.clone().gt(u(0)), |b| {
            b.if_else(
                (start.clone() + n).le(t.clone()),
                |b| take_winners(b, &|k| tail_word(var("row_slot"), p.clone(), tail::RBEST + k)),
                |b| {
                    b.if_(start.clone().lt(t.clone()), |b| {
                        b.set("t_part", p.clone() + u(1));
                        b.set("t_left", t.clone() - start.clone());
                    })
                },
            );
        });
    });
    let part = b.reduce(ReduceOp::Max, Ty::U32, var("t_part"), "t_cut_part");
    let left = b.reduce(ReduceOp::Max, Ty::U32, var("t_left"), "t_cut_left");
    // The unsure ranks lie in the part read again (or there are none), its ranks from
    // `left - unsure` on, which race apart: sure where none beats the rest.
    b.set("cut_sure", unsure.clone().eq_(u(0)).or(part.clone().gt(u(0)).and(unsure.clone().le(left.clone()))));
    declare_best_as(b, "u");
    b.if_(part.clone().gt(u(0)), |b| {
        // That part's columns in chunks, in order: each invocation's tied tokens, then their ranks.
        let per = quads_per_part(var("parts")) * u(4);
        let lo = b.let_("t_lo", Ty::U32, ((part - u(1)) * per.clone()).min(param("vocab")));
        let n = b.let_("t_cols", Ty::U32, (lo.clone() + per).min(param("vocab")) - lo.clone());
        let each = b.let_("t_each", Ty::U32, (n.clone() + bs.clone() - u(1)) / bs);
        let first = b.let_("t_first", Ty::U32, lo.clone() + (lid.clone() * each.clone()).min(n.clone()));
        let last = b.let_("t_last", Ty::U32, lo + (lid * each.clone() + each).min(n));
        // The column's value and order value, and whether it has the range's order value.
        let tied = |b: &mut Block, col: Expr| {
            let z = values::column(b, input, col, "tz");
            let o = b.let_("tov", Ty::F32, values::order_value(input, z.clone(), mx.clone()));
            let is = order_key(o.clone()).eq_(key.clone()).and(values::has_mass(input, z.clone()));
            (z, o, is)
        };
        b.let_("t_mine", Ty::U32, u(0));
        b.for_("col", first.clone(), last.clone(), u(1), |b, col| {
            let (_, _, is) = tied(b, col);
            b.if_(is, |b| b.set("t_mine", var("t_mine") + u(1)));
        });
        let rank = b.scan(var("t_mine"), "t_rank0");
        b.let_("t_rank", Ty::U32, rank);
        b.for_("col", first, last, u(1), |b, col| {
            let (z, o, is) = tied(b, col.clone());
            b.if_(is, |b| {
                b.if_(var("t_rank").lt(left.clone()), |b| {
                    b.if_else(
                        (var("t_rank") + unsure.clone()).lt(left.clone()),
                        |b| race_one(b, input, "", race.clone(), col.clone(), z.clone(), o.clone()),
                        |b| race_one(b, input, "u", race.clone(), col.clone(), z.clone(), o.clone()),
                    )
                });
                b.set("t_rank", var("t_rank") + u(1));
            });
        });
    });
    let (v, i) = b.argmax(var("best"), var("best_i"), "t_win", "t_win_i");
    let (vu, iu) = b.argmax(var("bestu"), var("bestu_i"), "t_winu", "t_winu_i");
    let (v64, i64) = b.argmax_of(Ty::F64, var("best64"), var("best64_i"), "t_win64", "t_win64_i");
    let (vu64, iu64) = b.argmax_of(Ty::F64, var("bestu64"), var("bestu64_i"), "t_winu64", "t_winu64_i");
    let beats = |v: Expr, i: Expr, by: Expr, by_i: Expr| by.clone().gt(v.clone()).or(by.eq_(v).and(by_i.lt(i)));
    let unsure_wins = select(race.0, beats(v64, i64, vu64, iu64), beats(v, i, vu, iu));
    b.set("cut_sure", var("cut_sure").and(unsure_wins.not()));
}

/// Whether the row (after `one_read_row`) may take the cut: a top-p row, or min-p alone, which
/// its parts may send there ([`min_p_state`]).
pub(super) fn may_cut() -> Expr {
    var("top_p_cut").or(var("min_p_cut"))
}

/// Whether the parts of the row in slot `row_slot` sent it to the cut (its state's `GO`): a
/// top-p row whose maximum is finite, or min-p alone whose set is longer than their lists
/// ([`min_p_state`]).
pub(super) fn sent_to_cut(b: &mut Block, row_slot: Expr) -> Expr {
    row_go(b, row_slot).eq_(u(1))
}

/// The row's state's `GO` word, as the parts launch left it (in a later launch), uniform: it
/// decides branches around barriers.
pub(super) fn row_go(b: &mut Block, row_slot: Expr) -> Expr {
    b.uniform(load_settled(SCRATCH, tail_word(row_slot, u(0), tail::GO)), "row_go")
}

/// A row of min-p alone (`min_p_cut`), by its last part in the parts launch: where some part
/// left out a token min-p keeps (its set is longer than a part's list), the cut takes the row
/// with no range (every token within the coarse grid's 32 units of the maximum lies above it,
/// raced there where min-p keeps it), and the merge checks that no token below weighs `min_p`.
/// Else, where some part raced its band (a flat row's, `filter_min_p.rs`), `GO` 2: the merge
/// decides it from the lists and the winners. Else `GO` 0: the merge decides it from the
/// candidates.
pub(super) fn min_p_state(b: &mut Block, input: Input) {
    let (mx, finite) = row_max(b, var("row_slot"), load);
    let mx = b.let_("mp_mx", Ty::F32, mx);
    let finite = b.let_("mp_finite", Ty::Bool, finite);
    let long = left_out_kept(b, input, (var("row_slot"), mx.clone()), load);
    let raced = filter_min_p::any_raced(b);
    let go = select(finite.clone().and(long), u(1), select(finite.and(raced), u(GO_RACED), u(0)));
    let grid = (COARSE.grid(input).origin(input, mx.clone()), u(COARSE.shift(input)));
    // No mass above its empty range; the row's mass only for the log-probability.
    let mass = parts_mass(b, input, (var("row_slot"), mx.clone()), load);
    let bounds = [f(0.0), f(0.0), mass.clone(), mass];
    write_state(b, go, (u(BINS), u(BINS - 1)), grid, mx, bounds);
}

/// The row's state for the cut (by its first invocation): whether the cut takes the row
/// (`go`, 1 or 0), the range of bins it lists (first and last), the grid's origin at the row's
/// maximum and its shift, the maximum `mx`, the mass bounds ([`estimate_bounds`]), and no part
/// arrived yet.
fn write_state(b: &mut Block, go: Expr, (lo, hi): (Expr, Expr), (r, shift): (Expr, Expr), mx: Expr, bounds: [Expr; 4]) {
    let state = |k: u32| tail_word(var("row_slot"), u(0), k);
    b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| {
        for (k, bound) in (0u32..).zip(bounds) {
            b.store(SCRATCH, state(tail::BOUNDS + k), bound.bitcast(Ty::U32));
        }
        b.store(SCRATCH, state(tail::GO), go);
        b.store(SCRATCH, state(tail::LO), lo);
        b.store(SCRATCH, state(tail::HI), hi);
        b.store(SCRATCH, state(tail::R), r.bitcast(Ty::U32));
        b.store(SCRATCH, state(tail::SHIFT), shift);
        b.store(SCRATCH, state(tail::MX), mx.bitcast(Ty::U32));
        b.store(SCRATCH, state(tail::ARRIVED), u(0));
    });
}

/// A part of a top-p row where the merge launch is also the cut's (`FLAG_CUT_HERE`, a
/// workgroup per part of each row, `part` its place): the part's cut ([`cut_part`]) over its
/// columns, then it counts itself in on the row's state, and only the last part to arrive
/// merges the row (`merges`). A row the estimate left (its maximum not finite) is merged by its
/// part 0, as every row the cut does not take. One launch fewer than the cut's own: a batch
/// with a few top-p rows (`Sampler::step`'s mixed batch) is bound by launches, not by the read.
pub(super) fn cut_here(b: &mut Block, input: Input) {
    let row_slot = b.let_("row_slot", Ty::U32, var("slot"));
    let sent = sent_to_cut(b, row_slot.clone());
    b.if_(sent, |b| {
        let (lo, hi) = part_columns(var("part"), quads_per_part(var("parts")));
        b.set("col_lo", lo);
        b.set("col_hi", hi);
        b.scope(|b| cut_part(b, input));
        b.set("col_lo", u(0));
        b.set("col_hi", param("vocab"));
        b.set("merges", boolean(false));
        last_part_on(b, SCRATCH, tail_word(row_slot, u(0), tail::ARRIVED), |b| b.set("merges", boolean(true)));
    });
}

/// The workgroup memory of [`cut_part`]: its count of listed range tokens.
pub(super) fn cut_shared() -> SharedDecl {
    SharedDecl::atomic(LISTING, 1)
}

fn cut_kernel(input: Input) -> Kernel {
    let mut b = Block::new();
    for_each_row_part_at(&mut b, listed_row, |b| {
        let takes = takes_row(b);
        b.if_(takes, |b| {
            let one = one_read_row(b);
            let sent = sent_to_cut(b, var("row_slot"));
            b.if_(one.and(may_cut()).and(sent), |b| b.scope(|b| cut_part(b, input)));
        });
    });
    let mut buffers = filter_inputs(input);
    buffers.extend([buffer("listed", Storage::U32, false), partials_buffer()]);
    let doc = "top-p rows without a small top-k, after top_k_parts: each part's second read, its classes and winners";
    let name = format!("top_p_cut_{}", input.suffix());
    let mut k = kernel(name, doc, 1, buffers, functions(true), b);
    k.workgroup = Workgroup::Part;
    k.shared.push(cut_shared());
    // Its read waits on loads (a step of four columns a DRAM round trip), so more blocks an SM
    // take fewer rounds: four at 64 registers, where ptxas chose three at 80 (with the column
    // loop split by seeded rows, nothing spills; before, held at 64 it spilled 24 bytes).
    k.occupancy = Occupancy::AtLeast(4);
    k
}

/// The cut kernels, per input of the path.
pub fn all() -> Vec<Kernel> {
    super::filter_top_k::inputs().into_iter().map(cut_kernel).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`histogram_part`]'s integer bins from logits, as its IR computes them (a saturating
    /// floor, an arithmetic shift, u32 differences), against the grids' floats (`Grid::index`,
    /// `Grid::origin`, `Grid::edge`) in f64: the same bin on both grids for every value a part
    /// of a placed row bins, no bin for a value far below or for [`unbinned`]'s, and the cut's f32
    /// thresholds whole. It fails with rows placed up to 70000 from 0 (a saturated index, another
    /// bin), with the fine grid placed up to 32768 (a threshold of -244903936 for -244903935), or
    /// with the edge's
    /// bits one short.
    #[test]
    fn integer_bins_are_the_grids() {
        let input = Input::Logits(super::super::abi::Dtype::F32);
        let (coarse, fine) = (COARSE.shift(input), FINE.shift(input));
        let floor_i32 = |x: f32| x.floor() as i32; // `as` saturates, as `FloorI32` does
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..200_000 {
            // A part's largest within 32 of a placed row's largest, and a value below it (on the
            // grids' edges a tenth of the time).
            let m = ((2.0 * next() - 1.0) * PLACED as f64) as f32;
            let mut z = (m as f64 - 40.0 * next()) as f32;
            if next() < 0.1 {
                z = ((z as f64 * 16.0).floor() / 16.0) as f32;
            }
            let low = floor_i32(-m * (1u32 << fine) as f32);
            let (ru, rfu) = (0u32.wrapping_sub((low >> (fine - coarse)) as u32), 0u32.wrapping_sub(low as u32));
            let fi = floor_i32(z * (1u32 << fine) as f32);
            let ci = fi >> (fine - coarse);
            let (g, gf) = (ru.wrapping_sub(ci as u32), rfu.wrapping_sub(fi as u32));
            // The floats' bins, in f64 (the products by powers of two are exact in f32 too).
            let origin = |s: u32| (m as f64 * (1u64 << s) as f64).ceil();
            let index = |s: u32| (z as f64 * (1u64 << s) as f64).floor();
            let want = |s: u32, bins: u32| Some(origin(s) - index(s)).filter(|&b| b < bins as f64);
            assert_eq!(Some(g as f64).filter(|_| g < BINS), want(coarse, BINS), "coarse bin of {z} below {m}");
            assert_eq!(Some(gf as f64).filter(|_| gf < FINE_BINS), want(fine, FINE_BINS), "fine bin of {z}");
            // The cut's thresholds in f32, the origin less a bin's count plus one (`cut_part`'s
            // `r - lo + 1`), are the whole numbers they stand for: the coarse grid's in every
            // placed row, the fine grid's where it is placed.
            for (s, bins) in [(coarse, BINS), (fine, FINE_BINS)] {
                if s == fine && m.abs() >= FINE_PLACED {
                    continue;
                }
                let r = -(-m * (1u32 << s) as f32).floor();
                for g in [0, 1, bins / 2, bins - 1, bins] {
                    let t = r - g as f32 + 1.0;
                    assert_eq!(t as f64, origin(s) - g as f64 + 1.0, "threshold {g} on grid {s} below {m}");
                }
            }
            // The edge above a coarse bin, from its index's bits.
            let above = f32::from_bits((ci as u32).wrapping_add(MAGIC.to_bits() + 1)) - MAGIC;
            assert_eq!(above as f64, index(coarse) + 1.0, "edge above {z}");
            // A value far below, and the read's value for no mass, take no bin.
            for far in [f32::from_bits(unbinned(input)), -1e30, -65537.0] {
                let fi = floor_i32(far * (1u32 << fine) as f32);
                assert!(ru.wrapping_sub((fi >> (fine - coarse)) as u32) >= BINS, "{far} binned below {m}");
                assert!(rfu.wrapping_sub(fi as u32) >= FINE_BINS, "{far} finely binned below {m}");
            }
        }
    }
}
