// LFU: counts every demand access (kept across evictions), optionally decayed per step.
#include "moepolicy/cache/lfu.hpp"

#include <doctest/doctest.h>

#include "moepolicy/cache/expert_cache.hpp"

using namespace moepolicy;

TEST_CASE("LFU evicts the least frequently used; ties go to the least recently used") {
  expert_cache<lfu_policy> c({.num_layers = 1, .num_experts = 8, .capacity = 3});
  for (int e : {1, 1, 2, 3}) c.get({0, static_cast<expert_id>(e)});
  CHECK(c.policy().victim(0) == expert_key{0, 2});  // 2 and 3 once each; 2 older
  c.get({0, 4});                                       // evicts 2
  CHECK(!c.contains({0, 2}));
  c.get({0, 3});
  CHECK(c.policy().victim(0) == expert_key{0, 4});
  CHECK(c.policy().frequency({0, 1}) == doctest::Approx(2.0));
}

TEST_CASE("LFU counts survive eviction and count misses that were not cached") {
  expert_cache<lfu_policy> c({.num_layers = 1, .num_experts = 4, .capacity = 1});
  c.get({0, 0});
  c.get({0, 1});  // evicts 0 (count 1, older)
  c.get({0, 0});  // 0 counts 2 now: 1 (count 1) is the victim
  CHECK(c.policy().frequency({0, 0}) == doctest::Approx(2.0));
  CHECK(c.contains({0, 0}));
  expert_cache<lfu_policy> zero({.num_layers = 1, .num_experts = 4, .capacity = 0});
  zero.get({0, 2});
  zero.get({0, 2});
  CHECK(zero.policy().frequency({0, 2}) == doctest::Approx(2.0));
}

TEST_CASE("decayed LFU forgets old popularity; rescaling keeps the order") {
  expert_cache<lfu_policy> c({.num_layers = 1, .num_experts = 4, .capacity = 2}, {.decay = 0.5});
  c.get({0, 0});
  c.get({0, 0});
  for (int i = 0; i < 3; ++i) c.end_step();
  c.get({0, 1});
  CHECK(c.policy().frequency({0, 0}) == doctest::Approx(0.25));
  CHECK(c.policy().frequency({0, 1}) == doctest::Approx(1.0));
  CHECK(c.policy().victim(0) == expert_key{0, 0});

  // decay 0.01: the lazy scale passes 1e100 after 51 steps and is folded back.
  expert_cache<lfu_policy> r({.num_layers = 1, .num_experts = 4, .capacity = 2}, {.decay = 0.01});
  r.get({0, 2});
  r.get({0, 3});
  for (int i = 0; i < 60; ++i) {
    r.end_step();
    r.get({0, 3});
  }
  CHECK(r.policy().victim(0) == expert_key{0, 2});
  CHECK(r.policy().frequency({0, 3}) == doctest::Approx(1.0101010101).epsilon(1e-6));
  CHECK_THROWS_WITH_AS(lfu_policy({1, 1}, {.decay = 0.0}), "moepolicy::lfu_policy: decay must be in (0, 1], got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(lfu_policy({1, 1}, {.decay = 1.5}), "moepolicy::lfu_policy: decay must be in (0, 1], got 1.5",
                       invalid_argument);
}
