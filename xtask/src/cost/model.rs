//! The time of one call, modelled from a kernel's counted loops, its occupancy and the hardware
//! table; never measured.
//!
//! A launch of `g` workgroups on `n` SMs: the busiest SM gets `ceil(g / n)` of them and runs
//! `k = min(resident, ceil(g / n))` at once. Each thread's iteration of a streaming loop costs the
//! SM `max(issue, latency)`: issue is the `k` blocks' threads' instructions over each pipe's lanes
//! (and over the schedulers' issue rate), latency is one load's round trip plus the warp's own
//! instructions (a loop's loads are not issued ahead of the previous iteration's use). The whole
//! device is also bound by the bytes moved over DRAM or L2 bandwidth. A call costs a fixed
//! overhead and, per launch, the larger of its work and the launch interval of a stream.

use super::hardware::Hardware;
use super::plan::Launch;
use super::sass::{Counts, Loop, OnChip, Pipe, PIPES};

/// What the model knows of one kernel on one target.
#[derive(Clone)]
pub struct Kernel {
    pub name: String,
    pub loops: Vec<Loop>,
    /// Its loops over workgroup memory, in code order.
    pub onchip: Vec<OnChip>,
    /// Bytes of one column of what its streaming loops read.
    pub elem: f64,
    pub registers: u32,
    pub shared: u32,
    pub block: u32,
    /// Resident blocks per SM and the share of warp slots they fill.
    pub resident: u32,
    pub occupancy: f64,
}

/// The share of columns a warp still scores where a noise bound from the column's random bits
/// skips the rest: a numpy simulation of the race's rule (`docs/race-design.md`, stage E), which
/// the seeded sampler's bound follows column for column.
const SCORED: f64 = 0.035;

/// The kernels that run the race from logits (the fast-log screen and the pruning).
fn races_logits(kernel: &str) -> bool {
    kernel.starts_with("race_logits") || kernel.starts_with("sample_")
}

/// The seeded sampler's kernels from logits (its fast-log screen and its noise bound).
fn seeds_logits(kernel: &str) -> bool {
    kernel.starts_with("seeded_logits")
}

/// Rates at which the instructions off a loop's common path run, per column, with the reason.
pub fn rare_rate(kernel: &str) -> (f64, &'static str) {
    if races_logits(kernel) {
        (0.01, "assumed: the fast-log screen sends about 1 column in 100 to the exact rescoring")
    } else if seeds_logits(kernel) {
        (
            0.01,
            "assumed, as the race's: beyond the screen (its kept path), the float64 scoring of a column whose \
             screen reaches the floor and the slow paths of divisions, about 1 column in 100",
        )
    } else if kernel.starts_with("filter_") {
        (
            0.133,
            "assumed: a digit pass lists the columns matching the select's prefix, all of them at the first \
             pass and 1/16 fewer at each of the next (mean over 8 passes of 16^-k)",
        )
    } else {
        (0.0, "none counted: the branches off the common path are error and subnormal paths")
    }
}

/// Kernels whose streaming loops after their first `n` of at least `least` (in code order) run
/// rarely, with the reason: `Some((n, least, reason))`, for a call of at most `n` passes
/// (`cargo xtask cost` fails where such a kernel has fewer loops). Without it the model takes a
/// kernel's costliest loops as its passes, which for these is a rare one.
pub fn rare_loops(kernel: &str) -> Option<(usize, usize, &'static str)> {
    if seeds_logits(kernel) {
        Some((
            1,
            3,
            "the seeded sampler from logits reads its row in its first loop; the next merges a row's chunk records \
             (once a row, a word a chunk) and the last is the rescan of an invocation with two possible winners or of \
             a row whose screen cannot hold (+inf, all -inf, |max| >= 2^20): counted at the rare rate",
        ))
    } else if kernel.starts_with("top_p_cut") {
        Some((
            1,
            2,
            "a part reads its columns in its first loop for the Philox race's rows (the benchmark's); the others \
             are SGLang's seeded sampler's (which hash each column apart), the rescan of an invocation with two \
             possible winners, and the race of a range of one value (from its list, or its columns again): \
             counted at the rare rate, none",
        ))
    } else if kernel.starts_with("top_k_parts_") {
        // Taken as passes, the estimate's loop of 8 word loads looked costlier a column than the
        // read once it gained three instructions (the parts from probabilities at 256 x 151936
        // on the H200: 136.8 -> 165.2 µs).
        Some((
            2,
            4,
            "the one-read path's parts read their columns in their first two loops (a top-p row's part, which bins \
             them, and any other's); the rest are a row's last part estimating the top-p cut from the other parts' \
             histograms, once a row: counted at the rare rate, none (two or three loops: ptxas makes a second copy \
             of one from some changes to the next)",
        ))
    } else {
        None
    }
}

/// The share of columns that take a loop's kept path (its noise and log) where its common path
/// prunes them, with the reason. The race's pruning needs a column's `l / T` more than 19.45
/// below the best score: model-like rows at T >= 0.8 (the benchmarks'), and flat rows at any T,
/// keep every quad (`docs/race-design.md`), so the model counts every column as kept; it is a
/// bound for peaked rows and low temperatures, which prune. The seeded sampler from logits'
/// kept path is its screen (two fast logs), which its noise bound leaves to a few columns.
pub fn kept_share(kernel: &str) -> (f64, &'static str) {
    if races_logits(kernel) {
        (1.0, "every column kept: model-like rows at T >= 0.8 and flat rows prune no quad")
    } else if seeds_logits(kernel) {
        (
            SCORED,
            "the screen (two fast logs) for the columns whose noise bound, from the hash's bits, reaches the \
             floor: a warp screens about 3.5% of them (the race's simulation, the same rule a column)",
        )
    } else {
        (0.0, "no pruning")
    }
}

