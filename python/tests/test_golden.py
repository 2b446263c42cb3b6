"""The module's results equal the C++ library's on the bundled trace (python_golden prints them)."""

import numpy as np
import pytest

import moepolicy as mp

BATCH = 8  # as golden.cpp


@pytest.fixture(scope="module")
def steps(trace):
    return mp.batched_decode_steps(trace, BATCH)


def test_replay_every_policy(trace, golden):
    assert golden["rows"] == trace.num_rows
    for name, _ in mp.eviction_policies():
        for capacity in (64, 256):
            for per_layer in (False, True):
                cap = capacity // trace.num_layers + 1 if per_layer else capacity
                key = f"{name}/{'per_layer' if per_layer else 'shared'}/{cap}"
                r = mp.replay_cache(trace, name, cap, per_layer=per_layer)
                want = golden["replay"][key]
                assert (r["hits"], r["misses"], r["evictions"], r["rejections"]) == (
                    want["hits"], want["misses"], want["evictions"], want["rejections"]), key
                assert r["layer_hits"].tolist() == want["layer_hits"], key


def test_online_cache_equals_replay(trace, golden):
    """Driving ExpertCache batch by batch reproduces the C++ replay of every online policy."""
    for name, _ in mp.eviction_policies():
        if name == "belady":
            continue
        cache = mp.ExpertCache(name, trace.num_layers, trace.num_experts, 64)
        experts, weights, layer = trace.experts, trace.weights, trace.layer
        req, step = trace.request, trace.step
        # Batch boundaries: where (request, step, layer) changes; steps: where (request, step) changes.
        key = (req.astype(np.int64) << 40) | (step.astype(np.int64) << 16) | layer
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        ends = np.r_[starts[1:], len(key)]
        for b, (s, e) in enumerate(zip(starts, ends)):
            cache.access(int(layer[s]), experts[s:e], weights[s:e])
            if e == len(key) or (req[e] != req[s] or step[e] != step[s]):
                cache.end_step()
        want = golden["replay"][f"{name}/shared/64"]
        assert cache.stats["hits"] == want["hits"], name
        assert cache.stats["evictions"] == want["evictions"], name


def test_lru_hit_curve(trace, golden):
    assert mp.lru_hit_curve(trace)["hits"].tolist() == golden["lru_hit_curve"]


def test_batched_steps(steps, golden):
    assert steps.shape[0] == golden["batched_steps"]
    weights = np.arange(1, steps.shape[1] + 1, dtype=np.uint64)[None, :, None]
    assert (steps.astype(np.uint64) * weights).sum(axis=(1, 2)).tolist() == golden["batched_checksum"]


def test_balancers(steps, golden):
    bal = mp.TwoPointerBalancer(1e-4, 3e-4)
    i = 0
    for s in range(steps.shape[0]):
        for l in range(steps.shape[1]):
            sizes = steps[s, l][steps[s, l] > 0]
            r = bal.balance(sizes)
            assert r.makespan == golden["balance"]["alg2"][i]["makespan"]
            assert r.sides.tolist() == golden["balance"]["alg2"][i]["sides"]
            assert bal.balance_optimal(sizes).makespan == golden["balance"]["optimal"][i]
            if golden["balance"]["exact"][i] is not None:
                x = mp.balance_exact(np.full(len(sizes), 3e-4), sizes * 1e-4)
                assert x.makespan == golden["balance"]["exact"][i]
            i += 1


def step_problem(loads):
    """Layer 0 of one batched step, priced as golden.cpp prices it."""
    e = np.flatnonzero(loads)
    L = loads[e].astype(np.float64)
    resident = e % 3 == 0
    exec_ = np.empty((len(e), 3))
    exec_[:, 0] = 1e-5 * L + np.where(resident, 0.0, 2e-4)
    exec_[:, 1] = 5e-5 * L
    exec_[:, 2] = np.where(e % 2 == 0, 4e-5 * L, np.inf)
    home = np.where(e % 2 == 0, e % 4, -1)
    return exec_, np.full(len(e), 1e-4), home, resident


