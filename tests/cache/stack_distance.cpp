// Mattson's one-pass LRU hit curve against per-capacity replays of the LRU policy.
#include "moepolicy/cache/stack_distance.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "cache_test_support.hpp"
#include "moepolicy/cache/expert_cache.hpp"
#include "moepolicy/cache/lru.hpp"
#include "moepolicy/sim/cache_replay.hpp"

using namespace moepolicy;

namespace {

std::uint64_t lru_hits(std::span<const expert_key> accesses, const cache_shape& s, std::uint64_t capacity) {
  expert_cache<lru_policy> c(
      {.num_layers = s.num_layers, .num_experts = s.num_experts, .capacity = capacity, .scope = s.scope});
  for (const expert_key& k : accesses) c.get(k);
  return c.stats().hits;
}

void check_every_capacity(std::span<const expert_key> accesses, const cache_shape& s) {
  const hit_curve curve = lru_hit_curve(accesses, s);
  CHECK(curve.accesses == accesses.size());
  CHECK(curve.hits_at(0) == 0);
  for (std::uint64_t c = 0; c <= s.partition_slots() + 1; ++c) {
    CAPTURE(c);
    CHECK(curve.hits_at(c) == lru_hits(accesses, s, c));
  }
  // With every expert resident, only first accesses miss.
  CHECK(curve.hits_at(s.partition_slots()) == curve.accesses - curve.cold_misses);
}

}  // namespace

TEST_CASE("hand-worked stack distances") {
  // a b c a b d a: distances -, -, -, 3, 3, -, 3.
  std::vector<expert_key> seq;
  for (int e : {0, 1, 2, 0, 1, 3, 0}) seq.push_back({0, static_cast<expert_id>(e)});
  const hit_curve c = lru_hit_curve(seq, {1, 4});
  CHECK(c.cold_misses == 4);
  CHECK(c.hits_at(2) == 0);
  CHECK(c.hits_at(3) == 3);
  CHECK(c.hit_ratio(3) == doctest::Approx(3.0 / 7.0));
  CHECK(c.hits_at(100) == 3);
}

TEST_CASE("one pass equals a replay at every capacity (synthetic trace, shared and per layer)") {
  const routing_trace t = test::synthetic_trace(3, {.layers = 3, .experts = 10, .top_k = 3, .batch = 2});
  const auto accesses = replay_accesses(t);
  check_every_capacity(accesses, {3, 10, capacity_scope::shared});
  check_every_capacity(accesses, {3, 10, capacity_scope::per_layer});
}

TEST_CASE("one pass equals a replay at every capacity (bundled Granite trace)") {
  const routing_trace t = test::granite_trace();
  const auto accesses = replay_accesses(t);
  check_every_capacity(accesses, {24, 32, capacity_scope::per_layer});
  // Shared: every capacity on the first two requests (769 replays of the whole trace
  // would take a while under sanitizers), and a stride on the whole trace.
  const std::span<const expert_key> head(accesses.data(), accesses.size() / 6);
  check_every_capacity(head, {24, 32, capacity_scope::shared});
  const hit_curve curve = lru_hit_curve(accesses, {24, 32});
  for (std::uint64_t c = 0; c <= 768; c += 37) CHECK(curve.hits_at(c) == lru_hits(accesses, {24, 32}, c));
}

TEST_CASE("stack distances of long streams over few keys match a move-to-front list (times renumbered)") {
  std::mt19937 rng(11);
  for (const std::size_t slots : {std::size_t{1}, std::size_t{3}, std::size_t{40}, std::size_t{100}}) {
    std::vector<std::uint32_t> stream(20000);
    std::uniform_int_distribution<std::uint32_t> pick(0, static_cast<std::uint32_t>(slots - 1));
    for (auto& x : stream) x = pick(rng) % (1 + pick(rng));  // skewed toward small keys
    std::vector<std::uint64_t> got(slots + 1, 0), want(slots + 1, 0);
    const std::uint64_t cold = moepolicy::detail::add_stack_distances(stream, slots, got);
    std::vector<std::uint32_t> stack;  // most recent first
    std::uint64_t want_cold = 0;
    for (const std::uint32_t f : stream) {
      const auto it = std::find(stack.begin(), stack.end(), f);
      if (it == stack.end()) {
        ++want_cold;
      } else {
        ++want[static_cast<std::size_t>(it - stack.begin()) + 1];
        stack.erase(it);
      }
      stack.insert(stack.begin(), f);
    }
    CAPTURE(slots);
    CHECK(cold == want_cold);
    CHECK(got == want);
  }
}