/// The share of a kept quad's columns whose screened score (the two logs) a warp runs, where
/// the loop's noised path skips them by the word's noise bound (`race.rs`, `noise_bound`),
/// with the reason. A warp runs a column's score when any of its 32 lanes' columns passes.
pub fn scored_share(kernel: &str) -> (f64, &'static str) {
    if races_logits(kernel) {
        (
            SCORED,
            "a numpy simulation of the kernel's rule (docs/race-design.md): model-like and flat rows at T 0.6 to 1.0, \
             2 to 37 parts a row, warps of 32 score 0.9% to 3.3% of the columns",
        )
    } else {
        (0.0, "no noise bound")
    }
}

/// The select of a `top_k_parts_*` kernel, on chip after its read: the rounds after its first
/// that it runs on average (its rounds times the share of parts whose boundary bin is too full
/// to list), and the share of the keys on the rounds' loops' costliest paths (a key listed, or
/// counted in a further round), with the reason. The first round's count rides on the part's
/// sum, a loop of its own; the listing comes after the rounds and runs once.
pub fn select_rule(kernel: &str) -> Option<(f64, f64, &'static str)> {
    const FULL_SHARE: f64 = 0.0;
    kernel.starts_with("top_k_parts_").then_some((
        (crate::kernels::select::ROUNDS - 1) as f64 * FULL_SHARE,
        0.0,
        "a numpy run of the select's bins on parts of 4096 (docs/select_bins.py: Zipf 1.1, flat and peaked rows, T \
         0.6 to 1.0, k + 1 = 21 and 51): no part's boundary bin holds more keys than the list (a median of 3 to 20 \
         keys, at most 206, listed of 4096), so none bins again; at k + 1 = 257, 4 of 500 Zipf parts do",
    ))
}

/// The share of columns that take a loop's massed path (a fixed-point mass added to a 64-bit
/// sum) where its common path is a column of zero weight, with the reason.
pub fn massed_share(kernel: &str) -> (f64, &'static str) {
    if kernel.starts_with("top_p_cut") {
        (
            0.02,
            "only the cut's range weighs its tokens (the merge bounds the others' masses from the estimate): one to \
             three bins, at most 2% of a row's columns (a flat row's fine bin holds 850 to 2,500 of 151,936 at T 0.6 \
             to 1.0; a Zipf row's coarse bin at top-p 0.9, tens)",
        )
    } else {
        (0.0, "no column weighs 0 on the loop's common path, or none is counted")
    }
}

/// The share of a top-p part's keys that its histograms' loop also bins on the fine grid (the
/// top 1023 bins of 2^-15 below the part's largest), where the rows are not flat, with the
/// reason: the loop is counted along its path that weighs each key into its coarse bin, and its
/// costliest path beyond that at this share. A flat row bins every key on both grids
/// ([`Kernel::of_flat_rows`]).
pub fn fine_share() -> (f64, &'static str) {
    (
        0.00026,
        "a numpy run of the parts' rule (docs/fine_share.py: parts of 4096, Zipf 1.1 rows at T 0.6 to 1.0): a part's \
         largest key and about one in 10,000 more lie within the fine grid's 1023 bins below it",
    )
}

/// How a flat row's columns take a loop that races the kept ones (the top-p cut's Philox loop,
/// `filter_top_p.rs`): the share of its quads that race (draw the block and test each column's
/// noise bound), and the share of its column slots whose score (the screen, two fast logs) a
/// warp runs, with the reason. Model-like rows race few of their columns there (top-p 0.9 keeps
/// 300 to 700 tokens of Zipf rows at T 0.8), which the model counts as none.
pub fn flat_race(kernel: &str) -> Option<(f64, f64, &'static str)> {
    kernel.starts_with("top_p_cut").then_some((
        1.0,
        0.058,
        "top-p 0.9 keeps 90% of a flat row's tokens, so nearly every quad races; a numpy simulation of the \
         cut's rule (docs/cut_scored.py: parts of 4096, blocks of 256, the workgroup's floor from its first \
         columns' bits and then its first quad's screens, a test a quad, the range's tokens raced after the \
         loop) has warps of 32 screen 5.8% of the column slots (T 0.6 and 0.8); the columns' own tests of \
         the 20% of quad steps that pass theirs are counted with the screened column's alone",
    ))
}

/// On flat rows, the share of a min-p part's band keys (every key of a flat part) that its race
/// scores exactly, with the reason: each quad draws its block, and each key beyond it is tested
/// against the best so far or the workgroup's floor, shared as the cut's is.
pub fn flat_band_race(kernel: &str) -> Option<(f64, &'static str)> {
    kernel.starts_with("top_k_parts").then_some((
        0.111,
        "min-p 0.05 keeps every token of a flat row and each part races its band, which holds every key; its floor \
         is shared after its first column and its first quad, as the top-p cut's was before its first column's \
         screen, whose simulation (docs/cut_scored.py) had warps of 32 score 11.1% of the column slots",
    ))
}

