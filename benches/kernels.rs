//! Every kernel family on every backend present, timed on the device and set against the
//! bandwidth a plain read reaches in the same run, so a figure says how far a kernel is from the
//! memory bound and not only how long it took.
//!
//! `cargo bench --bench kernels` runs a quick subset (lavapipe on two CPU cores finishes it in a
//! few minutes); `cargo bench --bench kernels -- --full` or `SK_BENCH_FULL=1` runs the whole
//! grid: batch 1, 8, 32, 64, 256 x vocabulary 32768, 128256, 151936 x f32 and bf16 logits x
//! peaked, flat and model-like rows. Each device backend present (CUDA, wgpu; the CPU oracle at
//! its small sizes where neither is, or with `SK_BENCH_CPU=1`) prints a table and writes `bench-results/<backend>.csv` and a plot
//! `bench-results/<backend>.svg` (`SK_BENCH_OUT` names another folder).
//!
//! Per cell, after warm-up calls: the median and interquartile range of `reps` calls, each
//! measured by the backend's device clock (CUDA events, wgpu timestamp queries), or where the
//! device has none by the wall clock up to a wait for the device (the `clock` column says which);
//! the bytes the call reads and writes of the batch x vocabulary matrices (passes x elements x
//! element size; the per-row records and results, a few bytes a row, are left out); the
//! effective bandwidth (those bytes over the median); its fraction of the read kernel's best
//! bandwidth anywhere in the run (what this device attains when it only reads); and the ratio of
//! the median to the race from logits on the same rows.
//!
//! The full grid also times each family cold (the `cache` column): before every call (warm-ups
//! included) the bench reads four buffers of 64 MiB, four times an H200's 50 MB L2, so the call's
//! first read of each row comes from DRAM. Warm cells repeat calls on one buffer, which an input
//! smaller than L2 then never leaves (32 x 151936 f32 is 19.4 MB). Cold cells are f32
//! model-like rows only, on devices that take a 64 MiB buffer.
//!
//! `--stage NAME` (or `SK_BENCH_STAGE`) runs one stage of a GPU run instead ([`STAGES`], run in
//! turn by `cargo xtask bundle-device`'s script). `SK_BENCH_BACKENDS=cuda` (a comma list of
//! `cuda`, `wgpu`, `cpu`) times only the backends named, and a named backend that is absent is
//! said to be not run and still gets its CSV, the header alone. `SK_BENCH_SECONDS=N` stops
//! before the first cell that would start after N seconds. Each backend's CSV is written as the
//! cells end (the header first, then row by row, flushed), so a run stopped at its limit keeps
//! every cell it finished.

mod common;

use common::{Stats, Timed};
use half::bf16;
use plotters::prelude::*;
use sampling_kernels::{
    reference::philox, Backend, Clock, CpuBackend, Diagnostics, Error, FilterOrder, Input as Kept, Logits, Output,
    RowParams, Sampler, Shape,
};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// Which cells run.
struct Grid {
    batches: &'static [usize],
    vocabs: &'static [usize],
    rows: &'static [Rows],
    /// Timed calls per cell, after [`WARMUP`] untimed ones.
    reps: usize,
    /// Whether f32 model-like cells are timed cold too (L2 flushed before each call).
    cold: bool,
    /// The logits formats.
    dtypes: &'static [Dtype],
    /// Whether a family (by name) is timed.
    families: fn(&str) -> bool,
}

/// The grid.
const FULL: Grid = Grid {
    batches: &[1, 8, 32, 64, 256],
    vocabs: &[32768, 128256, 151936],
    rows: &[Rows::ModelLike, Rows::Peaked, Rows::Flat],
    reps: 50,
    cold: true,
    dtypes: &Dtype::ALL,
    families: |_| true,
};

/// The default: small enough for lavapipe on two cores (about a minute and a half there), and
/// still the smallest and largest vocabulary at one, a few and many rows, of every kind.
const QUICK: Grid = Grid {
    batches: &[1, 8, 32],
    vocabs: &[32768, 151936],
    rows: &[Rows::ModelLike, Rows::Peaked, Rows::Flat],
    reps: 10,
    cold: false,
    dtypes: &Dtype::ALL,
    // Not the filters from probabilities or the steps: a third more time on lavapipe.
    families: |name| !name.starts_with(PROBS_FILTER) && !name.starts_with(STEP),
};

/// The families a GPU run times at each batch: the race beside a plain read and greedy, every
/// filter setting from logits and from probabilities, and `Sampler::step`.
fn sampling_families(name: &str) -> bool {
    [READ, "greedy", RACE].contains(&name) || name.starts_with("filter_") || name.starts_with(STEP)
}

