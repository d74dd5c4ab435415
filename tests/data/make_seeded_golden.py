#!/usr/bin/env python3
"""Writes the seeded sampler's golden vectors: `seeded_golden.json`, `seeded_golden.npy` (float64
log-probabilities) and `seeded_golden_probs.npy` (their float32 softmax, for the path from
probabilities), and the filtered path's `sglang_filtered.json` and `sglang_filtered.npy`.

SGLang's deterministic sampler (`multinomial_with_seed`), computed here from its formulas with
numpy and the `mmh3` package, not with the crate's code, so the tests that read these files check
the crate against an implementation that is not its own:

    h = MurmurHash3_x86_32(seed 0) over the little-endian u32 words
        [seed & 0xffffffff, seed >> 32, position & 0xffffffff, column]
    x = h / (2^32 - 1);  e = clamp(ln x, min = -1.7976931348623157e308, max = -2^-32)
    g = -ln(-e);         token = first index of the maximum of logprob + g (float64)

Rows 2 and 5 use seed 7847 at position 12345, where column 1208 hashes to 0xffffffff (the largest
noise, 32 ln 2): masked in row 2, so it must not win there; finite in row 5, where it wins.

Rows 8 to 11 use a (seed, position) where column 2718 hashes to 0, found by running the hash
backwards (`hash_zero_position`: the finalizer and the block step are invertible mod 2^32). Its
noise is the clamp's `-ln(1.7976931348623157e308) = -709.78`, finite, so it can still win: in row 8
it is the only finite column; in row 9 the others lie near -800; in rows 10 and 11 a rival column
scores 0.25 below and above it (log-probabilities near -710, whose float32 softmax underflows to
0, so from logits, `expected_tokens_from_logits`, column 2718 is the only finite one in all four).
The triple is the last of `murmur_vectors` and, with its noise, `hash_zero`.

It also writes `sglang_filtered.json` and `sglang_filtered.npy` (float32 rows of VOCAB_F = 8192
logits or probabilities, as each case's "input" says): SGLang's filtered deterministic path,
`top_k_top_p_min_p_sampling_from_probs_torch` with a seed (SGLang 0.5.20,
`--enable-deterministic-inference`), from its formulas, all filters in float32:

    probs = softmax(logits / T)        (from logits: float32 division, max, exp, sum and divide)
    probs_sort, probs_idx = sort(probs, descending)        (ties: the lower id first)
    probs_sum = cumsum(probs_sort);    probs_sort[rank >= top_k] = 0
    probs_sort[(probs_sum - probs_sort) > top_p] = 0
    probs_sort[probs_sort < probs_sort[0] * min_p] = 0
    rank = first index of the maximum of ln(float64(probs_sort)) + g(murmur(seed, position, rank))
    token = probs_idx[rank]

The noise's column is the rank, not the id; each case's "id_token" is the same kept set's race
with the noise on the vocabulary id (the crate's default). Each case has top_k -1, top_p 1.0 and
min_p 0.0 for "none", "kept" (the kept set's size), "margin" (best minus second-best score) and
"boundary_margin" (the least relative distance of a filter boundary from flipping, 1.0 for none).
Rows are drawn again until the vectors cannot hang on the last ulp of a float32 softmax or sum:
margins of both races >= 1e-3; the top-k cut's relative gap >= 1e-5; the mass before every rank
that top-k leaves at least 1e-4 * top_p from top_p; every token at least 1e-5 * max p from the
min-p threshold; from logits, the winner's probability 1e-5 from its sorted neighbours' unless
their logits are equal. Two rows have their three largest logits exactly equal, inside the kept
set, so their ranks go by id.

Remake them (the files are deterministic; numpy >= 1.17 and mmh3 >= 3):

    pip install numpy mmh3
    python3 tests/data/make_seeded_golden.py
"""

import json
import struct
from pathlib import Path

import mmh3
import numpy as np

