#!/usr/bin/env python3
"""Writes `stage_golden.json`: the logits stage of vLLM v1 and of SGLang on small rows, from numpy
ports of their own functions (float32 throughout, as their torch code runs), not from the crate's
code, so `tests/stage.rs` checks the crate's oracle against an implementation that is not its own.

vLLM v1 (`vllm/v1/sample/sampler.py` `apply_logits_processors`, the grammar bitmask applied by the
model runner before it): the bitmask (`xgrammar.apply_token_bitmask_inplace`: -inf where the bit
is 0), min-tokens (`MinTokensLogitsProcessor`: stop ids to -inf), logit bias
(`LogitBiasLogitsProcessor`: `logits[rows, ids] += bias`), then `apply_penalties`
(`vllm/model_executor/layers/utils.py`): bin counts of the prompt and output ids padded with
`vocab`, repetition over prompt | output (`csrc/sampler.cu`: `x > 0 ? x / r : x * r`),
`logits -= f * counts`, `logits -= presence * (counts > 0)`.

SGLang (`python/sglang/srt/sampling/sampling_batch_info.py` `apply_logits_bias`, penaltylib):
the additive penalties summed into a zero float32 tensor (frequency: `scatter_add_` of f once per
generated token; presence: `scatter_` of p; min-new-tokens: `+ where(len < min, -inf at stop ids,
0)`) and added to the logits, the scaling penalty (repetition: `scatter_` of r over the output
tokens only; `where(x < 0, x * r, x / r)`), the grammar mask, then `logits += logit_bias`; the
sampler then replaces NaN by -1e5 under `--enable-nan-detection`.

Each case's "greedy" is the first index of the largest processed value with NaN never chosen
(the crate's policy), or null where no value is above -inf (the row samples nothing). Floats are
stored as their float32 bit patterns, so the test compares them exactly.

Remake it (deterministic; numpy >= 1.17):
    python3 tests/data/make_stage_golden.py
"""

import json
import os

import numpy as np

F = np.float32
VOCAB = 100  # not a multiple of 32: the last bitmask word has 28 padding bits
WORDS = (VOCAB + 31) // 32


def bits(x):
    return [int(b) for b in np.atleast_1d(np.asarray(x, dtype=F)).view(np.uint32)]


def bitmask_bool(words):
    """xgrammar's unpacking: bit j % 32 of word j // 32, the columns past the vocabulary dropped."""
    w = np.asarray(words, dtype=np.uint32)
    expanded = np.repeat(w, 32)
    bit = np.tile(np.arange(32, dtype=np.uint32), len(w))
    return ((expanded >> bit) & 1)[:VOCAB] == 1


def bin_counts(tokens):
    """vLLM's `get_token_bin_counts_and_mask`: scatter_add into vocab + 1 bins, the pad dropped."""
    counts = np.zeros(VOCAB + 1, dtype=np.int64)
    np.add.at(counts, np.asarray(tokens, dtype=np.int64), 1)
    return counts[:VOCAB], counts[:VOCAB] > 0


def vllm(logits, c):
    x = logits.astype(F).copy()
    if c["bitmask"] is not None:
        x[~bitmask_bool(c["bitmask"])] = -np.inf
    for t in c["banned"]:
        if t < VOCAB:  # ids at or above the vocabulary are padding, as in both engines' lists
            x[t] = -np.inf
    for t, b in c["bias"]:
        x[t] += F(b)
    _, prompt_mask = bin_counts(c["prompt"] + [VOCAB])
    counts, output_mask = bin_counts(c["output"] + [VOCAB])
    r = F(c["repetition"])
    rep = prompt_mask | output_mask
    pen = np.where(rep, r, F(1.0)).astype(F)
    x = np.where(x > 0, x / pen, x * pen).astype(F)
    x = (x - F(c["frequency"]) * counts.astype(F)).astype(F)
    x = (x - F(c["presence"]) * output_mask.astype(F)).astype(F)
    return x


