//! SGLang's seeded float64 sampler on every backend: the golden vectors of `tests/data/` (made by
//! `tests/data/make_seeded_golden.py` from SGLang's formulas with numpy and the `mmh3` package, not
//! from this crate's code), the hash test vectors, a column that hashes to 0 (SGLang's finite
//! noise, -709.78) in every mode, the float64 log's accuracy, and the float32 screen against full
//! float64.

#[macro_use]
mod common;

use common::Rng;
use sampling_kernels::reference::murmur;
use sampling_kernels::{Backend, Diagnostics, Input, LogProbs, Logits, Output, RowParams, SeededMode, Shape};

struct Golden {
    shape: Shape,
    logprobs: Vec<f64>,
    /// Their float32 softmax, as SGLang's path from probabilities would be given it.
    probs: Vec<f32>,
    rows: Vec<RowParams>,
    /// SGLang's tokens from the log-probabilities, from them as logits at T = 1 (its float32
    /// log-softmax, which flushes the hash-zero rows' other columns to -inf), and from the
    /// probabilities (`multinomial_with_seed(torch.log(probs))`).
    expected: Vec<u32>,
    expected_from_logits: Vec<u32>,
    expected_from_probs: Vec<u32>,
    vectors: Vec<(u64, u64, u32, u32)>,
    hash_zero: HashZero,
}

/// The (seed, position, column) that hashes to 0, its noise as SGLang computes it, and the golden
/// rows where that column decides the token.
struct HashZero {
    seed: u64,
    position: u64,
    column: u32,
    noise: f64,
    rows: Vec<usize>,
}

fn golden() -> Golden {
    let dir = common::golden_dir();
    let text = std::fs::read_to_string(dir.join("seeded_golden.json")).expect("tests/data/seeded_golden.json");
    let meta: serde_json::Value = serde_json::from_str(&text).unwrap();
    let read = |k: &str| std::fs::read(dir.join(meta[k].as_str().unwrap())).unwrap();
    let logprobs: Vec<f64> =
        common::npy(&read("logprobs_file"), "<f8").map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect();
    let probs: Vec<f32> =
        common::npy(&read("probs_file"), "<f4").map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    let n = |k: &str| meta[k].as_u64().unwrap() as usize;
    assert_eq!(logprobs.len(), n("rows") * n("vocab"), "log-probabilities for rows x vocab");
    assert_eq!(probs.len(), logprobs.len(), "probabilities for rows x vocab");
    let numbers = |v: &serde_json::Value| v.as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect::<Vec<_>>();
    let list = |k: &str| numbers(&meta[k]);
    let tokens = |k: &str| list(k).into_iter().map(|t| t as u32).collect();
    let (seeds, positions) = (list("seeds"), list("positions"));
    let rows = seeds.iter().zip(&positions).map(|(&s, &p)| RowParams::seeded(1.0, s, p)).collect();
    let vectors = meta["murmur_vectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let g = |k: &str| v[k].as_u64().unwrap();
            (g("seed"), g("position"), g("column") as u32, g("hash") as u32)
        })
        .collect();
    let z = &meta["hash_zero"];
    assert_eq!(z["hash"].as_u64(), Some(0), "the hash-zero column's hash");
    let hash_zero = HashZero {
        seed: z["seed"].as_u64().unwrap(),
        position: z["position"].as_u64().unwrap(),
        column: z["column"].as_u64().unwrap() as u32,
        noise: z["noise"].as_f64().unwrap(),
        rows: numbers(&z["rows"]).into_iter().map(|r| r as usize).collect(),
    };
    Golden {
        shape: Shape::dense(n("rows"), n("vocab")),
        logprobs,
        probs,
        rows,
        expected: tokens("expected_tokens"),
        expected_from_logits: tokens("expected_tokens_from_logits"),
        expected_from_probs: tokens("expected_tokens_from_probs"),
        vectors,
        hash_zero,
    }
}

