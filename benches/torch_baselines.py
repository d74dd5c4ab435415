#!/usr/bin/env python3
"""SGLang v0.5.20's torch sampling paths, timed on the grid of `benches/kernels.rs`.

The baselines the crate's kernels are measured against, written afresh in torch from the seed
documents' description of SGLang v0.5.20 (`shared/seeds/`, `shared/reference/SEMANTICS.md`), not
copied from SGLang, so they run with whatever torch the GPU machine has and no SGLang install:

- `torch_multinomial`: softmax of l/T, then `torch.multinomial` (v0.5.19, and v0.5.20's fallback);
- `torch_race`: softmax, then `probs / q` with `q = exponential_()` clamped to the smallest
  normal float32, then argmax (v0.5.20's fast path, SGLANG_OPT_USE_GUMBEL_SAMPLE);
- `torch_filtered_k*_p*_minp*`: the sort-based top-k / top-p / min-p path of SGLang's pytorch
  backend (sort descending, cumulative sum, zero the ranks at or past k, the tokens whose mass
  ranked before them exceeds p, and those below min_p times the largest; joint, all measured on
  the unfiltered distribution), then `torch.multinomial` on the kept mass and a gather;
- `torch_seeded`: `multinomial_with_seed` (--enable-deterministic-inference): float32 log of the
  float32 softmax, MurmurHash3 of (seed, position, column), Gumbel noise in float64 with the
  log capped at -2^-32, argmax of the sum (SGLang wraps it in torch.compile; `--compile` does too);
- `torch_greedy`: argmax of the logits; `torch_read`: a float32 row sum, torch's own plain read,
  whose best bandwidth is the `read_peak_gbps` of this file as `read_rows`' is of the crate's.

Every path starts from the logits (f32 or bf16, upcast to float32 as SGLang's logits are) and
ends with one token per row, as one decode step pays. Device time between two CUDA events around
each call: host stalls inside a path (multinomial's checks) count where they leave the device
idle between the events. Median and interquartile range of `--reps` calls after two warm-ups.

The CSV has the columns of `benches/kernels.rs`. `bytes_read` is one read of the logits (the
least any sampler reads) and `bytes_written` 0: torch's intermediate tensors are not counted, so
`gbps` is the effective bandwidth of one read. `ratio_to_race` is to `torch_race` on the same
cell (the crate's CSV compares with its own race from logits). It is written as the cells end
(the header first, then each row, flushed, with the figures of the cells so far), and rewritten
with the whole run's at the end; `--seconds S` stops before the first cell that would start
after S seconds. Without torch or a CUDA device it says so and writes the header alone.
`benches/flashinfer_baselines.py` times FlashInfer with the helpers here.

    python3 benches/torch_baselines.py OUT.csv [--full] [--reps N] [--compile] [--seconds S]
    python3 benches/torch_baselines.py --self-check   # the hash's known answers; no torch needed
"""

import argparse
import sys
import time

# The grids of benches/kernels.rs (FULL and QUICK there).
FULL = dict(batches=[1, 8, 32, 64, 256], vocabs=[32768, 128256, 151936], rows=["model_like", "peaked", "flat"], reps=50, cold=True)
QUICK = dict(batches=[1, 8, 32], vocabs=[32768, 151936], rows=["model_like", "peaked", "flat"], reps=10)
WARMUP = 2
TEMPERATURE = 0.8
# The logits formats by the CSV's name, as torch names them.
DTYPES = {"f32": "float32", "bf16": "bfloat16"}
TOP_K_ALL = 1 << 30  # SGLang's "whole vocabulary"
# (top_k, top_p, min_p): Qwen3's generation_config, top-k alone, top-p alone, min-p alone.
FILTERS = [(20, 0.95, 0.0), (20, 1.0, 0.0), (50, 1.0, 0.0), (TOP_K_ALL, 0.9, 0.0), (TOP_K_ALL, 0.95, 0.0), (TOP_K_ALL, 1.0, 0.05)]
CSV_HEADER = (
    "backend,device,clock,kernel,dtype,rows,batch,vocab,reps,median_us,q1_us,q3_us,"
    "bytes_read,bytes_written,gbps,read_peak_gbps,frac_read_peak,ratio_to_race,cache"
)
M32 = 0xFFFFFFFF

# ---------------------------------------------------------------------------------------------
# MurmurHash3_x86_32 of four words with seed 0, in operations that Python ints and torch int64
# tensors share (values stay below 2^48, so int64 never overflows): the hash runs on the host for
# the self-check and on the GPU for the baseline.


