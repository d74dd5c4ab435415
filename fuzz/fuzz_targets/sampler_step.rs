//! The `step` target's body, shared with `tests/fuzz_corpus.rs`: any bytes decode to a batch
//! (shape, element type, values from palettes of hard cases, each row's parameters, invalid ones
//! included) that [`Sampler::step`] samples on the wgpu backend and on the CPU backend, the
//! oracle. Both must accept or refuse alike, and every accepted row must give the oracle's
//! status and token, but for the float32 near-ties [`explained`] names.

use sampling_kernels::backend::cpu::row_values;
use sampling_kernels::reference::filters::{kept, order};
use sampling_kernels::reference::philox::{gumbel, word};
use sampling_kernels::reference::race::{race_scores, seeded_scores};
use sampling_kernels::reference::softmax::{scaled_f32, sglang_logprobs, softmax};
use sampling_kernels::{
    Backend, CpuBackend, Error, FilterOrder, Filters, Logits, Output, RowMode, RowParams, Sampler, SeededHash, Shape,
    WgpuBackend,
};
use std::sync::{Mutex, OnceLock};

/// The largest batch decoded (and both samplers' capacity); a batch one larger is refused.
const MAX_BATCH: usize = 8;

/// Relative distance within which float32 kernels and the float64 oracle may order two
/// quantities differently: a top-p or min-p threshold and a token's mass or probability, or two
/// tokens' race scores (each a float32 sum of a scaled logit and noise, a few ulp, 6e-8 each,
/// from the oracle's: 1e-5 is over a hundred of them).
const NEAR: f64 = 1e-5;

/// The input's bytes, read front to back; zeros once they run out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else { return 0 };
        self.0 = rest;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }
    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |a, _| a << 8 | self.byte() as u64)
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.byte() as usize % from.len()]
    }
}

/// Values no kernel may mishandle: NaN, infinities, subnormals, signed zeros, the extremes.
const SPECIALS: [f32; 12] = [
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    1e-45,
    -1e-40,
    0.0,
    -0.0,
    1.0,
    2.0,
    f32::MAX,
    -f32::MAX,
    f32::MIN_POSITIVE,
];

/// One row of `vocab` values of the kind the bytes pick: model-like (Gumbel), integer-valued
/// (ties), flat, one-hot, far apart (±1e5, one apart), specials, no valid value, or model-like
/// with specials sprinkled. The bulk comes from Philox words keyed by `seed` and the row.
fn row_of_values(bytes: &mut Bytes, seed: u64, r: usize, vocab: usize) -> Vec<f32> {
    let (kind, arg) = (bytes.byte() % 8, bytes.byte());
    let w = |j: usize| word(seed, r as u64, j as u32);
    let mut x: Vec<f32> = (0..vocab)
        .map(|j| match kind {
            0 | 3 | 7 => gumbel(w(j)) as f32 * [0.1, 1.0, 3.0, 10.0, 1e-3][arg as usize % 5],
            1 => (w(j) % (2 + arg as u32 % 6)) as f32,
            2 => [0.0, 1.5, -3.0, 1e5, -1e5, 1e-40, 88.0][arg as usize % 7],
            4 => [1e5, -1e5, 0.0, 1e5 - 1.0][w(j) as usize % 4],
            5 => SPECIALS[w(j) as usize % SPECIALS.len()],
            6 => [f32::NEG_INFINITY, f32::NAN][w(j) as usize % 2],
            _ => unreachable!("kind is below 8"),
        })
        .collect();
    match kind {
        3 => x[arg as usize % vocab] = [15.0, 1e5, f32::INFINITY, 88.7][w(vocab) as usize % 4],
        7 => {
            for (j, v) in x.iter_mut().enumerate().filter(|(j, _)| w(*j) % 16 == 0) {
                *v = SPECIALS[(w(j) >> 4) as usize % SPECIALS.len()];
            }
        }
        _ => {}
    }
    x
}