fn seeded_tokens<B: Backend>(
    b: &B,
    shape: Shape,
    lp: &[f64],
    rows: &[RowParams],
    mode: SeededMode,
    f32_lp: bool,
) -> Vec<u32> {
    let r = b.upload(rows).unwrap();
    let mut tokens = b.zeros::<u32>(shape.batch).unwrap();
    let out = Output::new(&mut tokens);
    if f32_lp {
        let narrow: Vec<f32> = lp.iter().map(|&x| x as f32).collect();
        b.seeded(shape, LogProbs::F32(&b.upload(&narrow).unwrap()), &r, mode, out).unwrap();
    } else {
        b.seeded(shape, LogProbs::F64(&b.upload(lp).unwrap()), &r, mode, out).unwrap();
    }
    b.download(&tokens).unwrap()
}

/// Every golden row (the hash-zero column's among them), in both modes, from float64 and float32
/// log-probabilities and from probabilities, and through the fused path from logits (the golden
/// log-probabilities as logits at T = 1).
pub fn golden_tokens<B: Backend>(b: &B) {
    let g = golden();
    assert_eq!(g.rows.len(), 12);
    let r = b.upload(&g.rows).unwrap();
    let probs = b.upload(&g.probs).unwrap();
    for mode in [SeededMode::Float64, SeededMode::Screened] {
        for f32_lp in [false, true] {
            let got = seeded_tokens(b, g.shape, &g.logprobs, &g.rows, mode, f32_lp);
            assert_eq!(got, g.expected, "{mode:?}, float32 input {f32_lp}");
        }
        let mut tokens = b.zeros::<u32>(g.shape.batch).unwrap();
        b.seeded(g.shape, LogProbs::LogOf(&probs), &r, mode, Output::new(&mut tokens)).unwrap();
        assert_eq!(b.download(&tokens).unwrap(), g.expected_from_probs, "{mode:?}, from probabilities");
    }
    let logits: Vec<f32> = g.logprobs.iter().map(|&x| x as f32).collect();
    let mut tokens = b.zeros::<u32>(g.shape.batch).unwrap();
    let out = Output::new(&mut tokens);
    b.seeded_from_logits(g.shape, Logits::F32(&b.upload(&logits).unwrap()), &r, out).unwrap();
    assert_eq!(b.download(&tokens).unwrap(), g.expected_from_logits, "from logits");
}

/// The hash-zero rows through the filter kernels, seeded, with top-k 2, 100 and vocab - 1. From
/// float32 logits the other columns lie 700 or more below the hash-zero one, where float32's
/// softmax is 0, so every set keeps that column alone (a set keeps only tokens with probability;
/// no float32 row spans the 709.78 its noise gives away, so inside a set with two tokens or more
/// it never wins). Alone, its noise must be finite for the row to have a valid token: SGLang's
/// token from the JSON with status 1 (the host oracle gave token 0, status 0, with `-inf`).
pub fn hash_zero_column_filtered<B: Backend>(b: &B) {
    let g = golden();
    let v = g.shape.vocab;
    let rows = &g.hash_zero.rows;
    let logits: Vec<f32> = rows.iter().flat_map(|&r| &g.logprobs[r * v..(r + 1) * v]).map(|&x| x as f32).collect();
    let shape = Shape::dense(rows.len(), v);
    let x = b.upload(&logits).unwrap();
    let want: Vec<u32> = rows.iter().map(|&r| g.expected_from_logits[r]).collect();
    for k in [2, 100, v as u32 - 1] {
        let params: Vec<RowParams> = rows.iter().map(|&r| g.rows[r].with_top_k(k)).collect();
        let r = b.upload(&params).unwrap();
        let mut tokens = b.zeros::<u32>(shape.batch).unwrap();
        let mut status = b.zeros::<u32>(shape.batch).unwrap();
        let out = Output::new(&mut tokens).with_status(&mut status);
        b.sample_filtered(shape, Input::Logits(Logits::F32(&x)), &r, out).unwrap();
        assert_eq!(b.download(&tokens).unwrap(), want, "top-k {k}");
        assert_eq!(b.download(&status).unwrap(), vec![1; shape.batch], "top-k {k}");
    }
}

/// The host's noise of the hash-zero column is SGLang's clamped -709.78 (to the JSON's printing).
#[test]
fn hash_zero_noise_is_sglangs() {
    let z = golden().hash_zero;
    let g = murmur::gumbel(murmur::hash(z.seed, z.position, z.column));
    assert!((g - z.noise).abs() <= f64::EPSILON * z.noise.abs(), "{g} against SGLang's {}", z.noise);
}

