//! The filter reference (`sampling_kernels::reference::filters`) against SEMANTICS.md's definitions written
//! token by token (rank and mass ahead counted directly, no sorting or prefixes), the cases the
//! filters issue names, and every device backend's filter kernels against the reference.
//!
//! The kernels compute probabilities in float32 and the reference in float64, so a row whose
//! top-p or min-p boundary lies within 1e-5 (relative) of a token's cumulative mass or
//! probability could fall either way: such rows are counted and not compared, and must stay
//! under 1%. Statistical checks use fixed seeds and thresholds at the 0.999 quantile (a correct
//! sampler fails each with probability 1e-3 over the choice of seeds).

#[macro_use]
mod common;

use common::{chi_square, total_variation, Rng};
use sampling_kernels::reference::filters::{kept, kept_from_logits, passes, ONE_READ_TOP_K};
use sampling_kernels::reference::softmax;
use sampling_kernels::{Backend, FilterPath, Input, Logits, Output, RowMode, RowParams, Sampler, Shape};
use sampling_kernels::{FilterOrder as Order, Filters};

/// SEMANTICS.md per token: rank(j) counts the tokens ahead of j in (p desc, index asc); the mass
/// ahead sums theirs. Top-k keeps rank < k; top-p keeps mass ahead <= top_p (of the top-k set's
/// mass, renormalized, for top-k first; of the mass of the tokens both top-k and min-p keep, for
/// min-p first); min-p keeps p >= min_p * p_max.
fn by_definition(p: &[f64], f: &Filters) -> Vec<bool> {
    let ahead = |i: usize, j: usize| p[i] > p[j] || (p[i] == p[j] && i < j);
    let rank = |j: usize| (0..p.len()).filter(|&i| p[i] > 0.0 && ahead(i, j)).count();
    let k = f.top_k.unwrap_or(usize::MAX);
    let in_top_k = |j: usize| rank(j) < k;
    let p_max = p.iter().cloned().fold(0.0, f64::max);
    let by_min_p = |j: usize| p[j] >= f.min_p * p_max;
    let mass_of = |keep: &dyn Fn(usize) -> bool| (0..p.len()).filter(|&i| p[i] > 0.0 && keep(i)).map(|i| p[i]).sum();
    let reference: f64 = match f.order {
        Order::TopKFirst => mass_of(&in_top_k),
        Order::MinPFirst => mass_of(&|i| in_top_k(i) && by_min_p(i)),
        _ => mass_of(&|_| true),
    };
    (0..p.len())
        .map(|j| {
            let mass_ahead: f64 = (0..p.len()).filter(|&i| p[i] > 0.0 && ahead(i, j)).map(|i| p[i]).sum();
            p[j] > 0.0 && in_top_k(j) && mass_ahead <= f.top_p * reference && by_min_p(j)
        })
        .collect()
}

#[test]
fn matches_the_definition_on_random_rows() {
    let mut rng = Rng::new(31);
    for case in 0..3000 {
        let vocab = 1 + rng.below(40) as usize;
        // Integer logits make ties; some tokens are masked.
        let logits: Vec<f64> =
            (0..vocab).map(|_| if rng.below(6) == 0 { f64::NEG_INFINITY } else { rng.below(8) as f64 * 0.5 }).collect();
        let row = RowParams::new([1.0, 0.5, 2.0][case % 3], 0, 0);
        let filters = Filters {
            top_k: [None, Some(1), Some(1 + rng.below(vocab as u64 + 2) as usize)][case % 3],
            top_p: [1.0, 0.05 + rng.unit() * 0.95][case % 2],
            min_p: [0.0, rng.unit()][(case / 2) % 2],
            order: [Order::Joint, Order::TopKFirst, Order::MinPFirst][(case / 4) % 3],
        };
        let p = sampling_kernels::reference::softmax(&logits, &row);
        assert_eq!(kept(&p, &filters), by_definition(&p, &filters), "{logits:?} {filters:?}");
    }
}

const ALL: Filters = Filters { top_k: None, top_p: 1.0, min_p: 0.0, order: Order::Joint };

#[test]
fn named_cases() {
    let p = [0.4, 0.3, 0.2, 0.1];
    let set = |f: Filters| kept(&p, &f).iter().enumerate().filter(|(_, &k)| k).map(|(j, _)| j).collect::<Vec<_>>();
    // No filter keeps everything; top_k = 1 is greedy; top_p below the largest keeps only it.
    assert_eq!(set(ALL), [0, 1, 2, 3]);
    assert_eq!(set(Filters { top_k: Some(1), ..ALL }), [0]);
    assert_eq!(set(Filters { top_k: Some(9), ..ALL }), [0, 1, 2, 3]);
    assert_eq!(set(Filters { top_p: 0.3, ..ALL }), [0]);
    // Joint and top-k-first differ: 0.4 of the mass lies before token 1, 0.4/0.7 within the top 2.
    let both = Filters { top_k: Some(2), top_p: 0.5, ..ALL };
    assert_eq!(set(both), [0, 1]);
    assert_eq!(set(Filters { order: Order::TopKFirst, ..both }), [0]);
    // min_p = 1 keeps exactly the tokens tied at the maximum; ties at a top-k boundary go to the
    // lower index.
    let flat = kept_from_logits(&[1.0, 3.0, 3.0, 0.0, 3.0], &RowParams::new(1.0, 0, 0), &Filters { min_p: 1.0, ..ALL });
    assert_eq!(flat, [false, true, true, false, true]);
    let ties = kept(&[0.25; 4], &Filters { top_k: Some(2), ..ALL });
    assert_eq!(ties, [true, true, false, false]);
}

/// Relative distance from a boundary under which a row is a near-tie (see the module docs).
const NEAR: f64 = 1e-5;

/// Whether the reference's set for `p` is decided with margin: no top-p or min-p threshold lies
/// within [`NEAR`] of a token's mass ahead or probability.
fn decided(p: &[f64], f: &Filters) -> bool {
    decided_within(p, f, NEAR)
}

/// [`decided`] with the margin `near`.
fn decided_within(p: &[f64], f: &Filters, near: f64) -> bool {
    let mut order: Vec<usize> = (0..p.len()).filter(|&j| p[j] > 0.0).collect();
    order.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
    let Some(&first) = order.first() else { return true };
    let by_k = f.top_k.map_or(order.len(), |k| k.min(order.len()));
    let by_min_p = order.iter().take_while(|&&j| p[j] >= f.min_p * p[first]).count();
    let total: f64 = order.iter().map(|&j| p[j]).sum();
    let reference = match f.order {
        Order::Joint => total,
        Order::TopKFirst => order[..by_k].iter().map(|&j| p[j]).sum(),
        Order::MinPFirst => order[..by_k.min(by_min_p)].iter().map(|&j| p[j]).sum(),
        other => panic!("filter order {other:?} has no reference in this test"),
    };
    let mut ahead = 0.0;
    for &j in &order {
        let near_p = f.top_p < 1.0 && (ahead - f.top_p * reference).abs() <= near * reference;
        // The largest probability passes any min-p exactly (its weight is exp(0) = 1).
        let near_min = f.min_p > 0.0 && p[j] < p[first] && (p[j] - f.min_p * p[first]).abs() <= near * p[first];
        if near_p || near_min {
            return false;
        }
        ahead += p[j];
    }
    true
}

/// One random row of logits of a kind the issue names: model-like, integer-valued (ties), flat,
/// one-hot, or with a block of -inf (and a NaN or two).
fn random_row(rng: &mut Rng, vocab: usize) -> Vec<f32> {
    let kind = rng.below(5);
    let mut x: Vec<f32> = (0..vocab)
        .map(|_| match kind {
            0 => rng.normal(3.0) as f32,
            1 => rng.below(6) as f32,
            2 => 1.5,
            _ => rng.normal(2.0) as f32,
        })
        .collect();
    match kind {
        3 => x[rng.below(vocab as u64) as usize] = 15.0,
        4 if vocab > 2 => {
            let start = rng.below(vocab as u64) as usize;
            let end = (start + 1 + rng.below(vocab as u64 / 2 + 1) as usize).min(vocab);
            x[start..end].fill(f32::NEG_INFINITY);
            x[rng.below(vocab as u64) as usize] = f32::NAN;
        }
        _ => {}
    }
    x
}

/// Random filters: top-k none, 1, in range or beyond; top-p 1, random or below the largest
/// probability; min-p 0, random or 1; any order; the Philox race or the seeded one.
fn random_params(rng: &mut Rng, vocab: usize) -> RowParams {
    let t = [0.5, 0.7, 1.0, 1.5][rng.below(4) as usize];
    // One row in four is SGLang's seeded sampler, which races inside the same sets.
    let mut row = match rng.below(4) {
        0 => RowParams::seeded(t, rng.next_u64(), rng.below(1000)),
        _ => RowParams::new(t, rng.next_u64(), rng.below(1000)),
    };
    row = match rng.below(4) {
        0 => row,
        1 => row.with_top_k(1),
        2 => row.with_top_k(1 + rng.below(vocab as u64) as u32),
        _ => row.with_top_k(vocab as u32 + rng.below(3) as u32),
    };
    row = match rng.below(4) {
        0 => row,
        1 => row.with_top_p(0.007),
        _ => row.with_top_p((0.05 + 0.95 * rng.unit()) as f32),
    };
    row = match rng.below(5) {
        0 | 1 => row,
        2 => row.with_min_p(1.0),
        _ => row.with_min_p((0.3 * rng.unit()) as f32),
    };
    match rng.below(3) {
        0 => row,
        1 => row.with_order(Order::TopKFirst),
        _ => row.with_order(Order::MinPFirst),
    }
}

/// A batch of random rows of one vocabulary and stride: logits (padded), their parameters.
fn random_batch(rng: &mut Rng, shape: Shape) -> (Vec<f32>, Vec<RowParams>) {
    let mut x = vec![0.0f32; shape.elements()];
    let rows: Vec<RowParams> = (0..shape.batch).map(|_| random_params(rng, shape.vocab)).collect();
    for r in 0..shape.batch {
        let row = random_row(rng, shape.vocab);
        x[r * shape.stride..r * shape.stride + shape.vocab].copy_from_slice(&row);
    }
    (x, rows)
}

/// The shapes of the set checks: 10,260 rows from 1 to 151936 tokens, some padded.
fn set_shapes() -> Vec<Shape> {
    let mut shapes: Vec<Shape> =
        [1, 2, 3, 5, 8, 16, 33, 64, 100, 257, 1000].iter().map(|&v| Shape::dense(900, v)).collect();
    shapes.push(Shape { batch: 300, vocab: 4096, stride: 4100 });
    shapes.push(Shape::dense(40, 32768));
    shapes.push(Shape { batch: 20, vocab: 151_936, stride: 152_064 });
    shapes
}

/// Row `r` of `x` as the oracle reads it (NaN as -inf).
fn row_values(x: &[f32], shape: Shape, r: usize) -> Vec<f64> {
    x[r * shape.stride..][..shape.vocab]
        .iter()
        .map(|&v| if v.is_nan() { f64::NEG_INFINITY } else { v as f64 })
        .collect()
}

