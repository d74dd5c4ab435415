"""Warp-level shares of the top-p cut's Philox loop on flat rows (`xtask/src/kernels/filter_top_p.rs`,
`cut_part`), the shares of the cost model's flat rows (`xtask/src/cost/model.rs`, `flat_race`).

A part of 4096 columns, 256 invocations, a quad each a step (four steps). An invocation's first
column takes the race's screen (two fast logs, within 2^-11 and 2^-20 relative of its exact
score) and not its exact score: the workgroup's floor after it is the largest screened lower
bound, and the first column is scored exactly only where its upper bound reaches that floor.
After the first step, a quad whose raced columns' largest `z` with their largest Philox word's
noise bound (`race.rs`, `noise_bound`) cannot reach the larger of its invocation's best so far
and the floor is skipped whole (the quad test); else each raced column is tested the same way
alone, in column order, and scored exactly where it passes. The floor is raised to the
workgroup's best again after the first quad. A warp runs a path where any of its 32 lanes does.
Rows: flat (noise of 1e-3 at T 0.8 and 0.6) and Zipf 1.1 at T 1.0 and 0.8, top-p 0.9 (the
raced columns: the kept set), 37 parts. `python3 docs/cut_scored.py` prints the shares of quad
steps whose columns are tested alone and of column slots scored exactly:

    flat T 0.8: quads 0.121, exact 0.056
    flat T 0.6: quads 0.116, exact 0.056
    model T 1.0: quads 0.145, exact 0.052
    model T 0.8: quads 0.123, exact 0.044

Before (2026-12-05), every invocation scored its first column exactly, and every raced column
was tested alone: 11.1% of a flat row's column slots were scored exactly.
"""
import numpy as np

LN2 = np.log(2.0)


def bound(w):
    t = (((~w) >> 9).astype(np.float64) * 2**-23 + 2**-24).astype(np.float32)
    return (127 - t.view(np.uint32).astype(np.float64) * 2**-23) * LN2 + 0.0045


def gumbel(w):
    u = (w >> 9).astype(np.float64) * 2**-23 + 2**-24
    return -np.log(-np.log(u))


def part(z, raced, w, block=256):
    steps = len(z) // (4 * block)
    Z, R, W = (a.reshape(steps, block, 4) for a in (z, raced, w))
    best = np.full(block, -np.inf)
    quads = exact = 0
    warps = block // 32
    any_lane = lambda m: m.reshape(-1, 32).any(axis=1).sum()
    # The first column: screened bounds, the floor, then the exact score where its bound reaches it.
    z0, w0, r0 = Z[0, :, 0], W[0, :, 0], R[0, :, 0]
    s0 = z0 + gumbel(w0)
    d = np.abs(z0) * 2**-20 + 2**-11
    floor = np.where(r0, s0 - d, -np.inf).max()
    first = r0 & (s0 + d >= floor)
    best = np.where(first, s0, best)
    exact += any_lane(first)
    for s in range(steps):
        tested = R[s].any(axis=1)
        if s > 0:
            zq = np.where(R[s], Z[s], -1e30).max(axis=1)
            wq = np.where(R[s], W[s], 0).max(axis=1).astype(np.uint32)
            tested &= zq + np.abs(zq) * 2**-20 + bound(wq) >= np.maximum(best, floor)
            quads += any_lane(tested)
        for j in range(1 if s == 0 else 0, 4):
            zz, ww = Z[s, :, j], W[s, :, j]
            may = tested & R[s, :, j] & (zz + np.abs(zz) * 2**-20 + bound(ww) >= np.maximum(best, floor))
            best = np.maximum(best, np.where(may, zz + gumbel(ww), -np.inf))
            exact += any_lane(may)
        if s == 0:
            floor = max(floor, best.max())
    return quads / ((steps - 1) * warps), exact / (4 * steps * warps)


rng = np.random.default_rng(11)
V = 4096 * 37
for kind, T in [("flat", 0.8), ("flat", 0.6), ("model", 1.0), ("model", 0.8)]:
    res = []
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
        res += [part(z[i:i + 4096], keep[i:i + 4096], w[i:i + 4096]) for i in range(0, V, 4096)]
    q, e = np.mean(res, axis=0)
    print(f"{kind} T {T}: quads {q:.3f}, exact {e:.3f}")
