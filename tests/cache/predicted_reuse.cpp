// SPDX-License-Identifier: Apache-2.0
// The predicted-reuse policy: the interval average, the victim rule and its tie-break on
// hand-worked sequences, the shield, admission, errors, that it reads only the past, and
// its hit counts on the bundled Granite trace.
#include <doctest/doctest.h>

#include <cstdint>

#include "cache_test_support.hpp"
#include "moepolicy/cache/expert_cache.hpp"
#include "moepolicy/cache/predicted_reuse.hpp"
#include "moepolicy/sim/cache_replay.hpp"
#include "no_future.hpp"

using namespace moepolicy;

namespace {
constexpr expert_key A{0, 0}, B{0, 1}, C{0, 2}, D{0, 3};
cache_config one_pool(std::uint64_t capacity) { return {.num_layers = 1, .num_experts = 4, .capacity = capacity}; }
}  // namespace

TEST_CASE("predicted reuse: the interval is a moving average of demand gaps, 0 before a second access") {
  expert_cache<predicted_reuse_policy> cache(one_pool(4), {.smoothing = 0.5});
  cache.get(A);  // t = 1
  CHECK(cache.policy().expected_interval(A) == 0.0);
  cache.get(B);  // 2
  cache.get(A);  // 3: gap 2, the first interval is taken as it is
  CHECK(cache.policy().expected_interval(A) == 2.0);
  cache.get(B);  // 4
  cache.get(C);  // 5
  cache.get(D);  // 6
  cache.get(A);  // 7: gap 4 -> 2 + 0.5 · (4 − 2) = 3
  CHECK(cache.policy().expected_interval(A) == 3.0);
  // D = max(I, idle): B idles 3 with I = 2.
  CHECK(cache.policy().predicted_distance(B) == 3.0);
  CHECK(cache.policy().predicted_distance(A) == 3.0);
}

TEST_CASE("predicted reuse: the resident with the longest interval goes before a more recently idle one") {
  // a = 1: A B B A C -> A: I = 3 (gap 4 − 1), idle 1, D = 3; B: I = 1, idle 2, D = 2; C: D = 0.
  expert_cache<predicted_reuse_policy> cache(one_pool(3), {.smoothing = 1.0});
  for (expert_key k : {A, B, B, A, C}) cache.get(k);
  CHECK(cache.policy().predicted_distance(A) == 3.0);
  CHECK(cache.policy().predicted_distance(B) == 2.0);
  CHECK(cache.victim_for(D) == A);  // LRU would evict B
}

TEST_CASE("predicted reuse: on equal predicted distances the least recently used goes") {
  // X Y X Z: X has I = 2, idle 1 (D = 2); Y, never reused, idles 2 (D = 2): a tie, Y goes.
  expert_cache<predicted_reuse_policy> cache(one_pool(3), {.smoothing = 1.0});
  for (expert_key k : {A, B, A, C}) cache.get(k);
  CHECK(cache.policy().predicted_distance(A) == 2.0);
  CHECK(cache.policy().predicted_distance(B) == 2.0);
  CHECK(cache.victim_for(D) == B);
  // One more access to C makes B idle 3 > 2: still B, now by recency alone.
  cache.get(C);
  CHECK(cache.victim_for(D) == B);
}

TEST_CASE("predicted reuse: among equal intervals the least recently used is the candidate") {
  // A B A B C D: A and B both I = 2; A idles 3, B 2: D(A) = 3 > D(B) = 2.
  expert_cache<predicted_reuse_policy> cache(one_pool(4), {.smoothing = 1.0});
  for (expert_key k : {A, B, A, B, C, D}) cache.get(k);
  CHECK(cache.victim_for({0, 0}) == A);
}

TEST_CASE("predicted reuse: with bypass a miss predicted back no sooner than the victim is not cached") {
  // a = 1, capacity 2. t = 1..3: A B A, so A has I = 2 and B idles.
  expert_cache<predicted_reuse_policy> cache(one_pool(2), {.smoothing = 1.0, .bypass = true});
  for (expert_key k : {A, B, A}) cache.get(k);
  // t = 4, C: no history, admitted. The victim: A's I = 2 exceeds B's idle time 1, so A goes.
  cache.get(C);
  CHECK(cache.contains(C));
  CHECK_FALSE(cache.contains(A));
  // t = 5, A: its interval with this gap (5 − 3 = 2) folded in is 2; the victim B has idled
  // 2 (D = 2), so A would not return sooner: served, not cached.
  const access_outcome o = cache.get(A);
  CHECK_FALSE(o.inserted);
  CHECK(cache.stats().rejections == 1);
  CHECK(cache.contains(B));
}

TEST_CASE("predicted reuse: bad configuration names the function, the field and the value") {
  CHECK_THROWS_WITH_AS(predicted_reuse_policy({1, 1}, {.smoothing = 0.0}),
                       "moepolicy::predicted_reuse_policy: smoothing must be in (0, 1], got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(predicted_reuse_policy({1, 1}, {.smoothing = 2.0}),
                       "moepolicy::predicted_reuse_policy: smoothing must be in (0, 1], got 2", invalid_argument);
}

TEST_CASE("predicted reuse: decisions up to step t depend on no access after t, nor on next_use") {
  test::check_no_future<predicted_reuse_policy>({});
  test::check_no_future<predicted_reuse_policy>({.smoothing = 0.5, .bypass = true});
}

TEST_CASE("predicted reuse: hit counts on the bundled Granite trace") {
  const routing_trace t = test::granite_trace();
  const std::uint32_t L = t.info().num_layers, E = t.info().num_experts;
  const auto hits = [&](std::uint64_t cap, capacity_scope s, predicted_reuse_config c) {
    return replay_cache<predicted_reuse_policy>(t, {.num_layers = L, .num_experts = E, .capacity = cap, .scope = s},
                                                c)
        .stats.hits;
  };
  CHECK(hits(16, capacity_scope::per_layer, {}) == 32631);
  CHECK(hits(8, capacity_scope::per_layer, {.bypass = true}) == 20158);
  CHECK(hits(384, capacity_scope::shared, {}) == 31339);
}