/// The stages of a GPU run, in the order `cargo xtask bundle-device`'s script runs them
/// (`--stage NAME`): f32 logits of Qwen3's vocabulary (151936), model-like rows warm and cold,
/// and flat rows (where top-p 0.9 and min-p 0.05 keep most of the row) warm: a few dozen cells
/// each, so that a lease of minutes can run every one of them.
const STAGES: [(&str, Grid); 3] = [
    (
        "batch32",
        Grid {
            batches: &[32],
            vocabs: &[151936],
            rows: &[Rows::ModelLike, Rows::Flat],
            reps: 50,
            cold: true,
            dtypes: &[Dtype::F32],
            families: sampling_families,
        },
    ),
    (
        "batch1_256",
        Grid {
            batches: &[1, 256],
            vocabs: &[151936],
            rows: &[Rows::ModelLike, Rows::Flat],
            reps: 50,
            cold: true,
            dtypes: &[Dtype::F32],
            families: sampling_families,
        },
    ),
    (
        "seeded_softmax",
        Grid {
            batches: &[1, 32, 256],
            vocabs: &[151936],
            rows: &[Rows::ModelLike],
            reps: 50,
            cold: true,
            dtypes: &[Dtype::F32],
            // The read kernel and the race for the `x read peak` and `x race` columns.
            families: |name| [READ, RACE, "softmax", "seeded_from_logits"].contains(&name),
        },
    ),
];

/// Untimed calls before each cell's timed ones (the first compiles the kernel).
const WARMUP: usize = 2;

/// Where a cell's calls find their input.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cache {
    /// Calls repeated on one buffer: an input that fits stays in L2.
    Warm,
    /// [`Flush`] before each call.
    Cold,
}

impl Cache {
    fn name(self) -> &'static str {
        match self {
            Cache::Warm => "warm",
            Cache::Cold => "cold",
        }
    }
}

/// Buffers read before each cold call: 4 x 64 MiB, four times the largest L2 this bench meets
/// (an H200's 50 MB), so nothing of the call's input is left there.
struct Flush<B: Backend> {
    buffers: Vec<B::Buffer<f32>>,
    sums: B::Buffer<f32>,
}

impl<B: Timed> Flush<B> {
    const SHAPE: Shape = Shape { batch: 512, vocab: 32768, stride: 32768 };

    /// `None` where the device takes no batch that large (the CPU oracle).
    fn new(b: &B) -> Option<Self> {
        let elements = Self::SHAPE.elements();
        if elements > B::MAX_ELEMENTS {
            return None;
        }
        let buffers = (0..4).map(|_| b.zeros::<f32>(elements)).collect::<Result<Vec<_>, _>>().ok()?;
        Some(Flush { buffers, sums: b.zeros(Self::SHAPE.batch).ok()? })
    }

    fn run(&mut self, b: &B) {
        for buffer in &self.buffers {
            b.read_rows(Self::SHAPE, Logits::F32(buffer), &mut self.sums).expect("the flush reads");
        }
    }
}

/// The family every kernel is compared with in the `x race` column.
const RACE: &str = "race_from_logits";
/// The read kernel: its best bandwidth is the yardstick of the `x read peak` column.
const READ: &str = "read_rows";
/// The prefix of the filter families from probabilities (`filter_probs_top_p_0.9`: the cost
/// model's name).
const PROBS_FILTER: &str = "filter_probs_";
/// The prefix of the `Sampler::step` families.
const STEP: &str = "step_";

/// Logits formats.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Dtype {
    F32,
    Bf16,
}

impl Dtype {
    const ALL: [Dtype; 2] = [Dtype::F32, Dtype::Bf16];
    fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
        }
    }
    fn bytes(self) -> u64 {
        match self {
            Dtype::F32 => 4,
            Dtype::Bf16 => 2,
        }
    }
}

/// The shape of each row's distribution. Values come from the crate's Philox stream keyed by
/// (kind, row, column), so every run and every backend sees the same logits.
#[derive(Clone, Copy, PartialEq)]
enum Rows {
    /// Gumbel noise (standard deviation 1.28) with one column 25 above it: nearly all the
    /// probability on one token, as in a confident decode step.
    Peaked,
    /// Noise of 1e-3: nearly uniform, the worst case for any filter that sorts or searches.
    Flat,
    /// Zipf's law with exponent 1.1, as next-token distributions roughly follow: each column
    /// draws a uniform rank `r` in `[1, V]` and gets the logit `-1.1 ln r`.
    ModelLike,
}

