// SPDX-License-Identifier: Apache-2.0
// moepolicy/cache/space_time_bound.hpp — an upper bound on the demand hits of any cache
// whose experts differ in size: the reference beside policies of a bytes-unit cache, where
// Belady's MIN is no longer optimal and the exact optimum is NP-hard (Chrobak et al.,
// "Caching is hard — even in the fault model", Algorithmica 2012).
//
// The bound is the space-time relaxation of offline caching with variable sizes (the upper
// bound of Berger, Beckmann and Harchol-Balter, "Practical Bounds on Optimal Caching with
// Variable Object Sizes", SIGMETRICS 2018: PFOO-U). Per capacity pool, with the pool's
// own clock (one tick per demand access to the pool, N accesses):
//   - a hit at the access at tick j to an expert last accessed at tick i < j needs the
//     expert resident through the j − i gaps between ticks i and j; it costs
//     s · (j − i) byte-gaps, s the expert's weight against capacity (its bytes, or 1 in an
//     experts-unit cache);
//   - at every one of the N − 1 gaps the pool holds at most C, so the hits of any
//     schedule — demand caching with or without bypass, the optimum included — cost at most
//     C · (N − 1) in all;
//   - the bound is the largest number of reuse intervals whose costs sum to at most
//     C · (N − 1), with intervals of experts larger than C left out: taking the cheapest
//     first achieves it (every interval is worth one hit, so exchanging a costlier one for a
//     cheaper one never lowers the count).
// It is a bound, not a schedule: it may exceed the optimum (it lets residency be shared out
// in time without packing), so the optimum lies between the best feasible policy and it.
// It holds only for demand caching: a prefetching cache may exceed it (prefetches are not
// demand accesses). Only positions and sizes are read: it uses the whole future by design.
//
// Cost. O(N log N) time and O(N + slots) memory for N accesses.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/expert_cache.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"

namespace moepolicy {

/// The space-time upper bound on the demand hits of any cache of configuration `cc` (its
/// capacity, unit, scope and expert sizes) serving `accesses` in order; see the header.
///
/// Throws: `invalid_argument` naming `space_time_hit_bound` for a configuration
/// `expert_cache` rejects, or an access outside its shape.
[[nodiscard]] inline std::uint64_t space_time_hit_bound(std::span<const expert_key> accesses, const cache_config& cc) {
  constexpr std::string_view fn = "space_time_hit_bound";
  const cache_shape shape = cc.shape();
  shape.validate(fn);
  const std::size_t slots = shape.slots();
  if (!cc.footprints.empty() && cc.footprints.size() != slots) {
    detail::throw_invalid(fn, "footprints must be empty or hold num_layers * num_experts entries",
                          cc.footprints.size());
  }
  const auto weight = [&](std::size_t f) -> std::uint64_t {
    if (cc.unit == capacity_unit::experts) return 1;
    return cc.footprints.empty() ? cc.expert_bytes : cc.footprints[f];
  };
  const std::size_t pools = shape.partitions();
  std::vector<std::uint64_t> clock(pools, 0);
  std::vector<std::uint64_t> last(slots, 0);  // 1 + tick of the last access, 0 never
  std::vector<std::vector<std::uint64_t>> cost(pools);
  constexpr std::uint64_t huge = std::numeric_limits<std::uint64_t>::max();
  for (const expert_key k : accesses) {
    if (k.layer >= shape.num_layers) detail::throw_invalid(fn, "access outside the cache's shape: layer", k.layer);
    if (k.expert >= shape.num_experts) detail::throw_invalid(fn, "access outside the cache's shape: expert", k.expert);
    const std::size_t f = shape.flat(k);
    const std::size_t p = shape.partition_of(k);
    const std::uint64_t now = clock[p]++;
    if (last[f] != 0) {
      const std::uint64_t gaps = now - (last[f] - 1);
      const std::uint64_t w = weight(f);
      if (w <= cc.capacity) cost[p].push_back(gaps > huge / std::max<std::uint64_t>(w, 1) ? huge : w * gaps);
    }
    last[f] = now + 1;
  }
  std::uint64_t hits = 0;
  for (std::size_t p = 0; p < pools; ++p) {
    if (clock[p] < 2) continue;
    const std::uint64_t n_gaps = clock[p] - 1;
    std::uint64_t budget = cc.capacity > huge / n_gaps ? huge : cc.capacity * n_gaps;
    std::vector<std::uint64_t>& c = cost[p];
    std::sort(c.begin(), c.end());
    for (const std::uint64_t x : c) {
      if (x > budget) break;
      budget -= x;
      ++hits;
    }
  }
  return hits;
}

}  // namespace moepolicy
