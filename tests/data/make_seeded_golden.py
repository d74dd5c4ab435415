#!/usr/bin/env python3
"""Writes the seeded sampler's golden vectors, `seeded_golden.json` and `seeded_golden.npy`.

SGLang's deterministic sampler (`multinomial_with_seed`), computed here from its formulas with
numpy and the `mmh3` package, not with the crate's code, so the tests that read these files check
the crate against an implementation that is not its own:

    h = MurmurHash3_x86_32(seed 0) over the little-endian u32 words
        [seed & 0xffffffff, seed >> 32, position & 0xffffffff, column]
    x = h / (2^32 - 1);  e = clamp(ln x, min = -1.7976931348623157e308, max = -2^-32)
    g = -ln(-e);         token = first index of the maximum of logprob + g (float64)

Rows 2 and 5 use seed 7847 at position 12345, where column 1208 hashes to 0xffffffff (the largest
noise, 32 ln 2): masked in row 2, so it must not win there; finite in row 5, where it wins.

Remake them (the files are deterministic; numpy >= 1.17 and mmh3 >= 3):

    pip install numpy mmh3
    python3 tests/data/make_seeded_golden.py
"""

import json
import struct
from pathlib import Path

import mmh3
import numpy as np

ROWS, VOCAB = 8, 4096
SEEDS = [5382004320367859134, 7635377776805837752, 7847, 6469358265885111212,
         6219216559767457400, 7847, 6359064692703534630, 7893252392783286715]
POSITIONS = [1852107343, 412127801, 12345, 902729358, 1950624437, 12345, 778446681, 1609592389]
# (seed, position, column) triples for the hash alone: small and large seeds, positions at and
# past 2^31 and 2^32 - 1, and the column that hashes to 0xffffffff.
HASH_TRIPLES = [(42, 0, 0), (42, 0, 1), (42, 1, 0), (0, 0, 0), (7847, 12345, 1208),
                (9223372036854775807, 2147483648, 151935), (1099511627781, 3, 9), (123456789, 4294967295, 7)]
MAX_NOISE_COLUMN = 1208


def murmur(seed: int, position: int, column: int) -> int:
    words = struct.pack("<4I", seed & 0xFFFFFFFF, seed >> 32, position & 0xFFFFFFFF, column)
    return mmh3.hash(words, 0, signed=False)


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


def main() -> None:
    here = Path(__file__).resolve().parent
    lp = logprobs(np.random.default_rng(20261201))
    tokens, margins = [], []
    for row in range(ROWS):
        scores = lp[row] + noise(SEEDS[row], POSITIONS[row])
        best = int(np.argmax(scores))  # the first index of the maximum
        second = np.max(np.delete(scores, best))
        tokens.append(best)
        margins.append(float(scores[best] - second))
    assert murmur(7847, 12345, MAX_NOISE_COLUMN) == 0xFFFFFFFF
    assert tokens[2] != MAX_NOISE_COLUMN and tokens[5] == MAX_NOISE_COLUMN, tokens
    np.save(here / "seeded_golden.npy", lp)
    meta = {
        "about": "SGLang's multinomial_with_seed from its formulas (numpy, mmh3); see make_seeded_golden.py",
        "rows": ROWS,
        "vocab": VOCAB,
        "logprobs_file": "seeded_golden.npy",
        "seeds": SEEDS,
        "positions": POSITIONS,
        "expected_tokens": tokens,
        "margin_best_minus_second": margins,
        "murmur_vectors": [{"seed": s, "position": p, "column": c, "hash": murmur(s, p, c)} for s, p, c in HASH_TRIPLES],
    }
    (here / "seeded_golden.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {here}/seeded_golden.json and .npy: tokens {tokens}, least margin {min(margins):.3f}")


if __name__ == "__main__":
    main()
