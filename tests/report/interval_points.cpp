// examples/common/interval_points.hpp: per-interval series merged into at most a fixed number
// of points, on hand-worked series.
#include "common/interval_points.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

using moepolicy::examples::interval_points;
using moepolicy::examples::intervals_per_point;
using moepolicy::examples::points_of;

TEST_CASE("intervals_per_point: the fewest intervals per point that fit the points") {
  CHECK(intervals_per_point(0, 1000) == 1);
  CHECK(intervals_per_point(1, 1) == 1);
  CHECK(intervals_per_point(1000, 1000) == 1);
  CHECK(intervals_per_point(1001, 1000) == 2);
  CHECK(intervals_per_point(2000, 1000) == 2);
  CHECK(intervals_per_point(2001, 1000) == 3);
  CHECK(intervals_per_point(7, 3) == 3);
  CHECK(intervals_per_point(122000, 1000) == 122);
  CHECK(points_of(0, 1) == 0);
  CHECK(points_of(1000, 7) == 143);
  CHECK(points_of(125200, intervals_per_point(125200, 1000)) == 994);
  CHECK_THROWS_WITH_AS(static_cast<void>(intervals_per_point(5, 0)),
                       "intervals_per_point: max_points must be >= 1, is 0", std::invalid_argument);
}

TEST_CASE("interval_points: one interval per point is each interval as it is") {
  interval_points s(3, 1);
  s.add(1, 3, 4, 2.0);
  s.add(0, 0, 0, 4.0);
  s.add(7, 7, 1, 6.0);
  s.finish();  // every point already closed: nothing added
  REQUIRE(s.ratio().size() == 3);
  CHECK(s.ratio()[0] == 1.0 / 3.0);
  CHECK(std::isnan(s.ratio()[1]));
  CHECK(s.ratio()[2] == 1.0);
  CHECK(s.events_per_interval() == std::vector<double>{4.0, 0.0, 1.0});
  CHECK(s.end() == std::vector<double>{2.0, 4.0, 6.0});
  CHECK(s.denominator() == std::vector<std::uint64_t>{3, 0, 7});
  CHECK(s.per_point() == 1);
}

TEST_CASE("interval_points: two intervals per point, the last point shorter") {
  // Five intervals (numerator, denominator, events, end), merged two at a time:
  //   (1, 2, 3, 10) + (0, 0, 1, 20) -> 1/2,  (3 + 1) / 2 = 2.0 events per interval, end 20
  //   (3, 4, 0, 30) + (2, 2, 5, 40) -> 5/6,  (0 + 5) / 2 = 2.5, end 40
  //   (0, 0, 0, 50)                 -> NaN (no denominator), 0 / 1 = 0.0, end 50
  interval_points s(5, 2);
  s.add(1, 2, 3, 10.0);
  s.add(0, 0, 1, 20.0);
  s.add(3, 4, 0, 30.0);
  s.add(2, 2, 5, 40.0);
  CHECK(s.ratio().size() == 2);  // the fifth interval not yet added
  s.add(0, 0, 0, 50.0);
  CHECK(s.ratio().size() == 2);  // the last point stays open until finish()
  s.finish();
  REQUIRE(s.ratio().size() == 3);
  CHECK(s.ratio()[0] == 0.5);
  CHECK(s.ratio()[1] == 5.0 / 6.0);
  CHECK(std::isnan(s.ratio()[2]));
  CHECK(s.events_per_interval() == std::vector<double>{2.0, 2.5, 0.0});
  CHECK(s.end() == std::vector<double>{20.0, 40.0, 50.0});
  CHECK(s.denominator() == std::vector<std::uint64_t>{2, 6, 0});
  s.finish();  // a second call adds nothing
  CHECK(s.ratio().size() == 3);
  // Taken out, the vectors move.
  const std::vector<double> r = s.take_ratio();
  CHECK(r.size() == 3);
}

TEST_CASE("interval_points: a point's ratio is its intervals' ratios weighted by their denominators") {
  // 1,000 intervals merged 7 at a time (143 points, the last of 6): each point's ratio times
  // its denominator is the sum of its intervals' numerators.
  const std::size_t n = 1000, k = intervals_per_point(n, 143);
  REQUIRE(k == 7);
  interval_points merged(n, k), each(n, 1);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t den = (i * 37) % 11, num = den == 0 ? 0 : (i * 13) % (den + 1), ev = i % 5;
    merged.add(num, den, ev, static_cast<double>(i + 1));
    each.add(num, den, ev, static_cast<double>(i + 1));
  }
  merged.finish();
  each.finish();
  REQUIRE(merged.ratio().size() == 143);
  REQUIRE(each.ratio().size() == n);
  for (std::size_t p = 0; p < 143; ++p) {
    double num = 0.0, events = 0.0;
    std::uint64_t den = 0;
    const std::size_t first = p * k, last = std::min(n, first + k);
    for (std::size_t i = first; i < last; ++i) {
      if (each.denominator()[i] != 0) num += each.ratio()[i] * static_cast<double>(each.denominator()[i]);
      den += each.denominator()[i];
      events += each.events_per_interval()[i];
    }
    CAPTURE(p);
    CHECK(merged.denominator()[p] == den);
    if (den == 0) {
      CHECK(std::isnan(merged.ratio()[p]));
    } else {
      CHECK(merged.ratio()[p] == doctest::Approx(num / static_cast<double>(den)).epsilon(1e-12));
    }
    CHECK(merged.events_per_interval()[p] == doctest::Approx(events / static_cast<double>(last - first)));
    CHECK(merged.end()[p] == static_cast<double>(last));
  }
}

TEST_CASE("interval_points: zero intervals per point is refused") {
  CHECK_THROWS_WITH_AS(interval_points(5, 0), "interval_points: per_point must be >= 1, is 0", std::invalid_argument);
}
