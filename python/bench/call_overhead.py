#!/usr/bin/env python3
"""The cost of calling the library from Python, beside the C++ time of the same calls.

    PYTHONPATH=build/<dir>/python python3 python/bench/call_overhead.py [--cache-bench PATH]

Two per-step calls, on the inputs the C++ benchmarks use (bench/cache_bench.cpp):
  - one cache access of a layer: ExpertCache("lru") and ExpertCache("score-aware") fed the
    bundled Granite trace batch by batch (ids and gate weights, 256 experts shared, end_step
    after each forward pass), against cache_bench's evict_any_lru and evict_score_aware, which
    replay the same batches through the same cache (one batch per iteration);
  - the two-pointer balancer (Edge-MoE Alg. 2) on decode-like batch sizes for 8, 64 and 256
    experts, against cache_bench's balance_alg2 (sizes drawn the same way: 1 + (0..3), times 8
    with probability 1/8).
The C++ figures come from running cache_bench (Google Benchmark, JSON output); without it the
script prints the Python side alone. Times are per call (per batch for the cache), the median
of --repeat runs; "overhead" is Python minus C++: argument conversion and checks, the result
array, and the interpreter.
"""

import argparse
import glob
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np

import moepolicy as mp

ROOT = pathlib.Path(__file__).resolve().parents[2]
TRACE = ROOT / "examples" / "traces" / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace"


def cache_batches(t):
    """Each batch's (layer, ids, weights, ends a step), in replay order."""
    b, steps = t.batches(), t.steps()
    last = np.zeros(len(b["first_row"]), bool)
    last[steps["first_batch"] + steps["num_batches"] - 1] = True
    return [(int(b["layer"][i]), t.experts[f:f + n], t.weights[f:f + n], bool(last[i]))
            for i, (f, n) in enumerate(zip(b["first_row"], b["num_rows"]))]


def time_cache(policy, batches, repeat):
    runs = []
    for _ in range(repeat):
        cache = mp.ExpertCache(policy, 24, 32, 256)
        start = time.perf_counter()
        for layer, ids, w, last in batches:
            cache.access(layer, ids, w)
            if last:
                cache.end_step()
        runs.append((time.perf_counter() - start) / len(batches))
    return float(np.median(runs)) * 1e9, cache.stats["accesses"] / len(batches)


def time_balancer(n, repeat, calls=20000):
    rng = np.random.default_rng(77)
    sizes = [(1 + rng.integers(0, 4, n) * np.where(rng.integers(0, 8, n) == 0, 8, 1)).astype(np.uint32)
             for _ in range(64)]
    bal = mp.TwoPointerBalancer(1e-4, 3e-4)
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for i in range(calls):
            bal.balance(sizes[i & 63])
        runs.append((time.perf_counter() - start) / calls)
    return float(np.median(runs)) * 1e9


def cpp_times(exe, min_time):
    if exe is None:
        return {}
    flt = "^(evict_any_lru|evict_score_aware|balance_alg2/experts:(8|64|256))$"
    out = subprocess.run([exe, f"--benchmark_filter={flt}", "--benchmark_format=json",
                          f"--benchmark_min_time={min_time}"], check=True, capture_output=True, text=True).stdout
    scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    return {b["name"]: b["real_time"] * scale[b["time_unit"]] for b in json.loads(out)["benchmarks"]}


def find_cache_bench():
    for pattern in ("build/*/bench/cache_bench", "build/bench/cache_bench"):
        found = sorted(glob.glob(str(ROOT / pattern)))
        if found:
            return found[0]
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache-bench", help="the cache_bench binary (default: the first build/*/bench/cache_bench)")
    ap.add_argument("--no-cpp", action="store_true", help="time the Python side only")
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure; the median is printed")
    ap.add_argument("--min-time", type=float, default=0.2, help="Google Benchmark's --benchmark_min_time")
    args = ap.parse_args()
    exe = None if args.no_cpp else (args.cache_bench or find_cache_bench())
    cpp = cpp_times(exe, args.min_time)
    print(f"C++: {exe if exe else 'not run'}")
    print(f"{'call':50s} {'C++ ns':>10s} {'Python ns':>10s} {'overhead':>10s} {'ratio':>7s}")

    def row(label, py_ns, cpp_name):
        c = cpp.get(cpp_name)
        if c is None:
            print(f"{label:50s} {'-':>10s} {py_ns:10.0f} {'-':>10s} {'-':>7s}")
        else:
            print(f"{label:50s} {c:10.0f} {py_ns:10.0f} {py_ns - c:10.0f} {py_ns / c:7.1f}")

    batches = cache_batches(mp.read_trace(TRACE))
    for policy, name in (("lru", "evict_any_lru"), ("score-aware", "evict_score_aware")):
        ns, per = time_cache(policy, batches, args.repeat)
        row(f"ExpertCache('{policy}').access ({per:.1f} accesses)", ns, name)
    for n in (8, 64, 256):
        row(f"TwoPointerBalancer.balance ({n} experts)", time_balancer(n, args.repeat), f"balance_alg2/experts:{n}")


if __name__ == "__main__":
    sys.exit(main())
