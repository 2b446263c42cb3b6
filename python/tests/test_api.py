"""Every binding on hand-worked inputs, array-likes (lists, __array__ objects), and the errors."""

import numpy as np
import pytest

import moepolicy as mp


class TensorLike:
    """What a CPU torch tensor offers numpy: __array__."""

    def __init__(self, a):
        self.a = np.asarray(a)

    def __array__(self, dtype=None):
        return self.a if dtype is None else self.a.astype(dtype)


def test_version_and_policies():
    assert mp.__version__.count(".") == 2
    names = [n for n, _ in mp.eviction_policies()]
    assert names[:4] == ["score-aware", "sticky-lru", "ema-score", "lru"] and "belady" in names


def test_expert_cache_lru_by_hand():
    c = mp.ExpertCache("lru", 2, 4, 2)
    assert c.access(0, [0, 1]).tolist() == [False, False]
    assert c.access(0, TensorLike([[1, 2]])).tolist() == [[True, False]]  # 0 evicted (least recent)
    assert c.victim() == (0, 1) and c.contains(0, 2) and not c.contains(0, 0)
    c.end_step()
    assert c.stats["hits"] == 1 and c.stats["evictions"] == 1 and c.resident_count == 2
    assert c.policy == "lru" and c.capacity == 2
    c.reset_stats()
    assert c.stats["accesses"] == 0
    c.clear()
    assert c.resident_count == 0 and c.victim() is None
    per_layer = mp.ExpertCache("fifo", 2, 4, 1, per_layer=True)
    per_layer.access(0, [3]), per_layer.access(1, [2])
    assert per_layer.victim(0) == (0, 3) and per_layer.victim(1) == (1, 2)
    # Repeated ids in a batch are one access; every occurrence reports that access.
    assert mp.ExpertCache("lfu", 1, 4, 4).access(0, [[1, 2], [2, 1]]).tolist() == [[False, False], [False, False]]


def test_expert_cache_bytes_and_score_policies():
    c = mp.ExpertCache("lru", 1, 4, 300, unit="bytes", footprints=[100, 200, 100, 100])
    c.access(0, [0, 1])
    assert c.stats["demand_bytes"] == 300
    s = mp.ExpertCache("score-aware", 1, 4, 2)
    assert s.access(0, [[0, 1]], weights=[[0.7, 0.3]]).tolist() == [[False, False]]
    s.access(0, [[2, 0]], scores=[[0.5, 0.0, 0.4, 0.1]])
    assert s.resident_count == 2
    # size-aware takes its sizes from a bytes-unit cache: after 0 1 1, expert 1 (4 bytes,
    # interval 1) costs more than expert 0 (1 byte, idle 2) and goes; pred-reuse evicts 0.
    for policy, victim in (("size-aware", (0, 1)), ("pred-reuse", (0, 0))):
        c = mp.ExpertCache(policy, 1, 3, 5, unit="bytes", footprints=[1, 4, 1])
        for e in (0, 1, 1):
            c.access(0, [e])
        assert c.victim() == victim


def test_hints_gate_sticky_lru_admission():
    c = mp.ExpertCache("sticky-lru", 1, 4, 2)
    c.access(0, [1])
    assert c.resident_count == 0  # not hinted: served, not cached
    c.hint(0, [1, 2], confidence=[0.9, 0.2])
    c.access(0, [1, 2])
    assert c.contains(0, 1) and not c.contains(0, 2)  # 2's confidence is below the threshold 0.5
    with pytest.raises(ValueError, match=r"moepolicy::ExpertCache.hint: confidence must be in \[0, 1\], element 0, got 2"):
        c.hint(0, [1], 2.0)


def test_expert_cache_errors():
    with pytest.raises(ValueError, match=r"moepolicy::ExpertCache: belady reads the future"):
        mp.ExpertCache("belady", 1, 4, 2)
    with pytest.raises(ValueError, match=r'unknown eviction policy \(known: score-aware, .*\), got "nope"'):
        mp.ExpertCache("nope", 1, 4, 2)
    c = mp.ExpertCache("lru", 2, 4, 2)
    with pytest.raises(ValueError, match=r"moepolicy::ExpertCache.access: layer must be < num_layers 2, got 2"):
        c.access(2, [0])
    with pytest.raises(ValueError, match=r"experts must be in \[0, 3\], element 1, got 4"):
        c.access(0, [0, 4])
    with pytest.raises(ValueError, match=r"experts must be in \[0, 3\], element 0, got -1"):
        c.access(0, [-1])
    with pytest.raises(ValueError, match=r"must hold integers \(a float array is not truncated\), dtype, got \"float64\""):
        c.access(0, np.array([1.0]))
    with pytest.raises(ValueError, match=r"pass weights or scores, policy, got \"score-aware\""):
        mp.ExpertCache("score-aware", 1, 4, 2).access(0, [1])
    with pytest.raises(ValueError, match=r"weights must be finite and >= 0, element 0, got nan"):
        c.access(0, [1], weights=[np.nan])
    with pytest.raises(ValueError, match=r'unit must be "experts" or "bytes", got "kb"'):
        mp.ExpertCache("lru", 1, 4, 2, unit="kb")
    with pytest.raises(ValueError, match=r"moepolicy::expert_cache"):
        mp.ExpertCache("lru", 0, 4, 2)