ROWS, VOCAB = 8, 4096  # the random rows; the hash-zero rows follow them
SEEDS = [5382004320367859134, 7635377776805837752, 7847, 6469358265885111212,
         6219216559767457400, 7847, 6359064692703534630, 7893252392783286715]
POSITIONS = [1852107343, 412127801, 12345, 902729358, 1950624437, 12345, 778446681, 1609592389]
# (seed, position, column) triples for the hash alone: small and large seeds, positions at and
# past 2^31 and 2^32 - 1, and the column that hashes to 0xffffffff.
HASH_TRIPLES = [(42, 0, 0), (42, 0, 1), (42, 1, 0), (0, 0, 0), (7847, 12345, 1208),
                (9223372036854775807, 2147483648, 151935), (1099511627781, 3, 9), (123456789, 4294967295, 7)]
MAX_NOISE_COLUMN = 1208
# The seed and column of the hash-zero rows; the position is solved for.
HASH_ZERO_SEED, HASH_ZERO_COLUMN = 8117094712440551011, 2718
# How far the rival column of rows 10 and 11 scores below and above the hash-zero column.
RIVAL_MARGIN = 0.25
M32 = 0xFFFFFFFF
C1, C2 = 0xCC9E2D51, 0x1B873593

# The filtered vectors (`sglang_filtered.*`), drawn from their own generator so that the unfiltered
# ones above stay as they were.
VOCAB_F, FILTERED_RNG_SEED, MAX_KEPT, TIED = 8192, 20261202, 4096, 3
# (top_k, top_p, min_p); -1, 1.0 and 0.0 are "none". Qwen3's top_k 20 + top_p 0.95 first.
FILTERS = [(20, 0.95, 0.0), (50, 1.0, 0.0), (1000, 0.9, 0.0), (-1, 0.9, 0.0), (-1, 0.5, 0.0),
           (-1, 1.0, 0.05), (40, 1.0, 0.1), (256, 1.0, 0.0), (300, 1.0, 0.0)]
# (input, temperature); the rows from probabilities are a float32 softmax at T = 1, given as is.
INPUTS = [("logits", 0.6), ("logits", 0.8), ("logits", 1.0), ("logits", 1.3), ("probs", 1.0)]
# Row shapes: (kind, least and largest parameter, drawn anew for each row): the Zipf scale of the
# model-like rows, the sd of the Gaussian ones, the head's size of the plateaus.
SHAPES = {"model": ("model", 1.0, 1.6), "gauss": ("gauss", 2.0, 4.0), "tied": ("tied", 1.0, 1.6),
          "flat-model": ("model", 1.1, 1.3), "plateau": ("plateau", 2500, 4000),
          "small-plateau": ("plateau", 1200, 2000)}
CASES_PER_FILTER = 4  # each filter at four inputs, model-like and Gaussian rows in turn
# The cases after those: (input, filter, shape) indices and names. Two rows whose TIED largest
# logits are equal (inside the kept set); three flat ones, two plateaus under top_p 0.9 that keep
# thousands of tokens and a model-like row where top_k 1000 cuts before top_p 0.9 does. (A smooth
# row cannot keep thousands under top-p alone: the token at the cut would weigh less than
# TOP_P_GAP * top_p, so no row clears the top-p boundary.)
EXTRA_CASES = [(1, 0, "tied"), (4, 4, "tied"), (3, 3, "plateau"), (4, 3, "small-plateau"),
               (3, 2, "flat-model")]
# Seeds and positions that every fifth case takes (the rest are drawn): small and the largest
# seeds, positions at and past 2^31 and 2^32 (only their low 32 bits are hashed).
SPECIAL_SEEDS = [0, 1, 42, 7847, 4294967295, 4294967296, 1099511627781, 9223372036854775807]
SPECIAL_POSITIONS = [0, 2147483647, 2147483648, 4294967295, 4294967296, 4294967303,
                     1099511640121, 9223372036854775807]
