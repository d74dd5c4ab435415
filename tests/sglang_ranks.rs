//! SGLang's filtered deterministic sampler (`top_k_top_p_min_p_sampling_from_probs_torch` with a
//! seed), token for token, through `SeededHash::SortedRank` on every backend: the vectors of
//! `tests/data/sglang_filtered.*` (made by `tests/data/make_seeded_golden.py` from SGLang's
//! formulas with numpy and `mmh3`, not from this crate's code), every routing (the one-read
//! path's merge, the filter kernel's ranked race, `sample` and `Sampler::step`), tied and flat
//! sets, and sets longer than the kernels rank in one list.

#[macro_use]
mod common;

use common::Rng;
use sampling_kernels::reference::filters::{clean_probs, kept, kept_from_logits, passes};
use sampling_kernels::reference::race::{seeded_in, seeded_ranked_in};
use sampling_kernels::reference::softmax::{sglang_logprobs, softmax, softmax_f32};
use sampling_kernels::{Backend, FilterOrder, Input, Logits, Output, RowParams, Sampler, SeededHash, Shape};

/// The keys the kernels rank in one list; a longer set is ranked a list at a time.
const LIST: usize = 4096;

/// One vector: its row of the `.npy`, its record, and SGLang's token with rank hashing
/// (`token`) and with the vocabulary id's (`id_token`, this crate's default hashing).
struct Case {
    row: usize,
    from_logits: bool,
    params: RowParams,
    token: u32,
    id_token: u32,
}

struct Vectors {
    vocab: usize,
    values: Vec<f32>,
    cases: Vec<Case>,
}

fn vectors() -> Vectors {
    let dir = common::golden_dir();
    let text = std::fs::read_to_string(dir.join("sglang_filtered.json")).expect("tests/data/sglang_filtered.json");
    let meta: serde_json::Value = serde_json::from_str(&text).unwrap();
    let file = std::fs::read(dir.join(meta["file"].as_str().unwrap())).unwrap();
    let values: Vec<f32> = common::npy(&file, "<f4").map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    let vocab = meta["vocab"].as_u64().unwrap() as usize;
    let cases: Vec<Case> = meta["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let int = |k: &str| c[k].as_u64().unwrap();
            let float = |k: &str| c[k].as_f64().unwrap() as f32;
            let top_k = c["top_k"].as_i64().unwrap();
            let params = RowParams::seeded(float("temperature"), int("seed"), int("position"))
                .with_top_k(if top_k < 0 { u32::MAX } else { top_k as u32 })
                .with_top_p(float("top_p"))
                .with_min_p(float("min_p"))
                .with_seeded_hash(SeededHash::SortedRank);
            Case {
                row: int("row") as usize,
                from_logits: c["input"] == "logits",
                params,
                token: int("token") as u32,
                id_token: int("id_token") as u32,
            }
        })
        .collect();
    assert_eq!(values.len(), cases.len() * vocab, "a row of the .npy per case");
    assert!(cases.len() >= 40, "{} cases", cases.len());
    Vectors { vocab, values, cases }
}

/// Tokens and statuses of `rows` over `values` (logits or probabilities) through the filter
/// kernels' call.
fn filtered<B: Backend>(b: &B, shape: Shape, values: &[f32], rows: &[RowParams], logits: bool) -> (Vec<u32>, Vec<u32>) {
    let (x, r) = (b.upload(values).unwrap(), b.upload(rows).unwrap());
    let (mut t, mut st) = (b.zeros::<u32>(shape.batch).unwrap(), b.zeros::<u32>(shape.batch).unwrap());
    let input = if logits { Input::Logits(Logits::F32(&x)) } else { Input::Probs(&x) };
    b.sample_filtered(shape, input, &r, Output::new(&mut t).with_status(&mut st)).unwrap();
    (b.download(&t).unwrap(), b.download(&st).unwrap())
}

