#include "moepolicy/stats/routing_stats.hpp"

#include <doctest/doctest.h>

#include <array>
#include <vector>

using namespace moepolicy;

TEST_CASE("P counts selections and W sums gate weights, by phase") {
  routing_stats_collector c(2, 4);
  // Two prefill tokens at layer 1 (top-2), one decode token at layer 0.
  const std::array<expert_id, 4> ids{0, 3, 3, 1};
  const std::array<float, 4> w{0.75f, 0.25f, 0.5f, 0.5f};
  c.observe(phase::prefill, 1, ids, w, 2);
  const std::array<expert_id, 2> d{2, 0};
  const std::array<float, 2> dw{0.625f, 0.375f};
  c.observe(phase::decode, 0, d, dw, 2);

  CHECK(c.counts(phase::prefill)(1, 3) == 2.0);
  CHECK(c.counts(phase::prefill)(1, 0) == 1.0);
  CHECK(c.counts(phase::prefill)(0, 0) == 0.0);
  CHECK(c.weight_sums(phase::prefill)(1, 3) == doctest::Approx(0.75));
  CHECK(c.tokens(phase::prefill, 1) == 2);
  CHECK(c.counts(phase::decode)(0, 2) == 1.0);
  CHECK(c.weight_sums(phase::decode)(0, 0) == doctest::Approx(0.375));
  CHECK(c.tokens(phase::decode, 0) == 1);

  c.reset();
  CHECK(c.counts(phase::prefill).sum() == 0.0);
  CHECK(c.tokens(phase::prefill, 1) == 0);
}

TEST_CASE("step loads count tokens per expert and clear per step") {
  step_load_counter s(2, 3);
  const std::array<expert_id, 4> ids{0, 2, 2, 1};
  s.observe(1, ids);
  CHECK(std::vector<std::uint32_t>(s.loads(1).begin(), s.loads(1).end()) == std::vector<std::uint32_t>{1, 1, 2});
  CHECK(s.loads(0)[0] == 0);
  s.clear();
  CHECK(s.loads(1)[2] == 0);
}

TEST_CASE("the sliding window keeps exactly the last n completed steps") {
  sliding_window_counts win(1, 2, 2);
  const std::array<expert_id, 1> e0{0}, e1{1};
  const std::array<float, 1> half{0.5f}, one{1.0f};
  win.observe(0, e0, half);  // step 1
  win.end_step();
  win.observe(0, e0, one);  // step 2
  win.end_step();
  CHECK(win.count(0, 0) == 2.0);
  CHECK(win.score_sum(0, 0) == doctest::Approx(1.5));
  win.observe(0, e1, one);  // step 3 in progress: the window holds steps 1, 2 and step 3 so far
  CHECK(win.count(0, 0) == 2.0);
  win.end_step();  // retires step 1
  CHECK(win.count(0, 0) == 1.0);
  CHECK(win.score_sum(0, 0) == doctest::Approx(1.0));
  CHECK(win.count(0, 1) == 1.0);
  CHECK(win.steps_in_window() == 2);
  win.end_step();  // empty step 4 retires step 2
  CHECK(win.count(0, 0) == 0.0);
  CHECK(win.count(0, 1) == 1.0);
  const std::array<float, 2> all{0.25f, 0.75f};
  win.observe_scores(0, all);
  CHECK(win.score_sum(0, 0) == doctest::Approx(0.25));
  CHECK_THROWS_WITH_AS(sliding_window_counts(1, 2, 0), "moepolicy::sliding_window_counts: window must be >= 1, got 0",
                       invalid_argument);
}

TEST_CASE("EMA follows Eq. 8 with alpha = 0.3") {
  ema_counts ema(1, 2, 0.3);
  const std::array<std::uint32_t, 2> step1{10, 0}, step2{0, 10};
  ema.update(0, std::span<const std::uint32_t>(step1));
  CHECK(ema.values(0)[0] == doctest::Approx(3.0));
  ema.update(0, std::span<const std::uint32_t>(step2));
  CHECK(ema.values(0)[0] == doctest::Approx(2.1));
  CHECK(ema.values(0)[1] == doctest::Approx(3.0));
  CHECK_THROWS_WITH_AS(ema_counts(1, 2, 0.0), "moepolicy::ema_counts: alpha must be in (0, 1], got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(routing_stats_collector(0, 8), "moepolicy::routing_stats_collector: num_layers must be in [1, 65536], got 0",
                       invalid_argument);
}