/// The golden hash vectors, then 10^6 random (seed, position, column) triples against the host.
pub fn murmur_matches<B: Backend>(b: &B) {
    let g = golden();
    let mut rng = Rng::new(99);
    let mut triples: Vec<(u64, u64, u32)> = g.vectors.iter().map(|&(s, p, c, _)| (s, p, c)).collect();
    triples.extend((0..1_000_000).map(|_| (rng.next_u64(), rng.next_u64(), rng.next_u64() as u32)));
    let words: Vec<u32> = triples.iter().flat_map(|&(s, p, c)| [s as u32, (s >> 32) as u32, p as u32, c]).collect();
    let w = b.upload(&words).unwrap();
    let mut out = b.zeros::<u32>(triples.len()).unwrap();
    b.murmur3(triples.len(), &w, &mut out).unwrap();
    let got = b.download(&out).unwrap();
    for (i, &(_, _, _, want)) in g.vectors.iter().enumerate() {
        assert_eq!(got[i], want, "golden vector {i}");
    }
    for (i, &(s, p, c)) in triples.iter().enumerate() {
        assert_eq!(got[i], murmur::hash(s, p, c), "triple {i}");
    }
}

// ---- float64 log against a double-double reference --------------------------------------------

fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}
fn dd_add(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    let (s, e) = two_sum(a.0, b.0);
    two_sum(s, e + a.1 + b.1)
}
fn dd_mul(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    let p = a.0 * b.0;
    let e = a.0.mul_add(b.0, -p) + a.0 * b.1 + a.1 * b.0;
    two_sum(p, e)
}
fn dd_div(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    let q1 = a.0 / b.0;
    let r = dd_add(a, dd_mul((-q1, 0.0), b));
    let q2 = r.0 / b.0;
    let r = dd_add(r, dd_mul((-q2, 0.0), b));
    two_sum(q1, q2 + r.0 / b.0)
}

/// ln(x) to about 100 bits: x = m 2^k, m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh((m-1)/(m+1)).
fn ln_reference(x: f64) -> (f64, f64) {
    let (mut bits, mut k) = (x.to_bits(), 0i64);
    if bits < (1 << 52) {
        bits = (x * 2f64.powi(54)).to_bits();
        k = -54;
    }
    k += (bits >> 52) as i64 - 1023;
    let mut m = f64::from_bits((bits & ((1 << 52) - 1)) | (1023 << 52));
    if m > std::f64::consts::SQRT_2 {
        m /= 2.0;
        k += 1;
    }
    let s = dd_div((m - 1.0, 0.0), two_sum(m, 1.0));
    let s2 = dd_mul(s, s);
    let (mut sum, mut term, mut n) = (s, s, 1.0);
    while term.0.abs() > 1e-40 * sum.0.abs().max(1e-300) {
        term = dd_mul(term, s2);
        n += 2.0;
        sum = dd_add(sum, dd_div(term, (n, 0.0)));
    }
    let ln2 = (std::f64::consts::LN_2, 2.319046813846299558e-17);
    dd_add(dd_mul((k as f64, 0.0), ln2), dd_mul((2.0, 0.0), sum))
}

/// Points over the whole range the seeded kernel uses and beyond: log-uniform over every
/// positive float64 (subnormals included), dense around 1, and the kernel's own arguments
/// (`h / (2^32 - 1)` and the negated logs of those).
fn log_points(n: usize) -> Vec<f64> {
    let mut rng = Rng::new(2024);
    let mut pts = Vec::with_capacity(n);
    while pts.len() < n {
        let x = match pts.len() % 4 {
            0 => f64::from_bits(1 + rng.below(0x7fef_ffff_ffff_ffff)),
            1 => 1.0 + (rng.unit() - 0.5) * 2f64.powi(-(rng.below(52) as i32)),
            2 => (1 + rng.below(u32::MAX as u64)) as f64 / 4_294_967_295.0,
            _ => -((1 + rng.below(u32::MAX as u64)) as f64 / 4_294_967_295.0).ln().min(-(2f64.powi(-32))),
        };
        if x > 0.0 && x.is_finite() {
            pts.push(x);
        }
    }
    pts
}