impl Kernel {
    /// The kernel as a flat row takes it ([`flat_race`]): each streaming loop with a noised path
    /// (a quad's block and noise tests) and a scored one (a column's exact score, or where the
    /// loop scores none exactly its screen, the kept path) gains, an iteration, the block's path
    /// over the common one at the raced share, and the score beyond the block's path once for
    /// each of its columns at the scored share.
    pub fn of_flat_rows(&self) -> Kernel {
        // A flat row's keys all lie within the fine grid: its histograms' loop takes every bin;
        // and within a min-p part's band: its race draws a block every quad.
        let band = flat_band_race(&self.name);
        let onchip = self
            .onchip
            .iter()
            .map(|l| {
                let common = match (&l.raced, band) {
                    (Some((noised, scored)), Some((share, _))) => {
                        noised.plus(&scored.plus(&noised.scaled(-1.0)).scaled(share * l.visits))
                    }
                    _ => l.common,
                };
                OnChip { weighed: None, common, ..l.clone() }
            })
            .collect();
        let Some((raced, scored, _)) = flat_race(&self.name) else { return Kernel { onchip, ..self.clone() } };
        let loops = self
            .loops
            .iter()
            .map(|l| match (&l.noised, l.scored.as_ref().or(l.kept.as_ref())) {
                (Some(noised), Some(score)) => {
                    let block = noised.plus(&l.common.scaled(-1.0));
                    let exact = score.plus(&noised.scaled(-1.0));
                    let extra = block.plus(&exact.scaled(scored * self.columns_per_iteration(l))).scaled(raced);
                    let with = |c: &Counts| c.plus(&extra);
                    Loop { common: with(&l.common), massed: l.massed.as_ref().map(with), ..l.clone() }
                }
                _ => l.clone(),
            })
            .collect();
        Kernel { loops, onchip, ..self.clone() }
    }
}

/// What a launch's parts do on chip after reading their columns (`top_k_parts_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnChipWork {
    /// Nothing after the read (or nothing counted).
    None,
    /// A top-k row's select of its candidates ([`select_rule`]).
    Select,
    /// A top-p row's histograms (`filter_top_p.rs`, `histogram_part`): each loop once a column.
    Histogram,
    /// A min-p row's race over its part's band (`filter_min_p.rs`, `race_part`): its loop once a
    /// column, on its common path (a key outside the band), or on flat rows its raced paths
    /// ([`flat_band_race`]).
    Race,
}

/// A top-p part's copies of its bins out visit bins, not columns: each copy at most the fine
/// grid's 1024 counts over a part's 4096 columns, so a bin's word costs at most a quarter of a
/// column's visit.
const HISTOGRAM_COPY_SHARE: f64 =
    crate::kernels::filter_top_p::FINE_BINS as f64 / crate::kernels::filter_top_k::PART_COLS as f64;

/// The loops over workgroup memory after the read of `work`'s branch. The parts kernel reads
/// its columns in its first two streaming loops, one a branch (a top-k row's part, which
/// selects, and a top-p row's, which bins), laid out in whichever order ptxas chooses; the
/// select's loops are those after the read with a pass loop among them, the histogram's those
/// after the other, each up to the next streaming loop (another part's read, or a row's last
/// part estimating the cut, which the rare-loop rule counts).
pub fn after_read<'a>(loops: &[Loop], onchip: &'a [OnChip], work: OnChipWork) -> Vec<&'a OnChip> {
    let region = |i: usize| -> Vec<&'a OnChip> {
        let after = loops.get(i).map_or(0, |l| l.end);
        let before = loops.get(i + 1).map_or(u32::MAX, |l| l.start);
        onchip.iter().filter(|l| l.start > after && l.start < before).collect()
    };
    let (first, second) = (region(0), region(1));
    let selects = |r: &[&OnChip]| r.iter().any(|l| l.pass.is_some());
    // A top-k row's part selects where a min-p row's races: the race's loop draws Philox blocks.
    let races = |r: Vec<&'a OnChip>, raced: bool| r.into_iter().filter(|l| l.raced.is_some() == raced).collect();
    let selecting = if selects(&first) || !selects(&second) { first.clone() } else { second.clone() };
    match work {
        OnChipWork::None => vec![],
        OnChipWork::Select => races(selecting, false),
        OnChipWork::Race => races(selecting, true),
        OnChipWork::Histogram if selects(&first) => second,
        OnChipWork::Histogram => first,
    }
}

/// Cycles an SM needs to issue `counts` instructions `n` times (threads x columns), by pipe: the
/// slowest pipe over its lanes (FP32 and IMAD together over the FP32 lanes too, as they share
/// the FMA pipe), or all of them over the schedulers' issue rate; and that pipe
/// (`Other` for the issue rate). `ldg_lanes` is the load pipe's rate (wavefronts, not lanes).
fn issue_cycles(hw: &Hardware, counts: &Counts, n: f64, ldg_lanes: f64) -> (f64, Pipe) {
    // An IMAD runs on the FMA pipe, beside FP32 (`hardware::IMAD_SOURCE`): the two share its lanes.
    let fma = n * (counts.get(Pipe::Fp32) + counts.get(Pipe::Imad)) / hw.lanes(Pipe::Fp32);
    PIPES
        .iter()
        .map(|&p| {
            let lanes = match p {
                Pipe::Other => hw.issue_per_clock.value * 32.0,
                Pipe::Ldg => ldg_lanes,
                _ => hw.lanes(p),
            };
            (n * counts.get(p) / lanes, p)
        })
        .chain([(fma, Pipe::Fp32), (n * counts.total() / (hw.issue_per_clock.value * 32.0), Pipe::Other)])
        .fold((0.0, Pipe::Other), |a, b| if b.0 > a.0 { b } else { a })
}

impl Kernel {
    /// Columns one iteration of `l` covers: the bytes its loads read over a column's bytes.
    fn columns_per_iteration(&self, l: &Loop) -> f64 {
        (l.common.load_bytes / self.elem).max(1.0)
    }

