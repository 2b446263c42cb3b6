// LRU: the victim is the least recently inserted or hit, per pool.
#include "moepolicy/cache/lru.hpp"

#include <doctest/doctest.h>

#include "moepolicy/cache/expert_cache.hpp"

using namespace moepolicy;

TEST_CASE("LRU evicts the least recently used") {
  expert_cache<lru_policy> c({.num_layers = 1, .num_experts = 8, .capacity = 3});
  for (int e : {1, 2, 3, 1}) c.get({0, static_cast<expert_id>(e)});
  CHECK(c.policy().victim(0) == expert_key{0, 2});
  c.get({0, 4});  // evicts 2
  CHECK(!c.contains({0, 2}));
  CHECK(c.policy().victim(0) == expert_key{0, 3});
  c.get({0, 3});
  CHECK(c.policy().victim(0) == expert_key{0, 1});
}

TEST_CASE("LRU keeps one recency order per layer pool") {
  lru_policy p({2, 4, capacity_scope::per_layer});
  p.on_insert({0, 1}, {});
  p.on_insert({1, 2}, {});
  p.on_insert({0, 3}, {});
  CHECK(p.victim(0) == expert_key{0, 1});
  CHECK(p.victim(1) == expert_key{1, 2});
  p.on_hit({0, 1}, {});
  CHECK(p.victim(0) == expert_key{0, 3});
  p.on_evict({1, 2});
  CHECK(!p.victim(1).has_value());
}