def test_replay_options(trace):
    decode = mp.replay_cache(trace, "lru", 256, decode=True, prefill=False)
    both = mp.replay_cache(trace, "lru", 256)
    assert decode["accesses"] < both["accesses"] and decode["layer_accesses"].sum() == decode["accesses"]
    assert mp.replay_cache(trace, "belady", 256)["hits"] >= both["hits"]  # Belady bounds LRU
    cold = mp.replay_cache(trace, "lru", 256, reset_between_requests=True)
    assert cold["hits"] <= both["hits"]
    curve = mp.lru_hit_curve(trace)
    assert curve["hits"][256] == both["hits"] and curve["accesses"] == both["accesses"]
    assert mp.lru_hit_curve(trace, per_layer=True)["hits"][11] == mp.replay_cache(trace, "lru", 11, per_layer=True)["hits"]
    layers, experts = mp.replay_accesses(trace)
    assert len(layers) == both["accesses"] and experts.max() < 32
    with pytest.raises(ValueError, match=r"moepolicy::replay_cache: replay prefill, decode or both"):
        mp.replay_cache(trace, "lru", 8, prefill=False, decode=False)


def test_two_pointer_by_hand():
    b = mp.TwoPointerBalancer(cpu_seconds_per_token=1.0, load_seconds=2.0)
    r = b.balance(np.array([5, 1, 3], dtype=np.int64))
    # Sorted 5, 3, 1: load 5 (C_load 2), CPU 1 (C_cpu 1), CPU 3 (C_cpu 4).
    assert r.sides.tolist() == [0, 1, 1] and (r.load_seconds, r.cpu_seconds, r.makespan) == (2.0, 4.0, 4.0)
    assert (r.loaded, r.on_cpu) == (1, 2)
    o = b.balance_optimal(TensorLike([5, 1, 3]))
    assert o.makespan <= r.makespan
    x = mp.balance_exact([2.0, 2.0, 2.0], [5.0, 1.0, 3.0])
    assert x.makespan == 4.0 and x.makespan <= o.makespan
    big = b.balance(np.array([5, 1, 3], dtype=">i8"))  # another byte order is converted, not misread
    assert big.sides.tolist() == r.sides.tolist() and b.balance_optimal(np.array([5, 1, 3], ">u2")).makespan == o.makespan
    with pytest.raises(ValueError, match=r"moepolicy::two_pointer_balancer: load_seconds must be finite and >= 0"):
        mp.TwoPointerBalancer(1.0, -1.0)
    with pytest.raises(ValueError, match=r"at most max_items = 2 experts, size, got 3"):
        mp.TwoPointerBalancer(1.0, 1.0, max_items=2).balance([1, 2, 3])
    with pytest.raises(ValueError, match=r"moepolicy::balance_exact: at most 24 items can be enumerated, got 25"):
        mp.balance_exact(np.ones(25), np.ones(25))


def test_router_substitutes_by_hand():
    r = mp.Router(4, 1, alpha=0.3)
    # Token selects expert 0 (score 0.40); beta = 0.38 (expert 1), T = 0.494: 0 is low-score;
    # alternative 1 (R = 0.266 <= 0.38 <= L) is resident, so it replaces 0.
    ids, w, stats = r.route([[0]], [[0.4]], scores=[[0.40, 0.38, 0.12, 0.10]], resident=[0, 1, 0, 0])
    assert ids.tolist() == [[1]] and w.tolist() == [[pytest.approx(0.38)]]
    assert stats["substituted"] == 1 and stats["full_scores"]
    with pytest.raises(ValueError, match=r"moepolicy::Router.route: token 0 selects an expert twice, expert, got 1"):
        mp.Router(4, 2).route([[1, 1]], [[0.5, 0.5]])
    with pytest.raises(ValueError, match=r"moepolicy::expert_cache_router: alpha must be in \[0, 1\]"):
        mp.Router(4, 1, alpha=2.0)


