// What every policy decision costs at the papers' model sizes: Mixtral-8x7B (E = 8, top-2,
// 32 MoE layers), DeepSeek-V3 (E = 256, top-8, 58 MoE layers) and Qwen3-235B-A22B (E = 128,
// top-8, 94 MoE layers). Each policy benchmark sits beside a floor that only reads the
// same inputs once, in the same loop; `bench_table` turns the JSON output into a table of
// policy time per decision and its ratio to the floor.
//
// Names, parsed by bench_table:
//   policy:<policy>/floor:<floor>/shape:<shape>   one decision of <policy> (or a fixed
//                                                 number of them per iteration, see below)
//   floor:<floor>/shape:<shape>                   its floor
// Every benchmark sets the counter `decisions`: the decisions one iteration makes (1
// except for the eviction policies, k accesses per iteration, and handle resolution, L·k
// per iteration); time per decision = time per iteration / decisions. Items processed are
// decisions as well.
//
// ALL INPUTS ARE SYNTHETIC (a size sweep: no claim about any model's real routing), built
// once per shape with fixed seeds, outside the timed loops:
//   - popularity: per layer a fixed random permutation of the experts with Zipf(1) weights
//     1/(rank + 1);
//   - token stream: 64 decode steps of one token (the batch-1 decode of the offloading
//     papers) through every layer; each token's router scores are
//     softmax(0.5 · (log popularity + Gumbel noise)), so its top-k (the selection, gate
//     weights renormalised over it) is a Zipf-weighted draw without replacement;
//   - batched decode steps: 64 steps of B tokens (B = 64 for Mixtral, 256 for the others),
//     step i at layer i mod L, each token's k experts drawn the same way (without the
//     scores); loads per expert; the TriMoE layout from popularity ranks (top 10 % in HBM
//     and striped, bottom 60 % localized on DIMM e mod 16, the rest striped) priced on the
//     presets (H100 PCIe, Xeon 8470 AMX, 16 DIMM-NDPs) at FP16, as sched_bench does;
//   - prefill statistics P and W: counts and gate-weight sums of the whole token stream;
//     quantisation losses per (layer, expert, bits {1, 2, 3, 4}) random, decreasing;
//   - hotness for the precision target: 4·L drifted copies (lognormal noise, σ = 0.3) of
//     each layer's popularity shares;
//   - a random half of each layer's experts is GPU-resident for the router and the
//     balancer.
//
// Decisions, per shape (K = GPU experts per layer: 4 of 8 for Mixtral, E/4 otherwise):
//   collector          routing_stats_collector::observe of one token's record at one layer
//   importance_topk    importance_scores + top_k_experts (K) of one layer
//   importance_topk_reference   the same with the first top-K (a heap-based partial sort,
//                      score/detail/importance_reference.hpp)
//   prefix_split       prefix_split of one layer's E − K NDP experts, bits {1,2,3,4}, b̄ 2.5
//   prefix_split_reference   the first implementation of prefix split
//                      (quant/detail/prefix_split_reference.hpp), the same problem
//   exact_allocation   exact_allocation of the same problem (the synthetic losses are not
//                      convex in bits: the DP)
//   exact_allocation_reference   the first implementation of the DP
//                      (quant/detail/exact_allocation_reference.hpp), the same problem
//   exact_allocation_convex   exact_allocation of the same losses with each row's steps
//                      sorted (convex in bits: the greedy on marginal gains)
//   placement          place_from_prefill of the whole model (once per request)
//   makespan_paper     bottleneck_refinement_scheduler::solve of one layer of a decode step
//   makespan_local     local_search_scheduler::solve of the same problem
//   ema_update         ema_load_predictor::update of one layer with a step's loads
//   precision_target   precision_target_selector::select of one layer (n = E/4; margin
//                      hysteresis of a quarter of the mean share, 0.25/E)
//   evict_<policy>     one demand access through expert_cache<policy> with per-layer pools
//                      of E/2 experts (LRU, LFU, FIFO, sticky LRU with every access
//                      hinted, score-aware with the layer hooks, Belady with the cyclic
//                      next use of the periodic stream, Hawkeye-style, predicted reuse,
//                      gated prefetch (every access hinted) and size-aware reuse (two
//                      size classes: every fourth expert four times the bytes) with the
//                      layer hooks); their floor reads each access's
//                      key and next use and the row's ids, score-aware's also the row's
//                      router scores and gate weights
//   evict_score_aware_reference   the same through the first score-aware implementation
//                      (eager re-ranking, cache/detail/score_aware_reference.hpp)
//   router             expert_cache_router::route of one token at one layer (α = 0.3)
//   two_pointer        two_pointer_balancer::balance of one layer's activated experts that
//                      are not GPU-resident, at the decode batch
//   migration_planner  migration_planner::plan of one layer (window 0.68 ms)
//   migration_planner_reference   the same with the first implementation
//                      (balance/detail/migration_planner_reference.hpp)
//   resolve            expert_handle::resolve of one routed expert, in a forward pass's
//                      order (a guard pinned for the whole run)
// Hot-path calls allocate nothing after construction; prefix_split and exact_allocation
// reuse a workspace and a result (no allocation), their references and
// place_from_prefill return their results in fresh vectors (they run once per layer or
// request, off the token path), so those figures include allocation.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "moepolicy/balance/detail/migration_planner_reference.hpp"
#include "moepolicy/balance/migration_planner.hpp"
#include "moepolicy/balance/two_pointer.hpp"
#include "moepolicy/cache/belady.hpp"
#include "moepolicy/cache/detail/score_aware_reference.hpp"
#include "moepolicy/cache/expert_cache.hpp"
#include "moepolicy/cache/fifo.hpp"
#include "moepolicy/cache/gated_prefetch.hpp"
#include "moepolicy/cache/hawkeye.hpp"
#include "moepolicy/cache/lfu.hpp"
#include "moepolicy/cache/lru.hpp"
#include "moepolicy/cache/predicted_reuse.hpp"
#include "moepolicy/cache/score_aware.hpp"
#include "moepolicy/cache/size_aware_reuse.hpp"
#include "moepolicy/cache/sticky_lru.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/place/prefill_placement.hpp"
#include "moepolicy/predict/ema_load_predictor.hpp"
#include "moepolicy/predict/precision_target.hpp"
#include "moepolicy/quant/detail/exact_allocation_reference.hpp"
#include "moepolicy/quant/detail/prefix_split_reference.hpp"
#include "moepolicy/quant/exact_allocation.hpp"
#include "moepolicy/quant/prefix_split.hpp"
#include "moepolicy/residency/versioned_expert.hpp"
#include "moepolicy/route/expert_cache_router.hpp"
#include "moepolicy/sched/bottleneck_refinement.hpp"
#include "moepolicy/sched/gpu_cpu_ndp.hpp"
#include "moepolicy/sched/local_search.hpp"
#include "moepolicy/score/detail/importance_reference.hpp"
#include "moepolicy/score/importance.hpp"
#include "moepolicy/stats/analysis.hpp"
#include "moepolicy/stats/routing_stats.hpp"
#include "moepolicy/trace/tables.hpp"