/// The rows of `x` as probabilities: the reference's softmax at each row's temperature, in f32
/// (the padding between rows 0).
fn as_probabilities(x: &[f32], shape: Shape, rows: &[RowParams]) -> Vec<f32> {
    let mut probs = vec![0.0f32; shape.elements()];
    for (r, row) in rows.iter().enumerate() {
        for (j, p) in softmax(&row_values(x, shape, r), row).into_iter().enumerate() {
            probs[r * shape.stride + j] = p as f32;
        }
    }
    probs
}

/// The oracle's set of row `r`, and whether it is decided with margin.
fn oracle_set(x: &[f32], shape: Shape, r: usize, row: &RowParams) -> (Vec<bool>, bool) {
    let p = softmax(&row_values(x, shape, r), row);
    (kept(&p, &row.filters()), decided(&p, &row.filters()))
}

/// Kept sets from logits (masking) and from probabilities (renormalizing) equal the
/// reference's on every decided row, 10,260 rows of each.
pub fn sets_match_the_oracle<B: Backend>(b: &B) {
    let mut rng = Rng::new(2024);
    let (mut rows_seen, mut near) = (0usize, 0usize);
    for shape in set_shapes() {
        let (x, rows) = random_batch(&mut rng, shape);
        let xb = b.upload(&x).unwrap();
        let rb = b.upload(&rows).unwrap();
        let mut masked = b.zeros::<f32>(shape.elements()).unwrap();
        b.mask_logits(shape, Logits::F32(&xb), &rb, &mut masked).unwrap();
        let masked = b.download(&masked).unwrap();
        let probs = as_probabilities(&x, shape, &rows);
        let pb = b.upload(&probs).unwrap();
        let mut renormed = b.zeros::<f32>(shape.elements()).unwrap();
        b.renorm_probs(shape, &pb, &rb, &mut renormed).unwrap();
        let renormed = b.download(&renormed).unwrap();
        for r in 0..shape.batch {
            rows_seen += 1;
            let (want, sure) = oracle_set(&x, shape, r, &rows[r]);
            let p_row: Vec<f64> = probs[r * shape.stride..][..shape.vocab].iter().map(|&p| p as f64).collect();
            let want_p = kept(&p_row, &rows[r].filters());
            if !sure || !decided(&p_row, &rows[r].filters()) {
                near += 1;
                continue;
            }
            let got: Vec<bool> = (0..shape.vocab).map(|j| masked[r * shape.stride + j] > f32::NEG_INFINITY).collect();
            assert_eq!(got, want, "mask_logits row {r} of {shape:?}, {:?}", rows[r]);
            let got_p: Vec<bool> = (0..shape.vocab).map(|j| renormed[r * shape.stride + j] > 0.0).collect();
            assert_eq!(got_p, want_p, "renorm_probs row {r} of {shape:?}, {:?}", rows[r]);
            let mass: f64 = (0..shape.vocab).filter(|&j| want_p[j]).map(|j| p_row[j]).sum();
            for j in (0..shape.vocab).filter(|&j| want_p[j]) {
                let (g, w) = (renormed[r * shape.stride + j] as f64, p_row[j] / mass);
                assert!((g - w).abs() <= 1e-5 * w + 1e-12, "renormalized {g} vs {w} at row {r} col {j} of {shape:?}");
            }
        }
    }
    eprintln!("{}: {rows_seen} rows, {near} near a boundary and not compared", b.describe());
    assert!(rows_seen >= 10_000 && near * 100 < rows_seen, "{near} of {rows_seen} rows near a boundary");
}

/// Sampled tokens lie in the row's set on every draw, and agree with the reference's race (the
/// Philox race, or the seeded float64 one), but for near-ties of float32 against float64.
pub fn tokens_lie_in_the_set<B: Backend>(b: &B) {
    let mut rng = Rng::new(77);
    let (mut draws, mut same) = (0usize, 0usize);
    // The last shape is a batch a GPU backend splits over workgroups (the staged kernel).
    let shapes = [Shape::dense(600, 7), Shape::dense(400, 100), Shape { batch: 30, vocab: 5000, stride: 5003 }];
    for shape in shapes.into_iter().chain([Shape::dense(2, 151_936)]) {
        let (x, rows) = random_batch(&mut rng, shape);
        let xb = b.upload(&x).unwrap();
        for step in 0..5u64 {
            let rows: Vec<RowParams> = rows.iter().map(|r| r.with_offset(step)).collect();
            let rb = b.upload(&rows).unwrap();
            let mut tokens = b.zeros::<u32>(shape.batch).unwrap();
            let mut status = b.zeros::<u32>(shape.batch).unwrap();
            b.sample_filtered(
                shape,
                Input::Logits(Logits::F32(&xb)),
                &rb,
                Output::new(&mut tokens).with_status(&mut status),
            )
            .unwrap();
            let (tokens, status) = (b.download(&tokens).unwrap(), b.download(&status).unwrap());
            let cpu_tokens = oracle_tokens(shape, &x, &rows);
            for r in 0..shape.batch {
                let (set, _) = oracle_set(&x, shape, r, &rows[r]);
                let any = set.iter().any(|&k| k);
                assert_eq!(status[r] == 1, any, "status of row {r}");
                if any {
                    assert!(set[tokens[r] as usize], "token {} outside the set of row {r} ({:?})", tokens[r], rows[r]);
                }
                draws += 1;
                same += (tokens[r] == cpu_tokens[r]) as usize;
            }
        }
    }
    eprintln!("{}: {draws} draws, all inside their sets; {same} equal to the reference's token", b.describe());
    assert!(same * 100 >= draws * 99, "only {same} of {draws} tokens equal the reference's");
}

/// Chi-square 0.999 quantiles by degrees of freedom (1 to 7).
const CHI2_999: [f64; 8] = [0.0, 10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322];

/// The row every draw test samples, with the parameters of draw `d` (its own seed, the same
/// filters): top-k 8, top-p 0.7 and min-p 0.05 keep a handful of its 16 tokens.
const DRAWN_ROW: [f32; 16] = [2.0, 1.6, 1.5, 1.2, 1.0, 0.7, 0.3, 0.0, -0.5, -1.0, -3.0, -4.0, 0.9, 1.1, -2.0, 0.5];

fn drawn_params(d: usize, order: Order) -> RowParams {
    RowParams::new(0.9, 1000 + d as u64, 3).with_top_k(8).with_top_p(0.7).with_min_p(0.05).with_order(order)
}

/// `draws` samples of [`DRAWN_ROW`] in `order`, one a row, each with its own seed.
fn draw<B: Backend>(b: &B, draws: usize, order: Order) -> Vec<u32> {
    let x: Vec<f32> = DRAWN_ROW.iter().cycle().take(DRAWN_ROW.len() * draws).cloned().collect();
    let shape = Shape::dense(draws, DRAWN_ROW.len());
    let rows: Vec<RowParams> = (0..draws).map(|d| drawn_params(d, order)).collect();
    let (xb, rb) = (b.upload(&x).unwrap(), b.upload(&rows).unwrap());
    let mut tokens = b.zeros::<u32>(draws).unwrap();
    b.sample_filtered(shape, Input::Logits(Logits::F32(&xb)), &rb, Output::new(&mut tokens)).unwrap();
    b.download(&tokens).unwrap()
}

/// The tokens lie in the set and follow its renormalized probabilities: chi-square under its
/// 0.999 quantile, and total variation under [`common::tv_limit`] (0.01 at 100,000 draws; over three
/// times its expected value, about `0.9 / sqrt(n)` for these five or six cells, and many of its
/// standard deviations above it, so it adds no false alarms to the chi-square's).
fn follow_the_set(label: &str, order: Order, tokens: &[u32]) {
    let values: Vec<f64> = DRAWN_ROW.iter().map(|&v| v as f64).collect();
    let p = softmax(&values, &drawn_params(0, order));
    let set = kept(&p, &drawn_params(0, order).filters());
    let cells: Vec<usize> = (0..DRAWN_ROW.len()).filter(|&j| set[j]).collect();
    let mass: f64 = cells.iter().map(|&j| p[j]).sum();
    let mut counts = vec![0u64; cells.len()];
    for &t in tokens {
        let cell = cells.iter().position(|&j| j == t as usize).unwrap_or_else(|| panic!("token {t} outside the set"));
        counts[cell] += 1;
    }
    let probs: Vec<f64> = cells.iter().map(|&j| p[j] / mass).collect();
    let (chi2, tv) = (chi_square(&counts, &probs), total_variation(&counts, &probs));
    let (limit, tv_limit) = (CHI2_999[cells.len() - 1], common::tv_limit(tokens.len()));
    eprintln!(
        "{label}: {order:?}: {} draws, {} tokens kept, chi2 {chi2:.2} (limit {limit}), TV {tv:.4} (limit {tv_limit:.4})",
        tokens.len(),
        cells.len()
    );
    assert!(chi2 < limit && tv < tv_limit, "{order:?}: chi2 {chi2} TV {tv}");
}

/// Draws inside the set follow the renormalized probabilities, joint and top-k first: 100,000
/// on the CPU backend. A device draws 2,000 of each order, checked against the set too, and they
/// are the CPU backend's token for token (the same Philox noise over the same set), so they
/// follow the set as the CPU's do. (A lavapipe workgroup of the filter kernels costs
/// milliseconds, so a device's own 100,000 took a quarter of an hour on two cores.)
pub fn draws_follow_the_set<B: Backend + 'static>(b: &B) {
    let draws = if common::is_reference::<B>() { 100_000 } else { 2_000 };
    for order in [Order::Joint, Order::TopKFirst] {
        let tokens = draw(b, draws, order);
        follow_the_set(&b.describe(), order, &tokens);
        if !common::is_reference::<B>() {
            let cpu = draw(&sampling_kernels::CpuBackend, draws, order);
            let differ = tokens.iter().zip(&cpu).position(|(t, c)| t != c);
            assert_eq!(differ, None, "{order:?}: draw {differ:?} differs from the CPU backend's");
        }
    }
}

