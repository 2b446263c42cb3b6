#include "moepolicy/quant/prefix_split.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "../cache/count_allocations.hpp"
#include "brute_force.hpp"
#include "moepolicy/quant/detail/prefix_split_reference.hpp"

using namespace moepolicy;

namespace {

const std::array<bitwidth, 4> paper_bits{bitwidth{1}, bitwidth{2}, bitwidth{3}, bitwidth{4}};

Eigen::MatrixXd hand_table() {
  Eigen::MatrixXd L(4, 4);
  // Rows in descending importance; columns 1, 2, 3, 4 bits.
  L << 100, 40, 20, 10,  //
      80, 30, 15, 8,     //
      50, 20, 10, 5,     //
      10, 5, 3, 2;
  return L;
}

}  // namespace

TEST_CASE("hand-worked: four experts at an average of 2 bits (R = 4)") {
  // Feasible (n4, n3, n2) with 3n4 + 2n3 + n2 = 4:
  //   (0,0,4): C2(4) = 60+50+30+5                         = 145
  //   (0,1,2): C3(1) + C2(3) - C2(1) = 80 + (50+30)       = 160   <- best
  //   (0,2,0): C3(2) = 80+65                              = 145
  //   (1,0,1): C4(1) + C2(2) - C2(1) = 90 + 50            = 140
  const auto a = prefix_split(paper_bits, hand_table(), 2.0);
  CHECK(a.status == allocation_status::ok);
  CHECK(a.budget_increments == 4);
  CHECK(a.used_increments == 4);
  CHECK(a.level_of == std::vector<std::uint32_t>{2, 1, 1, 0});
  CHECK(a.count_per_level == std::vector<std::uint32_t>{1, 2, 1, 0});
  CHECK(a.gain == doctest::Approx(160.0));
  CHECK(a.weighted_loss == doctest::Approx(20 + 30 + 20 + 10));
}

TEST_CASE("hand-worked: average 3 bits (R = 8)") {
  // (2,1,0): C4(2) + C3(3)-C3(2) = 162 + 40 = 202; (1,2,1): 90 + 65+40 + 5 = 200;
  // (2,0,2): 162 + 30 + 5 = 197; (0,4,0): 192; (1,1,3): 90+65+30+5 = 190. Best (2,1,0).
  const auto a = prefix_split(paper_bits, hand_table(), 3.0);
  CHECK(a.level_of == std::vector<std::uint32_t>{3, 3, 2, 0});
  CHECK(a.gain == doctest::Approx(202.0));
}

TEST_CASE("the prefix constraint follows importance even where gains disagree") {
  // The more important expert gains little from bits; the exact optimum would upgrade
  // the other one, prefix split must upgrade the first.
  Eigen::MatrixXd L(2, 2);
  L << 10, 9,  //
      100, 10;
  const std::array<bitwidth, 2> bits{bitwidth{1}, bitwidth{2}};
  const auto a = prefix_split(bits, L, 1.5);
  CHECK(a.level_of == std::vector<std::uint32_t>{1, 0});
  CHECK(a.weighted_loss == doctest::Approx(109.0));
}

