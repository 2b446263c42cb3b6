// The name table and the run-time policy variant.
#include "moepolicy/cache/any_eviction_policy.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "moepolicy/cache/expert_cache.hpp"

using namespace moepolicy;

TEST_CASE("every policy has a name, and names give default configurations") {
  CHECK(eviction_policies.size() == std::variant_size_v<any_eviction_config>);
  for (std::size_t i = 0; i < eviction_policies.size(); ++i) {
    const any_eviction_config c = eviction_config_by_name(eviction_policies[i].name);
    CHECK(c.index() == i);
    CHECK(eviction_policy_name(c) == eviction_policies[i].name);
    const std::vector<std::uint64_t> ones(8, 1);
    const any_eviction_policy p({2, 4}, c, capacity_weights{capacity_unit::experts, ones});
    CHECK(p.name() == eviction_policies[i].name);
    CHECK(p.reads_future() == (eviction_policies[i].name == "belady"));
  }
  CHECK(std::get<lfu_config>(eviction_config_by_name("lfu")).decay == 1.0);
  CHECK(std::get<score_aware_config>(eviction_config_by_name("score-aware")).window == 8);
  CHECK_THROWS_WITH_AS(static_cast<void>(eviction_config_by_name("arc")),
                       "moepolicy::eviction_config_by_name: unknown eviction policy (known: score-aware, sticky-lru, "
                       "ema-score, "
                       "lru, lfu, fifo, hawkeye, pred-reuse, gated-prefetch, size-aware, belady), got \"arc\"",
                       invalid_argument);
}

TEST_CASE("the variant forwards configuration errors and hooks") {
  CHECK_THROWS_WITH_AS(any_eviction_policy({1, 1}, lfu_config{.decay = 2.0}),
                       "moepolicy::lfu_policy: decay must be in (0, 1], got 2", invalid_argument);
  // Admission: sticky LRU's gate applies through the variant; LRU admits everything.
  expert_cache<any_eviction_policy> gated({.num_layers = 1, .num_experts = 4, .capacity = 2},
                                          eviction_config_by_name("sticky-lru"));
  CHECK(!gated.get({0, 1}).inserted);
  gated.hint({0, 1}, 1.0f);
  CHECK(gated.get({0, 1}).inserted);
  expert_cache<any_eviction_policy> lru({.num_layers = 1, .num_experts = 4, .capacity = 2},
                                        eviction_config_by_name("lru"));
  CHECK(lru.get({0, 1}).inserted);
}

TEST_CASE("the variant forwards prefetch admission: the gated policy refuses weak prefetches, others admit all") {
  const cache_config cc{.num_layers = 1, .num_experts = 4, .capacity = 2};
  expert_cache<any_eviction_policy> gated(cc, eviction_config_by_name("gated-prefetch"));
  CHECK(gated.prefetch({0, 1}, 0.4f) == prefetch_outcome::rejected);
  CHECK(gated.prefetch({0, 1}, 0.5f) == prefetch_outcome::inserted);
  CHECK(gated.stats().prefetch_rejected == 1);
  CHECK(gated.stats().prefetches == 1);
  // An evicting demand miss is cached only when a hint flagged it in this forward pass.
  CHECK(gated.get({0, 2}).inserted);  // free room: admitted
  CHECK(!gated.get({0, 3}).inserted);
  gated.hint({0, 3}, 0.9f);
  CHECK(gated.get({0, 3}).inserted);
  expert_cache<any_eviction_policy> lru(cc, eviction_config_by_name("lru"));
  CHECK(lru.prefetch({0, 1}, 0.0f) == prefetch_outcome::inserted);
  CHECK(lru.stats().prefetch_rejected == 0);
}

TEST_CASE("size-aware by name: sizes from a bytes-unit cache, pred-reuse's rule by experts, an error without sizes") {
  // One layer: a and c of 1 byte, B of 4; 5 bytes. The hand-worked sequence of
  // test_cache_size_aware_reuse: a B B, then c evicts B (4 x 1 > 1 x 2), not a.
  const expert_key a{0, 0}, B{0, 1}, c{0, 2};
  const cache_config bytes_pool{
      .num_layers = 1, .num_experts = 3, .capacity = 5, .unit = capacity_unit::byte_count, .footprints = {1, 4, 1}};
  any_eviction_config cfg = eviction_config_by_name("size-aware");
  std::get<size_aware_reuse_config>(cfg).smoothing = 1.0;
  expert_cache<any_eviction_policy> sized(bytes_pool, cfg);
  for (expert_key k : {a, B, B}) sized.get(k);
  CHECK(sized.victim_for(c) == B);
  // The same sizes from expert_bytes alone: one size, so the farthest predicted use goes (a).
  expert_cache<any_eviction_policy> one_size(
      {.num_layers = 1, .num_experts = 3, .capacity = 18, .unit = capacity_unit::byte_count, .expert_bytes = 9}, cfg);
  for (expert_key k : {a, B, B}) one_size.get(k);
  CHECK(one_size.victim_for(c) == a);
  // Counted in experts, every expert takes one slot: pred-reuse's decision (a), although
  // the cache knows the footprints.
  cache_config slots = bytes_pool;
  slots.unit = capacity_unit::experts;
  slots.capacity = 2;
  expert_cache<any_eviction_policy> by_slots(slots, cfg);
  for (expert_key k : {a, B, B}) by_slots.get(k);
  CHECK(by_slots.victim_for(c) == a);
  // Built without a cache and without footprints, the sizes are missing.
  CHECK_THROWS_WITH_AS(any_eviction_policy({1, 3}, cfg),
                       "moepolicy::size_aware_reuse_policy: no expert sizes: footprints is empty and no cache gave "
                       "its capacity weights (set footprints, or build the policy through expert_cache), got 0",
                       invalid_argument);
  // Footprints that contradict a bytes-unit cache's.
  std::get<size_aware_reuse_config>(cfg).footprints = {1, 2, 1};
  CHECK_THROWS_WITH_AS(expert_cache<any_eviction_policy>(bytes_pool, cfg),
                       "moepolicy::size_aware_reuse_policy: footprints differ from the bytes-unit cache's: expert 1 "
                       "weighs 4 bytes in the cache, got 2",
                       invalid_argument);
}