namespace {

using namespace moepolicy;
using system3 = gpu_cpu_ndp_system<roofline_cost, roofline_cost, roofline_cost>;

struct shape_case {
  const char* id;
  model_shape (*make)();
  std::size_t batch;  // B of the batched decode steps
};
const std::array<shape_case, 3> shape_cases{{{"mixtral_8x7b", models::mixtral_8x7b, 64},
                                             {"deepseek_v3", models::deepseek_v3, 256},
                                             {"qwen3_235b", models::qwen3_235b_a22b, 256}}};

constexpr std::size_t num_steps = 64;  // of the token stream and of the batched steps
constexpr std::size_t num_dimms = 16;
constexpr double average_bits = 2.5;
const std::array<bitwidth, 4> ndp_bits{bitwidth{1}, bitwidth{2}, bitwidth{3}, bitwidth{4}};

// ---------------------------------------------------------------------------------------
// Inputs of one shape, built once.

struct shape_inputs {
  model_shape model;
  std::size_t L = 0, E = 0, k = 0, B = 0;
  std::size_t gpu_K = 0;           // GPU experts per layer (placement, importance top-K)
  std::size_t hi_n = 0;            // high-precision capacity per layer (precision target)
  std::vector<double> popularity;  // L × E, Zipf weights by layer

  // Token stream: rows = num_steps × L, row r at step r / L, layer r % L, one token.
  std::size_t rows = 0;
  std::vector<layer_id> row_layer;
  std::vector<expert_id> ids;             // rows × k
  std::vector<float> weights;             // rows × k
  std::vector<float> scores;              // rows × E
  std::vector<std::uint32_t> positions;   // rows (the token's position)
  std::vector<batch_view> views;          // rows
  std::vector<expert_key> accesses;       // rows × k, in order
  std::vector<std::uint64_t> next_delta;  // distance to the next access of the same expert, cyclically
  std::vector<std::uint8_t> gpu_half;     // L × E: a random half resident (router, balancer)

  // Prefill statistics and losses.
  Eigen::MatrixXd P, W;                // L × E
  std::vector<double> P_rows, W_rows;  // the same, row-major
  loss_table losses;
  std::vector<Eigen::MatrixXd> ndp_losses;         // per layer: (E − K) × 4, in importance order
  std::vector<Eigen::MatrixXd> ndp_losses_convex;  // the same with each row's steps sorted: convex

  // Batched decode steps.
  std::vector<std::vector<std::uint32_t>> step_loads;  // num_steps × E
  std::vector<layer_id> step_layer;
  std::vector<std::vector<expert_layout>> layouts;  // per layer
  std::vector<std::vector<std::uint8_t>> hbm;       // per layer
  std::unique_ptr<system3> sys;
  std::vector<makespan_problem> problems;             // per step
  std::vector<std::vector<std::uint32_t>> offloaded;  // per step: loads of activated non-resident experts
  double load_seconds = 0.0, cpu_seconds_per_token = 0.0;

  // Hotness for the precision target: variant v is for layer v % L.
  std::vector<std::vector<double>> hotness;

  [[nodiscard]] std::span<const expert_id> ids_of(std::size_t r) const { return std::span(ids).subspan(r * k, k); }
  [[nodiscard]] std::span<const float> weights_of(std::size_t r) const { return std::span(weights).subspan(r * k, k); }
  [[nodiscard]] std::span<const float> scores_of(std::size_t r) const { return std::span(scores).subspan(r * E, E); }
  [[nodiscard]] std::span<const double> P_row(std::size_t l) const { return std::span(P_rows).subspan(l * E, E); }
  [[nodiscard]] std::span<const double> W_row(std::size_t l) const { return std::span(W_rows).subspan(l * E, E); }
  [[nodiscard]] std::span<const std::uint8_t> gpu_half_of(std::size_t l) const {
    return std::span(gpu_half).subspan(l * E, E);
  }

  explicit shape_inputs(const shape_case& c);

