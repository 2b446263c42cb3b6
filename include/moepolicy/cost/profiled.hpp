// moepolicy/cost/profiled.hpp — a device-cost model whose compute time comes from
// offline measurements. Models `DeviceCost`.
//
// TriMoE (§4.2) profiles the GPU and CPU offline for various token counts and
// looks up f_calc(L) at run time. `profiled_cost` does the same: for each profiled
// bitwidth a table of (tokens, seconds) points, interpolated piecewise linearly.
// Links, memory, execution kind and contention come from a `device_spec` as in the
// roofline model; the spec's `compute` block is not used by this model but must still
// be valid, so that one spec can back either model.
//
// Reading of the table, documented because a measurement leaves it open:
//   - t == 0 costs 0 (no kernel runs);
//   - 0 < t < first point costs the first point's time (a smaller batch is not assumed
//     to be faster than the smallest one measured);
//   - between points, linear interpolation;
//   - beyond the last point, the last segment's slope continues (with a single point,
//     time grows in proportion to tokens from that point);
//   - a query at bitwidth b uses the table of the smallest profiled bitwidth >= b (the
//     kernel that would run those weights), or the largest table if none is >= b.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/concepts.hpp"
#include "moepolicy/cost/detail/device_base.hpp"
#include "moepolicy/cost/device_spec.hpp"

namespace moepolicy {

/// One measurement: running one expert on `tokens` tokens took `seconds_taken`.
struct profile_point {
  std::size_t tokens = 0;
  seconds seconds_taken = 0.0;
};

/// Measurements of one kernel precision.
struct compute_profile {
  bitwidth bits = fp16;
  /// Strictly increasing in tokens (all > 0), non-decreasing and finite in time.
  std::vector<profile_point> points;
};

/// A device whose compute time is looked up in measured tables.
class profiled_cost : public detail::device_base {
 public:
  /// Preconditions: at least one profile; each as documented on `compute_profile`;
  /// no bitwidth profiled twice.
  ///
  /// Throws: `invalid_argument` naming the profile, the point and the value at fault.
  profiled_cost(device_spec spec, model_shape shape, std::vector<compute_profile> profiles)
      : device_base(std::move(spec), std::move(shape)), profiles_(std::move(profiles)) {
    constexpr const char* fn = "profiled_cost::profiled_cost";
    if (profiles_.empty()) detail::throw_invalid(fn, "at least one compute profile is required");
    std::sort(profiles_.begin(), profiles_.end(),
              [](const compute_profile& a, const compute_profile& b) { return a.bits < b.bits; });
    for (std::size_t p = 0; p < profiles_.size(); ++p) {
      const auto& prof = profiles_[p];
      const std::string where = "profile at " + std::to_string(prof.bits.bits()) + " bits";
      if (p > 0 && profiles_[p - 1].bits == prof.bits) {
        detail::throw_invalid(fn, "bitwidth profiled twice", prof.bits.bits());
      }
      if (prof.points.empty()) detail::throw_invalid(fn, where + " has no points");
      for (std::size_t i = 0; i < prof.points.size(); ++i) {
        const auto& pt = prof.points[i];
        const std::string at = where + ", point " + std::to_string(i);
        if (pt.tokens == 0) detail::throw_invalid(fn, at + ": tokens must be > 0", pt.tokens);
        if (!(pt.seconds_taken >= 0.0) || !std::isfinite(pt.seconds_taken)) {
          detail::throw_invalid(fn, at + ": seconds must be finite and >= 0", pt.seconds_taken);
        }
        if (i > 0 && pt.tokens <= prof.points[i - 1].tokens) {
          detail::throw_invalid(fn, at + ": tokens must be strictly increasing", pt.tokens);
        }
        if (i > 0 && pt.seconds_taken < prof.points[i - 1].seconds_taken) {
          detail::throw_invalid(fn, at + ": seconds must be non-decreasing in tokens",
                                pt.seconds_taken);
        }
      }
    }
  }

  /// See `ComputeCost` and the reading documented at the top of this header.
  [[nodiscard]] seconds compute_seconds(expert_key, bitwidth b, std::size_t tokens) const noexcept {
    if (tokens == 0) return 0.0;
    const auto& pts = table_for(b).points;
    const auto t = static_cast<double>(tokens);
    if (tokens <= pts.front().tokens) return pts.front().seconds_taken;
    const auto hi = std::lower_bound(pts.begin(), pts.end(), tokens,
                                     [](const profile_point& p, std::size_t x) { return p.tokens < x; });
    if (hi == pts.end()) {
      const auto& last = pts.back();
      const double slope =
          pts.size() == 1 ? last.seconds_taken / static_cast<double>(last.tokens)
                          : (last.seconds_taken - pts[pts.size() - 2].seconds_taken) /
                                static_cast<double>(last.tokens - pts[pts.size() - 2].tokens);
      return last.seconds_taken + slope * (t - static_cast<double>(last.tokens));
    }
    const auto& lo = *(hi - 1);
    const double frac = (t - static_cast<double>(lo.tokens)) / static_cast<double>(hi->tokens - lo.tokens);
    return lo.seconds_taken + frac * (hi->seconds_taken - lo.seconds_taken);
  }

  /// The profiles, sorted by bitwidth.
  [[nodiscard]] const std::vector<compute_profile>& profiles() const noexcept { return profiles_; }

 private:
  [[nodiscard]] const compute_profile& table_for(bitwidth b) const noexcept {
    for (const auto& p : profiles_) {
      if (p.bits >= b) return p;
    }
    return profiles_.back();
  }

  std::vector<compute_profile> profiles_;
};

static_assert(DeviceCost<profiled_cost>);
static_assert(DenseComputeCost<profiled_cost>);

}  // namespace moepolicy
