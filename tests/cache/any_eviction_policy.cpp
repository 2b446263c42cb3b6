// The name table and the run-time policy variant.
#include "moepolicy/cache/any_eviction_policy.hpp"

#include <doctest/doctest.h>

#include <string>
#include <variant>

#include "moepolicy/cache/expert_cache.hpp"

using namespace moepolicy;

TEST_CASE("every policy has a name, and names give default configurations") {
  CHECK(eviction_policies.size() == std::variant_size_v<any_eviction_config>);
  for (std::size_t i = 0; i < eviction_policies.size(); ++i) {
    const any_eviction_config c = eviction_config_by_name(eviction_policies[i].name);
    CHECK(c.index() == i);
    CHECK(eviction_policy_name(c) == eviction_policies[i].name);
    const any_eviction_policy p({2, 4}, c);
    CHECK(p.name() == eviction_policies[i].name);
    CHECK(p.reads_future() == (eviction_policies[i].name == "belady"));
  }
  CHECK(std::get<lfu_config>(eviction_config_by_name("lfu")).decay == 1.0);
  CHECK(std::get<score_aware_config>(eviction_config_by_name("score-aware")).window == 8);
  CHECK_THROWS_WITH_AS(static_cast<void>(eviction_config_by_name("arc")),
                       "moepolicy::eviction_config_by_name: unknown eviction policy (known: score-aware, sticky-lru, "
                       "ema-score, "
                       "lru, lfu, fifo, hawkeye, pred-reuse, gated-prefetch, belady), got \"arc\"",
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
