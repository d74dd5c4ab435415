//! The logits stage against vLLM's and SGLang's own definitions (`tests/data/stage_golden.json`,
//! written by `make_stage_golden.py` from numpy ports of their code): the CPU oracle gives their
//! processed logits exactly (every value equal, a zero's sign aside) and their greedy tokens;
//! `Sampler::step_staged` on the CPU backend samples what the engines' processed logits give;
//! the device kernels read the bitmask and NaN as -1e5 with the logits, exactly as the oracle
//! applies them first, and refuse the rest by name.

#[macro_use]
mod common;

use sampling_kernels::reference::stage::{apply, RowStage};
use sampling_kernels::{Backend, CpuBackend, Error, Logits, LogitsStage, Output, RowParams, Sampler, Shape, StageRow};
use serde::Deserialize;

#[derive(Deserialize)]
struct Golden {
    vocab: usize,
    logits: Vec<Vec<u32>>,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    row: usize,
    definitions: String,
    repetition: u32,
    frequency: u32,
    presence: u32,
    prompt: Vec<u32>,
    output: Vec<(u32, u32)>,
    bias: Vec<(u32, u32)>,
    banned: Vec<u32>,
    bitmask: Option<Vec<u32>>,
    nan_as_finite: bool,
    expected: Vec<u32>,
    greedy: Option<u32>,
}

