// The workloads of the instruction-count regression guard (bench/callgrind_guard.sh): a
// fixed subset of the decisions of bench/shapes_bench.cpp at smoke sizes, each in its own
// function `moepolicy_guard_<name>` so that callgrind's inclusive count of that function
// is the cost of the workload alone (inputs are built outside it). Instruction counts are
// repeatable where timings on a shared machine are not; the script compares them with
// bench/callgrind_baseline.txt.
//
// ALL INPUTS ARE SYNTHETIC (fixed seeds, a counter-based generator): a measure of cost,
// not of any policy's quality. Run with `--describe` it prints the compiler and build
// type the counts belong to.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include <Eigen/Core>

#include "moepolicy/balance/migration_planner.hpp"
#include "moepolicy/cache/expert_cache.hpp"
#include "moepolicy/cache/score_aware.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/predict/ema_load_predictor.hpp"
#include "moepolicy/predict/precision_target.hpp"
#include "moepolicy/quant/exact_allocation.hpp"
#include "moepolicy/quant/prefix_split.hpp"
#include "moepolicy/sched/gpu_cpu_ndp.hpp"
#include "moepolicy/score/importance.hpp"

#ifndef MOEPOLICY_GUARD_BUILD_TYPE
#define MOEPOLICY_GUARD_BUILD_TYPE "unknown"
#endif