/// Constructed rows where the orders differ, p = (0.4, 0.3, 0.2, 0.1), worked by hand:
/// - top-k 2, top-p 0.5: joint keeps tokens 0 and 1 (0.4 ahead of token 1 is within 0.5 of the
///   whole); top-k first keeps token 0 only (0.4 of the top-2 mass 0.7 is 0.57, beyond 0.5);
/// - top-k 3, top-p 0.5, min-p 0.6 (which keeps 0 and 1): top-k first keeps 0 and 1 (0.4 of
///   the top-3 mass 0.9 is 0.44); min-p first keeps token 0 only, as vLLM v1 does (its min-p
///   processor drops tokens 2 and 3, top-k 3 drops nothing more, and top-p on the renormalized
///   (4/7, 3/7) drops token 1, whose ascending cumulative sum 3/7 is within 1 - 0.5).
pub fn each_order_keeps_its_own_set<B: Backend>(b: &B) {
    let logits: Vec<f32> = [0.4f32, 0.3, 0.2, 0.1].iter().map(|p| p.ln()).collect();
    let shape = Shape::dense(4, 4);
    let x = b.upload(&logits.repeat(4)).unwrap();
    let row = RowParams::new(1.0, 0, 0).with_top_k(2).with_top_p(0.5);
    let with_min_p = RowParams::new(1.0, 0, 0).with_top_k(3).with_top_p(0.5).with_min_p(0.6);
    let rows = [
        row,
        row.with_order(Order::TopKFirst),
        with_min_p.with_order(Order::TopKFirst),
        with_min_p.with_order(Order::MinPFirst),
    ];
    let rows = b.upload(&rows).unwrap();
    let mut masked = b.zeros::<f32>(16).unwrap();
    b.mask_logits(shape, Logits::F32(&x), &rows, &mut masked).unwrap();
    let kept: Vec<bool> = b.download(&masked).unwrap().iter().map(|&v| v > f32::NEG_INFINITY).collect();
    assert_eq!(kept[..4], [true, true, false, false], "joint");
    assert_eq!(kept[4..8], [true, false, false, false], "top-k first");
    assert_eq!(kept[8..12], [true, true, false, false], "top-k first, with min-p");
    assert_eq!(kept[12..], [true, false, false, false], "min-p first");
}

/// The kernels count their reads of each row: a flat row (every token tied, so the select's
/// bucket never shrinks into the workgroup list) takes the parameters' number, and a peaked row
/// of the same size fewer wherever top-k or top-p runs a select (its bucket fits the list after
/// a pass or two). A backend that splits these rows over workgroups reads the parameters' number
/// plus one for both.
pub fn peaked_rows_take_fewer_passes<B: Backend>(b: &B) {
    let vocab = 151_936;
    let flat = vec![0.25f32; vocab];
    let peaked: Vec<f32> = (0..vocab).map(|j| if j == 4321 { 30.0 } else { -((j % 977) as f32) / 50.0 }).collect();
    let shape = Shape::dense(2, vocab);
    let x = b.upload(&[flat, peaked].concat()).unwrap();
    let base = RowParams::new(1.0, 5, 6);
    for row in [
        base.with_min_p(0.1),
        base.with_top_k(50),
        base.with_top_p(0.9),
        base.with_top_k(1000).with_top_p(0.5).with_min_p(0.01),
        base.with_top_k(1000).with_top_p(0.5).with_order(Order::TopKFirst),
    ] {
        let rows = b.upload(&[row, row]).unwrap();
        let mut tokens = b.zeros::<u32>(2).unwrap();
        let mut count = b.zeros::<u32>(2).unwrap();
        b.sample_filtered(
            shape,
            Input::Logits(Logits::F32(&x)),
            &rows,
            Output::new(&mut tokens).with_passes(&mut count),
        )
        .unwrap();
        let count = b.download(&count).unwrap();
        let whole = passes(&row.filters(), vocab);
        if row.takes_one_read(vocab) {
            // The one-read path: the flat row's candidates (all tied) are the first tokens of
            // the order, which decide a top-k of at most the cap in the one read, and no longer
            // set; the top-p cut ranks a range of tied tokens by column in its two, and takes
            // seeded min-p alone, whose set (every token) outgrows the parts' lists, with no range;
            // the peaked one (which repeats every 977 columns) reads less than the fallback
            // either way. An unseeded min-p row's parts race the flat row in its one read.
            let fits = row.filters().top_k.is_some_and(|k| k <= ONE_READ_TOP_K);
            let most = path_reads(&row, vocab) + whole;
            let flat = if fits || parts_race(&row, vocab) {
                1
            } else if row.may_take_cut(vocab) {
                2
            } else {
                most
            };
            let ok = count[0] == flat && count[1] < most;
            assert!(ok, "one-read path, {:?}: {count:?} passes, not {flat} and fewer than {most}", row.filters());
            continue;
        }
        // From logits the other rows take the filter kernel's body in the merge launch, one
        // workgroup a row (never the split kernels), so the count is the whole row's.
        let fewer = if whole > 2 { count[1] < whole } else { count[1] == whole };
        assert!(
            count[0] == whole && fewer,
            "flat and peaked rows with {:?}: {count:?} passes, not {whole} and fewer",
            row.filters()
        );
    }
}

/// With no filter the kernel gives the plain race's token, and with top-k 1 greedy's, on every
/// row (the same noise, the same race); seeded rows give the seeded race's.
pub fn no_filter_is_the_plain_race<B: Backend>(b: &B) {
    let mut rng = Rng::new(5);
    let shape = Shape { batch: 300, vocab: 1000, stride: 1024 };
    let (x, _) = random_batch(&mut rng, shape);
    let xb = b.upload(&x).unwrap();
    let plain: Vec<RowParams> = (0..shape.batch).map(|r| RowParams::new(0.8, r as u64, 2)).collect();
    let run = |rows: &[RowParams], filtered: bool| {
        let rb = b.upload(rows).unwrap();
        let mut t = b.zeros::<u32>(shape.batch).unwrap();
        let mut lp = b.zeros::<f32>(shape.batch).unwrap();
        let out = Output::new(&mut t).with_logprobs(&mut lp);
        if filtered {
            b.sample_filtered(shape, Input::Logits(Logits::F32(&xb)), &rb, out).unwrap();
        } else {
            b.race_from_logits(shape, Logits::F32(&xb), &rb, out).unwrap();
        }
        (b.download(&t).unwrap(), b.download(&lp).unwrap())
    };
    let (want, want_lp) = run(&plain, false);
    let (got, got_lp) = run(&plain, true);
    assert_eq!(got, want, "no filter");
    for r in 0..shape.batch {
        let (g, w) = (got_lp[r], want_lp[r]);
        assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0) || g == w, "log-probability {g} vs {w} in row {r}");
    }
    // Seeded rows without a filter: the seeded race from logits, but for float32 near-ties of
    // the log-probabilities (this kernel uses z - max; that one SGLang's log of the softmax).
    let seeded: Vec<RowParams> = (0..shape.batch).map(|r| RowParams::seeded(0.8, r as u64, 2)).collect();
    let rb = b.upload(&seeded).unwrap();
    let mut t = b.zeros::<u32>(shape.batch).unwrap();
    b.seeded_from_logits(shape, Logits::F32(&xb), &rb, Output::new(&mut t)).unwrap();
    let want = b.download(&t).unwrap();
    b.sample_filtered(shape, Input::Logits(Logits::F32(&xb)), &rb, Output::new(&mut t)).unwrap();
    let same = b.download(&t).unwrap().iter().zip(&want).filter(|(g, w)| g == w).count();
    assert!(same * 100 >= shape.batch * 99, "seeded without a filter: {same} of {} tokens agree", shape.batch);
    let top1: Vec<RowParams> = plain.iter().map(|r| r.with_top_k(1)).collect();
    let greedy: Vec<RowParams> = plain.iter().map(|_| RowParams::greedy()).collect();
    assert_eq!(run(&top1, true).0, run(&greedy, false).0, "top-k 1");
}

/// A backend that splits filtered rows over workgroups samples exactly as one that does not:
/// the same token, status, log-probability and passes on every row. From logits both now take
/// the one-read path's two launches (the staged kernel runs only from probabilities), so this
/// checks that the split setting changes nothing; the passes are at most the parameters' (plus
/// the one read for the one-read path's rows). Small batches of long rows (2 to 16 parts on lavapipe), the
/// random rows and filters of the set checks (ties, -inf blocks, NaN, seeded rows, both orders).
pub fn split_rows_match_whole_rows<B: Backend>(split: &B, whole: &B) {
    let mut rng = Rng::new(4242);
    let mut rows_seen = 0;
    for shape in [1, 2, 3, 8].map(|n| Shape::dense(n, 151_936)).into_iter().chain([Shape::dense(4, 5000)]) {
        let (x, rows) = random_batch(&mut rng, shape);
        let (s, w) = (sample_all(split, shape, &x, &rows), sample_all(whole, shape, &x, &rows));
        for r in 0..shape.batch {
            let what = format!("row {r} of {shape:?}, {:?}", rows[r]);
            assert_eq!((s.0[r], s.2[r]), (w.0[r], w.2[r]), "token and status, {what}");
            assert_eq!(s.1[r].to_bits(), w.1[r].to_bits(), "log-probability {} vs {}, {what}", s.1[r], w.1[r]);
            let f = rows[r].filters();
            // From logits both backends take the one-read path's launches (whose merge runs the
            // one-workgroup filter kernel's body on the rows it does not decide): one read, or
            // one more than the bound for its rows, at most the bound for the others.
            assert_eq!(s.3[r], w.3[r], "passes, {what}");
            let bound = passes(&f, shape.vocab) + path_reads(&rows[r], shape.vocab);
            assert!(s.3[r] <= bound, "{} passes, more than {bound}, {what}", s.3[r]);
            rows_seen += 1;
        }
    }
    eprintln!("{}: {rows_seen} split rows equal to whole rows", split.describe());
}

/// Model-like logits (Zipf's law with exponent 1.1, as the benchmark's): a column of uniform rank
/// `r` in [1, vocab] has the logit `-1.1 ln r`; `rows` rows of `vocab`.
fn zipf_logits(rng: &mut Rng, rows: usize, vocab: usize) -> Vec<f32> {
    (0..rows * vocab).map(|_| (-1.1 * (1.0 + vocab as f64 * rng.unit()).ln()) as f32).collect()
}

/// `sample_filtered` on `b` from the f32 logits `x` with every output: tokens, log-probabilities,
/// statuses and reads per row.
fn sample_all<B: Backend>(
    b: &B,
    shape: Shape,
    x: &[f32],
    rows: &[RowParams],
) -> (Vec<u32>, Vec<f32>, Vec<u32>, Vec<u32>) {
    let (xb, rb) = (b.upload(x).unwrap(), b.upload(rows).unwrap());
    let n = shape.batch;
    let (mut t, mut lp) = (b.zeros::<u32>(n).unwrap(), b.zeros::<f32>(n).unwrap());
    let (mut st, mut ps) = (b.zeros::<u32>(n).unwrap(), b.zeros::<u32>(n).unwrap());
    let out = Output::new(&mut t).with_logprobs(&mut lp).with_status(&mut st).with_passes(&mut ps);
    b.sample_filtered(shape, Input::Logits(Logits::F32(&xb)), &rb, out).unwrap();
    let d = |v: &B::Buffer<u32>| b.download(v).unwrap();
    (d(&t), b.download(&lp).unwrap(), d(&st), d(&ps))
}

/// The CPU oracle's tokens for f32 logits.
fn oracle_tokens(shape: Shape, x: &[f32], rows: &[RowParams]) -> Vec<u32> {
    let mut want = vec![0u32; shape.batch];
    let (x, rows) = (x.to_vec(), rows.to_vec());
    sampling_kernels::CpuBackend
        .sample_filtered(shape, Input::Logits(Logits::F32(&x)), &rows, Output::new(&mut want))
        .unwrap();
    want
}