# Robustness: the least race margin, and the least relative distance of the top-k, top-p and
# min-p boundaries from flipping (see `boundary_gaps`).
MIN_MARGIN, TOP_K_GAP, TOP_P_GAP, MIN_P_GAP = 1e-3, 1e-5, 1e-4, 1e-5
# From logits, the least relative gap between the winning rank's probability and its neighbours'
# (`order_gap`), unless their logits are equal: a closer pair could swap ranks, and so tokens.
RANK_GAP = 1e-5


def murmur(seed: int, position: int, column: int) -> int:
    words = struct.pack("<4I", seed & 0xFFFFFFFF, seed >> 32, position & 0xFFFFFFFF, column)
    return mmh3.hash(words, 0, signed=False)


def rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & M32


def mix_word(w: int) -> int:
    """The block's word mixing, `k = rotl(w * c1, 15) * c2`."""
    return rotl(w * C1 & M32, 15) * C2 & M32


def unmix_word(k: int) -> int:
    return rotl(k * pow(C2, -1, 1 << 32) & M32, 17) * pow(C1, -1, 1 << 32) & M32


def block(h: int, w: int) -> int:
    """One block step, `h = rotl(h ^ k, 13) * 5 + 0xe6546b64`."""
    return (rotl(h ^ mix_word(w), 13) * 5 + 0xE6546B64) & M32


def unblock(h: int) -> int:
    """The `h ^ k` that a block step took to `h`."""
    return rotl((h - 0xE6546B64) * pow(5, -1, 1 << 32) & M32, 19)


def unxorshift(h: int, s: int) -> int:
    """Inverts `h ^= h >> s`."""
    x, t = h, h >> s
    while t:
        x, t = x ^ t, t >> s
    return x


def unfinalize(h: int) -> int:
    """The state after the four blocks whose finalizer (length xor, fmix32) gives `h`."""
    h = unxorshift(h, 16) * pow(0xC2B2AE35, -1, 1 << 32) & M32
    h = unxorshift(h, 13) * pow(0x85EBCA6B, -1, 1 << 32) & M32
    return unxorshift(h, 16) ^ 16


def hash_zero_position(seed: int, column: int) -> int:
    """The position (a u32) at which `column` of `seed` hashes to 0: the state before the column's
    block is `unblock(unfinalize(0)) ^ k(column)`, and the position's block must reach it from
    the state after the seed's two words."""
    h3 = unblock(unfinalize(0)) ^ mix_word(column)
    h2 = block(block(0, seed & M32), seed >> 32)
    return unmix_word(unblock(h3) ^ h2)


def noise(seed: int, position: int, columns: int = VOCAB) -> np.ndarray:
    """The float64 Gumbel noise of columns 0 to `columns - 1` at (seed, position)."""
    h = np.array([murmur(seed, position, j) for j in range(columns)], dtype=np.float64)
    with np.errstate(divide="ignore"):
        e = np.clip(np.log(h / 4294967295.0), np.finfo(np.float64).min, -(2.0**-32))
    return -np.log(-e)


def logprobs(rng: np.random.Generator) -> np.ndarray:
    """Normalized float64 log-probabilities of Gaussian logits (sd 2), a twentieth of each row
    masked to -inf, column 1208 masked in row 2 and kept in row 5."""
    logits = rng.standard_normal((ROWS, VOCAB)) * 2.0
    masked = rng.random((ROWS, VOCAB)) < 0.05
    masked[2, MAX_NOISE_COLUMN] = True
    masked[5, MAX_NOISE_COLUMN] = False
    logits[masked] = -np.inf
    top = logits.max(axis=1, keepdims=True)
    return logits - (top + np.log(np.exp(logits - top).sum(axis=1, keepdims=True)))