 private:
  void make_token_stream(std::mt19937_64& rng);
  void make_prefill(std::mt19937_64& rng);
  void make_steps(std::mt19937_64& rng);
  void make_hotness(std::mt19937_64& rng);
};

shape_inputs::shape_inputs(const shape_case& c) : model(c.make()) {
  L = model.num_moe_layers();
  E = model.num_experts;
  k = model.top_k;
  B = c.batch;
  gpu_K = E == 8 ? 4 : E / 4;
  hi_n = std::max<std::size_t>(1, E / 4);
  std::mt19937_64 rng(0x5eed0000u + E * 131u + L);
  popularity.assign(L * E, 0.0);
  std::vector<std::size_t> perm(E);
  for (std::size_t l = 0; l < L; ++l) {
    std::iota(perm.begin(), perm.end(), std::size_t{0});
    std::shuffle(perm.begin(), perm.end(), rng);
    for (std::size_t r = 0; r < E; ++r) popularity[l * E + perm[r]] = 1.0 / static_cast<double>(r + 1);
  }
  make_token_stream(rng);
  make_prefill(rng);
  make_steps(rng);
  make_hotness(rng);
}

void shape_inputs::make_token_stream(std::mt19937_64& rng) {
  rows = num_steps * L;
  row_layer.resize(rows);
  ids.resize(rows * k);
  weights.resize(rows * k);
  scores.resize(rows * E);
  positions.resize(rows);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> logit(E);
  std::vector<std::size_t> order(E);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t l = r % L;
    row_layer[r] = static_cast<layer_id>(l);
    positions[r] = static_cast<std::uint32_t>(r / L);
    double hi = -std::numeric_limits<double>::infinity();
    for (std::size_t e = 0; e < E; ++e) {
      const double gumbel = -std::log(-std::log(std::max(u(rng), 1e-300)));
      logit[e] = 0.5 * (std::log(popularity[l * E + e]) + gumbel);
      hi = std::max(hi, logit[e]);
    }
    double z = 0.0;
    for (std::size_t e = 0; e < E; ++e) z += std::exp(logit[e] - hi);
    float* s = scores.data() + r * E;
    for (std::size_t e = 0; e < E; ++e) s[e] = static_cast<float>(std::exp(logit[e] - hi) / z);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      [&](std::size_t a, std::size_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
    float mass = 0.0f;
    for (std::size_t j = 0; j < k; ++j) mass += s[order[j]];
    for (std::size_t j = 0; j < k; ++j) {
      ids[r * k + j] = static_cast<expert_id>(order[j]);
      weights[r * k + j] = s[order[j]] / mass;
    }
  }
  views.resize(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    views[r] = batch_view{.ref = {.request = 0,
                                  .step = positions[r],
                                  .layer = row_layer[r],
                                  .kind = phase::decode,
                                  .first_row = static_cast<std::uint32_t>(r),
                                  .num_rows = 1},
                          .top_k = static_cast<std::uint32_t>(k),
                          .positions = std::span(positions).subspan(r, 1),
                          .experts = ids_of(r),
                          .weights = weights_of(r),
                          .scores = scores_of(r)};
  }
  // Accesses in order (a token's k experts are distinct) and the cyclic next use: the
  // stream repeats, so the next access after the last one of an expert is its first in
  // the next period.
  accesses.resize(rows * k);
  for (std::size_t i = 0; i < accesses.size(); ++i) accesses[i] = {row_layer[i / k], ids[i]};
  const std::size_t N = accesses.size();
  next_delta.assign(N, 0);
  std::vector<std::size_t> last(L * E, N), first(L * E, N);
  for (std::size_t i = 0; i < N; ++i) {
    const std::size_t f = accesses[i].flat(E);
    if (first[f] == N) first[f] = i;
    if (last[f] != N) next_delta[last[f]] = i - last[f];
    last[f] = i;
  }
  for (std::size_t f = 0; f < L * E; ++f) {
    if (last[f] != N) next_delta[last[f]] = N - last[f] + first[f];
  }
  gpu_half.assign(L * E, 0);
  for (std::size_t l = 0; l < L; ++l) {
    std::vector<std::size_t> perm(E);
    std::iota(perm.begin(), perm.end(), std::size_t{0});
    std::shuffle(perm.begin(), perm.end(), rng);
    for (std::size_t i = 0; i < E / 2; ++i) gpu_half[l * E + perm[i]] = 1;
  }
}

void shape_inputs::make_prefill(std::mt19937_64& rng) {
  const auto Li = static_cast<Eigen::Index>(L), Ei = static_cast<Eigen::Index>(E);
  P = Eigen::MatrixXd::Zero(Li, Ei);
  W = Eigen::MatrixXd::Zero(Li, Ei);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < k; ++j) {
      P(row_layer[r], ids[r * k + j]) += 1.0;
      W(row_layer[r], ids[r * k + j]) += static_cast<double>(weights[r * k + j]);
    }
  }
  P_rows.resize(L * E);
  W_rows.resize(L * E);
  for (std::size_t l = 0; l < L; ++l) {
    for (std::size_t e = 0; e < E; ++e) {
      P_rows[l * E + e] = P(static_cast<Eigen::Index>(l), static_cast<Eigen::Index>(e));
      W_rows[l * E + e] = W(static_cast<Eigen::Index>(l), static_cast<Eigen::Index>(e));
    }
  }
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> loss;
  loss.reserve(L * E * ndp_bits.size());
  for (std::size_t c = 0; c < L * E; ++c) {
    double v = 1000.0 * (1.0 + u(rng));
    for (std::size_t b = 0; b < ndp_bits.size(); ++b, v *= 0.3 + 0.4 * u(rng)) loss.push_back(v);
  }
  losses = loss_table(L, E, {ndp_bits.begin(), ndp_bits.end()}, loss);
  // Each layer's NDP experts in importance order, as place_from_prefill hands them to
  // prefix split.
  std::vector<double> score(E);
  std::vector<expert_id> order(E);
  for (std::size_t l = 0; l < L; ++l) {
    importance_scores(P_row(l), W_row(l), score);
    rank_experts(score, order);
    Eigen::MatrixXd m(static_cast<Eigen::Index>(E - gpu_K), static_cast<Eigen::Index>(ndp_bits.size()));
    for (std::size_t i = gpu_K; i < E; ++i) {
      const auto row = losses.losses_of(l, order[i]);
      for (std::size_t b = 0; b < ndp_bits.size(); ++b) {
        m(static_cast<Eigen::Index>(i - gpu_K), static_cast<Eigen::Index>(b)) = row[b];
      }
    }
    Eigen::MatrixXd c = m;  // each row's steps in descending order: convex in the level
    for (Eigen::Index i = 0; i < c.rows(); ++i) {
      std::array<double, 3> step{};
      for (std::size_t b = 0; b < step.size(); ++b) {
        step[b] = m(i, static_cast<Eigen::Index>(b)) - m(i, static_cast<Eigen::Index>(b + 1));
      }
      std::sort(step.begin(), step.end(), std::greater<>());
      for (std::size_t b = 0; b < step.size(); ++b) {
        c(i, static_cast<Eigen::Index>(b + 1)) = c(i, static_cast<Eigen::Index>(b)) - step[b];
      }
    }
    ndp_losses.push_back(std::move(m));
    ndp_losses_convex.push_back(std::move(c));
  }
}

