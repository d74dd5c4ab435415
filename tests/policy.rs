//! The README's table of inputs and what happens to them, one check per row, on every backend.
//! Bad shapes and parameters are typed errors before any launch; NaN is never sampled; +inf
//! scaled values take the whole probability (uniformly); a row with nothing valid gets token 0,
//! status 0 and log-probability -inf.

#[macro_use]
mod common;

use sampling_kernels::sglang::SamplingParams;
use sampling_kernels::{Backend, Error, Input, LogProbs, Logits, Output, RowParams, SeededMode, Shape};

/// Every sampling path's (token, status, log-probability) for one row of logits.
fn every_path<B: Backend>(b: &B, logits: &[f32], temperature: f32) -> Vec<(&'static str, u32, u32, f32)> {
    let shape = Shape::dense(1, logits.len());
    let x = b.upload(logits).unwrap();
    let rows = b.upload(&[RowParams::new(temperature, 11, 3)]).unwrap();
    let mut results = Vec::new();
    let mut run = |name, launch: &dyn Fn(Output<'_, B>) -> sampling_kernels::Result<()>| {
        let (mut t, mut lp, mut st) =
            (b.zeros::<u32>(1).unwrap(), b.zeros::<f32>(1).unwrap(), b.zeros::<u32>(1).unwrap());
        launch(Output::new(&mut t).with_logprobs(&mut lp).with_status(&mut st)).unwrap();
        results.push((name, b.download(&t).unwrap()[0], b.download(&st).unwrap()[0], b.download(&lp).unwrap()[0]));
    };
    run("greedy", &|o| b.greedy(shape, Logits::F32(&x), o));
    run("race_logits", &|o| b.race_from_logits(shape, Logits::F32(&x), &rows, o));
    run("seeded_logits", &|o| b.seeded_from_logits(shape, Logits::F32(&x), &rows, o));
    let lp64: Vec<f64> = logits.iter().map(|&v| v as f64).collect();
    let lp = b.upload(&lp64).unwrap();
    run("seeded", &|o| b.seeded(shape, LogProbs::F64(&lp), &rows, SeededMode::Float64, o));
    run("seeded_screened", &|o| b.seeded(shape, LogProbs::F64(&lp), &rows, SeededMode::Screened, o));
    let filtered = b.upload(&[RowParams::new(temperature, 11, 3).with_top_p(0.999).with_min_p(1e-6)]).unwrap();
    run("filtered", &|o| b.sample_filtered(shape, Input::Logits(Logits::F32(&x)), &filtered, o));
    results
}

/// Empty batch, zero vocabulary, stride below vocabulary, short buffers, short per-row arrays,
/// and a shape past 32-bit indexing: typed errors, nothing launched.
pub fn bad_shapes_and_buffers<B: Backend>(b: &B) {
    let x = b.upload(&[0f32; 8]).unwrap();
    let rows = b.upload(&[RowParams::new(1.0, 0, 0); 2]).unwrap();
    let (mut t, mut lp) = (b.zeros::<u32>(2).unwrap(), b.zeros::<f32>(1).unwrap());
    macro_rules! race {
        ($shape:expr, $rows:expr, $out:expr) => {
            b.race_from_logits($shape, Logits::F32(&x), $rows, $out)
        };
    }
    let shape_err = |r: sampling_kernels::Result<()>| assert!(matches!(r, Err(Error::Shape(_))), "{r:?}");
    shape_err(race!(Shape::dense(0, 4), &rows, Output::new(&mut t)));
    shape_err(race!(Shape::dense(2, 0), &rows, Output::new(&mut t)));
    shape_err(race!(Shape { batch: 2, vocab: 4, stride: 3 }, &rows, Output::new(&mut t)));
    shape_err(race!(Shape { batch: 70_000, vocab: 65_536, stride: 65_536 }, &rows, Output::new(&mut t)));
    let short = |r: sampling_kernels::Result<()>, name: &str| match r {
        Err(Error::BufferTooShort { name: n, .. }) => assert_eq!(n, name),
        other => panic!("{name}: {other:?}"),
    };
    short(race!(Shape::dense(2, 5), &rows, Output::new(&mut t)), "input");
    let one_row = b.upload(&[RowParams::new(1.0, 0, 0)]).unwrap();
    short(race!(Shape::dense(2, 4), &one_row, Output::new(&mut t)), "rows");
    short(race!(Shape::dense(2, 4), &rows, Output::new(&mut t).with_logprobs(&mut lp)), "logprobs");
    let mut t1 = b.zeros::<u32>(1).unwrap();
    short(race!(Shape::dense(2, 4), &rows, Output::new(&mut t1)), "tokens");
}

