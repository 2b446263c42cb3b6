#!/usr/bin/env python3
"""Replays the bundled Granite trace through every eviction policy and prints what each does.

    PYTHONPATH=build/<dir>/python python3 examples/python/replay_bundled_trace.py [TRACE]

(or without PYTHONPATH after `pip install`). For the trace given (default: the bundled
Granite-3.1-1B-A400M trace), prints: the trace; each policy's demand hit ratio with a shared
cache of a third of the experts, beside Belady's bound and the LRU hit curve; the
two-pointer balancer against its optimum on batched decode steps; and an expert-parallel
placement by DeepSeek EPLB and by the library's rebalancer. Text only: no plotting needed.
"""

import pathlib
import sys

import numpy as np

import moepolicy as mp

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT = HERE.parent / "traces" / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace"


def main(path):
    t = mp.read_trace(path)
    print(f"{t.model}: {t.num_rows} rows, {t.num_layers} layers x {t.num_experts} experts, top-{t.top_k}, "
          f"{len(t.request_names)} requests ({mp.detect_trace_format(path)})")

    capacity = t.num_layers * t.num_experts // 3
    print(f"\nDemand caching, shared cache of {capacity} experts (a third of {t.num_layers * t.num_experts}):")
    for name, summary in mp.eviction_policies():
        r = mp.replay_cache(t, name, capacity)
        print(f"  {name:12s} hit ratio {r['hit_ratio']:.4f}  ({r['hits']} of {r['accesses']})  {summary}")
    print("  (sticky-lru admits only misses a predictor hinted, ExpertCache.hint: replayed without hints it caches nothing)")
    curve = mp.lru_hit_curve(t)
    points = [c for c in (64, 128, 256, 384, 512, 768) if c < len(curve["hits"])]
    print("  LRU hit curve: " + ", ".join(f"{c}: {curve['hits'][c] / curve['accesses']:.3f}" for c in points))

    steps = mp.batched_decode_steps(t, 8)
    bal = mp.TwoPointerBalancer(cpu_seconds_per_token=1e-4, load_seconds=3e-4)
    alg2 = optimal = 0.0
    for s in range(steps.shape[0]):
        for layer in range(steps.shape[1]):
            sizes = steps[s, layer][steps[s, layer] > 0]
            alg2 += bal.balance(sizes).makespan
            optimal += bal.balance_optimal(sizes).makespan
    print(f"\nTwo-pointer balancer on {steps.shape[0]} batched decode steps of 8 sequences: "
          f"{alg2 * 1e3:.2f} ms of layer waits, optimum {optimal * 1e3:.2f} ms ({alg2 / optimal - 1:+.2%})")

    counts = np.zeros((t.num_layers, t.num_experts))
    np.add.at(counts, (t.layer[:, None].astype(np.int64), t.experts.astype(np.int64)), 1.0)
    print(f"\nExpert-parallel placement of the selection counts, {2 * t.num_experts} slots on 8 GPUs:")
    for algorithm in ("deepseek", "moepolicy"):
        p2l, _, cnt = mp.rebalance_experts(counts, 2 * t.num_experts, 4, 2, 8, algorithm=algorithm)
        per_slot = np.take_along_axis(counts, p2l, axis=1) / np.take_along_axis(cnt, p2l, axis=1)
        gpu = per_slot.reshape(t.num_layers, 8, -1).sum(axis=2)
        print(f"  {algorithm:9s} mean max/mean GPU load {np.mean(gpu.max(axis=1) / gpu.mean(axis=1)):.4f}")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT)