    /// One iteration of `l`: the common path (with each column's massed branch at the massed
    /// share), the kept path's extra at the kept share, and what
    /// the longest path adds beyond the common (or kept) one at the rare rate. Where a noised
    /// path draws the block and skips every log, a kept quad costs that path, and each of its
    /// columns the kept path's one screened score beyond it at the scored share.
    fn iteration(&self, l: &Loop) -> Counts {
        let (rate, _) = rare_rate(&self.name);
        let (share, _) = kept_share(&self.name);
        let (scored, _) = scored_share(&self.name);
        let minus = |a: &Counts, b: &Counts| a.plus(&b.scaled(-1.0));
        let kept_quad = |kept: &Counts| match &l.noised {
            Some(noised) if noised.logs == 0.0 && kept.logs > 0.0 => {
                let columns = self.columns_per_iteration(l);
                noised.plus(&minus(kept, noised).scaled(scored * columns))
            }
            _ => *kept,
        };
        let (massed, _) = massed_share(&self.name);
        // The massed path takes one column's branch; each column of the iteration takes its own.
        let common = match &l.massed {
            Some(m) if massed > 0.0 => {
                l.common.plus(&minus(m, &l.common).scaled(massed * self.columns_per_iteration(l)))
            }
            _ => l.common,
        };
        match &l.kept {
            Some(kept) if share > 0.0 => {
                let base = common.plus(&minus(&kept_quad(kept), &common).scaled(share));
                base.plus(&minus(&l.longest, kept).scaled(rate))
            }
            _ => common.plus(&minus(&l.longest, &common).scaled(rate)),
        }
    }

    /// The instructions per column (per thread) of `passes` passes: the loops that cost most per
    /// column first, the costliest again where the kernel makes more passes than it has loops
    /// (a digit pass's loop runs once per digit). Includes the kept and rare paths at their rates.
    /// A kernel whose later loops are rare ([`rare_loops`]) makes its passes in its first loops,
    /// and its later ones count at the rare rate.
    pub fn per_column(&self, passes: u32) -> Counts {
        let mut per: Vec<Counts> =
            self.loops.iter().map(|l| self.iteration(l).scaled(1.0 / self.columns_per_iteration(l))).collect();
        let rare = match rare_loops(&self.name) {
            Some((read, _, _)) if per.len() > read && passes as usize <= read => {
                let (rate, _) = rare_rate(&self.name);
                per.split_off(read).iter().fold(Counts::default(), |acc, c| acc.plus(&c.scaled(rate)))
            }
            _ => Counts::default(),
        };
        per.sort_by(|a, b| b.total().total_cmp(&a.total()));
        (0..passes as usize).filter_map(|i| per.get(i).or(per.first())).fold(rare, |acc, c| acc.plus(c))
    }

    /// The loop that costs most per column (of the passes' loops, where later ones are rare).
    pub fn hot_loop(&self) -> Option<&Loop> {
        let passes = rare_loops(&self.name).map_or(self.loops.len(), |(read, _, _)| read);
        self.loops.iter().take(passes.max(1)).max_by(|a, b| {
            let per = |l: &Loop| self.iteration(l).total() / self.columns_per_iteration(l);
            per(a).total_cmp(&per(b))
        })
    }

    /// The instructions per column of a launch's on-chip `work` after its read, with `keys`
    /// columns a thread. A select ([`select_rule`]): a key loop inside a pass (a select's
    /// further round) runs at every pass, on its costliest path for the share of its keys in
    /// play; the pass's own work is once a pass a thread, over its keys; the other loops visit
    /// each column once, on their common path (`sass::OnChip`: the costliest for a loop that sums
    /// floats, else the cheapest). A histogram: each loop visits each column once, on its common
    /// path, but a loop that stores to global memory (a copy of the bins out) visits bins, each
    /// at [`HISTOGRAM_COPY_SHARE`] of a column.
    pub fn onchip_per_column(&self, work: OnChipWork, keys: f64) -> Counts {
        match work {
            OnChipWork::None => Counts::default(),
            OnChipWork::Select => match select_rule(&self.name) {
                Some((passes, matched, _)) => self.onchip_with(passes, matched, keys),
                None => Counts::default(),
            },
            OnChipWork::Race => after_read(&self.loops, &self.onchip, work)
                .iter()
                .fold(Counts::default(), |acc, l| acc.plus(&l.common.scaled(1.0 / l.visits))),
            OnChipWork::Histogram => {
                let (share, _) = fine_share();
                after_read(&self.loops, &self.onchip, work).iter().fold(Counts::default(), |acc, l| {
                    let copy = if l.common.get(Pipe::Stg) > 0.0 { HISTOGRAM_COPY_SHARE } else { 1.0 };
                    let item = match &l.weighed {
                        Some(w) => w.plus(&l.common.plus(&w.scaled(-1.0)).scaled(share)),
                        None => l.common,
                    };
                    acc.plus(&item.scaled(copy / l.visits))
                })
            }
        }
    }

    /// [`Kernel::onchip_per_column`] with the pass loops run `passes` times, but a pass loop
    /// that stores to workgroup memory (the listing of a select's keys, which ptxas may lay out
    /// inside the passes' loop) once.
    fn onchip_with(&self, passes: f64, matched: f64, keys: f64) -> Counts {
        let mut total = Counts::default();
        let mut pass_counted = false;
        for l in after_read(&self.loops, &self.onchip, OnChipWork::Select) {
            let visits = l.visits;
            let per = match &l.pass {
                Some(pass) => {
                    if !pass_counted {
                        total = total.plus(&pass.scaled(passes / keys.max(1.0)));
                        pass_counted = true;
                    }
                    let key = l.common.plus(&l.longest.plus(&l.common.scaled(-1.0)).scaled(matched));
                    key.scaled(if l.longest.shared_stores > 0.0 { 1.0 } else { passes })
                }
                None => l.common,
            };
            total = total.plus(&per.scaled(1.0 / visits));
        }
        total
    }

