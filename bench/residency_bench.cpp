// Costs of DynaExq's policy and mechanism (DynaExq): interval hotness on real routing,
// target-set selection per layer for E = 8 … 512, handle resolution in a pinned window (once
// per routed expert, three times as gate/up/down launches would, and after publications
// landed during the window), pinning a window, and transition throughput with the host
// mover. Each sits beside a floor that only reads the same inputs once (or, for resolution,
// only loads an atomic pointer; for pinning, only announces and withdraws an epoch; for
// transitions, only copies the same bytes); the ratio policy/floor is the figure to quote.
//
// Inputs are built outside the timed loops: the bundled Granite trace (24 layers, 32
// experts, top-8) for ingest and handle resolution; for the E sweep, Zipf-like hotness
// (exponent 1.1, fixed seed) with 64 drifted copies, so that consecutive intervals differ
// as they do in a replay and the hysteresis has work to do.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <vector>

#include "moepolicy/predict/hotness.hpp"
#include "moepolicy/predict/precision_target.hpp"
#include "moepolicy/residency/transition_queue.hpp"
#include "bundled_trace.hpp"
#include "moepolicy/trace/canonical.hpp"

namespace {

using namespace moepolicy;

const routing_trace& granite() { return moepolicy::bench::bundled_granite(); }

// ---------------------------------------------------------------------------------------
// Hotness: counting a batch's selections (real routing) and ending an interval.

void BM_hotness_observe(benchmark::State& state) {
  const routing_trace& t = granite();
  hotness_estimator h(t.info().num_layers, t.info().num_experts);
  for (auto _ : state) {
    for (const auto& b : t.batches()) {
      const auto v = t.view(b);
      h.observe(v.ref.layer, v.experts);
    }
    benchmark::DoNotOptimize(h.counts(0).data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(t.num_rows() * t.info().top_k));
  state.SetLabel("Granite bundled trace, selections");
}
BENCHMARK(BM_hotness_observe);

void BM_hotness_observe_floor(benchmark::State& state) {
  const routing_trace& t = granite();
  for (auto _ : state) {
    std::uint64_t sum = 0;
    for (const auto& b : t.batches()) {
      const auto v = t.view(b);
      sum += v.ref.layer;
      for (auto e : v.experts) sum += e;
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(t.num_rows() * t.info().top_k));
  state.SetLabel("floor: read the same ids");
}
BENCHMARK(BM_hotness_observe_floor);

// End of an interval for a model of L layers × E experts (Args: L, E).
void BM_hotness_end_interval(benchmark::State& state) {
  const auto L = static_cast<std::size_t>(state.range(0)), E = static_cast<std::size_t>(state.range(1));
  hotness_estimator h(L, E);
  std::mt19937 rng(7);
  for (std::size_t l = 0; l < L; ++l) {
    for (std::size_t e = 0; e < E; ++e) h.observe(static_cast<layer_id>(l), static_cast<expert_id>(e), rng() % 100);
  }
  for (auto _ : state) {
    h.end_interval();
    benchmark::DoNotOptimize(h.hotness(0).data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(L * E));
}
BENCHMARK(BM_hotness_end_interval)->Args({48, 128})->Args({58, 256});

void BM_hotness_end_interval_floor(benchmark::State& state) {
  const auto L = static_cast<std::size_t>(state.range(0)), E = static_cast<std::size_t>(state.range(1));
  std::vector<std::uint64_t> counts(L * E, 3);
  std::vector<double> hot(L * E, 1.0);
  for (auto _ : state) {
    std::uint64_t x = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) x ^= counts[i] ^ std::bit_cast<std::uint64_t>(hot[i]);
    benchmark::DoNotOptimize(x);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(L * E));
  state.SetLabel("floor: read counters and hotness once");
}
BENCHMARK(BM_hotness_end_interval_floor)->Args({48, 128})->Args({58, 256});

// ---------------------------------------------------------------------------------------
// Target-set selection of one layer, n = E / 4 (Arg: E).

std::vector<std::vector<double>> drifting_hotness(std::size_t E) {
  std::mt19937_64 rng(2024);
  std::vector<double> base(E);
  std::vector<std::size_t> perm(E);
  std::iota(perm.begin(), perm.end(), std::size_t{0});
  std::shuffle(perm.begin(), perm.end(), rng);
  for (std::size_t r = 0; r < E; ++r) base[perm[r]] = 1000.0 / std::pow(static_cast<double>(r + 1), 1.1);
  std::lognormal_distribution<double> noise(0.0, 0.3);
  std::vector<std::vector<double>> out(64, base);
  for (auto& h : out) {
    for (auto& x : h) x *= noise(rng);
  }
  return out;
}

void target_select(benchmark::State& state, const precision_target_config& config) {
  const auto E = static_cast<std::size_t>(state.range(0));
  const auto inputs = drifting_hotness(E);
  precision_target_selector sel(1, E, static_cast<std::uint32_t>(E / 4), config);
  std::size_t i = 0, changes = 0;
  for (auto _ : state) {
    const layer_target t = sel.select(0, inputs[i++ % inputs.size()]);
    changes += t.promote.size();
    benchmark::DoNotOptimize(t.target.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(E));
  state.counters["promotions/call"] = benchmark::Counter(
      static_cast<double>(changes) / static_cast<double>(std::max<std::int64_t>(state.iterations(), 1)));
}

void BM_target_select_topn(benchmark::State& state) { target_select(state, {.mode = target_hysteresis::none}); }
void BM_target_select_margin(benchmark::State& state) {
  target_select(state, {.mode = target_hysteresis::margin, .margin = 1.0});
}
void BM_target_select_rank_slack(benchmark::State& state) {
  target_select(state, {.mode = target_hysteresis::rank_slack, .rank_slack = 2});
}
BENCHMARK(BM_target_select_topn)->RangeMultiplier(2)->Range(8, 512);
BENCHMARK(BM_target_select_margin)->RangeMultiplier(2)->Range(8, 512);
BENCHMARK(BM_target_select_rank_slack)->RangeMultiplier(2)->Range(8, 512);

void BM_target_select_floor(benchmark::State& state) {
  const auto E = static_cast<std::size_t>(state.range(0));
  const auto inputs = drifting_hotness(E);
  std::vector<std::uint8_t> member(E, 0);
  std::size_t i = 0;
  for (auto _ : state) {
    const auto& h = inputs[i++ % inputs.size()];
    std::uint64_t x = 0;
    for (std::size_t e = 0; e < E; ++e) x ^= std::bit_cast<std::uint64_t>(h[e]) ^ member[e];
    benchmark::DoNotOptimize(x);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(E));
  state.SetLabel("floor: read hotness and membership once");
}
BENCHMARK(BM_target_select_floor)->RangeMultiplier(2)->Range(8, 512);

// ---------------------------------------------------------------------------------------
// Handle resolution: one pinned window resolves every routed expert of the Granite trace's
// first 4096 rows, in trace order.

struct resolve_fixture {
  std::size_t L, E;
  std::vector<std::byte> bytes;
  residency_budget budget;
  block_pool lo_pool, hi_pool;
  versioned_expert_table table;
  transition_pipeline<host_memcpy_mover> pipe;
  std::vector<expert_handle> handles;  // in routing order: the experts a forward pass resolves

  resolve_fixture()
      : L(granite().info().num_layers),
        E(granite().info().num_experts),
        bytes(256, std::byte{1}),
        budget({.high_bytes = 256 * L * E, .low_bytes = 256 * L * E}),
        lo_pool(256, L * E, 64),
        hi_pool(256, L * E, 64),
        table(L, E),
        pipe(table, budget, lo_pool, hi_pool, [this](expert_key, precision_tier) {
          return version_source{bytes, 0, 4};
        }) {
    if (pipe.load_all() != residency_load_status::ok) std::abort();
    const routing_trace& t = granite();
    for (const auto& b : t.batches()) {
      const auto v = t.view(b);
      for (auto e : v.experts) handles.push_back(table.handle({v.ref.layer, e}));
      if (handles.size() >= 4096 * t.info().top_k) break;
    }
  }
};

resolve_fixture& shared_fixture() {
  static resolve_fixture f;
  return f;
}

void BM_resolve(benchmark::State& state) {
  resolve_fixture& f = shared_fixture();
  auto reader = f.table.register_reader();
  auto guard = reader.pin();
  for (auto _ : state) {
    for (const expert_handle& h : f.handles) {
      const expert_version& v = h.resolve(guard);
      benchmark::DoNotOptimize(&v);
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(f.handles.size()));
  state.SetLabel("one seq_cst load per routed expert");
}
BENCHMARK(BM_resolve);

// Three resolves per routed expert in one window, as a pass that launches gate, up and down
// separately (or runs three micro-batches) would: every one must return the same version.
void BM_resolve_three_launches(benchmark::State& state) {
  resolve_fixture& f = shared_fixture();
  auto reader = f.table.register_reader();
  auto guard = reader.pin();
  for (auto _ : state) {
    for (int launch = 0; launch < 3; ++launch) {
      for (const expert_handle& h : f.handles) {
        const expert_version& v = h.resolve(guard);
        benchmark::DoNotOptimize(&v);
      }
    }
  }
  state.SetItemsProcessed(state.iterations() * 3 * static_cast<std::int64_t>(f.handles.size()));
  state.SetLabel("per resolve");
}
BENCHMARK(BM_resolve_three_launches);

// The slow path: every expert was promoted after the window was pinned, so each resolve
// finds a version newer than its window and takes the one before it.
void BM_resolve_after_publication(benchmark::State& state) {
  const std::size_t L = granite().info().num_layers, E = granite().info().num_experts;
  std::vector<std::byte> bytes(256, std::byte{1});
  residency_budget budget({.high_bytes = 256 * L * E, .low_bytes = 256 * L * E});
  block_pool lo_pool(256, L * E, 64), hi_pool(256, L * E, 64);
  versioned_expert_table table(L, E);
  transition_pipeline<host_memcpy_mover> pipe(table, budget, lo_pool, hi_pool,
                                              [&](expert_key, precision_tier) { return version_source{bytes, 0, 4}; },
                                              {}, {.max_in_flight = L * E});
  if (pipe.load_all() != residency_load_status::ok) std::abort();
  auto reader = table.register_reader();
  auto guard = reader.pin();
  for (std::size_t i = 0; i < L * E; ++i) pipe.request_promote(table.key_of(i));
  static_cast<void>(pipe.step());
  static_cast<void>(pipe.step());
  std::vector<expert_handle> handles;
  const routing_trace& t = granite();
  for (const auto& b : t.batches()) {
    const auto v = t.view(b);
    for (auto e : v.experts) handles.push_back(table.handle({v.ref.layer, e}));
    if (handles.size() >= 4096 * t.info().top_k) break;
  }
  if (handles.front().resolve(guard).tier != precision_tier::low) state.SkipWithError("the window saw a new version");
  for (auto _ : state) {
    for (const expert_handle& h : handles) {
      const expert_version& v = h.resolve(guard);
      benchmark::DoNotOptimize(&v);
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(handles.size()));
  state.SetLabel("every handle newer than the window");
}
BENCHMARK(BM_resolve_after_publication);

void BM_resolve_floor(benchmark::State& state) {
  resolve_fixture& f = shared_fixture();
  // The same sequence of experts, as pointers to a dense array of atomic pointers: one
  // acquire load each, no guard.
  std::vector<std::atomic<const expert_version*>> cells(f.L * f.E);
  std::vector<const std::atomic<const expert_version*>*> seq;
  {
    auto reader = f.table.register_reader();
    auto guard = reader.pin();
    for (std::size_t i = 0; i < cells.size(); ++i) cells[i].store(&guard.resolve(f.table.key_of(i)));
    const routing_trace& t = granite();
    for (const auto& b : t.batches()) {
      const auto v = t.view(b);
      for (auto e : v.experts) seq.push_back(&cells[expert_key{v.ref.layer, e}.flat(f.E)]);
      if (seq.size() >= f.handles.size()) break;
    }
  }
  for (auto _ : state) {
    for (const auto* p : seq) {
      const expert_version* v = p->load(std::memory_order_acquire);
      benchmark::DoNotOptimize(v);
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(seq.size()));
  state.SetLabel("floor: acquire-load an atomic pointer");
}
BENCHMARK(BM_resolve_floor);

// Pinning and unpinning a window (once per forward pass).
void BM_pin_window(benchmark::State& state) {
  resolve_fixture& f = shared_fixture();
  auto reader = f.table.register_reader();
  for (auto _ : state) {
    auto guard = reader.pin();
    benchmark::DoNotOptimize(&guard);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("load, seq_cst store, validating load; release store");
}
BENCHMARK(BM_pin_window);

// Floor: announce an epoch and withdraw it, the least an epoch-based reader does.
void BM_pin_window_floor(benchmark::State& state) {
  std::atomic<std::uint64_t> epoch{1};
  alignas(64) std::atomic<std::uint64_t> slot{0};
  for (auto _ : state) {
    slot.store(epoch.load(std::memory_order_seq_cst), std::memory_order_seq_cst);
    benchmark::ClobberMemory();
    slot.store(0, std::memory_order_release);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("floor: seq_cst store of the epoch, release store of 0");
}
BENCHMARK(BM_pin_window_floor);

// ---------------------------------------------------------------------------------------
// Transition throughput: promote then demote one expert (low version = high / 4), through
// the request queues, the budget tracker, the pools, the host mover, publication and
// reclamation (Arg: high-version bytes).

void BM_transition_cycle(benchmark::State& state) {
  const auto hi = static_cast<std::size_t>(state.range(0)), lo = hi / 4;
  std::vector<std::byte> hi_src(hi, std::byte{7}), lo_src(lo, std::byte{3});
  residency_budget budget({.high_bytes = 2 * hi, .low_bytes = 4 * lo});
  block_pool lo_pool(lo, 4, 64), hi_pool(hi, 2, 64);
  versioned_expert_table table(1, 2);
  transition_pipeline<host_memcpy_mover> pipe(table, budget, lo_pool, hi_pool, [&](expert_key, precision_tier t) {
    return t == precision_tier::high ? version_source{hi_src, 0, 16} : version_source{lo_src, 0, 4};
  });
  if (pipe.load_all() != residency_load_status::ok) std::abort();
  const expert_key k{0, 1};
  for (auto _ : state) {
    pipe.request_promote(k);
    static_cast<void>(pipe.step());  // issue (the host copy completes at once)
    static_cast<void>(pipe.step());  // publish, reclaim the low copy
    pipe.request_demote(k);
    static_cast<void>(pipe.step());
    static_cast<void>(pipe.step());
  }
  if (pipe.stats().promotions != static_cast<std::uint64_t>(state.iterations()))
    state.SkipWithError("a cycle did not complete");
  state.SetItemsProcessed(state.iterations() * 2);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(hi + lo));
  state.SetLabel("transitions");
}
BENCHMARK(BM_transition_cycle)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20);

void BM_transition_cycle_floor(benchmark::State& state) {
  const auto hi = static_cast<std::size_t>(state.range(0)), lo = hi / 4;
  std::vector<std::byte> hi_src(hi, std::byte{7}), lo_src(lo, std::byte{3});
  block_pool lo_pool(lo, 4, 64), hi_pool(hi, 2, 64);
  const auto hd = hi_pool.try_allocate(), ld = lo_pool.try_allocate();
  for (auto _ : state) {
    std::memcpy(hd.data.data(), hi_src.data(), hi);
    benchmark::ClobberMemory();
    std::memcpy(ld.data.data(), lo_src.data(), lo);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * 2);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(hi + lo));
  state.SetLabel("floor: copy the same bytes");
}
BENCHMARK(BM_transition_cycle_floor)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20);

}  // namespace
