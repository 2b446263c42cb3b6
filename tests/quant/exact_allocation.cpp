#include "moepolicy/quant/exact_allocation.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "../cache/count_allocations.hpp"
#include "brute_force.hpp"
#include "moepolicy/quant/detail/exact_allocation_reference.hpp"
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
  CHECK_THROWS_WITH_AS(
      static_cast<void>(exact_allocation(paper_bits, L, 2.0, {}, {}, wrong)),
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
  CHECK_THROWS_AS(
      static_cast<void>(exact_allocation(paper_bits, huge, 4.0, {}, {}, {}, exact_method::dynamic_programming)),
      invalid_argument);
  // Equal losses are convex: the greedy solves the instance the DP refuses.
  CHECK(exact_allocation(paper_bits, huge, 4.0).status == allocation_status::ok);
  const std::array<bitwidth, 3> gapped{bitwidth{2}, bitwidth{4}, bitwidth{8}};
  CHECK_THROWS_WITH_AS(
      static_cast<void>(exact_allocation(gapped, Eigen::MatrixXd::Ones(4, 3), 4.0, {}, {}, {}, exact_method::greedy)),
      "moepolicy::exact_allocation: the greedy is exact only with consecutive bitwidths, no minimum "
      "counts and losses convex in the level; bitwidths, got 3",
      invalid_argument);
}

namespace {

/// A random loss table, E × m: convex in the level (decreasing, shrinking steps) when
/// `convex`, otherwise with one expert whose second step gains more than its first.
Eigen::MatrixXd random_losses(std::mt19937_64& rng, std::size_t E, std::size_t m, bool convex) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Eigen::MatrixXd L(static_cast<Eigen::Index>(E), static_cast<Eigen::Index>(m));
  for (Eigen::Index i = 0; i < L.rows(); ++i) {
    double v = 100.0 * (1.0 + u(rng)), step = 0.5 * v * u(rng);
    for (Eigen::Index j = 0; j < L.cols(); ++j) {
      L(i, j) = v;
      v -= step;
      step *= convex ? 0.9 * u(rng) : 0.3 + 1.2 * u(rng);
    }
  }
  if (!convex && m >= 3 && E > 0) {
    L(0, 0) = 100.0;
    L(0, 1) = 99.0;
    L(0, 2) = 10.0;
  }
  return L;
}

}  // namespace

// The vectorised DP against the first implementation, kept as the reference: identical
// status, levels and losses, on convex and non-convex tables, every form, with weights,
// minimum counts and non-unit increments.
TEST_CASE("the DP equals the reference implementation on random instances") {
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const std::vector<std::vector<bitwidth>> bit_sets{{bitwidth{1}, bitwidth{2}, bitwidth{3}, bitwidth{4}},
                                                    {bitwidth{2}, bitwidth{3}, bitwidth{4}, bitwidth{8}},
                                                    {bitwidth{2}, bitwidth{4}, bitwidth{8}},
                                                    {bitwidth{1}, bitwidth{2}}};
  exact_allocation_workspace ws;
  bit_allocation out;
  for (int trial = 0; trial < 200; ++trial) {
    const auto& bits = bit_sets[static_cast<std::size_t>(trial) % bit_sets.size()];
    const std::size_t m = bits.size();
    const std::size_t E = trial < 190 ? 1 + static_cast<std::size_t>(u(rng) * 30) : 192;
    Eigen::MatrixXd L = random_losses(rng, E, m, trial % 2 == 0);
    if (trial % 5 == 0) L = L.array().round();  // ties
    std::vector<double> w;
    if (trial % 3 == 1) {
      for (std::size_t i = 0; i < E; ++i) w.push_back(std::round(3.0 * u(rng)));
    }
    std::vector<std::uint32_t> need;
    if (trial % 4 == 3 && E >= 4) {
      need.assign(m, 0);
      need[m - 1] = 1;
      need[0] = static_cast<std::uint32_t>(u(rng) * 3);
    }
    const double avg = static_cast<double>(bits.front().bits()) +
                       u(rng) * static_cast<double>(bits.back().bits() - bits.front().bits() + 1);
    for (budget_form form : {budget_form::exact, budget_form::at_most}) {
      const bit_allocation_config config{.form = form};
      const bit_allocation ref = reference::exact_allocation(bits, L, avg, config, w, need);
      exact_allocation(bits, L, avg, config, w, need, exact_method::dynamic_programming, ws, out);
      CAPTURE(trial);
      CAPTURE(E);
      CAPTURE(avg);
      REQUIRE(out.status == ref.status);
      CHECK(out.level_of == ref.level_of);
      CHECK(out.weighted_loss == ref.weighted_loss);
    }
  }
}

