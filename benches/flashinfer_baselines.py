#!/usr/bin/env python3
"""FlashInfer 0.7.2's sampling kernels beside torch's sort path, on the cells of a GPU run.

The anchor an engine would pick instead of this crate, timed the way `benches/kernels.rs` times
the crate (CUDA events around each call, two warm-ups, median and quartiles by rank of `--reps`
calls; cold cells read four 64 MiB buffers before each call, outside the events), on f32 logits
of batch 1, 32 and 256 x 151936, model-like rows warm and cold and flat rows warm, at
temperature 0.8:

- `flashinfer_sampling_from_logits`: `sampling_from_logits`;
- `flashinfer_qwen3_joint`, `flashinfer_qwen3_k_first`: `top_k_top_p_sampling_from_logits` with
  top-k 20 and top-p 0.95, `filter_apply_order` "joint" and "top_k_first";
- `flashinfer_top_p_0.9`, `flashinfer_min_p_0.05`, `flashinfer_top_k_50`: `softmax`, then
  `top_p_sampling_from_probs(0.9)`, `min_p_sampling_from_probs(0.05)`,
  `top_k_sampling_from_probs(50)`: the whole step from logits;
- `flashinfer_probs_*`: the same three from probabilities already in memory (the crate's
  `filter_probs_*` cells), and `flashinfer_softmax` alone;
- torch, in the same run: `torch_read` (a row sum, the read yardstick), `torch_race` (SGLang
  v0.5.20's fast path, the `ratio_to_race` yardstick of every row) and the sort-based filter
  path of `benches/torch_baselines.py` at the same settings.

FlashInfer's functions from logits take no temperature: they get the logits over 0.8, computed
outside the timed region, and FlashInfer's softmax gets the temperature. FlashInfer is loaded
without its package's `__init__` (which imports every kernel family FlashInfer has), its
`sampling` and `topk` modules built ahead for sm_90a, so nothing compiles on the GPU machine:
`benches/flashinfer_prepare.sh` makes the folder to carry. Where FlashInfer does not load, the
run says why and times torch alone; without torch or a CUDA device it says so and writes the
CSV's header alone. One CSV, the columns of `benches/kernels.rs`, written as the cells end.

    python3 benches/flashinfer_baselines.py OUT.csv [--reps N] [--seconds S]
    python3 benches/flashinfer_baselines.py --check-load   # load FlashInfer's modules and exit
"""

import argparse
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_baselines as tb  # noqa: E402

GRID = dict(batches=[1, 32, 256], vocabs=[151936], rows=["model_like", "flat"], dtypes=["f32"], reps=50, cold=True)
# torch's paths beside FlashInfer's: the yardsticks, and the sort path at the same settings.
TORCH = ["torch_read", "torch_race"] + [tb.filtered_name(k, p, m) for k, p, m in [(20, 0.95, 0.0), (50, 1.0, 0.0), (tb.TOP_K_ALL, 0.9, 0.0), (tb.TOP_K_ALL, 1.0, 0.05)]]
VERSION = "0.7.2"


def load_flashinfer():
    """FlashInfer with its `sampling` module's kernels loaded, or None and the reason it is not;
    then whether its `topk` module's loaded (None) or why not (top-k first's fast path needs it).
    The package is found on the path but its `__init__` is not run: a stand-in module holds its
    path, so only the modules sampling imports are read (the carried folder has no others)."""
    import importlib.util

    # Never compile here: a module missing from the carried folder is an error, not a build.
    os.environ.setdefault("FLASHINFER_DISABLE_JIT", "1")
    try:
        spec = importlib.util.find_spec("flashinfer")
        if spec is None or not spec.submodule_search_locations:
            return None, "no flashinfer package on the path (benches/flashinfer_prepare.sh makes one)", None
        if "flashinfer" not in sys.modules:
            package = types.ModuleType("flashinfer")
            package.__path__ = list(spec.submodule_search_locations)
            sys.modules["flashinfer"] = package
        import flashinfer.sampling
        import flashinfer.topk
        from flashinfer.version import __version__

        if __version__ != VERSION:
            return None, f"flashinfer {__version__}, not {VERSION}", None
        flashinfer.sampling.get_sampling_module()
    except Exception as e:  # any failure to load is the finding: say it and time torch alone
        return None, f"{type(e).__name__}: {e}", None
    try:
        flashinfer.topk.get_topk_module()
        return flashinfer, None, None
    except Exception as e:
        return flashinfer, None, f"{type(e).__name__}: {e}"


def flashinfer_paths(fi, with_topk):
    """The paths of the module docstring; without the top-k module, not top-k first's."""
    s = fi.sampling
    t = tb.TEMPERATURE

    def from_probs(name, sample, param):
        return [
            (f"flashinfer_{name}", lambda logits, rows: sample(s.softmax(logits, temperature=t), param)),
            (f"flashinfer_probs_{name}", lambda logits, rows: sample(rows["probs"], param)),
        ]

    def qwen3(order):
        return lambda logits, rows: s.top_k_top_p_sampling_from_logits(rows["scaled"], 20, 0.95, filter_apply_order=order)

    return [
        ("flashinfer_sampling_from_logits", lambda logits, rows: s.sampling_from_logits(rows["scaled"])),
        ("flashinfer_softmax", lambda logits, rows: s.softmax(logits, temperature=t)),
        ("flashinfer_qwen3_joint", qwen3("joint")),
        *([("flashinfer_qwen3_k_first", qwen3("top_k_first"))] if with_topk else []),
        *from_probs("top_p_0.9", s.top_p_sampling_from_probs, 0.9),
        *from_probs("min_p_0.05", s.min_p_sampling_from_probs, 0.05),
        *from_probs("top_k_50", s.top_k_sampling_from_probs, 50),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", help="the CSV to write")
    ap.add_argument("--reps", type=int, default=GRID["reps"], help="timed calls per cell")
    ap.add_argument("--seconds", type=float, help="stop before the first cell that would start after this")
    ap.add_argument("--check-load", action="store_true", help="load FlashInfer's modules, say so, and exit")
    args = ap.parse_args()
    if args.check_load:
        fi, why, topk_why = load_flashinfer()
        print(f"flashinfer {VERSION}: sampling module " + ("loaded" if fi else f"not loaded ({why})"))
        if fi:
            print("flashinfer: topk module " + ("loaded" if topk_why is None else f"not loaded ({topk_why})"))
        sys.exit(0 if fi and topk_why is None else 1)
    if not args.out:
        ap.error("the output CSV path is required")
    csv = tb.Csv(args.out, read="torch_read", race="torch_race")
    found = tb.cuda_device()
    if found:
        torch, device = found
        paths = [p for p in tb.make_paths(torch, compile_seeded=False) if p[0] in TORCH]
        fi, why, topk_why = load_flashinfer()
        if fi:
            print(f"flashinfer {VERSION}: loaded")
            if topk_why:
                print(f"flashinfer_qwen3_k_first: not run (its top-k module: {topk_why})")
            paths += flashinfer_paths(fi, with_topk=topk_why is None)
        else:
            print(f"flashinfer: not run ({why})")
        tb.measure(torch, device, csv, paths, dict(GRID, reps=args.reps), args.seconds)
    else:
        print("flashinfer: not run (it needs torch and a CUDA device)")
    csv.close()


if __name__ == "__main__":
    main()
