// A per-interval series held in at most a fixed number of points, for plots whose streams
// run to millions of intervals: consecutive intervals are merged, k at a time, as they end.
//
// Each interval brings a ratio's numerator and denominator (high-precision activations over
// activations, say), a count of events (transitions) and its end time. A point of k intervals
// holds Σ numerator / Σ denominator (the ratio over the point's intervals together: NaN when
// every denominator is 0), the events per interval (Σ events / the point's intervals), its
// last interval's end, and Σ denominator. With k = 1 each point is its interval, the ratio
// computed as numerator / denominator exactly as one interval alone. The last point holds
// what is left when k does not divide the intervals.
//
// Cost: O(1) per interval, no allocation after construction (it reserves its points).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

namespace moepolicy::examples {

/// Intervals merged per point so that `intervals` fill at most `max_points` points:
/// ⌈intervals / max_points⌉, at least 1.
///
/// Throws: `std::invalid_argument` when `max_points` is 0.
[[nodiscard]] inline std::size_t intervals_per_point(std::size_t intervals, std::size_t max_points) {
  if (max_points == 0) throw std::invalid_argument("intervals_per_point: max_points must be >= 1, is 0");
  return intervals <= max_points ? 1 : (intervals + max_points - 1) / max_points;
}

/// The points `intervals` fill, `per_point` (>= 1) in each: ⌈intervals / per_point⌉.
[[nodiscard]] constexpr std::size_t points_of(std::size_t intervals, std::size_t per_point) noexcept {
  return (intervals + per_point - 1) / per_point;
}

/// The points of one series (see the header).
class interval_points {
 public:
  interval_points() = default;
  /// A series of `intervals` intervals, `per_point` (>= 1) merged into each point.
  ///
  /// Throws: `std::invalid_argument` when `per_point` is 0.
  interval_points(std::size_t intervals, std::size_t per_point) : per_point_(per_point) {
    if (per_point == 0) throw std::invalid_argument("interval_points: per_point must be >= 1, is 0");
    const std::size_t points = points_of(intervals, per_point);
    ratio_.reserve(points);
    events_.reserve(points);
    end_.reserve(points);
    weight_.reserve(points);
  }

  /// One interval: the ratio's `numerator` and `denominator`, its `events` and its `end`.
  void add(std::uint64_t numerator, std::uint64_t denominator, std::uint64_t events, double end) {
    num_ += numerator;
    den_ += denominator;
    ev_ += events;
    end_now_ = end;
    if (++in_point_ == per_point_) close();
  }
  /// Closes the last point when it holds fewer than `per_point` intervals (no effect
  /// otherwise); call once after the last interval.
  void finish() {
    if (in_point_ != 0) close();
  }

  [[nodiscard]] std::size_t per_point() const noexcept { return per_point_; }
  /// Per point: Σ numerator / Σ denominator (NaN when Σ denominator is 0).
  [[nodiscard]] const std::vector<double>& ratio() const noexcept { return ratio_; }
  /// Per point: Σ events / its intervals.
  [[nodiscard]] const std::vector<double>& events_per_interval() const noexcept { return events_; }
  /// Per point: the end of its last interval.
  [[nodiscard]] const std::vector<double>& end() const noexcept { return end_; }
  /// Per point: Σ denominator.
  [[nodiscard]] const std::vector<std::uint64_t>& denominator() const noexcept { return weight_; }

  /// The ratios and the events per interval, moved out.
  std::vector<double> take_ratio() noexcept { return std::move(ratio_); }
  std::vector<double> take_events_per_interval() noexcept { return std::move(events_); }

 private:
  void close() {
    ratio_.push_back(den_ == 0 ? std::nan("") : static_cast<double>(num_) / static_cast<double>(den_));
    events_.push_back(static_cast<double>(ev_) / static_cast<double>(in_point_));
    end_.push_back(end_now_);
    weight_.push_back(den_);
    num_ = den_ = ev_ = 0;
    in_point_ = 0;
  }

  std::size_t per_point_ = 1;
  std::size_t in_point_ = 0;
  std::uint64_t num_ = 0, den_ = 0, ev_ = 0;
  double end_now_ = 0.0;
  std::vector<double> ratio_, events_, end_;
  std::vector<std::uint64_t> weight_;
};

}  // namespace moepolicy::examples