void shape_inputs::make_steps(std::mt19937_64& rng) {
  sys = std::make_unique<system3>(roofline_cost{presets::h100_pcie_gen5(), model},
                                  roofline_cost{presets::xeon_8470_amx(), model},
                                  roofline_cost{presets::dimm_ndp(), model});
  layouts.resize(L);
  hbm.resize(L);
  std::vector<std::size_t> rank(E);
  for (std::size_t l = 0; l < L; ++l) {
    const double* pop = popularity.data() + l * E;
    std::iota(rank.begin(), rank.end(), std::size_t{0});
    std::sort(rank.begin(), rank.end(), [&](std::size_t a, std::size_t b) { return pop[a] > pop[b]; });
    layouts[l].assign(E, expert_layout::striped());
    hbm[l].assign(E, 0);
    for (std::size_t r = 0; r < E; ++r) {
      const std::size_t e = rank[r];
      hbm[l][e] = r < (E + 9) / 10 ? 1 : 0;
      if (r >= E * 4 / 10) layouts[l][e] = expert_layout::localized(static_cast<std::uint16_t>(e % num_dimms));
    }
  }
  std::vector<std::uint8_t> chosen(E);
  for (std::size_t st = 0; st < num_steps; ++st) {
    const std::size_t l = st % L;
    std::discrete_distribution<std::size_t> pick(popularity.begin() + static_cast<std::ptrdiff_t>(l * E),
                                                 popularity.begin() + static_cast<std::ptrdiff_t>((l + 1) * E));
    std::vector<std::uint32_t> loads(E, 0);
    for (std::size_t t = 0; t < B; ++t) {
      std::fill(chosen.begin(), chosen.end(), std::uint8_t{0});
      for (std::size_t j = 0; j < k;) {
        const std::size_t e = pick(rng);
        if (chosen[e] != 0) continue;  // without replacement
        chosen[e] = 1;
        ++loads[e];
        ++j;
      }
    }
    makespan_problem p(num_dimms, E);
    sys->build_layer(static_cast<layer_id>(l), loads, layouts[l], hbm[l], fp16, p);
    problems.push_back(std::move(p));
    std::vector<std::uint32_t> off;
    for (std::size_t e = 0; e < E; ++e) {
      if (loads[e] > 0 && gpu_half[l * E + e] == 0) off.push_back(loads[e]);
    }
    offloaded.push_back(std::move(off));
    step_loads.push_back(std::move(loads));
    step_layer.push_back(static_cast<layer_id>(l));
  }
  const roofline_cost gpu{presets::h100_pcie_gen5(), model}, cpu{presets::xeon_8470_amx(), model};
  load_seconds = gpu.transfer_seconds(gpu.footprint_bytes({0, 0}, fp16));
  cpu_seconds_per_token = cpu.compute_seconds({0, 0}, fp16, 1);
}

void shape_inputs::make_hotness(std::mt19937_64& rng) {
  std::lognormal_distribution<double> noise(0.0, 0.3);
  for (std::size_t v = 0; v < 4 * L; ++v) {
    const std::size_t l = v % L;
    const double* pop = popularity.data() + l * E;
    const double total = std::accumulate(pop, pop + E, 0.0);
    std::vector<double> h(E);
    for (std::size_t e = 0; e < E; ++e) h[e] = pop[e] / total * noise(rng);
    hotness.push_back(std::move(h));
  }
}

const shape_inputs& inputs(std::size_t s) {
  static std::array<std::unique_ptr<shape_inputs>, shape_cases.size()> memo;
  if (!memo[s]) memo[s] = std::make_unique<shape_inputs>(shape_cases[s]);
  return *memo[s];
}

/// Integer sum of a double's or float's bit pattern: a vectorisable read, not a chain of
/// floating-point adds.
template <class T>
std::uint64_t bits_of(T x) {
  if constexpr (sizeof(T) == 8) {
    return std::bit_cast<std::uint64_t>(x);
  } else {
    return std::bit_cast<std::uint32_t>(x);
  }
}

template <class T>
std::uint64_t read_all(std::span<const T> xs) {
  std::uint64_t acc = 0;
  for (const T& x : xs) {
    if constexpr (std::is_floating_point_v<T>) {
      acc += bits_of(x);
    } else {
      acc += static_cast<std::uint64_t>(x);
    }
  }
  return acc;
}

template <class T>
constexpr std::uint64_t u64(T x) {
  return static_cast<std::uint64_t>(x);
}

/// Records the decisions per iteration (the table divides by it) and items = decisions.
void per_iteration(benchmark::State& state, std::size_t decisions) {
  state.counters["decisions"] = static_cast<double>(decisions);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(decisions));
}

void next(std::size_t& i, std::size_t n) {
  if (++i == n) i = 0;
}

// ---------------------------------------------------------------------------------------
// Routing statistics: one token's record at one layer.

void collector(benchmark::State& state, const shape_inputs& in) {
  routing_stats_collector c(in.L, in.E);
  std::size_t r = 0;
  for (auto _ : state) {
    c.observe(phase::decode, in.row_layer[r], in.ids_of(r), in.weights_of(r), in.k);
    benchmark::DoNotOptimize(c.counts(phase::decode).data());
    benchmark::ClobberMemory();
    next(r, in.rows);
  }
  per_iteration(state, 1);
}
void collector_floor(benchmark::State& state, const shape_inputs& in) {
  std::size_t r = 0;
  for (auto _ : state) {
    std::uint64_t acc = u64(in.row_layer[r]) + read_all(in.ids_of(r)) + read_all(in.weights_of(r));
    benchmark::DoNotOptimize(acc);
    next(r, in.rows);
  }
  per_iteration(state, 1);
}

// ---------------------------------------------------------------------------------------
// Importance + top-K of one layer.

void importance_topk(benchmark::State& state, const shape_inputs& in) {
  std::vector<double> score(in.E);
  std::vector<expert_id> order(in.E);
  std::size_t l = 0;
  for (auto _ : state) {
    importance_scores(in.P_row(l), in.W_row(l), score);
    const auto top = top_k_experts(score, in.gpu_K, order);
    benchmark::DoNotOptimize(top.data());
    benchmark::ClobberMemory();
    next(l, in.L);
  }
  per_iteration(state, 1);
}
void importance_topk_reference(benchmark::State& state, const shape_inputs& in) {
  std::vector<double> score(in.E);
  std::vector<expert_id> order(in.E);
  std::size_t l = 0;
  for (auto _ : state) {
    importance_scores(in.P_row(l), in.W_row(l), score);
    const auto top = reference::top_k_experts(score, in.gpu_K, order);
    benchmark::DoNotOptimize(top.data());
    benchmark::ClobberMemory();
    next(l, in.L);
  }
  per_iteration(state, 1);
}
void importance_floor(benchmark::State& state, const shape_inputs& in) {
  std::size_t l = 0;
  for (auto _ : state) {
    std::uint64_t acc = read_all(in.P_row(l)) + read_all(in.W_row(l));
    benchmark::DoNotOptimize(acc);
    next(l, in.L);
  }
  per_iteration(state, 1);
}