TEST_CASE("edge cases: zero budget, all-highest, beyond it, and no exact split") {
  const auto zero = prefix_split(paper_bits, hand_table(), 1.0);
  CHECK(zero.status == allocation_status::ok);
  CHECK(zero.level_of == std::vector<std::uint32_t>{0, 0, 0, 0});
  CHECK(zero.gain == 0.0);

  const auto top = prefix_split(paper_bits, hand_table(), 4.0);
  CHECK(top.status == allocation_status::ok);
  CHECK(top.level_of == std::vector<std::uint32_t>{3, 3, 3, 3});

  const auto beyond = prefix_split(paper_bits, hand_table(), 6.0);
  CHECK(beyond.status == allocation_status::saturated);
  CHECK(beyond.budget_increments == 20);
  CHECK(beyond.used_increments == 12);
  CHECK(beyond.level_of == std::vector<std::uint32_t>{3, 3, 3, 3});
  const auto beyond_le = prefix_split(paper_bits, hand_table(), 6.0, {.form = budget_form::at_most});
  CHECK(beyond_le.status == allocation_status::saturated);
  CHECK(beyond_le.level_of == std::vector<std::uint32_t>{3, 3, 3, 3});

  // Bits {1, 3}: every upgrade costs 2 increments, so R = 1 has no exact split.
  const std::array<bitwidth, 2> odd{bitwidth{1}, bitwidth{3}};
  Eigen::MatrixXd L(3, 2);
  L << 5, 1, 4, 1, 3, 1;
  const auto none = prefix_split(odd, L, 1.0 + 1.0 / 3.0);
  CHECK(none.budget_increments == 1);
  CHECK(none.status == allocation_status::infeasible);
  CHECK(none.level_of.empty());
  const auto le = prefix_split(odd, L, 1.0 + 1.0 / 3.0, {.form = budget_form::at_most});
  CHECK(le.status == allocation_status::ok);
  CHECK(le.level_of == std::vector<std::uint32_t>{0, 0, 0});

  const auto empty = prefix_split(paper_bits, Eigen::MatrixXd(0, 4), 3.0);
  CHECK(empty.status == allocation_status::ok);
  CHECK(empty.level_of.empty());
}

TEST_CASE("fractional budgets round down by default, to nearest on request") {
  Eigen::MatrixXd L = hand_table().topRows(3);
  CHECK(prefix_split(paper_bits, L, 2.5).budget_increments == 4);  // 3 x 1.5 = 4.5
  CHECK(prefix_split(paper_bits, L, 2.5, {.rounding = budget_rounding::nearest}).budget_increments == 5);
  CHECK(prefix_split(paper_bits, hand_table(), 2.3).budget_increments == 5);  // 4 x 1.3 = 5.2, not 5.19…
}

TEST_CASE("at_most never loses to exact, and may stop short of the budget") {
  // Higher bits are worse for the last expert: at_most leaves it low.
  Eigen::MatrixXd L(2, 2);
  L << 10, 1,  //
      5, 6;
  const std::array<bitwidth, 2> bits{bitwidth{1}, bitwidth{2}};
  const auto eq = prefix_split(bits, L, 2.0);
  CHECK(eq.level_of == std::vector<std::uint32_t>{1, 1});
  const auto le = prefix_split(bits, L, 2.0, {.form = budget_form::at_most});
  CHECK(le.level_of == std::vector<std::uint32_t>{1, 0});
  CHECK(le.used_increments == 1);
  CHECK(le.weighted_loss < eq.weighted_loss);
}