/// One row's parameters: greedy, the Philox race, seeded, seeded hashing ranks; a temperature
/// from a palette (0, below and at SGLang's epsilon, small to large, one that overflows a
/// logit); any of top-k, top-p, min-p from palettes of boundaries (1, the vocabulary, the
/// one-read path's and the rank cap's edges), any order; one row in 32 an invalid value.
fn row_params(bytes: &mut Bytes, vocab: usize) -> RowParams {
    let (mode, which) = (bytes.byte() % 4, bytes.byte());
    let t = bytes.pick(&[0.0, 1e-7, 1e-6, 1e-3, 0.5, 0.7, 1.0, 1.5, 2.0, 100.0, 1e-30]);
    let (seed, offset) = (bytes.u16() as u64 * 0x9E37_79B9, bytes.byte() as u64);
    let mut row = match mode {
        0 => RowParams::new(t, seed, offset),
        1 => RowParams::new(t.max(0.5), seed, offset),
        2 => RowParams::seeded(t, seed, offset),
        _ => RowParams::seeded(t, seed, offset).with_seeded_hash(SeededHash::SortedRank),
    };
    let v = vocab as u32;
    let k = bytes.pick(&[1, 2, 5, 40, v - 1, v, v + 1, 256, 257, 4095, 4096, 4097, v / 2 + 1]);
    let p = bytes.pick(&[0.9, 0.5, 0.007, 1e-7, 0.999_999, 0.3, 0.95]);
    let min_p = bytes.pick(&[0.05, 0.1, 0.5, 1.0, 1e-7, 0.3]);
    if which & 1 != 0 {
        row = row.with_top_k(k.max(1));
    }
    if which & 2 != 0 {
        row = row.with_top_p(p);
    }
    if which & 4 != 0 {
        row = row.with_min_p(min_p);
    }
    if which & 8 != 0 {
        let order = if which & 16 != 0 { FilterOrder::MinPFirst } else { FilterOrder::TopKFirst };
        row = row.with_order(order);
    }
    if which >> 4 == 15 {
        row = invalid(row, which);
    }
    row
}

/// `row` with one field out of its range, which both backends must refuse naming it.
fn invalid(row: RowParams, which: u8) -> RowParams {
    let mut words: [u32; 12] = bytemuck::cast(row);
    match which % 12 {
        0 => words[0] = f32::NAN.to_bits(),
        1 => words[0] = (-1.0f32).to_bits(),
        2 => words[0] = f32::INFINITY.to_bits(),
        3 => words[2] = 0,
        4 => words[3] = 0,
        5 => words[3] = 1.5f32.to_bits(),
        6 => words[3] = f32::NAN.to_bits(),
        7 => words[4] = (-0.1f32).to_bits(),
        8 => words[4] = 1.5f32.to_bits(),
        9 => words[4] = f32::NAN.to_bits(),
        10 => words[5] = 2,
        _ => words[6] = 2,
    }
    bytemuck::cast(words)
}

/// A decoded step: the shape, row-major f32 values (of which each row's first `vocab` count),
/// the element type to upload them as (0 f32, 1 f16, 2 bf16), the row records, and the flaw
/// of the call's arguments asked for (0 none, 1 a logits buffer one short, 2 one record too
/// many).
struct Case {
    shape: Shape,
    values: Vec<f32>,
    dtype: u8,
    rows: Vec<RowParams>,
    flaw: u8,
}

/// The header (batch 1 to 8, a vocabulary from one of four ranges up to 5000, a stride padding
/// or none, the element type, a rare flaw: batch 0 or 9, a stride below the vocabulary, a short
/// buffer, a record too many), then each row's values and parameters.
fn decode(data: &[u8]) -> Case {
    let mut bytes = Bytes(data);
    let (b, v, pad, dtype, flaw) = (bytes.byte(), bytes.byte(), bytes.byte(), bytes.byte() % 3, bytes.byte());
    let mut batch = 1 + b as usize % MAX_BATCH;
    let vocab = 1 + match v % 4 {
        0 => v as usize / 4 % 8,
        1 => v as usize % 64,
        2 => bytes.u16() as usize % 5000,
        _ => [0, 1, 254, 255, 256, 1023, 1024, 4095, 4096, 4999][bytes.byte() as usize % 10],
    };
    let mut stride = vocab + if pad % 4 == 0 { 0 } else { pad as usize / 4 % 17 };
    let seed = bytes.u64();
    let mut values = vec![0.0f32; batch * stride];
    for r in 0..batch {
        values[r * stride..][..vocab].copy_from_slice(&row_of_values(&mut bytes, seed, r, vocab));
    }
    let rows = (0..batch).map(|_| row_params(&mut bytes, vocab)).collect();
    match flaw {
        251 => batch = 0,
        252 => batch = MAX_BATCH + 1,
        253 if vocab > 1 => stride = vocab - 1,
        _ => {}
    }
    let flaw = flaw.saturating_sub(253);
    Case { shape: Shape { batch, vocab, stride }, values, dtype, rows, flaw }
}

/// Tokens and statuses of one step, or the step's error.
type Sampled = Result<(Vec<u32>, Vec<u32>), Error>;

