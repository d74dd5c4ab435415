//! The launches one call makes, as the host plans them (`src/launch.rs`): which kernel, how many
//! workgroups, how many of a row's columns each covers, how many passes over its columns it makes,
//! and the bytes it moves. Two plans: today's, and that of f09f138, the commit the 2026-11-30
//! H200 run measured (filtered rows were not split then, `sample` had no seeded or filter launch
//! after it, and a second launch combined a split row's parts).

use super::model::OnChipWork;

/// Which host's launch plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    Current,
    /// f09f138 (`git show f09f138:src/launch.rs`).
    F09f138,
}

/// The calls modelled, by the names `benches/kernels.rs` gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    ReadRows,
    Greedy,
    RaceLogits,
    RaceProbs,
    Softmax,
    SeededLogits,
    Sample,
    /// `sample_filtered` at a setting: its name and the passes over the row it takes at most.
    Filter(&'static str, u32),
    /// `sample_filtered` from probabilities (f32), top-p 0.9: the same passes as from logits.
    FilterProbs,
    /// `mask_logits` and `renorm_probs` at top-p 0.9: the select's passes, then one read that
    /// writes the row (masked logits, renormalized probabilities; f32).
    MaskLogits,
    RenormProbs,
    /// `seeded` from log-probabilities (f64 or f32): float64 in one read, or screened in two.
    Seeded,
    SeededScreened,
    /// A setting over flat rows (noise of 1e-3 at T 0.8, where top-p 0.9 keeps 90% of the row
    /// and min-p 0.05 all of it): `Filter`'s name, or `FilterProbs`' (whose input it takes).
    Flat(&'static str),
    /// `Sampler::step` over plain rows, with `n` of them top-p 0.9 rows instead (0 or 1): the
    /// issue's mixed batch, whose one top-p row must cost little beside the plain ones.
    Step(u32),
}

/// The benchmark's filter settings and their pass counts (README: the most passes each takes;
/// with the workgroup list, peaked rows take fewer, so these are bounds).
pub const FILTERS: [(&str, u32); 5] = [
    ("filter_top_k_50", 10),
    ("filter_top_p_0.9", 10),
    ("filter_min_p_0.05", 2),
    ("filter_qwen3_joint", 10),
    ("filter_qwen3_k_first", 18),
];

/// The settings whose benchmark rows (Zipf at temperature 0.8) the one-read path decides: a
/// launch that reads each part once and a merge over the candidates. Top-k at most
/// `filter_top_k::CAP`, with or without top-p and min-p, always; min-p alone where the parts'
/// candidates hold its set (10 to 30 tokens at 0.05; up to `CAP + 1` a part).
pub const ONE_READ: [&str; 4] = ["filter_top_k_50", "filter_min_p_0.05", "filter_qwen3_joint", "filter_qwen3_k_first"];
/// The settings of the top-p cut (`filter_top_p.rs`): the parts read the row and bin it (a
/// row's last part estimates the cut from the bins, no column work), the cut launch reads each
/// part again, and the merge ranks the range's tokens. Top-p 0.9 alone keeps 300 to 700 tokens
/// on those rows; a range of three bins around the cut holds about 70 of them, which the merge
/// ranks (not modelled, as the parts' select is not).
const TOP_P_CUT: [&str; 1] = ["filter_top_p_0.9"];

/// The settings whose flat rows the parts race on chip (`filter_min_p.rs`: min-p alone keeps
/// every token of a flat row, and each part races its band): one read, no cut.
const RACED_WHEN_FLAT: [&str; 1] = ["filter_min_p_0.05"];

/// The settings modelled on flat rows too: those whose flat rows take the top-p cut and race
/// there (a top-k's rows race in the merge, over k candidates, flat or not; the parts' select
/// is modelled on flat rows alike, `model::select_rule`), with their names on flat rows.
pub const FLAT: [(&str, &str); 3] = [
    ("filter_top_p_0.9", "filter_top_p_0.9_flat"),
    ("filter_min_p_0.05", "filter_min_p_0.05_flat"),
    ("filter_probs_top_p_0.9", "filter_probs_top_p_0.9_flat"),
];

/// Columns of a part of the one-read path (`filter_top_k::PART_COLS`).
const TOP_K_PART_COLS: u32 = crate::kernels::filter_top_k::PART_COLS;

impl Call {
    pub fn all() -> Vec<Call> {
        let mut v = vec![
            Call::ReadRows,
            Call::Greedy,
            Call::RaceLogits,
            Call::RaceProbs,
            Call::Softmax,
            Call::SeededLogits,
            Call::Sample,
        ];
        v.extend(FILTERS.iter().map(|&(n, p)| Call::Filter(n, p)));
        v.extend([Call::FilterProbs, Call::MaskLogits, Call::RenormProbs, Call::Seeded, Call::SeededScreened]);
        v.extend(FLAT.iter().map(|&(n, _)| Call::Flat(n)));
        v.extend([Call::Step(0), Call::Step(1)]);
        v
    }

    /// The input formats the call takes, with their bytes: logits in f32 and bf16, probabilities
    /// in f32, log-probabilities in f64 and f32.
    pub fn dtypes(self) -> &'static [(&'static str, u32)] {
        match self {
            Call::RaceProbs | Call::FilterProbs | Call::RenormProbs => &[("f32", 4)],
            Call::Flat(n) if n == Call::FilterProbs.name() => &[("f32", 4)],
            Call::Seeded | Call::SeededScreened => &[("f64", 8), ("f32", 4)],
            _ => &[("f32", 4), ("bf16", 2)],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Call::ReadRows => "read_rows",
            Call::Greedy => "greedy",
            Call::RaceLogits => "race_from_logits",
            Call::RaceProbs => "race_from_probs",
            Call::Softmax => "softmax",
            Call::SeededLogits => "seeded_from_logits",
            Call::Sample => "sample",
            Call::Filter(n, _) => n,
            Call::Flat(n) => FLAT.iter().find(|f| f.0 == n).map_or(n, |f| f.1),
            Call::FilterProbs => "filter_probs_top_p_0.9",
            Call::MaskLogits => "mask_logits_top_p_0.9",
            Call::RenormProbs => "renorm_probs_top_p_0.9",
            Call::Seeded => "seeded",
            Call::SeededScreened => "seeded_screened",
            Call::Step(0) => "step_plain",
            Call::Step(_) => "step_plain_and_one_top_p",
        }
    }

    pub fn from_name(name: &str) -> Option<Call> {
        Call::all().into_iter().find(|c| c.name() == name)
    }
}

