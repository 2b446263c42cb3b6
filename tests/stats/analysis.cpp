#include "moepolicy/stats/analysis.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <vector>

using namespace moepolicy;

TEST_CASE("cosine similarity of activation distributions") {
  const std::array<double, 3> a{1, 2, 2}, b{2, 4, 4}, c{2, -1, 0}, z{0, 0, 0};
  CHECK(cosine_similarity(a, b) == doctest::Approx(1.0));
  CHECK(cosine_similarity(a, c) == doctest::Approx(0.0));
  CHECK(cosine_similarity(a, z) == 0.0);
  Eigen::MatrixXd P(2, 3), D(2, 3);
  P << 1, 2, 2, 0, 0, 0;
  D << 1, 0, 0, 1, 1, 1;
  const auto per_layer = layer_cosine_similarity(P, D);
  CHECK(per_layer[0] == doctest::Approx(1.0 / 3.0));
  CHECK(std::isnan(per_layer[1]));
  CHECK_THROWS_AS(static_cast<void>(layer_cosine_similarity(P, Eigen::MatrixXd(3, 3))), invalid_argument);
}

TEST_CASE("hot, warm and cold by share of tokens") {
  // Loads 50, 20, 15, 8, 4, 2, 1 (total 100). Hot: head reaching 50% -> {0}.
  // Cold: tail within 10% -> 1 + 2 + 4 = 7 (adding 8 would make 15).
  const std::array<double, 7> loads{50, 20, 15, 8, 4, 2, 1};
  std::array<hotness, 7> cls{};
  classify_by_share(loads, cls);
  CHECK(cls[0] == hotness::hot);
  CHECK(cls[1] == hotness::warm);
  CHECK(cls[3] == hotness::warm);
  CHECK(cls[4] == hotness::cold);
  CHECK(cls[6] == hotness::cold);
  classify_by_share(loads, cls, {.hot_share = 0.6, .cold_share = 0.0});
  CHECK(cls[1] == hotness::hot);  // 50 < 60, so the second expert joins
  CHECK(cls[6] == hotness::warm);
  const std::array<double, 3> none{0, 0, 0};
  std::array<hotness, 3> c3{};
  classify_by_share(none, c3);
  CHECK(c3[1] == hotness::cold);
  CHECK_THROWS_AS(classify_by_share(loads, cls, {.hot_share = 0.95, .cold_share = 0.1}), invalid_argument);
  const std::array<double, 2> neg{1, -1};
  std::array<hotness, 2> c2{};
  CHECK_THROWS_WITH_AS(classify_by_share(neg, c2), "moepolicy::classify_by_share: loads must be finite and >= 0, got -1",
                       invalid_argument);
}

TEST_CASE("summarize_defined skips the NaN of layers one phase never reached") {
  const double nan = std::nan("");
  const std::vector<double> v{0.5, nan, 0.9, 0.7};
  const defined_summary d = summarize_defined(v);
  CHECK(d.count == 3);
  CHECK(d.mean == doctest::Approx(0.7));
  CHECK(d.min == 0.5);
  CHECK(d.max == 0.9);
  const std::vector<double> none{nan, nan};
  const defined_summary e = summarize_defined(none);
  CHECK(e.count == 0);
  CHECK(std::isnan(e.mean));
  CHECK(std::isnan(e.min));
  CHECK(std::isnan(e.max));
  CHECK(summarize_defined({}).count == 0);
}
