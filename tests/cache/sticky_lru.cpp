// LRU with confidence stickiness and prediction-gated admission (CXL-MoE §3).
#include "moepolicy/cache/sticky_lru.hpp"

#include <doctest/doctest.h>

#include "moepolicy/cache/expert_cache.hpp"

using namespace moepolicy;

TEST_CASE("a demand miss is cached only when the predictor flagged it, within the hint's lifetime") {
  expert_cache<sticky_lru_policy> c({.num_layers = 1, .num_experts = 8, .capacity = 4});
  CHECK(!c.get({0, 1}).inserted);  // not flagged: served, not cached (even with room)
  CHECK(c.stats().rejections == 1);
  c.hint({0, 1}, 0.6f);
  CHECK(c.policy().flagged({0, 1}));
  CHECK(c.get({0, 1}).inserted);
  c.hint({0, 2}, 0.4f);  // below admit_threshold 0.5
  CHECK(!c.get({0, 2}).inserted);
  c.hint({0, 3}, 0.9f);
  c.end_step();  // a hint lives for one step boundary by default
  CHECK(!c.policy().flagged({0, 3}));
  CHECK(!c.get({0, 3}).inserted);
  // Without the gate every miss is cached.
  expert_cache<sticky_lru_policy> open({.num_layers = 1, .num_experts = 8, .capacity = 4}, {.gated_admission = false});
  CHECK(open.get({0, 1}).inserted);
}

TEST_CASE("a high-confidence prefetch outranks a more recently used low-confidence entry") {
  expert_cache<sticky_lru_policy> c({.num_layers = 1, .num_experts = 8, .capacity = 2});
  c.prefetch({0, 0}, 0.9f);  // sticky
  c.prefetch({0, 1}, 0.6f);  // admitted (a prefetch), not sticky
  CHECK(c.policy().sticky({0, 0}));
  CHECK(!c.policy().sticky({0, 1}));
  CHECK(c.get({0, 1}).hit);
  // Plain LRU would evict 0 (least recent); stickiness protects it.
  CHECK(c.policy().victim(0) == expert_key{0, 1});
  c.hint({0, 2}, 1.0f);
  c.get({0, 2});
  CHECK(c.contains({0, 0}));
  CHECK(!c.contains({0, 1}));
  // Using the sticky entry ends its protection: plain LRU again.
  CHECK(c.get({0, 0}).hit);
  CHECK(!c.policy().sticky({0, 0}));
  CHECK(c.policy().victim(0) == expert_key{0, 2});
}

TEST_CASE("with stickiness off the policy is LRU with gated admission") {
  expert_cache<sticky_lru_policy> c({.num_layers = 1, .num_experts = 8, .capacity = 2}, {.stickiness = false});
  c.prefetch({0, 0}, 1.0f);  // would be sticky; here only admitted
  c.prefetch({0, 1}, 0.6f);
  CHECK(!c.policy().sticky({0, 0}));
  CHECK(c.get({0, 1}).hit);
  CHECK(c.policy().victim(0) == expert_key{0, 0});  // least recently used, unprotected
  c.prefetch({0, 0}, 1.0f);  // a re-prefetch does not make it sticky either
  CHECK(!c.policy().sticky({0, 0}));
  CHECK(!c.get({0, 3}).inserted);  // the admission gate still holds
}

TEST_CASE("when every resident is sticky the least recently used sticky one goes; stickiness lapses") {
  expert_cache<sticky_lru_policy> c({.num_layers = 1, .num_experts = 8, .capacity = 2}, {.sticky_steps = 2});
  c.prefetch({0, 0}, 0.95f);
  c.prefetch({0, 1}, 0.85f);
  CHECK(c.policy().victim(0) == expert_key{0, 0});
  c.hint({0, 5}, 1.0f);
  c.get({0, 5});  // evicts 0: both sticky, 0 older
  CHECK(!c.contains({0, 0}));
  c.end_step();
  CHECK(c.policy().sticky({0, 1}));
  c.end_step();  // two step ends without use: 1 is ordinary again
  CHECK(!c.policy().sticky({0, 1}));
  CHECK(c.policy().victim(0) == expert_key{0, 1});
  // A re-prefetch of a resident at high confidence makes it sticky without refreshing recency.
  c.prefetch({0, 1}, 0.9f);
  CHECK(c.policy().sticky({0, 1}));
  CHECK(c.policy().victim(0) == expert_key{0, 5});
  c.prefetch({0, 5}, 0.9f);
  CHECK(c.policy().victim(0) == expert_key{0, 1});  // both sticky: 1 is older
}

TEST_CASE("sticky LRU configuration errors") {
  CHECK_THROWS_WITH_AS(sticky_lru_policy({1, 1}, {.admit_threshold = 1.5f}),
                       "moepolicy::sticky_lru_policy: admit_threshold must be in [0, 1], got 1.5", invalid_argument);
  CHECK_THROWS_WITH_AS(sticky_lru_policy({1, 1}, {.sticky_threshold = -0.5f}),
                       "moepolicy::sticky_lru_policy: sticky_threshold must be in [0, 1], got -0.5", invalid_argument);
  CHECK_THROWS_WITH_AS(sticky_lru_policy({1, 1}, {.hint_steps = 0}),
                       "moepolicy::sticky_lru_policy: hint_steps must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(sticky_lru_policy({1, 1}, {.sticky_steps = 0}),
                       "moepolicy::sticky_lru_policy: sticky_steps must be >= 1, got 0", invalid_argument);
}