/// `n` logits of a flat row, the benchmark's: Gumbel noise of 1e-3.
fn flat_logits(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| (-1e-3 * (-rng.unit().max(1e-300).ln()).ln()) as f32).collect()
}

/// The rows' tokens and reads from their probabilities on `b`, and the CPU oracle's tokens.
fn from_probabilities<B: Backend>(
    b: &B,
    shape: Shape,
    probs: &[f32],
    rows: &[RowParams],
) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let mut want = vec![0u32; shape.batch];
    // The CPU backend's buffers are vectors.
    let (cpu_probs, cpu_rows) = (probs.to_vec(), rows.to_vec());
    let cpu_input = Input::Probs(&cpu_probs);
    sampling_kernels::CpuBackend.sample_filtered(shape, cpu_input, &cpu_rows, Output::new(&mut want)).unwrap();
    let (pb, rb) = (b.upload(probs).unwrap(), b.upload(rows).unwrap());
    let (mut t, mut ps) = (b.zeros::<u32>(shape.batch).unwrap(), b.zeros::<u32>(shape.batch).unwrap());
    b.sample_filtered(shape, Input::Probs(&pb), &rb, Output::new(&mut t).with_passes(&mut ps)).unwrap();
    (b.download(&t).unwrap(), b.download(&ps).unwrap(), want)
}

/// The reads of the one-read path's launches before any fallback to the filter kernel's body:
/// two for a row of the top-p cut, one for the path's other rows, none for the rest.
fn path_reads(row: &RowParams, vocab: usize) -> u32 {
    u32::from(row.takes_one_read(vocab)) + u32::from(row.takes_top_p_cut(vocab))
}

/// Whether the parts of a row of min-p alone may race their bands on chip: an unseeded row (the
/// Philox race) that may take the cut but for its top-p or top-k would not; a flat row's parts
/// race every token in its one read.
fn parts_race(row: &RowParams, vocab: usize) -> bool {
    row.may_take_cut(vocab) && !row.takes_top_p_cut(vocab) && row.mode() != RowMode::Seeded
}

/// The one-read path (rows of top-k up to [`ONE_READ_TOP_K`], alone or with top-p and min-p,
/// both orders; rows of top-p or min-p with no such top-k; seeded rows too): on rows of
/// distinct logits (normal) and of tied ones (integers, ties at every boundary) the token is
/// the CPU oracle's and lies in its set. A row of the top-p cut (top-p without a top-k of at
/// most [`ONE_READ_TOP_K`]) of distinct values is read twice; another row is read once
/// wherever its set holds at most [`ONE_READ_TOP_K`] tokens and no top-p or min-p boundary lies
/// within 2e-3 of a token's mass (the path's margin on the row mass is 2^-13, within which it
/// reads once more for the exact mass); the others fall back to the filter kernel after the
/// path's reads (1 or 2, then its passes). Three parts of
/// 4096 columns and a ragged tail, from f32, f16 and bf16 logits, and from the rows'
/// probabilities (the CPU oracle's tokens from the same probabilities; a row of the cut read
/// twice).
pub fn one_read_rows_read_once<B: Backend>(b: &B) {
    let mut rng = Rng::new(1919);
    let vocab = 3 * 4096 + 123;
    let shape = Shape { batch: 48, vocab, stride: vocab + 5 };
    let (mut once, mut fell_back, mut same, mut draws, mut capped_once) = (0, 0, 0, 0, 0);
    let (mut probs_once, mut probs_draws, mut probs_same) = (0, 0, 0);
    for case in 0..2 {
        let mut x = vec![0.0f32; shape.elements()];
        let rows: Vec<RowParams> = (0..shape.batch)
            .map(|r| {
                let base = match r % 8 {
                    7 => RowParams::seeded(0.8, rng.next_u64(), 3),
                    _ => RowParams::new([0.6, 1.0, 1.3][r % 3], rng.next_u64(), 3),
                };
                // No top-k, and 1000 (joint, or alone: the cut; top-k first with top-p: the filter
                // kernel's).
                let k = [1, 5, 20, 50, ONE_READ_TOP_K as u32, u32::MAX, 1000][r % 7];
                let row = base.with_top_k(k).with_order([Order::Joint, Order::TopKFirst][(r / 7) % 2]);
                let row = if r % 4 != 3 { row.with_top_p([0.95, 0.5, 0.8][r % 3]) } else { row };
                if r % 5 == 4 {
                    row.with_min_p(0.05)
                } else {
                    row
                }
            })
            .collect();
        for r in 0..shape.batch {
            for j in 0..vocab {
                // Case 0: distinct values; case 1: integers, tied.
                x[r * shape.stride + j] = if case == 0 { rng.normal(3.0) as f32 } else { rng.below(12) as f32 };
            }
        }
        let want = oracle_tokens(shape, &x, &rows);
        let rb = b.upload(&rows).unwrap();
        let f16 = b.upload(&x.iter().map(|&v| half::f16::from_f32(v)).collect::<Vec<_>>()).unwrap();
        let bf16 = b.upload(&x.iter().map(|&v| half::bf16::from_f32(v)).collect::<Vec<_>>()).unwrap();
        let xb = b.upload(&x).unwrap();
        for (name, logits) in [("f32", Logits::F32(&xb)), ("f16", Logits::F16(&f16)), ("bf16", Logits::Bf16(&bf16))] {
            let mut t = b.zeros::<u32>(shape.batch).unwrap();
            let mut ps = b.zeros::<u32>(shape.batch).unwrap();
            b.sample_filtered(shape, Input::Logits(logits), &rb, Output::new(&mut t).with_passes(&mut ps)).unwrap();
            let (t, ps) = (b.download(&t).unwrap(), b.download(&ps).unwrap());
            for r in 0..shape.batch {
                let what = format!("{name} row {r} case {case}, {:?}", rows[r]);
                let f = rows[r].filters();
                let whole = passes(&f, vocab);
                if !rows[r].takes_one_read(vocab) {
                    assert!(ps[r] <= whole, "{} passes, {what}", ps[r]);
                    continue;
                }
                let least = path_reads(&rows[r], vocab);
                assert!((least..=least + whole).contains(&ps[r]), "{} passes, {what}", ps[r]);
                once += usize::from(ps[r] == least);
                fell_back += usize::from(ps[r] > least);
                if name != "f32" {
                    continue;
                }
                let (set, _) = oracle_set(&x, shape, r, &rows[r]);
                assert!(set[t[r] as usize], "token {} outside the set, {what}", t[r]);
                let short = set.iter().filter(|&&k| k).count() <= ONE_READ_TOP_K;
                let capped = f.top_k.is_none_or(|k| k > ONE_READ_TOP_K);
                capped_once += usize::from(capped && ps[r] == 1);
                draws += 1;
                same += usize::from(t[r] == want[r]);
                let values: Vec<f64> = x[r * shape.stride..][..vocab].iter().map(|&v| v as f64).collect();
                let p = softmax(&values, &rows[r]);
                if rows[r].takes_top_p_cut(vocab) {
                    // Distinct values put a few hundred tokens at most in the cut's range, which
                    // lies where top-p or the top-k of 1000 cuts, whichever comes first.
                    if case == 0 {
                        assert_eq!(ps[r], 2, "a row of the cut, of distinct values, fell back, {what}");
                    }
                } else if short && decided_within(&p, &f, 2e-3) {
                    assert_eq!(ps[r], 1, "a row the candidates decide read more than once, {what}");
                }
            }
        }
        // The same rows as probabilities, which the path reads the same way: the CPU oracle's
        // tokens from them.
        let probs = as_probabilities(&x, shape, &rows);
        let (t, ps, want) = from_probabilities(b, shape, &probs, &rows);
        for r in 0..shape.batch {
            let what = format!("probabilities row {r} case {case}, {:?}", rows[r]);
            let whole = passes(&rows[r].filters(), vocab);
            if !rows[r].takes_one_read(vocab) {
                assert!(ps[r] <= whole, "{} passes, {what}", ps[r]);
                continue;
            }
            let least = path_reads(&rows[r], vocab);
            assert!((least..=least + whole).contains(&ps[r]), "{} passes, {what}", ps[r]);
            // Bins of probabilities follow the order's values exactly, so distinct values
            // never leave the cut's range undecided.
            if case == 0 && rows[r].takes_top_p_cut(vocab) {
                assert_eq!(ps[r], 2, "a row of the cut, of distinct values, fell back, {what}");
            }
            probs_once += usize::from(ps[r] == least);
            probs_draws += 1;
            probs_same += usize::from(t[r] == want[r]);
        }
    }
    eprintln!(
        "{}: from probabilities: {probs_once} of {probs_draws} one-read rows read as few times as the path \
         does, {probs_same} tokens equal the CPU's",
        b.describe()
    );
    assert!(probs_same * 100 >= probs_draws * 99, "only {probs_same} of {probs_draws} tokens equal the CPU's");
    eprintln!(
        "{}: one-read rows: {once} read once ({capped_once} without a top-k of at most {ONE_READ_TOP_K}), \
         {fell_back} fell back; {same} of {draws} tokens equal the CPU's",
        b.describe()
    );
    assert!(same * 100 >= draws * 99, "only {same} of {draws} tokens equal the CPU's");
    assert!(once > 0 && fell_back > 0 && capped_once > 0);
}

