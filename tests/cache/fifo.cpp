// FIFO: the victim is the resident inserted first, whatever its use since.
#include "moepolicy/cache/fifo.hpp"

#include <doctest/doctest.h>

#include "moepolicy/cache/expert_cache.hpp"

using namespace moepolicy;

TEST_CASE("FIFO evicts the oldest insertion even if it was just used") {
  expert_cache<fifo_policy> c({.num_layers = 1, .num_experts = 8, .capacity = 3});
  for (int e : {1, 2, 3, 1}) c.get({0, static_cast<expert_id>(e)});
  CHECK(c.policy().victim(0) == expert_key{0, 1});
  c.get({0, 4});
  CHECK(!c.contains({0, 1}));
  CHECK(c.policy().victim(0) == expert_key{0, 2});
}
