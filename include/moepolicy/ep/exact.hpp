// moepolicy/ep/exact.hpp — the least max GPU load of one layer's EP placement, by
// exhaustive search, for the small instances the tests check the heuristics against.
//
// Model as ep/lower_bound.hpp (global: no node or group constraint): every count vector
// c_e >= 1 with Σ c_e = R is enumerated, and for each, the R replicas are packed into G
// GPUs of exactly R/G slots by branch and bound (replicas largest first; a GPU whose count
// and load equal an earlier one's is not tried again; a branch stops as soon as a GPU
// reaches the best max found). The search stops early when the best equals the lower
// bound of ep/lower_bound.hpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/ep/lower_bound.hpp"
#include "moepolicy/ep/problem.hpp"

namespace moepolicy {

/// The largest instance `ep_exact_max_load` accepts.
struct ep_exact_limits {
  static constexpr std::size_t max_experts = 8;
  static constexpr std::size_t max_replicas = 12;
  static constexpr std::size_t max_gpus = 6;
};

/// The least max GPU load over every replication and placement of `loads` into `replicas`
/// slots on `gpus` GPUs (global model).
///
/// Throws: `invalid_argument` naming `ep_exact_max_load` as `ep_lower_bound`, and when the
/// instance exceeds `ep_exact_limits`. Complexity: exponential; well under a millisecond
/// at the limits.
[[nodiscard]] inline double ep_exact_max_load(std::span<const double> loads, std::uint32_t replicas, std::uint32_t gpus) {
  constexpr std::string_view fn = "ep_exact_max_load";
  if (loads.size() > ep_exact_limits::max_experts) detail::throw_invalid(fn, "experts must be <= 8", loads.size());
  if (replicas > ep_exact_limits::max_replicas) detail::throw_invalid(fn, "replicas must be <= 12", replicas);
  if (gpus > ep_exact_limits::max_gpus) detail::throw_invalid(fn, "gpus must be <= 6", gpus);
  const double bound = ep_lower_bound(loads, replicas, gpus);  // checks the rest
  const std::size_t n = loads.size();
  const std::size_t per = replicas / gpus;
  std::vector<std::int32_t> counts(n, 1);
  std::vector<double> items(replicas);
  std::vector<double> bin(gpus);
  std::vector<std::size_t> fill(gpus);
  double best = std::numeric_limits<double>::infinity();
  const double slack = 1e-12 * std::max(1.0, bound);

  std::function<void(std::size_t)> pack = [&](std::size_t i) {
    if (i == items.size()) {
      best = std::min(best, *std::max_element(bin.begin(), bin.end()));
      return;
    }
    for (std::size_t g = 0; g < gpus; ++g) {
      if (fill[g] == per || bin[g] + items[i] >= best) continue;
      bool repeat = false;
      for (std::size_t h = 0; h < g && !repeat; ++h) repeat = fill[h] == fill[g] && bin[h] == bin[g];
      if (repeat) continue;
      bin[g] += items[i];
      ++fill[g];
      pack(i + 1);
      bin[g] -= items[i];
      --fill[g];
      if (best <= bound + slack) return;
    }
  };
  std::function<void(std::size_t, std::size_t)> replicate = [&](std::size_t e, std::size_t extra) {
    if (best <= bound + slack) return;
    if (e + 1 == n) {
      counts[e] = static_cast<std::int32_t>(1 + extra);
      std::size_t k = 0;
      for (std::size_t x = 0; x < n; ++x) {
        for (std::int32_t r = 0; r < counts[x]; ++r) items[k++] = loads[x] / counts[x];
      }
      std::sort(items.begin(), items.end(), std::greater<>{});
      std::fill(bin.begin(), bin.end(), 0.0);
      std::fill(fill.begin(), fill.end(), std::size_t{0});
      pack(0);
      return;
    }
    for (std::size_t c = 0; c <= extra; ++c) {
      counts[e] = static_cast<std::int32_t>(1 + c);
      replicate(e + 1, extra - c);
    }
  };
  replicate(0, replicas - n);
  return best;
}

}  // namespace moepolicy
