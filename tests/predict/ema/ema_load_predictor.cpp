// Tests of predict/ema_load_predictor.hpp: Eq. 8 by hand, warm start, the share classes,
// and the confusion counts.
#include "moepolicy/predict/ema_load_predictor.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

using namespace moepolicy;

TEST_CASE("Eq. 8 with alpha 0.3 and a warm start") {
  ema_load_predictor p(2, 3);
  CHECK(p.config().alpha == 0.3);
  const std::array<std::uint32_t, 3> s0{10, 0, 2}, s1{0, 10, 2};
  p.update(1, s0);
  // The first step sets the average: EMA = F(0).
  CHECK(p.predicted_loads(1)[0] == doctest::Approx(10.0));
  CHECK(p.predicted_loads(1)[1] == doctest::Approx(0.0));
  p.update(1, s1);
  // 0.3 · (0, 10, 2) + 0.7 · (10, 0, 2) = (7, 3, 2).
  CHECK(p.predicted_loads(1)[0] == doctest::Approx(7.0));
  CHECK(p.predicted_loads(1)[1] == doctest::Approx(3.0));
  CHECK(p.predicted_loads(1)[2] == doctest::Approx(2.0));
  // Classes of (7, 3, 2), 12 tokens: the head holding >= 50 % is {0} (7 >= 6); the tail
  // within 10 % (1.2) is empty (2 > 1.2). Hot, warm, warm.
  const auto c = p.predicted_classes(1);
  CHECK(c[0] == hotness::hot);
  CHECK(c[1] == hotness::warm);
  CHECK(c[2] == hotness::warm);
  // Layer 0 untouched: no update, all cold, zero loads.
  CHECK(p.updates(0) == 0);
  CHECK(p.updates(1) == 2);
  CHECK(p.predicted_classes(0)[0] == hotness::cold);
  CHECK(p.predicted_loads(0)[2] == 0.0);
  p.reset();
  CHECK(p.updates(1) == 0);
  CHECK(p.predicted_loads(1)[0] == 0.0);
}

TEST_CASE("Eq. 8 from EMA(0) = 0 without a warm start; alpha 1 is the last value") {
  ema_load_predictor p(1, 3, {.alpha = 0.3, .warm_start = false});
  const std::array<std::uint32_t, 3> s0{10, 0, 2}, s1{0, 10, 2};
  p.update(0, s0);
  // 0.3 · (10, 0, 2) = (3, 0, 0.6); then 0.3 · (0, 10, 2) + 0.7 · (3, 0, 0.6) = (2.1, 3, 1.02).
  CHECK(p.predicted_loads(0)[0] == doctest::Approx(3.0));
  p.update(0, s1);
  CHECK(p.predicted_loads(0)[0] == doctest::Approx(2.1));
  CHECK(p.predicted_loads(0)[1] == doctest::Approx(3.0));
  CHECK(p.predicted_loads(0)[2] == doctest::Approx(1.02));

  ema_load_predictor last(1, 3, {.alpha = 1.0});
  last.update(0, s0);
  last.update(0, s1);
  CHECK(last.predicted_loads(0)[1] == 10.0);
  // Fractional loads take the same path.
  const std::array<double, 3> f{0.5, 0.25, 0.25};
  last.update(0, f);
  CHECK(last.predicted_loads(0)[0] == 0.5);
}

TEST_CASE("the allocation-free classification equals classify_by_share") {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 500; ++trial) {
    const std::size_t n = 1 + rng() % 40;
    std::vector<double> loads(n);
    // Small integers make ties common; a few all-zero inputs too.
    for (auto& x : loads) x = trial % 50 == 0 ? 0.0 : static_cast<double>(rng() % 6);
    const share_classes_config cfg{.hot_share = 0.3 + 0.1 * (trial % 5), .cold_share = 0.05 * (trial % 4)};
    std::vector<hotness> a(n), b(n);
    std::vector<std::uint32_t> order(n);
    classify_by_share(loads, a, cfg);
    detail::classify_by_share_into(loads, b, order, cfg);
    CHECK(a == b);
  }
}

TEST_CASE("ema_load_predictor: bad configuration") {
  CHECK_THROWS_WITH_AS(ema_load_predictor(0, 8), "moepolicy::ema_load_predictor: num_layers must be in [1, 65536], got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(ema_load_predictor(1, 0), "moepolicy::ema_load_predictor: num_experts must be in [1, 65536], got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(ema_load_predictor(1, 8, {.alpha = 0.0}), "moepolicy::ema_load_predictor: alpha must be in (0, 1], got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(ema_load_predictor(1, 8, {.classes = {.hot_share = 0.8, .cold_share = 0.3}}),
                       "moepolicy::ema_load_predictor: need 0 < hot_share, 0 <= cold_share and hot_share + cold_share <= 1, "
                       "hot_share, got 0.80000000000000004",
                       invalid_argument);
}

TEST_CASE("hotness_confusion: accuracy, precision, recall") {
  hotness_confusion c;
  CHECK(c.accuracy() == 0.0);
  using enum hotness;
  const std::array<hotness, 5> pred{hot, hot, warm, cold, cold};
  const std::array<hotness, 5> real{hot, warm, warm, cold, warm};
  c.observe(pred, real);
  CHECK(c.total() == 5);
  CHECK(c.count(hot, warm) == 1);
  CHECK(c.accuracy() == doctest::Approx(3.0 / 5.0));
  CHECK(c.precision(hot) == doctest::Approx(0.5));
  CHECK(c.recall(warm) == doctest::Approx(1.0 / 3.0));
  CHECK(c.precision(cold) == doctest::Approx(0.5));
  CHECK(c.recall(cold) == doctest::Approx(1.0));
  c.reset();
  CHECK(c.total() == 0);
}

TEST_CASE("the predictor's classes are classify_by_share of its EMA after every update") {
  // Slow drifts (insertion sort re-sorts the last order) and jumps (alpha 1, the fallback
  // to a full sort) alike.
  std::mt19937 rng(9);
  for (double alpha : {0.3, 1.0}) {
    ema_load_predictor p(2, 64, {.alpha = alpha});
    std::vector<std::uint32_t> loads(64);
    std::vector<hotness> expect(64);
    for (int step = 0; step < 60; ++step) {
      for (auto& x : loads) x = static_cast<std::uint32_t>(rng() % (step % 7 == 0 ? 3 : 40));
      const auto layer = static_cast<layer_id>(step % 2);
      p.update(layer, loads);
      const auto ema = p.predicted_loads(layer);
      classify_by_share(std::vector<double>(ema.begin(), ema.end()), expect);
      const auto got = p.predicted_classes(layer);
      CHECK(std::vector<hotness>(got.begin(), got.end()) == expect);
    }
  }
}