namespace {

using namespace moepolicy;

/// splitmix64: a fixed sequence on every platform (the standard distributions are not).
struct counter_rng {
  std::uint64_t state;
  std::uint64_t next() noexcept {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

const std::array<bitwidth, 4> bits{bitwidth{1}, bitwidth{2}, bitwidth{3}, bitwidth{4}};

// ---------------------------------------------------------------------------------------
// Inputs.

struct allocation_inputs {
  std::vector<Eigen::MatrixXd> bumpy, convex;  // 96 × 4 each: not convex / convex in bits
  prefix_split_workspace prefix_ws;
  exact_allocation_workspace exact_ws;
  bit_allocation out;
  explicit allocation_inputs(counter_rng& rng) {
    for (int t = 0; t < 4; ++t) {
      Eigen::MatrixXd b(96, 4), c(96, 4);
      for (Eigen::Index i = 0; i < 96; ++i) {
        double v = 1000.0 * (1.0 + rng.uniform()), step = 0.5 * v * rng.uniform();
        for (Eigen::Index j = 0; j < 4; ++j, v *= 0.3 + 0.4 * rng.uniform()) b(i, j) = v;
        c(i, 0) = 1000.0 * (1.0 + rng.uniform());
        for (Eigen::Index j = 1; j < 4; ++j, step *= 0.9 * rng.uniform()) c(i, j) = c(i, j - 1) - step;
      }
      bumpy.push_back(std::move(b));
      convex.push_back(std::move(c));
    }
  }
};

/// A stream of one-token batches through L layers with full router scores.
struct stream_inputs {
  static constexpr std::uint32_t L = 4, E = 64, k = 8, steps = 48;
  std::vector<expert_id> ids;
  std::vector<float> weights, scores;
  std::vector<std::uint32_t> positions;
  std::vector<batch_view> views;
  explicit stream_inputs(counter_rng& rng) {
    const std::size_t rows = std::size_t{steps} * L;
    ids.resize(rows * k);
    weights.resize(rows * k);
    scores.resize(rows * E);
    positions.resize(rows);
    std::vector<std::uint8_t> chosen(E);
    for (std::size_t r = 0; r < rows; ++r) {
      positions[r] = static_cast<std::uint32_t>(r / L);
      float total = 0.0f;
      for (std::size_t e = 0; e < E; ++e) {
        // Skewed: expert e's score falls with e (a popularity order), plus noise.
        const float s = static_cast<float>(rng.uniform() / (1.0 + static_cast<double>((e * 7 + r % L) % E)));
        scores[r * E + e] = s;
        total += s;
      }
      for (std::size_t e = 0; e < E; ++e) scores[r * E + e] /= total;
      std::fill(chosen.begin(), chosen.end(), std::uint8_t{0});
      for (std::size_t j = 0; j < k; ++j) {
        std::size_t best = E;
        for (std::size_t e = 0; e < E; ++e) {
          if (chosen[e] == 0 && (best == E || scores[r * E + e] > scores[r * E + best])) best = e;
        }
        chosen[best] = 1;
        ids[r * k + j] = static_cast<expert_id>(best);
        weights[r * k + j] = 1.0f / static_cast<float>(k);
      }
    }
    views.resize(rows);
    for (std::size_t r = 0; r < rows; ++r) {
      views[r] = batch_view{.ref = {.request = 0,
                                    .step = positions[r],
                                    .layer = static_cast<layer_id>(r % L),
                                    .kind = phase::decode,
                                    .first_row = static_cast<std::uint32_t>(r),
                                    .num_rows = 1},
                            .top_k = k,
                            .positions = std::span(positions).subspan(r, 1),
                            .experts = std::span<const expert_id>(ids).subspan(r * k, k),
                            .weights = std::span<const float>(weights).subspan(r * k, k),
                            .scores = std::span<const float>(scores).subspan(r * E, E)};
    }
  }
};

struct ranking_inputs {
  static constexpr std::size_t E = 256, rows = 16;
  std::vector<double> P, W, hotness;  // rows × E
  std::vector<double> score;
  std::vector<expert_id> order;
  explicit ranking_inputs(counter_rng& rng) : P(rows * E), W(rows * E), hotness(rows * E), score(E), order(E) {
    for (std::size_t i = 0; i < rows * E; ++i) {
      const double pop = 1.0 / static_cast<double>(1 + (i * 37) % E);
      P[i] = std::floor(64.0 * pop * rng.uniform());
      W[i] = P[i] * rng.uniform();
      hotness[i] = pop * (0.7 + 0.6 * rng.uniform());
    }
  }
};

using system3 = gpu_cpu_ndp_system<roofline_cost, roofline_cost, roofline_cost>;

struct planner_inputs {
  static constexpr std::size_t L = 4, E = 64, D = 16, B = 128;
  model_shape model = models::mixtral_8x7b();
  std::unique_ptr<system3> sys;
  ema_load_predictor pred{L, E};
  std::vector<std::vector<expert_layout>> layouts;
  std::vector<std::vector<std::uint8_t>> hbm;
  explicit planner_inputs(counter_rng& rng) {
    model.num_experts = E;
    sys = std::make_unique<system3>(roofline_cost{presets::h100_pcie_gen5(), model},
                                    roofline_cost{presets::xeon_8470_amx(), model},
                                    roofline_cost{presets::dimm_ndp(), model});
    std::vector<std::uint32_t> loads(E);
    for (std::size_t l = 0; l < L; ++l) {
      layouts.emplace_back(E, expert_layout::striped());
      hbm.emplace_back(E, 0);
      for (std::size_t e = 0; e < E; ++e) {
        if (e < E / 10) hbm[l][e] = 1;
        if (e >= E * 4 / 10) layouts[l][e] = expert_layout::localized(static_cast<std::uint16_t>(e % D));
      }
      for (int step = 0; step < 4; ++step) {
        for (std::size_t e = 0; e < E; ++e) {
          loads[e] =
              static_cast<std::uint32_t>(static_cast<double>(B) * rng.uniform() / (1.0 + static_cast<double>(e)));
        }
        pred.update(static_cast<layer_id>(l), loads);
      }
    }
  }
};

struct all_inputs {
  counter_rng rng{0x6d6f65706f6c6963ULL};
  allocation_inputs alloc{rng};
  stream_inputs stream{rng};
  ranking_inputs ranking{rng};
  planner_inputs planner{rng};
};

all_inputs* in = nullptr;
std::uint64_t sink = 0;  // results fold in here, so that no workload is optimised away

}  // namespace

// ---------------------------------------------------------------------------------------
// Workloads: one function each, not inlined, with C names for callgrind_annotate.

extern "C" {

[[gnu::noinline]] void moepolicy_guard_prefix_split() {
  for (const auto& L : in->alloc.bumpy) {
    for (budget_form form : {budget_form::exact, budget_form::at_most}) {
      prefix_split(bits, L, 2.5, {.form = form}, {}, in->alloc.prefix_ws, in->alloc.out);
      sink += static_cast<std::uint64_t>(in->alloc.out.used_increments);
    }
  }
}

[[gnu::noinline]] void moepolicy_guard_exact_allocation_dp() {
  for (const auto& L : in->alloc.bumpy) {
    exact_allocation(bits, L, 2.5, {}, {}, {}, exact_method::automatic, in->alloc.exact_ws, in->alloc.out);
    sink += static_cast<std::uint64_t>(in->alloc.out.used_increments);
  }
}

[[gnu::noinline]] void moepolicy_guard_exact_allocation_greedy() {
  for (const auto& L : in->alloc.convex) {
    exact_allocation(bits, L, 2.5, {}, {}, {}, exact_method::automatic, in->alloc.exact_ws, in->alloc.out);
    sink += static_cast<std::uint64_t>(in->alloc.out.used_increments);
  }
}

[[gnu::noinline]] void moepolicy_guard_score_aware_eviction(expert_cache<score_aware_policy>& cache) {
  const stream_inputs& s = in->stream;
  for (const batch_view& v : s.views) {
    cache.begin_layer(v);
    for (expert_id e : v.experts) sink += cache.get({v.ref.layer, e}).hit ? 1u : 0u;
    cache.end_layer(v.ref.layer);
    if (v.ref.layer + 1u == stream_inputs::L) cache.end_step();
  }
}

[[gnu::noinline]] void moepolicy_guard_importance_topk() {
  ranking_inputs& r = in->ranking;
  const std::size_t E = ranking_inputs::E;
  for (std::size_t i = 0; i < ranking_inputs::rows; ++i) {
    importance_scores(std::span<const double>(r.P).subspan(i * E, E), std::span<const double>(r.W).subspan(i * E, E),
                      r.score);
    sink += top_k_experts(r.score, E / 4, r.order)[0];
  }
}

[[gnu::noinline]] void moepolicy_guard_precision_target(precision_target_selector& sel) {
  ranking_inputs& r = in->ranking;
  const std::size_t E = ranking_inputs::E;
  for (std::size_t i = 0; i < ranking_inputs::rows; ++i) {
    const layer_target t =
        sel.select(static_cast<layer_id>(i % 4), std::span<const double>(r.hotness).subspan(i * E, E));
    sink += t.promote.size();
  }
}

[[gnu::noinline]] void moepolicy_guard_migration_planner(
    migration_planner<roofline_cost, roofline_cost, roofline_cost>& planner) {
  planner_inputs& p = in->planner;
  for (int round = 0; round < 2; ++round) {
    for (std::size_t l = 0; l < planner_inputs::L; ++l) {
      const auto lid = static_cast<layer_id>(l);
      sink += planner
                  .plan(lid, p.pred.predicted_loads(lid), p.pred.predicted_classes(lid), p.layouts[l], p.hbm[l],
                        0.68e-3, 8'000'000'000ULL)
                  .size();
    }
  }
}

}  // extern "C"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--describe") == 0) {
#if defined(__clang__)
    std::printf("clang %d %s\n", __clang_major__, MOEPOLICY_GUARD_BUILD_TYPE);
#elif defined(__GNUC__)
    std::printf("gcc %d %s\n", __GNUC__, MOEPOLICY_GUARD_BUILD_TYPE);
#else
    std::printf("unknown 0 %s\n", MOEPOLICY_GUARD_BUILD_TYPE);
#endif
    return 0;
  }
  all_inputs inputs;
  in = &inputs;
  // Construction stays outside the measured functions (the workspaces of the allocation
  // calls are sized inside their first call: a fixed cost too).
  expert_cache<score_aware_policy> cache({.num_layers = stream_inputs::L,
                                          .num_experts = stream_inputs::E,
                                          .capacity = stream_inputs::E / 2,
                                          .scope = capacity_scope::per_layer},
                                         {.window = 8});
  precision_target_selector sel(4, ranking_inputs::E, ranking_inputs::E / 4,
                                {.mode = target_hysteresis::margin, .margin = 0.25 / ranking_inputs::E});
  migration_planner<roofline_cost, roofline_cost, roofline_cost> planner(*inputs.planner.sys, planner_inputs::E);

  moepolicy_guard_prefix_split();
  moepolicy_guard_exact_allocation_dp();
  moepolicy_guard_exact_allocation_greedy();
  moepolicy_guard_score_aware_eviction(cache);
  moepolicy_guard_importance_topk();
  moepolicy_guard_precision_target(sel);
  moepolicy_guard_migration_planner(planner);
  std::printf("checksum %llu\n", static_cast<unsigned long long>(sink));
  return 0;
}