def test_makespan_solver_by_hand():
    inf = np.inf
    exec_ = [[1.0, 2.0, inf], [1.0, 2.0, inf], [1.0, 2.0, 0.5]]
    for name in ("trimoe", "local-search", "exact"):
        r = mp.MakespanSolver(name).solve(exec_, [0.0, 0.0, 0.0], home=[-1, -1, 0], num_dimms=1)
        assert r["makespan"] >= r["lower_bound"] - 1e-15
        assert len(r["assignment"]) == 3 and r["status"] in ("optimal", "heuristic")
    best = mp.MakespanSolver("exact").solve(exec_, [0.0, 0.0, 0.0], home=[-1, -1, 0])
    # Experts 0 and 1 share the GPU (1 + 1) or split GPU/CPU (max(1, 2)): 2 either way; 2 runs on its DIMM.
    assert best["makespan"] == 2.0 and best["assignment"][2] == 2 and best["status"] == "optimal"
    with pytest.raises(ValueError, match=r"unknown solver \(known: trimoe, local-search, exact\), got \"x\""):
        mp.MakespanSolver("x")
    with pytest.raises(ValueError, match=r"moepolicy::makespan_problem::add: the ndp option needs a localized expert"):
        mp.MakespanSolver().solve([[1.0, 1.0, 1.0]], [0.0])
    with pytest.raises(ValueError, match=r"exec must have 3 columns \(gpu, cpu, ndp\), got 2"):
        mp.MakespanSolver().solve([[1.0, 1.0]], [0.0])
    with pytest.raises(ValueError, match=r"rows must be grouped by step in ascending order; row 1 has step, got 0"):
        mp.solve_steps([1, 0], [[1, 1, inf]] * 2, [0, 0])


def test_predictors_by_hand():
    p = mp.EmaLoadPredictor(1, 4, alpha=0.5, hot_share=0.5, cold_share=0.1)
    p.update(0, [4, 2, 0, 2])
    p.update(0, np.array([0.0, 2.0, 2.0, 2.0]))
    assert p.predicted_loads(0).tolist() == [2.0, 2.0, 1.0, 2.0] and p.updates(0) == 2
    # Hot while the share before an expert is below 1/2 (experts 0, 1: 0 and 2/7 before them);
    # expert 2's 1/7 is above the cold share 0.1, so nothing is cold.
    assert p.predicted_classes(0).tolist() == [2, 2, 1, 1]
    with pytest.raises(ValueError, match=r"moepolicy::EmaLoadPredictor.update: loads \(one per expert\) must have 4"):
        p.update(0, [1, 2])
    with pytest.raises(ValueError, match=r"layer must be < num_layers 1, got 1"):
        p.predicted_loads(1)
    p.reset()
    assert p.updates(0) == 0
    s = mp.PrecisionTargetSelector(1, 4, 2, mode="none")
    t, up, down = s.select(0, [0.1, 0.9, 0.5, 0.0])
    assert t.tolist() == [1, 2] and up.tolist() == [1, 2] and down.tolist() == []
    t, up, down = s.select(0, [0.9, 0.1, 0.5, 0.0])
    assert t.tolist() == [0, 2] and up.tolist() == [0] and down.tolist() == [1]
    s.set_capacity(0, 1)
    assert s.select(0, [0.9, 0.1, 0.5, 0.0])[0].tolist() == [0]
    t, _, _ = mp.PrecisionTargetSelector(2, 4, [1, 2]).select(1, [1, 2, 3, 4], current=[1, 0, 0, 0])
    assert t.tolist() == [3, 2]
    with pytest.raises(ValueError, match=r"mode must be none, margin or rank_slack, got \"x\""):
        mp.PrecisionTargetSelector(1, 4, 2, mode="x")
    with pytest.raises(ValueError, match=r"hotness must not be NaN, element, got 0"):
        s.select(0, [np.nan, 0, 0, 0])