def hash_zero_rows(rng: np.random.Generator, position: int) -> np.ndarray:
    """Rows 8 to 11 (normalized: exp(-700) adds nothing to 1 in float64): the hash-zero column at
    0, the others masked (row 8), near -800 (row 9), near -760 with a rival column whose score
    is RIVAL_MARGIN below (row 10) and above (row 11) the hash-zero column's."""
    g = noise(HASH_ZERO_SEED, position)
    rows = np.full((4, VOCAB), -np.inf)
    rows[1] = -800.0 + 2.0 * rng.standard_normal(VOCAB)
    rows[2:] = -760.0 + 2.0 * rng.standard_normal((2, VOCAB))
    rival = HASH_ZERO_COLUMN + 1
    rows[2, rival] = g[HASH_ZERO_COLUMN] - g[rival] - RIVAL_MARGIN
    rows[3, rival] = g[HASH_ZERO_COLUMN] - g[rival] + RIVAL_MARGIN
    rows[:, HASH_ZERO_COLUMN] = 0.0
    return rows


def softmax32(lp: np.ndarray) -> np.ndarray:
    """`torch.softmax(x)` in float32 at T = 1 (the golden log-probabilities as logits)."""
    x = lp.astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def log32(p: np.ndarray) -> np.ndarray:
    """`torch.log` of float32 probabilities, in float32, promoted to float64 for the race."""
    with np.errstate(divide="ignore"):
        return np.log(p).astype(np.float64)


def from_logits(lp: np.ndarray) -> np.ndarray:
    """SGLang's log-probabilities from logits at T = 1, `torch.log(torch.softmax(x))` in float32
    (the golden log-probabilities are the logits `seeded_from_logits` is given)."""
    return log32(softmax32(lp))


def race(lp: np.ndarray, seeds: list, positions: list) -> tuple:
    """SGLang's tokens (the first index of the maximum) and each row's margin over its second."""
    tokens, margins = [], []
    for row, (seed, position) in enumerate(zip(seeds, positions)):
        scores = lp[row] + noise(seed, position)
        best = int(np.argmax(scores))
        tokens.append(best)
        margin = float(scores[best] - np.max(np.delete(scores, best)))
        margins.append(margin if np.isfinite(margin) else None)  # null: no other finite score
    return tokens, margins


def model_logits(rng: np.random.Generator, scale: float) -> np.ndarray:
    """Model-like float32 logits: a Zipf head `8 - 1.1 scale ln(rank + 1)` plus Gumbel noise of
    scale 0.5, the ranks shuffled over the vocabulary."""
    ranks = rng.permutation(VOCAB_F)
    return (8.0 - 1.1 * scale * np.log(ranks + 1.0) + 0.5 * rng.gumbel(size=VOCAB_F)).astype(np.float32)


def gauss_logits(rng: np.random.Generator, sd: float) -> np.ndarray:
    """Gaussian float32 logits of the given sd."""
    return (sd * rng.standard_normal(VOCAB_F)).astype(np.float32)


def tied_logits(rng: np.random.Generator, scale: float) -> np.ndarray:
    """Model-like logits whose TIED largest are set equal to the largest, so their ranks are
    decided by their vocabulary ids (the lower id first)."""
    x = model_logits(rng, scale)
    top = np.argsort(-x, kind="stable")[:TIED]
    x[top] = x[top[0]]
    return x


def plateau_logits(rng: np.random.Generator, head: float) -> np.ndarray:
    """Flat float32 logits: a head of `head` tokens at N(0, 0.2) over a tail at -6 + N(0, 1),
    shuffled over the vocabulary (under top_p 0.9 they keep most of the head)."""
    x = np.concatenate([0.2 * rng.standard_normal(int(head)), -6.0 + rng.standard_normal(VOCAB_F - int(head))])
    return rng.permutation(x).astype(np.float32)


def softmax_t(x: np.ndarray, temperature: float) -> np.ndarray:
    """`softmax(logits / T)` all in float32: z = x / T, e = exp(z - max z), e / sum e."""
    z = x / np.float32(temperature)
    e = np.exp(z - z.max())
    return e / e.sum()


