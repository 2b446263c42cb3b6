// moepolicy/balance/ndp_rebalance.hpp — cold-expert rebalancing across DIMM-NDP units
// (TriMoE, "TriMoE: Augmenting GPU with AMX-Enabled CPU and DIMM-NDP for
// High-Throughput MoE Inference via Offloading", §4.3, "Cold Expert Rebalancing").
//
// The paper: "the system calculates the total predicted load of cold experts on each
// DIMM. If skew is detected, it greedily selects and migrates cold experts one by one
// from the busiest DIMM to the most idle DIMM via DIMM-Link." Our reading, documented
// where the paper leaves a choice:
//   - a DIMM's load is the sum of the weights the caller gives its cold, localized experts
//     (predicted tokens as the paper says, or predicted NDP seconds as the migration
//     planner passes so that benefits are times);
//   - skew: the busiest DIMM's load exceeds the mean over all DIMMs by more than
//     `skew_threshold` (relative) and exceeds the idlest DIMM's;
//   - which expert: of the cold experts on the busiest DIMM b, the one whose move to the
//     idlest DIMM i leaves the smaller of the pair's two loads largest, i.e. minimises
//     max(load_b − x, load_i + x); only 0 < x < load_b − load_i, so every move strictly
//     lowers that pair's maximum; among equals the lower expert index;
//   - busiest and idlest: the lowest DIMM index among equals;
//   - at most `max_moves` moves; an expert may move more than once.
// The plan is a sequence: each move assumes the ones before it. Per-step calls allocate
// nothing after construction.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/sched/problem.hpp"
#include "moepolicy/stats/analysis.hpp"

namespace moepolicy {

/// Configuration of `ndp_rebalancer`.
struct ndp_rebalance_config {
  /// Skew: the busiest DIMM above the mean by more than this fraction (>= 0).
  double skew_threshold = 0.1;
  /// Moves per plan at most.
  std::size_t max_moves = 16;
};

/// One planned migration of a localized cold expert between DIMMs.
struct rebalance_move {
  /// Index of the expert in the layer.
  expert_id expert = 0;
  std::uint16_t from = 0;
  std::uint16_t to = 0;
  /// Its weight (predicted load).
  double load = 0.0;
  /// How much the busiest DIMM's load falls: load_b − max(load_b − x, load_i + x).
  double relief = 0.0;
};

/// Plans cold-expert moves from the busiest DIMM to the most idle one.
class ndp_rebalancer {
 public:
  /// Throws: `invalid_argument` when `num_dimms` is not in [1, 65534], `num_experts` is
  /// not in [1, 65536], or `skew_threshold` is negative or not finite.
  ndp_rebalancer(std::size_t num_dimms, std::size_t num_experts, ndp_rebalance_config config = {}) : config_(config) {
    constexpr const char* fn = "ndp_rebalancer";
    if (num_dimms == 0 || num_dimms >= expert_layout::striped_home) {
      detail::throw_invalid(fn, "num_dimms must be in [1, 65534]", num_dimms);
    }
    if (num_experts == 0 || num_experts > 65536)
      detail::throw_invalid(fn, "num_experts must be in [1, 65536]", num_experts);
    if (!(config.skew_threshold >= 0.0) || !std::isfinite(config.skew_threshold)) {
      detail::throw_invalid(fn, "skew_threshold must be finite and >= 0", config.skew_threshold);
    }
    loads_.assign(num_dimms, 0.0);
    head_.assign(num_dimms, no_expert);
    tail_.assign(num_dimms, no_expert);
    next_.assign(num_experts, no_expert);
    counted_.assign(num_experts, 0);
    moves_.reserve(config.max_moves);
  }

  [[nodiscard]] const ndp_rebalance_config& config() const noexcept { return config_; }
  [[nodiscard]] std::size_t num_dimms() const noexcept { return loads_.size(); }