TEST_CASE("the greedy equals the DP on convex tables and is not used on others") {
  std::mt19937_64 rng(18);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  exact_allocation_workspace ws;
  bit_allocation greedy, dp;
  int greedy_runs = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t E = trial < 190 ? 1 + static_cast<std::size_t>(u(rng) * 40) : 256;
    const bool convex = trial % 4 != 3;
    const Eigen::MatrixXd L = random_losses(rng, E, paper_bits.size(), convex);
    std::vector<double> w;
    if (trial % 3 == 1) {
      for (std::size_t i = 0; i < E; ++i) w.push_back(0.5 + u(rng));
    }
    const double avg = 1.0 + 3.2 * u(rng);
    for (budget_form form : {budget_form::exact, budget_form::at_most}) {
      const bit_allocation_config config{.form = form};
      exact_allocation(paper_bits, L, avg, config, w, {}, exact_method::dynamic_programming, ws, dp);
      CAPTURE(trial);
      CAPTURE(E);
      CAPTURE(avg);
      if (convex) {
        exact_allocation(paper_bits, L, avg, config, w, {}, exact_method::greedy, ws, greedy);
        ++greedy_runs;
        REQUIRE(greedy.status == dp.status);
        // Random real losses have no ties: the optimum is unique.
        CHECK(greedy.level_of == dp.level_of);
        CHECK(greedy.weighted_loss == doctest::Approx(dp.weighted_loss).epsilon(1e-12));
      } else {
        CHECK_THROWS_AS(exact_allocation(paper_bits, L, avg, config, w, {}, exact_method::greedy, ws, greedy),
                        invalid_argument);
      }
      // automatic: the greedy where exact, the DP elsewhere; the loss of the DP either way.
      const bit_allocation a = exact_allocation(paper_bits, L, avg, config, w);
      CHECK(a.status == dp.status);
      CHECK(a.weighted_loss == doctest::Approx(dp.weighted_loss).epsilon(1e-12));
      if (!convex) CHECK(a.level_of == dp.level_of);
    }
  }
  CHECK(greedy_runs > 250);
}

TEST_CASE("the greedy on tied marginal gains reaches the DP's loss") {
  // Every step gains 5: many optimal allocations, one loss.
  Eigen::MatrixXd L(6, 4);
  for (Eigen::Index i = 0; i < 6; ++i) L.row(i) << 20, 15, 10, 5;
  for (budget_form form : {budget_form::exact, budget_form::at_most}) {
    for (double avg : {1.0, 1.5, 2.5, 4.0, 5.0}) {
      const auto g = exact_allocation(paper_bits, L, avg, {.form = form}, {}, {}, exact_method::greedy);
      const auto d = exact_allocation(paper_bits, L, avg, {.form = form}, {}, {}, exact_method::dynamic_programming);
      CAPTURE(avg);
      CHECK(g.status == d.status);
      CHECK(g.weighted_loss == d.weighted_loss);
      CHECK(g.used_increments == d.used_increments);
    }
  }
}

TEST_CASE("with a workspace, a call allocates nothing once the workspace has seen the size") {
  if (!test::allocation_counting) return;
  std::mt19937_64 rng(19);
  exact_allocation_workspace ws;
  bit_allocation out;
  const Eigen::MatrixXd convex = random_losses(rng, 192, 4, true), bumpy = random_losses(rng, 192, 4, false);
  for (const Eigen::MatrixXd* L : {&convex, &bumpy}) {
    exact_allocation(paper_bits, *L, 2.5, {}, {}, {}, exact_method::automatic, ws, out);
    const auto first = out.level_of;
    const test::allocation_counter counter;
    exact_allocation(paper_bits, *L, 2.5, {}, {}, {}, exact_method::automatic, ws, out);
    exact_allocation(paper_bits, L->topRows(100), 2.0, {.form = budget_form::at_most}, {}, {}, exact_method::automatic,
                     ws, out);
    CHECK(counter.count() == 0);
    exact_allocation(paper_bits, *L, 2.5, {}, {}, {}, exact_method::automatic, ws, out);
    CHECK(out.level_of == first);
  }
}
