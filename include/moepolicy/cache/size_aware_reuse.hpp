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
//   - Sizes: built by `expert_cache` (as the name table's `size-aware` always is), the
//     policy takes what each expert weighs against the cache's capacity
//     (`capacity_weights`): its bytes in a bytes-unit cache, 1 in an experts-unit cache
//     (every expert takes one slot, so the space-time rule is `predicted_reuse_policy`'s);
//     `footprints` in the configuration override them in an experts-unit cache and must
//     equal them in a bytes-unit one. Built without a cache it needs `footprints` (an
//     error names the missing sizes otherwise). At most `max_size_classes` distinct sizes.
// Only past accesses are read: `access_info::next_use` is ignored.
//
// Cost. Per slot 33 bytes plus 12 per size class, allocated at construction; events
// O(log n + 1) for n residents of the pool; `victim` O(size classes).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
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
  /// those of the cache that builds the policy (see the constructors).
  std::vector<bytes> footprints = {};
};

/// Evicts the resident whose predicted next use costs the most bytes × time.
class size_aware_reuse_policy : public detail::reuse_history<size_aware_reuse_policy> {
 public:
  using config_type = size_aware_reuse_config;
  /// The most distinct expert sizes (precisions) a policy accepts.
  static constexpr std::size_t max_size_classes = 16;

  /// Built without a cache: the sizes are `cfg.footprints`.
  ///
  /// Throws: `invalid_argument` naming `size_aware_reuse_policy` when `smoothing` is not in
  /// (0, 1], `footprints` is empty (no sizes: give them, or let `expert_cache` build the
  /// policy), does not hold one entry per expert, has an entry of 0, or has more than
  /// `max_size_classes` distinct sizes.
  explicit size_aware_reuse_policy(const cache_shape& shape, const size_aware_reuse_config& cfg = {})
      : reuse_history(shape, checked_smoothing(cfg.smoothing)), class_of_(shape.slots(), 0), by_cost_(shape) {
    if (cfg.footprints.empty()) {
      detail::throw_invalid(fn,
                            "no expert sizes: footprints is empty and no cache gave its capacity weights "
                            "(set footprints, or build the policy through expert_cache)",
                            cfg.footprints.size());
    }
    classify(checked_footprints(cfg.footprints));
  }

  /// Built by `expert_cache` (`policy_traits::takes_capacity_weights`): with `footprints`
  /// empty, the sizes are what each expert weighs against the cache's capacity — its bytes
  /// in a bytes-unit cache (`cache_config::footprints`, or `expert_bytes` for all), 1 in an
  /// experts-unit cache, where every expert takes one slot and the rule is
  /// `predicted_reuse_policy`'s; given `footprints` are used as they are in an experts-unit
  /// cache (a cost per expert other than its slot, e.g. bytes moved per miss), and must be
  /// the cache's own in a bytes-unit cache.
  ///
  /// Throws: as the constructor above (except for empty footprints), and `invalid_argument`
  /// naming `size_aware_reuse_policy`, the expert and the cache's bytes when given
  /// footprints differ from a bytes-unit cache's.
  size_aware_reuse_policy(const cache_shape& shape, const size_aware_reuse_config& cfg, const capacity_weights& w)
      : reuse_history(shape, checked_smoothing(cfg.smoothing)), class_of_(shape.slots(), 0), by_cost_(shape) {
    if (cfg.footprints.empty()) {
      classify(checked_footprints(w.weight));
      return;
    }
    const std::span<const bytes> given = checked_footprints(cfg.footprints);
    if (w.unit == capacity_unit::byte_count && w.weight.size() == given.size()) {
      for (std::size_t f = 0; f < given.size(); ++f) {
        if (given[f] != w.weight[f]) {
          detail::throw_invalid(fn,
                                "footprints differ from the bytes-unit cache's: expert " + std::to_string(f) +
                                    " weighs " + std::to_string(w.weight[f]) + " bytes in the cache",
                                given[f]);
        }
      }
    }
    classify(given);
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

  static constexpr const char* fn = "size_aware_reuse_policy";

  static double checked_smoothing(double a) {
    if (!(a > 0.0 && a <= 1.0)) detail::throw_invalid(fn, "smoothing must be in (0, 1]", a);
    return a;
  }
  /// `sizes` if it holds one entry > 0 per expert.
  [[nodiscard]] std::span<const bytes> checked_footprints(std::span<const bytes> sizes) const {
    if (sizes.size() != shape_.slots()) {
      detail::throw_invalid(
          fn,
          "footprints must be empty or hold num_layers x num_experts = " + std::to_string(shape_.slots()) + " entries",
          sizes.size());
    }
    for (std::size_t f = 0; f < sizes.size(); ++f) {
      if (sizes[f] == 0) detail::throw_invalid(fn, "a footprint must be > 0: expert " + std::to_string(f), sizes[f]);
    }
    return sizes;
  }
  /// One size class per distinct size (at most `max_size_classes`), and a recency list each.
  void classify(std::span<const bytes> sizes) {
    for (std::size_t f = 0; f < sizes.size(); ++f) {
      const auto b = static_cast<double>(sizes[f]);
      auto it = std::find(sizes_.begin(), sizes_.end(), b);
      if (it == sizes_.end()) {
        if (sizes_.size() == max_size_classes)
          detail::throw_invalid(fn, "at most 16 distinct footprints, a 17th", sizes[f]);
        sizes_.push_back(b);
        it = sizes_.end() - 1;
      }
      class_of_[f] = static_cast<std::uint8_t>(it - sizes_.begin());
    }
    for (std::size_t c = 0; c < sizes_.size(); ++c) by_recency_.emplace_back(shape_);
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