/// One launch of a call.
#[derive(Clone, Debug)]
pub struct Launch {
    pub kernel: String,
    pub groups: u32,
    /// Columns of a row each workgroup covers (0: the launch does no column work, as a seeded or
    /// filter launch over rows that are neither).
    pub columns: u32,
    /// Passes over those columns.
    pub passes: u32,
    /// Bytes read from the logits or probabilities, and written.
    pub read: f64,
    pub written: f64,
    /// The launch reads again what an earlier launch of the same call read (softmax's second
    /// launch, the top-p cut after the parts): a cold call finds it in L2 when it still fits.
    pub rereads: bool,
    /// The launch runs on the CUDA backend's side stream (`src/backend/cuda.rs`): a `sample`
    /// call's seeded and filter launches, beside its plain launch on the caller's stream.
    pub side: bool,
    /// The kernel whose streaming loop the launch's column work is, where not its own: the merge
    /// launch that also does the top-p cut (`FLAG_CUT_HERE`) reads as the cut kernel does, in
    /// the merge's workgroups (its block and occupancy).
    pub loops_of: Option<String>,
    /// What the launch's parts do on chip after their read (`top_k_parts_*`: the one-read
    /// path's top-k rows select their candidates, top-p rows bin their columns): the model adds
    /// the kernel's loops of it ([`crate::cost::sass::OnChip`]).
    pub onchip: OnChipWork,
    /// The rows are flat: the launch's loop that races the kept columns races nearly all of
    /// them (`model::flat_race`), and a part bins every key on both of its grids
    /// (`model::fine_share`).
    pub flat: bool,
}