/// 10^7 points, within one ulp of the correctly rounded log (the double-double reference
/// rounded to float64).
pub fn log64_within_one_ulp<B: Backend>(b: &B) {
    let pts = log_points(10_000_000);
    let x = b.upload(&pts).unwrap();
    let mut out = b.zeros::<f64>(pts.len()).unwrap();
    b.log_f64(pts.len(), &x, &mut out).unwrap();
    let got = b.download(&out).unwrap();
    let mut worst = 0u64;
    for (i, &p) in pts.iter().enumerate() {
        let (hi, _) = ln_reference(p);
        let ulps = (got[i].to_bits() as i64 - hi.to_bits() as i64).unsigned_abs();
        let ulps = if hi == 0.0 { (got[i] != 0.0) as u64 } else { ulps };
        worst = worst.max(ulps);
        assert!(ulps <= 1, "ln({p:e}) = {:e}, correctly rounded {hi:e} ({ulps} ulps)", got[i]);
    }
    eprintln!("{}: float64 log over {} points: worst {worst} ulp from correctly rounded", b.describe(), pts.len());
}

/// 10,000 random rows: the float32 screen gives the full-float64 token on every row, and both
/// match the oracle where its top two scores differ by more than 1e-12 relative.
pub fn screened_equals_float64<B: Backend>(b: &B) {
    let mut rng = Rng::new(77);
    let shape = Shape::dense(10_000, 257);
    let mut lp = Vec::with_capacity(shape.elements());
    let mut rows = Vec::new();
    for r in 0..shape.batch {
        // Peaked, flat, masked and near-tied rows, as normalized log-probabilities.
        let scale = [0.05, 1.0, 4.0, 12.0][r % 4];
        let mut logits: Vec<f64> = (0..shape.vocab).map(|_| rng.normal(scale)).collect();
        if r % 5 == 0 {
            for l in logits.iter_mut().step_by(3) {
                *l = f64::NEG_INFINITY;
            }
        }
        let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + logits.iter().map(|l| (l - m).exp()).sum::<f64>().ln();
        lp.extend(logits.iter().map(|l| l - lse));
        rows.push(RowParams::seeded(if r % 50 == 0 { 0.0 } else { 1.0 }, rng.next_u64(), rng.next_u64()));
    }
    let full = seeded_tokens(b, shape, &lp, &rows, SeededMode::Float64, false);
    let screened = seeded_tokens(b, shape, &lp, &rows, SeededMode::Screened, false);
    assert_eq!(full, screened, "the screen changed a token");
    let mut near = 0;
    for r in 0..shape.batch {
        let mut s = sampling_kernels::reference::seeded_scores(&lp[r * 257..(r + 1) * 257], &rows[r]);
        let best = sampling_kernels::reference::argmax(&s);
        let top = s[best];
        s[best] = f64::NEG_INFINITY;
        let second = s[sampling_kernels::reference::argmax(&s)];
        if top - second <= 1e-12 * top.abs().max(1.0) {
            near += 1;
            continue;
        }
        assert_eq!(full[r] as usize, best, "row {r}");
    }
    eprintln!("{}: screened = float64 on 10000 rows; {near} oracle near-ties not compared", b.describe());
}

/// The same request in row 0 of one batch and row 9 of another gets the same token.
pub fn seeded_token_independent_of_row<B: Backend>(b: &B) {
    let mut rng = Rng::new(5);
    let vocab = 1000;
    let request: Vec<f64> = (0..vocab).map(|_| rng.normal(2.0) - 8.0).collect();
    let params = RowParams::seeded(1.0, 42, 17);
    let mut other: Vec<f64> = (0..9 * vocab).map(|_| rng.normal(2.0) - 8.0).collect();
    let mut rows: Vec<RowParams> = (0..9).map(|i| RowParams::seeded(1.0, i, 3)).collect();
    other.extend(&request);
    rows.push(params);
    for mode in [SeededMode::Float64, SeededMode::Screened] {
        let alone = seeded_tokens(b, Shape::dense(1, vocab), &request, &[params], mode, false);
        let batched = seeded_tokens(b, Shape::dense(10, vocab), &other, &rows, mode, false);
        assert_eq!(alone[0], batched[9], "{mode:?}");
    }
}