TEST_CASE("equals a brute force over prefix-structured assignments on random instances") {
  std::mt19937 rng(20261121);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const std::vector<std::vector<bitwidth>> sets{{bitwidth{1}, bitwidth{2}, bitwidth{3}, bitwidth{4}},
                                                {bitwidth{2}, bitwidth{3}, bitwidth{4}, bitwidth{8}},
                                                {bitwidth{1}, bitwidth{2}, bitwidth{3}},
                                                {bitwidth{2}, bitwidth{4}},
                                                {bitwidth{1}, bitwidth{2}, bitwidth{3}, bitwidth{4}, bitwidth{6}}};
  for (int trial = 0; trial < 400; ++trial) {
    const auto& bits = sets[static_cast<std::size_t>(trial) % sets.size()];
    const auto E = static_cast<Eigen::Index>(1 + trial % 7);
    const auto m = static_cast<Eigen::Index>(bits.size());
    Eigen::MatrixXd L(E, m);
    for (Eigen::Index e = 0; e < E; ++e) {
      double v = 1.0 + 100.0 * u(rng);
      for (Eigen::Index j = 0; j < m; ++j) {
        L(e, j) = v;
        v *= (trial % 5 == 0) ? 0.5 + u(rng) : 0.2 + 0.7 * u(rng);  // sometimes non-monotone
      }
    }
    std::vector<double> w;
    if (trial % 3 == 0) {
      for (Eigen::Index e = 0; e < E; ++e) w.push_back(u(rng));
    }
    const double lo = bits.front().bits(), hi = bits.back().bits();
    const double avg = lo + (hi - lo + 0.5) * u(rng);
    for (auto form : {budget_form::exact, budget_form::at_most}) {
      const auto a = prefix_split(bits, L, avg, {.form = form}, w);
      CAPTURE(trial);
      const std::int64_t R =
          std::min<std::int64_t>(a.budget_increments, E * (bits.back().bits() - bits.front().bits()));
      const auto form_used = a.status == allocation_status::saturated ? budget_form::at_most : form;
      if (a.status == allocation_status::saturated && form == budget_form::exact) {
        CHECK(a.level_of == std::vector<std::uint32_t>(static_cast<std::size_t>(E), static_cast<std::uint32_t>(m - 1)));
        continue;
      }
      const auto ref = test::brute_prefix(bits, L, R, form_used, w);
      REQUIRE(ref.found == (a.status != allocation_status::infeasible));
      if (!ref.found) continue;
      CHECK(a.weighted_loss == doctest::Approx(ref.loss).epsilon(1e-12));
      CHECK(test::meets(a.used_increments, a.budget_increments, form));
      for (std::size_t e = 1; e < a.level_of.size(); ++e) CHECK(a.level_of[e] <= a.level_of[e - 1]);
    }
  }
}

TEST_CASE("bad input names prefix_split, the problem and the value") {
  const Eigen::MatrixXd L = hand_table();
  const std::array<bitwidth, 4> unsorted{bitwidth{1}, bitwidth{3}, bitwidth{2}, bitwidth{4}};
  CHECK_THROWS_WITH_AS(static_cast<void>(prefix_split(unsorted, L, 2.0)),
                       "moepolicy::prefix_split: bitwidths must be strictly ascending, at position 2, got 2",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(prefix_split(std::span<const bitwidth>{}, L, 2.0)),
                       "moepolicy::prefix_split: the bitwidth set is empty", invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(prefix_split(std::span(paper_bits).first(3), L, 2.0)),
                       "moepolicy::prefix_split: the loss table must have one column per bitwidth (3), columns, got 4",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(prefix_split(paper_bits, L, 0.5)),
                       "moepolicy::prefix_split: average_bits must be in [1, 32] (the lowest bitwidth to the largest "
                       "there is), got 0.5",
                       invalid_argument);
  // Not converted to whole increments with overflow (the review's 1e308).
  CHECK_THROWS_WITH_AS(static_cast<void>(prefix_split(paper_bits, L, 1e308)),
                       "moepolicy::prefix_split: average_bits must be in [1, 32] (the lowest bitwidth to the largest "
                       "there is), got 1e+308",
                       invalid_argument);
  Eigen::MatrixXd bad = L;
  bad(2, 1) = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH_AS(static_cast<void>(prefix_split(paper_bits, bad, 2.0)),
                       "moepolicy::prefix_split: loss of expert 2 at 2 bits must be finite, got nan", invalid_argument);
  const std::array<double, 3> short_w{1, 1, 1};
  CHECK_THROWS_WITH_AS(static_cast<void>(prefix_split(paper_bits, L, 2.0, {}, short_w)),
                       "moepolicy::prefix_split: weights must be empty or one per expert (4), size, got 3",
                       invalid_argument);
  const std::array<double, 4> neg_w{1, -1, 1, 1};
  CHECK_THROWS_WITH_AS(static_cast<void>(prefix_split(paper_bits, L, 2.0, {}, neg_w)),
                       "moepolicy::prefix_split: weight of expert 1 must be finite and >= 0, got -1", invalid_argument);
}

