#!/usr/bin/env python3
"""Modelled beside measured: every cell of a GPU run's kernels-bench CSVs (`cuda.csv`, one per
stage of `cargo xtask bundle-device`'s run) next to the cost model's figure for the same call,
dtype, batch, vocabulary, cache and GPU, from `bench-results/model/cost.csv` (`cargo xtask
cost`, which `cargo xtask bundle-device` runs and packs, so the figures are the bundled
commit's). Writes the joined CSV and prints the median and worst error (modelled / measured - 1)
by call and by row kind, so each GPU run checks the model.

The model's figure is for model-like rows (the benchmark's Zipf rows). A measured cell of flat
rows is set beside the call's flat figure where the model has one (`<call>_flat`: the top-p and
min-p settings, whose flat rows keep most of the row and race it), and beside its plain figure
otherwise (the model prices those calls' flat rows alike); peaked rows beside the plain figure.
Cells the model has no figure for (FlashInfer's and torch's, the filters from probabilities at
other settings) are counted and left out.

    python3 benches/model_vs_measured.py bench-results/model/cost.csv OUT.csv MEASURED.csv...
"""

import csv
import statistics
import sys

# The model's targets by the architecture the bench writes in its device column.
TARGETS = {"sm_90": "H200", "sm_75": "T4"}
COLUMNS = ["kernel", "model_call", "dtype", "rows", "batch", "vocab", "cache", "target", "measured_us", "modelled_us", "error", "bound"]


def model_call(modelled, r, target):
    """The cost model's row for a measured cell, or None."""
    key = lambda call: (call, r["dtype"], r["batch"], r["vocab"], target)
    if r["rows"] == "flat" and key(r["kernel"] + "_flat") in modelled:
        return modelled[key(r["kernel"] + "_flat")]
    return modelled.get(key(r["kernel"]))


def main(cost_path, out_path, *measured_paths):
    with open(cost_path, newline="") as f:
        modelled = {(r["call"], r["dtype"], r["batch"], r["vocab"], r["target"]): r for r in csv.DictReader(f)}
    joined, unmodelled = [], 0
    for path in measured_paths:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                target = next((t for arch, t in TARGETS.items() if arch in r["device"]), None)
                m = model_call(modelled, r, target)
                if m is None:
                    unmodelled += 1
                    continue
                # Cold cells (L2 flushed before each call) beside the model's cold figure.
                cache = r.get("cache") or "warm"
                measured = float(r["median_us"])
                model = float(m["modelled_cold_us" if cache == "cold" else "modelled_us"])
                joined.append(dict(
                    kernel=r["kernel"], model_call=m["call"], dtype=r["dtype"], rows=r["rows"], batch=r["batch"],
                    vocab=r["vocab"], cache=cache, target=target, measured_us=f"{measured:.3f}",
                    modelled_us=f"{model:.3f}", error=f"{model / measured - 1:.4f}", bound=m["bound"],
                ))
    with open(out_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(joined)
    if not joined:
        print(f"modelled beside measured: no measured cell has a modelled figure ({unmodelled} without); "
              f"{out_path} has the header alone")
        return 0
    summary("all", joined)
    for field in ("rows", "cache", "model_call"):
        for value in sorted({r[field] for r in joined}):
            summary(f"{field} {value}", [r for r in joined if r[field] == value])
    print(f"{unmodelled} measured cells have no modelled figure; {out_path}")
    return 0


def summary(label, rows):
    errors = [float(r["error"]) for r in rows]
    worst = max(errors, key=abs)
    print(f"modelled beside measured, {label}: {len(rows)} cells, median error {statistics.median(errors):+.1%}, "
          f"median |error| {statistics.median(abs(e) for e in errors):.1%}, worst {worst:+.1%}")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__.split("\n\n")[-1])
    sys.exit(main(*sys.argv[1:]))