/// The parts' select takes one of three ways, by how many keys share the bin (of the distance
/// below the part's largest key, a sixteenth of a power of two) where its `k + 1`-th lies: a
/// bin of one value (a flat part), a bin it lists and ranks (distinct values), and a bin too
/// full to list, whose keys it bins again by their distance within it (a band of thousands of
/// values, or of three tied ones, below one far larger logit). Rows built for each (the test
/// bins each part's keys in plain Rust to check that every way is taken) get the CPU oracle's
/// tokens, top-k alone and with min-p, Philox and seeded.
pub fn each_way_of_the_select_matches_the_oracle<B: Backend>(b: &B) {
    const PART: usize = 4096;
    let mut rng = Rng::new(4242);
    let vocab = 2 * PART;
    let shape = Shape::dense(24, vocab);
    let mut x = vec![0.0f32; shape.elements()];
    for r in 0..shape.batch {
        let row = &mut x[r * vocab..][..vocab];
        match r % 4 {
            0 => row.iter_mut().for_each(|v| *v = 0.5),
            1 => row.iter_mut().for_each(|v| *v = 1.0 + 0.01 * rng.unit() as f32),
            2 => row.iter_mut().for_each(|v| *v = rng.normal(3.0) as f32),
            _ => row.iter_mut().for_each(|v| *v = 1.0 + 0.001 * rng.below(3) as f32),
        }
        if r % 2 == 1 {
            row[(r * 977) % vocab] = 30.0;
        }
    }
    let rows: Vec<RowParams> = (0..shape.batch)
        .map(|r| {
            let base = if r % 5 == 4 { RowParams::seeded(1.0, 7, 3) } else { RowParams::new(1.0, rng.next_u64(), 3) };
            let row = base.with_top_k([1, 20, 256][r % 3]);
            if r % 7 == 6 {
                row.with_min_p(0.5)
            } else {
                row
            }
        })
        .collect();
    // The way each part's select takes, as the kernel bins (`xtask/src/kernels/select.rs`), at
    // temperature 1.
    let key = |v: f32| if v.is_sign_negative() { !v.to_bits() } else { v.to_bits() | 1 << 31 };
    let bin = |d: u32| {
        let e = 31 - (d | 32).leading_zeros();
        if d < 32 {
            d
        } else {
            16 * e - 48 + ((d >> (e - 4)) & 15)
        }
    };
    let mut ways = [0usize; 3];
    for r in 0..shape.batch {
        for part in x[r * vocab..][..vocab].chunks(PART) {
            let keys: Vec<u32> = part.iter().map(|&v| key(v)).collect();
            let top = *keys.iter().max().unwrap();
            let mut count = vec![0usize; 464];
            keys.iter().for_each(|&k| count[bin(top - k) as usize] += 1);
            let want = (rows[r].filters().top_k.unwrap() + 1).min(PART);
            let (mut above, mut chosen) = (0, 0);
            while above + count[chosen] < want {
                above += count[chosen];
                chosen += 1;
            }
            ways[if chosen < 32 {
                0
            } else if count[chosen] <= 507 {
                1
            } else {
                2
            }] += 1;
        }
    }
    assert!(ways.iter().all(|&w| w > 0), "parts by way (one value, listed, binned again): {ways:?}");
    let want = oracle_tokens(shape, &x, &rows);
    let (t, _, _, _) = sample_all(b, shape, &x, &rows);
    for r in 0..shape.batch {
        assert!(rows[r].takes_one_read(vocab), "row {r} is not on the path");
        assert_eq!(t[r], want[r], "row {r}: the CPU oracle gives {}, {:?}", want[r], rows[r]);
    }
    eprintln!("{}: parts by way of the select (one value, listed, binned again): {ways:?}", b.describe());
}

/// Min-p alone keeping more tokens than the row's 257 largest (Zipf rows of 151936 at T 1.5 and
/// min-p 0.01 to 0.02: 400 to 1,100 tokens, tens a part) is decided from the union of the parts'
/// own 257 largest: one read, the CPU oracle's tokens and log-probabilities, from f32 logits and
/// from the rows' probabilities, Philox and seeded rows. At T 1.5 some parts of a Philox row
/// hold over 2048 keys in their band and race it (`filter_min_p.rs`); where such a part's winner
/// lies outside the set though the part keeps tokens, the merge reads that part again (two
/// reads said, one part of 38 read twice): some rows here do, and get the oracle's token. A
/// flat row (every logit equal, seeded), which min-p keeps whole, cannot be decided by the
/// lists: it takes the cut's second read, with the oracle's token. Before the union, every such
/// row read three times.
pub fn long_min_p_sets_read_once<B: Backend>(b: &B) {
    let mut rng = Rng::new(1500);
    let vocab = 151_936;
    let shape = Shape::dense(9, vocab);
    let mut x = zipf_logits(&mut rng, shape.batch, vocab);
    let flat = shape.batch - 1;
    x[flat * vocab..].iter_mut().for_each(|v| *v = 0.5);
    let rows: Vec<RowParams> = (0..shape.batch)
        .map(|r| {
            let t = 1.5;
            let row = if r % 3 == 2 { RowParams::seeded(t, 13, 3) } else { RowParams::new(t, rng.next_u64(), 3) };
            row.with_min_p([0.01, 0.015, 0.02][r % 3])
        })
        .collect();
    // The same rows as probabilities, which the path reads the same way.
    let probs = as_probabilities(&x, shape, &rows);
    let cpu = sampling_kernels::CpuBackend;
    let rb = b.upload(&rows).unwrap();
    let (xb, pb) = (b.upload(&x).unwrap(), b.upload(&probs).unwrap());
    for (name, input, cpu_input) in [
        ("f32 logits", Input::Logits(Logits::F32(&xb)), Input::Logits(Logits::F32(&x))),
        ("probabilities", Input::Probs(&pb), Input::Probs(&probs)),
    ] {
        let (mut want, mut want_lp) = (vec![0u32; shape.batch], vec![0.0f32; shape.batch]);
        cpu.sample_filtered(shape, cpu_input, &rows, Output::new(&mut want).with_logprobs(&mut want_lp)).unwrap();
        let (mut t, mut lp) = (b.zeros::<u32>(shape.batch).unwrap(), b.zeros::<f32>(shape.batch).unwrap());
        let mut ps = b.zeros::<u32>(shape.batch).unwrap();
        let out = Output::new(&mut t).with_logprobs(&mut lp).with_passes(&mut ps);
        b.sample_filtered(shape, input, &rb, out).unwrap();
        let (t, lp, ps) = (b.download(&t).unwrap(), b.download(&lp).unwrap(), b.download(&ps).unwrap());
        let mut again = 0;
        for r in 0..shape.batch {
            let what = format!("{name} row {r}, {:?}", rows[r]);
            let (set, _) = oracle_set(&x, shape, r, &rows[r]);
            let kept = set.iter().filter(|&&k| k).count();
            if r == flat {
                assert_eq!(kept, vocab, "{what}");
                assert!(ps[r] > 1, "the flat row read once, {what}");
            } else {
                assert!(kept > ONE_READ_TOP_K + 1, "{kept} kept: the row must outgrow the candidates, {what}");
                let most = if parts_race(&rows[r], vocab) { 2 } else { 1 };
                assert!(ps[r] >= 1 && ps[r] <= most, "read {} times, {what}", ps[r]);
                again += usize::from(ps[r] == 2);
            }
            assert_eq!(t[r], want[r], "token {} where the CPU gives {}, {what}", t[r], want[r]);
            let close = (lp[r] - want_lp[r]).abs() <= 1e-4 * want_lp[r].abs().max(1.0);
            assert!(close, "log-probability {} against {}, {what}", lp[r], want_lp[r]);
        }
        assert!(again > 0, "{name}: no row's raced part was read again, so that path went untested");
    }
}

/// Rows whose top-p cut lies among thousands of tokens of distinct values (normal logits of
/// spread 0.9 to 1.2 over ten parts of 4096: 2,500 to 3,200 tokens in the cut's three bins, more
/// than the merge copies into workgroup memory, at most 357 a part) are selected where the parts
/// listed them: read twice, not the filter kernel's passes after the two reads, with the CPU
/// oracle's tokens; top-p alone and joint with a top-k of 2500 (which the counts place), Philox
/// and seeded.
pub fn dense_cut_ranges_read_twice<B: Backend>(b: &B) {
    let mut rng = Rng::new(2026);
    let vocab = 10 * 4096;
    let shape = Shape::dense(8, vocab);
    let mut x = vec![0.0f32; shape.elements()];
    for (r, row) in x.chunks_mut(vocab).enumerate() {
        let spread = [0.9, 1.0, 1.1, 1.2][r % 4];
        row.iter_mut().for_each(|v| *v = rng.normal(spread) as f32);
    }
    let rows: Vec<RowParams> = (0..shape.batch)
        .map(|r| {
            let row = if r % 2 == 0 { RowParams::new(1.0, rng.next_u64(), 7) } else { RowParams::seeded(1.0, 11, 7) };
            let row = row.with_top_p(0.9);
            if r >= 4 {
                row.with_top_k(2500)
            } else {
                row
            }
        })
        .collect();
    let want = oracle_tokens(shape, &x, &rows);
    let (xb, rb) = (b.upload(&x).unwrap(), b.upload(&rows).unwrap());
    let mut t = b.zeros::<u32>(shape.batch).unwrap();
    let mut ps = b.zeros::<u32>(shape.batch).unwrap();
    b.sample_filtered(shape, Input::Logits(Logits::F32(&xb)), &rb, Output::new(&mut t).with_passes(&mut ps)).unwrap();
    let (t, ps) = (b.download(&t).unwrap(), b.download(&ps).unwrap());
    for r in 0..shape.batch {
        assert!(rows[r].takes_top_p_cut(vocab), "row {r} does not take the cut: {:?}", rows[r]);
        assert_eq!(ps[r], 2, "row {r} read {} times, {:?}", ps[r], rows[r]);
        assert_eq!(t[r], want[r], "row {r}: token {} where the CPU gives {}, {:?}", t[r], want[r], rows[r]);
    }
}

/// Joint top-k + top-p rows whose top-p crossing lies near a rank's mass ahead (a rank past the
/// first 60% of the mass), either side. Within the one-read path's margin on its estimated row
/// mass (2^-15 relative, 3.05e-5; 2.1e-5 to 2.5e-5 here, more than the estimate's error bound
/// of 4.7e-6 inside it) the estimate cannot place the cut, and the merge reads the row once more
/// for its exact mass: two reads, not the filter kernel's passes after the first. Outside it
/// (4e-5 to 2e-4, most within the old margin, 2^-13) the estimate decides: one read. Every row gives the CPU oracle's token (its
/// set is decided: the crossing lies at least 1.2e-5 of the row's mass from a token's, beyond
/// the oracle's 1e-5 and float32's rounding), from f32 logits and from the rows' probabilities,
/// Philox and seeded rows.
pub fn joint_cuts_near_the_estimate_read_twice<B: Backend>(b: &B) {
    let mut rng = Rng::new(4099);
    let vocab = 3 * 4096 + 123;
    let shape = Shape::dense(24, vocab);
    let mut x = vec![0.0f32; shape.elements()];
    let mut probs = vec![0.0f32; shape.elements()];
    let mut rows = Vec::new();
    for (r, row) in x.chunks_mut(vocab).enumerate() {
        row.iter_mut().for_each(|v| *v = rng.normal(4.0) as f32);
        let t = [0.6, 0.8, 1.0][r % 3];
        let base = if r % 2 == 0 { RowParams::new(t, rng.next_u64(), 5) } else { RowParams::seeded(t, 99, 5) };
        let base = base.with_top_k(100).with_order(Order::Joint);
        let values: Vec<f64> = row.iter().map(|&v| v as f64).collect();
        let p = softmax(&values, &base);
        let mut order: Vec<usize> = (0..vocab).collect();
        order.sort_by(|&a, &c| p[c].total_cmp(&p[a]).then(a.cmp(&c)));
        let total: f64 = p.iter().sum();
        // A rank past the first 60% of the mass, so that 2.1e-5 of the mass ahead is above the
        // oracle's margin (1e-5 of the row's), and inside the top-k.
        let mass_at = |c: usize| order[..c].iter().map(|&j| p[j]).sum::<f64>() / total;
        let c = (1..95).find(|&c| mass_at(c) >= 0.6).expect("60% of the mass in 95 tokens") + rng.below(5) as usize;
        let ahead = mass_at(c);
        // Rows 0 to 11 within the margin (2^-15 = 3.05e-5) of the estimate, the others outside.
        let near = r < shape.batch / 2;
        let delta = if near { 2.1e-5 + 0.4e-5 * rng.unit() } else { 4e-5 + 1.6e-4 * rng.unit() };
        let delta = delta * if r % 4 < 2 { 1.0 } else { -1.0 };
        let row_params = base.with_top_p((ahead * (1.0 + delta)) as f32);
        assert!(decided(&p, &row_params.filters()), "row {r}: the oracle's set is not decided");
        for (j, &v) in p.iter().enumerate() {
            probs[r * vocab + j] = v as f32;
        }
        rows.push(row_params);
    }
    let cpu = sampling_kernels::CpuBackend;
    let rb = b.upload(&rows).unwrap();
    let (xb, pb) = (b.upload(&x).unwrap(), b.upload(&probs).unwrap());
    for (name, input, cpu_input) in [
        ("f32 logits", Input::Logits(Logits::F32(&xb)), Input::Logits(Logits::F32(&x))),
        ("probabilities", Input::Probs(&pb), Input::Probs(&probs)),
    ] {
        let mut want = vec![0u32; shape.batch];
        cpu.sample_filtered(shape, cpu_input, &rows, Output::new(&mut want)).unwrap();
        let mut t = b.zeros::<u32>(shape.batch).unwrap();
        let mut ps = b.zeros::<u32>(shape.batch).unwrap();
        b.sample_filtered(shape, input, &rb, Output::new(&mut t).with_passes(&mut ps)).unwrap();
        let (t, ps) = (b.download(&t).unwrap(), b.download(&ps).unwrap());
        for r in 0..shape.batch {
            let what = format!("{name} row {r}, {:?}", rows[r]);
            assert!(rows[r].takes_one_read(vocab) && !rows[r].takes_top_p_cut(vocab), "{what}");
            let reads = if r < shape.batch / 2 { 2 } else { 1 };
            assert_eq!(ps[r], reads, "read {} times, {what}", ps[r]);
            assert_eq!(t[r], want[r], "token {} where the CPU gives {}, {what}", t[r], want[r]);
        }
    }
}