// ---------------------------------------------------------------------------------------
// Bit allocation of one layer's NDP experts.

void prefix_split_layer(benchmark::State& state, const shape_inputs& in) {
  prefix_split_workspace ws;
  bit_allocation a;
  std::size_t l = 0;
  for (auto _ : state) {
    prefix_split(ndp_bits, in.ndp_losses[l], average_bits, {}, {}, ws, a);
    benchmark::DoNotOptimize(a.gain);
    next(l, in.L);
  }
  per_iteration(state, 1);
}
void prefix_split_reference(benchmark::State& state, const shape_inputs& in) {
  std::size_t l = 0;
  for (auto _ : state) {
    const bit_allocation a = reference::prefix_split(ndp_bits, in.ndp_losses[l], average_bits);
    benchmark::DoNotOptimize(a.gain);
    next(l, in.L);
  }
  per_iteration(state, 1);
}
/// The exact allocation on `tables` with `method`, its workspace reused.
void exact_allocation_on(benchmark::State& state, const shape_inputs& in, const std::vector<Eigen::MatrixXd>& tables,
                         exact_method method) {
  exact_allocation_workspace ws;
  bit_allocation a;
  std::size_t l = 0;
  for (auto _ : state) {
    exact_allocation(ndp_bits, tables[l], average_bits, {}, {}, {}, method, ws, a);
    benchmark::DoNotOptimize(a.gain);
    next(l, in.L);
  }
  per_iteration(state, 1);
}
void exact_allocation_layer(benchmark::State& state, const shape_inputs& in) {
  exact_allocation_on(state, in, in.ndp_losses, exact_method::automatic);  // not convex: the DP
}
void exact_allocation_convex(benchmark::State& state, const shape_inputs& in) {
  exact_allocation_on(state, in, in.ndp_losses_convex, exact_method::automatic);  // the greedy
}
void exact_allocation_reference(benchmark::State& state, const shape_inputs& in) {
  std::size_t l = 0;
  for (auto _ : state) {
    const bit_allocation a = reference::exact_allocation(ndp_bits, in.ndp_losses[l], average_bits);
    benchmark::DoNotOptimize(a.gain);
    next(l, in.L);
  }
  per_iteration(state, 1);
}
void allocation_floor(benchmark::State& state, const shape_inputs& in) {
  std::size_t l = 0;
  for (auto _ : state) {
    const Eigen::MatrixXd& m = in.ndp_losses[l];
    std::uint64_t acc = read_all(std::span<const double>(m.data(), static_cast<std::size_t>(m.size())));
    benchmark::DoNotOptimize(acc);
    next(l, in.L);
  }
  per_iteration(state, 1);
}

// ---------------------------------------------------------------------------------------
// Placement of the whole model from the prefill.

void placement(benchmark::State& state, const shape_inputs& in) {
  const prefill_placement_config config{.gpu_experts_per_layer = in.gpu_K, .ndp_average_bits = average_bits};
  for (auto _ : state) {
    const placement_plan plan = place_from_prefill(in.P, in.W, &in.losses, config);
    benchmark::DoNotOptimize(&plan.at(0, 0));
  }
  per_iteration(state, 1);
}
void placement_floor(benchmark::State& state, const shape_inputs& in) {
  for (auto _ : state) {
    std::uint64_t acc = read_all(std::span<const double>(in.P.data(), static_cast<std::size_t>(in.P.size()))) +
                        read_all(std::span<const double>(in.W.data(), static_cast<std::size_t>(in.W.size())));
    for (std::size_t l = 0; l < in.L; ++l) {
      for (std::size_t e = 0; e < in.E; ++e) acc += read_all(in.losses.losses_of(l, e));
    }
    benchmark::DoNotOptimize(acc);
  }
  per_iteration(state, 1);
}

// ---------------------------------------------------------------------------------------
// Makespan of one layer of a batched decode step.

template <class Solver>
void makespan(benchmark::State& state, const shape_inputs& in, Solver solver) {
  makespan_schedule out(in.E, num_dimms);
  for (const auto& p : in.problems) solver.solve(p, out);  // sizes the solver's scratch: no allocation below
  std::size_t i = 0, moves = 0;
  for (auto _ : state) {
    solver.solve(in.problems[i], out);
    benchmark::DoNotOptimize(out.makespan);
    moves += out.iterations;
    next(i, in.problems.size());
  }
  per_iteration(state, 1);
  state.counters["moves"] = benchmark::Counter(static_cast<double>(moves), benchmark::Counter::kAvgIterations);
}
void makespan_paper(benchmark::State& state, const shape_inputs& in) {
  makespan(state, in, bottleneck_refinement_scheduler{});
}
void makespan_local(benchmark::State& state, const shape_inputs& in) { makespan(state, in, local_search_scheduler{}); }
void makespan_floor(benchmark::State& state, const shape_inputs& in) {
  std::size_t i = 0;
  for (auto _ : state) {
    // Every field a solver reads: each row's prices, read time, home and residency.
    double acc = 0.0;
    for (const auto& e : in.problems[i].experts()) {
      acc += (e.exec[0] + e.exec[1] + (e.allows(device_option::ndp) ? e.exec[2] : 0.0)) + e.dram +
             static_cast<double>(e.layout.home) + (e.gpu_resident ? 1.0 : 0.0);
    }
    benchmark::DoNotOptimize(acc);
    next(i, in.problems.size());
  }
  per_iteration(state, 1);
}

// ---------------------------------------------------------------------------------------
// EMA load predictor: one layer's update.

