#include "moepolicy/score/importance.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "moepolicy/score/detail/importance_reference.hpp"

using namespace moepolicy;

TEST_CASE("the three normalisations") {
  const std::array<double, 4> x{2, 4, 6, 8};
  std::array<double, 4> out{};
  normalize(x, out, normalization::sum_to_one);
  CHECK(out[0] == doctest::Approx(0.1));
  normalize(x, out, normalization::divide_by_max);
  CHECK(out[1] == doctest::Approx(0.5));
  normalize(x, out, normalization::min_max);
  CHECK(out[0] == 0.0);
  CHECK(out[2] == doctest::Approx(2.0 / 3.0));
  const std::array<double, 4> flat{3, 3, 3, 3};
  normalize(flat, out, normalization::min_max);
  CHECK(out[3] == 0.0);
  normalize(flat, out, normalization::sum_to_one);
  CHECK(out[3] == doctest::Approx(0.25));
}

TEST_CASE("S = alpha P~ + (1 - alpha) W~") {
  const std::array<double, 3> P{6, 3, 1}, W{1.0, 2.0, 1.0};
  std::array<double, 3> S{};
  importance_scores(P, W, S, {.alpha = 0.5});
  CHECK(S[0] == doctest::Approx(0.5 * 0.6 + 0.5 * 0.25));
  CHECK(S[1] == doctest::Approx(0.5 * 0.3 + 0.5 * 0.5));
  importance_scores(P, W, S, {.alpha = 1.0});
  CHECK(S[2] == doctest::Approx(0.1));
  importance_scores(P, W, S, {.alpha = 0.0, .norm = normalization::divide_by_max});
  CHECK(S[1] == doctest::Approx(1.0));
  CHECK_THROWS_WITH_AS(check_importance_config("place", {.alpha = 1.5}),
                       "moepolicy::place: alpha must be in [0, 1], got 1.5", invalid_argument);
}

TEST_CASE("top-K is best first with ties to the lower id") {
  const std::array<double, 5> s{0.2, 0.9, 0.2, 0.5, 0.9};
  std::array<expert_id, 5> order{};
  const auto top = top_k_experts(s, 3, order);
  CHECK(std::vector<expert_id>(top.begin(), top.end()) == std::vector<expert_id>{1, 4, 3});
  rank_experts(s, order);
  CHECK(std::vector<expert_id>(order.begin(), order.end()) == std::vector<expert_id>{1, 4, 3, 0, 2});
  CHECK(top_k_experts(s, 0, order).empty());
}

// Partial selection against the first implementation (a heap-based partial sort), kept as
// the reference, and against a full ranking: the same k ids in the same order, on random
// scores with and without ties, for every k, at the papers' sizes too.
TEST_CASE("top-K by partial selection equals the reference and the full ranking") {
  std::mt19937_64 rng(20);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int compared = 0;
  for (const std::size_t E : std::array<std::size_t, 7>{1, 2, 7, 8, 33, 128, 256}) {
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<double> s(E);
      for (double& x : s) x = trial % 2 == 0 ? u(rng) : std::floor(4.0 * u(rng)) / 4.0;  // odd trials: many ties
      std::vector<expert_id> a(E), b(E), full(E);
      rank_experts(s, full);
      for (std::size_t k = 0; k <= E; k += std::max<std::size_t>(1, E / 9)) {
        const auto x = top_k_experts(s, k, a);
        const auto y = reference::top_k_experts(s, k, b);
        CAPTURE(E);
        CAPTURE(k);
        CHECK(std::vector<expert_id>(x.begin(), x.end()) == std::vector<expert_id>(y.begin(), y.end()));
        CHECK(std::vector<expert_id>(x.begin(), x.end()) ==
              std::vector<expert_id>(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(k)));
        ++compared;
      }
    }
  }
  CHECK(compared > 200);
}
