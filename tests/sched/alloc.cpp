// The per-step calls of sched/, predict/ema_load_predictor.hpp and balance/ndp allocate
// nothing once warmed up on a step of the same size (DESIGN §4). Counts every global
// operator new of this executable.
#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "moepolicy/balance/migration_planner.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/predict/ema_load_predictor.hpp"
#include "moepolicy/sched/bottleneck_refinement.hpp"
#include "moepolicy/sched/exact.hpp"
#include "moepolicy/sched/gpu_cpu_ndp.hpp"
#include "moepolicy/sched/local_search.hpp"
#include "moepolicy/sched/lower_bound.hpp"

namespace {
std::atomic<long> allocations{0};
}

void* operator new(std::size_t n) {
  ++allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  ++allocations;
  return std::malloc(n == 0 ? 1 : n);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return ::operator new(n, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

using namespace moepolicy;

TEST_CASE("per-step calls allocate nothing after the first step") {
  const model_shape m = models::qwen3_30b_a3b();
  const gpu_cpu_ndp_system sys(roofline_cost{presets::h100_pcie_gen5(), m}, roofline_cost{presets::xeon_8470_amx(), m},
                               roofline_cost{presets::dimm_ndp(), m});
  const std::size_t E = 128, D = sys.num_dimms();
  std::mt19937 rng(5);
  std::vector<std::vector<std::uint32_t>> steps(4, std::vector<std::uint32_t>(E));
  for (auto& s : steps) {
    for (auto& x : s) x = rng() % 4 == 0 ? 0u : static_cast<std::uint32_t>(rng() % 40);
  }
  std::vector<expert_layout> layouts(E);
  std::vector<std::uint8_t> resident(E);
  for (std::size_t e = 0; e < E; ++e) {
    layouts[e] = e % 3 == 0 ? expert_layout::localized(static_cast<std::uint16_t>(e % D)) : expert_layout::striped();
    resident[e] = e % 7 == 0 ? 1 : 0;
  }
  makespan_problem p(D, E);
  makespan_schedule out(E, D);
  bottleneck_refinement_scheduler paper;
  local_search_scheduler improved;
  exact_makespan_scheduler exact({.max_experts = 12, .node_limit = 1000});
  std::vector<double> scratch(2 * D);
  ema_load_predictor predictor(1, E);
  migration_planner planner(sys, E);

  std::array<long, 6> per{};
  const auto run = [&](const std::vector<std::uint32_t>& loads) {
    long a = allocations.load();
    const auto mark = [&](std::size_t k) {
      per[k] += allocations.load() - a;
      a = allocations.load();
    };
    sys.build_layer(0, loads, layouts, resident, fp16, p);
    mark(0);
    paper.solve(p, out);
    mark(1);
    improved.solve(p, out);
    mark(2);
    static_cast<void>(makespan_lower_bound(p, scratch));
    mark(3);
    predictor.update(0, loads);
    mark(4);
    static_cast<void>(planner.plan(0, predictor.predicted_loads(0), predictor.predicted_classes(0), layouts, resident,
                                   0.7e-3, 10'000'000'000ULL));
    mark(5);
  };
  // Warm up on the largest steps, then count.
  for (const auto& s : steps) run(s);
  std::vector<std::uint32_t> full(E, 7);
  run(full);
  per = {};
  const long before = allocations.load();
  for (const auto& s : steps) run(s);
  run(full);
  CHECK(allocations.load() - before == 0);
  // Which call allocated, if any: build, paper, improved, bound, predictor, planner.
  for (std::size_t k = 0; k < per.size(); ++k) CHECK_MESSAGE(per[k] == 0, "call ", k);

  // The exact solver on a small step.
  makespan_problem small(D, 12);
  std::vector<std::uint32_t> few(12, 3);
  sys.build_layer(0, few, std::span(layouts).first(12), std::span(resident).first(12), fp16, small);
  exact.solve(small, out);
  const long before_exact = allocations.load();
  exact.solve(small, out);
  CHECK(allocations.load() - before_exact == 0);
}
