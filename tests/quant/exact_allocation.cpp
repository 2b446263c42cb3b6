#include "moepolicy/quant/exact_allocation.hpp"

#include <doctest/doctest.h>

#include <array>
#include <random>
#include <vector>

#include "brute_force.hpp"
#include "moepolicy/quant/prefix_split.hpp"

using namespace moepolicy;

namespace {
const std::array<bitwidth, 4> paper_bits{bitwidth{1}, bitwidth{2}, bitwidth{3}, bitwidth{4}};
}

TEST_CASE("hand-worked: the exact optimum upgrades where the gain is") {
  Eigen::MatrixXd L(2, 2);
  L << 10, 9,  //
      100, 10;
  const std::array<bitwidth, 2> bits{bitwidth{1}, bitwidth{2}};
  const auto a = exact_allocation(bits, L, 1.5);
  CHECK(a.status == allocation_status::ok);
  CHECK(a.level_of == std::vector<std::uint32_t>{0, 1});
  CHECK(a.weighted_loss == doctest::Approx(20.0));
  // Prefix split pays 109 here: the prefix constraint costs 89.
  CHECK(prefix_split(bits, L, 1.5).weighted_loss - a.weighted_loss == doctest::Approx(89.0));
}

TEST_CASE("minimum counts per bitwidth are honoured") {
  Eigen::MatrixXd L(3, 3);
  L << 9, 5, 1,  //
      9, 5, 1,   //
      9, 5, 1;
  const std::array<bitwidth, 3> bits{bitwidth{1}, bitwidth{2}, bitwidth{3}};
  // Budget 3 increments: unconstrained best is {3, 2, 1} bits or similar (loss 15).
  const auto free_choice = exact_allocation(bits, L, 2.0);
  CHECK(free_choice.weighted_loss == doctest::Approx(15.0));
  // At least two experts at 1 bit: the third can take 3 bits only within budget 3 → {1,1,3}.
  const std::array<std::uint32_t, 3> need{2, 0, 0};
  const auto constrained = exact_allocation(bits, L, 2.0, {.form = budget_form::at_most}, {}, need);
  CHECK(constrained.count_per_level == std::vector<std::uint32_t>{2, 0, 1});
  CHECK(constrained.weighted_loss == doctest::Approx(19.0));
  // More minimums than experts: infeasible.
  const std::array<std::uint32_t, 3> too_many{2, 2, 0};
  CHECK(exact_allocation(bits, L, 2.0, {}, {}, too_many).status == allocation_status::infeasible);
}

TEST_CASE("equals a brute force over all assignments on random small instances") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const std::vector<std::vector<bitwidth>> sets{{bitwidth{1}, bitwidth{2}, bitwidth{3}, bitwidth{4}},
                                                {bitwidth{2}, bitwidth{3}, bitwidth{4}, bitwidth{8}},
                                                {bitwidth{1}, bitwidth{3}}};
  for (int trial = 0; trial < 300; ++trial) {
    const auto& bits = sets[static_cast<std::size_t>(trial) % sets.size()];
    const auto E = static_cast<Eigen::Index>(1 + trial % 6);
    const auto m = static_cast<Eigen::Index>(bits.size());
    Eigen::MatrixXd L(E, m);
    for (Eigen::Index e = 0; e < E; ++e) {
      for (Eigen::Index j = 0; j < m; ++j) L(e, j) = 100.0 * u(rng);
    }
    std::vector<double> w;
    if (trial % 2 == 0) {
      for (Eigen::Index e = 0; e < E; ++e) w.push_back(u(rng));
    }
    std::vector<std::uint32_t> need;
    if (trial % 4 == 1) {
      need.assign(bits.size(), 0);
      need[static_cast<std::size_t>(trial) % bits.size()] = 1;
    }
    const double lo = bits.front().bits(), hi = bits.back().bits();
    const double avg = lo + (hi - lo) * u(rng);
    for (auto form : {budget_form::exact, budget_form::at_most}) {
      CAPTURE(trial);
      const auto a = exact_allocation(bits, L, avg, {.form = form}, w, need);
      const auto ref = test::brute_all(bits, L, a.budget_increments, form, w, need);
      REQUIRE(ref.found == (a.status != allocation_status::infeasible));
      if (!ref.found) continue;
      CHECK(a.weighted_loss == doctest::Approx(ref.loss).epsilon(1e-12));
      CHECK(test::meets(a.used_increments, a.budget_increments, form));
      // Never worse than prefix split on the same objective.
      if (need.empty()) {
        const auto p = prefix_split(bits, L, avg, {.form = form}, w);
        if (p.status != allocation_status::infeasible) CHECK(a.weighted_loss <= p.weighted_loss + 1e-9);
      }
    }
  }
}

TEST_CASE("beyond the all-highest budget the status is saturated") {
  Eigen::MatrixXd L(2, 4);
  L << 4, 3, 2, 1, 4, 3, 2, 1;
  const auto a = exact_allocation(paper_bits, L, 7.0);
  CHECK(a.status == allocation_status::saturated);
  CHECK(a.level_of == std::vector<std::uint32_t>{3, 3});
}

TEST_CASE("bad input names exact_allocation") {
  Eigen::MatrixXd L(2, 4);
  L << 4, 3, 2, 1, 4, 3, 2, 1;
  const std::array<std::uint32_t, 2> wrong{1, 1};
  CHECK_THROWS_WITH_AS(static_cast<void>(exact_allocation(paper_bits, L, 2.0, {}, {}, wrong)),
                       "moepolicy::exact_allocation: min_count must be empty or one count per bitwidth (4), size, got 2",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(exact_allocation(paper_bits, L, -1.0)),
                       "moepolicy::exact_allocation: average_bits must be in [1, 32] (the lowest bitwidth to the "
                       "largest there is), got -1",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(exact_allocation(paper_bits, L, 1e308)),
                       "moepolicy::exact_allocation: average_bits must be in [1, 32] (the lowest bitwidth to the "
                       "largest there is), got 1e+308",
                       invalid_argument);
  const Eigen::MatrixXd huge = Eigen::MatrixXd::Ones(4096, 4);
  CHECK_THROWS_AS(static_cast<void>(exact_allocation(paper_bits, huge, 4.0)), invalid_argument);
}
