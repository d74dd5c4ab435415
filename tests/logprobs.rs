//! Log-probabilities as engines return them (docs/logprobs.md): the oracle against a separate,
//! plainly written computation of every mode on model-like, flat, tied and one-hot rows, for
//! n = 1, 5, 20 and the limit; ties to the lower id and the rank with ties;
//! `Sampler::step_with_logprobs` on the CPU backend against the oracle, with and without a stage;
//! bad requests refused by name; the device backends refusing before they launch anything.

mod common;

use sampling_kernels::backend::cpu::row_values;
use sampling_kernels::reference::logprobs::{rank, top, values};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
use sampling_kernels::Backend;
use sampling_kernels::{
    CpuBackend, Error, FilterOrder, Logits, LogitsStage, LogprobsMode, LogprobsOutput, LogprobsRequest, Output,
    RowParams, Sampler, Shape, StageRow, MAX_TOP_LOGPROBS,
};

const VOCAB: usize = 300;

/// Rows named by what they test: a model's spread with a few peaks, a flat row, a row of seven
/// values each repeated, and a row with one finite value.
fn rows() -> Vec<(&'static str, Vec<f32>)> {
    let mut rng = common::Rng::new(53);
    let mut model: Vec<f32> = (0..1000).map(|_| rng.normal(2.0) as f32).collect();
    for (j, peak) in [(17, 9.0), (400, 8.5), (999, 8.0)] {
        model[j] = peak;
    }
    let tied = (0..VOCAB).map(|j| (j % 7) as f32 * 0.5).collect();
    let mut one_hot = vec![f32::NEG_INFINITY; VOCAB];
    one_hot[123] = 0.0;
    vec![("model", model), ("flat", vec![0.25; VOCAB]), ("tied", tied), ("one-hot", one_hot)]
}

/// Greedy, plain, and each filter alone and together in both orders.
fn params() -> Vec<RowParams> {
    vec![
        RowParams::greedy().with_top_k(3),
        RowParams::new(0.7, 1, 0),
        RowParams::new(1.3, 2, 0).with_top_k(40).with_min_p(0.02),
        RowParams::new(0.9, 3, 0).with_top_p(0.8),
        RowParams::new(1.0, 4, 0).with_top_k(30).with_top_p(0.9).with_order(FilterOrder::TopKFirst),
    ]
}

/// `log_softmax`, the textbook way: `x - (max + ln sum exp(x - max))`, the exponentials summed
/// smallest first (the rows here have no +inf).
fn plain_log_softmax(x: &[f64]) -> Vec<f64> {
    let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return vec![f64::NEG_INFINITY; x.len()];
    }
    let mut e: Vec<f64> = x.iter().map(|&v| (v - m).exp()).collect();
    e.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let lse = m + e.iter().sum::<f64>().ln();
    x.iter().map(|&v| v - lse).collect()
}

/// The kept set of a sampled row with filters, from its definition: tokens by probability
/// (stable, so ties keep the lower id first), kept while fewer than k precede them, the mass
/// before them is at most top-p of the reference mass (the row's, or the top-k set's), and they
/// are at least min-p of the largest.
fn plain_kept(z: &[f32], row: &RowParams) -> Vec<bool> {
    let f = row.filters();
    let m = z.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let p: Vec<f64> = z.iter().map(|&v| (v as f64 - m).exp()).collect();
    let mut order: Vec<usize> = (0..z.len()).filter(|&j| p[j] > 0.0).collect();
    order.sort_by(|&a, &b| p[b].partial_cmp(&p[a]).unwrap());
    let k = f.top_k.unwrap_or(z.len()).min(order.len());
    let reference: f64 = match f.order {
        FilterOrder::TopKFirst => order[..k].iter().map(|&j| p[j]).sum(),
        _ => order.iter().map(|&j| p[j]).sum(),
    };
    let mut keep = vec![false; z.len()];
    let mut before = 0.0;
    for (i, &j) in order.iter().enumerate() {
        if i >= k || before > f.top_p * reference || p[j] < f.min_p * p[order[0]] {
            break;
        }
        keep[j] = true;
        before += p[j];
    }
    keep
}

