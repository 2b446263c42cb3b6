#include "moepolicy/core/units.hpp"

#include <doctest/doctest.h>

using moepolicy::bitwidth;

TEST_CASE("bitwidth accepts 1 to 32 bits") {
  CHECK(bitwidth{1}.bits() == 1);
  CHECK(bitwidth{32}.bits() == 32);
  CHECK(moepolicy::fp16.bits() == 16);
  CHECK(bitwidth{2} < bitwidth{3});
  CHECK(bitwidth{4} == bitwidth{4});
  static_assert(bitwidth{3}.bits() == 3, "usable in constant expressions");
}

TEST_CASE("bitwidth rejects out-of-range bit counts with a clear message") {
  CHECK_THROWS_WITH_AS(bitwidth{0}, "moepolicy::bitwidth::bitwidth: bits must be in [1, 32], got 0",
                       moepolicy::invalid_argument);
  CHECK_THROWS_WITH_AS(bitwidth{33}, "moepolicy::bitwidth::bitwidth: bits must be in [1, 32], got 33",
                       moepolicy::invalid_argument);
  CHECK_THROWS_AS(bitwidth{-4}, moepolicy::invalid_argument);
}

TEST_CASE("unit prefixes are decimal for rates, binary for gibi") {
  CHECK(moepolicy::giga == 1e9);
  CHECK(moepolicy::tera == 1e12);
  CHECK(moepolicy::gibi == 1073741824ULL);
}
