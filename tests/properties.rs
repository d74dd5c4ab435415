//! Property tests: random shapes (vocabulary 1 to 262144, batch 1 to 64, padded strides),
//! temperatures from 1e-6 to 1e4 (and greedy), any seed and offset, and adversarial rows
//! (one-hot, flat, ties, subnormals, -inf blocks, scattered NaN, +inf). 1,000 cases per backend
//! from a fixed seed. Invariants: every token is inside the vocabulary and has a valid value;
//! statuses say whether the row had one; greedy equals the oracle exactly; the race equals the
//! oracle wherever the oracle's top two scores are apart, and stays in the +inf class when the
//! row has one.

#[macro_use]
mod common;

use common::{flushes_subnormals, Rng};
use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use sampling_kernels::backend::cpu::row_values;
use sampling_kernels::reference as oracle;
use sampling_kernels::{Backend, CpuBackend, Logits, Output, RowParams, Shape};

/// Cases per backend: 2,000 took over two of the suite's ten minutes on lavapipe, two cores shared.
const CASES: u32 = 1000;
/// Elements per case at most, so the cases stay within a CI minute on lavapipe.
const MAX_ELEMENTS: usize = 1 << 18;

#[derive(Clone, Debug)]
struct Case {
    shape: Shape,
    logits: Vec<f32>,
    rows: Vec<RowParams>,
}

/// One adversarial row of `vocab` values, of kind `kind`.
fn row(rng: &mut Rng, vocab: usize, kind: u64) -> Vec<f32> {
    let mut v: Vec<f32> = (0..vocab).map(|_| rng.normal(3.0) as f32).collect();
    let pick = |rng: &mut Rng| rng.below(vocab as u64) as usize;
    match kind {
        0 => {}
        1 => v = (0..vocab).map(|_| f32::NEG_INFINITY).collect(),
        2 => v.iter_mut().for_each(|x| *x = 1.5),
        3 => v.iter_mut().for_each(|x| *x = (x.round() / 3.0).round()),
        4 => v.iter_mut().for_each(|x| *x = f32::from_bits(1 + (x.to_bits() & 0x7fff))),
        5 => {
            let start = pick(rng);
            v[start..(start + vocab / 2).min(vocab)].iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
        }
        6 => (0..=vocab / 10).for_each(|_| v[pick(rng)] = f32::NAN),
        7 => (0..=rng.below(3)).for_each(|_| v[pick(rng)] = f32::INFINITY),
        8 => v = (0..vocab).map(|_| f32::NAN).collect(),
        _ => {
            v.iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
            v[pick(rng)] = 0.0;
        }
    }
    v
}

/// Cases are drawn from a few numbers (so shrinking is fast); the data comes from a seeded
/// generator.
fn cases() -> impl Strategy<Value = Case> {
    (0u32..=18, 1usize..=64, 0usize..=5, proptest::num::u64::ANY).prop_map(|(log_vocab, batch, pad, seed)| {
        let mut rng = Rng::new(seed);
        let vocab = ((1usize << log_vocab) + rng.below(1 << log_vocab) as usize).min(262_144);
        let batch = batch.min((MAX_ELEMENTS / vocab).max(1));
        let shape = Shape { batch, vocab, stride: vocab + pad };
        let mut logits = vec![0f32; shape.elements()];
        let mut rows = Vec::with_capacity(batch);
        for r in 0..batch {
            let kind = rng.below(10);
            let values = row(&mut rng, vocab, kind);
            logits[r * shape.stride..r * shape.stride + vocab].copy_from_slice(&values);
            let temperature = if rng.below(5) == 0 { 0.0 } else { 10f64.powf(rng.unit() * 10.0 - 6.0) as f32 };
            rows.push(RowParams::new(temperature, rng.next_u64(), rng.next_u64()));
        }
        Case { shape, logits, rows }
    })
}

/// Greedy and race tokens and statuses of one case on `b`.
fn sample<B: Backend>(b: &B, case: &Case) -> [(Vec<u32>, Vec<u32>); 2] {
    let x = b.upload(&case.logits).unwrap();
    let rows = b.upload(&case.rows).unwrap();
    let run = |race: bool| {
        let (mut t, mut st) = (b.zeros::<u32>(case.shape.batch).unwrap(), b.zeros::<u32>(case.shape.batch).unwrap());
        let out = Output::new(&mut t).with_status(&mut st);
        if race {
            b.race_from_logits(case.shape, Logits::F32(&x), &rows, out).unwrap();
        } else {
            b.greedy(case.shape, Logits::F32(&x), out).unwrap();
        }
        (b.download(&t).unwrap(), b.download(&st).unwrap())
    };
    [run(false), run(true)]
}

fn check_case<B: Backend>(b: &B, case: &Case, flushes: bool) -> Result<(), String> {
    let [(greedy, greedy_st), (race, race_st)] = sample(b, case);
    let [(want_race_greedy, _), (want_race, _)] = sample(&CpuBackend, case);
    // Greedy compares raw values: on a device that flushes subnormals, with the flushed row's.
    let want_greedy = if flushes {
        sample(&CpuBackend, &Case { logits: common::flushed(&case.logits), ..case.clone() })[0].0.clone()
    } else {
        want_race_greedy
    };
    let input = CpuBackend.upload(&case.logits).unwrap();
    for r in 0..case.shape.batch {
        let x = row_values(Logits::F32(&input), case.shape, r);
        let valid = x.iter().any(|&v| v > f64::NEG_INFINITY);
        let fail = |what: &str| Err(format!("{:?} row {r} ({:?}): {what}", case.shape, case.rows[r]));
        for (path, token, status) in [("greedy", greedy[r], greedy_st[r]), ("race", race[r], race_st[r])] {
            if token as usize >= case.shape.vocab {
                return fail(&format!("{path} token {token} outside the vocabulary"));
            }
            if status != valid as u32 {
                return fail(&format!("{path} status {status}, row valid {valid}"));
            }
            if valid && x[token as usize] == f64::NEG_INFINITY {
                return fail(&format!("{path} chose an invalid value"));
            }
        }
        if greedy[r] != want_greedy[r] {
            return fail(&format!("greedy {} vs oracle {}", greedy[r], want_greedy[r]));
        }
        let t = case.rows[r];
        let top: Vec<usize> = (0..x.len())
            .filter(|&j| x[j] as f32 / if t.is_sampled() { t.temperature } else { 1.0 } == f32::INFINITY)
            .collect();
        if !top.is_empty() {
            if !top.contains(&(race[r] as usize)) {
                return fail("race left the +inf class");
            }
            continue;
        }
        let mut scores = oracle::race_scores(&x, &t, false);
        let best = oracle::argmax(&scores);
        let first = scores[best];
        scores[best] = f64::NEG_INFINITY;
        let second = scores[oracle::argmax(&scores)];
        let apart = valid && (first - second) > 1e-4 * first.abs().max(1.0);
        if apart && race[r] != want_race[r] {
            return fail(&format!("race {} vs oracle {}", race[r], want_race[r]));
        }
    }
    Ok(())
}

pub fn properties_hold<B: Backend>(b: &B) {
    let config = Config { cases: CASES, failure_persistence: None, ..Config::default() };
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let elements = std::cell::Cell::new(0usize);
    let flushes = flushes_subnormals(b);
    let result = runner.run(&cases(), |case| {
        elements.set(elements.get() + case.logits.len());
        check_case(b, &case, flushes).map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("{}: {e}", b.describe());
    }
    eprintln!("{}: {CASES} cases, {} elements, every invariant held", b.describe(), elements.get());
}

every_suite!(properties_hold);