void ema_update(benchmark::State& state, const shape_inputs& in) {
  ema_load_predictor p(in.L, in.E);
  std::size_t i = 0;
  for (auto _ : state) {
    p.update(in.step_layer[i], in.step_loads[i]);
    benchmark::DoNotOptimize(p.predicted_classes(in.step_layer[i]).data());
    benchmark::ClobberMemory();
    next(i, in.step_loads.size());
  }
  per_iteration(state, 1);
}
void ema_floor(benchmark::State& state, const shape_inputs& in) {
  std::size_t i = 0;
  for (auto _ : state) {
    std::uint64_t acc = u64(in.step_layer[i]) + read_all(std::span<const std::uint32_t>(in.step_loads[i]));
    benchmark::DoNotOptimize(acc);
    next(i, in.step_loads.size());
  }
  per_iteration(state, 1);
}

// ---------------------------------------------------------------------------------------
// Precision target (DynaExq): one layer's selection with margin hysteresis.

void precision_target(benchmark::State& state, const shape_inputs& in) {
  precision_target_selector sel(in.L, in.E, static_cast<std::uint32_t>(in.hi_n),
                                {.mode = target_hysteresis::margin, .margin = 0.25 / static_cast<double>(in.E)});
  std::size_t v = 0, promotions = 0;
  for (auto _ : state) {
    const layer_target t = sel.select(static_cast<layer_id>(v % in.L), in.hotness[v]);
    promotions += t.promote.size();
    benchmark::DoNotOptimize(t.target.data());
    next(v, in.hotness.size());
  }
  per_iteration(state, 1);
  state.counters["promotions"] =
      benchmark::Counter(static_cast<double>(promotions), benchmark::Counter::kAvgIterations);
}
void precision_target_floor(benchmark::State& state, const shape_inputs& in) {
  const std::vector<std::uint8_t> member(in.L * in.E, 0);
  std::size_t v = 0;
  for (auto _ : state) {
    const std::size_t l = v % in.L;
    std::uint64_t acc = read_all(std::span<const double>(in.hotness[v])) +
                        read_all(std::span<const std::uint8_t>(member).subspan(l * in.E, in.E));
    benchmark::DoNotOptimize(acc);
    next(v, in.hotness.size());
  }
  per_iteration(state, 1);
}

// ---------------------------------------------------------------------------------------
// Eviction: one row (one token at one layer, k accesses) per iteration, with the layer
// and step hooks.

template <class Policy>
void evict(benchmark::State& state, const shape_inputs& in, const typename Policy::config_type& cfg = {}) {
  expert_cache<Policy> cache({.num_layers = static_cast<std::uint32_t>(in.L),
                              .num_experts = static_cast<std::uint32_t>(in.E),
                              .capacity = in.E / 2,
                              .scope = capacity_scope::per_layer},
                             cfg);
  std::size_t r = 0;
  std::uint64_t pos = 0;  // absolute position of the row's first access in the periodic stream
  for (auto _ : state) {
    const batch_view& v = in.views[r];
    cache.begin_layer(v);
    for (std::size_t j = 0; j < in.k; ++j) {
      const std::size_t i = r * in.k + j;
      // Sticky LRU admits only flagged misses: flag every access, so that it caches as
      // LRU does and the figure is its bookkeeping, not an empty cache.
      if constexpr (policy_traits<Policy>::takes_hints) cache.hint(in.accesses[i], 1.0f);
      benchmark::DoNotOptimize(cache.get(in.accesses[i], {.next_use = pos + j + in.next_delta[i]}));
    }
    cache.end_layer(v.ref.layer);
    if (v.ref.layer + 1u == in.L) cache.end_step();
    pos += in.k;
    next(r, in.rows);
  }
  per_iteration(state, in.k);
  state.counters["hit_ratio"] = cache.stats().hit_ratio();
}
/// The floor of the eviction policies: the row's layer and ids, each access's key and
/// next use; with `scored`, also the row's router scores and gate weights, which only the
/// score-aware policy reads (its layer hook).
void evict_floor(benchmark::State& state, const shape_inputs& in, bool scored) {
  std::size_t r = 0;
  std::uint64_t pos = 0;
  for (auto _ : state) {
    const batch_view& v = in.views[r];
    std::uint64_t acc = u64(v.ref.layer) + read_all(v.experts);
    if (scored) acc += read_all(v.scores) + read_all(v.weights);
    for (std::size_t j = 0; j < in.k; ++j) {
      const std::size_t i = r * in.k + j;
      acc += u64(in.accesses[i].layer) + u64(in.accesses[i].expert) + pos + j + in.next_delta[i];
    }
    benchmark::DoNotOptimize(acc);
    pos += in.k;
    next(r, in.rows);
  }
  per_iteration(state, in.k);
}

// ---------------------------------------------------------------------------------------
// Expert-cache router: one token at one layer.

void router(benchmark::State& state, const shape_inputs& in) {
  expert_cache_router rt({.num_experts = static_cast<std::uint32_t>(in.E),
                          .top_k = static_cast<std::uint32_t>(in.k),
                          .alpha = 0.3,
                          .prefer_batch_shared = false});
  std::vector<expert_id> out_ids(in.k);
  std::vector<float> out_w(in.k);
  std::size_t r = 0, substituted = 0;
  for (auto _ : state) {
    const std::uint8_t* mask = in.gpu_half_of(in.row_layer[r]).data();
    const route_result res = rt.route(
        in.ids_of(r), in.weights_of(r), in.scores_of(r), [mask](expert_id e) { return mask[e] != 0; }, out_ids, out_w);
    substituted += res.substituted;
    benchmark::DoNotOptimize(out_ids.data());
    benchmark::ClobberMemory();
    next(r, in.rows);
  }
  per_iteration(state, 1);
  state.counters["substituted"] =
      benchmark::Counter(static_cast<double>(substituted), benchmark::Counter::kAvgIterations);
}
void router_floor(benchmark::State& state, const shape_inputs& in) {
  std::size_t r = 0;
  for (auto _ : state) {
    std::uint64_t acc = read_all(in.scores_of(r)) + read_all(in.weights_of(r)) + read_all(in.ids_of(r)) +
                        read_all(in.gpu_half_of(in.row_layer[r]));
    benchmark::DoNotOptimize(acc);
    next(r, in.rows);
  }
  per_iteration(state, 1);
}

// ---------------------------------------------------------------------------------------
// Two-pointer balancer: one layer's offloaded experts at the decode batch.