// The flat enumeration against the first implementation, kept as the reference: the same
// status, levels, gain and loss on random instances of every budget form, with weights,
// with bit sets of 2 to 5 levels including non-unit increments, and at the sizes of the
// papers' NDP pools (E = 128 … 256).
TEST_CASE("equals the reference implementation on random instances") {
  std::mt19937_64 rng(16);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const std::vector<std::vector<bitwidth>> bit_sets{{bitwidth{1}, bitwidth{2}},
                                                    {bitwidth{2}, bitwidth{3}, bitwidth{4}},
                                                    {bitwidth{1}, bitwidth{2}, bitwidth{3}, bitwidth{4}},
                                                    {bitwidth{2}, bitwidth{3}, bitwidth{4}, bitwidth{8}},
                                                    {bitwidth{2}, bitwidth{4}, bitwidth{8}},
                                                    {bitwidth{1}, bitwidth{2}, bitwidth{3}, bitwidth{4}, bitwidth{5}}};
  prefix_split_workspace ws;
  bit_allocation out;
  int compared = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const auto& bits = bit_sets[static_cast<std::size_t>(trial) % bit_sets.size()];
    const std::size_t m = bits.size();
    const std::size_t E = trial < 280 ? 1 + static_cast<std::size_t>(u(rng) * (m == 5 ? 12 : 40))
                                      : 128 + static_cast<std::size_t>(u(rng) * 129);
    if (m == 5 && E > 12) continue;
    Eigen::MatrixXd L(static_cast<Eigen::Index>(E), static_cast<Eigen::Index>(m));
    for (Eigen::Index i = 0; i < L.rows(); ++i) {
      double v = 100.0 * (1.0 + u(rng));
      for (Eigen::Index j = 0; j < L.cols(); ++j, v *= 0.2 + 0.9 * u(rng)) L(i, j) = trial % 7 == 0 ? std::round(v) : v;
    }
    std::vector<double> w;
    if (trial % 3 == 1) {
      for (std::size_t i = 0; i < E; ++i) w.push_back(trial % 2 == 0 ? 1.0 : std::round(3.0 * u(rng)));
    }
    const double avg = static_cast<double>(bits.front().bits()) +
                       u(rng) * static_cast<double>(bits.back().bits() - bits.front().bits() + 1);
    for (budget_form form : {budget_form::exact, budget_form::at_most}) {
      const bit_allocation_config config{.form = form};
      const bit_allocation ref = reference::prefix_split(bits, L, avg, config, w);
      prefix_split(bits, L, avg, config, w, ws, out);
      CAPTURE(trial);
      CAPTURE(E);
      CAPTURE(avg);
      REQUIRE(out.status == ref.status);
      CHECK(out.level_of == ref.level_of);
      CHECK(out.gain == ref.gain);
      CHECK(out.weighted_loss == ref.weighted_loss);
      CHECK(out.budget_increments == ref.budget_increments);
      ++compared;
    }
  }
  CHECK(compared > 400);
}

TEST_CASE("with a workspace, a call allocates nothing once the workspace has seen the size") {
  if (!test::allocation_counting) return;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Eigen::MatrixXd L(192, 4);
  for (Eigen::Index i = 0; i < L.rows(); ++i) {
    for (Eigen::Index j = 0; j < L.cols(); ++j) L(i, j) = 100.0 - 20.0 * static_cast<double>(j) * u(rng);
  }
  prefix_split_workspace ws;
  bit_allocation out;
  for (budget_form form : {budget_form::exact, budget_form::at_most}) {
    prefix_split(paper_bits, L, 2.5, {.form = form}, {}, ws, out);
    const auto first = out.level_of;
    const test::allocation_counter counter;
    prefix_split(paper_bits, L, 2.5, {.form = form}, {}, ws, out);
    prefix_split(paper_bits, L.topRows(100), 2.0, {.form = form}, {}, ws, out);
    CHECK(counter.count() == 0);
    prefix_split(paper_bits, L, 2.5, {.form = form}, {}, ws, out);
    CHECK(out.level_of == first);
  }
}