/// Model-like rows (Zipf's law with exponent 1.1, as the benchmark's: a column of uniform rank
/// `r` in [1, V] has the logit `-1.1 ln r`; 128 rows of 32768) at T 0.6, 0.8 and 1.0 read as few
/// times as their path does, the filter kernel's passes after it being rare: joint top-k 20 +
/// top-p 0.95 (Qwen3's, SGLang's order) and top-k 50 + top-p 0.9 once, or twice where the
/// estimated row mass cannot place the cut (at most 3 rows in 128); top-k first once; top-p 0.9
/// and 0.95 alone twice, all but at most 2 rows in 128, and 0.99 every row (lavapipe's count: at
/// T 1.0 one row read 9 times where the limit lay within the estimate's error of a bin's edge and
/// the cut listed the neighbouring bin too, more tail tokens than a part lists; the estimate now
/// leaves out such a neighbour). Reads are counted, not timed. Before the merge's exact read and
/// the cut's estimate from the parts' sums, scaled by the row's mass, with one bin where the limit is far from its edges, 55 of 128
/// top-p 0.95 rows at T 0.8 took eight reads, and every top-p 0.99 row at T 1.0 ten; with the
/// estimate's margin at 50 times its error bound, not 3, up to 20 of these at T 1.0 took nine.
pub fn model_like_rows_rarely_fall_back<B: Backend>(b: &B) {
    let mut rng = Rng::new(1101);
    let (batch, vocab) = (128, 32768);
    let shape = Shape::dense(batch, vocab);
    let x = zipf_logits(&mut rng, batch, vocab);
    let xb = b.upload(&x).unwrap();
    // (setting, its rows, the path's reads, whether the merge may read once more, rows allowed
    // past the path's reads, temperatures)
    type Setting = (&'static str, fn(f32, u64) -> RowParams, u32, bool, usize, &'static [f32]);
    const ALL: &[f32] = &[0.6, 0.8, 1.0];
    let settings: [Setting; 6] = [
        (
            "joint top-k 20 + top-p 0.95",
            |t, s| RowParams::new(t, s, 1).with_top_k(20).with_top_p(0.95),
            1,
            true,
            3,
            ALL,
        ),
        ("joint top-k 50 + top-p 0.9", |t, s| RowParams::new(t, s, 1).with_top_k(50).with_top_p(0.9), 1, true, 3, ALL),
        (
            "top-k 50 first + top-p 0.9",
            |t, s| RowParams::new(t, s, 1).with_top_k(50).with_top_p(0.9).with_order(Order::TopKFirst),
            1,
            false,
            0,
            ALL,
        ),
        ("top-p 0.9", |t, s| RowParams::new(t, s, 1).with_top_p(0.9), 2, false, 2, ALL),
        ("top-p 0.95", |t, s| RowParams::new(t, s, 1).with_top_p(0.95), 2, false, 2, ALL),
        ("top-p 0.99", |t, s| RowParams::new(t, s, 1).with_top_p(0.99), 2, false, 0, ALL),
    ];
    for (name, row, reads, joint, allowed, temperatures) in settings {
        for &t in temperatures {
            let rows: Vec<RowParams> = (0..batch).map(|r| row(t, r as u64)).collect();
            let rb = b.upload(&rows).unwrap();
            let mut tokens = b.zeros::<u32>(batch).unwrap();
            let mut ps = b.zeros::<u32>(batch).unwrap();
            let out = Output::new(&mut tokens).with_passes(&mut ps);
            b.sample_filtered(shape, Input::Logits(Logits::F32(&xb)), &rb, out).unwrap();
            let ps = b.download(&ps).unwrap();
            let mut counts = std::collections::BTreeMap::new();
            ps.iter().for_each(|&p| *counts.entry(p).or_insert(0) += 1);
            let what = format!("{name} at T {t}: rows by reads {counts:?}");
            assert!(ps.iter().all(|&p| p >= reads), "fewer reads than the path's, {what}");
            let more = ps.iter().filter(|&&p| p > reads).count();
            assert!(more <= allowed, "{more} rows read more than the path's {reads}, {what}");
            if joint {
                assert!(ps.iter().all(|&p| p <= reads + 1), "a joint row fell back, {what}");
            }
        }
    }
}

/// Flat rows, as the benchmark's (Gumbel noise of 1e-3: at T 0.8 the whole row lies within
/// 0.017 of its maximum, in one or two bins of 1/16 of the top-p histogram's coarse grid), of
/// 151936 columns: top-p 0.9 and 0.95 alone, a top-k of 1000 alone and joint with top-p 0.9, at
/// T 0.6, 0.8 and 1.0, are read twice (the cut, placed on the histogram's fine grid of 2^-15
/// over the top 1/32) and get the CPU oracle's token; min-p 0.05 alone, which keeps every token,
/// is read once (each part races its band, which holds the whole part, `filter_min_p.rs`).
/// Without the fine grid the top-p rows and the joint ones fell back to the filter kernel's body
/// after the two reads (the range held the whole row, more than the parts list); min-p rows,
/// after their one read (three reads in all), then with the cut, twice. The same from the rows'
/// probabilities.
pub fn flat_rows_take_the_cut_in_two_reads<B: Backend>(b: &B) {
    let mut rng = Rng::new(1003);
    let vocab = 151936;
    type Setting = fn(f32, u64) -> RowParams;
    let settings: [Setting; 5] = [
        |t, s| RowParams::new(t, s, 3).with_min_p(0.05),
        |t, s| RowParams::new(t, s, 3).with_top_p(0.9),
        |t, s| RowParams::new(t, s, 3).with_top_p(0.95),
        |t, s| RowParams::new(t, s, 3).with_top_k(1000),
        |t, s| RowParams::new(t, s, 3).with_top_k(1000).with_top_p(0.9),
    ];
    let rows: Vec<RowParams> = [0.6, 0.8, 1.0]
        .iter()
        .flat_map(|&t| settings.iter().map(move |row| (t, row)))
        .enumerate()
        .map(|(r, (t, row))| row(t, r as u64))
        .collect();
    let shape = Shape::dense(rows.len(), vocab);
    let x = flat_logits(&mut rng, shape.elements());
    let (tokens, _, _, reads) = sample_all(b, shape, &x, &rows);
    let want = oracle_tokens(shape, &x, &rows);
    for (r, row) in rows.iter().enumerate() {
        assert!(row.may_take_cut(vocab), "row {r} ({row:?}) does not take the cut");
        assert_eq!(tokens[r], want[r], "row {r} ({row:?}): the CPU oracle gives {}", want[r]);
        let path = if parts_race(row, vocab) { 1 } else { 2 };
        assert_eq!(reads[r], path, "row {r} ({row:?}) read {} times, not the path's {path}", reads[r]);
    }
    // The same rows as probabilities, binned on `p`'s bits: the fine grid is 2^-14 of an octave.
    let probs = as_probabilities(&x, shape, &rows);
    let (t, ps, want) = from_probabilities(b, shape, &probs, &rows);
    for (r, row) in rows.iter().enumerate() {
        assert_eq!(t[r], want[r], "probabilities row {r} ({row:?}): the CPU oracle gives {}", want[r]);
        let path = if parts_race(row, vocab) { 1 } else { 2 };
        assert_eq!(ps[r], path, "probabilities row {r} ({row:?}) read {} times, not the path's {path}", ps[r]);
    }
}

/// The top-p cut races a flat row's columns behind a bound a column, from its Philox word, and
/// a floor its workgroup shares (`filter_top_p.rs`, `cut_part`): a column goes unscored only
/// where its score is certainly below one already raced, so every token is the CPU oracle's,
/// which scores every column. 192 flat rows of 16384 columns (four parts), top-p 0.9 and min-p
/// 0.05 at T 0.6 to 1.0, from logits and from their probabilities. It can fail: with the
/// logits' bound 0.5 short, and the probabilities' test ruling out scores up to 1.67 times the
/// best (`p 0.6 < best t`), 3 of the 192 rows from each input got another token.
pub fn flat_races_match_the_oracle<B: Backend>(b: &B) {
    let mut rng = Rng::new(1005);
    let vocab = 16384;
    let rows: Vec<RowParams> = (0..192u64)
        .map(|r| {
            let t = [0.6, 0.8, 1.0][r as usize % 3];
            let row = RowParams::new(t, 7 + r, r);
            if r % 2 == 0 {
                row.with_top_p(0.9)
            } else {
                row.with_min_p(0.05)
            }
        })
        .collect();
    let shape = Shape::dense(rows.len(), vocab);
    let x = flat_logits(&mut rng, shape.elements());
    let (tokens, _, _, _) = sample_all(b, shape, &x, &rows);
    let want = oracle_tokens(shape, &x, &rows);
    let (t, _, want_p) = from_probabilities(b, shape, &as_probabilities(&x, shape, &rows), &rows);
    let differ = |got: &[u32], want: &[u32]| (0..rows.len()).filter(|&r| got[r] != want[r]).collect::<Vec<_>>();
    for row in &rows {
        assert!(row.may_take_cut(vocab), "{row:?} does not take the cut");
    }
    let (logits, probabilities) = (differ(&tokens, &want), differ(&t, &want_p));
    assert!(
        logits.is_empty() && probabilities.is_empty(),
        "rows whose token is not the CPU oracle's: from logits {logits:?}, from probabilities {probabilities:?}"
    );
}