void two_pointer(benchmark::State& state, const shape_inputs& in) {
  two_pointer_balancer bal(
      {.cpu_seconds_per_token = in.cpu_seconds_per_token, .load_seconds = in.load_seconds, .max_items = in.E});
  std::vector<balance_side> out(in.E);
  std::size_t i = 0;
  for (auto _ : state) {
    const auto& sizes = in.offloaded[i];
    benchmark::DoNotOptimize(bal.balance(sizes, std::span(out).first(sizes.size())));
    benchmark::ClobberMemory();
    next(i, in.offloaded.size());
  }
  per_iteration(state, 1);
}
void two_pointer_floor(benchmark::State& state, const shape_inputs& in) {
  std::size_t i = 0;
  for (auto _ : state) {
    std::uint64_t acc = read_all(std::span<const std::uint32_t>(in.offloaded[i]));
    benchmark::DoNotOptimize(acc);
    next(i, in.offloaded.size());
  }
  per_iteration(state, 1);
}

// ---------------------------------------------------------------------------------------
// Migration planner: one layer's plan from the EMA's prediction.

/// The predictor after every batched step, and the layers that have a prediction.
struct planner_inputs {
  ema_load_predictor pred;
  std::size_t layers;
  explicit planner_inputs(const shape_inputs& in) : pred(in.L, in.E), layers(std::min(in.L, in.step_loads.size())) {
    for (std::size_t i = 0; i < in.step_loads.size(); ++i) pred.update(in.step_layer[i], in.step_loads[i]);
  }
};