/// One row's values under `mode`, computed apart from the oracle (in float64, no stage).
fn plain_values(mode: LogprobsMode, x: &[f32], row: &RowParams) -> Vec<f64> {
    let wide = |v: &[f32]| v.iter().map(|&v| v as f64).collect::<Vec<_>>();
    let t = if row.is_sampled() { row.temperature } else { 1.0 };
    let z: Vec<f32> = x.iter().map(|&v| v / t).collect();
    let processed: Vec<f32> = if row.is_sampled() && row.has_filters() {
        let keep = plain_kept(&z, row);
        z.iter().zip(keep).map(|(&v, k)| if k { v } else { f32::NEG_INFINITY }).collect()
    } else {
        z.clone()
    };
    match mode {
        LogprobsMode::RawLogits => wide(x),
        LogprobsMode::RawLogprobs => plain_log_softmax(&wide(x)),
        LogprobsMode::ProcessedLogits => wide(&processed),
        LogprobsMode::ProcessedLogprobs => plain_log_softmax(&wide(&processed)),
        LogprobsMode::Sglang if row.is_sampled() => {
            // The float32 softmax, its float32 log, -inf clamped to the float32 minimum.
            let m = z.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
            let e: Vec<f64> = z.iter().map(|&v| (v as f64 - m).exp()).collect();
            let sum: f64 = e.iter().sum();
            e.iter().map(|&e| ((e / sum) as f32).ln().max(f32::MIN) as f64).collect()
        }
        LogprobsMode::Sglang => plain_log_softmax(&wide(x)),
        _ => unreachable!("a mode this test does not know"),
    }
}

/// Equal to a few float32 ulps, infinities and the float32 minimum exactly.
fn close(got: f32, want: f64) -> bool {
    if !want.is_finite() || want == f32::MIN as f64 {
        return got as f64 == want;
    }
    (got as f64 - want).abs() <= 2e-6 * want.abs().max(1.0)
}

/// The n largest by selection: n scans, each taking the largest value not yet taken, the first
/// met among equals (so the lower id; -0.0 and 0.0 are equal).
fn plain_top(v: &[f32], n: usize) -> Vec<(u32, f32)> {
    let mut taken = vec![false; v.len()];
    (0..n)
        .map(|_| {
            let mut best: Option<usize> = None;
            for j in (0..v.len()).filter(|&j| !taken[j]) {
                if best.is_none_or(|b| v[j] > v[b]) {
                    best = Some(j);
                }
            }
            let b = best.unwrap();
            taken[b] = true;
            (b as u32, v[b])
        })
        .collect()
}

/// The rank from a sorted copy: the position just past the last value at least the token's.
fn plain_rank(v: &[f32], token: usize) -> u32 {
    let mut sorted = v.to_vec();
    sorted.sort_by(|a, b| b.partial_cmp(a).unwrap());
    sorted.partition_point(|&x| x >= v[token]) as u32
}

#[test]
fn oracle_matches_a_separate_computation() {
    for (name, x) in rows() {
        let wide: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        for row in params() {
            for mode in LogprobsMode::ALL {
                let got = values(mode, &wide, &wide, &row);
                let want = plain_values(mode, &x, &row);
                for (j, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    assert!(close(g, w), "{name} {row:?} {}: column {j}: {g} against {w}", mode.name());
                }
                for n in [1, 5, 20, MAX_TOP_LOGPROBS] {
                    assert_eq!(top(&got, n), plain_top(&got, n), "{name} {row:?} {}: top {n}", mode.name());
                }
                for token in [0, 1, 6, 123, x.len() - 1] {
                    assert_eq!(rank(&got, token), plain_rank(&got, token), "{name} {}: rank of {token}", mode.name());
                }
            }
        }
    }
}

/// Tied values: the top-n lists the lower id first, and tied tokens share the rank of the last
/// of them (vLLM counts the values at least the token's).
#[test]
fn ties_go_to_the_lower_id_and_share_the_rank() {
    let x = [1.0f64, 3.0, 3.0, 2.0, 3.0, -0.0, 0.0];
    for mode in [LogprobsMode::RawLogits, LogprobsMode::RawLogprobs] {
        let v = values(mode, &x, &x, &RowParams::greedy());
        let ids: Vec<u32> = top(&v, 7).into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, [1, 2, 4, 3, 0, 5, 6], "{}", mode.name());
        let ranks: Vec<u32> = (0..7).map(|t| rank(&v, t)).collect();
        assert_eq!(ranks, [5, 3, 3, 4, 3, 7, 7], "{}", mode.name());
    }
    let flat = vec![0.5; 10];
    assert!((0..10).all(|t| rank(&values(LogprobsMode::RawLogprobs, &flat, &flat, &RowParams::greedy()), t) == 10));
}