impl Rows {
    fn name(self) -> &'static str {
        match self {
            Rows::Peaked => "peaked",
            Rows::Flat => "flat",
            Rows::ModelLike => "model_like",
        }
    }
    fn logit(self, row: usize, col: usize, vocab: usize) -> f32 {
        let w = philox::word(self as u64, row as u64, col as u32);
        match self {
            Rows::Peaked => philox::gumbel(w) as f32 + if col == row * 7919 % vocab { 25.0 } else { 0.0 },
            Rows::Flat => 1e-3 * philox::gumbel(w) as f32,
            Rows::ModelLike => -1.1 * (1.0 + vocab as f64 * philox::uniform(w) as f64).ln() as f32,
        }
    }
}

/// What a family reads.
#[derive(Clone, Copy, PartialEq)]
enum Input {
    /// The logits, in the cell's format.
    Logits,
    /// Their float32 softmax (the same for both formats, so these families run in the f32
    /// cells only).
    Probs,
}

/// Everything a family's launch may use, sized for the grid's largest batch.
struct Buffers<'a, B: Backend> {
    logits: Logits<'a, B>,
    rows: &'a B::Buffer<RowParams>,
    /// The logits' softmax, written before any timing so `race_from_probs` samples real
    /// probabilities (`softmax` rewrites the same values).
    probs: B::Buffer<f32>,
    tokens: B::Buffer<u32>,
    sums: B::Buffer<f32>,
    /// The same rows with each setting of [`FILTERS`], in its order.
    filtered: &'a [B::Buffer<RowParams>],
    /// What an engine calls each step, on the rows of [`STEPS`].
    sampler: Sampler<&'a B>,
    steps: &'a [Vec<RowParams>],
}

/// A filter setting: its family names from logits and from probabilities, how it changes a
/// plain row, the passes it takes.
type Setting = (&'static str, &'static str, fn(RowParams) -> RowParams, u64);

/// The filter settings timed, those of `benches/torch_baselines.py`: top-k 50, top-p 0.9,
/// min-p 0.05, Qwen3's top-k 20 with top-p 0.95 (joint, as SGLang; and top-k first), with the
/// passes over the row each takes (`filters::passes`). The names are the cost model's
/// (`cargo xtask cost`).
const FILTERS: [Setting; 5] = [
    ("filter_top_k_50", "filter_probs_top_k_50", |r| r.with_top_k(50), 10),
    ("filter_top_p_0.9", "filter_probs_top_p_0.9", |r| r.with_top_p(0.9), 10),
    ("filter_min_p_0.05", "filter_probs_min_p_0.05", |r| r.with_min_p(0.05), 2),
    ("filter_qwen3_joint", "filter_probs_qwen3_joint", |r| r.with_top_k(20).with_top_p(0.95), 10),
    (
        "filter_qwen3_k_first",
        "filter_probs_qwen3_k_first",
        |r| r.with_top_k(20).with_top_p(0.95).with_order(FilterOrder::TopKFirst),
        18,
    ),
];

/// The `Sampler::step` families (the cost model's names) and the top-p 0.9 rows of each: none,
/// and row 0 (at batch 32 the mixed step of 31 plain rows and one top-p row).
const STEPS: [(&str, usize); 2] = [("step_plain", 0), ("step_plain_and_one_top_p", 1)];

type LaunchFn<B> = Box<dyn for<'x, 'a> Fn(&B, Shape, &'x mut Buffers<'a, B>) -> sampling_kernels::Result<()>>;

/// One kernel family and what one call of it moves.
struct Family<B: Backend> {
    name: &'static str,
    input: Input,
    /// Reads of each input element for the rows this bench sends (all race rows: `sample`
    /// reads once, as it does for any row not seeded).
    passes: u64,
    /// Bytes written per input element (`softmax` writes the float32 probabilities).
    writes: u64,
    launch: LaunchFn<B>,
}