    /// Columns a thread covers in one iteration of its costliest loop.
    fn hot_columns(&self) -> f64 {
        self.hot_loop().map_or(1.0, |l| self.columns_per_iteration(l))
    }
}

/// What bounds a launch or a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    Dram,
    L2,
    Latency,
    Issue(Pipe),
    /// The on-chip work after a parts launch's read.
    OnChip,
    Launch,
}

impl Bound {
    pub fn name(self) -> String {
        match self {
            Bound::Dram => "memory (DRAM)".into(),
            Bound::L2 => "memory (L2)".into(),
            Bound::Latency => "load latency".into(),
            Bound::Issue(Pipe::Other) => "issue".into(),
            Bound::Issue(p) => format!("{} pipe", p.name()),
            Bound::OnChip => "on-chip work".into(),
            Bound::Launch => "launches".into(),
        }
    }
}

/// One launch, modelled.
#[derive(Debug)]
pub struct Modelled {
    pub us: f64,
    /// Of which the device's time it takes from a launch beside it on another stream: its bytes
    /// through DRAM or L2, or its SMs' time in the share of the device's blocks it holds.
    pub busy_us: f64,
    pub bound: Bound,
    /// SMs with work, of the device's.
    pub busy_sms: u32,
}

/// Where a call finds its input: the benchmark's warm cells call again and again on one buffer,
/// so an input that fits L2 stays there; its cold cells read a buffer of four times L2 before
/// each call, so the first pass over each row comes from DRAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cache {
    Warm,
    Cold,
    /// A launch of a cold call that reads again what an earlier launch of the call read
    /// ([`Launch::rereads`]), while the input and what the call wrote since still fit L2: its
    /// reads come from L2, its writes still go on to DRAM.
    Reread,
}

/// Whether `bytes` fit in L2.
fn fits_l2(hw: &Hardware, bytes: f64) -> bool {
    bytes <= hw.l2_bytes.value
}

pub fn launch(hw: &Hardware, k: &Kernel, l: &Launch, total_input: f64, cache: Cache) -> Modelled {
    let sms = hw.sms.value as u32;
    let clock = hw.clock_ghz.value * 1e3; // cycles per microsecond
    let per_sm = l.groups.div_ceil(sms);
    let conc = k.resident.max(1).min(per_sm);
    let rounds = per_sm.div_ceil(conc) as f64;
    let warm = match cache {
        Cache::Warm => fits_l2(hw, total_input),
        Cache::Reread => true,
        Cache::Cold => false,
    };
    // The rows being worked on at once: a pass after a row's first finds it in L2 when they fit.
    let resident_rows = (sms * conc) as f64 * l.columns as f64 * k.elem;
    let again_in_l2 = warm || fits_l2(hw, resident_rows);
    let passes = l.passes.max(1) as f64;
    let latency = if warm {
        hw.l2_latency.value
    } else {
        let again = if again_in_l2 { hw.l2_latency.value } else { hw.dram_latency.value };
        (hw.dram_latency.value + (passes - 1.0) * again) / passes
    };

    let per_col = k.per_column(l.passes);
    let cols_per_iter = k.hot_columns();
    let iter_instr = per_col.total() * cols_per_iter;
    let threads = (conc * k.block) as f64;
    // Cycles the SM needs to issue one iteration of every resident thread, by pipe. A warp's
    // load spans 32 threads x 4 columns x elem bytes: elem wavefronts of 128 B through L1, one
    // wavefront per clock.
    let (issue, pipe) = issue_cycles(hw, &per_col, threads * cols_per_iter, hw.lanes(Pipe::Ldg) / k.elem.max(1.0));
    let wait = |share: f64| {
        (per_col.round_trips * cols_per_iter * share).max(1.0) * latency + hw.dependent_issue.value * iter_instr * share
    };
    // The iterations of the slowest thread, which holds the most quads: where ptxas unrolled the
    // loop past what a thread holds (a row split so finely that each thread has a quad or two),
    // its last iteration is the part it holds, at least one round trip.
    let quads = (l.columns as f64 / (k.block as f64 * 4.0)).ceil();
    let iterations = quads * 4.0 / cols_per_iter;
    let (whole, part) = (iterations.floor(), iterations - iterations.floor());
    let last = if part > 0.0 { (issue * part).max(wait(part)) } else { 0.0 };
    // A parts launch's on-chip work after its read: the blocks' instructions over each pipe's
    // lanes and over the schedulers' issue rate (its loads from workgroup memory wait little
    // beside the blocks resident with it).
    let onchip = k.onchip_per_column(l.onchip, l.columns as f64 / k.block as f64);
    let (onchip_cycles, _) = issue_cycles(hw, &onchip, conc as f64 * l.columns as f64, hw.lanes(Pipe::Ldg));
    // Each round also waits for its first loads and its last stores (two DRAM round trips).
    let streaming = whole * issue.max(wait(1.0)) + last;
    let sm_cycles = rounds * (streaming + onchip_cycles + 2.0 * hw.dram_latency.value);
    let sm_us = sm_cycles / clock;

    let bytes = l.read + l.written;
    let mem_us = if cache == Cache::Reread {
        l.read / (hw.l2_gbps.value * 1e3) + l.written / (hw.dram_gbps.value * 1e3)
    } else if warm {
        bytes / (hw.l2_gbps.value * 1e3)
    } else {
        // The first pass from DRAM; later passes over a row find it in L2 when the rows being
        // worked on at once fit.
        let first = l.read / l.passes.max(1) as f64;
        let again = l.read - first;
        let again_us = if again_in_l2 { again / (hw.l2_gbps.value * 1e3) } else { again / (hw.dram_gbps.value * 1e3) };
        (first + l.written) / (hw.dram_gbps.value * 1e3) + again_us
    };
    let work = sm_us.max(mem_us);
    let bound = if l.columns == 0 || work < hw.launch_us.value {
        Bound::Launch
    } else if mem_us > sm_us {
        // A reread's writes go on to DRAM: whichever moves more time names the bound.
        let writes_rule = cache == Cache::Reread && l.written / hw.dram_gbps.value > l.read / hw.l2_gbps.value;
        if warm && !writes_rule {
            Bound::L2
        } else {
            Bound::Dram
        }
    } else if onchip_cycles > streaming {
        Bound::OnChip
    } else if issue >= wait(1.0) {
        Bound::Issue(pipe)
    } else {
        Bound::Latency
    };
    let held = (l.groups as f64 / (sms * k.resident.max(1)) as f64).min(1.0);
    let busy_us = mem_us.max(sm_us * held);
    Modelled { us: work.max(hw.launch_us.value), busy_us, bound, busy_sms: l.groups.min(sms) }
}