def sglang_filters(ps: np.ndarray, top_k: int, top_p: float, min_p: float) -> np.ndarray:
    """SGLang's `top_k_top_p_min_p_sampling_from_probs_torch` filters, in float32, on the sorted
    probabilities `ps` (a copy is zeroed and returned):

        probs_sum = cumsum(probs_sort)
        probs_sort[rank >= top_k] = 0
        probs_sort[(probs_sum - probs_sort) > top_p] = 0
        probs_sort[probs_sort < probs_sort[0] * min_p] = 0
    """
    ps = ps.copy()
    probs_sum = np.cumsum(ps, dtype=np.float32)
    if top_k > 0:
        ps[top_k:] = 0
    ps[(probs_sum - ps) > np.float32(top_p)] = 0
    if min_p > 0:
        ps[ps < ps[0] * np.float32(min_p)] = 0
    return ps


def exact_kept(ps: np.ndarray, top_k: int, top_p: float, min_p: float) -> int:
    """The kept set's size from float64 sums of the float32 probabilities (the crate's exact
    definition): rank < top_k, the mass before the rank <= top_p, p >= min_p * max p."""
    p = ps.astype(np.float64)
    before = np.concatenate([[0.0], np.cumsum(p)[:-1]])
    keep = before <= float(np.float32(top_p))
    if top_k > 0:
        keep[top_k:] = False
    if min_p > 0:
        keep &= p >= float(np.float32(min_p)) * p[0]
    return int(keep.sum())


def boundary_gaps(ps: np.ndarray, top_k: int, top_p: float, min_p: float) -> list:
    """(relative distance from flipping, least allowed) of each filter that applies, in float64
    from the sorted float32 probabilities: the top-k cut's gap (p[k-1] - p[k]) / p[k-1]; for every
    rank that top-k leaves (all without top-k; past the cut, top-p's verdict does not matter),
    |mass ranked before it - top_p| / top_p; for every token, |p - min_p max p| / max p."""
    p = ps.astype(np.float64)
    gaps = []
    if 0 < top_k < len(p):
        gaps.append(((p[top_k - 1] - p[top_k]) / p[top_k - 1], TOP_K_GAP))
    if top_p < 1.0:
        tp = float(np.float32(top_p))
        before = np.concatenate([[0.0], np.cumsum(p)[:-1]])[: top_k if top_k > 0 else len(p)]
        gaps.append((float(np.min(np.abs(before - tp))) / tp, TOP_P_GAP))
    if min_p > 0.0:
        gaps.append((float(np.min(np.abs(p - float(np.float32(min_p)) * p[0]))) / p[0], MIN_P_GAP))
    return gaps


def order_gap(x: np.ndarray, order: np.ndarray, ps: np.ndarray, rank: int) -> float:
    """The least relative gap |p[rank] - p[n]| / p[rank] over the sorted neighbours n = rank - 1,
    rank + 1 whose logits differ from the winner's (an exact tie of logits is an exact tie in
    any softmax, decided by the lower id)."""
    gaps = [abs(float(ps[rank]) - float(ps[n])) / float(ps[rank]) for n in (rank - 1, rank + 1)
            if 0 <= n < len(ps) and x[order[n]] != x[order[rank]]]
    return min(gaps, default=1.0)


def first_max(scores: np.ndarray) -> tuple:
    """The first index of the maximum and its margin over the second-best finite score."""
    best = int(np.argmax(scores))
    return best, float(scores[best] - np.max(np.delete(scores, best)))