/// The families timed, in this order (the read kernel first), then per setting of [`FILTERS`]
/// `sample_filtered` on every row from logits and from probabilities, then the [`STEPS`].
fn families<B: Backend>() -> Vec<Family<B>> {
    let family = |name, input, passes, writes, launch| Family { name, input, passes, writes, launch };
    let mut all: Vec<Family<B>> = vec![
        family(READ, Input::Logits, 1, 0, Box::new(|b, s, x| b.read_rows(s, x.logits, &mut x.sums))),
        family("greedy", Input::Logits, 1, 0, Box::new(|b, s, x| b.greedy(s, x.logits, Output::new(&mut x.tokens)))),
        family(
            RACE,
            Input::Logits,
            1,
            0,
            Box::new(|b, s, x| b.race_from_logits(s, x.logits, x.rows, Output::new(&mut x.tokens))),
        ),
        family(
            "race_from_probs",
            Input::Probs,
            1,
            0,
            Box::new(|b, s, x| b.race_from_probs(s, &x.probs, x.rows, Output::new(&mut x.tokens))),
        ),
        family("softmax", Input::Logits, 2, 4, Box::new(|b, s, x| b.softmax(s, x.logits, x.rows, &mut x.probs))),
        family(
            "seeded_from_logits",
            Input::Logits,
            3,
            0,
            Box::new(|b, s, x| b.seeded_from_logits(s, x.logits, x.rows, Output::new(&mut x.tokens))),
        ),
        family(
            "sample",
            Input::Logits,
            1,
            0,
            Box::new(|b, s, x| b.sample(s, x.logits, x.rows, Output::new(&mut x.tokens))),
        ),
    ];
    for (i, &(name, probs_name, _, passes)) in FILTERS.iter().enumerate() {
        all.push(family(
            name,
            Input::Logits,
            passes,
            0,
            Box::new(move |b, s, x| {
                b.sample_filtered(s, Kept::Logits(x.logits), &x.filtered[i], Output::new(&mut x.tokens))
            }),
        ));
        all.push(family(
            probs_name,
            Input::Probs,
            passes,
            0,
            Box::new(move |b, s, x| {
                b.sample_filtered(s, Kept::Probs(&x.probs), &x.filtered[i], Output::new(&mut x.tokens))
            }),
        ));
    }
    for (i, &(name, _)) in STEPS.iter().enumerate() {
        all.push(family(
            name,
            Input::Logits,
            1,
            0,
            Box::new(move |_, s, x| x.sampler.step(s, x.logits, &x.steps[i][..s.batch], Output::new(&mut x.tokens))),
        ));
    }
    all
}

/// One measured cell.
struct Record {
    kernel: &'static str,
    /// The input's format (f32 for the probability families).
    dtype: Dtype,
    rows: &'static str,
    batch: usize,
    vocab: usize,
    clock: Clock,
    cache: Cache,
    us: Stats,
    bytes_read: u64,
    bytes_written: u64,
}

impl Record {
    /// Bytes moved per microsecond is megabytes per second; in GB/s.
    fn gbps(&self) -> f64 {
        (self.bytes_read + self.bytes_written) as f64 / self.us.median / 1e3
    }
}

