// SPDX-License-Identifier: Apache-2.0
// The Hawkeye-style policy: OPTgen's decisions and the counters on hand-worked sequences,
// the replacement order, the shield, admission, errors, that it reads only the past, and
// its hit counts on the bundled Granite trace.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "cache_test_support.hpp"
#include "moepolicy/cache/belady.hpp"
#include "moepolicy/cache/expert_cache.hpp"
#include "moepolicy/cache/hawkeye.hpp"
#include "moepolicy/sim/cache_replay.hpp"
#include "no_future.hpp"

using namespace moepolicy;

namespace {
constexpr expert_key A{0, 0}, B{0, 1}, C{0, 2}, D{0, 3};
cache_config one_pool(std::uint64_t capacity) { return {.num_layers = 1, .num_experts = 4, .capacity = capacity}; }
}  // namespace

TEST_CASE("hawkeye: OPTgen with C = 1 keeps A's interval and refuses B's, which overlaps it") {
  // Real cache of 2, OPTgen simulating 1: A B A B. At t = 2 A's interval [0, 2) is free:
  // MIN hit, counter 4 -> 5. At t = 3 B's interval [1, 3) holds A's: MIN miss, 4 -> 3.
  expert_cache<hawkeye_policy> cache(one_pool(2), {.capacity = 1});
  for (expert_key k : {A, B, A, B}) cache.get(k);
  CHECK(cache.policy().counter(A) == 5);
  CHECK(cache.policy().counter(B) == 3);
  CHECK(cache.policy().friendly(A));
  CHECK_FALSE(cache.policy().friendly(B));
  // B is averse, so it goes first although A is the least recently used (LRU would evict A).
  CHECK(cache.victim_for(C) == B);
  cache.get(C);
  CHECK(cache.contains(A));
  CHECK_FALSE(cache.contains(B));
}

TEST_CASE("hawkeye: an interval longer than the window is a MIN miss; a first access trains nothing") {
  // W = 1 × C = 2: A B C A has an interval of 3 > 2.
  expert_cache<hawkeye_policy> cache(one_pool(4), {.capacity = 2, .window_factor = 1});
  for (expert_key k : {A, B, C}) cache.get(k);
  CHECK(cache.policy().counter(A) == 4);
  cache.get(A);
  CHECK(cache.policy().counter(A) == 3);
  // With W = 8 × 2 the same interval fits: no occupancy reaches 2.
  expert_cache<hawkeye_policy> wide(one_pool(4), {.capacity = 2});
  for (expert_key k : {A, B, C, A}) wide.get(k);
  CHECK(wide.policy().counter(A) == 5);
}

TEST_CASE("hawkeye: counters saturate at 2^bits - 1 and at 0; the threshold is the top bit") {
  expert_cache<hawkeye_policy> cache(one_pool(2), {.capacity = 2, .counter_bits = 2});
  CHECK(cache.policy().counter(A) == 2);
  for (int i = 0; i < 5; ++i) cache.get(A);
  CHECK(cache.policy().counter(A) == 3);
  // C = 1 and window 1: every reuse after another expert is a MIN miss.
  expert_cache<hawkeye_policy> tight(one_pool(2), {.capacity = 1, .window_factor = 1, .counter_bits = 2});
  for (int i = 0; i < 4; ++i) {
    tight.get(A);
    tight.get(B);
  }
  CHECK(tight.policy().counter(A) == 0);
  CHECK_FALSE(tight.policy().friendly(A));
}

TEST_CASE("hawkeye: with no averse resident the least recently used friendly one goes, and is detrained") {
  expert_cache<hawkeye_policy> cache(one_pool(2), {.capacity = 2});
  cache.get(A);
  cache.get(B);
  CHECK(cache.victim_for(C) == A);
  cache.get(C);  // evicts A, friendly: 4 -> 3
  CHECK(cache.policy().counter(A) == 3);
  expert_cache<hawkeye_policy> kept(one_pool(2), {.capacity = 2, .detrain_on_eviction = false});
  for (expert_key k : {A, B, C}) kept.get(k);
  CHECK(kept.policy().counter(A) == 4);
}

TEST_CASE("hawkeye: the inferred capacity is the most residents the pool has held") {
  expert_cache<hawkeye_policy> cache(one_pool(3));
  CHECK(cache.policy().simulated_capacity(0) == 0);
  for (expert_key k : {A, B, C, D}) cache.get(k);
  CHECK(cache.policy().simulated_capacity(0) == 3);
}

TEST_CASE("hawkeye: a miss predicted averse is not cached when it would evict, with bypass_averse") {
  expert_cache<hawkeye_policy> cache(one_pool(2), {.capacity = 1, .bypass_averse = true});
  for (expert_key k : {A, B, A, B}) cache.get(k);  // B averse (see the first case)
  cache.get(C);                                      // room is made by evicting averse B
  CHECK_FALSE(cache.contains(B));
  // B is averse and the pool is full: served, not cached.
  const access_outcome o = cache.get(B);
  CHECK_FALSE(o.inserted);
  CHECK(cache.stats().rejections == 1);
  CHECK(cache.contains(A));
  CHECK(cache.contains(C));
}

TEST_CASE("hawkeye: bad configuration names the function, the field and the value") {
  CHECK_THROWS_WITH_AS(hawkeye_policy({1, 1}, {.window_factor = 0}),
                       "moepolicy::hawkeye_policy: window_factor must be in [1, 64], got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(hawkeye_policy({1, 1}, {.counter_bits = 9}),
                       "moepolicy::hawkeye_policy: counter_bits must be in [1, 8], got 9", invalid_argument);
  // Two layers of four experts in one shared pool hold 8; per layer, 4.
  CHECK_NOTHROW(hawkeye_policy({2, 4}, {.capacity = 8}));
  CHECK_THROWS_WITH_AS(hawkeye_policy({2, 4}, {.capacity = 9}),
                       "moepolicy::hawkeye_policy: capacity exceeds the experts of a pool (8), got 9", invalid_argument);
  CHECK_THROWS_WITH_AS(hawkeye_policy({2, 4, moepolicy::capacity_scope::per_layer}, {.capacity = 5}),
                       "moepolicy::hawkeye_policy: capacity exceeds the experts of a pool (4), got 5", invalid_argument);
}

TEST_CASE("hawkeye: decisions up to step t depend on no access after t, nor on next_use") {
  test::check_no_future<hawkeye_policy>({});
  test::check_no_future<hawkeye_policy>({.capacity = 6, .bypass_averse = true});
}

TEST_CASE("hawkeye: hit counts on the bundled Granite trace") {
  const routing_trace t = test::granite_trace();
  const std::uint32_t L = t.info().num_layers, E = t.info().num_experts;
  const auto hits = [&](std::uint64_t cap, capacity_scope s, hawkeye_config c) {
    return replay_cache<hawkeye_policy>(t, {.num_layers = L, .num_experts = E, .capacity = cap, .scope = s}, c)
        .stats.hits;
  };
  CHECK(hits(16, capacity_scope::per_layer, {}) == 32338);
  CHECK(hits(16, capacity_scope::per_layer, {.capacity = 16}) == 32338);
  CHECK(hits(8, capacity_scope::per_layer, {.capacity = 8, .bypass_averse = true}) == 19875);
  CHECK(hits(384, capacity_scope::shared, {.capacity = 384}) == 29314);
}
