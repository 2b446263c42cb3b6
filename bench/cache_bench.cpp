// Expert caching and routing (CXL-MoE, Edge-MoE): the expert-cache router, one eviction
// decision of every policy, the two-pointer balancer and the one-pass LRU hit curve, each
// beside its floor — a benchmark that only reads the same inputs once. The figure to quote
// is policy time / floor time (equivalently floor items/s ÷ policy items/s).
//
// Inputs are built once, outside the timed loops:
//   - router: synthetic router scores (no recorded trace has full scores with anything
//     outside the top-k: Granite and Mixtral record top-k weights only, the FLAME-MoE CSVs
//     zero the others), softmax-like vectors drawn from a Gamma(0.3) (a skewed router),
//     64 distinct batches cycled, half the experts resident; E = 8 … 256, k = 2 … 8,
//     batch = 1 … 64 tokens; items are tokens (time per iteration = one batch);
//   - eviction: the bundled Granite trace's accesses (decode and prefill), replayed batch
//     by batch with the layer and step hooks through a shared cache of 256 experts (a third
//     of the 768); items are accesses; `victim` is the pure query on a full cache;
//   - balancer: random decode-like batch sizes for n = 8 … 256 experts; items are experts.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bundled_trace.hpp"
#include "moepolicy/balance/two_pointer.hpp"
#include "moepolicy/cache/any_eviction_policy.hpp"
#include "moepolicy/cache/belady.hpp"
#include "moepolicy/cache/detail/score_aware_reference.hpp"
#include "moepolicy/cache/ema_score.hpp"
#include "moepolicy/cache/expert_cache.hpp"
#include "moepolicy/cache/fifo.hpp"
#include "moepolicy/cache/gated_prefetch.hpp"
#include "moepolicy/cache/hawkeye.hpp"
#include "moepolicy/cache/lfu.hpp"
#include "moepolicy/cache/lru.hpp"
#include "moepolicy/cache/predicted_reuse.hpp"
#include "moepolicy/cache/score_aware.hpp"
#include "moepolicy/cache/size_aware_reuse.hpp"
#include "moepolicy/cache/stack_distance.hpp"
#include "moepolicy/cache/sticky_lru.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/route/expert_cache_router.hpp"
#include "moepolicy/sim/cache_replay.hpp"
#include "moepolicy/trace/canonical.hpp"

namespace {

using namespace moepolicy;

// ---------------------------------------------------------------------------------------
// Router

/// 64 batches of `tokens` tokens: full scores, top-k ids and weights, and a residency mask.
struct router_inputs {
  std::size_t E, k, tokens;
  std::vector<std::vector<float>> scores;
  std::vector<std::vector<expert_id>> ids;
  std::vector<std::vector<float>> weights;
  std::vector<std::uint8_t> resident;

  router_inputs(std::size_t e, std::size_t kk, std::size_t tok) : E(e), k(kk), tokens(tok), resident(e) {
    std::mt19937 rng(12345);
    std::gamma_distribution<double> gamma(0.3, 1.0);
    std::vector<std::size_t> order(E);
    for (int b = 0; b < 64; ++b) {
      std::vector<float> s(E * tokens);
      std::vector<expert_id> sel;
      std::vector<float> w;
      for (std::size_t t = 0; t < tokens; ++t) {
        double z = 0.0;
        for (std::size_t i = 0; i < E; ++i) z += (s[t * E + i] = static_cast<float>(gamma(rng)));
        for (std::size_t i = 0; i < E; ++i) s[t * E + i] = static_cast<float>(s[t * E + i] / z);
        std::iota(order.begin(), order.end(), std::size_t{0});
        std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                          [&](std::size_t a, std::size_t c) { return s[t * E + a] > s[t * E + c]; });
        for (std::size_t j = 0; j < k; ++j) {
          sel.push_back(static_cast<expert_id>(order[j]));
          w.push_back(s[t * E + order[j]]);
        }
      }
      scores.push_back(std::move(s));
      ids.push_back(std::move(sel));
      weights.push_back(std::move(w));
    }
    for (auto& r : resident) r = static_cast<std::uint8_t>(rng() % 2);
  }
};

