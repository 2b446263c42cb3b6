// SPDX-License-Identifier: Apache-2.0
// moepolicy/cache/size_aware_reuse.hpp — eviction by predicted space-time: the resident
// whose predicted next use costs the most byte-time goes first, for caches whose capacity
// is in bytes and whose experts differ in size (by precision). Models `EvictionPolicy`;
// observes layers, bypassed misses and prefetches of residents.
//
// With experts of one size, Belady's rule (evict the farthest next use) maximises hits; with
// sizes it does not (the optimum is NP-hard), and storage caches weigh an object's size
// against its value: GDSF (Cherkasova, HP Labs TR HPL-98-69, 1998) keeps the objects of the
// largest frequency × cost / size, and the space-time relaxation that bounds the optimum
// (cache/space_time_bound.hpp, Berger et al., SIGMETRICS 2018) counts a hit as costing
// s · (j − i) byte-steps: the expert's bytes held from its use at i to its next use at j.
// This policy is that relaxation's greedy rule, online: every resident is worth one hit at
// its next use, and it costs its bytes times the time until then, so the resident with the
// largest predicted cost per hit goes,
//   cost(x) = size(x) · D(x),   D(x) = max(I(x), now − last(x)),
// with D the predicted reuse distance of `predicted_reuse_policy` (cache/predicted_reuse.hpp:
// the exponential moving average I of x's demand intervals, LIRS's max with its idle time,
// the pool's clock counting demand accesses) — with equal sizes it decides exactly as that
// policy. Ours; GDSF's relative (its value per byte is frequency / size, here 1 / (D · size)).
//   - The victim: max over residents of size · max(I, idle) = max(largest size · I, largest
//     size · idle); the first from an indexed heap by size · I, the second, since idle time
//     grows with the clock for all alike, from the least recently touched resident of each
//     distinct size (a recency list per size class). Ties: the least recently touched, then
//     the lower (layer, expert).
//   - Recency counts demand uses and prefetches; the experts selected for the layer in
//     progress are shielded until its end (Edge-MoE §5.3), as in `predicted_reuse_policy`.
//   - Sizes come with the configuration (`footprints`, the same vector as the cache's
//     `cache_config::footprints`); at most `max_size_classes` distinct sizes.
// Only past accesses are read: `access_info::next_use` is ignored.
//
// Cost. Per slot 33 bytes plus 12 per size class, allocated at construction; events
// O(log n + 1) for n residents of the pool; `victim` O(size classes).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/detail/orderings.hpp"
#include "moepolicy/cache/detail/reuse_history.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// Configuration of `size_aware_reuse_policy`.
struct size_aware_reuse_config {
  /// a: the weight of the newest interval in the moving average of demand intervals, in
  /// (0, 1] (as `predicted_reuse_config::smoothing`).
  double smoothing = 0.1;
  /// Bytes of every expert, layer-major (num_layers × num_experts entries), each > 0; empty:
  /// all of one size (the policy is then `predicted_reuse_policy`'s rule).
  std::vector<bytes> footprints = {};
};

/// Evicts the resident whose predicted next use costs the most bytes × time.
class size_aware_reuse_policy : public detail::reuse_history<size_aware_reuse_policy> {
 public:
  using config_type = size_aware_reuse_config;
  /// The most distinct expert sizes (precisions) a policy accepts.
  static constexpr std::size_t max_size_classes = 16;

  /// Throws: `invalid_argument` naming `size_aware_reuse_policy` when `smoothing` is not in
  /// (0, 1], `footprints` is neither empty nor one entry per expert, an entry is 0, or there
  /// are more than `max_size_classes` distinct sizes.
  explicit size_aware_reuse_policy(const cache_shape& shape, const size_aware_reuse_config& cfg = {})
      : reuse_history(shape, checked_smoothing(cfg.smoothing)), class_of_(shape.slots(), 0), by_cost_(shape) {
    constexpr const char* fn = "size_aware_reuse_policy";
    if (!cfg.footprints.empty() && cfg.footprints.size() != shape.slots()) {
      detail::throw_invalid(
          fn,
          "footprints must be empty or hold num_layers x num_experts = " + std::to_string(shape.slots()) + " entries",
          cfg.footprints.size());
    }
    for (std::size_t f = 0; f < cfg.footprints.size(); ++f) {
      const bytes b = cfg.footprints[f];
      if (b == 0) detail::throw_invalid(fn, "a footprint must be > 0: expert " + std::to_string(f), b);
      auto it = std::find(sizes_.begin(), sizes_.end(), static_cast<double>(b));
      if (it == sizes_.end()) {
        if (sizes_.size() == max_size_classes) {
          detail::throw_invalid(fn, "at most 16 distinct footprints, a 17th", b);
        }
        sizes_.push_back(static_cast<double>(b));
        it = sizes_.end() - 1;
      }
      class_of_[f] = static_cast<std::uint8_t>(it - sizes_.begin());
    }
    if (sizes_.empty()) sizes_.push_back(1.0);
    for (std::size_t c = 0; c < sizes_.size(); ++c) by_recency_.emplace_back(shape);
  }

