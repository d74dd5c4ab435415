"""Share of a part's keys that a top-p row's parts bin on the fine grid as well as the coarse one
(`xtask/src/kernels/filter_top_p.rs`, `histogram_part`: a key at or above the fine grid's lowest
bin, within 1023 bins of 2^-15 below the part's largest `z`), the cost model's `fine_share`
(`xtask/src/cost/model.rs`). Parts of 4096 columns of a row of 151936 (37 parts), three rows
each. `python3 docs/fine_share.py` prints:

    model T 0.6: 0.00025
    model T 0.8: 0.00025
    model T 1.0: 0.00026
    flat T 0.8: 1.00000

(a part's largest key and about one in 10,000 more).
"""
import numpy as np

rng = np.random.default_rng(5)
V, PART = 151936, 4096
for kind, T in [("model", 0.6), ("model", 0.8), ("model", 1.0), ("flat", 0.8)]:
    fine = keys = 0
    for rep in range(3):
        if kind == "flat":
            logits = 1e-3 * (-np.log(-np.log(rng.random(V))))
        else:
            logits = -1.1 * np.log(1 + V * rng.random(V))
        z = (logits / T).astype(np.float32)
        for p in range(0, V, PART):
            zp = z[p : p + PART].astype(np.float64)
            rf = np.ceil(zp.max() * 2**15)
            lowest = (rf - 1023) * 2**-15
            fine += (zp >= lowest).sum()
            keys += len(zp)
    print(f"{kind} T {T}: {fine / keys:.5f}")