fn golden() -> Golden {
    let text = std::fs::read_to_string(common::golden_dir().join("stage_golden.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn floats(bits: &[u32]) -> Vec<f32> {
    bits.iter().map(|&b| f32::from_bits(b)).collect()
}

impl Case {
    fn params(&self) -> StageRow {
        let row = if self.definitions == "sglang" { StageRow::sglang() } else { StageRow::vllm() };
        row.with_repetition(f32::from_bits(self.repetition))
            .with_frequency(f32::from_bits(self.frequency))
            .with_presence(f32::from_bits(self.presence))
    }
}

/// The first index of the largest value, NaN never chosen; `None` where nothing is above -inf.
fn greedy(x: &[f32]) -> Option<u32> {
    let mut best: Option<usize> = None;
    for (j, &v) in x.iter().enumerate() {
        if v > f32::NEG_INFINITY && best.is_none_or(|b| v > x[b]) {
            best = Some(j);
        }
    }
    best.map(|j| j as u32)
}

/// Equal values (NaN equal to NaN, zeros of either sign equal): the ports and the oracle round
/// the same float32 operations the same way, so there is no tolerance.
fn same(a: f32, b: f32) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

#[test]
fn oracle_matches_vllm_and_sglang() {
    let g = golden();
    assert_eq!(g.cases.len(), 20, "10 rows under each engine's definitions");
    for c in &g.cases {
        let mut x = floats(&g.logits[c.row]);
        let (bias_ids, bias_values): (Vec<u32>, Vec<f32>) = c.bias.iter().map(|&(t, b)| (t, f32::from_bits(b))).unzip();
        let (output_ids, output_counts): (Vec<u32>, Vec<u32>) = c.output.iter().copied().unzip();
        let stage = RowStage {
            params: c.params(),
            bias_ids: &bias_ids,
            bias_values: &bias_values,
            prompt_ids: &c.prompt,
            output_ids: &output_ids,
            output_counts: &output_counts,
            banned: &c.banned,
            allowed: c.bitmask.as_deref(),
            nan_as_finite: c.nan_as_finite,
        };
        apply(&mut x, &stage);
        let want = floats(&c.expected);
        for j in 0..g.vocab {
            assert!(same(x[j], want[j]), "row {} ({}), column {j}: {} != {}", c.row, c.definitions, x[j], want[j]);
        }
        assert_eq!(greedy(&x), c.greedy, "row {} ({})", c.row, c.definitions);
    }
}

/// The golden rows of one engine's definitions as one call's stage, in CSR layout, on `b`.
struct Batch<B: Backend> {
    rows: Vec<StageRow>,
    bias: [B::Buffer<u32>; 2],
    bias_values: B::Buffer<f32>,
    prompt: [B::Buffer<u32>; 2],
    output: [B::Buffer<u32>; 3],
    banned: [B::Buffer<u32>; 2],
    allowed: B::Buffer<u32>,
}

fn csr<T: Copy>(lists: impl Iterator<Item = Vec<T>>) -> (Vec<u32>, Vec<T>) {
    let (mut offsets, mut flat) = (vec![0u32], vec![]);
    for l in lists {
        flat.extend(l);
        offsets.push(flat.len() as u32);
    }
    (offsets, flat)
}

impl<B: Backend> Batch<B> {
    fn new(b: &B, cases: &[&Case], words: usize) -> Self {
        let up = |x: &[u32]| b.upload(x).unwrap();
        let (bo, bias) = csr(cases.iter().map(|c| c.bias.clone()));
        let (po, prompt) = csr(cases.iter().map(|c| c.prompt.clone()));
        let (oo, output) = csr(cases.iter().map(|c| c.output.clone()));
        let (no, banned) = csr(cases.iter().map(|c| c.banned.clone()));
        // A row without a grammar allows everything.
        let allowed: Vec<u32> = cases.iter().flat_map(|c| c.bitmask.clone().unwrap_or(vec![u32::MAX; words])).collect();
        Batch {
            rows: cases.iter().map(|c| c.params()).collect(),
            bias: [up(&bo), up(&bias.iter().map(|p| p.0).collect::<Vec<_>>())],
            bias_values: b.upload(&bias.iter().map(|p| f32::from_bits(p.1)).collect::<Vec<_>>()).unwrap(),
            prompt: [up(&po), up(&prompt)],
            output: [
                up(&oo),
                up(&output.iter().map(|p| p.0).collect::<Vec<_>>()),
                up(&output.iter().map(|p| p.1).collect::<Vec<_>>()),
            ],
            banned: [up(&no), up(&banned)],
            allowed: up(&allowed),
        }
    }
    fn stage(&self) -> LogitsStage<'_, B> {
        LogitsStage::new(&self.rows)
            .with_logit_bias(&self.bias[0], &self.bias[1], &self.bias_values)
            .with_prompt(&self.prompt[0], &self.prompt[1])
            .with_output(&self.output[0], &self.output[1], &self.output[2])
            .with_banned(&self.banned[0], &self.banned[1])
            .with_allowed(&self.allowed)
            .with_nan_as_finite()
    }
}

/// `Sampler::step_staged` on the CPU backend, a call per engine with all ten golden rows: greedy
/// rows get the engines' greedy tokens (the row whose bitmask allows nothing: token 0, status
/// 0), and sampled rows the tokens `step` gives on the engines' processed logits (the golden
/// values, not the oracle's).
#[test]
fn sampler_applies_the_stage_on_cpu() {
    let g = golden();
    let cpu = CpuBackend;
    for definitions in ["vllm", "sglang"] {
        let cases: Vec<&Case> = g.cases.iter().filter(|c| c.definitions == definitions).collect();
        let shape = Shape::dense(cases.len(), g.vocab);
        let logits: Vec<f32> = cases.iter().flat_map(|c| floats(&g.logits[c.row])).collect();
        let batch = Batch::new(&cpu, &cases, g.vocab.div_ceil(32));
        let x = cpu.upload(&logits).unwrap();
        let mut sampler = Sampler::new(&cpu, shape.batch).unwrap();
        let (mut tokens, mut status) = (cpu.zeros::<u32>(shape.batch).unwrap(), cpu.zeros::<u32>(shape.batch).unwrap());
        let greedy_rows = vec![RowParams::greedy(); shape.batch];
        let out = Output::new(&mut tokens).with_status(&mut status);
        sampler.step_staged(shape, Logits::F32(&x), &greedy_rows, &batch.stage(), out).unwrap();
        for (r, c) in cases.iter().enumerate() {
            assert_eq!(
                (tokens[r], status[r]),
                (c.greedy.unwrap_or(0), c.greedy.is_some() as u32),
                "{definitions} row {r}"
            );
        }
        let sampled: Vec<RowParams> = (0..shape.batch as u64).map(|r| RowParams::new(0.9, 52 + r, 7)).collect();
        let processed = cpu.upload(&cases.iter().flat_map(|c| floats(&c.expected)).collect::<Vec<_>>()).unwrap();
        let mut want = cpu.zeros::<u32>(shape.batch).unwrap();
        sampler.step(shape, Logits::F32(&processed), &sampled, Output::new(&mut want)).unwrap();
        sampler.step_staged(shape, Logits::F32(&x), &sampled, &batch.stage(), Output::new(&mut tokens)).unwrap();
        assert_eq!(tokens, want, "{definitions}: sampled rows");
    }
}

/// Bad penalties and short lists are refused by name before anything runs.
#[test]
fn stage_inputs_are_checked() {
    let cpu = CpuBackend;
    let shape = Shape::dense(2, 40);
    let x = cpu.upload(&[0.5f32; 80]).unwrap();
    let mut t = cpu.zeros::<u32>(2).unwrap();
    let mut sampler = Sampler::new(&cpu, 2).unwrap();
    let rows = [RowParams::greedy(); 2];
    let bad = [StageRow::vllm(), StageRow::vllm().with_repetition(0.0)];
    let err =
        sampler.step_staged(shape, Logits::F32(&x), &rows, &LogitsStage::new(&bad), Output::new(&mut t)).unwrap_err();
    assert!(matches!(err, Error::Param { row: 1, field: "repetition_penalty", .. }), "{err}");
    let ok = [StageRow::vllm(); 2];
    let (offsets, ids) = (cpu.upload(&[0u32, 1]).unwrap(), cpu.upload(&[3u32]).unwrap());
    let stage = LogitsStage::new(&ok).with_banned(&offsets, &ids);
    let err = sampler.step_staged(shape, Logits::F32(&x), &rows, &stage, Output::new(&mut t)).unwrap_err();
    assert!(matches!(err, Error::BufferTooShort { need: 3, .. }), "{err}");
    let mask = cpu.upload(&[u32::MAX; 3]).unwrap();
    let stage = LogitsStage::new(&ok).with_allowed(&mask);
    let err = sampler.step_staged(shape, Logits::F32(&x), &rows, &stage, Output::new(&mut t)).unwrap_err();
    assert!(matches!(err, Error::BufferTooShort { len: 3, need: 4, .. }), "{err}");
}

/// The device backends refuse what their kernels do not read (the penalties, logit bias and
/// banned tokens) by name, never sampling as if it were not there, even beside a bitmask they do
/// read; a stage that changes nothing is a plain step.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn refuses_the_sparse_stage<B: Backend>(b: &B) {
    let shape = Shape::dense(2, 40);
    let x = b.upload(&[0.5f32; 80]).unwrap();
    let mut t = b.zeros::<u32>(2).unwrap();
    let mut sampler = Sampler::new(b, 2).unwrap();
    let rows = [RowParams::greedy(); 2];
    let penalised = [StageRow::vllm(), StageRow::sglang().with_frequency(0.5)];
    let stage = LogitsStage::new(&penalised);
    let err = sampler.step_staged(shape, Logits::F32(&x), &rows, &stage, Output::new(&mut t)).unwrap_err();
    assert!(matches!(err, Error::UnsupportedStage { feature: "frequency penalty" }), "{err}");
    let plain = [StageRow::vllm(); 2];
    let (mask, offsets, ids) =
        (b.upload(&[u32::MAX; 4]).unwrap(), b.upload(&[0u32, 1, 1]).unwrap(), b.upload(&[3u32]).unwrap());
    let stage = LogitsStage::new(&plain).with_allowed(&mask).with_banned(&offsets, &ids);
    let err = sampler.step_staged(shape, Logits::F32(&x), &rows, &stage, Output::new(&mut t)).unwrap_err();
    assert!(matches!(err, Error::UnsupportedStage { feature: "banned tokens (min-tokens)" }), "{err}");
    sampler.step_staged(shape, Logits::F32(&x), &rows, &LogitsStage::new(&plain), Output::new(&mut t)).unwrap();
    assert_eq!(b.download(&t).unwrap(), [0, 0]);
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_refuses_the_sparse_stage() {
    common::on("wgpu", "wgpu_refuses_the_sparse_stage", common::wgpu(), refuses_the_sparse_stage);
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_refuses_the_sparse_stage() {
    common::on("cuda", "cuda_refuses_the_sparse_stage", common::cuda(), refuses_the_sparse_stage);
}

/// A xorshift stream for the device test's data (fixed seeds: the same rows on every run).
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Rows of every kind the per-row sampler routes (greedy, the Philox race, SGLang's seeded race,
/// each filter and order, rank-hashed), each filtered one on every forced path.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn every_kind_of_row() -> Vec<RowParams> {
    use sampling_kernels::{FilterOrder as Order, FilterPath, SeededHash};
    let race = |s: u64| RowParams::new(0.8, 40 + s, 3);
    let filtered = [
        race(1).with_top_k(20).with_top_p(0.95),
        race(2).with_top_p(0.9),
        race(3).with_min_p(0.05),
        race(4).with_top_k(300).with_top_p(0.9).with_order(Order::TopKFirst),
        race(5).with_min_p(0.02).with_top_p(0.8).with_order(Order::MinPFirst),
        RowParams::seeded(0.7, 9, 4).with_top_k(50).with_top_p(0.9).with_seeded_hash(SeededHash::SortedRank),
        RowParams::seeded(1.1, 10, 4).with_top_p(0.95),
    ];
    let mut rows = vec![RowParams::greedy(), race(0), RowParams::seeded(0.7, 8, 2)];
    for path in [FilterPath::Auto, FilterPath::OneRead, FilterPath::FilterKernel] {
        rows.extend(filtered.iter().map(|r| r.with_filter_path(path)));
    }
    rows
}

/// Model-like logits of `shape` with NaN at 1% of the columns (row 2: everywhere), and a bitmask
/// of random bits, padding bits set (row 4: all zero; row 5: column 45 alone).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn masked_rows(s: &mut Stream, shape: Shape) -> (Vec<f32>, Vec<u32>) {
    let words = shape.vocab.div_ceil(32);
    let mut logits = Vec::with_capacity(shape.elements());
    let mut mask = Vec::with_capacity(shape.batch * words);
    for r in 0..shape.batch {
        for _ in 0..shape.vocab {
            let (u, v) = (s.unit(), s.unit());
            let spike = if v < 0.001 { 8.0 } else { 0.0 };
            logits.push(if v > 0.99 || r == 2 { f32::NAN } else { 4.0 * (u - 0.5) * (u - 0.5) * 12.0 - 6.0 + spike });
        }
        let bits: Vec<u32> = match r {
            4 => vec![0; words],
            5 => (0..words).map(|w| if w == 1 { 1 << 13 } else { 0 }).collect(),
            _ => (0..words).map(|_| (s.next() & s.next()) as u32 | (s.next() >> 40) as u32).collect(),
        };
        mask.extend(bits);
    }
    (logits, mask)
}

/// One call's results: tokens, statuses, log-probability bits and the filter rows' reads.
type Results = (Vec<u32>, Vec<u32>, Vec<u32>, Vec<u32>);

/// The device kernels read the allowed-token bitmask and NaN as -1e5 with the logits: the same
/// tokens, statuses, log-probabilities (bit for bit) and reads of every row as the same kernels
/// sampling the logits the oracle's stage wrote first (`reference::stage::apply`). So the
/// stage is the oracle's on every path and costs no read of the logits. Rows: model-like
/// logits with NaN at 1% of the columns, 32,007 columns (8 one-read parts, a last bitmask word
/// of 7 bits) and 100; masks of random bits (padding bits set), all zero, and one bit; a row of
/// NaN only, which only NaN as -1e5 makes samplable.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn reads_the_bitmask_with_the_logits<B: Backend>(b: &B) {
    bitmask_rows_agree(b, &every_kind_of_row())
}

