//! The logits stage against vLLM's and SGLang's own definitions (`tests/data/stage_golden.json`,
//! written by `make_stage_golden.py` from numpy ports of their code): the CPU oracle gives their
//! processed logits exactly (every value equal, a zero's sign aside) and their greedy tokens;
//! `Sampler::step_staged` on the CPU backend samples what the engines' processed logits give;
//! the device backends, whose kernels do not read the stage yet, refuse it by name.

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

/// The device backends' kernels do not read the stage yet: a call that changes the logits is
/// refused naming what it asks for, never sampled as if the stage were not there; a stage that
/// changes nothing is a plain step.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn refuses_the_stage<B: Backend>(b: &B) {
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
    let mask = b.upload(&[u32::MAX; 4]).unwrap();
    let stage = LogitsStage::new(&plain).with_allowed(&mask);
    let err = sampler.step_staged(shape, Logits::F32(&x), &rows, &stage, Output::new(&mut t)).unwrap_err();
    assert!(matches!(err, Error::UnsupportedStage { feature: "allowed-token bitmask" }), "{err}");
    sampler.step_staged(shape, Logits::F32(&x), &rows, &LogitsStage::new(&plain), Output::new(&mut t)).unwrap();
    assert_eq!(b.download(&t).unwrap(), [0, 0]);
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_refuses_the_stage() {
    common::on("wgpu", "wgpu_refuses_the_stage", common::wgpu(), refuses_the_stage);
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_refuses_the_stage() {
    common::on("cuda", "cuda_refuses_the_stage", common::cuda(), refuses_the_stage);
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