/// A batch's buffers, filled with sentinels so unwritten slots show.
struct Buffers {
    tokens: Vec<u32>,
    top_values: Vec<f32>,
    top_ids: Vec<u32>,
    sampled: Vec<f32>,
    rank: Vec<u32>,
    requested: Vec<f32>,
}

const UNWRITTEN: u32 = 7777;

impl Buffers {
    fn new(batch: usize, n_max: usize, ids: usize) -> Self {
        Buffers {
            tokens: vec![UNWRITTEN; batch],
            top_values: vec![f32::NAN; batch * n_max],
            top_ids: vec![UNWRITTEN; batch * n_max],
            sampled: vec![f32::NAN; batch],
            rank: vec![UNWRITTEN; batch],
            requested: vec![f32::NAN; ids],
        }
    }

    /// One step on the CPU backend with these buffers.
    fn step(
        &mut self,
        shape: Shape,
        x: &Vec<f32>,
        rows: &[RowParams],
        stage: Option<&LogitsStage<'_, CpuBackend>>,
        request: &LogprobsRequest<'_>,
    ) -> sampling_kernels::Result<()> {
        let mut sampler = Sampler::new(&CpuBackend, rows.len()).unwrap();
        let out = LogprobsOutput::new(&mut self.top_values, &mut self.top_ids, &mut self.sampled, &mut self.rank)
            .with_requested(&mut self.requested);
        sampler.step_with_logprobs(shape, Logits::F32(x), rows, stage, request, Output::new(&mut self.tokens), out)
    }
}

/// The CPU backend writes what the oracle gives for the token the step samples (the token a plain
/// step gives), each row its own count and ids, nothing past a row's count; the processed modes
/// see the stage's logit bias and the raw ones do not.
#[test]
fn cpu_step_writes_the_oracle() {
    let model = rows().remove(0).1;
    let x: Vec<f32> = model[..VOCAB].iter().chain(&rows()[2].1).chain(&model[..VOCAB]).copied().collect();
    let shape = Shape::dense(3, VOCAB);
    let rows = [RowParams::new(0.8, 9, 4).with_top_k(20), RowParams::greedy(), RowParams::new(1.2, 5, 1)];
    let (top_n, n_max) = ([5u32, 0, 20], 20);
    let (offsets, ids) = ([0u32, 2, 2, 5], [17u32, 299, 250, 3, 3]);
    // +6 on column 250 of the last row: its processed values move, its raw ones do not.
    let stage_rows = [StageRow::vllm(); 3];
    let (bias_offsets, bias_ids, biases) = (vec![0u32, 0, 0, 1], vec![250u32], vec![6f32]);
    let stage = LogitsStage::new(&stage_rows).with_logit_bias(&bias_offsets, &bias_ids, &biases);
    let mut staged_x = x.clone();
    staged_x[2 * VOCAB + 250] += 6.0;
    for mode in LogprobsMode::ALL {
        for with_stage in [false, true] {
            let request = LogprobsRequest::new(mode, n_max, &top_n).with_ids(&offsets, &ids);
            let mut b = Buffers::new(3, n_max, ids.len());
            b.step(shape, &x, &rows, with_stage.then_some(&stage), &request).unwrap();
            let mut plain = vec![0u32; 3];
            let staged = if with_stage { &staged_x } else { &x };
            Sampler::new(&CpuBackend, 3)
                .unwrap()
                .step(shape, Logits::F32(staged), &rows, Output::new(&mut plain))
                .unwrap();
            assert_eq!(b.tokens, plain, "{}: the step's tokens", mode.name());
            for r in 0..3 {
                let raw = row_values(Logits::F32(&x), shape, r);
                let processed = row_values(Logits::F32(staged), shape, r);
                let v = values(mode, &raw, &processed, &rows[r]);
                let n = top_n[r] as usize;
                let slots = r * n_max..(r + 1) * n_max;
                let written: Vec<(u32, f32)> =
                    b.top_ids[slots.clone()].iter().copied().zip(b.top_values[slots].iter().copied()).collect();
                assert_eq!(written[..n], top(&v, n)[..], "{} row {r}", mode.name());
                assert!(written[n..].iter().all(|&(id, x)| id == UNWRITTEN && x.is_nan()), "{} row {r}", mode.name());
                let t = b.tokens[r] as usize;
                assert_eq!((b.sampled[r], b.rank[r]), (v[t], rank(&v, t)), "{} row {r}", mode.name());
                for k in offsets[r] as usize..offsets[r + 1] as usize {
                    assert_eq!(b.requested[k], v[ids[k] as usize], "{} row {r} id {}", mode.name(), ids[k]);
                }
            }
            let raw = row_values(Logits::F32(&x), shape, 2);
            let moved = b.requested[2] != values(mode, &raw, &raw, &rows[2])[250];
            assert_eq!(
                moved,
                with_stage && mode.is_processed(),
                "{}: only the processed modes see the stage",
                mode.name()
            );
        }
    }
}

