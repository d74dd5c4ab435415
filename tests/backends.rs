//! The same checks on every backend (CPU, wgpu, CUDA), each against the CPU oracle or a known
//! answer. A backend that is absent is reported as not run by `cargo xtask test`.
//!
//! Statistical checks use fixed seeds; each threshold is the 0.999 quantile of its reference
//! distribution, so a correct sampler fails one with probability 1e-3 over the choice of seeds.

#[macro_use]
mod common;

use common::Rng;
use half::{bf16, f16};
use sampling_kernels::backend::cpu::row_values;
use sampling_kernels::reference as oracle;
use sampling_kernels::{Backend, CpuBackend, Diagnostics, LaunchTime, Logits, Output, RowParams, Shape};

/// Random123's known answers (SEMANTICS.md): counter, key, output.
const PHILOX_KAT: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
    ([0, 0, 0, 0], [0, 0], [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]),
    ([u32::MAX; 4], [u32::MAX; 2], [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]),
    (
        [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
        [0xa4093822, 0x299f31d0],
        [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
    ),
];

/// The race scores of two backends may differ by a few float32 roundings (the GPU computes in
/// float32, the oracle in float64): rows whose best and second-best oracle scores are closer
/// than this are counted, not compared.
const RACE_EPS: f64 = 1e-4;

/// Chi-square 0.999 quantile with 15 degrees of freedom (16 cells).
const CHI2_15_999: f64 = 37.697;

fn run_race<B: Backend>(b: &B, shape: Shape, logits: &[f32], rows: &[RowParams], from_probs: bool) -> Vec<u32> {
    run_race_lp(b, shape, logits, rows, from_probs).0
}

/// The race's tokens and their log-probabilities.
fn run_race_lp<B: Backend>(
    b: &B,
    shape: Shape,
    logits: &[f32],
    rows: &[RowParams],
    from_probs: bool,
) -> (Vec<u32>, Vec<f32>) {
    let x = b.upload(logits).unwrap();
    let r = b.upload(rows).unwrap();
    let mut tokens = b.zeros::<u32>(shape.batch).unwrap();
    let mut lps = b.zeros::<f32>(shape.batch).unwrap();
    let out = Output::new(&mut tokens).with_logprobs(&mut lps);
    if from_probs {
        b.race_from_probs(shape, &x, &r, out).unwrap();
    } else {
        b.race_from_logits(shape, Logits::F32(&x), &r, out).unwrap();
    }
    (b.download(&tokens).unwrap(), b.download(&lps).unwrap())
}

pub fn philox_known_answers<B: Backend>(b: &B) {
    let mut rng = Rng::new(7);
    let mut input: Vec<u32> = PHILOX_KAT.iter().flat_map(|(c, k, _)| c.iter().chain(k).copied()).collect();
    // And 4093 random blocks against the host implementation.
    input.extend((0..4093 * 6).map(|_| rng.next_u64() as u32));
    let items = input.len() / 6;
    let blocks = b.upload(&input).unwrap();
    let mut out = b.zeros::<u32>(items * 4).unwrap();
    b.philox(items, &blocks, &mut out).unwrap();
    let got = b.download(&out).unwrap();
    for (i, (_, _, want)) in PHILOX_KAT.iter().enumerate() {
        assert_eq!(&got[i * 4..i * 4 + 4], want, "known answer {i}");
    }
    for i in 0..items {
        let w = &input[i * 6..i * 6 + 6];
        let want = sampling_kernels::reference::philox::philox4x32_10([w[0], w[1], w[2], w[3]], [w[4], w[5]]);
        assert_eq!(got[i * 4..i * 4 + 4], want, "block {i}");
    }
}

pub fn gumbel_noise_matches_oracle<B: Backend>(b: &B) {
    let mut rng = Rng::new(11);
    let shape = Shape::dense(64, 997);
    let rows: Vec<RowParams> = (0..64).map(|_| RowParams::new(1.0, rng.next_u64(), rng.next_u64())).collect();
    let r = b.upload(&rows).unwrap();
    let mut noise = b.zeros::<f32>(shape.batch * shape.vocab).unwrap();
    b.gumbel_noise(shape, &r, &mut noise).unwrap();
    let got = b.download(&noise).unwrap();
    let mut worst = 0f64;
    for (row, p) in rows.iter().enumerate() {
        for j in 0..shape.vocab {
            let w = sampling_kernels::reference::philox::word(p.seed(), p.offset(), j as u32);
            let want = sampling_kernels::reference::philox::gumbel(w);
            let g = got[row * shape.vocab + j] as f64;
            assert!(g.is_finite() && (-2.82..16.64).contains(&g), "noise {g} out of its range");
            // Two chained logs of about one ulp each, relative to the noise's magnitude.
            let err = (g - want).abs() / want.abs().max(1.0);
            worst = worst.max(err);
            assert!(err < 1e-6, "row {row} col {j}: {g} vs {want}");
        }
    }
    eprintln!("{}: worst Gumbel noise error {worst:.2e} (relative, >= 1 absolute)", b.describe());
}

/// Rows whose vocabularies, strides, formats and temperatures vary, softmax against float64.
pub fn softmax_matches_oracle<B: Backend>(b: &B) {
    let mut rng = Rng::new(3);
    let cases = [(1, 1, 1), (3, 5, 8), (4, 1000, 1000), (2, 32768, 32771), (2, 151643, 151936)];
    let mut checked = 0usize;
    for (batch, vocab, stride) in cases {
        let shape = Shape { batch, vocab, stride };
        let logits: Vec<f32> = (0..shape.elements()).map(|_| rng.normal(4.0) as f32).collect();
        let rows: Vec<RowParams> = (0..batch).map(|i| RowParams::new([1.0, 0.7, 0.0, 2.5][i % 4], 0, 0)).collect();
        for dtype in 0..3 {
            let probs = softmax_on(b, shape, &logits, &rows, dtype);
            let want = softmax_on(&CpuBackend, shape, &logits, &rows, dtype);
            for r in 0..batch {
                for j in 0..vocab {
                    let (g, w) = (probs[r * stride + j] as f64, want[r * stride + j] as f64);
                    if w > 1e-30 {
                        // A few ulp: Vulkan lets a driver fuse `a * b + c` (NVIDIA's does), so the
                        // exponential's polynomial may round differently there.
                        assert!(((g - w) / w).abs() < 4e-6, "{shape:?} dtype {dtype} row {r} col {j}: {g} vs {w}");
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 400_000);
}

fn softmax_on<B: Backend>(b: &B, shape: Shape, logits: &[f32], rows: &[RowParams], dtype: usize) -> Vec<f32> {
    let r = b.upload(rows).unwrap();
    let mut probs = b.zeros::<f32>(shape.elements()).unwrap();
    match dtype {
        0 => b.softmax(shape, Logits::F32(&b.upload(logits).unwrap()), &r, &mut probs),
        1 => {
            let h: Vec<f16> = logits.iter().map(|&x| f16::from_f32(x)).collect();
            b.softmax(shape, Logits::F16(&b.upload(&h).unwrap()), &r, &mut probs)
        }
        _ => {
            let h: Vec<bf16> = logits.iter().map(|&x| bf16::from_f32(x)).collect();
            b.softmax(shape, Logits::Bf16(&b.upload(&h).unwrap()), &r, &mut probs)
        }
    }
    .unwrap();
    b.download(&probs).unwrap()
}

/// Integer-valued logits make ties common; NaN is scattered in. Every row must match exactly,
/// and so must the log-probabilities to float32 accuracy.
pub fn greedy_matches_oracle<B: Backend>(b: &B) {
    let mut rng = Rng::new(5);
    for (batch, vocab, stride) in [(300, 37, 40), (20, 5000, 5000), (2, 151936, 151936)] {
        let shape = Shape { batch, vocab, stride };
        let logits: Vec<f32> = (0..shape.elements())
            .map(|_| if rng.below(50) == 0 { f32::NAN } else { rng.below(12) as f32 - 6.0 })
            .collect();
        let (tokens, lps) = greedy_on(b, shape, &logits);
        let (want, want_lps) = greedy_on(&CpuBackend, shape, &logits);
        assert_eq!(tokens, want, "{shape:?}");
        for (g, w) in lps.iter().zip(&want_lps) {
            assert!((g - w).abs() < 1e-5 * w.abs().max(1.0), "logprob {g} vs {w}");
        }
    }
}

fn greedy_on<B: Backend>(b: &B, shape: Shape, logits: &[f32]) -> (Vec<u32>, Vec<f32>) {
    let x = b.upload(logits).unwrap();
    let mut tokens = b.zeros::<u32>(shape.batch).unwrap();
    let mut lps = b.zeros::<f32>(shape.batch).unwrap();
    b.greedy(shape, Logits::F32(&x), Output::new(&mut tokens).with_logprobs(&mut lps)).unwrap();
    (b.download(&tokens).unwrap(), b.download(&lps).unwrap())
}

/// Both races against the oracle on every row whose top two scores are apart by RACE_EPS.
pub fn races_match_oracle<B: Backend>(b: &B) {
    let mut rng = Rng::new(9);
    for from_probs in [false, true] {
        let mut near_ties = 0;
        let mut compared = 0;
        for (batch, vocab, stride) in [(2000, 50, 64), (64, 4099, 4100), (4, 151643, 151936)] {
            let shape = Shape { batch, vocab, stride };
            let rows: Vec<RowParams> = (0..batch)
                .map(|i| {
                    let t = [1.0, 0.6, 1.7, 0.0][i % 4];
                    RowParams::new(t, rng.next_u64(), rng.below(1 << 40))
                })
                .collect();
            let mut data: Vec<f32> = (0..shape.elements()).map(|_| rng.normal(3.0) as f32).collect();
            if from_probs {
                data = softmax_on(&CpuBackend, shape, &data, &rows, 0);
            }
            let (tokens, lps) = run_race_lp(b, shape, &data, &rows, from_probs);
            let (_, want_lps) = run_race_lp(&CpuBackend, shape, &data, &rows, from_probs);
            let input = CpuBackend.upload(&data).unwrap();
            for r in 0..batch {
                let x = row_values(Logits::F32(&input), shape, r);
                let mut scores = oracle::race_scores(&x, &rows[r], from_probs);
                let best = oracle::argmax(&scores);
                let top = scores[best];
                scores[best] = f64::NEG_INFINITY;
                let second = scores[oracle::argmax(&scores)];
                if (top - second).abs() <= RACE_EPS * top.abs().max(1.0) {
                    near_ties += 1;
                    continue;
                }
                compared += 1;
                assert_eq!(tokens[r] as usize, best, "{shape:?} row {r} ({:?})", rows[r]);
                let (g, w) = (lps[r] as f64, want_lps[r] as f64);
                assert!((g - w).abs() < 2e-5 * w.abs().max(1.0), "{shape:?} row {r}: log-probability {g} vs {w}");
            }
        }
        eprintln!(
            "{}: race from {}: {compared} rows identical to the oracle, {near_ties} rows within {RACE_EPS:e} not compared",
            b.describe(),
            if from_probs { "probabilities" } else { "logits" }
        );
        assert!(near_ties * 100 < compared, "too many near ties to mean anything");
    }
}

/// Draws of a 16-token distribution by each race follow softmax: 100,000 on the CPU backend. A
/// device draws 20,000, checked against softmax too, and they are the CPU backend's token for
/// token (the same Philox noise; at most 1 in 1,000 apart, for float32 near-ties against
/// float64), so they follow it as the CPU's do. (On lavapipe a device's own 100,000 took over a
/// minute of the suite's ten.)
pub fn race_distribution<B: Backend + 'static>(b: &B) {
    if common::is_reference::<B>() {
        races_follow_softmax(b, 100_000);
        return;
    }
    let draws = 20_000;
    let (device, cpu) = (races_follow_softmax(b, draws), races_follow_softmax(&CpuBackend, draws));
    for (race, (d, c)) in ["logits", "probabilities"].iter().zip(device.iter().zip(&cpu)) {
        let apart = d.iter().zip(c).filter(|(d, c)| d != c).count();
        assert!(apart * 1000 <= draws, "race from {race}: {apart} of {draws} tokens differ from the CPU backend's");
    }
}

/// `draws` draws of a 16-token distribution by each race: chi-square under its 0.999 quantile and
/// total variation under [`common::tv_limit`] (0.01 at 100,000; about three times its expected
/// value there, 0.0035), and the two races against each other (drawn with different seeds). The
/// tokens, from logits and from probabilities.
fn races_follow_softmax<B: Backend>(b: &B, draws: usize) -> [Vec<u32>; 2] {
    let vocab = 16;
    let logits: Vec<f32> = (0..vocab).map(|j| ((j * 7) % 11) as f32 * 0.45 - 2.0).collect();
    let temperature = 0.8f32;
    let expected = {
        let w: Vec<f64> = logits.iter().map(|&l| (l as f64 / temperature as f64).exp()).collect();
        let s: f64 = w.iter().sum();
        w.into_iter().map(|x| x / s).collect::<Vec<f64>>()
    };
    let shape = Shape::dense(draws, vocab);
    let draw = |from_probs: bool, seed: u64| {
        let row: Vec<f32> = if from_probs { expected.iter().map(|&p| p as f32).collect() } else { logits.clone() };
        let data: Vec<f32> = row.iter().copied().cycle().take(draws * vocab).collect();
        // One request drawn at `draws` decode steps: same seed, offsets 0..N.
        let rows: Vec<RowParams> = (0..draws as u64).map(|i| RowParams::new(temperature, seed, i)).collect();
        run_race(b, shape, &data, &rows, from_probs)
    };
    let histogram = |tokens: &[u32]| {
        let mut counts = vec![0u64; vocab];
        tokens.iter().for_each(|&t| counts[t as usize] += 1);
        counts
    };
    let tokens = [draw(false, 1234), draw(true, 5678)];
    let (from_logits, from_probs) = (histogram(&tokens[0]), histogram(&tokens[1]));
    let tv_limit = common::tv_limit(draws);
    for (name, counts) in [("logits", &from_logits), ("probabilities", &from_probs)] {
        let chi2 = common::chi_square(counts, &expected);
        let tv = common::total_variation(counts, &expected);
        eprintln!(
            "{}: race from {name}, {draws} draws: chi2 {chi2:.2} (df 15, limit {CHI2_15_999}), TV {tv:.4} (limit {tv_limit:.4})",
            b.describe()
        );
        assert!(chi2 < CHI2_15_999, "race from {name}: chi2 {chi2}");
        assert!(tv < tv_limit, "race from {name}: total variation {tv}");
    }
    let chi2 = common::chi_square_two_sample(&from_logits, &from_probs);
    eprintln!("{}: logits vs probabilities: two-sample chi2 {chi2:.2}", b.describe());
    assert!(chi2 < CHI2_15_999, "the races disagree in distribution: chi2 {chi2}");
    tokens
}

/// The same request in row 0 of one batch and row 17 of another gets the same token.
pub fn token_independent_of_row<B: Backend>(b: &B) {
    let mut rng = Rng::new(21);
    let vocab = 3001;
    for trial in 0..20 {
        let request: Vec<f32> = (0..vocab).map(|_| rng.normal(2.0) as f32).collect();
        let params = RowParams::new(1.0, rng.next_u64(), trial);
        let mut alone_batch = request.clone();
        let mut alone_rows = vec![params];
        for _ in 0..3 {
            alone_batch.extend((0..vocab).map(|_| rng.normal(2.0) as f32));
            alone_rows.push(RowParams::new(0.9, rng.next_u64(), 7));
        }
        let mut big_batch: Vec<f32> = (0..17 * vocab).map(|_| rng.normal(2.0) as f32).collect();
        let mut big_rows: Vec<RowParams> = (0..17).map(|_| RowParams::new(1.1, rng.next_u64(), 3)).collect();
        big_batch.extend(&request);
        big_rows.push(params);
        let a = run_race(b, Shape::dense(4, vocab), &alone_batch, &alone_rows, false);
        let z = run_race(b, Shape::dense(18, vocab), &big_batch, &big_rows, false);
        assert_eq!(a[0], z[17], "trial {trial}");
    }
}

/// Greedy rows inside the race take the plain argmax (the per-row path, not a batch flag).
pub fn greedy_rows_in_the_race<B: Backend>(b: &B) {
    let mut rng = Rng::new(33);
    let shape = Shape::dense(64, 700);
    let logits: Vec<f32> = (0..shape.elements()).map(|_| rng.below(20) as f32).collect();
    let rows: Vec<RowParams> =
        (0..64).map(|i| if i % 2 == 0 { RowParams::greedy() } else { RowParams::new(1.0, i, 0) }).collect();
    let raced = run_race(b, shape, &logits, &rows, false);
    let (greedy, _) = greedy_on(b, shape, &logits);
    for r in (0..64).step_by(2) {
        assert_eq!(raced[r], greedy[r], "row {r}");
    }
}

/// f16 and bf16 logits give the token of the f32 logits they widen to (same noise, same values).
pub fn half_formats_match_f32<B: Backend>(b: &B) {
    let mut rng = Rng::new(41);
    let shape = Shape { batch: 33, vocab: 2049, stride: 2051 };
    let rows: Vec<RowParams> = (0..33).map(|i| RowParams::new([0.8, 1.0, 0.0][i % 3], rng.next_u64(), 5)).collect();
    let raw: Vec<f32> = (0..shape.elements()).map(|_| rng.normal(3.0) as f32).collect();
    let r = b.upload(&rows).unwrap();
    let race = |logits: Logits<'_, B>| {
        let mut tokens = b.zeros::<u32>(shape.batch).unwrap();
        b.race_from_logits(shape, logits, &r, Output::new(&mut tokens)).unwrap();
        b.download(&tokens).unwrap()
    };
    let h: Vec<f16> = raw.iter().map(|&x| f16::from_f32(x)).collect();
    let wide: Vec<f32> = h.iter().map(|x| x.to_f32()).collect();
    assert_eq!(race(Logits::F16(&b.upload(&h).unwrap())), race(Logits::F32(&b.upload(&wide).unwrap())), "f16");
    let h: Vec<bf16> = raw.iter().map(|&x| bf16::from_f32(x)).collect();
    let wide: Vec<f32> = h.iter().map(|x| x.to_f32()).collect();
    assert_eq!(race(Logits::Bf16(&b.upload(&h).unwrap())), race(Logits::F32(&b.upload(&wide).unwrap())), "bf16");
}

/// Bad shapes and short buffers are errors before any launch.
pub fn rejects_bad_shapes<B: Backend>(b: &B) {
    let x = b.upload(&[0f32; 8]).unwrap();
    let r = b.upload(&[RowParams::new(1.0, 0, 0); 2]).unwrap();
    let mut t = b.zeros::<u32>(2).unwrap();
    let bad = [
        Shape::dense(0, 4),
        Shape::dense(2, 0),
        Shape { batch: 2, vocab: 4, stride: 3 },
        Shape::dense(2, 5),
        Shape::dense(3, 2),
    ];
    for shape in bad {
        let out = Output::new(&mut t);
        assert!(b.race_from_logits(shape, Logits::F32(&x), &r, out).is_err(), "{shape:?}");
    }
}

/// The read kernel (the benchmarks' bandwidth yardstick) sums every element of each row once,
/// in every input format, with a stride wider than the vocabulary and NaN read as -inf. The
/// values are small integers, so every partial sum is exact in float32 whatever the order, and
/// one element skipped or read twice changes the sum.
pub fn read_rows_sums_each_row<B: Backend>(b: &B) {
    let mut rng = Rng::new(51);
    for (batch, vocab, stride) in [(1, 1, 1), (5, 1000, 1003), (3, 151936, 151936)] {
        let shape = Shape { batch, vocab, stride };
        let mut x: Vec<f32> = (0..shape.elements()).map(|_| rng.below(17) as f32 - 8.0).collect();
        // A NaN in the last row, whose sum is then -inf.
        x[(batch - 1) * stride] = f32::NAN;
        let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
        let hb: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
        let (x32, x16, xb16) = (b.upload(&x).unwrap(), b.upload(&h).unwrap(), b.upload(&hb).unwrap());
        let formats: [(&str, Logits<'_, B>); 3] =
            [("f32", Logits::F32(&x32)), ("f16", Logits::F16(&x16)), ("bf16", Logits::Bf16(&xb16))];
        let mut want = CpuBackend.zeros::<f32>(batch).unwrap();
        CpuBackend.read_rows(shape, Logits::F32(&x), &mut want).unwrap();
        assert_eq!(want[batch - 1], f32::NEG_INFINITY);
        for (name, logits) in formats {
            let mut sums = b.zeros::<f32>(batch).unwrap();
            b.read_rows(shape, logits, &mut sums).unwrap();
            assert_eq!(b.download(&sums).unwrap(), want, "{name} {shape:?}");
        }
    }
}

// The oracle is not compared with itself: on the CPU only the checks against known answers,
// distributions and invariants run.
suite!(
    cpu,
    crate::common::cpu,
    philox_known_answers,
    race_distribution,
    token_independent_of_row,
    greedy_rows_in_the_race,
    half_formats_match_f32,
    rejects_bad_shapes,
);
/// Every path's results for `rows` on `b`: (tokens, log-probabilities, statuses) of greedy, the
/// race from logits, the race from probabilities (of the oracle's softmax) and `sample`.
fn every_path<B: Backend>(b: &B, shape: Shape, logits: &[f32], rows: &[RowParams]) -> Vec<(u32, f32, u32)> {
    let x = b.upload(logits).unwrap();
    let r = b.upload(rows).unwrap();
    let probs = softmax_on(&CpuBackend, shape, logits, rows, 0);
    let p = b.upload(&probs).unwrap();
    let mut all = Vec::new();
    for path in 0..4 {
        let (mut t, mut lp, mut st) =
            (b.zeros::<u32>(shape.batch).unwrap(), b.zeros::<f32>(shape.batch).unwrap(), b.zeros(shape.batch).unwrap());
        let out = Output::new(&mut t).with_logprobs(&mut lp).with_status(&mut st);
        match path {
            0 => b.greedy(shape, Logits::F32(&x), out),
            1 => b.race_from_logits(shape, Logits::F32(&x), &r, out),
            2 => b.race_from_probs(shape, &p, &r, out),
            _ => b.sample(shape, Logits::F32(&x), &r, out),
        }
        .unwrap();
        let (t, lp, st) = (b.download(&t).unwrap(), b.download(&lp).unwrap(), b.download(&st).unwrap());
        all.extend((0..shape.batch).map(|i| (t[i], lp[i], st[i])));
    }
    all
}

/// Rows split over several workgroups (a batch of 8 rows of 16,384 columns, which every device
/// backend splits) give each path's token and status exactly, and its log-probability within a
/// few ulp, as the same rows read whole (inside a batch of 1,100, which fills any device).
pub fn split_rows_match_whole_rows<B: Backend>(b: &B) {
    let mut rng = Rng::new(77);
    let vocab = 16384;
    let kinds = |i: u64, rng: &mut Rng| match i % 5 {
        0 => RowParams::greedy(),
        1 => RowParams::seeded(0.9, rng.next_u64(), 4),
        2 => RowParams::new(0.7, rng.next_u64(), 4).with_top_p(0.8),
        _ => RowParams::new(1.0 + i as f32 / 8.0, rng.next_u64(), i),
    };
    let rows: Vec<RowParams> = (0..8).map(|i| kinds(i, &mut rng)).collect();
    let mut logits: Vec<f32> = (0..8 * vocab).map(|_| rng.normal(3.0) as f32).collect();
    // A row with nothing valid, and one whose only +inf sits in its last part.
    logits[6 * vocab..7 * vocab].fill(f32::NEG_INFINITY);
    logits[8 * vocab - 5] = f32::INFINITY;
    let split = every_path(b, Shape::dense(8, vocab), &logits, &rows);
    let mut big_rows = rows.clone();
    big_rows.extend((8..1100).map(|i| kinds(i, &mut rng)));
    let mut big = logits.clone();
    big.extend((8 * vocab..1100 * vocab).map(|_| rng.normal(3.0) as f32));
    let whole = every_path(b, Shape::dense(1100, vocab), &big, &big_rows);
    for path in 0..4 {
        for r in 0..8 {
            let (got, want) = (split[path * 8 + r], whole[path * 1100 + r]);
            let close = got.1 == want.1 || (got.1 - want.1).abs() <= 1e-5 * want.1.abs().max(1.0);
            assert!(got.0 == want.0 && got.2 == want.2 && close, "path {path} row {r}: split {got:?}, whole {want:?}");
        }
    }
}

/// A row read by one workgroup per 2,048 columns (a batch of one row of 16,384, which every
/// device backend splits in up to 8 parts) whose winner sits at or just after a part's first
/// column: each path finds it, with the oracle's log-probability, so the combine reads the
/// winner's own part record.
pub fn split_rows_find_winners_at_part_edges<B: Backend>(b: &B) {
    let mut rng = Rng::new(78);
    let vocab = 16384;
    for part in 1..8 {
        for offset in [0, 1, 4] {
            let peak = part * 2048 + offset;
            let mut row: Vec<f32> = (0..vocab).map(|_| rng.normal(1.0) as f32).collect();
            row[peak] = 40.0;
            let params = [RowParams::new(1.0, rng.next_u64(), 3)];
            let got = every_path(b, Shape::dense(1, vocab), &row, &params);
            let want = every_path(&CpuBackend, Shape::dense(1, vocab), &row, &params);
            for (path, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.0 as usize, peak, "path {path}, peak {peak}");
                assert!((g.1 - w.1).abs() <= 1e-4, "path {path}, peak {peak}: log-probability {} vs {}", g.1, w.1);
            }
        }
    }
}

/// Split rows called again and again, on one backend: the counters by which a row's last part
/// knows it is last are reset by that part, so every call combines every row. Nine calls
/// alternate greedy and both races (which share the counters), each with new seeds and steps and
/// a token buffer filled with `u32::MAX` first, and every token is the CPU oracle's (the races'
/// near ties, closer than `RACE_EPS`, are counted, not compared). A counter left set would make
/// a later call combine early (a wrong token) or never (`u32::MAX` left).
pub fn split_rows_repeat_calls<B: Backend>(b: &B) {
    let mut rng = Rng::new(79);
    let shape = Shape::dense(2, 16384);
    let logits: Vec<f32> = (0..shape.elements()).map(|_| rng.normal(3.0) as f32).collect();
    let probs = softmax_on(&CpuBackend, shape, &logits, &[RowParams::new(1.0, 0, 0); 2], 0);
    let (x, p) = (b.upload(&logits).unwrap(), b.upload(&probs).unwrap());
    let input = |from_probs: bool| CpuBackend.upload(if from_probs { &probs } else { &logits }).unwrap();
    let (mut near_ties, mut compared) = (0, 0);
    for call in 0..9u64 {
        let rows: Vec<RowParams> = (0..2).map(|_| RowParams::new(0.8, rng.next_u64(), call)).collect();
        let r = b.upload(&rows).unwrap();
        let mut t = b.upload(&[u32::MAX; 2]).unwrap();
        let path = call % 3;
        match path {
            0 => b.greedy(shape, Logits::F32(&x), Output::new(&mut t)),
            1 => b.race_from_logits(shape, Logits::F32(&x), &r, Output::new(&mut t)),
            _ => b.race_from_probs(shape, &p, &r, Output::new(&mut t)),
        }
        .unwrap();
        let got = b.download(&t).unwrap();
        for row in 0..2 {
            let from_probs = path == 2;
            let values = row_values(Logits::F32(&input(from_probs)), shape, row);
            let mut scores = match path {
                0 => values.clone(),
                _ => oracle::race_scores(&values, &rows[row], from_probs),
            };
            let best = oracle::argmax(&scores);
            let top = scores[best];
            scores[best] = f64::NEG_INFINITY;
            if path != 0 && (top - scores[oracle::argmax(&scores)]).abs() <= RACE_EPS * top.abs().max(1.0) {
                near_ties += 1;
                continue;
            }
            compared += 1;
            assert_eq!(got[row] as usize, best, "call {call} (path {path}) row {row}");
        }
    }
    assert!(near_ties * 4 < compared, "{near_ties} near ties, {compared} rows compared");
}

/// The stale-record canary: a split row's merge reads this call's records, never one an earlier
/// call left in the same scratch slots. Eight calls on one backend (one scratch and one set of
/// counters for all), each a batch of 2 rows of 16384 (split on every device backend), through
/// greedy, the race from logits and `sample` (greedy rows: the same split merge, an exact
/// oracle). Call `k`'s values are noise in [0, 1) less `10 k`, below every value of the calls
/// before, and its row maximum (noise + 5) moves to another part each call; before each call a
/// poison call (greedy on rows of 1e30 everywhere) fills every record slot with a winner at a
/// part's first column. A merge that read any record but this call's would take that record's
/// column, whose score beats the whole row: the token must be the row's own argmax (the CPU's).
pub fn merges_read_only_this_calls_records<B: Backend>(b: &B) {
    let mut rng = Rng::new(83);
    let shape = Shape::dense(2, 16384);
    let poison = b.upload(&vec![1e30f32; shape.elements()]).unwrap();
    let rows = b.upload(&[RowParams::greedy(); 2]).unwrap();
    for call in 0..8usize {
        let mut t = b.upload(&[u32::MAX; 2]).unwrap();
        b.greedy(shape, Logits::F32(&poison), Output::new(&mut t)).unwrap();
        assert_eq!(b.download(&t).unwrap(), [0, 0], "the poison's own tokens");
        let mut logits: Vec<f32> = (0..shape.elements()).map(|_| rng.unit() as f32 - 10.0 * call as f32).collect();
        let mut want = [0usize; 2];
        for (row, w) in want.iter_mut().enumerate() {
            *w = (call * 2053 + row * 977 + 123) % shape.vocab;
            logits[row * shape.vocab + *w] += 5.0;
        }
        let x = b.upload(&logits).unwrap();
        let mut t = b.upload(&[u32::MAX; 2]).unwrap();
        match call % 3 {
            0 => b.greedy(shape, Logits::F32(&x), Output::new(&mut t)),
            1 => b.race_from_logits(shape, Logits::F32(&x), &rows, Output::new(&mut t)),
            _ => b.sample(shape, Logits::F32(&x), &rows, Output::new(&mut t)),
        }
        .unwrap();
        let host = CpuBackend.upload(&logits).unwrap();
        for (row, &w) in want.iter().enumerate() {
            assert_eq!(oracle::argmax(&row_values(Logits::F32(&host), shape, row)), w, "the oracle's");
        }
        assert_eq!(b.download(&t).unwrap(), want.map(|w| w as u32), "call {call}");
    }
}

/// Four threads sharing one backend, each sampling its own split batch 25 times, get the tokens
/// each batch gets alone: the split launches (which share the backend's part records and
/// counters) stay whole and in order on the queue or stream.
pub fn threads_share_a_backend<B: Backend + Sync>(b: &B) {
    let vocab = 16384;
    let batches: Vec<(Vec<f32>, Vec<RowParams>)> = (0..4u64)
        .map(|t| {
            let mut rng = Rng::new(500 + t);
            let x: Vec<f32> = (0..2 * vocab).map(|_| rng.normal(2.0) as f32).collect();
            (x, (0..2).map(|r| RowParams::new(0.9, 10 * t + r, t)).collect())
        })
        .collect();
    let shape = Shape::dense(2, vocab);
    let alone: Vec<Vec<u32>> = batches.iter().map(|(x, rows)| run_race(b, shape, x, rows, false)).collect();
    std::thread::scope(|s| {
        for ((x, rows), want) in batches.iter().zip(&alone) {
            s.spawn(move || {
                let (xb, rb) = (b.upload(x).unwrap(), b.upload(rows).unwrap());
                let mut t = b.zeros::<u32>(2).unwrap();
                for _ in 0..25 {
                    b.race_from_logits(shape, Logits::F32(&xb), &rb, Output::new(&mut t)).unwrap();
                    assert_eq!(&b.download(&t).unwrap(), want);
                }
            });
        }
    });
}

device_suites!(
    split_rows_match_whole_rows,
    split_rows_find_winners_at_part_edges,
    split_rows_repeat_calls,
    merges_read_only_this_calls_records,
    threads_share_a_backend,
    philox_known_answers,
    gumbel_noise_matches_oracle,
    softmax_matches_oracle,
    greedy_matches_oracle,
    races_match_oracle,
    race_distribution,
    token_independent_of_row,
    greedy_rows_in_the_race,
    half_formats_match_f32,
    rejects_bad_shapes,
    read_rows_sums_each_row,
);

/// `time_launches` (inherent to each device backend, for the benchmarks) returns what its
/// launches return, once they are done, with a positive time; it says which clock it used.
fn time_launches_measures<B: Backend>(
    b: &B,
    time: impl Fn(&B, &mut dyn FnMut(&B) -> sampling_kernels::Result<()>) -> sampling_kernels::Result<LaunchTime>,
) {
    let shape = Shape::dense(16, 4096);
    let x = b.upload(&vec![1f32; shape.elements()]).unwrap();
    let mut sums = b.zeros::<f32>(shape.batch).unwrap();
    for launches in [1, 3] {
        let t =
            time(b, &mut |b| (0..launches).try_for_each(|_| b.read_rows(shape, Logits::F32(&x), &mut sums))).unwrap();
        assert!(t.elapsed > std::time::Duration::ZERO, "{launches} launches: {t:?}");
        eprintln!("{}: {launches} read_rows launches of {shape:?}: {t:?}", b.describe());
    }
    assert_eq!(b.download(&sums).unwrap(), vec![4096.0; shape.batch]);
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_time_launches_measures() {
    common::on("wgpu", "time_launches_measures", common::wgpu(), |b| {
        time_launches_measures(b, |b, f| b.time_launches(|b| f(b)).map(|(_, t)| t));
        // With timestamps, a nested call is refused instead of mixing two spans.
        let nested = b.time_launches(|b| b.time_launches(|_| Ok(())));
        let (_, t) = b.time_launches(|_| Ok(())).unwrap();
        assert_eq!(nested.is_err(), t.clock == sampling_kernels::Clock::Device, "{t:?}");
        // So is a step recorded into an engine's encoder, which would run after the clock is read.
        let (x, mut tokens) = (b.upload(&[0f32, 1.0]).unwrap(), b.zeros::<u32>(1).unwrap());
        let mut sampler = sampling_kernels::Sampler::new(b, 1).unwrap();
        let mut encoder = b.device().create_command_encoder(&Default::default());
        let (shape, rows) = (Shape::dense(1, 2), [RowParams::greedy()]);
        let recorded = b.time_launches(|_| {
            sampler.step_into(&mut encoder, shape, Logits::F32(&x), &rows, Output::new(&mut tokens))
        });
        assert_eq!(recorded.is_err(), t.clock == sampling_kernels::Clock::Device, "{t:?}");
    });
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_time_launches_measures() {
    common::on("cuda", "time_launches_measures", common::cuda(), |b| {
        time_launches_measures(b, |b, f| b.time_launches(|b| f(b)).map(|(_, t)| t))
    });
}
