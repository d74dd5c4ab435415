"""Warp-level share of column slots whose exact race score the top-p cut's Philox loop runs
(`xtask/src/kernels/filter_top_p.rs`, `cut_part`), the scored share of the cost model's flat
rows (`xtask/src/cost/model.rs`, `flat_race`).

A part of 4096 columns, 256 invocations, a quad each a step (four steps). Each raced column is
tested against the larger of its invocation's best so far and the workgroup's floor by its
Philox word's noise bound (`race.rs`, `noise_bound`), in column order within the quad; the floor
is the workgroup's best after the steps' columns in `SHARE` (the kernel: after the first column
and after the first quad). A warp scores a column where any of its 32 lanes does. Rows: flat
(noise of 1e-3 at T 0.8 and 0.6) and Zipf 1.1 at T 1.0 and 0.8, top-p 0.9 (the raced columns:
the kept set), 37 parts. `python3 docs/cut_scored.py` prints, with the floor and with none:

    flat T 0.8: floor 0.111, none 0.975
    flat T 0.6: floor 0.111, none 0.976
    model T 1.0: floor 0.106, none 0.951
    model T 0.8: floor 0.046, none 0.106
"""
import numpy as np

LN2 = np.log(2.0)


def bound(w):
    t = (((~w) >> 9).astype(np.float64) * 2**-23 + 2**-24).astype(np.float32)
    return (127 - t.view(np.uint32).astype(np.float64) * 2**-23) * LN2 + 0.0045


def gumbel(w):
    u = (w >> 9).astype(np.float64) * 2**-23 + 2**-24
    return -np.log(-np.log(u))


def part(z, raced, w, share, block=256):
    steps = len(z) // (4 * block)
    Z, R, W = (a.reshape(steps, block, 4) for a in (z, raced, w))
    best = np.full(block, -np.inf)
    floor = -np.inf
    scored = slots = 0
    for s in range(steps):
        for j in range(4):
            zz, ww = Z[s, :, j], W[s, :, j]
            may = R[s, :, j] & (zz + np.abs(zz) * 2**-20 + bound(ww) >= np.maximum(best, floor))
            best = np.maximum(best, np.where(may, zz + gumbel(ww), -np.inf))
            scored += may.reshape(-1, 32).any(axis=1).sum()
            slots += block // 32
            if s == 0 and j in share:
                floor = best.max()
    return scored / slots


rng = np.random.default_rng(11)
V = 4096 * 37
for kind, T in [("flat", 0.8), ("flat", 0.6), ("model", 1.0), ("model", 0.8)]:
    res = {(0, 3): [], (): []}
    for rep in range(3):
        if kind == "flat":
            logits = 1e-3 * (-np.log(-np.log(rng.random(V))))
        else:
            logits = -1.1 * np.log(1 + V * rng.random(V))
        z = logits / T
        p = np.exp(z - z.max())
        p /= p.sum()
        order = np.argsort(-p)
        keep = np.zeros(V, bool)
        keep[order[: np.searchsorted(np.cumsum(p[order]), 0.9) + 1]] = True
        w = rng.integers(0, 2**32, V, dtype=np.uint64).astype(np.uint32)
        for share in res:
            parts = range(0, V, 4096)
            res[share].append(np.mean([part(z[i:i + 4096], keep[i:i + 4096], w[i:i + 4096], share) for i in parts]))
    print(f"{kind} T {T}: floor {np.mean(res[(0, 3)]):.3f}, none {np.mean(res[()]):.3f}")