/// The cut's race screens a raced column's score with two fast logs and scores exactly only
/// each invocation's best candidate, or every column of an invocation with two candidates or
/// with a score the screen cannot bound (`filter_top_p.rs`, `cut_part`; `values::screen`). Flat
/// probabilities scaled far down (each `p / E` under 2^-100) and far up (over 2^100 where the
/// noise is small) take that rescan on every invocation, and the floor from the words' bits
/// claims none there (`values::score_floor`); scaled by one they take the screen. Every token
/// is the CPU oracle's, which scores every column: 48 rows of 16384 columns, top-p 0.9, top-p
/// 0.5 with min-p 0.05, at T 0.6 to 1.0. It can fail: with the rescan skipped, 20 of the 32
/// scaled rows got another token, and with a rescan of other columns than the invocation's own
/// (a stride of the workgroup, not its quads), 4 of the rows scaled up did.
pub fn cut_screens_match_the_oracle<B: Backend>(b: &B) {
    let mut rng = Rng::new(1207);
    let vocab = 16384;
    let rows: Vec<RowParams> = (0..48u64)
        .map(|r| {
            let row = RowParams::new([0.6, 0.8, 1.0][r as usize % 3], 11 + r, r);
            if r % 2 == 0 {
                row.with_top_p(0.9)
            } else {
                row.with_top_p(0.5).with_min_p(0.05)
            }
        })
        .collect();
    let shape = Shape::dense(rows.len(), vocab);
    let mut probs = as_probabilities(&flat_logits(&mut rng, shape.elements()), shape, &rows);
    for (r, row) in probs.chunks_mut(vocab).enumerate() {
        let scale = [1e-33f32, 1.0, 1e33][(r / 2) % 3];
        row.iter_mut().for_each(|p| *p *= scale);
    }
    let (t, _, want) = from_probabilities(b, shape, &probs, &rows);
    let differ: Vec<usize> = (0..rows.len()).filter(|&r| t[r] != want[r]).collect();
    assert!(differ.is_empty(), "rows whose token is not the CPU oracle's: {differ:?}");
}

/// From logits the top-p histograms bin a value by `floor(z 2^15)` as an i32, which saturates,
/// so a row whose largest `z` does not lie within 2^15 of 0 takes the filter kernel's body
/// (`filter_top_p.rs`, `estimate_cut`). Zipf rows moved by -1e5, 6e4 and 1e5 (beyond), by
/// -3e4 and 3e4 (inside, the indices near 2^30) and by none, under top-p 0.9, a top-k of 1000
/// (which the cut's counts place) and top-p 0.5 with min-p 0.05: every token is the CPU
/// oracle's, and a row inside takes the cut's two reads. It can fail: with the coarse index
/// the fine one shifted by 10, not 11 (another grid than the cut's), 8 of the 12 rows inside
/// read more (the merge's checks sent them to the filter kernel). With every row placed, the
/// rows beyond read once more and still get the oracle's tokens: the merge refuses their
/// saturated estimates, but only the rule makes that certain.
pub fn far_logits_match_the_oracle<B: Backend>(b: &B) {
    let mut rng = Rng::new(4243);
    let vocab = 16384;
    let moves = [-1e5f32, -3e4, 0.0, 3e4, 6e4, 1e5];
    let rows: Vec<RowParams> = (0..18u64)
        .map(|r| {
            let row = RowParams::new([0.8, 1.0][r as usize % 2], 5 + r, r);
            match r / 6 {
                0 => row.with_top_p(0.9),
                1 => row.with_top_k(1000),
                _ => row.with_top_p(0.5).with_min_p(0.05),
            }
        })
        .collect();
    let shape = Shape::dense(rows.len(), vocab);
    let mut x = zipf_logits(&mut rng, rows.len(), vocab);
    for (r, row) in x.chunks_mut(vocab).enumerate() {
        row.iter_mut().for_each(|l| *l += moves[r % moves.len()]);
    }
    let (tokens, _, _, reads) = sample_all(b, shape, &x, &rows);
    let want = oracle_tokens(shape, &x, &rows);
    let differ: Vec<usize> = (0..rows.len()).filter(|&r| tokens[r] != want[r]).collect();
    assert!(differ.is_empty(), "rows whose token is not the CPU oracle's: {differ:?}");
    // Within 2^15 the steps of f32 are at most 2^-8, a few ties in each bin: the cut decides.
    let inside = |r: usize| moves[r % moves.len()].abs() < 32768.0;
    let more: Vec<usize> = (0..rows.len()).filter(|&r| inside(r) && reads[r] != path_reads(&rows[r], vocab)).collect();
    assert!(more.is_empty(), "rows inside 2^15 read more than the cut's two reads: {more:?} ({reads:?})");
}

/// Rows of tied values, two thirds at the largest, whose largest `z` lies 1200 from 0 (a logit
/// of 1.2 at T 0.001, or of 1200): top-p 0.3 keeps the first 30% of the largest's ties, a cut
/// inside a fine bin. There the fine grid's thresholds in f32 (`z 2^15` less a bin) rounded to
/// even numbers, and the cut kept a bin too many: on lavapipe token 1692 where the CPU gives 374
/// (the step fuzz target's finding, at T 0.001). The fine grid is placed only within 256 of 0
/// now, and every row gets the oracle's token, placed near 0 or not.
pub fn tied_rows_far_from_zero_match_the_oracle<B: Backend>(b: &B) {
    let mut rng = Rng::new(1200);
    let vocab = 8000;
    let rows: Vec<RowParams> = (0..6u64).map(|r| RowParams::new(1.0, 0x4a00 + r, r).with_top_p(0.3)).collect();
    let shape = Shape::dense(rows.len(), vocab);
    let x: Vec<f32> = (0..rows.len())
        .flat_map(|r| {
            let (low, high) =
                [(0.0, 1200.0), (1000.0, 1200.0), (-1200.0, 0.0), (0.0, 2.0), (0.0, 200.0), (-600.0, -400.0)][r];
            (0..vocab).map(|_| if rng.below(3) == 0 { low } else { high }).collect::<Vec<f32>>()
        })
        .collect();
    let (tokens, _, _, _) = sample_all(b, shape, &x, &rows);
    let want = oracle_tokens(shape, &x, &rows);
    assert_eq!(tokens, want, "tokens against the CPU oracle's");
}

/// +0 and -0 are one value: the kernels key them alike, as the oracle ranks them (tied, the
/// lower index first), whichever sign the row's maximum comes out with. Rows of the two zeros
/// either way round, under top-k 1 (the one-read path) and top-p 0.5 with top-k 1000 (the
/// filter kernel's passes), from f32 logits at T 2. With -0 keyed below +0, a part whose
/// largest came out as -0 left its +0 out: on lavapipe the row of [+0, -0] gave no token (the
/// step fuzz target's finding, from f16).
pub fn signed_zeros_are_one_value<B: Backend>(b: &B) {
    let pairs = [[0.0f32, -0.0], [-0.0, 0.0]];
    let rows: Vec<RowParams> = (0..4u64)
        .map(|r| {
            let row = RowParams::new(2.0, 0x2e40 + r, r);
            if r < 2 {
                row.with_top_k(1)
            } else {
                row.with_top_k(1000).with_top_p(0.5)
            }
        })
        .collect();
    let x: Vec<f32> = (0..rows.len()).flat_map(|r| pairs[r % 2]).collect();
    let shape = Shape::dense(rows.len(), 2);
    let (tokens, _, status, _) = sample_all(b, shape, &x, &rows);
    assert_eq!(tokens, oracle_tokens(shape, &x, &rows), "tokens against the CPU oracle's");
    assert_eq!(tokens, [0, 0, 0, 0], "the lower index of two tied values");
    assert_eq!(status, [1, 1, 1, 1], "every row samples a token");
}

/// A row samples alike alone and in a batch: the one-read path's merge launch does the top-p
/// cut too where the parts all run at once (a row of 32768 alone: 8 parts), and the cut kernel
/// has its own launch where they do not (13 such rows: 104 parts, more than a wgpu adapter's 64
/// or a T4's 40 SMs; an H200's 132 take both in the merge's), so the two plans must give each
/// row the same token, log-probability, status and reads, and the CPU oracle's token. Zipf rows
/// (as the benchmark's) under top-p alone, joint, top-k first, min-p, a top-k of 1000 (which the
/// cut's counts place), a seeded row, and flat rows (every logit equal: under top-p its cut's
/// range holds one value; min-p keeps every token, which its parts race on chip).
pub fn rows_sample_alike_alone_and_in_a_batch<B: Backend>(b: &B) {
    let mut rng = Rng::new(2024);
    let (batch, vocab) = (13, 32768);
    let shape = Shape::dense(batch, vocab);
    let mut x = zipf_logits(&mut rng, batch, vocab);
    let (flat, flat_min_p) = (10, 12);
    x[flat * vocab..][..vocab].fill(0.5);
    x[flat_min_p * vocab..][..vocab].fill(-0.25);
    let rows: Vec<RowParams> = (0..batch as u64)
        .map(|r| match r {
            0 => RowParams::new(0.8, r, 1).with_top_p(0.9),
            1 => RowParams::new(1.0, r, 1).with_top_p(0.95),
            2 => RowParams::new(1.0, r, 1).with_top_p(0.99),
            3 => RowParams::new(0.6, r, 1).with_top_k(20).with_top_p(0.95),
            4 => RowParams::new(1.0, r, 1).with_top_k(50),
            5 => RowParams::new(1.0, r, 1).with_min_p(0.05),
            6 => RowParams::new(0.8, r, 1).with_top_k(1000),
            7 => RowParams::new(1.0, r, 1).with_top_k(1000).with_top_p(0.9),
            8 => RowParams::seeded(0.8, r, 1).with_top_p(0.9),
            9 => RowParams::new(0.8, r, 1).with_top_k(50).with_top_p(0.9).with_order(Order::TopKFirst),
            10 => RowParams::new(1.0, r, 1).with_top_p(0.9),
            11 => RowParams::new(1.0, r, 1).with_top_k(1000),
            _ => RowParams::new(1.0, r, 1).with_min_p(0.1),
        })
        .collect();
    let together = sample_all(b, shape, &x, &rows);
    let want = oracle_tokens(shape, &x, &rows);
    for r in 0..batch {
        let alone = sample_all(b, Shape::dense(1, vocab), &x[r * vocab..][..vocab], &rows[r..=r]);
        let what = format!("row {r}, {:?}: batch {together:?}, alone {alone:?}", rows[r]);
        assert_eq!((alone.0[0], alone.2[0], alone.3[0]), (together.0[r], together.2[r], together.3[r]), "{what}");
        assert_eq!(alone.1[0].to_bits(), together.1[r].to_bits(), "log-probability, {what}");
        assert_eq!(together.0[r], want[r], "the CPU oracle gives {}, {what}", want[r]);
        if r != flat && rows[r].takes_top_p_cut(vocab) {
            assert_eq!(together.3[r], 2, "a row of the cut read more than twice, {what}");
        }
        if r == flat_min_p {
            assert_eq!(together.3[r], 1, "the flat min-p row's parts did not race it in one read, {what}");
        }
    }
}

