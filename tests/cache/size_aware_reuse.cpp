// SPDX-License-Identifier: Apache-2.0
// The size-aware reuse policy: with one size it decides as predicted reuse; with sizes it
// evicts the largest size × predicted distance on a hand-worked sequence, and keeps more
// hits than the size-blind rule there; errors; that it reads only the past; its hits on the
// bundled Granite trace in a byte-capacity cache beside the space-time bound.
#include "moepolicy/cache/size_aware_reuse.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cache_test_support.hpp"
#include "moepolicy/cache/expert_cache.hpp"
#include "moepolicy/cache/predicted_reuse.hpp"
#include "moepolicy/cache/space_time_bound.hpp"
#include "moepolicy/sim/cache_replay.hpp"
#include "no_future.hpp"

using namespace moepolicy;

namespace {
constexpr expert_key a{0, 0}, B{0, 1}, c{0, 2};
/// One layer of three experts: a and c of 1 byte, B of 4; a pool of 5 bytes.
cache_config bytes_pool() {
  return {.num_layers = 1, .num_experts = 3, .capacity = 5, .unit = capacity_unit::byte_count, .footprints = {1, 4, 1}};
}
}  // namespace

TEST_CASE("size-aware reuse: the largest size x predicted distance goes, not the farthest") {
  // a B B c a, smoothing 1. Before c: a idles 2 (D = 2, cost 1 x 2), B has I = 1 (D = 1,
  // cost 4 x 1). The size-blind rule evicts a (D 2 > 1) and misses a again; this one evicts
  // B, which frees the room of four a's, and hits a.
  expert_cache<size_aware_reuse_policy> sized(bytes_pool(), {.smoothing = 1.0, .footprints = {1, 4, 1}});
  expert_cache<predicted_reuse_policy> blind(bytes_pool(), {.smoothing = 1.0});
  for (expert_key k : {a, B, B}) {
    sized.get(k);
    blind.get(k);
  }
  CHECK(sized.policy().predicted_cost(a) == 2.0);
  CHECK(sized.policy().predicted_cost(B) == 4.0);
  CHECK(sized.victim_for(c) == B);
  CHECK(blind.victim_for(c) == a);
  for (expert_key k : {c, a}) {
    sized.get(k);
    blind.get(k);
  }
  CHECK(sized.stats().hits == 2);
  CHECK(blind.stats().hits == 1);
}

TEST_CASE("size-aware reuse: with one size it decides exactly as predicted reuse") {
  const routing_trace t = test::granite_trace();
  const std::uint32_t L = t.info().num_layers, E = t.info().num_experts;
  for (capacity_scope s : {capacity_scope::per_layer, capacity_scope::shared}) {
    const cache_config cc{
        .num_layers = L, .num_experts = E, .capacity = s == capacity_scope::shared ? 200u : 8u, .scope = s};
    const cache_stats x = replay_cache<size_aware_reuse_policy>(t, cc, {}).stats;
    const cache_stats y = replay_cache<predicted_reuse_policy>(t, cc, {}).stats;
    CHECK(x.hits == y.hits);
    CHECK(x.evictions == y.evictions);
    // Equal footprints given explicitly are one class: the same again.
    const cache_stats z =
        replay_cache<size_aware_reuse_policy>(t, cc, {.footprints = std::vector<bytes>(cc.shape().slots(), 7)}).stats;
    CHECK(z.hits == y.hits);
  }
}

TEST_CASE("size-aware reuse: bad configuration names the function, the field and the value") {
  const cache_shape s{1, 3};
  CHECK_THROWS_WITH_AS(size_aware_reuse_policy(s, {.smoothing = 0.0}),
                       "moepolicy::size_aware_reuse_policy: smoothing must be in (0, 1], got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(size_aware_reuse_policy(s, {.footprints = {1, 2}}),
                       "moepolicy::size_aware_reuse_policy: footprints must be empty or hold num_layers x "
                       "num_experts = 3 entries, got 2",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(size_aware_reuse_policy(s, {.footprints = {1, 0, 2}}),
                       "moepolicy::size_aware_reuse_policy: a footprint must be > 0: expert 1, got 0",
                       invalid_argument);
  std::vector<bytes> many(20);
  for (std::size_t i = 0; i < many.size(); ++i) many[i] = i + 1;
  CHECK_THROWS_WITH_AS(size_aware_reuse_policy(cache_shape{1, 20}, {.footprints = many}),
                       "moepolicy::size_aware_reuse_policy: at most 16 distinct footprints, a 17th, got 17",
                       invalid_argument);
}

TEST_CASE("size-aware reuse: decisions up to step t depend on no access after t, nor on next_use") {
  const routing_trace g = test::granite_trace();
  std::vector<bytes> sizes(static_cast<std::size_t>(g.info().num_layers) * g.info().num_experts, 17);
  for (std::size_t f = 0; f < sizes.size(); f += 4) sizes[f] = 64;  // a quarter at four times the size
  test::check_no_future<size_aware_reuse_policy>({});
  test::check_no_future<size_aware_reuse_policy>({.smoothing = 0.5, .footprints = sizes});
}

TEST_CASE("size-aware reuse: hit counts on the bundled Granite trace, bytes capacity, beside the bound") {
  // The reuse_eviction driver's byte table: the hottest quarter of each layer at FP16
  // (2 MiB), the rest at 4.25 bits (557,056 B); 8 FP16 experts' bytes per layer.
  const routing_trace t = test::granite_trace();
  const std::uint32_t L = t.info().num_layers, E = t.info().num_experts;
  const std::vector<expert_key> accesses = replay_accesses(t);
  std::vector<std::uint64_t> count(static_cast<std::size_t>(L) * E, 0);
  for (expert_key k : accesses) ++count[k.flat(E)];
  std::vector<bytes> sizes(count.size(), (bytes{1} << 20) * 17 / 32);
  for (std::uint32_t l = 0; l < L; ++l) {
    std::vector<std::uint32_t> order(E);
    for (std::uint32_t e = 0; e < E; ++e) order[e] = e;
    const std::size_t base = static_cast<std::size_t>(l) * E;
    std::sort(order.begin(), order.end(), [&](std::uint32_t x, std::uint32_t y) {
      return count[base + x] > count[base + y] || (count[base + x] == count[base + y] && x < y);
    });
    for (std::uint32_t i = 0; i < E / 4; ++i) sizes[base + order[i]] = (bytes{1} << 20) * 2;
  }
  const cache_config cc{.num_layers = L,
                        .num_experts = E,
                        .capacity = 8 * (bytes{1} << 20) * 2,
                        .unit = capacity_unit::byte_count,
                        .scope = capacity_scope::per_layer,
                        .footprints = sizes};
  const std::uint64_t sized = replay_cache<size_aware_reuse_policy>(t, cc, {.footprints = sizes}).stats.hits;
  const std::uint64_t blind = replay_cache<predicted_reuse_policy>(t, cc, {}).stats.hits;
  const std::uint64_t bound = space_time_hit_bound(accesses, cc);
  CHECK(sized <= bound);
  CHECK(sized > blind);
  CHECK(sized == 29301);  // 65.40%: pred-reuse 58.42%, the best size-blind policy (hawkeye) 60.49%
}