/// Temperature NaN, infinite or negative: refused on upload and on write, naming row and field.
pub fn bad_temperatures<B: Backend>(b: &B) {
    let mut rows = b.upload(&[RowParams::new(1.0, 0, 0); 3]).unwrap();
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -1.0] {
        let params = [RowParams::new(1.0, 0, 0), RowParams::new(bad, 0, 0)];
        for result in [b.upload(&params).map(|_| ()), b.write(&mut rows, &params)] {
            match result {
                Err(Error::Param { row: 1, field: "temperature", .. }) => {}
                other => panic!("temperature {bad}: {other:?}"),
            }
        }
    }
}

/// Filters outside SGLang's ranges, a top-k of 0 or an unknown order:
/// refused on upload and on write, naming the row and the field.
pub fn bad_filter_params<B: Backend>(b: &B) {
    let base = RowParams::new(1.0, 0, 0);
    let mut unknown_order: [u32; 12] = bytemuck::cast(base);
    unknown_order[5] = 7;
    let cases = [
        (base.with_top_k(0), "top_k"),
        (base.with_top_p(0.0), "top_p"),
        (base.with_top_p(1.5), "top_p"),
        (base.with_top_p(f32::NAN), "top_p"),
        (base.with_min_p(-0.1), "min_p"),
        (base.with_min_p(1.5), "min_p"),
        (base.with_min_p(f32::NAN), "min_p"),
        (bytemuck::cast(unknown_order), "order"),
    ];
    let mut rows = b.upload(&[base; 2]).unwrap();
    // Rows past 2^23 tokens would overflow the filters' fixed-point masses: refused by shape.
    let (x, mut t) = (b.upload(&[0f32; 8]).unwrap(), b.zeros::<u32>(2).unwrap());
    let long = Shape::dense(1, (1 << 23) + 1);
    let r = b.sample_filtered(long, Input::Logits(Logits::F32(&x)), &rows, Output::new(&mut t));
    assert!(matches!(r, Err(Error::Shape(_))), "{r:?}");
    for (bad, field) in cases {
        for result in [b.upload(&[base, bad]).map(|_| ()), b.write(&mut rows, &[base, bad])] {
            match result {
                Err(Error::Param { row: 1, field: f, .. }) if f == field => {}
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}

/// All NaN, all -inf: every path returns token 0, status 0, log-probability -inf.
pub fn rows_with_nothing_valid<B: Backend>(b: &B) {
    for row in [vec![f32::NAN; 37], vec![f32::NEG_INFINITY; 37]] {
        for (path, token, status, lp) in every_path(b, &row, 0.8) {
            assert_eq!((token, status), (0, 0), "{path} on {:?}", row[0]);
            assert_eq!(lp, f32::NEG_INFINITY, "{path}");
        }
    }
}

/// Finite logits whose scaled values `l / T` all round to -inf in f32 (-f32::MAX at T 0.5): no
/// path from logits that divides by the temperature has a value to sample, so status 0, as for a
/// row of -inf; greedy ignores the temperature and takes the lowest index of the finite row.
pub fn scaled_values_below_f32<B: Backend>(b: &B) {
    for vocab in [1, 5] {
        for (path, token, status, lp) in every_path(b, &vec![-f32::MAX; vocab], 0.5) {
            match path {
                "greedy" | "seeded" | "seeded_screened" => assert_eq!((token, status), (0, 1), "{path}"),
                _ => assert_eq!((token, status, lp), (0, 0, f32::NEG_INFINITY), "{path} at vocabulary {vocab}"),
            }
        }
    }
}

/// A single +inf among finite values (and NaN) is chosen by every path, with log-probability 0.
pub fn single_positive_infinity<B: Backend>(b: &B) {
    let mut row: Vec<f32> = (0..50).map(|j| (j % 7) as f32).collect();
    row[3] = f32::NAN;
    row[29] = f32::INFINITY;
    for (path, token, status, lp) in every_path(b, &row, 0.7) {
        // The seeded paths read +inf log-probabilities as invalid; from logits it is certain.
        if path == "seeded" || path == "seeded_screened" {
            assert_ne!(token, 29, "{path}: +inf is no log-probability");
            assert_eq!(status, 1, "{path}");
            continue;
        }
        assert_eq!((token, status), (29, 1), "{path}");
        assert_eq!(lp, 0.0, "{path}");
    }
}

/// Several +inf: greedy takes the lowest index; the race stays among them, uniformly (3,000
/// draws over 3 tokens, chi-square below its 0.999 quantile 13.816 at 2 degrees of freedom), and
/// the log-probability is -ln 3.
pub fn several_positive_infinities<B: Backend>(b: &B) {
    let mut row: Vec<f32> = (0..64).map(|j| j as f32 * 0.1).collect();
    for j in [5, 40, 41] {
        row[j] = f32::INFINITY;
    }
    let results = every_path(b, &row, 1.0);
    let (_, greedy, _, lp) = results[0];
    assert_eq!(greedy, 5);
    assert!((lp - -(3f32.ln())).abs() < 1e-6, "{lp}");
    let draws = 3000;
    let x = b.upload(&row.repeat(draws)).unwrap();
    let rows: Vec<RowParams> = (0..draws as u64).map(|i| RowParams::new(1.0, 77, i)).collect();
    let r = b.upload(&rows).unwrap();
    let mut t = b.zeros::<u32>(draws).unwrap();
    b.race_from_logits(Shape::dense(draws, 64), Logits::F32(&x), &r, Output::new(&mut t)).unwrap();
    let mut counts = [0u64; 3];
    for tok in b.download(&t).unwrap() {
        counts[[5, 40, 41].iter().position(|&j| j == tok).expect("the race left the +inf set")] += 1;
    }
    let chi2 = common::chi_square(&counts, &[1.0 / 3.0; 3]);
    assert!(chi2 < 13.816, "{counts:?}: chi2 {chi2}");
}

/// A row of subnormal logits is a valid, nearly flat distribution: every path samples inside it,
/// and greedy takes its largest value, or on a device that flushes subnormals (WGSL allows it)
/// the lowest index of a row that reads as all zeros.
pub fn subnormal_only_row<B: Backend>(b: &B) {
    let row: Vec<f32> = (0..40).map(|j| f32::from_bits(1 + j * 1000)).collect();
    let top = if common::flushes_subnormals(b) { 0 } else { 39 };
    for (path, token, status, lp) in every_path(b, &row, 0.5) {
        assert_eq!(status, 1, "{path}");
        assert!(token < 40 && lp.is_finite(), "{path}: {token} {lp}");
        if path == "greedy" {
            assert_eq!(token, top, "{}", b.describe());
        }
    }
}

/// From probabilities: NaN, negative and infinite values are never chosen; an all-zero row has
/// nothing valid.
pub fn invalid_probabilities<B: Backend>(b: &B) {
    let race = |p: &[f32]| {
        let x = b.upload(p).unwrap();
        let r = b.upload(&[RowParams::new(1.0, 5, 9)]).unwrap();
        let (mut t, mut st) = (b.zeros::<u32>(1).unwrap(), b.zeros::<u32>(1).unwrap());
        b.race_from_probs(Shape::dense(1, p.len()), &x, &r, Output::new(&mut t).with_status(&mut st)).unwrap();
        (b.download(&t).unwrap()[0], b.download(&st).unwrap()[0])
    };
    for offset in 0..20 {
        let mut p = vec![f32::NAN, -0.5, f32::INFINITY, 0.25, 0.0, 0.75];
        p.rotate_left(offset % 6);
        let (token, status) = race(&p);
        assert_eq!(status, 1);
        assert!(p[token as usize] == 0.25 || p[token as usize] == 0.75, "{p:?} -> {token}");
    }
    assert_eq!(race(&[0.0; 9]), (0, 0));
}

every_suite!(
    bad_shapes_and_buffers,
    bad_temperatures,
    bad_filter_params,
    rows_with_nothing_valid,
    scaled_values_below_f32,
    single_positive_infinity,
    several_positive_infinities,
    subnormal_only_row,
    invalid_probabilities
);

/// The request-level rules (host only): SGLang's parameter checks refuse these, naming the field.
#[test]
fn request_parameter_rules() {
    let bad = [
        ("temperature", r#"{"temperature": -1}"#),
        ("top_p", r#"{"top_p": 0}"#),
        ("top_p", r#"{"top_p": 1.5}"#),
        ("top_k", r#"{"top_k": 0}"#),
        ("top_k", r#"{"top_k": -2}"#),
        ("min_p", r#"{"min_p": -0.1}"#),
        ("min_p", r#"{"min_p": 2}"#),
    ];
    for (field, body) in bad {
        let params: SamplingParams = serde_json::from_str(body).unwrap();
        let err = params.normalize().expect_err(body);
        assert_eq!(err.field(), field, "{body}");
    }
    // top_k above any vocabulary is valid: it keeps every token.
    let params: SamplingParams = serde_json::from_str(r#"{"top_k": 1000000000}"#).unwrap();
    assert_eq!(params.normalize().unwrap().top_k(), 1_000_000_000);
}
