#include "moepolicy/residency/precision_tier.hpp"

#include <doctest/doctest.h>

using namespace moepolicy;

TEST_CASE("tiers and low-version modes have names") {
  CHECK(to_string(precision_tier::low) == "low");
  CHECK(to_string(precision_tier::high) == "high");
  CHECK(to_string(low_version::replaced) == "replaced");
  CHECK(to_string(low_version::kept) == "kept");
  static_assert(static_cast<int>(precision_tier::low) == 0 && static_cast<int>(precision_tier::high) == 1);
}
