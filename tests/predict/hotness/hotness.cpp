#include "moepolicy/predict/hotness.hpp"

#include "../../residency/allocation_counter.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <limits>
#include <vector>

using namespace moepolicy;

namespace {
std::vector<double> row(const hotness_estimator& h, layer_id l) { return {h.hotness(l).begin(), h.hotness(l).end()}; }
}  // namespace

TEST_CASE("raw counts fold into the EMA at each interval's end and reset") {
  hotness_estimator h(2, 3, {.alpha = 0.5});
  // Interval 1, layer 0: expert 0 three times, experts 1 and 2 once: c = [3, 1, 1].
  const std::array<expert_id, 5> ids{0, 0, 1, 2, 0};
  h.observe(0, ids);
  CHECK(h.counts(0)[0] == 3);
  CHECK(h.interval_selections(0) == 5);
  CHECK(row(h, 0) == std::vector<double>{0.0, 0.0, 0.0});  // nothing folded before the end
  h.end_interval();
  // h = 0.5 · [3, 1, 1] + 0.5 · 0 = [1.5, 0.5, 0.5]
  CHECK(row(h, 0) == std::vector<double>{1.5, 0.5, 0.5});
  CHECK(h.counts(0)[0] == 0);
  CHECK(h.interval_selections(0) == 0);
  CHECK(h.intervals() == 1);
  // Interval 2: expert 1 twice: c = [0, 2, 0]; h = 0.5 · c + 0.5 · [1.5, 0.5, 0.5] = [0.75, 1.25, 0.25].
  const std::array<expert_id, 2> two{1, 1};
  h.observe(0, two);
  h.end_interval();
  CHECK(row(h, 0) == std::vector<double>{0.75, 1.25, 0.25});
  // Layer 1 never saw traffic.
  CHECK(row(h, 1) == std::vector<double>{0.0, 0.0, 0.0});
}

TEST_CASE("shares weigh every interval alike") {
  hotness_estimator h(2, 3, {.alpha = 0.5, .counts = interval_counts::share});
  const std::array<expert_id, 5> ids{0, 0, 1, 2, 0};
  h.observe(0, ids);
  h.end_interval();
  // x = [3, 1, 1] / 5 = [0.6, 0.2, 0.2]; h = 0.5 · x = [0.3, 0.1, 0.1].
  CHECK(h.hotness(0, 0) == doctest::Approx(0.3));
  CHECK(h.hotness(0, 1) == doctest::Approx(0.1));
  const std::array<expert_id, 2> two{1, 1};
  h.observe(0, two);
  h.end_interval();
  // x = [0, 1, 0]; h = 0.5 · x + 0.5 · [0.3, 0.1, 0.1] = [0.15, 0.55, 0.05].
  CHECK(h.hotness(0, 0) == doctest::Approx(0.15));
  CHECK(h.hotness(0, 1) == doctest::Approx(0.55));
  CHECK(h.hotness(0, 2) == doctest::Approx(0.05));
  CHECK(h.hotness(1, 0) == 0.0);  // an empty layer's shares are 0, not NaN
}

TEST_CASE("an empty interval decays the hotness without reordering it") {
  hotness_estimator h(1, 3, {.alpha = 0.25});
  h.observe(0, 0, 4);
  h.observe(0, 2, 8);
  h.end_interval();  // h = 0.25 · [4, 0, 8] = [1, 0, 2]
  CHECK(row(h, 0) == std::vector<double>{1.0, 0.0, 2.0});
  h.end_interval();  // h = 0.75 · [1, 0, 2] = [0.75, 0, 1.5]
  CHECK(row(h, 0) == std::vector<double>{0.75, 0.0, 1.5});
}

TEST_CASE("alpha = 1 keeps only the last interval") {
  hotness_estimator h(1, 2, {.alpha = 1.0});
  h.observe(0, 0, 5);
  h.end_interval();
  h.observe(0, 1, 2);
  h.end_interval();
  CHECK(row(h, 0) == std::vector<double>{0.0, 2.0});
}

TEST_CASE("time-based intervals end when their time has come") {
  hotness_estimator h(1, 2, {.alpha = 0.5, .interval_seconds = 1.0});
  h.observe(0, 0, 2);
  CHECK(h.advance_to(0.5) == 0);
  CHECK(h.advance_to(0.999) == 0);
  CHECK(h.advance_to(1.0) == 1);  // the first interval is [0, 1)
  CHECK(row(h, 0) == std::vector<double>{1.0, 0.0});
  CHECK(h.next_interval_end() == 2.0);
  h.observe(0, 1, 4);
  // At 3.5 the intervals ending at 2 (with the counts) and at 3 (empty) have passed:
  // h = 0.5 · [0, 4] + 0.5 · [1, 0] = [0.5, 2], then 0.5 · that = [0.25, 1].
  CHECK(h.advance_to(3.5) == 2);
  CHECK(row(h, 0) == std::vector<double>{0.25, 1.0});
  CHECK(h.intervals() == 3);
}

TEST_CASE("reset forgets everything") {
  hotness_estimator h(1, 2, {.interval_seconds = 2.0});
  h.observe(0, 1, 3);
  h.advance_to(2.0);
  h.observe(0, 0, 1);
  h.reset();
  CHECK(row(h, 0) == std::vector<double>{0.0, 0.0});
  CHECK(h.counts(0)[0] == 0);
  CHECK(h.intervals() == 0);
  CHECK(h.next_interval_end() == 2.0);
}

TEST_CASE("bad configurations are rejected with the library's message") {
  CHECK_THROWS_WITH_AS(hotness_estimator(0, 4), "moepolicy::hotness_estimator: num_layers must be in [1, 65536], got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(hotness_estimator(2, 0),
                       "moepolicy::hotness_estimator: num_experts must be in [1, 65536], got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(hotness_estimator(2, 70000),
                       "moepolicy::hotness_estimator: num_experts must be in [1, 65536], got 70000", invalid_argument);
  CHECK_THROWS_WITH_AS(hotness_estimator(2, 4, {.alpha = 0.0}),
                       "moepolicy::hotness_estimator: alpha must be in (0, 1], got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(hotness_estimator(2, 4, {.alpha = 1.5}),
                       "moepolicy::hotness_estimator: alpha must be in (0, 1], got 1.5", invalid_argument);
  CHECK_THROWS_WITH_AS(hotness_estimator(2, 4, {.interval_seconds = -1.0}),
                       "moepolicy::hotness_estimator: interval_seconds must be finite and >= 0, got -1",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(hotness_estimator(2, 4, {.interval_seconds = std::numeric_limits<double>::infinity()}),
                       "moepolicy::hotness_estimator: interval_seconds must be finite and >= 0, got inf",
                       invalid_argument);
}

TEST_CASE("observing and ending intervals allocate nothing after construction") {
  hotness_estimator h(4, 64, {.interval_seconds = 1.0});
  const std::array<expert_id, 8> ids{1, 5, 9, 63, 0, 2, 2, 7};
  const std::size_t n = count_allocations([&] {
    for (layer_id l = 0; l < 4; ++l) h.observe(l, ids);
    h.end_interval();
    h.observe(2, 5, 3);
    static_cast<void>(h.advance_to(4.0));
    h.reset();
  });
  CHECK(n == 0);
}