/// [`Sampler::step`] on `b` for `case`.
fn run<B: Backend>(b: &B, sampler: &mut Sampler<&B>, case: &Case) -> Sampled {
    let Case { shape, dtype, flaw, .. } = *case;
    // The values a correct call reads, one fewer for the short buffer (at least one: a shape
    // whose batch or stride is flawed is refused before any buffer is read).
    let need = shape.batch.min(MAX_BATCH).saturating_sub(1) * shape.stride + shape.vocab;
    let values = &case.values[..need.min(case.values.len()) - (flaw == 1 && need > 1) as usize];
    let mut rows = case.rows.clone();
    rows.resize(shape.batch + (flaw == 2) as usize, RowParams::greedy());
    let (mut tokens, mut status) = (b.zeros::<u32>(rows.len().max(1))?, b.zeros::<u32>(rows.len().max(1))?);
    let out = Output::new(&mut tokens).with_status(&mut status);
    match dtype {
        0 => sampler.step(shape, Logits::F32(&b.upload(values)?), &rows, out)?,
        1 => {
            let x: Vec<half::f16> = values.iter().map(|&v| half::f16::from_f32(v)).collect();
            sampler.step(shape, Logits::F16(&b.upload(&x)?), &rows, out)?
        }
        _ => {
            let x: Vec<half::bf16> = values.iter().map(|&v| half::bf16::from_f32(v)).collect();
            sampler.step(shape, Logits::Bf16(&b.upload(&x)?), &rows, out)?
        }
    }
    Ok((b.download(&tokens)?, b.download(&status)?))
}

/// The values of row `r` as the oracle reads them (after the element type's rounding).
fn oracle_values(case: &Case, r: usize) -> Vec<f64> {
    let (shape, x) = (case.shape, &case.values);
    match case.dtype {
        0 => row_values(Logits::F32(x), shape, r),
        1 => row_values(Logits::F16(&x.iter().map(|&v| half::f16::from_f32(v)).collect()), shape, r),
        _ => row_values(Logits::Bf16(&x.iter().map(|&v| half::bf16::from_f32(v)).collect()), shape, r),
    }
}

/// The wgpu sampler, made once a process on `wgpu` (which must be the same backend each call).
fn wgpu_sampler(wgpu: &'static WgpuBackend) -> &'static Mutex<Sampler<&'static WgpuBackend>> {
    static SAMPLER: OnceLock<Mutex<Sampler<&'static WgpuBackend>>> = OnceLock::new();
    SAMPLER.get_or_init(|| Mutex::new(Sampler::new(wgpu, MAX_BATCH).expect("a sampler on the wgpu backend")))
}

/// The body: the decoded step on `wgpu` and on the CPU backend, compared (panics on a finding).
pub fn step(wgpu: &'static WgpuBackend, data: &[u8]) {
    let case = decode(data);
    let want = run(&CpuBackend, &mut Sampler::new(&CpuBackend, MAX_BATCH).unwrap(), &case);
    let got = run(wgpu, &mut wgpu_sampler(wgpu).lock().unwrap_or_else(|e| e.into_inner()), &case);
    let (want, got) = match (want, got) {
        (Ok(want), Ok(got)) => (want, got),
        (Err(want), Err(got)) => return assert!(same_refusal(&want, &got), "oracle: {want}; wgpu: {got}"),
        (want, got) => panic!("oracle: {:?}; wgpu: {:?}", want.err(), got.err()),
    };
    let shape = case.shape;
    for (r, row) in case.rows.iter().enumerate() {
        let ((token, status), (cpu_token, cpu_status)) = ((got.0[r], got.1[r]), (want.0[r], want.1[r]));
        assert!((token as usize) < shape.vocab, "row {r}: token {token} outside a vocabulary of {}", shape.vocab);
        if (token, status) == (cpu_token, cpu_status) {
            continue;
        }
        let values = oracle_values(&case, r);
        if let Err(why) = explained(&values, row, (token, status), (cpu_token, cpu_status)) {
            let dtype = ["f32", "f16", "bf16"][case.dtype as usize];
            panic!(
                "row {r} of {shape:?} ({dtype}, {row:?}): wgpu {token} (status {status}), oracle {cpu_token} \
                 (status {cpu_status}): {why}; the row's values {values:?}"
            );
        }
    }
}

/// The tight and loose sets widened by near ties: the device orders tokens on float32
/// `z - max`, the oracle on float64 probabilities, so two tokens equal in one may not be in the
/// other (logits 0 and -9e-41 weigh the same in float64 and differ in float32), and a set's
/// edge may fall either side of tokens within `NEAR` of it. The loose set takes every token
/// within `NEAR` of its least probability; the tight one keeps only those above the largest it
/// leaves out by more than `NEAR`.
fn near_ties(p: &[f64], mut tight: Vec<bool>, mut loose: Vec<bool>) -> (Vec<bool>, Vec<bool>) {
    let least_in = (0..p.len()).filter(|&j| loose[j]).map(|j| p[j]).fold(f64::INFINITY, f64::min);
    let most_out = (0..p.len()).filter(|&j| !tight[j]).map(|j| p[j]).fold(0.0, f64::max);
    for j in 0..p.len() {
        loose[j] |= p[j] > 0.0 && p[j] >= least_in * (1.0 - NEAR);
        tight[j] &= p[j] > most_out * (1.0 + NEAR);
    }
    (tight, loose)
}