def filtered_case(rng: np.random.Generator, spec: tuple, seed: int, position: int) -> tuple:
    """One filtered case: draws rows of the shape until the kept set has 2 to MAX_KEPT tokens (at
    least TIED for tied rows), every filter boundary is clear, both races (on the rank, SGLang's,
    and on the vocabulary id, the crate's default) win by MIN_MARGIN and, from logits, the winning
    rank's token cannot swap with a neighbour's. Returns the row, the case and how many rows were
    drawn."""
    (kind, temperature), (top_k, top_p, min_p), shape = spec
    name, lo, hi = SHAPES[shape]
    make = {"model": model_logits, "gauss": gauss_logits, "tied": tied_logits, "plateau": plateau_logits}[name]
    g = noise(seed, position, VOCAB_F)
    for draws in range(1, 10000):
        x = make(rng, rng.uniform(lo, hi))
        probs = softmax_t(x, temperature if kind == "logits" else 1.0)
        order = np.argsort(-probs, kind="stable")
        ps = probs[order]
        zeroed = sglang_filters(ps, top_k, top_p, min_p)
        kept = int(np.count_nonzero(zeroed))
        if not (TIED if shape == "tied" else 2) <= kept <= MAX_KEPT:
            continue
        gaps = boundary_gaps(ps, top_k, top_p, min_p)
        if any(gap < least for gap, least in gaps):
            continue
        assert np.all(zeroed[:kept] > 0) and kept == exact_kept(ps, top_k, top_p, min_p)
        with np.errstate(divide="ignore"):
            rank, margin = first_max(np.log(zeroed.astype(np.float64)) + g)
            by_id = np.full(VOCAB_F, -np.inf)
            by_id[order[:kept]] = np.log(ps[:kept].astype(np.float64))
        id_token, id_margin = first_max(by_id + g)
        if min(margin, id_margin) < MIN_MARGIN or (kind == "logits" and order_gap(x, order, ps, rank) < RANK_GAP):
            continue
        if shape == "tied":
            assert np.all(ps[:TIED] == ps[0]) and ps[TIED] < ps[0] and np.all(np.diff(order[:TIED]) > 0)
        case = {"input": kind, "temperature": float(np.float32(temperature)), "seed": seed,
                "position": position, "top_k": top_k, "top_p": float(np.float32(top_p)),
                "min_p": float(np.float32(min_p)), "kept": kept, "rank": rank,
                "token": int(order[rank]), "id_token": id_token, "margin": margin,
                "boundary_margin": min([gap for gap, _ in gaps], default=1.0)}
        return (x if kind == "logits" else probs), case, draws
    raise AssertionError(f"no row for {spec}")


def filtered_specs() -> list:
    """Each case's ((input, T), (top_k, top_p, min_p), shape): every filter at CASES_PER_FILTER
    inputs in turn, model-like and Gaussian rows alternating, then EXTRA_CASES."""
    specs = [(INPUTS[(f + j) % len(INPUTS)], FILTERS[f], "model" if j % 2 == 0 else "gauss")
             for f in range(len(FILTERS)) for j in range(CASES_PER_FILTER)]
    return specs + [(INPUTS[i], FILTERS[f], shape) for i, f, shape in EXTRA_CASES]


def write_filtered(here: Path) -> None:
    """Writes `sglang_filtered.npy` (the float32 rows) and `sglang_filtered.json` (the cases)."""
    rng = np.random.default_rng(FILTERED_RNG_SEED)
    specs = filtered_specs()
    seeds = [int(s) for s in rng.integers(0, 2**63, len(specs))]
    positions = [int(p) for p in rng.integers(0, 2**33, len(specs))]
    for n, i in enumerate(range(0, len(specs), 5)):
        seeds[i] = SPECIAL_SEEDS[n % len(SPECIAL_SEEDS)]
        positions[(i + 2) % len(specs)] = SPECIAL_POSITIONS[n % len(SPECIAL_POSITIONS)]
    rows, cases, draws = [], [], 0
    for row, (spec, seed, position) in enumerate(zip(specs, seeds, positions)):
        x, case, n = filtered_case(rng, spec, seed, position)
        rows.append(x)
        cases.append({"row": row, **case})
        draws += n
    kept = [c["kept"] for c in cases]
    differ = sum(c["token"] != c["id_token"] for c in cases)
    assert max(kept) <= MAX_KEPT and sum(k >= 500 for k in kept) >= 3, kept
    assert differ >= len(cases) // 2, differ
    np.save(here / "sglang_filtered.npy", np.stack(rows).astype(np.float32))
    head = {"about": "SGLang's top_k_top_p_min_p_sampling_from_probs_torch with a seed, from its formulas (numpy, mmh3); see make_seeded_golden.py",
            "vocab": VOCAB_F, "file": "sglang_filtered.npy"}
    lines = ",\n".join("  " + json.dumps(c, allow_nan=False) for c in cases)
    text = json.dumps(head, indent=1)[:-2] + ',\n "cases": [\n' + lines + "\n ]\n}\n"
    assert json.loads(text)["cases"] == cases
    (here / "sglang_filtered.json").write_text(text)
    print(f"wrote {here}/sglang_filtered.json and .npy: {len(cases)} cases, kept {min(kept)} to {max(kept)}, "
          f"rank token != id token in {differ}, least margin {min(c['margin'] for c in cases):.4f}, "
          f"least boundary margin {min(c['boundary_margin'] for c in cases):.2e}, {draws} rows drawn")


