// DeepSeek EPLB reproduced: its README example array for array, and two instances with
// ties pinned from the reference itself (eplb.py run with PyTorch 1.13 on the CPU).
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "moepolicy/ep/deepseek_eplb.hpp"
#include "test_support.hpp"

using namespace moepolicy;

namespace {

std::vector<std::int32_t> slots_of(const ep_placement& p) {
  std::vector<std::int32_t> out;
  for (std::size_t l = 0; l < p.layers(); ++l) {
    const auto row = p.physical_to_logical(l);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

std::vector<std::int32_t> counts_of(const ep_placement& p) {
  std::vector<std::int32_t> out;
  for (std::size_t l = 0; l < p.layers(); ++l) {
    const auto row = p.logical_count(l);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

}  // namespace

TEST_CASE("the README example of github.com/deepseek-ai/EPLB, output for output") {
  // README, "Interface and Example": two layers of 12 experts, 16 replicas, 4 groups,
  // 2 nodes, 8 GPUs (the hierarchical policy).
  const std::vector<double> weight = {90, 132, 40,  61,  104, 165, 39,  4,   73,  56, 183, 86,
                                      20, 107, 104, 64,  19,  197, 187, 157, 172, 86, 16,  27};
  const ep_load_view loads(weight, 2, 12);
  const ep_placement p = deepseek_rebalance(loads, {.replicas = 16, .gpus = 8, .nodes = 2, .groups = 4});
  // The README's printed `phy2log`.
  const std::vector<std::int32_t> expected = {5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1,
                                              7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1};
  CHECK(slots_of(p) == expected);
  // Four replicated experts per layer, each twice: the width of logical_to_physical is 2.
  CHECK(p.max_replicas() == 2);
  CHECK(counts_of(p) == std::vector<std::int32_t>{1, 2, 1, 1, 2, 2, 1, 1, 1, 1, 2, 1,
                                                  1, 2, 1, 1, 1, 2, 2, 1, 2, 1, 1, 1});
  // Layer 0, expert 5 is in slots 0 and 2 (the first replica first); expert 0 in slot 12.
  CHECK(p.logical_to_physical(0, 5)[0] == 0);
  CHECK(p.logical_to_physical(0, 5)[1] == 2);
  CHECK(p.logical_to_physical(0, 0)[0] == 12);
  CHECK(p.logical_to_physical(0, 0)[1] == -1);
}

TEST_CASE("ties and an all-zero layer as the reference breaks them") {
  // Pinned from eplb.rebalance_experts(weight, 32, groups, nodes, 8) under PyTorch 1.13.
  std::vector<double> weight = {5, 5, 5, 1, 5, 5, 0, 5, 5, 2, 5, 5, 5, 5, 5, 5, 5, 3, 5, 5, 5, 5, 5, 5};
  weight.resize(48, 0.0);
  const ep_load_view loads(weight, 2, 24);
  SUBCASE("global policy: 8 groups on 3 nodes (the nodes do not divide the groups)") {
    const ep_placement p = deepseek_rebalance(loads, {.replicas = 32, .gpus = 8, .nodes = 3, .groups = 8});
    const std::vector<std::int32_t> expected = {
        11, 13, 8, 1,  21, 12, 0,  9,  20, 22, 10, 3,  19, 23, 8,  6,  18, 17, 7,  2,  16, 10, 2,  7,  15, 0,  4,  5,
        14, 1,  5,  4,  16, 0,  0,  0,  0,  0,  0,  0,  0,  23, 22, 21, 20, 19, 18, 17, 0,  15, 14, 13, 12, 11, 10, 9,
        8,  7,  6,  5,  4,  3,  2,  1};
    CHECK(slots_of(p) == expected);
    CHECK(p.max_replicas() == 9);
  }
  SUBCASE("hierarchical policy: 4 groups on 2 nodes") {
    const ep_placement p = deepseek_rebalance(loads, {.replicas = 32, .gpus = 8, .nodes = 2, .groups = 4});
    const std::vector<std::int32_t> expected = {
        22, 10, 18, 9,  23, 11, 19, 6,  7,  18, 20, 20, 8,  19, 21, 21, 16, 4,  15, 15, 0,  5,  12, 3,  1,  17, 14, 14,
        2,  12, 13, 13, 0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 0,  0,  0,  0,  12, 13, 14, 15, 16, 17, 18, 19,
        20, 21, 22, 23, 12, 12, 12, 12};
    CHECK(slots_of(p) == expected);
    CHECK(p.max_replicas() == 5);
  }
}

TEST_CASE("bad input names the function, the problem and the value") {
  const std::vector<double> w(12, 1.0);
  const ep_load_view loads(w, 1, 12);
  CHECK_THROWS_WITH_AS(deepseek_eplb(12, {.replicas = 8, .gpus = 4}),
                       "moepolicy::deepseek_eplb: replicas cannot hold every logical expert: replicas must be >= the 12 "
                       "logical experts, got 8",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(deepseek_eplb(12, {.replicas = 14, .gpus = 4}),
                       "moepolicy::deepseek_eplb: replicas must be a multiple of gpus (4), got 14", invalid_argument);
  // The hierarchical policy (2 nodes divide 4 groups) needs whole nodes of GPUs.
  CHECK_THROWS_WITH_AS(deepseek_eplb(12, {.replicas = 18, .gpus = 6, .nodes = 4, .groups = 4}),
                       "moepolicy::deepseek_eplb: gpus must be a multiple of nodes (4), got 6", invalid_argument);
  CHECK_THROWS_WITH_AS(deepseek_eplb(12, {.replicas = 16, .gpus = 4, .groups = 5}),
                       "moepolicy::deepseek_eplb: groups must divide the 12 logical experts, got 5", invalid_argument);
  deepseek_eplb solver(12, {.replicas = 16, .gpus = 4});
  ep_placement out;
  std::vector<double> bad = w;
  bad[7] = -1.0;
  CHECK_THROWS_WITH_AS(solver.solve(ep_load_view(bad, 1, 12), out),
                       "moepolicy::deepseek_eplb::solve: load of layer 0, expert 7 must be finite and >= 0, got -1",
                       invalid_argument);
  const std::vector<double> other(10, 1.0);
  CHECK_THROWS_WITH_AS(solver.solve(ep_load_view(other, 1, 10), out),
                       "moepolicy::deepseek_eplb::solve: load matrix experts must equal the solver's 12, got 10",
                       invalid_argument);
}
