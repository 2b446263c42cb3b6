// Tests of balance/ndp_rebalance.hpp on hand-worked cases.
#include "moepolicy/balance/ndp_rebalance.hpp"

#include <doctest/doctest.h>

#include <array>

using namespace moepolicy;

namespace {
using enum hotness;
constexpr auto loc = [](std::uint16_t d) { return expert_layout::localized(d); };
// D = 3. Cold localized: e0 = 4 and e1 = 3 and e2 = 1 on DIMM 0, e3 = 2 on DIMM 1.
// e4 (5, DIMM 2) is warm and e5 (2) striped: neither counts.
const std::array<double, 6> weights{4.0, 3.0, 1.0, 2.0, 5.0, 2.0};
const std::array<hotness, 6> classes{cold, cold, cold, cold, warm, cold};
const std::array<expert_layout, 6> layouts{loc(0), loc(0), loc(0), loc(1), loc(2), expert_layout::striped()};
}  // namespace

TEST_CASE("cold experts move one by one from the busiest DIMM to the most idle") {
  // Loads: DIMM 0 = 4 + 3 + 1 = 8, DIMM 1 = 2, DIMM 2 = 0; mean 10/3, skew 8 > 1.1 · 10/3.
  // Move 1: busiest 0, idlest 2, gap 8. After-move maxima: e0 max(4, 4) = 4, e1 max(5, 3)
  //   = 5, e2 max(7, 1) = 7: e0 goes, relief 8 − 4 = 4. Loads (4, 2, 4).
  // Move 2: busiest 0 (first of the 4s), idlest 1, gap 2: e1 (3) is not < 2; e2 (1):
  //   max(3, 3) = 3: e2 goes, relief 1. Loads (3, 3, 4).
  // Move 3: busiest 2, idlest 0, gap 1: the only cold expert on DIMM 2 is e0 (4 >= 1): stop.
  ndp_rebalancer r(3, 6);
  const auto moves = r.plan(weights, classes, layouts);
  REQUIRE(moves.size() == 2);
  CHECK(moves[0].expert == 0);
  CHECK(moves[0].from == 0);
  CHECK(moves[0].to == 2);
  CHECK(moves[0].load == 4.0);
  CHECK(moves[0].relief == doctest::Approx(4.0));
  CHECK(moves[1].expert == 2);
  CHECK(moves[1].from == 0);
  CHECK(moves[1].to == 1);
  CHECK(moves[1].relief == doctest::Approx(1.0));
  CHECK(r.dimm_loads()[0] == doctest::Approx(3.0));
  CHECK(r.dimm_loads()[1] == doctest::Approx(3.0));
  CHECK(r.dimm_loads()[2] == doctest::Approx(4.0));
}

TEST_CASE("no skew, no moves; the move cap holds") {
  // Threshold 1.5: skew needs DIMM 0 above 2.5 · 10/3 = 8.33; it holds 8.
  ndp_rebalancer calm(3, 6, {.skew_threshold = 1.5});
  CHECK(calm.plan(weights, classes, layouts).empty());
  CHECK(calm.dimm_loads()[0] == doctest::Approx(8.0));
  ndp_rebalancer one(3, 6, {.max_moves = 1});
  CHECK(one.plan(weights, classes, layouts).size() == 1);
  // A single cold expert cannot be rebalanced: moving it only moves the skew (x < gap fails).
  const std::array<double, 2> w{2.0, 0.0};
  const std::array<hotness, 2> c{cold, warm};
  const std::array<expert_layout, 2> l{loc(0), loc(1)};
  ndp_rebalancer lone(2, 2);
  CHECK(lone.plan(w, c, l).empty());
}

TEST_CASE("ndp_rebalancer: bad configuration") {
  CHECK_THROWS_WITH_AS(ndp_rebalancer(0, 4), "moepolicy::ndp_rebalancer: num_dimms must be in [1, 65534], got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(ndp_rebalancer(2, 0), "moepolicy::ndp_rebalancer: num_experts must be in [1, 65536], got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(ndp_rebalancer(2, 4, {.skew_threshold = -0.5}),
                       "moepolicy::ndp_rebalancer: skew_threshold must be finite and >= 0, got -0.5", invalid_argument);
}