void router_batch(benchmark::State& state, bool prefer) {
  const auto E = static_cast<std::size_t>(state.range(0));
  const auto k = static_cast<std::size_t>(state.range(1));
  const auto tokens = static_cast<std::size_t>(state.range(2));
  const router_inputs in(E, k, tokens);
  expert_cache_router router({.num_experts = static_cast<std::uint32_t>(E),
                              .top_k = static_cast<std::uint32_t>(k),
                              .alpha = 0.3,
                              .prefer_batch_shared = prefer});
  std::vector<expert_id> out_ids(tokens * k);
  std::vector<float> out_w(tokens * k);
  const auto resident = [&](expert_id e) { return in.resident[e] != 0; };
  std::size_t b = 0, substituted = 0;
  for (auto _ : state) {
    const route_result r = router.route(in.ids[b], in.weights[b], in.scores[b], resident, out_ids, out_w);
    substituted += r.substituted;
    benchmark::DoNotOptimize(out_ids.data());
    benchmark::ClobberMemory();
    b = (b + 1) % 64;
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(tokens));
  state.counters["substituted_per_token"] =
      static_cast<double>(substituted) / (static_cast<double>(state.iterations()) * static_cast<double>(tokens));
}

void router_alg1(benchmark::State& state) { router_batch(state, false); }
void router_alg1_batch_preference(benchmark::State& state) { router_batch(state, true); }

/// The floor: read every score, id and weight of the batch once.
void router_floor(benchmark::State& state) {
  const auto E = static_cast<std::size_t>(state.range(0));
  const auto k = static_cast<std::size_t>(state.range(1));
  const auto tokens = static_cast<std::size_t>(state.range(2));
  const router_inputs in(E, k, tokens);
  std::size_t b = 0;
  for (auto _ : state) {
    // Integer sums of the bit patterns: one vectorisable pass, not a chain of float adds.
    std::uint32_t acc = 0;
    for (float x : in.scores[b]) acc += std::bit_cast<std::uint32_t>(x);
    for (float x : in.weights[b]) acc += std::bit_cast<std::uint32_t>(x);
    for (expert_id e : in.ids[b]) acc += e;
    benchmark::DoNotOptimize(acc);
    b = (b + 1) % 64;
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(tokens));
}

void router_args(benchmark::internal::Benchmark* b) {
  for (std::int64_t E : {8, 32, 64, 128, 256}) {
    for (std::int64_t k : {2, 4, 8}) {
      if (k >= E) continue;
      for (std::int64_t t : {1, 8, 64}) b->Args({E, k, t});
    }
  }
  b->ArgNames({"E", "k", "batch"});
}

BENCHMARK(router_alg1)->Apply(router_args);
BENCHMARK(router_alg1_batch_preference)->Apply(router_args);
BENCHMARK(router_floor)->Apply(router_args);

// ---------------------------------------------------------------------------------------
// Eviction

const routing_trace& granite() { return moepolicy::bench::bundled_granite(); }

struct eviction_inputs {
  std::vector<batch_view> batches;      // in replay order
  std::vector<std::uint8_t> step_ends;  // 1 after the last batch of a step
  std::vector<expert_key> accesses;     // distinct experts per batch, in order
  std::vector<std::uint32_t> first;     // first access of each batch
  std::vector<std::uint64_t> next_use;

  eviction_inputs() {
    const routing_trace& t = granite();
    accesses = replay_accesses(t);
    next_use = next_use_positions(accesses, t.info().num_layers, t.info().num_experts);
    std::uint32_t pos = 0;
    std::vector<std::uint8_t> seen(t.info().num_experts, 0);
    for (const step_ref& s : t.steps()) {
      for (const batch_ref& r : t.batches_of(s)) {
        batches.push_back(t.view(r));
        step_ends.push_back(0);
        first.push_back(pos);
        for (expert_id e : batches.back().experts) {
          if (seen[e] == 0) ++pos, seen[e] = 1;
        }
        for (expert_id e : batches.back().experts) seen[e] = 0;
      }
      step_ends.back() = 1;
    }
    first.push_back(pos);
  }
};

const eviction_inputs& eviction() {
  static const eviction_inputs in;
  return in;
}

constexpr std::uint64_t eviction_capacity = 256;