void migration_plan(benchmark::State& state, const shape_inputs& in) {
  const planner_inputs pi(in);
  migration_planner planner(*in.sys, in.E);
  std::size_t l = 0, tasks = 0;
  for (auto _ : state) {
    const auto lid = static_cast<layer_id>(l);
    const auto t = planner.plan(lid, pi.pred.predicted_loads(lid), pi.pred.predicted_classes(lid), in.layouts[l],
                                in.hbm[l], 0.68e-3, 8'000'000'000ULL);
    tasks += t.size();
    benchmark::DoNotOptimize(t.data());
    next(l, pi.layers);
  }
  per_iteration(state, 1);
  state.counters["tasks"] = benchmark::Counter(static_cast<double>(tasks), benchmark::Counter::kAvgIterations);
}
void migration_plan_reference(benchmark::State& state, const shape_inputs& in) {
  const planner_inputs pi(in);
  reference::migration_planner planner(*in.sys, in.E);
  std::size_t l = 0, tasks = 0;
  for (auto _ : state) {
    const auto lid = static_cast<layer_id>(l);
    const auto t = planner.plan(lid, pi.pred.predicted_loads(lid), pi.pred.predicted_classes(lid), in.layouts[l],
                                in.hbm[l], 0.68e-3, 8'000'000'000ULL);
    tasks += t.size();
    benchmark::DoNotOptimize(t.data());
    next(l, pi.layers);
  }
  per_iteration(state, 1);
  state.counters["tasks"] = benchmark::Counter(static_cast<double>(tasks), benchmark::Counter::kAvgIterations);
}
void migration_plan_floor(benchmark::State& state, const shape_inputs& in) {
  const planner_inputs pi(in);
  std::size_t l = 0;
  for (auto _ : state) {
    const auto lid = static_cast<layer_id>(l);
    const auto x = pi.pred.predicted_loads(lid);
    const auto c = pi.pred.predicted_classes(lid);
    std::uint64_t acc = 0;
    for (std::size_t e = 0; e < in.E; ++e) {
      acc += bits_of(x[e]) + static_cast<std::uint64_t>(c[e]) + u64(in.layouts[l][e].home) + u64(in.hbm[l][e]);
    }
    benchmark::DoNotOptimize(acc);
    next(l, pi.layers);
  }
  per_iteration(state, 1);
}

// ---------------------------------------------------------------------------------------
// Handle resolution: a forward pass of one token resolves its L·k routed experts.

struct resolve_inputs {
  versioned_expert_table table;
  std::vector<expert_handle> handles;  // per access, in stream order
  explicit resolve_inputs(const shape_inputs& in) : table(in.L, in.E) {
    for (std::size_t i = 0; i < in.L * in.E; ++i) table.install(table.key_of(i), precision_tier::low, {}, {});
    handles.reserve(in.accesses.size());
    for (const expert_key& key : in.accesses) handles.push_back(table.handle(key));
  }
};

void resolve(benchmark::State& state, const shape_inputs& in) {
  resolve_inputs ri(in);
  auto reader = ri.table.register_reader();
  const auto guard = reader.pin();
  const std::size_t pass = in.L * in.k;
  std::size_t start = 0;
  for (auto _ : state) {
    for (std::size_t i = start; i < start + pass; ++i) {
      const expert_version& v = ri.handles[i].resolve(guard);
      benchmark::DoNotOptimize(&v);
    }
    start += pass;
    if (start == ri.handles.size()) start = 0;
  }
  per_iteration(state, pass);
}
void resolve_floor(benchmark::State& state, const shape_inputs& in) {
  // The same sequence of experts as pointers into a dense array of atomic pointers: one
  // acquire load each, no table, no guard.
  resolve_inputs ri(in);
  std::vector<std::atomic<const expert_version*>> cells(in.L * in.E);
  {
    auto reader = ri.table.register_reader();
    const auto guard = reader.pin();
    for (std::size_t i = 0; i < cells.size(); ++i) cells[i].store(&guard.resolve(ri.table.key_of(i)));
  }
  std::vector<const std::atomic<const expert_version*>*> seq;
  seq.reserve(in.accesses.size());
  for (const expert_key& key : in.accesses) seq.push_back(&cells[key.flat(in.E)]);
  const std::size_t pass = in.L * in.k;
  std::size_t start = 0;
  for (auto _ : state) {
    for (std::size_t i = start; i < start + pass; ++i) {
      const expert_version* v = seq[i]->load(std::memory_order_acquire);
      benchmark::DoNotOptimize(v);
    }
    start += pass;
    if (start == seq.size()) start = 0;
  }
  per_iteration(state, pass);
}

// ---------------------------------------------------------------------------------------
// Registration: per shape, each policy followed by its floor (registered once).

using bench_fn = void (*)(benchmark::State&, const shape_inputs&);

struct decision {
  const char* policy;
  const char* floor;
  bench_fn run;
  bench_fn run_floor;
  benchmark::TimeUnit unit;
};

void run_evict_lru(benchmark::State& s, const shape_inputs& in) { evict<lru_policy>(s, in); }
void run_evict_lfu(benchmark::State& s, const shape_inputs& in) { evict<lfu_policy>(s, in); }
void run_evict_fifo(benchmark::State& s, const shape_inputs& in) { evict<fifo_policy>(s, in); }
void run_evict_sticky_lru(benchmark::State& s, const shape_inputs& in) { evict<sticky_lru_policy>(s, in); }
void run_evict_score_aware(benchmark::State& s, const shape_inputs& in) { evict<score_aware_policy>(s, in); }
void run_evict_score_aware_reference(benchmark::State& s, const shape_inputs& in) {
  evict<reference::score_aware_policy>(s, in);
}
void run_evict_belady(benchmark::State& s, const shape_inputs& in) { evict<belady_policy>(s, in); }
void run_evict_hawkeye(benchmark::State& s, const shape_inputs& in) { evict<hawkeye_policy>(s, in); }
void run_evict_predicted_reuse(benchmark::State& s, const shape_inputs& in) { evict<predicted_reuse_policy>(s, in); }
void run_evict_gated_prefetch(benchmark::State& s, const shape_inputs& in) { evict<gated_prefetch_policy>(s, in); }
/// Two size classes (every fourth expert of a layer at four times the bytes), as in
/// cache_bench: the victim compares the oldest resident of each class with the largest
/// size x interval.
void run_evict_size_aware_reuse(benchmark::State& s, const shape_inputs& in) {
  std::vector<bytes> sizes(in.L * in.E, 17);
  for (std::size_t f = 0; f < sizes.size(); f += 4) sizes[f] = 64;
  evict<size_aware_reuse_policy>(s, in, {.footprints = sizes});
}
void evict_keys_floor(benchmark::State& s, const shape_inputs& in) { evict_floor(s, in, false); }
void evict_scored_floor(benchmark::State& s, const shape_inputs& in) { evict_floor(s, in, true); }

const std::array<decision, 29> all_decisions{{
    {"collector", "collector", collector, collector_floor, benchmark::kNanosecond},
    {"importance_topk", "importance", importance_topk, importance_floor, benchmark::kNanosecond},
    {"importance_topk_reference", "importance", importance_topk_reference, importance_floor, benchmark::kNanosecond},
    {"prefix_split", "allocation", prefix_split_layer, allocation_floor, benchmark::kMicrosecond},
    {"prefix_split_reference", "allocation", prefix_split_reference, allocation_floor, benchmark::kMicrosecond},
    {"exact_allocation", "allocation", exact_allocation_layer, allocation_floor, benchmark::kMicrosecond},
    {"exact_allocation_reference", "allocation", exact_allocation_reference, allocation_floor, benchmark::kMicrosecond},
    {"exact_allocation_convex", "allocation", exact_allocation_convex, allocation_floor, benchmark::kMicrosecond},
    {"placement", "placement", placement, placement_floor, benchmark::kMicrosecond},
    {"makespan_paper", "makespan", makespan_paper, makespan_floor, benchmark::kNanosecond},
    {"makespan_local", "makespan", makespan_local, makespan_floor, benchmark::kNanosecond},
    {"ema_update", "ema", ema_update, ema_floor, benchmark::kNanosecond},
    {"precision_target", "precision_target", precision_target, precision_target_floor, benchmark::kNanosecond},
    {"evict_lru", "evict", run_evict_lru, evict_keys_floor, benchmark::kNanosecond},
    {"evict_lfu", "evict", run_evict_lfu, evict_keys_floor, benchmark::kNanosecond},
    {"evict_fifo", "evict", run_evict_fifo, evict_keys_floor, benchmark::kNanosecond},
    {"evict_sticky_lru", "evict", run_evict_sticky_lru, evict_keys_floor, benchmark::kNanosecond},
    {"evict_score_aware", "evict_scored", run_evict_score_aware, evict_scored_floor, benchmark::kNanosecond},
    {"evict_score_aware_reference", "evict_scored", run_evict_score_aware_reference, evict_scored_floor,
     benchmark::kNanosecond},
    {"evict_belady", "evict", run_evict_belady, evict_keys_floor, benchmark::kNanosecond},
    {"evict_hawkeye", "evict", run_evict_hawkeye, evict_keys_floor, benchmark::kNanosecond},
    {"evict_predicted_reuse", "evict", run_evict_predicted_reuse, evict_keys_floor, benchmark::kNanosecond},
    {"evict_gated_prefetch", "evict", run_evict_gated_prefetch, evict_keys_floor, benchmark::kNanosecond},
    {"evict_size_aware_reuse", "evict", run_evict_size_aware_reuse, evict_keys_floor, benchmark::kNanosecond},
    {"router", "router", router, router_floor, benchmark::kNanosecond},
    {"two_pointer", "two_pointer", two_pointer, two_pointer_floor, benchmark::kNanosecond},
    {"migration_planner", "migration_planner", migration_plan, migration_plan_floor, benchmark::kNanosecond},
    {"migration_planner_reference", "migration_planner", migration_plan_reference, migration_plan_floor,
     benchmark::kNanosecond},
    {"resolve", "resolve", resolve, resolve_floor, benchmark::kNanosecond},
}};

[[maybe_unused]] const bool registered = [] {
  for (std::size_t s = 0; s < shape_cases.size(); ++s) {
    const std::string shape = std::string("/shape:") + shape_cases[s].id;
    std::vector<std::string> floors_done;
    for (const decision& d : all_decisions) {
      const auto bind = [s](bench_fn f) { return [s, f](benchmark::State& st) { f(st, inputs(s)); }; };
      benchmark::RegisterBenchmark((std::string("policy:") + d.policy + "/floor:" + d.floor + shape).c_str(),
                                   bind(d.run))
          ->Unit(d.unit);
      if (std::find(floors_done.begin(), floors_done.end(), d.floor) != floors_done.end()) continue;
      floors_done.emplace_back(d.floor);
      benchmark::RegisterBenchmark((std::string("floor:") + d.floor + shape).c_str(), bind(d.run_floor))->Unit(d.unit);
    }
  }
  return true;
}();

}  // namespace