/// From logits, a row long enough to split takes its parts from its length alone, and so its
/// float32 sum's rounding: each of 16 requests gets the same token and the same log-probability
/// bits alone and in a batch of 16. A split that followed the batch would round the sum
/// differently on about half the rows (the last bit of a sum of 40,000 terms grouped two ways),
/// so a false pass is about 2^-16; a trial kernel whose records followed the parts failed it.
pub fn seeded_split_rounds_alike_in_every_batch<B: Backend>(b: &B) {
    let mut rng = Rng::new(77);
    let shape = Shape::dense(16, 40_000);
    let logits: Vec<f32> = (0..shape.elements()).map(|_| rng.normal(2.5) as f32).collect();
    let rows: Vec<RowParams> = (0..16).map(|i| RowParams::seeded(0.6 + 0.05 * i as f32, 1000 + i, 7)).collect();
    let run = |shape: Shape, x: &[f32], rows: &[RowParams]| {
        let (x, r) = (b.upload(x).unwrap(), b.upload(rows).unwrap());
        let (mut t, mut lp) = (b.zeros::<u32>(shape.batch).unwrap(), b.zeros::<f32>(shape.batch).unwrap());
        b.seeded_from_logits(shape, Logits::F32(&x), &r, Output::new(&mut t).with_logprobs(&mut lp)).unwrap();
        let lp: Vec<u32> = b.download(&lp).unwrap().iter().map(|x| x.to_bits()).collect();
        (b.download(&t).unwrap(), lp)
    };
    let batched = run(shape, &logits, &rows);
    for r in 0..16 {
        let alone = run(Shape::dense(1, shape.vocab), &logits[r * shape.vocab..(r + 1) * shape.vocab], &rows[r..r + 1]);
        assert_eq!((alone.0[0], alone.1[0]), (batched.0[r], batched.1[r]), "row {r}: (token, log-probability bits)");
    }
}

/// From probabilities with the values a buggy engine hands over (0, negative, NaN, +inf, the
/// smallest subnormal, the smallest normal, 1, above 1): the CPU oracle's tokens and statuses,
/// and log-probabilities within 2 float32 ulps, in both modes. A token may differ only where the
/// kernel's float32 log and the correctly rounded one differ by an ulp at a near-tie of the top two
/// scores (about 1e-6 apart, on rows of 600 Gumbel-perturbed scores: about 1 in 10^5 rows, so a
/// false alarm on these 300 rows is about 0.3%).
pub fn log_of_probabilities_is_the_oracles<B: Backend>(b: &B) {
    let mut rng = Rng::new(91);
    let shape = Shape::dense(300, 600);
    let odd = [0.0f32, -0.5, f32::NAN, f32::INFINITY, 1e-45, f32::MIN_POSITIVE, 1.0, 3.0];
    let probs: Vec<f32> = (0..shape.elements())
        .map(|i| if i % 7 == 0 { odd[(i / 7) % odd.len()] } else { (rng.normal(1.0).exp() * 1e-3) as f32 })
        .collect();
    let rows: Vec<RowParams> = (0..shape.batch as u64)
        .map(|r| RowParams::seeded(if r % 25 == 0 { 0.0 } else { 1.0 }, rng.next_u64(), r))
        .collect();
    let cpu = sampling_kernels::CpuBackend;
    for mode in [SeededMode::Float64, SeededMode::Screened] {
        let (want_t, want_s, want_lp) = {
            let (mut t, mut st, mut lp) = (vec![0u32; shape.batch], vec![0u32; shape.batch], vec![0f32; shape.batch]);
            let out = Output::new(&mut t).with_status(&mut st).with_logprobs(&mut lp);
            cpu.seeded(shape, LogProbs::LogOf(&probs), &rows, mode, out).unwrap();
            (t, st, lp)
        };
        let p = b.upload(&probs).unwrap();
        let r = b.upload(&rows).unwrap();
        let (mut t, mut st, mut lp) = (
            b.zeros::<u32>(shape.batch).unwrap(),
            b.zeros::<u32>(shape.batch).unwrap(),
            b.zeros::<f32>(shape.batch).unwrap(),
        );
        let out = Output::new(&mut t).with_status(&mut st).with_logprobs(&mut lp);
        b.seeded(shape, LogProbs::LogOf(&p), &r, mode, out).unwrap();
        assert_eq!(b.download(&t).unwrap(), want_t, "{mode:?}: tokens");
        assert_eq!(b.download(&st).unwrap(), want_s, "{mode:?}: statuses");
        for (row, (got, want)) in b.download(&lp).unwrap().iter().zip(&want_lp).enumerate() {
            let ulps = (got.to_bits() as i64 - want.to_bits() as i64).abs();
            assert!(got == want || ulps <= 2, "{mode:?}, row {row}: log-probability {got:e}, oracle {want:e}");
        }
    }
}