/// Every vector's token, from logits and from probabilities, through `sample_filtered`; the
/// logits also through `sample` and `Sampler::step` (the per-row routing). With the default
/// hashing the same rows give `id_token`, so the hashing choice is what the tokens follow.
pub fn sglang_filtered_tokens<B: Backend>(b: &B) {
    let v = vectors();
    for logits in [true, false] {
        let cases: Vec<&Case> = v.cases.iter().filter(|c| c.from_logits == logits).collect();
        let values: Vec<f32> =
            cases.iter().flat_map(|c| &v.values[c.row * v.vocab..(c.row + 1) * v.vocab]).copied().collect();
        let shape = Shape::dense(cases.len(), v.vocab);
        let rows: Vec<RowParams> = cases.iter().map(|c| c.params).collect();
        let want: Vec<u32> = cases.iter().map(|c| c.token).collect();
        let (tokens, status) = filtered(b, shape, &values, &rows, logits);
        for (i, c) in cases.iter().enumerate() {
            assert_eq!(
                (tokens[i], status[i]),
                (c.token, 1),
                "row {} (logits {logits}): {:?}",
                c.row,
                c.params.filters()
            );
        }
        let by_id: Vec<RowParams> = rows.iter().map(|r| r.with_seeded_hash(SeededHash::VocabId)).collect();
        let ids: Vec<u32> = cases.iter().map(|c| c.id_token).collect();
        assert_eq!(filtered(b, shape, &values, &by_id, logits).0, ids, "vocabulary id hashing, logits {logits}");
        if !logits {
            continue;
        }
        let (x, r) = (b.upload(&values).unwrap(), b.upload(&rows).unwrap());
        let mut t = b.zeros::<u32>(shape.batch).unwrap();
        b.sample(shape, Logits::F32(&x), &r, Output::new(&mut t)).unwrap();
        assert_eq!(b.download(&t).unwrap(), want, "sample");
        let mut sampler = Sampler::new(b, shape.batch).unwrap();
        sampler.step(shape, Logits::F32(&x), &rows, Output::new(&mut t)).unwrap();
        assert_eq!(b.download(&t).unwrap(), want, "Sampler::step");
    }
}

/// Rows the vectors do not cover, against the oracle's plain sort (`seeded_ranked_in`): flat
/// rows whose set is thousands of tied tokens (the winner found by its place among them), logits
/// on a coarse grid (ties everywhere) and Zipf-like rows, each under top-p alone, top-k first
/// past the one-read path's top-k with top-p, a set of exactly [`LIST`] tokens, and top-k with
/// min-p (the one-read path's merge); each row's reads within its filters' bound
/// plus the two the ranked race adds. The oracle scores `ln p` in float64 where the kernels
/// score `z - max` (the same up to the row's constant and an ulp of `p`), so a token may differ
/// only where two ranks' scores lie within 1e-6; on these rows none do (checked below).
pub fn ranked_rows_match_the_oracle<B: Backend>(b: &B) {
    let (vocab, mut rng) = (6000, Rng::new(20261203));
    let flat = vec![1.5f32; vocab];
    let grid: Vec<f32> = (0..vocab).map(|_| (rng.normal(2.0) * 4.0).round() as f32 / 4.0).collect();
    let zipf: Vec<f32> = (0..vocab).map(|j| -((j % 997) as f32).ln_1p() + rng.normal(0.3) as f32).collect();
    let ranked = |t: f32, seed: u64| RowParams::seeded(t, seed, seed ^ 0x5eed).with_seeded_hash(SeededHash::SortedRank);
    let (mut logits, mut rows) = (Vec::new(), Vec::new());
    for (i, values) in [&flat, &grid, &zipf].into_iter().enumerate() {
        let r = |k: u64| ranked(0.7 + 0.1 * k as f32, 1000 + 10 * i as u64 + k);
        let filters = [
            r(0).with_top_p(0.5),
            r(1).with_top_k(300).with_top_p(0.9).with_order(FilterOrder::TopKFirst),
            r(2).with_top_k(LIST as u32),
            r(3).with_top_k(40).with_min_p(0.3),
        ];
        for row in filters {
            logits.extend_from_slice(values);
            rows.push(row);
        }
    }
    assert!(min_gap(&logits, &rows, vocab) > 1e-6, "a near-tie would make the check depend on rounding");
    let shape = Shape::dense(rows.len(), vocab);
    let (x, r) = (b.upload(&logits).unwrap(), b.upload(&rows).unwrap());
    let (mut t, mut st, mut ps) = (
        b.zeros::<u32>(shape.batch).unwrap(),
        b.zeros::<u32>(shape.batch).unwrap(),
        b.zeros::<u32>(shape.batch).unwrap(),
    );
    let out = Output::new(&mut t).with_status(&mut st).with_passes(&mut ps);
    b.sample_filtered(shape, Input::Logits(Logits::F32(&x)), &r, out).unwrap();
    let (t, st, ps) = (b.download(&t).unwrap(), b.download(&st).unwrap(), b.download(&ps).unwrap());
    for (i, row) in rows.iter().enumerate() {
        let xs: Vec<f64> = logits[i * vocab..(i + 1) * vocab].iter().map(|&v| v as f64).collect();
        let keep = kept_from_logits(&xs, row, &row.filters());
        let (probs, p32) = (softmax(&xs, row), softmax_f32(&xs, row));
        let (token, valid, _) = seeded_ranked_in(&probs, &p32, row, |j| keep[j]);
        assert!(valid);
        let what = format!("row {i}, {:?}, {} kept", row.filters(), keep.iter().filter(|&&k| k).count());
        assert_eq!((t[i], st[i]), (token as u32, 1), "{what}");
        let bound = passes(&row.filters(), vocab) + 2;
        assert!(ps[i] <= bound, "{} reads, more than {bound}, {what}", ps[i]);
    }
}

