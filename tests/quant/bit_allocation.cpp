#include "moepolicy/quant/bit_allocation.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <limits>

using namespace moepolicy;

TEST_CASE("budget increments: R = E (avg - lowest), rounded as configured") {
  CHECK(detail::budget_increments(4, 3.0, bitwidth{1}, budget_rounding::down) == 8);
  CHECK(detail::budget_increments(4, 2.0, bitwidth{1}, budget_rounding::down) == 4);
  CHECK(detail::budget_increments(3, 2.5, bitwidth{1}, budget_rounding::down) == 4);
  CHECK(detail::budget_increments(3, 2.5, bitwidth{1}, budget_rounding::nearest) == 5);
  CHECK(detail::budget_increments(5, 2.3, bitwidth{2}, budget_rounding::down) == 1);
  CHECK(detail::budget_increments(0, 3.0, bitwidth{1}, budget_rounding::down) == 0);
}

TEST_CASE("an average budget is checked as a number before it becomes whole increments") {
  // The review's finding: 1e308 was converted to an integer with overflow (undefined
  // behaviour) and the allocation came back "infeasible" with every bit at 1.
  const std::array<bitwidth, 4> bits{bitwidth{1}, bitwidth{2}, bitwidth{3}, bitwidth{4}};
  const Eigen::MatrixXd L = Eigen::MatrixXd::Ones(2, 4);
  const std::array<double, 0> none{};
  CHECK_THROWS_WITH_AS(detail::check_allocation_problem("f", bits, L, none, 1e308),
                       "moepolicy::f: average_bits must be in [1, 32] (the lowest bitwidth to the largest there is), "
                       "got 1e+308",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(detail::check_allocation_problem("f", bits, L, none, 32.5),
                       "moepolicy::f: average_bits must be in [1, 32] (the lowest bitwidth to the largest there is), "
                       "got 32.5",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(detail::check_allocation_problem("f", bits, L, none, std::numeric_limits<double>::infinity()),
                       "moepolicy::f: average_bits must be in [1, 32] (the lowest bitwidth to the largest there is), "
                       "got inf",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(detail::check_allocation_problem("f", bits, L, none, std::nan("")),
                       "moepolicy::f: average_bits must be in [1, 32] (the lowest bitwidth to the largest there is), "
                       "got nan",
                       invalid_argument);
  // The largest average there is still gives a whole budget: every expert at the top.
  CHECK_NOTHROW(detail::check_allocation_problem("f", bits, L, none, 32.0));
  CHECK(detail::budget_increments(2, 32.0, bitwidth{1}, budget_rounding::down) == 62);
}

TEST_CASE("finish_allocation derives counts, increments, loss and gain") {
  const std::array<bitwidth, 3> bits{bitwidth{2}, bitwidth{3}, bitwidth{4}};
  Eigen::MatrixXd L(3, 3);
  L << 9, 4, 1,  //
      8, 5, 2,   //
      7, 6, 3;
  bit_allocation a;
  a.level_of = {2, 0, 1};
  const std::array<double, 3> w{1.0, 2.0, 0.5};
  detail::finish_allocation(a, bits, L, w);
  CHECK(a.count_per_level == std::vector<std::uint32_t>{1, 1, 1});
  CHECK(a.used_increments == 3);
  CHECK(a.weighted_loss == doctest::Approx(1.0 + 16.0 + 3.0));
  CHECK(a.gain == doctest::Approx((9 - 1) * 1.0 + 0.0 + (7 - 6) * 0.5));
}