def _mul32(a, c):
    """(a * c) mod 2^32 for a < 2^32 and a constant c < 2^32, in 16-bit halves of c."""
    return (a * (c & 0xFFFF) + (((a * (c >> 16)) & 0xFFFF) << 16)) & M32


def _rotl(x, r):
    return ((x << r) & M32) | (x >> (32 - r))


def murmur3(words):
    h = 0
    for k in words:
        k = _mul32(_rotl(_mul32(k, 0xCC9E2D51), 15), 0x1B873593)
        h = k ^ h  # the tensor on the left: `0 ^ tensor` would need int to know tensors
        h = (_rotl(h, 13) * 5 + 0xE6546B64) & M32
    h = h ^ 16  # the length in bytes
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def seeded_hash(seed, position, column):
    """SEMANTICS.md: the words [seed lo, seed hi, position as u32, column as u32]."""
    return murmur3([seed & M32, seed >> 32, position & M32, column & M32])


# SEMANTICS.md's test vectors: (seed, position, column) -> hash.
HASH_VECTORS = [
    ((42, 0, 0), 0x6F610FE4),
    ((42, 0, 1), 0x6AC7E06F),
    ((42, 1, 0), 0xADB93A5D),
    ((0, 0, 0), 0x8134CDF8),
    ((7847, 12345, 1208), 0xFFFFFFFF),
]


def self_check():
    for args, want in HASH_VECTORS:
        got = seeded_hash(*args)
        assert got == want, f"murmur3{args} = {got:#010x}, want {want:#010x}"
    print(f"murmur3: {len(HASH_VECTORS)} known answers match")


# ---------------------------------------------------------------------------------------------
# The paths. Each takes the logits (batch x vocab) and the per-row tensors, returns tokens.


def make_paths(torch, compile_seeded):
    tiny = torch.finfo(torch.float32).tiny

    def softmax(logits, temps):
        return torch.softmax(logits.float() / temps, dim=-1)

    def read(logits, rows):
        return logits.sum(dim=-1, dtype=torch.float32)

    def greedy(logits, rows):
        return torch.argmax(logits, dim=-1)

    def multinomial(logits, rows):
        return torch.multinomial(softmax(logits, rows["temps"]), num_samples=1)

    def race(logits, rows):
        probs = softmax(logits, rows["temps"])
        q = torch.empty_like(probs, dtype=torch.float32).exponential_(1.0)
        q.clamp_min_(tiny)
        return (probs / q).argmax(dim=-1, keepdim=True)

    def filtered(top_k, top_p, min_p):
        def path(logits, rows):
            probs = softmax(logits, rows["temps"])
            batch = probs.shape[0]
            ks = torch.full((batch, 1), top_k, device=probs.device)
            ps = torch.full((batch, 1), top_p, device=probs.device)
            probs_sort, probs_idx = probs.sort(dim=-1, descending=True)
            # The mass ranked strictly before each token, from the unfiltered distribution.
            before = torch.cumsum(probs_sort, dim=-1) - probs_sort
            ranks = torch.arange(probs.shape[-1], device=probs.device).view(1, -1)
            probs_sort[ranks >= ks] = 0.0
            probs_sort[before > ps] = 0.0
            if min_p > 0:
                # The largest token is always kept, so column 0 is still the row's maximum.
                probs_sort[probs_sort < probs_sort[:, :1] * min_p] = 0.0
            picked = torch.multinomial(probs_sort, num_samples=1)
            return torch.gather(probs_idx, dim=1, index=picked)

        return path

    def seeded_scores(logprobs, seed_lo, seed_hi, positions):
        cols = torch.arange(logprobs.shape[1], device=logprobs.device, dtype=torch.int64).view(1, -1)
        h = murmur3([seed_lo, seed_hi, positions, cols])
        x = h.to(torch.float64) / float(M32)
        e = torch.clamp(torch.log(x), max=-(2.0**-32))
        return logprobs.to(torch.float64) - torch.log(-e)

    if compile_seeded:
        seeded_scores = torch.compile(seeded_scores, dynamic=True)

    def seeded(logits, rows):
        logprobs = torch.log(softmax(logits, rows["temps"]))
        scores = seeded_scores(logprobs, rows["seed_lo"], rows["seed_hi"], rows["positions"])
        return torch.argmax(scores, dim=1, keepdim=True)

    paths = [
        ("torch_read", read),
        ("torch_greedy", greedy),
        ("torch_multinomial", multinomial),
        ("torch_race", race),
        ("torch_seeded", seeded),
    ]
    for k, p, m in FILTERS:
        paths.append((filtered_name(k, p, m), filtered(k, p, m)))
    return paths