def main() -> None:
    here = Path(__file__).resolve().parent
    rng = np.random.default_rng(20261201)
    position = hash_zero_position(HASH_ZERO_SEED, HASH_ZERO_COLUMN)
    assert murmur(HASH_ZERO_SEED, position, HASH_ZERO_COLUMN) == 0
    lp = np.concatenate([logprobs(rng), hash_zero_rows(rng, position)])
    seeds, positions = SEEDS + [HASH_ZERO_SEED] * 4, POSITIONS + [position] * 4
    tokens, margins = race(lp, seeds, positions)
    tokens_from_logits, _ = race(from_logits(lp), seeds, positions)
    # SGLang's unfiltered seeded path from probabilities (`sampling_from_probs_torch`):
    # `multinomial_with_seed(torch.log(probs))`, here on the float32 softmax written beside.
    probs = softmax32(lp)
    tokens_from_probs, _ = race(log32(probs), seeds, positions)
    assert murmur(7847, 12345, MAX_NOISE_COLUMN) == 0xFFFFFFFF
    assert tokens[2] != MAX_NOISE_COLUMN and tokens[5] == MAX_NOISE_COLUMN, tokens
    assert tokens[ROWS:] == [HASH_ZERO_COLUMN] * 3 + [HASH_ZERO_COLUMN + 1], tokens
    assert tokens_from_logits == tokens[:ROWS] + [HASH_ZERO_COLUMN] * 4, tokens_from_logits
    assert tokens_from_probs == tokens_from_logits, tokens_from_probs
    np.save(here / "seeded_golden.npy", lp)
    np.save(here / "seeded_golden_probs.npy", probs)
    triples = HASH_TRIPLES + [(HASH_ZERO_SEED, position, HASH_ZERO_COLUMN)]
    meta = {
        "about": "SGLang's multinomial_with_seed from its formulas (numpy, mmh3); see make_seeded_golden.py",
        "rows": len(seeds),
        "vocab": VOCAB,
        "logprobs_file": "seeded_golden.npy",
        "probs_file": "seeded_golden_probs.npy",
        "seeds": seeds,
        "positions": positions,
        "expected_tokens": tokens,
        "expected_tokens_from_logits": tokens_from_logits,
        "expected_tokens_from_probs": tokens_from_probs,
        "margin_best_minus_second": margins,
        "murmur_vectors": [{"seed": s, "position": p, "column": c, "hash": murmur(s, p, c)} for s, p, c in triples],
        "hash_zero": {
            "seed": HASH_ZERO_SEED,
            "position": position,
            "column": HASH_ZERO_COLUMN,
            "hash": murmur(HASH_ZERO_SEED, position, HASH_ZERO_COLUMN),
            "noise": float(noise(HASH_ZERO_SEED, position)[HASH_ZERO_COLUMN]),
            "rows": list(range(ROWS, len(seeds))),
        },
    }
    (here / "seeded_golden.json").write_text(json.dumps(meta, indent=1, allow_nan=False) + "\n")
    print(f"wrote {here}/seeded_golden.json and .npy: tokens {tokens}, least margin {min(m for m in margins if m is not None):.3f}")
    write_filtered(here)


if __name__ == "__main__":
    main()
