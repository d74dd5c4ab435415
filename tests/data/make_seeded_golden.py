#!/usr/bin/env python3
"""Writes the seeded sampler's golden vectors: `seeded_golden.json`, `seeded_golden.npy` (float64
log-probabilities) and `seeded_golden_probs.npy` (their float32 softmax, for the path from
probabilities).

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


def noise(seed: int, position: int) -> np.ndarray:
    h = np.array([murmur(seed, position, j) for j in range(VOCAB)], dtype=np.float64)
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


if __name__ == "__main__":
    main()