/// Times every family of `grid` on every cell of it that `b` takes, calling `on_cell` with the
/// cells so far after each, and stops before the first cell that would start after `deadline`.
fn measure<B: Timed>(b: &B, grid: &Grid, deadline: Option<Instant>, on_cell: &mut dyn FnMut(&[Record])) -> Vec<Record> {
    let families: Vec<Family<B>> = families().into_iter().filter(|f| (grid.families)(f.name)).collect();
    let mut flush = if grid.cold { Flush::new(b) } else { None };
    let mut records = Vec::new();
    for &vocab in grid.vocabs {
        let batches: Vec<usize> = grid.batches.iter().copied().filter(|&n| n * vocab <= B::MAX_ELEMENTS).collect();
        let Some(&most) = batches.last() else { continue };
        let rows: Vec<RowParams> = (0..most as u64).map(|r| RowParams::new(0.8, 1000 + r, 7)).collect();
        let filtered: Vec<B::Buffer<RowParams>> = FILTERS
            .iter()
            .map(|(_, _, with, _)| b.upload(&rows.iter().map(|&r| with(r)).collect::<Vec<_>>()).unwrap())
            .collect();
        let steps: Vec<Vec<RowParams>> = STEPS
            .iter()
            .map(|&(_, top_p)| {
                rows.iter().enumerate().map(|(i, &r)| if i < top_p { r.with_top_p(0.9) } else { r }).collect()
            })
            .collect();
        let rows = b.upload(&rows).unwrap();
        for &kind in grid.rows {
            let host: Vec<f32> = (0..most * vocab).map(|i| kind.logit(i / vocab, i % vocab, vocab)).collect();
            for &dtype in grid.dtypes {
                let (f32s, bf16s);
                let logits = match dtype {
                    Dtype::F32 => {
                        f32s = b.upload(&host).unwrap();
                        Logits::F32(&f32s)
                    }
                    Dtype::Bf16 => {
                        bf16s = b.upload(&host.iter().map(|&v| bf16::from_f32(v)).collect::<Vec<_>>()).unwrap();
                        Logits::Bf16(&bf16s)
                    }
                };
                let mut x = Buffers {
                    logits,
                    rows: &rows,
                    probs: b.zeros(most * vocab).unwrap(),
                    tokens: b.zeros(most).unwrap(),
                    sums: b.zeros(most).unwrap(),
                    filtered: &filtered,
                    sampler: Sampler::new(b, most).unwrap(),
                    steps: &steps,
                };
                b.softmax(Shape::dense(most, vocab), x.logits, x.rows, &mut x.probs).unwrap();
                for f in &families {
                    if f.input == Input::Probs && dtype != Dtype::F32 {
                        continue;
                    }
                    let input = if f.input == Input::Probs { Dtype::F32 } else { dtype };
                    // Cold too for the first row kind in f32, where the device takes the flush.
                    let cold = flush.as_mut().filter(|_| kind == grid.rows[0] && dtype == Dtype::F32);
                    let mut caches = vec![(Cache::Warm, None)];
                    caches.extend(cold.map(|f| (Cache::Cold, Some(f))));
                    'cells: for (cache, mut flush) in caches {
                        for &batch in &batches {
                            if deadline.is_some_and(|d| Instant::now() >= d) {
                                println!("{}: stopped at the time limit, after {} cells", B::LABEL, records.len());
                                return records;
                            }
                            let shape = Shape::dense(batch, vocab);
                            let Some((us, clock)) = time_cell(b, f, shape, &mut x, grid.reps, flush.as_deref_mut())
                            else {
                                break 'cells;
                            };
                            let elements = (batch * vocab) as u64;
                            records.push(Record {
                                kernel: f.name,
                                dtype: input,
                                rows: kind.name(),
                                batch,
                                vocab,
                                clock,
                                cache,
                                us,
                                bytes_read: f.passes * elements * input.bytes(),
                                bytes_written: f.writes * elements,
                            });
                            on_cell(&records);
                        }
                    }
                }
            }
        }
    }
    records
}

/// The median and quartiles of `reps` calls in microseconds, and the clock; `None` (said once)
/// where the device lacks what the kernel needs, as float64 on Metal. With `flush`, each call
/// follows a read of the flush buffers (not timed: the device clock times the call alone).
fn time_cell<B: Timed>(
    b: &B,
    f: &Family<B>,
    shape: Shape,
    x: &mut Buffers<'_, B>,
    reps: usize,
    mut flush: Option<&mut Flush<B>>,
) -> Option<(Stats, Clock)> {
    let mut once = || {
        if let Some(flush) = flush.as_deref_mut() {
            flush.run(b);
        }
        b.time(&mut |b| (f.launch)(b, shape, x))
    };
    for _ in 0..WARMUP {
        match once() {
            Ok(_) => {}
            Err(e @ Error::Unsupported { .. }) => {
                println!("{}: {} not run: {e}", B::LABEL, f.name);
                return None;
            }
            Err(e) => panic!("{} {shape:?}: {e}", f.name),
        }
    }
    let mut clock = Clock::Device;
    let mut us: Vec<f64> = (0..reps)
        .map(|_| {
            let t = once().unwrap_or_else(|e| panic!("{} {shape:?}: {e}", f.name));
            clock = t.clock;
            t.elapsed.as_secs_f64() * 1e6
        })
        .collect();
    Some((Stats::of(&mut us), clock))
}

/// The read kernel's best bandwidth in the run, in GB/s.
fn read_peak(records: &[Record]) -> f64 {
    records.iter().filter(|r| r.kernel == READ).map(Record::gbps).fold(0.0, f64::max)
}

/// The median of the race from logits on the same cell (f32 for the probability families).
fn race_median(records: &[Record], r: &Record) -> Option<f64> {
    records
        .iter()
        .find(|o| {
            o.kernel == RACE
                && o.dtype == r.dtype
                && o.rows == r.rows
                && o.cache == r.cache
                && o.batch == r.batch
                && o.vocab == r.vocab
        })
        .map(|o| o.us.median)
}