  /// Plans the moves of one layer. Expert e counts when `classes[e]` is cold and
  /// `layouts[e]` is localized, with weight `weights[e]`.
  ///
  /// Preconditions: `weights`, `classes`, `layouts` have the same size, at most the
  /// `num_experts` given at construction; weights finite and >= 0; homes < `num_dimms()`.
  /// Returns: the moves in order (valid until the next call).
  /// Complexity: O(E + moves · (D + m)), m the most counted experts on one DIMM (each
  /// DIMM's are kept in a list in index order, so a move scans only the busiest DIMM's and
  /// inserts into the idlest's); no allocation.
  std::span<const rebalance_move> plan(std::span<const double> weights, std::span<const hotness> classes,
                                       std::span<const expert_layout> layouts) noexcept {
    const std::size_t n = weights.size(), D = loads_.size();
    MOEPOLICY_ASSERT(classes.size() == n && layouts.size() == n && n <= next_.size());
    moves_.clear();
    std::fill(loads_.begin(), loads_.end(), 0.0);
    std::fill(head_.begin(), head_.end(), no_expert);
    std::fill(tail_.begin(), tail_.end(), no_expert);
    double total = 0.0;
    // The counted experts, in index order (gathered without data-dependent branches),
    // then each DIMM's in a list in index order.
    std::size_t m = 0;
    for (std::size_t e = 0; e < n; ++e) {
      counted_[m] = static_cast<std::uint32_t>(e);
      m += static_cast<std::size_t>(classes[e] == hotness::cold) * static_cast<std::size_t>(layouts[e].is_localized());
    }
    for (std::size_t j = 0; j < m; ++j) {
      const std::uint32_t x = counted_[j];
      const std::size_t d = layouts[x].home;
      MOEPOLICY_ASSERT(d < D && weights[x] >= 0.0);
      loads_[d] += weights[x];
      total += weights[x];
      next_[x] = no_expert;
      if (tail_[d] == no_expert) {
        head_[d] = x;
      } else {
        next_[tail_[d]] = x;
      }
      tail_[d] = x;
    }
    const double mean = total / static_cast<double>(D);
    while (moves_.size() < config_.max_moves) {
      // The busiest and the idlest DIMM, the first of equals; the extremes are kept in
      // registers and selected without branches.
      std::size_t b = 0, i = 0;
      double hi = loads_[0], lo = loads_[0];
      for (std::size_t d = 1; d < D; ++d) {
        const double v = loads_[d];
        const bool up = v > hi, down = v < lo;
        b = up ? d : b;
        hi = up ? v : hi;
        i = down ? d : i;
        lo = down ? v : lo;
      }
      const double gap = loads_[b] - loads_[i];
      if (!(loads_[b] > (1.0 + config_.skew_threshold) * mean) || !(gap > 0.0)) break;
      std::uint32_t pick = no_expert, before_pick = no_expert;
      double best = loads_[b];
      for (std::uint32_t e = head_[b], before = no_expert; e != no_expert; before = e, e = next_[e]) {
        const double x = weights[e];
        if (!(x > 0.0 && x < gap)) continue;
        const double after = std::max(loads_[b] - x, loads_[i] + x);
        if (after < best) {
          best = after;
          pick = e;
          before_pick = before;
        }
      }
      if (pick == no_expert) break;
      const double x = weights[pick];
      moves_.push_back({static_cast<expert_id>(pick), static_cast<std::uint16_t>(b), static_cast<std::uint16_t>(i), x,
                        loads_[b] - best});
      loads_[b] -= x;
      loads_[i] += x;
      // From b's list to its place in i's.
      if (before_pick == no_expert) {
        head_[b] = next_[pick];
      } else {
        next_[before_pick] = next_[pick];
      }
      if (tail_[b] == pick) tail_[b] = before_pick;
      std::uint32_t before = no_expert;
      for (std::uint32_t e = head_[i]; e != no_expert && e < pick; e = next_[e]) before = e;
      if (before == no_expert) {
        next_[pick] = head_[i];
        head_[i] = pick;
      } else {
        next_[pick] = next_[before];
        next_[before] = pick;
      }
      if (next_[pick] == no_expert) tail_[i] = pick;
    }
    return moves_;
  }

  /// Each DIMM's load after the planned moves.
  [[nodiscard]] std::span<const double> dimm_loads() const noexcept { return loads_; }

 private:
  ndp_rebalance_config config_;
  std::vector<double> loads_;
  static constexpr std::uint32_t no_expert = UINT32_MAX;
  std::vector<std::uint32_t> head_, tail_;  // per DIMM: its counted experts, a list in index order
  std::vector<std::uint32_t> next_;         // per expert: the next in its DIMM's list
  std::vector<std::uint32_t> counted_;      // the counted experts of the plan
  std::vector<rebalance_move> moves_;
};

}  // namespace moepolicy