/// One batch per iteration through a shared cache of 256 experts, with the layer and step
/// hooks; items are demand accesses, so time per item is one decision (hit, or miss with
/// admission, eviction and insertion).
template <class P>
void cache_access(benchmark::State& state, const typename P::config_type& cfg) {
  const eviction_inputs& in = eviction();
  expert_cache<P> cache({.num_layers = 24, .num_experts = 32, .capacity = eviction_capacity}, cfg);
  std::size_t b = 0;
  std::int64_t items = 0;
  for (auto _ : state) {
    const batch_view& v = in.batches[b];
    cache.begin_layer(v);
    for (std::uint32_t i = in.first[b]; i < in.first[b + 1]; ++i) {
      // Sticky LRU and the gated policy admit only flagged misses: flag every access, so
      // that they cache as LRU does and the figure is their bookkeeping, not an empty cache.
      if constexpr (policy_traits<P>::takes_hints) cache.hint(in.accesses[i], 1.0f);
      benchmark::DoNotOptimize(cache.get(in.accesses[i], {.next_use = in.next_use[i]}));
    }
    cache.end_layer(v.ref.layer);
    if (in.step_ends[b] != 0) cache.end_step();
    items += in.first[b + 1] - in.first[b];
    b = (b + 1) % in.batches.size();
  }
  state.SetItemsProcessed(items);
  state.counters["hit_ratio"] = cache.stats().hit_ratio();
}

void evict_lru(benchmark::State& s) { cache_access<lru_policy>(s, {}); }
void evict_fifo(benchmark::State& s) { cache_access<fifo_policy>(s, {}); }
void evict_lfu(benchmark::State& s) { cache_access<lfu_policy>(s, {}); }
void evict_lfu_decayed(benchmark::State& s) { cache_access<lfu_policy>(s, {.decay = 0.9}); }
void evict_score_aware(benchmark::State& s) { cache_access<score_aware_policy>(s, {}); }
// The first implementation (eager re-ranking, cache/detail/score_aware_reference.hpp).
void evict_score_aware_reference(benchmark::State& s) { cache_access<reference::score_aware_policy>(s, {}); }
void evict_sticky_lru(benchmark::State& s) { cache_access<sticky_lru_policy>(s, {}); }
void evict_ema_score(benchmark::State& s) { cache_access<ema_score_policy>(s, {}); }
void evict_belady(benchmark::State& s) { cache_access<belady_policy>(s, {}); }
void evict_hawkeye(benchmark::State& s) { cache_access<hawkeye_policy>(s, {}); }
void evict_predicted_reuse(benchmark::State& s) { cache_access<predicted_reuse_policy>(s, {}); }
void evict_gated_prefetch(benchmark::State& s) { cache_access<gated_prefetch_policy>(s, {}); }
/// Two size classes (every fourth expert at four times the bytes): the victim compares the
/// oldest resident of each class with the largest size x interval.
void evict_size_aware_reuse(benchmark::State& s) {
  std::vector<bytes> sizes(24 * 32, 17);
  for (std::size_t f = 0; f < sizes.size(); f += 4) sizes[f] = 64;
  cache_access<size_aware_reuse_policy>(s, {.footprints = sizes});
}
void evict_any_lru(benchmark::State& s) { cache_access<any_eviction_policy>(s, lru_config{}); }

/// The floor: read each batch's ids and the access keys once.
void evict_floor(benchmark::State& state) {
  const eviction_inputs& in = eviction();
  std::size_t b = 0;
  std::int64_t items = 0;
  for (auto _ : state) {
    std::uint32_t acc = 0;
    for (expert_id e : in.batches[b].experts) acc += e;
    for (std::uint32_t i = in.first[b]; i < in.first[b + 1]; ++i) {
      acc += static_cast<std::uint32_t>(in.accesses[i].expert) + in.accesses[i].layer;
    }
    benchmark::DoNotOptimize(acc);
    items += in.first[b + 1] - in.first[b];
    b = (b + 1) % in.batches.size();
  }
  state.SetItemsProcessed(items);
}

BENCHMARK(evict_lru);
BENCHMARK(evict_fifo);
BENCHMARK(evict_lfu);
BENCHMARK(evict_lfu_decayed);
BENCHMARK(evict_score_aware);
BENCHMARK(evict_score_aware_reference);
BENCHMARK(evict_sticky_lru);
BENCHMARK(evict_ema_score);
BENCHMARK(evict_belady);
BENCHMARK(evict_hawkeye);
BENCHMARK(evict_predicted_reuse);
BENCHMARK(evict_gated_prefetch);
BENCHMARK(evict_size_aware_reuse);
BENCHMARK(evict_any_lru);
BENCHMARK(evict_floor);

