// SPDX-License-Identifier: Apache-2.0
// The space-time bound on demand hits with variable sizes: hand-worked cases, that it is at
// least every policy's hits (Belady's MIN included) on the bundled trace with equal and
// unequal sizes, at most the reuses, and its errors.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "cache_test_support.hpp"
#include "moepolicy/cache/belady.hpp"
#include "moepolicy/cache/lfu.hpp"
#include "moepolicy/cache/lru.hpp"
#include "moepolicy/cache/predicted_reuse.hpp"
#include "moepolicy/cache/space_time_bound.hpp"
#include "moepolicy/sim/cache_replay.hpp"

using namespace moepolicy;

TEST_CASE("space-time bound: hand-worked cases") {
  constexpr expert_key A{0, 0}, B{0, 1};
  const std::vector<expert_key> abab{A, B, A, B};
  // One slot, 3 gaps: each reuse holds its expert for 2 gaps, so only one fits (MIN: 1).
  CHECK(space_time_hit_bound(abab, {.num_layers = 1, .num_experts = 2, .capacity = 1}) == 1);
  CHECK(space_time_hit_bound(abab, {.num_layers = 1, .num_experts = 2, .capacity = 2}) == 2);
  // Bytes: A weighs 3, B 1, capacity 3 -> budget 9; A's reuse costs 6, B's 2: both fit.
  const cache_config bytes{
      .num_layers = 1, .num_experts = 2, .capacity = 3, .unit = capacity_unit::byte_count, .footprints = {3, 1}};
  CHECK(space_time_hit_bound(abab, bytes) == 2);
  // Capacity 2: A never fits; B's reuse (cost 2 <= 6) does.
  cache_config small = bytes;
  small.capacity = 2;
  CHECK(space_time_hit_bound(abab, small) == 1);
  // Per-layer pools keep their own clocks: layer 1's accesses do not lengthen layer 0's gaps.
  const std::vector<expert_key> two{A, {1, 0}, {1, 1}, A};
  CHECK(space_time_hit_bound(
            two, {.num_layers = 2, .num_experts = 2, .capacity = 1, .scope = capacity_scope::per_layer}) == 1);
  CHECK(space_time_hit_bound(
            two, {.num_layers = 2, .num_experts = 2, .capacity = 0, .scope = capacity_scope::per_layer}) == 0);
}

TEST_CASE("space-time bound: at least every policy's hits, MIN included, at most the reuses") {
  const routing_trace t = test::granite_trace();
  const std::uint32_t L = t.info().num_layers, E = t.info().num_experts;
  const std::vector<expert_key> accesses = replay_accesses(t);
  std::vector<bytes> sizes(static_cast<std::size_t>(L) * E);
  for (std::size_t f = 0; f < sizes.size(); ++f) sizes[f] = f % 4 == 0 ? 4 : 1;  // a quarter at 4x
  std::uint64_t reuses = 0;
  {
    std::vector<std::uint8_t> seen(sizes.size(), 0);
    for (expert_key k : accesses) {
      reuses += seen[k.flat(E)];
      seen[k.flat(E)] = 1;
    }
  }
  for (const capacity_scope scope : {capacity_scope::per_layer, capacity_scope::shared}) {
    for (const std::uint64_t per_layer : {2u, 8u, 16u}) {
      const std::uint64_t c = scope == capacity_scope::shared ? per_layer * L : per_layer;
      CAPTURE(c);
      const cache_config equal{.num_layers = L, .num_experts = E, .capacity = c, .scope = scope};
      const std::uint64_t bound_equal = space_time_hit_bound(accesses, equal);
      CHECK(bound_equal >= replay_cache<belady_policy>(t, equal).stats.hits);
      CHECK(bound_equal <= reuses);
      const cache_config unequal{.num_layers = L,
                                 .num_experts = E,
                                 .capacity = 2 * c,
                                 .unit = capacity_unit::byte_count,
                                 .scope = scope,
                                 .footprints = sizes};
      const std::uint64_t bound = space_time_hit_bound(accesses, unequal);
      CHECK(bound >= replay_cache<belady_policy>(t, unequal).stats.hits);
      CHECK(bound >= replay_cache<lru_policy>(t, unequal).stats.hits);
      CHECK(bound >= replay_cache<lfu_policy>(t, unequal).stats.hits);
      CHECK(bound >= replay_cache<predicted_reuse_policy>(t, unequal).stats.hits);
      CHECK(bound <= reuses);
    }
  }
}

TEST_CASE("space-time bound: errors name the function, the problem and the value") {
  const std::vector<expert_key> a{{0, 0}, {0, 5}};
  CHECK_THROWS_WITH_AS(static_cast<void>(space_time_hit_bound(a, {.num_layers = 1, .num_experts = 2})),
                       "moepolicy::space_time_hit_bound: access outside the cache's shape: expert, got 5",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(space_time_hit_bound(a, {.num_layers = 0, .num_experts = 2})),
                       "moepolicy::space_time_hit_bound: num_layers must be in [1, 65536], got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(
      static_cast<void>(space_time_hit_bound(a, {.num_layers = 1, .num_experts = 8, .footprints = {1, 2}})),
      "moepolicy::space_time_hit_bound: footprints must be empty or hold num_layers * num_experts entries, got 2",
      invalid_argument);
}