def filtered_name(top_k, top_p, min_p):
    return f"torch_filtered_k{'all' if top_k == TOP_K_ALL else top_k}_p{top_p}_minp{min_p}"


# ---------------------------------------------------------------------------------------------
# Rows: the definitions of benches/kernels.rs (`Rows`), drawn from torch's generator.


def make_logits(torch, kind, batch, vocab, gen, device):
    u = torch.rand((batch, vocab), generator=gen, device=device, dtype=torch.float64).clamp_min_(1e-12)
    if kind == "model_like":
        return (-1.1 * torch.log1p(vocab * u)).float()
    gumbel = -torch.log(-torch.log(u))
    if kind == "flat":
        return (1e-3 * gumbel).float()
    logits = gumbel.float()
    rows = torch.arange(batch, device=device)
    logits[rows, (rows * 7919) % vocab] += 25.0
    return logits


def stats(samples):
    """Median and quartiles by rank on the sorted samples, as benches/common/mod.rs."""
    s = sorted(samples)
    n = len(s)
    return s[n // 2], s[n // 4], s[3 * n // 4]


def time_path(torch, fn, logits, rows, reps, flush=None):
    """Median and quartiles in microseconds of `reps` calls after the warm-ups, each between two
    CUDA events; with `flush`, it runs before every call (warm-ups included), outside the events."""
    for _ in range(WARMUP):
        if flush:
            flush()
        fn(logits, rows)
    torch.cuda.synchronize()
    us = []
    for _ in range(reps):
        if flush:
            flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(logits, rows)
        end.record()
        end.synchronize()
        us.append(start.elapsed_time(end) * 1e3)
    return stats(us)


def make_flush(torch, device):
    """What the crate's bench reads before a cold call: four buffers of 64 MiB, four times an
    H200's 50 MB L2, so the call's first read of each row comes from DRAM (`benches/kernels.rs`)."""
    buffers = [torch.ones(16 << 20, device=device) for _ in range(4)]

    def flush():
        for b in buffers:
            b.sum()

    return flush


def cuda_device():
    """torch and its CUDA device, or None after saying why not (so a run without them still ends
    cleanly, its CSV the header alone)."""
    try:
        import torch
    except ImportError as e:
        print(f"torch: not run (no torch: {e})")
        return None
    if not torch.cuda.is_available():
        print("torch: not run (no CUDA device: these baselines time CUDA events)")
        return None
    return torch, torch.device("cuda")


class Csv:
    """A CSV of cells with the columns of `benches/kernels.rs`, written as they end: the header at
    once, then each row flushed, its `read_peak_gbps` and `ratio_to_race` from the cells so far
    (`read` and `race` name the kernels they come from); `close` prints the table and rewrites the
    file with the whole run's figures."""

    def __init__(self, path, read, race):
        self.path, self.read, self.race, self.records = path, read, race, []
        self.file = open(path, "w")
        self.file.write(CSV_HEADER + "\n")
        self.file.flush()

    def add(self, record):
        """`record`: backend, device, kernel, dtype, rows, cache, batch, vocab, reps, median, q1,
        q3, bytes_read."""
        record["gbps"] = record["bytes_read"] / record["median"] / 1e3
        self.records.append(record)
        self.file.write(self.line(record) + "\n")
        self.file.flush()

    def peak(self):
        return max((r["gbps"] for r in self.records if r["kernel"] == self.read), default=float("nan"))

    def ratio(self, r):
        cell = lambda o: (o["dtype"], o["rows"], o["cache"], o["batch"], o["vocab"])
        race = next((o["median"] for o in self.records if o["kernel"] == self.race and cell(o) == cell(r)), None)
        return r["median"] / race if race else None

    def line(self, r):
        peak, ratio = self.peak(), self.ratio(r)
        return (
            f"{r['backend']},\"{r['device']}\",device,{r['kernel']},{r['dtype']},{r['rows']},{r['batch']},{r['vocab']},"
            f"{r['reps']},{r['median']:.3f},{r['q1']:.3f},{r['q3']:.3f},{r['bytes_read']},0,{r['gbps']:.3f},"
            f"{peak:.3f},{r['gbps'] / peak:.4f},{'' if ratio is None else f'{ratio:.4f}'},{r['cache']}"
        )

    def close(self):
        self.file.close()
        if not self.records:
            print(f"wrote {self.path} (the header alone)")
            return
        print(f"clock: device (CUDA events); {self.read}'s best: {self.peak():.2f} GB/s")
        print(f"| backend | kernel | dtype | rows | cache | batch | vocab | median us [IQR] | GB/s (one read) | x read peak | x {self.race} |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in self.records:
            ratio = self.ratio(r)
            print(
                f"| {r['backend']} | {r['kernel']} | {r['dtype']} | {r['rows']} | {r['cache']} | {r['batch']} | {r['vocab']} | "
                f"{r['median']:.1f} [{r['q1']:.1f}, {r['q3']:.1f}] | {r['gbps']:.2f} | {r['gbps'] / self.peak():.3f} | "
                f"{'-' if ratio is None else f'{ratio:.2f}'} |"
            )
        with open(self.path, "w") as f:
            f.write("\n".join([CSV_HEADER] + [self.line(r) for r in self.records]) + "\n")
        print(f"wrote {self.path}")


def run(out_path, grid, compile_seeded, seconds=None):
    csv = Csv(out_path, read="torch_read", race="torch_race")
    found = cuda_device()
    if found:
        torch, device = found
        measure(torch, device, csv, make_paths(torch, compile_seeded), grid, seconds)
    csv.close()


def measure(torch, device, csv, paths, grid, seconds=None):
    """Every path of `paths` ((name, fn(logits, rows)), the backend named before the first `_`)
    on every cell of `grid` (warm, and with `grid["cold"]` cold for the first row kind in f32),
    each row into `csv`; stops before the first cell that would start after `seconds`. `rows`
    holds the per-row tensors, and the logits over the temperature (`scaled`) and their softmax
    (`probs`) for the same rows."""
    deadline = None if seconds is None else time.monotonic() + seconds
    name = torch.cuda.get_device_name(device)
    flush = make_flush(torch, device) if grid.get("cold") else None
    gen = torch.Generator(device=device)
    gen.manual_seed(0)
    for vocab in grid["vocabs"]:
        most = max(grid["batches"])
        seeds = torch.arange(most, device=device, dtype=torch.int64) + 1000
        rows_all = dict(
            temps=torch.full((most, 1), TEMPERATURE, device=device),
            seed_lo=(seeds & M32).view(-1, 1),
            seed_hi=(seeds >> 32).view(-1, 1),
            positions=torch.full((most, 1), 7, device=device, dtype=torch.int64),
        )
        for kind in grid["rows"]:
            host = make_logits(torch, kind, most, vocab, gen, device)
            # For paths that take no temperature (FlashInfer's from logits) and those from
            # probabilities: computed here, outside the timing.
            scaled = host / TEMPERATURE
            probs = torch.softmax(scaled, dim=-1)
            for dtype_name in grid.get("dtypes", DTYPES):
                dtype = getattr(torch, DTYPES[dtype_name])
                logits_all, scaled_all = host.to(dtype), scaled.to(dtype)
                caches = [("warm", None)] + ([("cold", flush)] if flush and kind == grid["rows"][0] and dtype_name == "f32" else [])
                for path_name, fn in paths:
                    for cache, before in caches:
                        for batch in grid["batches"]:
                            if deadline is not None and time.monotonic() >= deadline:
                                print(f"stopped at the time limit ({seconds} s), after {len(csv.records)} cells")
                                return
                            logits = logits_all[:batch]
                            rows = {k: v[:batch] for k, v in rows_all.items()}
                            rows.update(scaled=scaled_all[:batch], probs=probs[:batch])
                            median, q1, q3 = time_path(torch, fn, logits, rows, grid["reps"], before)
                            csv.add(
                                dict(
                                    backend=path_name.split("_")[0],
                                    device=name,
                                    kernel=path_name,
                                    dtype=dtype_name,
                                    rows=kind,
                                    cache=cache,
                                    batch=batch,
                                    vocab=vocab,
                                    reps=grid["reps"],
                                    median=median,
                                    q1=q1,
                                    q3=q3,
                                    bytes_read=batch * vocab * logits.element_size(),
                                )
                            )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", help="the CSV to write")
    ap.add_argument("--full", action="store_true", help="the whole grid (default: the quick subset)")
    ap.add_argument("--reps", type=int, help="timed calls per cell")
    ap.add_argument("--compile", action="store_true", help="torch.compile the seeded path, as SGLang does")
    ap.add_argument("--seconds", type=float, help="stop before the first cell that would start after this")
    ap.add_argument("--self-check", action="store_true", help="check the hash's known answers and exit")
    args = ap.parse_args()
    self_check()
    if args.self_check:
        return
    if not args.out:
        ap.error("the output CSV path is required")
    grid = dict(FULL if args.full else QUICK)
    if args.reps:
        grid["reps"] = args.reps
    run(args.out, grid, args.compile, args.seconds)


if __name__ == "__main__":
    main()