/// `victim()` alone on a full cache (warmed by one pass of the trace).
template <class P>
void victim_query(benchmark::State& state) {
  const eviction_inputs& in = eviction();
  expert_cache<P> cache({.num_layers = 24, .num_experts = 32, .capacity = eviction_capacity});
  for (std::size_t b = 0; b < in.batches.size(); ++b) {
    for (std::uint32_t i = in.first[b]; i < in.first[b + 1]; ++i) {
      cache.hint(in.accesses[i], 1.0f);
      cache.get(in.accesses[i], {.next_use = in.next_use[i]});
    }
    if (in.step_ends[b] != 0) cache.end_step();
  }
  for (auto _ : state) benchmark::DoNotOptimize(cache.policy().victim(0));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK_TEMPLATE(victim_query, lru_policy);
BENCHMARK_TEMPLATE(victim_query, lfu_policy);
BENCHMARK_TEMPLATE(victim_query, score_aware_policy);
BENCHMARK_TEMPLATE(victim_query, sticky_lru_policy);
BENCHMARK_TEMPLATE(victim_query, ema_score_policy);
BENCHMARK_TEMPLATE(victim_query, belady_policy);
BENCHMARK_TEMPLATE(victim_query, hawkeye_policy);
BENCHMARK_TEMPLATE(victim_query, predicted_reuse_policy);
BENCHMARK_TEMPLATE(victim_query, gated_prefetch_policy);

/// The hit ratio at every capacity in one pass (Mattson), over the Granite accesses.
void lru_hit_curve_one_pass(benchmark::State& state) {
  const eviction_inputs& in = eviction();
  for (auto _ : state) benchmark::DoNotOptimize(lru_hit_curve(in.accesses, {24, 32}));
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(in.accesses.size()));
}
BENCHMARK(lru_hit_curve_one_pass)->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------------------
// Balancer

std::vector<std::vector<std::uint32_t>> batch_sizes(std::size_t n) {
  std::mt19937 rng(77);
  std::vector<std::vector<std::uint32_t>> out(64, std::vector<std::uint32_t>(n));
  for (auto& v : out) {
    for (auto& x : v) x = 1 + static_cast<std::uint32_t>(rng() % 4) * (rng() % 8 == 0 ? 8u : 1u);
  }
  return out;
}

void balance_alg2(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto sizes = batch_sizes(n);
  two_pointer_balancer bal({.cpu_seconds_per_token = 1e-4, .load_seconds = 3e-4, .max_items = n});
  std::vector<balance_side> out(n);
  std::size_t b = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(bal.balance(sizes[b], out));
    benchmark::ClobberMemory();
    b = (b + 1) % 64;
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(n));
}

void balance_optimal_sweep(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto sizes = batch_sizes(n);
  two_pointer_balancer bal({.cpu_seconds_per_token = 1e-4, .load_seconds = 3e-4, .max_items = n});
  std::vector<balance_side> out(n);
  std::size_t b = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(bal.balance_optimal(sizes[b], out));
    benchmark::ClobberMemory();
    b = (b + 1) % 64;
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(n));
}

void balance_general_roofline(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto sizes = batch_sizes(n);
  const model_shape m = models::granite_3_1_1b_a400m();
  cost_balancer bal(roofline_cost(presets::h100_pcie_gen5(), m), roofline_cost(presets::xeon_8470_amx(), m), n);
  std::vector<std::vector<balance_item>> items(64, std::vector<balance_item>(n));
  const int bits[] = {4, 8, 16};
  for (std::size_t b = 0; b < 64; ++b) {
    for (std::size_t i = 0; i < n; ++i) {
      items[b][i] = {expert_key{0, static_cast<expert_id>(i)}, sizes[b][i], bitwidth{bits[i % 3]}};
    }
  }
  std::vector<balance_side> out(n);
  std::size_t b = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(bal.balance(items[b], out));
    benchmark::ClobberMemory();
    b = (b + 1) % 64;
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(n));
}

/// The floor: read the batch sizes once.
void balance_floor(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto sizes = batch_sizes(n);
  std::size_t b = 0;
  for (auto _ : state) {
    std::uint64_t acc = 0;
    for (std::uint32_t x : sizes[b]) acc += x;
    benchmark::DoNotOptimize(acc);
    b = (b + 1) % 64;
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(n));
}

BENCHMARK(balance_alg2)->RangeMultiplier(4)->Range(8, 256)->ArgName("experts");
BENCHMARK(balance_optimal_sweep)->RangeMultiplier(4)->Range(8, 256)->ArgName("experts");
BENCHMARK(balance_general_roofline)->RangeMultiplier(4)->Range(8, 256)->ArgName("experts");
BENCHMARK(balance_floor)->RangeMultiplier(4)->Range(8, 256)->ArgName("experts");

}  // namespace