/// From logits, rows of ten kinds (flat, model-like, peaked, masked, greedy, shifted by
/// 3,000 at T = 0.7, with a +inf column, integer ties, all -inf, shifted past 2^20): the CPU
/// oracle's tokens and statuses, but where the oracle's top two scores lie within 1e-5 of each
/// other (the kernel's float32 sum and the oracle's exact one may round a log-probability an ulp
/// apart there). The pass counts: one read for the screened kinds, two where the row takes the
/// rescan (a +inf column, |max| at or above 2^20, nothing valid).
pub fn from_logits_is_the_oracles<B: Backend>(b: &B) {
    // Rows of one workgroup, and rows split over workgroups (their parts' records, then the merge).
    from_logits_matches(b, Shape::dense(2000, 1031));
    from_logits_matches(b, Shape::dense(200, 40_000));
}

fn from_logits_matches<B: Backend>(b: &B, shape: Shape) {
    let mut rng = Rng::new(2020);
    let v = shape.vocab;
    let mut logits = Vec::with_capacity(shape.elements());
    let mut rows = Vec::new();
    for r in 0..shape.batch {
        let kind = r % 10;
        let scale = [0.05, 1.0, 4.0, 12.0, 2.0, 2.0, 3.0, 1.0, 1.0, 1.0][kind];
        let shift = match kind {
            6 => 3000.0,
            9 => 2.0e6,
            _ => 0.0,
        };
        let mut row: Vec<f32> = (0..v).map(|_| (rng.normal(scale) + shift) as f32).collect();
        match kind {
            4 => row.iter_mut().step_by(3).for_each(|x| *x = f32::NEG_INFINITY),
            7 => row[rng.below(v as u64) as usize] = f32::INFINITY,
            8 if r % 100 == 8 => row.iter_mut().for_each(|x| *x = f32::NEG_INFINITY),
            8 => row.iter_mut().for_each(|x| *x = x.round()),
            _ => {}
        }
        logits.extend(row);
        let t = match kind {
            5 => 0.0,
            6 => 0.7,
            _ => 1.0,
        };
        rows.push(RowParams::seeded(t, rng.next_u64(), rng.next_u64()));
    }
    let (want_t, want_s) = {
        let (mut t, mut st) = (vec![0u32; shape.batch], vec![0u32; shape.batch]);
        let out = Output::new(&mut t).with_status(&mut st);
        sampling_kernels::CpuBackend.seeded_from_logits(shape, Logits::F32(&logits), &rows, out).unwrap();
        (t, st)
    };
    let (x, r) = (b.upload(&logits).unwrap(), b.upload(&rows).unwrap());
    let (mut t, mut st, mut passes) = (
        b.zeros::<u32>(shape.batch).unwrap(),
        b.zeros::<u32>(shape.batch).unwrap(),
        b.zeros::<u32>(shape.batch).unwrap(),
    );
    let out = Output::new(&mut t).with_status(&mut st).with_passes(&mut passes);
    b.seeded_from_logits(shape, Logits::F32(&x), &r, out).unwrap();
    let (got_t, got_s, passes) = (b.download(&t).unwrap(), b.download(&st).unwrap(), b.download(&passes).unwrap());
    assert_eq!(got_s, want_s, "statuses");
    let mut near = 0;
    for row in 0..shape.batch {
        if got_t[row] != want_t[row] {
            let values: Vec<f64> = logits[row * v..(row + 1) * v].iter().map(|&x| x as f64).collect();
            let lp = sampling_kernels::reference::softmax::sglang_logprobs(&values, &rows[row]);
            let s = sampling_kernels::reference::seeded_scores(&lp, &rows[row]);
            let (a, w) = (s[got_t[row] as usize], s[want_t[row] as usize]);
            assert!(
                (a - w).abs() <= 1e-5 * w.abs().max(1.0),
                "row {row}: token {} ({a}), oracle {} ({w})",
                got_t[row],
                want_t[row]
            );
            near += 1;
        }
        let rescans = matches!(row % 10, 7 | 9) || row % 100 == 8;
        if rescans {
            assert_eq!(passes[row], 2, "row {row}: the rescan is a second read");
        }
    }
    let screened = (0..shape.batch).filter(|&r| !matches!(r % 10, 7 | 9) && r % 100 != 8);
    let one = screened.clone().filter(|&r| passes[r] == 1).count();
    assert!(one * 100 >= screened.count() * 95, "only {one} screened rows read once");
    eprintln!("{}: from logits = oracle on {shape:?}; {near} near-ties differ; {one} rows read once", b.describe());
}

