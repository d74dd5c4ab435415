#!/usr/bin/env python3
"""Modelled beside measured: every cell of a GPU run's kernels-bench CSV (`cuda.csv`) next to the
cost model's figure for the same call, dtype, batch, vocabulary and GPU, from
`bench-results/model/cost.csv` (`cargo xtask cost`, which `cargo xtask bundle-device` runs and
packs, so the figures are the bundled commit's). Writes the joined CSV and prints the median and
worst error (modelled / measured - 1), so each GPU run checks the model.

    python3 benches/model_vs_measured.py bench-results/model/cost.csv cuda.csv model_vs_measured.csv
"""

import csv
import statistics
import sys

# The model's targets by the architecture the bench writes in its device column.
TARGETS = {"sm_90": "H200", "sm_75": "T4"}


def main(cost_path: str, measured_path: str, out_path: str) -> int:
    with open(cost_path, newline="") as f:
        modelled = {(r["call"], r["dtype"], r["batch"], r["vocab"], r["target"]): r for r in csv.DictReader(f)}
    joined = []
    with open(measured_path, newline="") as f:
        for r in csv.DictReader(f):
            target = next((t for arch, t in TARGETS.items() if arch in r["device"]), None)
            m = modelled.get((r["kernel"], r["dtype"], r["batch"], r["vocab"], target))
            if m is None:
                continue
            # Cold cells (L2 flushed before each call) beside the model's cold figure.
            cache = r.get("cache", "warm")
            measured = float(r["median_us"])
            model = float(m["modelled_cold_us" if cache == "cold" else "modelled_us"])
            joined.append({
                "kernel": r["kernel"], "dtype": r["dtype"], "rows": r["rows"], "batch": r["batch"],
                "vocab": r["vocab"], "cache": cache, "target": target, "measured_us": f"{measured:.3f}",
                "modelled_us": f"{model:.3f}", "error": f"{model / measured - 1:.4f}", "bound": m["bound"],
            })
    if not joined:
        print(f"no cell of {measured_path} has a modelled figure in {cost_path}")
        return 1
    with open(out_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(joined[0]))
        writer.writeheader()
        writer.writerows(joined)
    errors = sorted(abs(float(r["error"])) for r in joined)
    print(f"modelled beside measured: {len(joined)} cells, median |error| {statistics.median(errors):.1%}, "
          f"worst {errors[-1]:.1%}; {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