/// Rows of one part (3000 columns, under the path's part of 4096), whose parts' launch merges
/// the row in place: min-p alone whose part races its band (flat normal logits at T 1.5, min-p
/// 0.5: most of the row lies in the band, a few tokens below it), read once; top-p 0.9 alone on
/// Zipf logits, whose part's histogram places the cut, read twice; both with the CPU oracle's
/// token, on two offsets each. On wgpu the merge of such a row once ran only in a merge
/// dispatch, which the host issues only for rows split in more than one part: the row's state
/// was never written, so the min-p row gave no token.
pub fn one_part_rows_merge_in_their_launch<B: Backend>(b: &B) {
    let mut rng = Rng::new(3000);
    let vocab = 3000;
    let shape = Shape::dense(4, vocab);
    let mut x: Vec<f32> = (0..2 * vocab).map(|_| rng.normal(0.12) as f32 + 0.06).collect();
    x.extend(zipf_logits(&mut rng, 2, vocab));
    let rows: Vec<RowParams> = (0..shape.batch as u64)
        .map(|r| match r {
            0 | 1 => RowParams::new(1.5, 0x5_7000 + r, 1 + r).with_min_p(0.5),
            _ => RowParams::new(1.0, 0x5_7000 + r, 1 + r).with_top_p(0.9),
        })
        .collect();
    let (t, _, status, ps) = sample_all(b, shape, &x, &rows);
    let want = oracle_tokens(shape, &x, &rows);
    for r in 0..shape.batch {
        let what = format!("row {r}, {:?}", rows[r]);
        assert_eq!((t[r], status[r]), (want[r], 1), "token {} where the CPU gives {}, {what}", t[r], want[r]);
        let reads = if rows[r].takes_top_p_cut(vocab) { 2 } else { 1 };
        assert_eq!(ps[r], reads, "read {} times, {what}", ps[r]);
    }
}

/// Every row forced onto each path gives the CPU oracle's token wherever its set is decided
/// with margin, and the same token on every path on every row, near ties included (the paths
/// share the kept set's order, masses and race). The paths are each row's own choice
/// ([`FilterPath`]), through `Sampler::step` (each list its launches) and `sample_filtered`
/// (every row on the one-read path's list, its merge's fallback taking the rest), so the
/// forced one-read rows include those the path cannot decide, which take the fallback edge.
pub fn every_path_gives_the_same_tokens<B: Backend>(b: &B) {
    let paths = [FilterPath::Auto, FilterPath::OneRead, FilterPath::FilterKernel];
    let (_, compared, near) = forced_paths_agree(b, &paths, |_| {});
    eprintln!("{}: {compared} rows on {} paths, {near} near a boundary", b.describe(), paths.len());
    // Each path is the one that ran, by its reads of a flat row (every token tied): top-p 0.9
    // reads twice on the one-read path (the cut), and the filter kernels' every pass. Min-p
    // first with top-p, which the routing gives the filter kernels, forced onto the one-read
    // path leaves its parts unread and takes the same passes in the merge's fallback.
    let top_p = RowParams::new(1.0, 3, 0).with_top_p(0.9);
    let whole = passes(&top_p.filters(), FLAT_VOCAB);
    assert_eq!(flat_reads(b, top_p), 2);
    assert_eq!(flat_reads(b, top_p.with_filter_path(FilterPath::OneRead)), 2);
    assert_eq!(flat_reads(b, top_p.with_filter_path(FilterPath::FilterKernel)), whole);
    let min_p_first = top_p.with_min_p(0.5).with_order(Order::MinPFirst);
    let whole = passes(&min_p_first.filters(), FLAT_VOCAB);
    assert_eq!(flat_reads(b, min_p_first), whole);
    assert_eq!(flat_reads(b, min_p_first.with_filter_path(FilterPath::OneRead)), whole);
}

/// The columns of [`flat_reads`]' row.
const FLAT_VOCAB: usize = 5000;

/// How many times `Sampler::step` on `b` reads a flat row of [`FLAT_VOCAB`] sampled as `row`.
fn flat_reads<B: Backend>(b: &B, row: RowParams) -> u32 {
    let shape = Shape::dense(1, FLAT_VOCAB);
    let x = b.upload(&vec![0.25f32; FLAT_VOCAB]).unwrap();
    let (mut token, mut count) = (b.zeros::<u32>(1).unwrap(), b.zeros::<u32>(1).unwrap());
    let out = Output::new(&mut token).with_passes(&mut count);
    Sampler::new(b, 1).unwrap().step(shape, Logits::F32(&x), &[row], out).unwrap();
    b.download(&count).unwrap()[0]
}

/// The portable lowering, forced on a device that runs the full kernels: the tokens of the
/// same rows without seeded ones, which it refuses.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_portable_path_gives_the_same_tokens() {
    use sampling_kernels::WgpuBackend;
    let made = crate::common::engine_wgpu(WgpuBackend::device_descriptor)
        .map(|(full, _, _)| (full.with_portable_filters(true), WgpuBackend::new().unwrap()));
    crate::common::on("wgpu", "portable_path_gives_the_same_tokens", made.as_ref().map(|(p, _)| p), |p| {
        let full = &made.as_ref().unwrap().1;
        let philox = |r: &mut RowParams| {
            if r.mode() == RowMode::Seeded {
                let f = r.filters();
                let race = RowParams::new(r.temperature, r.seed(), r.offset())
                    .with_top_k(f.top_k.map_or(u32::MAX, |k| k as u32));
                *r = race.with_top_p(f.top_p as f32).with_min_p(f.min_p as f32).with_order(f.order);
            }
        };
        // The portable kernel is the filter kernels' select: their passes on a flat row.
        let top_p = RowParams::new(1.0, 3, 0).with_top_p(0.9);
        assert_eq!(flat_reads(p, top_p), passes(&top_p.filters(), FLAT_VOCAB));
        let (on_portable, ..) = forced_paths_agree(p, &[FilterPath::Auto], philox);
        let (on_full, ..) = forced_paths_agree(full, &[FilterPath::Auto], philox);
        assert_eq!(on_portable, on_full, "the portable kernel's tokens differ from the full kernels'");
    });
}

/// The tokens of random batches (see [`random_batch`], each row changed by `change`) on each of
/// `paths` on `b`: equal to one another on every row, and to the oracle's on every decided row.
/// Returns the tokens, the rows compared and how many of them were near a boundary.
fn forced_paths_agree<B: Backend>(
    b: &B,
    paths: &[FilterPath],
    change: impl Fn(&mut RowParams),
) -> (Vec<u32>, usize, usize) {
    let mut rng = Rng::new(4040);
    let (mut all, mut compared, mut near) = (vec![], 0, 0);
    let shapes = [Shape::dense(64, 7), Shape::dense(48, 1000), Shape { batch: 24, vocab: 5000, stride: 5003 }];
    for shape in shapes.into_iter().chain([Shape::dense(3, 151_936)]) {
        let (x, mut rows) = random_batch(&mut rng, shape);
        rows.iter_mut().for_each(&change);
        let want = oracle_tokens(shape, &x, &rows);
        let xb = b.upload(&x).unwrap();
        let mut first: Option<Vec<u32>> = None;
        for &path in paths {
            let forced: Vec<RowParams> = rows.iter().map(|r| r.with_filter_path(path)).collect();
            let mut tokens = b.zeros::<u32>(shape.batch).unwrap();
            let mut sampler = Sampler::new(b, shape.batch).unwrap();
            sampler.step(shape, Logits::F32(&xb), &forced, Output::new(&mut tokens)).unwrap();
            let stepped = b.download(&tokens).unwrap();
            let rb = b.upload(&forced).unwrap();
            b.sample_filtered(shape, Input::Logits(Logits::F32(&xb)), &rb, Output::new(&mut tokens)).unwrap();
            let listed = b.download(&tokens).unwrap();
            for r in 0..shape.batch {
                let what = format!("row {r} of {shape:?} on {path:?}: {:?}", rows[r]);
                assert_eq!(stepped[r], listed[r], "step and sample_filtered differ, {what}");
                let first = first.get_or_insert_with(|| stepped.clone());
                assert_eq!(stepped[r], first[r], "{:?} and {path:?} differ, {what}", paths[0]);
                let (_, sure) = oracle_set(&x, shape, r, &rows[r]);
                if sure {
                    assert_eq!(stepped[r], want[r], "the oracle's token differs, {what}");
                }
            }
        }
        all.extend(first.unwrap_or_default());
        for r in 0..shape.batch {
            compared += 1;
            near += !oracle_set(&x, shape, r, &rows[r]).1 as usize;
        }
    }
    (all, compared, near)
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_split_rows_match_whole_rows() {
    // Two backends of their own, as a GPU adapter splits by default and a CPU one does not.
    let made = crate::common::wgpu().map(|_| {
        let make = |split| sampling_kernels::WgpuBackend::new().unwrap().with_split_filters(split);
        (make(true), make(false))
    });
    crate::common::on("wgpu", "split_rows_match_whole_rows", made.as_ref().map(|(s, _)| s), |s| {
        split_rows_match_whole_rows(s, &made.as_ref().unwrap().1)
    });
}

device_suites!(
    sets_match_the_oracle,
    tokens_lie_in_the_set,
    draws_follow_the_set,
    each_order_keeps_its_own_set,
    peaked_rows_take_fewer_passes,
    no_filter_is_the_plain_race,
    one_read_rows_read_once,
    each_way_of_the_select_matches_the_oracle,
    dense_cut_ranges_read_twice,
    joint_cuts_near_the_estimate_read_twice,
    model_like_rows_rarely_fall_back,
    flat_rows_take_the_cut_in_two_reads,
    flat_races_match_the_oracle,
    cut_screens_match_the_oracle,
    far_logits_match_the_oracle,
    long_min_p_sets_read_once,
    one_part_rows_merge_in_their_launch,
    tied_rows_far_from_zero_match_the_oracle,
    signed_zeros_are_one_value,
    rows_sample_alike_alone_and_in_a_batch,
    every_path_gives_the_same_tokens
);
suite!(cpu, crate::common::cpu, each_order_keeps_its_own_set, no_filter_is_the_plain_race, draws_follow_the_set);