/// Bad requests are refused by name before anything runs (no token written).
#[test]
fn requests_are_checked() {
    let shape = Shape::dense(2, 40);
    let x = vec![0.5f32; 80];
    let rows = [RowParams::greedy(); 2];
    let mode = LogprobsMode::default();
    let check = |request: LogprobsRequest<'_>, ids: usize, want: &dyn Fn(&Error) -> bool| {
        let mut b = Buffers::new(2, request.n_max(), ids);
        let err = b.step(shape, &x, &rows, None, &request).unwrap_err();
        assert!(want(&err), "{err}");
        assert_eq!(b.tokens, [UNWRITTEN; 2], "{err}: nothing ran");
    };
    let offsets = [0u32, 1, 3];
    check(
        LogprobsRequest::new(mode, 2, &[1, 1]).with_ids(&offsets, &[5, 39, 40]),
        3,
        &|e| matches!(e, Error::Param { row: 1, field: "logprob_ids", value, .. } if value == "40"),
    );
    check(LogprobsRequest::new(mode, 2, &[1, 1]).with_ids(&[0, 2, 1], &[5, 6]), 2, &|e| {
        matches!(e, Error::Param { row: 1, field: "logprob_id_offsets", .. })
    });
    check(LogprobsRequest::new(mode, 2, &[0, 3]), 0, &|e| {
        matches!(e, Error::Param { row: 1, field: "top_logprobs", .. })
    });
    check(LogprobsRequest::new(mode, 257, &[0, 0]), 0, &|e| {
        matches!(e, Error::Logprobs { field: "n_max", value: 257, .. })
    });
    check(LogprobsRequest::new(mode, 41, &[41, 0]), 0, &|e| {
        matches!(e, Error::Param { row: 0, field: "top_logprobs", .. })
    });
    check(LogprobsRequest::new(mode, 2, &[1]), 0, &|e| matches!(e, Error::Shape(_)));
    check(LogprobsRequest::new(mode, 2, &[1, 1]).with_ids(&offsets, &[5, 6, 7]), 2, &|e| {
        matches!(e, Error::BufferTooShort { name: "requested_logprobs", len: 2, need: 3 })
    });
    // Offsets past the batch's `batch + 1` are not read.
    let mut b = Buffers::new(2, 1, 2);
    b.step(shape, &x, &rows, None, &LogprobsRequest::new(mode, 1, &[1, 1]).with_ids(&[0, 1, 2, 9], &[5, 6])).unwrap();
    assert_eq!(b.requested, [values(mode, &[0.5; 40], &[0.5; 40], &rows[0])[5]; 2]);
}

/// The device backends' kernels do not compute log-probabilities yet: the step is refused
/// naming the mode, and nothing is launched (the tokens keep their old values).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn refuses_logprobs<B: Backend>(b: &B) {
    let shape = Shape::dense(2, 40);
    let x = b.upload(&[0.5f32; 80]).unwrap();
    let mut tokens = b.upload(&[UNWRITTEN; 2]).unwrap();
    let (mut values, mut ids, mut sampled, mut rank) =
        (b.zeros(10).unwrap(), b.zeros(10).unwrap(), b.zeros(2).unwrap(), b.zeros(2).unwrap());
    let out = LogprobsOutput::new(&mut values, &mut ids, &mut sampled, &mut rank);
    let request = LogprobsRequest::new(LogprobsMode::ProcessedLogprobs, 5, &[5, 1]);
    let rows = [RowParams::greedy(); 2];
    let mut sampler = Sampler::new(b, 2).unwrap();
    let err = sampler
        .step_with_logprobs(shape, Logits::F32(&x), &rows, None, &request, Output::new(&mut tokens), out)
        .unwrap_err();
    assert!(matches!(err, Error::UnsupportedLogprobs { mode: "processed_logprobs" }), "{err}");
    assert_eq!(b.download(&tokens).unwrap(), [UNWRITTEN; 2]);
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_refuses_logprobs() {
    common::on("wgpu", "wgpu_refuses_logprobs", common::wgpu(), refuses_logprobs);
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_refuses_logprobs() {
    common::on("cuda", "cuda_refuses_logprobs", common::cuda(), refuses_logprobs);
}