  // The events (on_insert, on_hit, on_bypass, on_prefetch, on_evict, on_layer_begin,
  // on_layer_end) are those of `detail::reuse_history`: O(log n + 1) for n residents of the
  // pool.

  /// Returns: the unshielded resident of pool `part` with the largest size · D (ties: least
  /// recently touched, then lower (layer, expert)), or nothing. Complexity: O(size classes).
  [[nodiscard]] std::optional<expert_key> victim(std::size_t part) const noexcept {
    std::optional<std::size_t> best;
    double best_cost = 0.0;
    const auto consider = [&](std::size_t f, double cost) {
      if (!best || cost > best_cost ||
          (cost == best_cost &&
           (last_touch_[f] < last_touch_[*best] || (last_touch_[f] == last_touch_[*best] && f < *best)))) {
        best = f;
        best_cost = cost;
      }
    };
    for (std::size_t c = 0; c < sizes_.size(); ++c) {
      if (const auto o = by_recency_[c].back(part)) {
        consider(*o, sizes_[c] * idle(*o, part));
      }
    }
    if (const auto h = by_cost_.top(part)) consider(*h, size_of(*h) * interval_[*h]);
    if (!best) return std::nullopt;
    return shape_.key(*best);
  }

  /// The predicted space-time cost size · D of keeping `k` to its next use, in bytes × accesses
  /// to its pool (weights of 1 without footprints).
  [[nodiscard]] double predicted_cost(expert_key k) const noexcept {
    const std::size_t f = shape_.flat(k);
    return size_of(f) * std::max(interval_[f], idle(f, shape_.partition_of(k)));
  }

 private:
  friend class detail::reuse_history<size_aware_reuse_policy>;

  static double checked_smoothing(double a) {
    if (!(a > 0.0 && a <= 1.0)) detail::throw_invalid("size_aware_reuse_policy", "smoothing must be in (0, 1]", a);
    return a;
  }
  [[nodiscard]] double size_of(std::size_t f) const noexcept { return sizes_[class_of_[f]]; }
  /// Largest size · I first; then least recent touch; then the lower dense index.
  [[nodiscard]] detail::heap_rank rank(std::size_t f) const noexcept {
    return {-size_of(f) * interval_[f], last_touch_[f]};
  }
  void rank_in(std::size_t f) noexcept {
    by_recency_[class_of_[f]].push_front(f);
    by_cost_.push(f, rank(f));
  }
  void rank_out(std::size_t f) noexcept {
    by_recency_[class_of_[f]].erase(f);
    by_cost_.erase(f);
  }
  void reorder(std::size_t f) noexcept {
    by_recency_[class_of_[f]].move_to_front(f);
    by_cost_.update(f, rank(f));
  }

  std::vector<double> sizes_;                         // the distinct footprints, one per class
  std::vector<std::uint8_t> class_of_;                // slot → size class
  detail::partitioned_heap by_cost_;                  // residents, largest size · I first
  std::vector<detail::partitioned_list> by_recency_;  // per size class, most recent first
};

static_assert(EvictionPolicy<size_aware_reuse_policy>);
static_assert(!policy_traits<size_aware_reuse_policy>::needs_future);
static_assert(policy_traits<size_aware_reuse_policy>::observes_bypass &&
              policy_traits<size_aware_reuse_policy>::observes_prefetch &&
              policy_traits<size_aware_reuse_policy>::observes_layers);

}  // namespace moepolicy