/// The least gap between the best and second-best rank score over `rows` (in float64, the
/// oracle's scores), so [`ranked_rows_match_the_oracle`] states what it can tell apart.
fn min_gap(logits: &[f32], rows: &[RowParams], vocab: usize) -> f64 {
    use sampling_kernels::reference::filters::order;
    use sampling_kernels::reference::murmur;
    let mut least = f64::INFINITY;
    for (i, row) in rows.iter().enumerate() {
        let xs: Vec<f64> = logits[i * vocab..(i + 1) * vocab].iter().map(|&v| v as f64).collect();
        let keep = kept_from_logits(&xs, row, &row.filters());
        let p32 = softmax_f32(&xs, row);
        let mut scores: Vec<f64> = order(&softmax(&xs, row))
            .into_iter()
            .filter(|&j| keep[j])
            .enumerate()
            .map(|(r, j)| (p32[j] as f64).ln() + murmur::gumbel(murmur::hash(row.seed(), row.offset(), r as u32)))
            .collect();
        scores.sort_by(|a, b| b.total_cmp(a));
        if scores.len() > 1 {
            least = least.min(scores[0] - scores[1]);
        }
    }
    least
}

/// Sets longer than the kernels' list of 4096 keys, ranked a chunk at a time, against the
/// oracle's plain sort: a flat row under top-k 4097 (one key of 4097 tokens, ranked without a
/// list), probabilities on three values under top-p (lists of one key each), Zipf-like rows of
/// 30000 under top-p 0.95 and min-p 0.001 at T 1.5 (many chunks of distinct values, their
/// ranges found byte by byte), and a row whose 5000 tied tokens lie between distinct values
/// (lists, a run, lists). Every token is SGLang's, status 1.
pub fn long_sets_are_ranked<B: Backend>(b: &B) {
    // The scores' near-ties, which would make a token depend on rounding, are checked from logits.
    let ranked = |t: f32, seed: u64| RowParams::seeded(t, seed, 7).with_seeded_hash(SeededHash::SortedRank);
    let check = |vocab: usize, values: &[f32], rows: &[RowParams], logits: bool| {
        assert!(!logits || min_gap(values, rows, vocab) > 1e-6, "a near-tie of scores");
        let (tokens, status) = filtered(b, Shape::dense(rows.len(), vocab), values, rows, logits);
        for (i, row) in rows.iter().enumerate() {
            let xs: Vec<f64> = values[i * vocab..(i + 1) * vocab].iter().map(|&v| v as f64).collect();
            let (keep, probs, p32) = if logits {
                (kept_from_logits(&xs, row, &row.filters()), softmax(&xs, row), softmax_f32(&xs, row))
            } else {
                let p = clean_probs(&xs);
                (kept(&p, &row.filters()), p.clone(), values[i * vocab..(i + 1) * vocab].to_vec())
            };
            let n = keep.iter().filter(|&&k| k).count();
            assert!(n > LIST, "row {i}: {n} kept");
            let (want, _, _) = seeded_ranked_in(&probs, &p32, row, |j| keep[j]);
            assert_eq!((tokens[i], status[i]), (want as u32, 1), "row {i} of {n} kept, logits {logits}, {row:?}");
        }
    };
    let vocab = 4596;
    check(vocab, &vec![0.25f32; vocab], &[ranked(1.0, 1).with_top_k(4097)], true);
    let probs: Vec<f32> = (0..vocab).map(|j| 1.0 / vocab as f32 + (j % 3) as f32 * 1e-9).collect();
    check(vocab, &probs, &[ranked(1.0, 2).with_top_p(0.97)], false);
    let (vocab, mut rng) = (30_000, Rng::new(20261207));
    let mut logits = Vec::new();
    for _ in 0..2 {
        logits.extend((0..vocab).map(|j| -((j % 2999) as f32 + 1.0).ln() * 0.6 + rng.normal(0.5) as f32));
    }
    let mut tied: Vec<f32> = (0..vocab).map(|_| rng.normal(1.0) as f32).collect();
    tied[10_000..15_000].fill(0.0);
    logits.extend(tied);
    let rows = [ranked(1.5, 3).with_top_p(0.95), ranked(1.5, 4).with_min_p(0.001), ranked(1.0, 5).with_top_p(0.9)];
    check(vocab, &logits, &rows, true);
}