/// Whether two refusals are the same: the same kind, naming the same row and field or buffer.
fn same_refusal(a: &Error, b: &Error) -> bool {
    match (a, b) {
        (Error::Param { row, field, .. }, Error::Param { row: r, field: f, .. }) => (row, field) == (r, f),
        (Error::BufferTooShort { name, .. }, Error::BufferTooShort { name: n, .. }) => name == n,
        _ => std::mem::discriminant(a) == std::mem::discriminant(b),
    }
}

/// Why the wgpu row (`got`: token, status) may differ from the oracle's (`want`) on these
/// values: only as float32 may where the oracle is not decided with margin [`NEAR`].
///
/// The oracle's kept set is bracketed by the sets of the filters tightened and loosened by
/// `NEAR` (top-p's mass and min-p's ratio), then by the tokens within `NEAR` of their edges
/// ([`near_ties`]): the device's set lies between them.
/// The token must lie in the loose set, and no token of the tight set may beat it in the
/// oracle's race scores by more than `NEAR` of their size. Greedy rows of the race compare the
/// logits themselves, as the device does: no tolerance. A row that hashes ranks hashes each
/// token's place in the set, which any change of the set or of its order moves: there the token
/// need only lie in the loose set, and only where the set or the order of two of its tokens is
/// within `NEAR`. The status must be the oracle's.
fn explained(values: &[f64], row: &RowParams, got: (u32, u32), want: (u32, u32)) -> Result<(), String> {
    let p = softmax(values, row);
    let f = row.filters();
    let filtered = row.is_sampled() && f.is_active();
    // Tightened (`side` 1) or loosened (-1).
    let scaled = |side: f64| Filters {
        top_p: f.top_p * (1.0 - side * NEAR),
        min_p: (f.min_p * (1.0 + side * NEAR)).min(1.0),
        ..f
    };
    let (tight, loose) = if filtered {
        near_ties(&p, kept(&p, &scaled(1.0)), kept(&p, &scaled(-1.0)))
    } else {
        (vec![true; p.len()], vec![true; p.len()])
    };
    let decided = tight == loose;
    let token = got.0 as usize;
    if !loose[token] {
        return Err(format!("token {token} lies outside the oracle's set (loosened by {NEAR})"));
    }
    if row.mode() == RowMode::Race && !row.is_sampled() {
        return Err("a greedy row compares the values themselves, as the oracle does".into());
    }
    if row.hashes_ranks() {
        let ranked: Vec<usize> = order(&p).into_iter().filter(|&j| loose[j]).collect();
        // Two neighbours of distinct values within `NEAR`: float32 may order them either way,
        // equal float64 probabilities included (values 0 and 1e-38 at T 1e-6).
        let close = ranked.windows(2).any(|w| values[w[0]] != values[w[1]] && p[w[0]] - p[w[1]] <= NEAR * p[w[0]]);
        return match (decided && !close, got.1 == want.1) {
            (false, true) => Ok(()),
            (true, _) => Err("a row that hashes ranks, its set and order decided".into()),
            (false, false) => Err("status differs".into()),
        };
    }
    if got.1 != want.1 {
        return Err("status differs".into());
    }
    let scores = match row.mode() {
        RowMode::Seeded => seeded_scores(&sglang_logprobs(values, row), row),
        _ => {
            // A class of scaled values at +inf races on the noise alone (see `race_logits_in`).
            let z = scaled_f32(values, row);
            let inf = z.contains(&f32::INFINITY);
            let class: Vec<f64> = z.iter().map(|&v| if v == f32::INFINITY { 0.0 } else { f64::NEG_INFINITY }).collect();
            race_scores(if inf { &class } else { values }, row, false)
        }
    };
    let best = (0..p.len()).filter(|&j| tight[j]).map(|j| scores[j]).fold(f64::NEG_INFINITY, f64::max);
    let tolerance = NEAR * best.abs().max(1.0);
    if scores[token] >= best - tolerance && scores[token] > f64::NEG_INFINITY {
        return Ok(());
    }
    Err(format!(
        "its oracle score {} is below the best of the set {best} by more than {tolerance} (set decided: {decided}, oracle's token's score {})",
        scores[token], scores[want.0 as usize]
    ))
}