def sglang(logits, c):
    x = logits.astype(F).copy()
    freq = np.zeros(VOCAB, dtype=F)
    pres = np.zeros(VOCAB, dtype=F)
    scale = np.ones(VOCAB, dtype=F)
    for t in c["output"]:  # one decode step at a time
        freq[t] = freq[t] + F(c["frequency"])
        pres[t] = F(c["presence"])
        scale[t] = F(c["repetition"])
    stop = np.zeros(VOCAB, dtype=F)
    for t in c["banned"]:
        if t < VOCAB:
            stop[t] = -np.inf
    additive = np.zeros(VOCAB, dtype=F)
    additive -= freq
    additive -= pres
    additive += stop
    x = (x + additive).astype(F)
    x = np.where(x < 0, x * scale, x / scale).astype(F)
    if c["bitmask"] is not None:
        x[~bitmask_bool(c["bitmask"])] = -np.inf
    bias = np.zeros(VOCAB, dtype=F)
    for t, b in c["bias"]:
        bias[t] = F(b)
    x = (x + bias).astype(F)
    return x


def greedy(x):
    y = np.where(np.isnan(x), -np.inf, x)
    return None if not (y > -np.inf).any() else int(np.argmax(y))


def case(**kw):
    c = dict(repetition=1.0, frequency=0.0, presence=0.0, prompt=[], output=[], bias=[], banned=[],
             bitmask=None, nan_as_finite=False)
    c.update(kw)
    return c


def main():
    rng = np.random.default_rng(52)
    logits = (rng.standard_normal((10, VOCAB)) * 3).astype(F)
    top = [int(np.argmax(r)) for r in logits]
    second = [int(np.argsort(-r, kind="stable")[1]) for r in logits]
    one_bit = [0] * WORDS
    one_bit[77 // 32] = 1 << (77 % 32)
    padding = [0xFFFFFFFF] * WORDS  # every column allowed, padding bits set too
    padding[1] = 0  # columns 32..63 refused
    # Row 7: NaN in three columns; only they and a -inf column are allowed.
    logits[7, [5, 40, 90]] = np.nan
    nan_mask = [0] * WORDS
    for j in (5, 40, 90, 60):
        nan_mask[j // 32] |= 1 << (j % 32)
    logits[7, 60] = -np.inf
    # Row 8: a logit that a bias moves across zero before the repetition penalty (vLLM) or after.
    logits[8, 11] = F(-0.5)
    cases = [
        case(bias=[(second[0], 2.5), (top[0], -1.0), (3, 0.25)]),
        case(repetition=1.3, prompt=[top[1], 4, 4, 9], output=[second[1]] * 2),
        case(frequency=0.7, presence=0.4, output=[top[2]] * 300 + [second[2]] * 3 + [17]),
        case(banned=[top[3], second[3], VOCAB + 5]),
        case(bitmask=[0] * WORDS),
        case(bitmask=one_bit),
        case(bitmask=padding),
        case(bitmask=nan_mask, nan_as_finite=True),
        case(repetition=1.5, frequency=0.3, presence=0.2, prompt=[11, top[8]], output=[11, 11, top[8]],
             bias=[(11, 1.0), (second[8], 0.5)], banned=[second[8] + 1 if second[8] + 1 < VOCAB else 0],
             bitmask=padding),
        case(frequency=-0.05, presence=-0.1, repetition=0.8, output=[top[9]] * 1000 + [second[9]] * 999),
    ]
    out = []
    for row, c in enumerate(cases):
        for name, fn in (("vllm", vllm), ("sglang", sglang)):
            x = fn(logits[row], c)
            if c["nan_as_finite"]:
                x = np.where(np.isnan(x), F(-1e5), x).astype(F)
            counts = {}
            for t in c["output"]:
                counts[t] = counts.get(t, 0) + 1
            out.append(dict(row=row, definitions=name, repetition=bits(c["repetition"])[0],
                            frequency=bits(c["frequency"])[0], presence=bits(c["presence"])[0],
                            prompt=c["prompt"], output=[[t, n] for t, n in counts.items()],
                            bias=[[t, bits(b)[0]] for t, b in c["bias"]], banned=c["banned"],
                            bitmask=c["bitmask"], nan_as_finite=c["nan_as_finite"],
                            expected=bits(x), greedy=greedy(x)))
    doc = dict(about="vLLM v1's and SGLang's logits stage from numpy ports of their code; see make_stage_golden.py",
               vocab=VOCAB, logits=[bits(r) for r in logits], cases=out)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stage_golden.json")
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