// On the CPU, the oracle's own log and hash are checked against the references.
suite!(
    cpu,
    crate::common::cpu,
    golden_tokens,
    hash_zero_column_filtered,
    murmur_matches,
    log64_within_one_ulp,
    seeded_token_independent_of_row,
    seeded_split_rounds_alike_in_every_batch
);
device_suites!(
    golden_tokens,
    hash_zero_column_filtered,
    murmur_matches,
    log64_within_one_ulp,
    log_of_probabilities_is_the_oracles,
    screened_equals_float64,
    seeded_token_independent_of_row,
    seeded_split_rounds_alike_in_every_batch,
    from_logits_is_the_oracles
);

/// The hash-zero rows through the split filter kernel (a launch per stage), which lavapipe's
/// adapter does not take by default.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_split_hash_zero_column_filtered() {
    let split = crate::common::wgpu().map(|_| sampling_kernels::WgpuBackend::new().unwrap().with_split_filters(true));
    crate::common::on("wgpu", "split_hash_zero_column_filtered", split.as_ref(), hash_zero_column_filtered);
}

/// A device without float64 gets a typed error naming the feature, not a wrong token.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_without_float64_is_a_typed_error() {
    use sampling_kernels::wgpu;
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let Ok(adapter) = pollster::block_on(instance.request_adapter(&Default::default())) else {
        assert!(!common::in_ci(), "CI=true requires a wgpu adapter");
        common::report("wgpu", "not-run", "wgpu_without_float64_is_a_typed_error", "absent");
        return;
    };
    // A device asked for no features, as on Metal, which has no float64.
    let (device, queue) = pollster::block_on(adapter.request_device(&Default::default())).unwrap();
    let b = sampling_kernels::WgpuBackend::from_device(device, queue, adapter.get_info());
    let shape = Shape::dense(1, 4);
    let lp = b.upload(&[0f64; 4]).unwrap();
    let r = b.upload(&[RowParams::seeded(1.0, 1, 1)]).unwrap();
    let mut t = b.zeros::<u32>(1).unwrap();
    let err = b.seeded(shape, LogProbs::F64(&lp), &r, SeededMode::Float64, Output::new(&mut t)).unwrap_err();
    assert!(matches!(err, sampling_kernels::Error::Unsupported { feature: "SHADER_F64", .. }), "{err}");
    // The masking kernel needs u64 only: the error names that feature, not float64.
    let x = b.upload(&[0f32; 4]).unwrap();
    let plain = b.upload(&[RowParams::new(1.0, 1, 1).with_top_k(2)]).unwrap();
    let mut masked = b.zeros::<f32>(4).unwrap();
    let err = b.mask_logits(shape, sampling_kernels::Logits::F32(&x), &plain, &mut masked).unwrap_err();
    assert!(matches!(err, sampling_kernels::Error::Unsupported { feature: "SHADER_INT64", .. }), "{err}");
    common::report("wgpu", "ran", "wgpu_without_float64_is_a_typed_error", &b.describe());
}
