"""Warp-level shares of the top-p cut's Philox loop on flat rows (`xtask/src/kernels/filter_top_p.rs`,
`cut_part`), the shares of the cost model's flat rows (`xtask/src/cost/model.rs`, `flat_race`).

A part of 4096 columns, 256 invocations, a quad each a step (four steps). A column above the cut's
range races: where its noise bound (`race.rs`, `noise_bound`) reaches the larger of its
invocation's largest lower bound so far and the workgroup's floor, it takes the race's screen (two
fast logs, bounds within 2^-11 and 2^-20 relative of its exact score), not its exact score; the
floor is the workgroup's largest lower bound, shared after each invocation's first column and after
its first quad. After the first step, a quad whose raced columns' largest `z` with their largest
Philox word's noise bound cannot reach that is skipped whole (the quad test); else each raced column
is tested the same way alone, in column order. The range's tokens (the fine bin of 2^-15 in `z`
that holds the cut) do not race in the loop (`race_tied_range`). A warp runs a path where any of its
32 lanes does. Rows: flat (noise of 1e-3 at T 0.8 and 0.6) and Zipf 1.1 at T 1.0 and 0.8, top-p 0.9,
37 parts. `python3 docs/cut_scored.py` prints the shares of quad steps whose columns are tested
alone and of column slots screened, and the same loop before 2026-12-06 (each column that passed
scored exactly, each invocation's first screened, and the range's tokens raced in the loop against
their invocation's own best with no floor) with its shares of column slots scored exactly, above
the range and in it:

    flat T 0.8: quads 0.123, screened 0.055 | before: exact 0.056 above, 0.123 range
    flat T 0.6: quads 0.115, screened 0.056 | before: exact 0.056 above, 0.163 range
    model T 1.0: quads 0.146, screened 0.051 | before: exact 0.052 above, 0.001 range
    model T 0.8: quads 0.127, screened 0.045 | before: exact 0.044 above, 0.001 range

So the cost model's flat rows counted a third of the exact scores the loop ran before (the range's
were not counted), and count the screen now at 5.6% of the column slots.
"""
import numpy as np

LN2 = np.log(2.0)
FINE = 2.0**-15


def bound(w):
    t = (((~w) >> 9).astype(np.float64) * 2**-23 + 2**-24).astype(np.float32)
    return (127 - t.view(np.uint32).astype(np.float64) * 2**-23) * LN2 + 0.0045


def gumbel(w):
    u = (w >> 9).astype(np.float64) * 2**-23 + 2**-24
    return -np.log(-np.log(u))


def any_lane(m):
    return m.reshape(-1, 32).any(axis=1).sum()


def noise_floor(w):
    """A lower bound on the Gumbel noise of word w from its bits (no log): ln u - ln t - slack."""
    u = ((w >> 9).astype(np.float64) * 2**-23 + 2**-24).astype(np.float32)
    t = (np.float32(1) - u).astype(np.float32)
    lg = lambda x: x.view(np.uint32).astype(np.float64) * 2**-23 - 127
    return (lg(u) - lg(t) - 0.0861) * LN2 - 0.0045


def reach(z, w, floor):
    return z + np.abs(z) * 2**-20 + bound(w) >= floor


def part(z, above, in_range, w, block=256):
    """The loop's shares on one part: (quads, screened) now, (exact above, exact in range) before."""
    steps = len(z) // (4 * block)
    Z, A, R, W = (a.reshape(steps, block, 4) for a in (z, above, in_range, w))
    S = Z + gumbel(W)
    D = np.abs(Z) * 2**-20 + 2**-11
    warps = block // 32
    slots = 4 * steps * warps

    # Now: the floor from the first columns' bits, then a test a quad in every step, each raced
    # column of a quad that passes tested alone, and screened where it passes; lower bounds
    # are the floor.
    a0 = A[0, :, 0]
    lo = np.full(block, np.where(a0, Z[0, :, 0] - np.abs(Z[0, :, 0]) * 2**-20 + noise_floor(W[0, :, 0]), -np.inf).max())
    quads = screened = 0
    for s in range(steps):
        zq = np.where(A[s], Z[s], -1e30).max(axis=1)
        wq = W[s].max(axis=1).astype(np.uint32)
        tested = A[s].any(axis=1) & reach(zq, wq, lo)
        quads += any_lane(tested)
        for j in range(4):
            may = tested & A[s, :, j] & reach(Z[s, :, j], W[s, :, j], lo)
            lo = np.maximum(lo, np.where(may, S[s, :, j] - D[s, :, j], -np.inf))
            screened += any_lane(may)
        if s == 0:
            lo = np.full(block, lo.max())

    # Before: the first column screened and scored exactly where its bound reached the floor,
    # the others scored exactly where they passed; range tokens against their own best alone.
    best = np.full(block, -np.inf)
    best_r = np.full(block, -np.inf)
    z0, w0, a0 = Z[0, :, 0], W[0, :, 0], A[0, :, 0]
    floor = np.where(a0, S[0, :, 0] - D[0, :, 0], -np.inf).max()
    first = a0 & (S[0, :, 0] + D[0, :, 0] >= floor)
    best = np.where(first, S[0, :, 0], best)
    exact = any_lane(first)
    exact_r = 0
    for s in range(steps):
        tested = (A[s] | R[s]).any(axis=1)
        if s > 0:
            zq = np.where(A[s], Z[s], -1e30).max(axis=1)
            wq = np.where(A[s], W[s], 0).max(axis=1).astype(np.uint32)
            tested &= reach(zq, wq, np.maximum(best, floor)) | R[s].any(axis=1)
        for j in range(1 if s == 0 else 0, 4):
            may = tested & A[s, :, j] & reach(Z[s, :, j], W[s, :, j], np.maximum(best, floor))
            best = np.maximum(best, np.where(may, S[s, :, j], -np.inf))
            exact += any_lane(may)
        for j in range(4):
            may = R[s, :, j] & reach(Z[s, :, j], W[s, :, j], best_r)
            best_r = np.maximum(best_r, np.where(may, S[s, :, j], -np.inf))
            exact_r += any_lane(may)
        if s == 0:
            floor = max(floor, best.max())
    return quads / (steps * warps), screened / slots, exact / slots, exact_r / slots


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
        last = order[np.searchsorted(np.cumsum(p[order]), 0.9)]
        # The range: the fine bin holding the last kept token; above it, the rest of the set.
        edge = np.floor(z[last] / FINE) * FINE
        in_range = (z >= edge) & (z < edge + FINE)
        above = z >= edge + FINE
        w = rng.integers(0, 2**32, V, dtype=np.uint64).astype(np.uint32)
        res += [part(*(a[i:i + 4096] for a in (z, above, in_range, w))) for i in range(0, V, 4096)]
    q, scr, ex, ex_r = np.mean(res, axis=0)
    print(f"{kind} T {T}: quads {q:.3f}, screened {scr:.3f} | before: exact {ex:.3f} above, {ex_r:.3f} range")