/// Workgroups per row (`launch::parts`): enough to fill the device, no part shorter than one
/// quad of four columns per invocation.
fn parts(rows: u32, vocab: u32, target_groups: u32, block: u32) -> u32 {
    (target_groups / rows.max(1)).min((vocab / (block * 4)).max(1)).max(1)
}

/// Workgroups per row of the seeded kernel from logits (`launch::seeded_parts`): by the row's
/// length alone, whatever the batch.
fn seeded_parts(vocab: u32, block: u32) -> u32 {
    (vocab / (block * 4 * 2)).max(1)
}

/// The shape of one call.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub batch: u32,
    pub vocab: u32,
    /// Bytes per element of the logits (4 or 2).
    pub elem: u32,
    /// Its name (`f32`, `bf16`).
    pub dtype: &'static str,
}

/// Passes over the row of a top-p 0.9 select, at most (the benchmark's `filter_top_p_0.9`).
const TOP_P_PASSES: u32 = 10;

/// The launches of `call` at `shape` on a device holding `target_groups` blocks of `block`, whose
/// one-read merge also does the top-p cut where its parts number at most `cut_here_groups` (the
/// device's multiprocessors, `launch::Split::cut_here_groups`).
pub fn launches(
    call: Call,
    shape: Shape,
    era: Era,
    (target_groups, block, cut_here_groups): (u32, u32, u32),
    stages: u32,
) -> Vec<Launch> {
    let Shape { batch, vocab, elem, dtype } = shape;
    let row = vocab as f64 * elem as f64;
    // One workgroup a row reading `passes` times rows of `row_bytes` (`whole`: the logits').
    let whole_of = |kernel: String, passes: u32, written: f64, row_bytes: f64| Launch {
        kernel,
        groups: batch,
        columns: vocab,
        passes,
        read: passes as f64 * row_bytes * batch as f64,
        written,
        rereads: false,
        side: false,
        loops_of: None,
        onchip: OnChipWork::None,
        flat: false,
    };
    let whole = |kernel: String, passes: u32, written: f64| whole_of(kernel, passes, written, row);
    // `p` workgroups a row, each reading its columns once (`reads`) or leaving at once.
    let parted = |kernel: String, p: u32, row_bytes: f64, reads: bool| Launch {
        kernel,
        groups: batch * p,
        columns: if reads { vocab.div_ceil(p) } else { 0 },
        passes: u32::from(reads),
        read: if reads { row_bytes * batch as f64 } else { 0.0 },
        written: 0.0,
        rereads: false,
        side: false,
        loops_of: None,
        onchip: OnChipWork::None,
        flat: false,
    };
    // A split row: today one launch (its last part combines the parts' records); at f09f138 a
    // second launch, `combine`, did.
    let split = |kernel: String, combine: &str, row_bytes: f64| {
        let p = parts(batch, vocab, target_groups, block);
        let mut v = vec![parted(kernel, p, row_bytes, true)];
        if p > 1 && era == Era::F09f138 {
            v.push(Launch {
                kernel: combine.to_string(),
                groups: batch,
                columns: 0,
                passes: 0,
                read: 0.0,
                written: 0.0,
                rereads: false,
                side: false,
                loops_of: None,
                onchip: OnChipWork::None,
                flat: false,
            });
        }
        v
    };
    let idle = |kernel: String, groups: u32| Launch {
        kernel,
        groups,
        columns: 0,
        passes: 0,
        read: 0.0,
        written: 0.0,
        rereads: false,
        side: false,
        loops_of: None,
        onchip: OnChipWork::None,
        flat: false,
    };
    let filter = |passes: u32, idle_rows: bool, input: &str| -> Vec<Launch> {
        let p = match era {
            // At most the seeded kernel's parts (`launch::filter_parts`).
            Era::Current => parts(batch, vocab, target_groups, block).min(seeded_parts(vocab, block)),
            Era::F09f138 => 1,
        };
        if idle_rows {
            let kernel = if p > 1 { format!("filter_split_{input}") } else { format!("filter_{input}") };
            return (0..if p > 1 { stages } else { 1 }).map(|_| idle(kernel.clone(), batch * p)).collect();
        }
        if p <= 1 {
            return vec![whole(format!("filter_{input}"), passes, 0.0)];
        }
        // One launch per stage: the passes over the row first, then the stages with no column
        // work (the combine, and the digit passes a setting does not need).
        (0..stages).map(|s| parted(format!("filter_split_{input}"), p, row, s < passes)).collect()
    };
    // The one-read path (`launch.rs`, `Launch::one_read`): the parts, then the top-p cut, which
    // reads each part again for the rows of [`TOP_P_CUT`], then the merge, which runs the
    // filter kernel's body (`passes` over the row) on the rows the parts do not take. Every
    // call modelled here plans the cut (`sample_filtered`, `sample` without row lists); where
    // its parts fit `cut_here_groups`, the merge launch does it, over every part.
    // `input` names the kernels' input (`logits_f32`, `probs`), of `row_bytes` a row.
    // On `flat` rows a setting takes the cut, which races nearly every column, but min-p alone,
    // whose parts race their bands ([`RACED_WHEN_FLAT`]).
    let one_read = |name: &str, passes: u32, idle_rows: bool, input: &str, row_bytes: f64, flat: bool| -> Vec<Launch> {
        let p = vocab.div_ceil(TOP_K_PART_COLS);
        let decided = !idle_rows && ONE_READ.contains(&name);
        let races = decided && flat && RACED_WHEN_FLAT.contains(&name);
        let cut = !idle_rows && !races && (flat || TOP_P_CUT.contains(&name));
        let onchip = match (decided, cut) {
            _ if races => OnChipWork::Race,
            (true, _) => OnChipWork::Select,
            (_, true) => OnChipWork::Histogram,
            _ => OnChipWork::None,
        };
        let parts = Launch { onchip, flat, ..parted(format!("top_k_parts_{input}"), p, row_bytes, decided || cut) };
        let merge = format!("top_k_merge_{input}");
        let cut_launch = Launch { rereads: true, flat, ..parted(format!("top_p_cut_{input}"), p, row_bytes, cut) };
        if batch * p <= cut_here_groups {
            // The merge launch over every part: the cut's second read in the merge's blocks.
            let here = Launch { kernel: merge, loops_of: cut.then_some(cut_launch.kernel), ..cut_launch };
            return vec![parts, here];
        }
        let merge =
            if decided || cut || idle_rows { idle(merge, batch) } else { whole_of(merge, passes, 0.0, row_bytes) };
        vec![parts, cut_launch, merge]
    };
    let logits = format!("logits_{dtype}");
    // The seeded kernel from logits (`Call::SeededLogits`): one launch, a split row's last part
    // merging the parts' records; with `idle_rows`, the launch of `sample`, which its plain rows
    // leave at once.
    let seeded = |idle_rows: bool| -> Launch {
        let kernel = format!("seeded_logits_{dtype}");
        let p = seeded_parts(vocab, block);
        if idle_rows {
            idle(kernel, batch * p)
        } else if p <= 1 {
            whole(kernel, 1, 0.0)
        } else {
            parted(kernel, p, row, true)
        }
    };
    match call {
        Call::ReadRows => vec![whole(format!("read_rows_{dtype}"), 1, 0.0)],
        Call::Greedy => split(format!("greedy_{dtype}"), "combine_logits", row),
        Call::RaceLogits => split(format!("race_logits_{dtype}"), "combine_logits", row),
        Call::RaceProbs => split("race_probs".into(), "combine_probs", vocab as f64 * 4.0),
        // f09f138: three reads of a row by one workgroup. Now two reads (the maximum and the sum
        // together, then the write's) and one write in f32, rows split as the argmax family's:
        // then a launch for the parts' pairs and one that merges them and writes.
        Call::Softmax => {
            let written = vocab as f64 * 4.0 * batch as f64;
            let p = parts(batch, vocab, target_groups, block);
            match era {
                Era::F09f138 => vec![whole(format!("softmax_{dtype}"), 3, written)],
                Era::Current if p <= 1 => vec![whole(format!("softmax_{dtype}"), 2, written)],
                Era::Current => (0..2)
                    .map(|stage| Launch {
                        kernel: format!("softmax_{dtype}"),
                        groups: batch * p,
                        columns: vocab.div_ceil(p),
                        passes: 1,
                        read: row * batch as f64,
                        written: if stage == 1 { written } else { 0.0 },
                        rereads: stage == 1,
                        side: false,
                        loops_of: None,
                        onchip: OnChipWork::None,
                        flat: false,
                    })
                    .collect(),
            }
        }
        // f09f138: three reads of a row by one workgroup (the maximum, the sum, the float64
        // race). Now one, screened in float32 (the rescan of a row or of an invocation with two
        // possible winners is a rare path), rows split by their length, in one launch whose
        // last part of a row merges the records and scores a few columns.
        Call::SeededLogits if era == Era::F09f138 => vec![whole(format!("seeded_logits_{dtype}"), 3, 0.0)],
        Call::SeededLogits => vec![seeded(false)],
        Call::Sample => {
            let mut v = split(format!("sample_{dtype}"), "combine_logits", row);
            if era == Era::Current {
                // `Backend::sample` without row lists: the seeded and filter launches span the
                // batch and each plain row leaves them at once, on the side stream.
                v.push(seeded(true));
                v.extend(one_read("", 0, true, &logits, row, false));
                v.iter_mut().skip(1).for_each(|l| l.side = true);
            }
            v
        }
        Call::Filter(name, passes) if era == Era::Current => one_read(name, passes, false, &logits, row, false),
        Call::Filter(_, passes) => filter(passes, false, &format!("logits_{dtype}")),
        // The one-read path from probabilities (f32), as from logits.
        Call::FilterProbs if era == Era::Current => {
            one_read("filter_top_p_0.9", TOP_P_PASSES, false, "probs", vocab as f64 * 4.0, false)
        }
        Call::Flat(name) if name == Call::FilterProbs.name() => {
            one_read("filter_top_p_0.9", TOP_P_PASSES, false, "probs", vocab as f64 * 4.0, true)
        }
        Call::Flat(name) => one_read(name, TOP_P_PASSES, false, &logits, row, true),
        Call::FilterProbs => filter(TOP_P_PASSES, false, "probs"),
        // Neither is split over blocks (the host stages only the sampling filter kernels).
        Call::MaskLogits => {
            vec![whole(format!("mask_logits_{dtype}"), TOP_P_PASSES + 1, vocab as f64 * 4.0 * batch as f64)]
        }
        Call::RenormProbs => vec![whole("renorm_probs".into(), TOP_P_PASSES + 1, vocab as f64 * 4.0 * batch as f64)],
        // The plain kernel over the batch (the listed rows leave it at once); the seeded list is
        // empty, so no seeded launch; with a top-p row, the one-read path over the filtered
        // rows' list on the side stream: the parts and the cut over that row's parts, each part
        // read once in each, the merge launch doing the cut where its parts fit (with no top-p
        // row, no launch of either).
        Call::Step(top_p) => {
            let mut v = split(format!("sample_{dtype}"), "combine_logits", row);
            let p = vocab.div_ceil(TOP_K_PART_COLS);
            let one_row = |kernel: String, rereads: bool| Launch {
                kernel,
                groups: p,
                columns: vocab.div_ceil(p),
                passes: 1,
                read: row,
                written: 0.0,
                rereads,
                side: true,
                loops_of: None,
                onchip: OnChipWork::None,
                flat: false,
            };
            if top_p > 0 {
                let (merge, cut) = (format!("top_k_merge_logits_{dtype}"), format!("top_p_cut_logits_{dtype}"));
                v.push(one_row(format!("top_k_parts_logits_{dtype}"), false));
                if p <= cut_here_groups {
                    v.push(Launch { loops_of: Some(cut), ..one_row(merge, true) });
                } else {
                    v.push(one_row(cut, true));
                    v.push(Launch { side: true, ..idle(merge, 1) });
                }
            }
            v
        }
        Call::Seeded => vec![whole(format!("seeded_{dtype}"), 1, 0.0)],
        Call::SeededScreened => vec![whole(format!("seeded_screened_{dtype}"), 2, 0.0)],
    }
}