/// One line of `bench-results/<backend>.csv`: the fields are the columns, in order, the same as
/// `benches/torch_baselines.py` writes (the bundle's `model_vs_measured.py` and `cargo xtask
/// cost --calibrate` read them by name). Figures keep the decimals the files have always had.
#[derive(serde::Serialize, Default)]
struct CsvRow<'a> {
    backend: &'a str,
    device: &'a str,
    clock: &'static str,
    kernel: &'static str,
    dtype: &'static str,
    rows: &'static str,
    batch: usize,
    vocab: usize,
    reps: usize,
    #[serde(serialize_with = "fixed::<3, _>")]
    median_us: f64,
    #[serde(serialize_with = "fixed::<3, _>")]
    q1_us: f64,
    #[serde(serialize_with = "fixed::<3, _>")]
    q3_us: f64,
    bytes_read: u64,
    bytes_written: u64,
    #[serde(serialize_with = "fixed::<3, _>")]
    gbps: f64,
    #[serde(serialize_with = "fixed::<3, _>")]
    read_peak_gbps: f64,
    #[serde(serialize_with = "fixed::<4, _>")]
    frac_read_peak: f64,
    /// Empty where the cell has no race to compare with.
    #[serde(serialize_with = "fixed_or_empty::<4, _>")]
    ratio_to_race: Option<f64>,
    cache: &'static str,
}

/// `x` with `N` decimals.
fn fixed<const N: usize, S: serde::Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{:.*}", N, x))
}

fn fixed_or_empty<const N: usize, S: serde::Serializer>(x: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match x {
        Some(x) => fixed::<N, S>(x, s),
        None => s.serialize_str(""),
    }
}

fn clock_name(c: Clock) -> &'static str {
    match c {
        Clock::Device => "device",
        Clock::Wall => "wall",
    }
}

/// A backend's CSV as it is written: the header, then each row flushed as it comes.
struct Csv(csv::Writer<std::fs::File>);

impl Csv {
    /// Creates (or empties) `<out>/<label>.csv` and writes the header: the fields of
    /// [`CsvRow`], as `csv` names them for a row.
    fn create(out: &Path, label: &str) -> Result<Csv, Box<dyn std::error::Error>> {
        std::fs::create_dir_all(out)?;
        let mut named = csv::Writer::from_writer(Vec::new());
        named.serialize(CsvRow::default())?;
        let named = named.into_inner()?;
        let header = named.split_inclusive(|&c| c == b'\n').next().ok_or("no header line")?;
        let mut file = std::fs::File::create(out.join(format!("{label}.csv")))?;
        file.write_all(header)?;
        file.flush()?;
        Ok(Csv(csv::WriterBuilder::new().has_headers(false).from_writer(file)))
    }

    fn write(&mut self, row: CsvRow) -> Result<(), Box<dyn std::error::Error>> {
        self.0.serialize(row)?;
        self.0.flush()?;
        Ok(())
    }
}

/// The CSV row of `r`, with the read kernel's best bandwidth and the race's median among
/// `records` (the run's, or the cells measured so far).
fn csv_row<'a>(label: &'a str, device: &'a str, reps: usize, records: &[Record], r: &Record) -> CsvRow<'a> {
    let peak = read_peak(records);
    CsvRow {
        backend: label,
        device,
        clock: clock_name(r.clock),
        kernel: r.kernel,
        dtype: r.dtype.name(),
        rows: r.rows,
        batch: r.batch,
        vocab: r.vocab,
        reps,
        median_us: r.us.median,
        q1_us: r.us.q1,
        q3_us: r.us.q3,
        bytes_read: r.bytes_read,
        bytes_written: r.bytes_written,
        gbps: r.gbps(),
        read_peak_gbps: peak,
        frac_read_peak: r.gbps() / peak,
        ratio_to_race: race_median(records, r).map(|m| r.us.median / m),
        cache: r.cache.name(),
    }
}

/// Prints the table and rewrites the CSV with the whole run's figures, and writes the plot.
fn report(
    label: &str,
    device: &str,
    reps: usize,
    records: &[Record],
    out: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let peak = read_peak(records);
    let clock = if records.iter().any(|r| r.clock == Clock::Wall) {
        "wall (no device clock: each call up to a wait for the device)"
    } else {
        "device (timestamp queries or CUDA events)"
    };
    println!("\n{label}: {device}; clock: {clock}; {reps} calls a cell; read kernel's best: {peak:.2} GB/s");
    println!(
        "| kernel | dtype | rows | cache | batch | vocab | median us [IQR] | MB moved | GB/s | x read peak | x race |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut csv = Csv::create(out, label)?;
    for r in records {
        let row = csv_row(label, device, reps, records, r);
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.1} [{:.1}, {:.1}] | {:.2} | {:.2} | {:.3} | {} |",
            r.kernel,
            r.dtype.name(),
            r.rows,
            r.cache.name(),
            r.batch,
            r.vocab,
            r.us.median,
            r.us.q1,
            r.us.q3,
            (r.bytes_read + r.bytes_written) as f64 / 1e6,
            row.gbps,
            row.frac_read_peak,
            row.ratio_to_race.map_or("-".to_string(), |x| format!("{x:.2}"))
        );
        csv.write(row)?;
    }
    plot(&out.join(format!("{label}.svg")), label, device, records, peak)?;
    println!("wrote {0}/{label}.csv and {0}/{label}.svg", out.display());
    Ok(())
}