/// [`reads_the_bitmask_with_the_logits`] on rows `kinds` (24, with rows 2, 4 and 5 as
/// [`every_kind_of_row`] has them).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn bitmask_rows_agree<B: Backend>(b: &B, kinds: &[RowParams]) {
    let mut s = Stream(0x9e37_79b9_7f4a_7c15);
    for vocab in [32_007usize, 100] {
        let words = vocab.div_ceil(32);
        let shape = Shape::dense(kinds.len(), vocab);
        let (logits, mask) = masked_rows(&mut s, shape);
        let x = b.upload(&logits).unwrap();
        let allowed = b.upload(&mask).unwrap();
        let plain = vec![StageRow::vllm(); shape.batch];
        for nan_as_finite in [false, true] {
            let mut staged = logits.clone();
            for r in 0..shape.batch {
                let row =
                    RowStage { allowed: Some(&mask[r * words..(r + 1) * words]), nan_as_finite, ..Default::default() };
                apply(&mut staged[r * vocab..(r + 1) * vocab], &row);
            }
            let staged = b.upload(&staged).unwrap();
            let stage = LogitsStage::new(&plain).with_allowed(&allowed);
            let stage = if nan_as_finite { stage.with_nan_as_finite() } else { stage };
            let mut sampler = Sampler::new(b, shape.batch).unwrap();
            let mut call = |staged_first: bool| -> Results {
                let n = shape.batch;
                let (mut t, mut st, mut lp, mut p) =
                    (b.zeros(n).unwrap(), b.zeros(n).unwrap(), b.zeros::<f32>(n).unwrap(), b.zeros(n).unwrap());
                let out = Output::new(&mut t).with_status(&mut st).with_logprobs(&mut lp).with_passes(&mut p);
                match staged_first {
                    true => sampler.step(shape, Logits::F32(&staged), kinds, out),
                    false => sampler.step_staged(shape, Logits::F32(&x), kinds, &stage, out),
                }
                .unwrap();
                let bits = b.download(&lp).unwrap().iter().map(|v| v.to_bits()).collect();
                (b.download(&t).unwrap(), b.download(&st).unwrap(), bits, b.download(&p).unwrap())
            };
            let (read, first) = (call(false), call(true));
            let at = format!("vocabulary {vocab}, NaN as -1e5 {nan_as_finite}");
            assert_eq!(read.0, first.0, "tokens, {at}");
            assert_eq!(read.1, first.1, "statuses, {at}");
            assert_eq!(read.2, first.2, "log-probabilities, {at}");
            assert_eq!(read.3, first.3, "reads, {at}");
            // Nothing allowed: nothing sampled. One bit: that column.
            assert_eq!((read.0[4], read.1[4]), (0, 0), "{at}");
            assert_eq!((read.0[5], read.1[5]), (45, 1), "{at}");
            // A row of NaN has a value only as -1e5; then it samples an allowed column.
            let j = read.0[2] as usize;
            assert_eq!(read.1[2], nan_as_finite as u32, "{at}");
            assert!(!nan_as_finite || mask[2 * words + j / 32] >> (j % 32) & 1 == 1, "{at}: column {j}");
        }
    }
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_reads_the_bitmask_with_the_logits() {
    common::on("wgpu", "wgpu_reads_the_bitmask_with_the_logits", common::wgpu(), reads_the_bitmask_with_the_logits);
}