/// A row that asks for rank hashing but has no filter is SGLang's unfiltered sampler: the noise
/// of the vocabulary id, status 1, through the filter kernels' call too (which takes every row
/// it is given). Rows of 3000 tokens, which the rank race would take whole.
pub fn rows_without_filters_hash_ids<B: Backend>(b: &B) {
    let mut rng = Rng::new(7);
    let shape = Shape::dense(3, 3000);
    let logits: Vec<f32> = (0..shape.elements()).map(|_| rng.normal(2.0) as f32).collect();
    let rows: Vec<RowParams> =
        (0..3).map(|i| RowParams::seeded(0.9, 100 + i, 5).with_seeded_hash(SeededHash::SortedRank)).collect();
    let (tokens, status) = filtered(b, shape, &logits, &rows, true);
    for (i, row) in rows.iter().enumerate() {
        let xs: Vec<f64> = logits[i * 3000..(i + 1) * 3000].iter().map(|&v| v as f64).collect();
        let (want, _, _) = seeded_in(&sglang_logprobs(&xs, row), row, |_| true);
        assert_eq!((tokens[i], status[i]), (want as u32, 1), "row {i}");
    }
}

every_suite!(sglang_filtered_tokens, ranked_rows_match_the_oracle, long_sets_are_ranked, rows_without_filters_hash_ids);

/// The vectors from logits one row at a time through `Sampler::step`, on a backend that splits
/// filtered rows over workgroups where the batch is small (as GPUs do; lavapipe's adapter does
/// not by default): the ranked rows must stay off the split kernels, which cannot rank.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_split_backend_keeps_ranked_rows_whole() {
    let split = crate::common::wgpu().map(|_| sampling_kernels::WgpuBackend::new().unwrap().with_split_filters(true));
    crate::common::on("wgpu", "split_backend_keeps_ranked_rows_whole", split.as_ref(), |b| {
        let v = vectors();
        let shape = Shape::dense(1, v.vocab);
        let mut sampler = Sampler::new(b, 1).unwrap();
        let mut t = b.zeros::<u32>(1).unwrap();
        for c in v.cases.iter().filter(|c| c.from_logits) {
            let x = b.upload(&v.values[c.row * v.vocab..(c.row + 1) * v.vocab]).unwrap();
            sampler.step(shape, Logits::F32(&x), &[c.params], Output::new(&mut t)).unwrap();
            assert_eq!(b.download(&t).unwrap(), [c.token], "row {}: {:?}", c.row, c.params.filters());
        }
    });
}
