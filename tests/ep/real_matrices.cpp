// Ours against DeepSeek EPLB and the lower bound on the real load matrices of ../shared:
// never a higher max GPU load than EPLB, never below the bound, on every layer and
// cluster shape; and migration from EPLB's placement.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "moepolicy/ep/deepseek_eplb.hpp"
#include "moepolicy/ep/lower_bound.hpp"
#include "moepolicy/ep/rebalancer.hpp"
#include "real_matrices.hpp"
#include "test_support.hpp"

using namespace moepolicy;

namespace {

/// The cluster shapes tried for `experts` logical experts.
std::vector<ep_cluster> shapes(std::size_t experts) {
  const auto e = static_cast<std::uint32_t>(experts);
  if (experts >= 64) {
    return {{.replicas = e + e / 8, .gpus = 8, .nodes = 2, .groups = 4},   // hierarchical
            {.replicas = e + e / 4, .gpus = 8, .nodes = 1, .groups = 1},   // global
            {.replicas = e + e / 4, .gpus = 32, .nodes = 4, .groups = 8},  // hierarchical, 32 GPUs
            {.replicas = e + e / 2, .gpus = 64, .nodes = 8, .groups = 8}};
  }
  return {{.replicas = 2 * e, .gpus = 8, .nodes = 1, .groups = 1}, {.replicas = e + 4, .gpus = 4, .nodes = 2, .groups = 2}};
}

}  // namespace

TEST_CASE("real matrices: ours <= DeepSeek EPLB, >= the lower bound") {
  MOEPOLICY_REQUIRE_SHARED_TRACES();
  for (const auto& m : test::real_matrices(test::shared_traces())) {
    const ep_load_view loads(m.values, m.layers, m.experts);
    for (const auto& c : shapes(m.experts)) {
      if (c.replicas % c.gpus != 0) continue;
      const auto ref = ep_evaluate(loads, deepseek_rebalance(loads, c), c.gpus);
      ep_rebalancer ours(m.layers, m.experts, c);
      const auto& res = ours.rebalance(loads);
      CAPTURE(m.name);
      CAPTURE(c.replicas);
      CAPTURE(c.gpus);
      CAPTURE(c.nodes);
      for (std::size_t l = 0; l < m.layers; ++l) {
        CAPTURE(l);
        CHECK(res.max_load[l] <= ref.max_load[l] * (1 + 1e-6));
        CHECK(res.max_load[l] >= ep_lower_bound(loads.row(l), c.replicas, c.gpus) * (1 - 1e-12));
      }
      CHECK(res.mean_balancedness >= ref.mean_balancedness - 1e-9);
    }
  }
}

TEST_CASE("real matrices: migrating from EPLB's placement keeps the balance and moves fewer slots than solving afresh") {
  MOEPOLICY_REQUIRE_SHARED_TRACES();
  const auto all = test::real_matrices(test::shared_traces());
  const auto& heat = all.front();  // Qwen3-30B-A3B, 48 × 128
  const ep_load_view loads(heat.values, heat.layers, heat.experts);
  const ep_cluster c{.replicas = 160, .gpus = 32, .nodes = 4, .groups = 8};
  const ep_placement ref = deepseek_rebalance(loads, c);
  std::vector<std::int32_t> current;
  for (std::size_t l = 0; l < ref.layers(); ++l) {
    const auto row = ref.physical_to_logical(l);
    current.insert(current.end(), row.begin(), row.end());
  }
  ep_rebalancer fresh(heat.layers, heat.experts, c);
  const auto fresh_moves = ep_evaluate(loads, fresh.rebalance(loads).placement, c.gpus, current).moved_total;
  ep_rebalancer migr(heat.layers, heat.experts, c);
  const auto& res = migr.rebalance(loads, current);
  CHECK(res.moved_total < fresh_moves);
  const auto ref_stats = ep_evaluate(loads, ref, c.gpus);
  CHECK(res.mean_balancedness >= ref_stats.mean_balancedness);
  MESSAGE("mbolt heat, 160 slots / 32 GPUs / 4 nodes: fresh " << fresh_moves << " moved slots, migration-aware "
                                                              << res.moved_total << " of " << 48 * 160);
}