/// A call: the fixed overhead, then each launch. The host issues a launch every launch interval;
/// a launch starts once issued and once the one before it on its stream has ended, and lasts at
/// least the interval. On one stream that is the sum of the launches. Launches on the side stream
/// ([`Launch::side`]) run beside those on the caller's, but share the device: the call lasts at
/// least the sum of each launch's bytes, or where it holds the SMs, of their time.
pub fn call(
    hw: &Hardware,
    launches: &[(Launch, &Kernel)],
    total_input: f64,
    cache: Cache,
) -> (f64, Bound, Vec<Modelled>) {
    // What the call has written so far shares L2 with its input.
    let mut written = 0.0;
    let each: Vec<Modelled> = launches
        .iter()
        .map(|(l, k)| {
            let reread = cache == Cache::Cold && l.rereads && fits_l2(hw, total_input + written);
            written += l.written;
            launch(hw, k, l, total_input, if reread { Cache::Reread } else { cache })
        })
        .collect();
    let first = hw.first_launch_us.value - hw.launch_us.value;
    let (mut main, mut side) = (first, first);
    for (i, ((l, _), m)) in launches.iter().zip(&each).enumerate() {
        let issued = first + i as f64 * hw.launch_us.value;
        let end = if l.side { &mut side } else { &mut main };
        *end = end.max(issued) + m.us;
    }
    let us = main.max(side).max(first + each.iter().map(|m| m.busy_us).sum::<f64>());
    // The bound under which most of the call's time is spent (a launch's floor counts as launches).
    let mut spent: Vec<(Bound, f64)> = Vec::new();
    for m in &each {
        let b = if m.us <= hw.launch_us.value { Bound::Launch } else { m.bound };
        match spent.iter_mut().find(|(x, _)| *x == b) {
            Some((_, t)) => *t += m.us,
            None => spent.push((b, m.us)),
        }
    }
    let bound = spent.iter().max_by(|a, b| a.1.total_cmp(&b.1)).map_or(Bound::Launch, |(b, _)| *b);
    (us, bound, each)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::hardware::H200;
    use crate::cost::sass::{Counts, Loop, OnChip};

    /// A streaming kernel of one cheap loop (two instructions and a 16-byte quad load a
    /// thread), so that memory, not issue, bounds it.
    fn streaming() -> Kernel {
        let mut common = Counts { load_bytes: 16.0, round_trips: 1.0, ..Counts::default() };
        common.by_pipe[0] = 2.0;
        let l =
            Loop { start: 0, end: 1, common, kept: None, noised: None, massed: None, scored: None, longest: common };
        Kernel {
            name: "softmax_f32".into(),
            loops: vec![l],
            onchip: vec![],
            elem: 4.0,
            registers: 32,
            shared: 0,
            block: 512,
            resident: 4,
            occupancy: 1.0,
        }
    }

    fn read(rereads: bool, written: f64, rows: u32) -> Launch {
        let vocab = 151936;
        let groups = 528;
        let read = rows as f64 * vocab as f64 * 4.0;
        Launch {
            kernel: "softmax_f32".into(),
            groups,
            columns: vocab * rows / groups,
            passes: 1,
            read,
            written,
            rereads,
            side: false,
            loops_of: None,
            onchip: OnChipWork::None,
            flat: false,
        }
    }

    /// A select launch's on-chip work: each key at every pass (on its costliest path at the
    /// matched share), but once in a pass loop that stores to workgroup memory (a listing), the
    /// pass's own work once a pass over a thread's keys; the launch then
    /// takes at least its blocks' on-chip instructions over the schedulers' issue rate, and
    /// names that its bound. The oracle is the formula written out, not `onchip_per_column`.
    #[test]
    fn a_select_launch_adds_its_passes_on_chip() {
        let mut k = streaming();
        k.name = "top_k_parts_logits_f32".into();
        k.block = 256;
        let mut other = k.loops[0].clone();
        (other.start, other.end) = (0x1000, 0x1010);
        k.loops.push(other);
        let int = |n: f64, loads: f64| {
            let mut c = Counts { shared_loads: loads, ..Counts::default() };
            c.by_pipe[Pipe::Int as usize] = n;
            c
        };
        // A listing inside the passes' loop: its costliest path stores a key to workgroup memory.
        let listing = Counts { shared_stores: 1.0, ..int(20.0, 1.0) };
        k.onchip = vec![
            OnChip {
                start: 0x10,
                common: int(10.0, 1.0),
                visits: 1.0,
                longest: int(46.0, 1.0),
                weighed: None,
                pass: Some(int(291.0, 0.0)),
                raced: None,
            },
            OnChip {
                start: 0x18,
                common: int(12.0, 1.0),
                visits: 1.0,
                longest: listing,
                weighed: None,
                pass: Some(int(291.0, 0.0)),
                raced: None,
            },
            // A loop of four keys an iteration outside the passes, and one after the second read.
            OnChip {
                start: 0x20,
                common: int(40.0, 4.0),
                visits: 4.0,
                longest: int(40.0, 4.0),
                weighed: None,
                pass: None,
                raced: None,
            },
            OnChip {
                start: 0x2000,
                common: int(99.0, 1.0),
                visits: 1.0,
                longest: int(99.0, 1.0),
                weighed: None,
                pass: None,
                raced: None,
            },
        ];
        let (passes, matched) = (8.0, 2.38 / 8.0);
        let listed = 12.0 + matched * 8.0;
        let want = passes * (291.0 / 16.0 + 10.0 + matched * 36.0) + listed + 10.0;
        let per = k.onchip_with(passes, matched, 16.0).total();
        assert!(select_rule(&k.name).is_some(), "a parts kernel selects");
        assert!((per - want).abs() < 1e-9, "{per} {want}");
        let parts = Launch { groups: 32 * 38, columns: 4096, onchip: OnChipWork::Select, ..read(false, 0.0, 32) };
        k.onchip.retain(|l| l.pass.is_none());
        k.onchip.push(OnChip {
            start: 0x30,
            common: int(want - listed - 10.0, 1.0),
            visits: 1.0,
            longest: int(0.0, 1.0),
            weighed: None,
            pass: None,
            raced: None,
        });
        let with = launch(&H200, &k, &parts, 32.0 * 151936.0 * 4.0, Cache::Warm);
        let without = launch(
            &H200,
            &k,
            &Launch { onchip: OnChipWork::None, ..parts.clone() },
            32.0 * 151936.0 * 4.0,
            Cache::Warm,
        );
        // 1216 blocks on 132 SMs: 10 on the busiest, 4 at once, 3 rounds.
        let onchip_us = 3.0 * 4.0 * 4096.0 * (want - listed) / (4.0 * 32.0) / (H200.clock_ghz.value * 1e3);
        assert!(with.us >= onchip_us && with.us > without.us, "{with:?} {without:?} {onchip_us}");
        assert_eq!(with.bound, Bound::OnChip);
    }

    /// The parts kernel's two reads lie in either order: the select's loops are those after the
    /// read with a pass loop among them, the histogram's those after the other, each loop a
    /// column once but a copy of the bins out (a global store) at a quarter of one. The oracle is
    /// the sum written out.
    #[test]
    fn a_histogram_launch_counts_the_loops_after_its_own_read() {
        let mut k = streaming();
        k.name = "top_k_parts_logits_f32".into();
        let read = k.loops[0].clone();
        k.loops = [(0x100, 0x110), (0x1000, 0x1010), (0x2000, 0x2010)]
            .map(|(start, end)| Loop { start, end, ..read.clone() })
            .to_vec();
        let (counts, plain) = (onchip_counts, plain_onchip);
        k.onchip = vec![
            // After the first read: a top-p part's sum (36 a key) and its copy of 16 words.
            plain(0x200, counts(36.0, 1.0, 0.0)),
            plain(0x300, counts(64.0, 16.0, 16.0)),
            // After the second: a select's round and its gather.
            OnChip { start: 0x1100, pass: Some(counts(291.0, 0.0, 0.0)), ..plain(0x1100, counts(10.0, 1.0, 0.0)) },
            plain(0x1200, counts(40.0, 4.0, 0.0)),
            // A row's last part's estimate, after the third: neither.
            plain(0x2100, counts(99.0, 1.0, 0.0)),
        ];
        let want = 36.0 + HISTOGRAM_COPY_SHARE * (64.0 + 16.0) / 16.0;
        let starts = |k: &Kernel, w| after_read(&k.loops, &k.onchip, w).iter().map(|l| l.start).collect::<Vec<_>>();
        let histogram = k.onchip_per_column(OnChipWork::Histogram, 16.0).total();
        assert!((histogram - want).abs() < 1e-9, "{histogram} {want}");
        assert_eq!(starts(&k, OnChipWork::Select), [0x1100, 0x1200]);
        assert_eq!(starts(&k, OnChipWork::None), Vec::<u32>::new());
        // The other order: the select's loops after the first read, the histogram's after the second.
        for l in &mut k.onchip {
            l.start = match l.start {
                0x200..0x1000 => l.start + 0xf00,
                0x1000..0x2000 => l.start - 0xf00,
                s => s,
            };
        }
        let histogram = k.onchip_per_column(OnChipWork::Histogram, 16.0).total();
        assert!((histogram - want).abs() < 1e-9, "{histogram} {want}");
        assert_eq!(starts(&k, OnChipWork::Select), [0x200, 0x300]);
        // A sum whose keys weigh 28 into their coarse bins and 36 on both grids: model-like rows
        // take the fine grid at `fine_share`, flat rows always.
        let sum = k.onchip.iter().position(|l| l.start == 0x1100).expect("the sum's loop");
        k.onchip[sum].weighed = Some(counts(28.0, 1.0, 0.0));
        let (share, _) = fine_share();
        let want = 28.0 + 8.0 * share + HISTOGRAM_COPY_SHARE * (64.0 + 16.0) / 16.0;
        let histogram = k.onchip_per_column(OnChipWork::Histogram, 16.0).total();
        assert!((histogram - want).abs() < 1e-9, "{histogram} {want}");
        let flat = k.of_flat_rows().onchip_per_column(OnChipWork::Histogram, 16.0).total();
        assert!((flat - (36.0 + HISTOGRAM_COPY_SHARE * (64.0 + 16.0) / 16.0)).abs() < 1e-9, "{flat}");
    }

    /// A min-p part's race over its band, after the select's read, is the race's and not the
    /// select's: model-like rows take its common path (20 a quad of four keys), flat rows draw
    /// a block every quad (100) and score each key at the flat rule's share (60 more a key).
    /// The oracle is the sum written out.
    #[test]
    fn a_race_launch_counts_its_band_loop() {
        let mut k = streaming();
        k.name = "top_k_parts_logits_f32".into();
        let read = k.loops[0].clone();
        k.loops = [(0x100, 0x110), (0x1000, 0x1010)].map(|(start, end)| Loop { start, end, ..read.clone() }).to_vec();
        let (int, plain) = (|n: f64, loads: f64| onchip_counts(n, loads, 0.0), plain_onchip);
        k.onchip = vec![
            OnChip { pass: Some(int(291.0, 0.0)), ..plain(0x200, int(10.0, 1.0)) },
            OnChip { raced: Some((int(100.0, 4.0), int(160.0, 4.0))), ..plain(0x300, int(20.0, 4.0)) },
            plain(0x1100, int(36.0, 1.0)),
        ];
        let starts = |k: &Kernel, w| after_read(&k.loops, &k.onchip, w).iter().map(|l| l.start).collect::<Vec<_>>();
        assert_eq!(starts(&k, OnChipWork::Select), [0x200]);
        assert_eq!(starts(&k, OnChipWork::Race), [0x300]);
        let race = k.onchip_per_column(OnChipWork::Race, 16.0).total();
        assert!((race - 20.0 / 4.0).abs() < 1e-9, "{race}");
        let (share, _) = flat_band_race(&k.name).expect("a parts kernel");
        let flat = k.of_flat_rows().onchip_per_column(OnChipWork::Race, 16.0).total();
        assert!((flat - (100.0 + 60.0 * share * 4.0) / 4.0).abs() < 1e-9, "{flat}");
    }

    /// Integer instructions, words loaded from workgroup memory and words stored to global memory.
    fn onchip_counts(int: f64, loads: f64, stores: f64) -> Counts {
        let mut c = Counts { shared_loads: loads, ..Counts::default() };
        c.by_pipe[Pipe::Int as usize] = int;
        c.by_pipe[Pipe::Stg as usize] = stores;
        c
    }

    /// An on-chip loop at `start` whose every path counts `c`, an item a word it loads.
    fn plain_onchip(start: u32, c: Counts) -> OnChip {
        OnChip { start, common: c, visits: c.shared_loads.max(1.0), longest: c, weighed: None, pass: None, raced: None }
    }

    /// A cold call's second read of an input that still fits L2 with what the call wrote costs
    /// less than its first; where they no longer fit, it costs the same as the first.
    #[test]
    fn a_cold_reread_comes_from_l2_while_the_call_fits_it() {
        let k = streaming();
        let us = |launches: &[Launch], rows: u32| {
            let pairs: Vec<(Launch, &Kernel)> = launches.iter().map(|l| (l.clone(), &k)).collect();
            let input = rows as f64 * 151936.0 * 4.0;
            call(&H200, &pairs, input, Cache::Cold).2.iter().map(|m| m.us).collect::<Vec<_>>()
        };
        // 32 rows: 19.4 MB read, 19.4 MB written by the first launch: 38.9 MB in a 50 MB L2.
        let fits = us(&[read(false, 19.4e6, 32), read(true, 0.0, 32)], 32);
        let flagless = us(&[read(false, 19.4e6, 32), read(false, 0.0, 32)], 32);
        assert!(fits[1] < 0.8 * flagless[1], "{fits:?} {flagless:?}");
        // 64 rows: the input and the first launch's writes, 77.8 MB, overflow L2.
        let spills = us(&[read(false, 38.9e6, 64), read(true, 0.0, 64)], 64);
        let flagless = us(&[read(false, 38.9e6, 64), read(false, 0.0, 64)], 64);
        assert_eq!(spills[1], flagless[1]);
    }

    /// A short launch on the side stream beside a long one on the caller's adds only its bytes
    /// to the call; on the caller's stream it adds its own time. The figures are the model's own
    /// launches, so the oracle is the sum, not a constant.
    #[test]
    fn a_side_launch_overlaps_the_callers() {
        let k = streaming();
        let time = |launches: &[Launch]| {
            let pairs: Vec<(Launch, &Kernel)> = launches.iter().map(|l| (l.clone(), &k)).collect();
            call(&H200, &pairs, 128.0 * 151936.0 * 4.0, Cache::Warm)
        };
        // 128 rows (78 MB, past L2): tens of µs from DRAM, beside one row's part.
        let long = read(false, 0.0, 128);
        let short = Launch { groups: 38, columns: 4096, read: 151936.0 * 4.0, ..read(false, 0.0, 1) };
        let (alone, _, each) = time(std::slice::from_ref(&long));
        assert!(each[0].us > 4.0 * H200.launch_us.value, "{each:?}");
        let (serial, _, each) = time(&[long.clone(), short.clone()]);
        assert!((serial - alone - each[1].us).abs() < 1e-9, "{serial} {alone} {each:?}");
        // Beside it, only what it takes of the device both share.
        let (beside, _, _) = time(&[long, Launch { side: true, ..short }]);
        assert!(beside <= alone + each[1].busy_us + 1e-9 && beside < serial - 2.0, "{beside} {alone} {each:?}");
    }
}