def test_allocation_and_placement_by_hand():
    loss = np.array([[4.0, 1.0], [4.0, 2.0], [4.0, 3.0]])  # rows in descending importance
    a = mp.prefix_split([2, 4], loss, 8.0 / 3.0)  # budget: 3 * (8/3 - 2) / 2 = 1 expert at 4 bits
    assert a["status"] == "ok" and a["level_of"].tolist() == [1, 0, 0] and a["gain"] == 3.0
    x = mp.exact_allocation([2, 4], loss, 8.0 / 3.0, min_count=[0, 1])
    assert x["level_of"].tolist() == [1, 0, 0]
    with pytest.raises(ValueError, match=r"moepolicy::prefix_split: average_bits must be in \[2, 32\]"):
        mp.prefix_split([2, 4], loss, 1.0)
    with pytest.raises(ValueError, match=r"form must be exact or at_most, got \"x\""):
        mp.prefix_split([2, 4], loss, 3.0, form="x")
    counts = np.array([[5.0, 1.0, 3.0, 0.0]])
    plan = mp.place_from_prefill(counts, counts, gpu_experts_per_layer=1, select_bitwidths=False, uniform_bits=4)
    assert plan["tier"].tolist() == [[0, 1, 1, 1]] and plan["bits"].tolist() == [[16, 4, 4, 4]]
    with pytest.raises(ValueError, match=r"moepolicy::place_from_prefill: selecting bitwidths needs a loss table"):
        mp.place_from_prefill(counts, counts)


def test_batched_steps(trace):
    s = mp.batched_decode_steps(trace, 4)
    c = mp.batched_decode_steps(trace, 4, formation="consecutive_tokens")
    assert s.shape == c.shape and s.shape[1:] == (24, 32) and s.dtype == np.uint32
    assert (s.sum(axis=2) == 4 * 8).all()  # 4 tokens x top-8 per layer
    with pytest.raises(ValueError, match=r"moepolicy::make_batched_decode_steps: batch_size must be >= 1, got 0"):
        mp.batched_decode_steps(trace, 0)


def test_rebalance_experts_deepseek_example():
    # The example of DeepSeek EPLB's README: 2 layers, 12 experts, 16 replicas, 4 groups, 2 nodes, 8 GPUs.
    weight = TensorLike([[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
                         [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]])
    p2l, l2p, cnt = mp.rebalance_experts(weight, 16, 4, 2, 8, algorithm="deepseek")
    assert p2l.tolist() == [[5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1],
                            [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1]]
    assert p2l.dtype == l2p.dtype == cnt.dtype == np.int64
    assert l2p.shape == (2, 12, 5) and cnt.shape == (2, 12) and (cnt.sum(axis=1) == 16).all()
    for l in range(2):
        for e in range(12):
            slots = l2p[l, e][l2p[l, e] >= 0]
            assert len(slots) == cnt[l, e] and (p2l[l, slots] == e).all()
    w = np.asarray(weight.a, dtype=float)

    def max_gpu_load(p2l, cnt):
        per_slot = w[np.arange(2)[:, None], p2l] / cnt[np.arange(2)[:, None], p2l]
        return per_slot.reshape(2, 8, 2).sum(axis=2).max(axis=1)

    ours = mp.rebalance_experts(weight, 16, 4, 2, 8)
    assert (max_gpu_load(ours[0], ours[2]) <= max_gpu_load(p2l, cnt) + 1e-9).all()
    again = mp.rebalance_experts(weight, 16, 4, 2, 8, current=ours[0], balance_tolerance=0.1)
    assert np.array_equal(again[0], ours[0])  # the current placement is kept: nothing moves
    with pytest.raises(ValueError, match=r"algorithm must be moepolicy or deepseek, got \"x\""):
        mp.rebalance_experts(weight, 16, 4, 2, 8, algorithm="x")
    with pytest.raises(ValueError, match=r"replicas must be >= the 12 logical experts, got 8"):
        mp.rebalance_experts(weight, 8, 4, 2, 8)
    with pytest.raises(ValueError, match=r"load of layer 0, expert 0 must be finite and >= 0, got -1"):
        mp.rebalance_experts([[-1.0] * 12], 16, 4, 2, 8)


def test_stubs_and_docstrings_cover_the_module():
    import ast
    import pathlib

    import moepolicy._core as core

    stub = ast.parse((pathlib.Path(mp.__file__).parent / "_core.pyi").read_text())
    stubbed = {n.name for n in stub.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    public = {n for n in dir(core) if not n.startswith("_")}
    assert public == stubbed
    for name in public - {"ParseError"}:
        assert getattr(core, name).__doc__, name


def test_long_calls_run_in_threads(trace):
    """Long calls release the GIL: replays on two threads give the single-threaded answers."""
    from concurrent.futures import ThreadPoolExecutor

    want = {p: mp.replay_cache(trace, p, 256)["hits"] for p in ("lru", "belady")}
    with ThreadPoolExecutor(2) as pool:
        got = dict(zip(want, pool.map(lambda p: mp.replay_cache(trace, p, 256)["hits"], want)))
    assert got == want