/// The portable lowering reads the bitmask as the full kernels do (its seeded filtered rows,
/// which it refuses, made Philox rows).
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_portable_reads_the_bitmask_with_the_logits() {
    use sampling_kernels::{RowMode, WgpuBackend};
    let portable = common::engine_wgpu(WgpuBackend::device_descriptor).map(|(b, _, _)| b.with_portable_filters(true));
    common::on("wgpu", "wgpu_portable_reads_the_bitmask_with_the_logits", portable.as_ref(), |b| {
        let philox = |r: RowParams| match r.mode() == RowMode::Seeded && r.has_filters() {
            true => RowParams::new(r.temperature, r.seed(), r.offset()).with_top_p(0.9),
            false => r,
        };
        bitmask_rows_agree(b, &every_kind_of_row().into_iter().map(philox).collect::<Vec<_>>())
    });
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_reads_the_bitmask_with_the_logits() {
    common::on("cuda", "cuda_reads_the_bitmask_with_the_logits", common::cuda(), reads_the_bitmask_with_the_logits);
}

/// SGLang's frequency accumulator taken a binade at a time gives what adding `f` `n` times gives,
/// for steps that round up, down and to even (0.5 and 1.5 at sums past 2^24), tiny, negative
/// and large penalties; and a count of 2^40 returns at once.
#[test]
fn running_sum_is_the_loop() {
    use sampling_kernels::reference::stage::running_sum;
    let mut rng = common::Rng::new(52);
    // 0.5 and 1.5 tie from 2^23 on (their last bit is half the sum's ulp): 2^24 additions.
    let mut fs = vec![(0.5f32, 1 << 24), (1.5, 1 << 24), (-0.7, 1 << 22), (1e-45, 1000), (f32::MAX / 4.0, 10)];
    fs.extend((0..30).map(|_| (((rng.unit() - 0.5) * 4.0) as f32, 100_000)));
    for (f, most) in fs {
        let (mut sum, mut n) = (0f32, 0u64);
        for target in [1u64, 2, 3, 7, 100, 4097, 100_000, 1 << 22, 1 << 24].into_iter().filter(|&t| t <= most) {
            while n < target {
                sum += f;
                n += 1;
            }
            assert_eq!(running_sum(f, n).to_bits(), sum.to_bits(), "f = {f:e}, n = {n}");
        }
    }
    assert!(running_sum(1e-3, 1 << 40).is_finite());
}

/// `Sampler::step_staged_into` records into an engine's encoder what `step_staged` runs: the same
/// tokens and statuses for every kind of row, bitmask and NaN rule, once the engine submits.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_step_staged_into_an_engines_encoder() {
    common::on("wgpu", "wgpu_step_staged_into_an_engines_encoder", common::wgpu(), |b| {
        let kinds = every_kind_of_row();
        let shape = Shape::dense(kinds.len(), 100);
        let (logits, mask) = masked_rows(&mut Stream(7), shape);
        let (x, allowed) = (b.upload(&logits).unwrap(), b.upload(&mask).unwrap());
        let plain = vec![StageRow::vllm(); shape.batch];
        let stage = LogitsStage::new(&plain).with_allowed(&allowed).with_nan_as_finite();
        let mut sampler = Sampler::new(b, shape.batch).unwrap();
        let (mut t, mut st) = (b.zeros::<u32>(shape.batch).unwrap(), b.zeros::<u32>(shape.batch).unwrap());
        sampler.step_staged(shape, Logits::F32(&x), &kinds, &stage, Output::new(&mut t).with_status(&mut st)).unwrap();
        let want = (b.download(&t).unwrap(), b.download(&st).unwrap());
        let (mut t, mut st) = (b.zeros::<u32>(shape.batch).unwrap(), b.zeros::<u32>(shape.batch).unwrap());
        let mut encoder = b.device().create_command_encoder(&Default::default());
        let out = Output::new(&mut t).with_status(&mut st);
        sampler.step_staged_into(&mut encoder, shape, Logits::F32(&x), &kinds, &stage, out).unwrap();
        b.queue().submit([encoder.finish()]);
        assert_eq!((b.download(&t).unwrap(), b.download(&st).unwrap()), want);
    });
}