def test_makespan_solvers(steps, golden):
    for solver in ("local-search", "trimoe", "exact"):
        s = mp.MakespanSolver(solver)
        got = [s.solve(*step_problem(steps[t, 0]), num_dimms=4)["makespan"] for t in range(steps.shape[0])]
        assert got == golden["schedule"][solver], solver
    bounds = [mp.MakespanSolver("trimoe").solve(*step_problem(steps[t, 0]), num_dimms=4)["lower_bound"]
              for t in range(steps.shape[0])]
    assert bounds == golden["schedule"]["lower_bound"]
    # All steps in one call give the same answers.
    rows = [step_problem(steps[t, 0]) for t in range(steps.shape[0])]
    step_of = np.concatenate([np.full(len(r[1]), t) for t, r in enumerate(rows)])
    many = mp.solve_steps(step_of, *(np.concatenate([r[i] for r in rows]) for i in range(4)), num_dimms=4,
                          solver="local-search")
    assert many["makespan"].tolist() == golden["schedule"]["local-search"]


def test_predictors(steps, golden):
    ema = mp.EmaLoadPredictor(steps.shape[1], steps.shape[2])
    sel = mp.PrecisionTargetSelector(steps.shape[1], steps.shape[2], 8)
    for s in range(steps.shape[0]):
        for l in range(steps.shape[1]):
            ema.update(l, steps[s, l])
        target, promote, demote = sel.select(0, ema.predicted_loads(0))
        assert [target.tolist(), promote.tolist(), demote.tolist()] == golden["predict"]["targets_layer0"][s]
    assert ema.predicted_loads(5).tolist() == golden["predict"]["ema_loads_layer5"]
    assert ema.predicted_classes(5).tolist() == golden["predict"]["ema_classes_layer5"]


def counts_of(trace, prefill_only=False):
    L, E = trace.num_layers, trace.num_experts
    rows = trace.phase == 0 if prefill_only else np.ones(trace.num_rows, bool)
    flat = (trace.layer[rows].astype(np.int64)[:, None] * E + trace.experts[rows]).ravel()
    return np.bincount(flat, minlength=L * E).astype(np.float64).reshape(L, E)


def test_allocations_placement_and_eplb(trace, golden):
    g = golden["alloc"]
    counts = counts_of(trace)
    bits = [2, 3, 4, 8]
    losses = (counts[..., None] + 1.0) / np.array([2.0 ** b for b in bits])
    for form in ("exact", "at_most"):
        a = mp.prefix_split(bits, losses[0], 3.0, form=form)
        x = mp.exact_allocation(bits, losses[0], 3.0, form=form)
        assert a["level_of"].tolist() == g[f"prefix_split/{form}"]["level_of"]
        assert a["gain"] == g[f"prefix_split/{form}"]["gain"]
        assert x["level_of"].tolist() == g[f"exact/{form}"]["level_of"]
        assert x["gain"] == g[f"exact/{form}"]["gain"]
    prefill = counts_of(trace, prefill_only=True)
    # Weight sums in row order, as golden.cpp adds them.
    sums = np.zeros(trace.num_layers * trace.num_experts)
    rows = np.flatnonzero(trace.phase == 0)
    flat = (trace.layer[rows].astype(np.int64)[:, None] * trace.num_experts + trace.experts[rows]).ravel()
    np.add.at(sums, flat, trace.weights[rows].astype(np.float64).ravel())
    np.testing.assert_allclose(sums, g["prefill_weight_sums"], rtol=1e-12)
    plan = mp.place_from_prefill(prefill, np.array(g["prefill_weight_sums"]).reshape(prefill.shape), losses, bits,
                                 gpu_experts_per_layer=4, ndp_average_bits=3.0)
    assert plan["tier"].ravel().tolist() == g["place/tier"]
    assert plan["bits"].ravel().tolist() == g["place/bits"]
    for algorithm in ("deepseek", "moepolicy"):
        p2l, l2p, cnt = mp.rebalance_experts(counts, 48, 4, 2, 8, algorithm=algorithm)
        assert p2l.ravel().tolist() == g[f"eplb/{algorithm}/p2l"], algorithm
    assert cnt.ravel().tolist() == g["eplb/moepolicy/count"]


def test_router(trace, golden):
    r = mp.Router(trace.num_experts, trace.top_k, alpha=0.3)
    resident = np.arange(trace.num_experts) < 16
    layer3 = np.flatnonzero(trace.layer == 3)
    key = (trace.request[layer3].astype(np.int64) << 32) | trace.step[layer3]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    ends = np.r_[starts[1:], len(key)]
    got = []
    for s, e in zip(starts, ends):
        rows = layer3[s:e]
        ids, w, stats = r.route(trace.experts[rows], trace.weights[rows], resident=resident)
        assert np.array_equal(ids, trace.experts[rows])  # no scores: every token keeps its routing
        got.append([stats["unscored"], stats["top_score"], stats["substituted"], stats["full_scores"]])
    assert got == golden["router"]