/// Latency against batch, one panel per vocabulary, one line per kernel, for the first format
/// and row kind measured (f32 and model-like: the grids list them first; the CSV has the rest),
/// on log axes; dashed: one read of the logits at
/// the read kernel's best bandwidth, the floor no single-pass sampler can beat.
fn plot(
    path: &Path,
    label: &str,
    device: &str,
    records: &[Record],
    peak: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    let Some(first) = records.first() else { return Ok(()) };
    let (dtype, rows) = (first.dtype, first.rows);
    let chosen: Vec<&Record> =
        records.iter().filter(|r| r.dtype == dtype && r.rows == rows && r.cache == Cache::Warm).collect();
    let mut vocabs: Vec<usize> = chosen.iter().map(|r| r.vocab).collect();
    vocabs.sort();
    vocabs.dedup();
    let mut kernels: Vec<&str> = Vec::new();
    for r in &chosen {
        if !kernels.contains(&r.kernel) {
            kernels.push(r.kernel);
        }
    }
    let root = SVGBackend::new(path, (520 * vocabs.len() as u32, 460)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!("{label}: {device}; {} logits, {rows} rows; median us, IQR bars", dtype.name());
    let root = root.titled(&title, ("sans-serif", 16))?;
    for (area, &vocab) in root.split_evenly((1, vocabs.len())).iter().zip(&vocabs) {
        let cells: Vec<&&Record> = chosen.iter().filter(|r| r.vocab == vocab).collect();
        let batches: Vec<usize> = cells.iter().map(|r| r.batch).collect();
        let (lo_b, hi_b) = (*batches.iter().min().unwrap() as f64, *batches.iter().max().unwrap() as f64);
        let floor = |batch: f64| batch * (vocab as u64 * dtype.bytes()) as f64 / peak / 1e3;
        let lo_y = cells.iter().map(|r| r.us.q1).fold(floor(lo_b), f64::min) * 0.7;
        let hi_y = cells.iter().map(|r| r.us.q3).fold(floor(hi_b), f64::max) * 1.4;
        let mut chart = ChartBuilder::on(area)
            .caption(format!("vocabulary {vocab}"), ("sans-serif", 14))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(55)
            .build_cartesian_2d(
                (lo_b * 0.8..hi_b * 1.25).log_scale().with_key_points(batches.iter().map(|&b| b as f64).collect()),
                (lo_y..hi_y).log_scale(),
            )?;
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(BLACK.mix(0.15))
            .x_label_formatter(&|b| format!("{b:.0}"))
            .y_label_formatter(&|us| format!("{us:.0}"))
            .x_desc("batch")
            .y_desc("latency (us)")
            .draw()?;
        for (i, &kernel) in kernels.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let mut points: Vec<&&&Record> = cells.iter().filter(|r| r.kernel == kernel).collect();
            points.sort_by_key(|r| r.batch);
            chart
                .draw_series(
                    LineSeries::new(points.iter().map(|r| (r.batch as f64, r.us.median)), color.stroke_width(2))
                        .point_size(3),
                )?
                .label(kernel)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
            chart.draw_series(
                points
                    .iter()
                    .map(|r| PathElement::new(vec![(r.batch as f64, r.us.q1), (r.batch as f64, r.us.q3)], color)),
            )?;
        }
        let mut ends: Vec<f64> = batches.iter().map(|&b| b as f64).collect();
        ends.sort_by(f64::total_cmp);
        ends.dedup();
        chart
            .draw_series(DashedLineSeries::new(ends.iter().map(|&b| (b, floor(b))), 6, 4, BLACK.into()))?
            .label(format!("one read at {peak:.1} GB/s"))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// What this invocation runs: the cells, the backends (`SK_BENCH_BACKENDS`; `None`: every one
/// present), where the CSVs go, and when it stops (`SK_BENCH_SECONDS`).
struct Plan {
    grid: &'static Grid,
    named: Option<Vec<String>>,
    out: std::path::PathBuf,
    deadline: Option<Instant>,
}

impl Plan {
    fn from_env() -> Plan {
        let args: Vec<String> = std::env::args().collect();
        let stage = std::env::var("SK_BENCH_STAGE")
            .ok()
            .or_else(|| args.iter().position(|a| a == "--stage").and_then(|i| args.get(i + 1).cloned()));
        let full = std::env::var("SK_BENCH_FULL").is_ok_and(|v| v == "1") || args.iter().any(|a| a == "--full");
        let grid = match stage {
            Some(name) => STAGES.iter().find(|(n, _)| *n == name).map(|(_, g)| g).unwrap_or_else(|| {
                panic!("no stage {name}; the stages: {:?}", STAGES.iter().map(|(n, _)| n).collect::<Vec<_>>())
            }),
            None if full => &FULL,
            None => &QUICK,
        };
        let seconds = std::env::var("SK_BENCH_SECONDS")
            .ok()
            .map(|s| s.parse::<f64>().unwrap_or_else(|e| panic!("SK_BENCH_SECONDS={s}: {e}")));
        Plan {
            grid,
            named: std::env::var("SK_BENCH_BACKENDS").ok().map(|v| v.split(',').map(str::to_string).collect()),
            out: std::env::var("SK_BENCH_OUT").unwrap_or_else(|_| "bench-results".into()).into(),
            deadline: seconds.map(|s| Instant::now() + Duration::from_secs_f64(s)),
        }
    }

    /// Whether `SK_BENCH_BACKENDS` names the backend.
    fn names(&self, label: &str) -> bool {
        self.named.as_ref().is_some_and(|n| n.iter().any(|l| l == label))
    }

    /// Whether the backend is to be timed where present.
    fn wants(&self, label: &str) -> bool {
        self.named.is_none() || self.names(label)
    }

    /// Says the backend is not run and why; one that `SK_BENCH_BACKENDS` names still gets its
    /// CSV, the header alone, so a run on a machine without it shows what it would have written.
    fn absent(&self, label: &str, why: &dyn std::fmt::Display) {
        println!("{label}: not run ({why})");
        if self.names(label) {
            Csv::create(&self.out, label).unwrap_or_else(|e| panic!("writing {}: {e}", self.out.display()));
            println!("wrote {}/{label}.csv (the header alone)", self.out.display());
        }
    }

    /// Times `b` on the grid, writing its CSV as the cells end, then the table and the plot.
    fn run<B: Timed>(&self, b: &B) {
        let (label, device, out) = (B::LABEL, b.describe(), &self.out);
        let mut csv = Csv::create(out, label).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
        let records = measure(b, self.grid, self.deadline, &mut |records| {
            let row = csv_row(label, &device, self.grid.reps, records, records.last().expect("a cell"));
            csv.write(row).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
        });
        if records.is_empty() {
            return;
        }
        report(label, &device, self.grid.reps, &records, out)
            .unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
    }
}

fn main() {
    let plan = Plan::from_env();
    let grid = plan.grid;
    println!(
        "kernels bench ({}): batches {:?} x vocabularies {:?} x {:?} x rows {:?}",
        match STAGES.iter().find(|(_, g)| std::ptr::eq(g, grid)) {
            Some((name, _)) => format!("stage {name}"),
            None if std::ptr::eq(grid, &FULL) => "full grid".into(),
            None => "quick subset; --full or SK_BENCH_FULL=1 for the whole grid".into(),
        },
        grid.batches,
        grid.vocabs,
        grid.dtypes.iter().map(|d| d.name()).collect::<Vec<_>>(),
        grid.rows.iter().map(|r| r.name()).collect::<Vec<_>>()
    );
    // CUDA first: on a GPU machine it is the figure that matters most within the time given.
    // The CPU oracle only where named, or where no device backend ran (on a GPU machine its
    // figures say nothing about the kernels, and the bundle's time is short).
    let mut ran = false;
    #[cfg(feature = "cuda")]
    if plan.wants("cuda") {
        match sampling_kernels::CudaBackend::new(0) {
            Ok(b) => {
                plan.run(&b);
                ran = true;
            }
            Err(e) => plan.absent("cuda", &e),
        }
    }
    #[cfg(feature = "wgpu")]
    if plan.wants("wgpu") {
        match sampling_kernels::WgpuBackend::new() {
            Ok(b) => {
                plan.run(&b);
                ran = true;
            }
            Err(e) => plan.absent("wgpu", &e),
        }
    }
    let cpu = std::env::var("SK_BENCH_CPU").is_ok_and(|v| v == "1");
    if plan.names("cpu") || (plan.named.is_none() && (!ran || cpu)) {
        plan.run(&CpuBackend);
    }
}
