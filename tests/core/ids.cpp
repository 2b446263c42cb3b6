#include "moepolicy/core/ids.hpp"

#include <doctest/doctest.h>

#include <set>
#include <unordered_set>

using moepolicy::expert_key;

TEST_CASE("expert_key orders layer-major and hashes distinct keys apart") {
  CHECK(expert_key{0, 7} < expert_key{1, 0});
  CHECK(expert_key{1, 2} < expert_key{1, 3});
  CHECK(expert_key{3, 4} == expert_key{3, 4});
  std::set<expert_key> ordered{{1, 0}, {0, 5}, {0, 1}};
  CHECK(ordered.begin()->expert == 1);
  std::unordered_set<expert_key> hashed;
  for (moepolicy::layer_id l = 0; l < 64; ++l) {
    for (moepolicy::expert_id e = 0; e < 256; ++e) hashed.insert({l, e});
  }
  CHECK(hashed.size() == 64u * 256u);
}

TEST_CASE("expert_key flattens to a dense index") {
  CHECK(expert_key{0, 5}.flat(8) == 5);
  CHECK(expert_key{3, 2}.flat(8) == 26);
}
