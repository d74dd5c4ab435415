//! The race from logits prunes columns that cannot win (no Philox block, no log for them); this
//! checks that pruning never changes a token (issue 20, item 6). On every device backend, at
//! least 10,000 rows of each kind (flat, peaked, model-like, ties, -inf blocks, NaN) at
//! temperatures from 0.05 to 2 are raced by the pruned kernel and compared with the CPU
//! oracle's race, which scores every column (unpruned, in float64): the same token on every
//! row whose two best oracle scores are apart by `RACE_EPS`, the same status, and the
//! log-probability within a few float32 roundings.
//!
//! The rows are short (2,100 columns: three steps of a workgroup of 256 on wgpu, so the floor
//! shared between steps prunes later quads), and a few rows of 151,936 per kind cover rows that
//! a GPU splits over workgroups.

#[macro_use]
mod common;

use common::Rng;
use sampling_kernels::backend::cpu::row_values;
use sampling_kernels::reference as oracle;
use sampling_kernels::{Backend, CpuBackend, Logits, Output, RowParams, Shape};

/// As in `backends.rs`: the GPU scores in float32, the oracle in float64, so rows whose best two
/// oracle scores are this close are counted, not compared.
const RACE_EPS: f64 = 1e-4;
const TEMPERATURES: [f32; 8] = [0.05, 0.1, 0.3, 0.6, 0.8, 1.0, 1.5, 2.0];
/// Rows of each kind, in batches of `BATCH` short rows.
const ROWS_PER_KIND: usize = 10_000;
const BATCH: usize = 2_100;
const SHORT: usize = 2_100;
const LONG: usize = 151_936;

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Every logit equal: nothing can be pruned.
    Flat,
    /// Noise with one column 12 above it.
    Peaked,
    /// Zipf's law with exponent 1.1 (the benchmark's model-like rows).
    ModelLike,
    /// Integer logits: many columns share each value.
    Ties,
    /// Model-like rows with runs of -inf (one row in 50 all -inf).
    NegInfBlocks,
    /// Model-like rows with one value in ten NaN (one row in 50 all NaN).
    Nan,
}

const KINDS: [Kind; 6] = [Kind::Flat, Kind::Peaked, Kind::ModelLike, Kind::Ties, Kind::NegInfBlocks, Kind::Nan];

fn row(kind: Kind, index: usize, n: usize, rng: &mut Rng) -> Vec<f32> {
    let zipf = |rng: &mut Rng| (-1.1 * (1.0 + n as f64 * rng.unit()).ln()) as f32;
    match kind {
        Kind::Flat => vec![rng.normal(3.0) as f32; n],
        Kind::Peaked => {
            let mut v: Vec<f32> = (0..n).map(|_| rng.normal(1.0) as f32).collect();
            v[rng.below(n as u64) as usize] += 12.0;
            v
        }
        Kind::ModelLike => (0..n).map(|_| zipf(rng)).collect(),
        Kind::Ties => (0..n).map(|_| rng.normal(2.0).round() as f32).collect(),
        Kind::NegInfBlocks => {
            let mut v: Vec<f32> = (0..n).map(|_| zipf(rng)).collect();
            if index % 50 == 7 {
                v.fill(f32::NEG_INFINITY);
            }
            for _ in 0..1 + rng.below(3) {
                let start = rng.below(n as u64) as usize;
                let len = rng.below(n as u64 / 2) as usize;
                v[start..(start + len).min(n)].fill(f32::NEG_INFINITY);
            }
            v
        }
        Kind::Nan => {
            let all = index % 50 == 7;
            (0..n).map(|_| if all || rng.below(10) == 0 { f32::NAN } else { zipf(rng) }).collect()
        }
    }
}

/// Tokens, log-probabilities and status of the race from logits on `b`.
fn race<B: Backend>(b: &B, shape: Shape, logits: &[f32], rows: &[RowParams]) -> (Vec<u32>, Vec<f32>, Vec<u32>) {
    let x = b.upload(logits).unwrap();
    let r = b.upload(rows).unwrap();
    let mut tokens = b.zeros::<u32>(shape.batch).unwrap();
    let mut lps = b.zeros::<f32>(shape.batch).unwrap();
    let mut status = b.zeros::<u32>(shape.batch).unwrap();
    let out = Output::new(&mut tokens).with_logprobs(&mut lps).with_status(&mut status);
    b.race_from_logits(shape, Logits::F32(&x), &r, out).unwrap();
    (b.download(&tokens).unwrap(), b.download(&lps).unwrap(), b.download(&status).unwrap())
}

/// Rows compared and rows left out as near ties.
#[derive(Default)]
struct Tally {
    compared: usize,
    near_ties: usize,
}

/// Races `batch` rows of `kind` of `n` columns on `b` and on the oracle and compares them.
fn check_batch<B: Backend>(b: &B, kind: Kind, batch: usize, n: usize, rng: &mut Rng, tally: &mut Tally) {
    let shape = Shape::dense(batch, n);
    let mut logits = Vec::with_capacity(batch * n);
    let rows: Vec<RowParams> = (0..batch)
        .map(|i| {
            logits.extend(row(kind, i, n, rng));
            RowParams::new(TEMPERATURES[i % TEMPERATURES.len()], rng.next_u64(), rng.below(1 << 40))
        })
        .collect();
    let (tokens, lps, status) = race(b, shape, &logits, &rows);
    let (_, want_lps, want_status) = race(&CpuBackend, shape, &logits, &rows);
    let input = CpuBackend.upload(&logits).unwrap();
    for r in 0..batch {
        let x = row_values(Logits::F32(&input), shape, r);
        let mut scores = oracle::race_scores(&x, &rows[r], false);
        let best = oracle::argmax(&scores);
        let top = scores[best];
        scores[best] = f64::NEG_INFINITY;
        let second = scores[oracle::argmax(&scores)];
        let context = format!("{kind:?} row {r} of {batch} x {n} ({:?})", rows[r]);
        assert_eq!(status[r], want_status[r], "{context}: status");
        if top > f64::NEG_INFINITY && (top - second).abs() <= RACE_EPS * top.abs().max(1.0) {
            tally.near_ties += 1;
            continue;
        }
        tally.compared += 1;
        let want_token = if top > f64::NEG_INFINITY { best } else { 0 };
        assert_eq!(tokens[r] as usize, want_token, "{context}: token");
        let (g, w) = (lps[r] as f64, want_lps[r] as f64);
        if w == f64::NEG_INFINITY {
            assert_eq!(g, w, "{context}: log-probability");
        } else {
            assert!((g - w).abs() <= 2e-5 * w.abs().max(1.0), "{context}: log-probability {g} vs {w}");
        }
    }
}

pub fn pruned_race_matches_unpruned_oracle<B: Backend>(b: &B) {
    let mut rng = Rng::new(20);
    for kind in KINDS {
        let mut tally = Tally::default();
        for _ in 0..ROWS_PER_KIND.div_ceil(BATCH) {
            check_batch(b, kind, BATCH, SHORT, &mut rng, &mut tally);
        }
        check_batch(b, kind, 4, LONG, &mut rng, &mut tally);
        eprintln!(
            "{}: {kind:?}: {} rows identical to the oracle, {} near ties not compared",
            b.describe(),
            tally.compared,
            tally.near_ties
        );
        assert!(tally.compared >= ROWS_PER_KIND, "{kind:?}: only {} rows compared", tally.compared);
        assert!(tally.near_ties * 100 < tally.compared, "{kind:?}: too many near ties to mean anything");
    }
}

device_suites!(pruned_race_matches_unpruned_oracle);
