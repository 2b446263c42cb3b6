// SPDX-License-Identifier: Apache-2.0
// moepolicy/cache/predicted_reuse.hpp — eviction by predicted time to next use: Belady's
// rule with the future replaced by an estimate learned from the past. Models
// `EvictionPolicy`; observes layers, bypassed misses and prefetches of residents; has
// admission (off by default).
//
// Belady's MIN evicts the resident whose next access lies farthest ahead. This policy
// predicts that distance per expert from its own history, as the reuse-distance policies
// of storage caches do (LIRS: Jiang & Zhang, SIGMETRICS 2002, ranks blocks by
// max(recency, last inter-reference distance)):
//   - time: every demand access to the pool is one step of the pool's clock (prefetches
//     do not count);
//   - I(x), the expected interval between demand accesses to x: an exponential moving
//     average, I ← (1 − a) · I + a · (t − t'), updated at every demand access t of x after
//     a first one at t' (cached or not; it survives eviction); 0 until x has been accessed
//     twice;
//   - the predicted distance from x's last use to its next one is
//       D(x) = max(I(x), now − last(x)):
//     an expert is expected back after its usual interval, and one already idle for longer
//     than that is expected no sooner than it has been idle (a long gap says the expert
//     left the working set — LIRS's rule with a smoothed interval);
//   - the victim is the resident with the largest D; since max over residents of
//     max(I, recency) = max(largest I, largest recency), it is either the resident with the
//     largest I (ties: least recent use, then lower (layer, expert)) or the least recently
//     used one, whichever has the larger D; on equal D the least recently used goes;
//   - recency counts demand uses and prefetches (a prefetch, inserting or of a resident,
//     announces a use, as in `lru_policy`);
//   - the experts selected for the layer in progress (`on_layer_begin`) are shielded until
//     `on_layer_end`: their next use is now, so Belady would keep them (Edge-MoE §5.3's
//     protection shield); a miss that finds only shielded residents is not cached;
//   - admission (`bypass`, off by default): a miss whose interval, this access folded in,
//     is no shorter than the victim's D is not cached (MIN with bypass, on predictions);
//     an expert accessed for the first time is always admitted.
// Only past accesses are read: `access_info::next_use` is ignored.
//
// Cost. Per slot 28 bytes, allocated at construction; events O(log n) for n residents of
// the pool (an indexed heap by I and a recency list); `victim` O(1).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/detail/orderings.hpp"
#include "moepolicy/cache/detail/reuse_history.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// Configuration of `predicted_reuse_policy`.
struct predicted_reuse_config {
  /// a: the weight of the newest interval in the moving average, in (0, 1]; 1 keeps only the
  /// last interval (LIRS's inter-reference recency). 0.1 (a memory of about ten reuses)
  /// scored best of {0.02, 0.05, 0.1, 0.2, 0.5, 1} on the bundled Granite trace, per-layer,
  /// at 12 to 24 experts per layer.
  double smoothing = 0.1;
  /// Do not cache a miss whose predicted reuse distance (its interval with this access
  /// folded in) is no shorter than the victim's: Belady's MIN with bypass, on predictions.
  bool bypass = false;
};

/// Evicts the resident whose predicted next use lies farthest ahead.
class predicted_reuse_policy : public detail::reuse_history<predicted_reuse_policy> {
 public:
  using config_type = predicted_reuse_config;

  /// Throws: `invalid_argument` naming `predicted_reuse_policy` when `smoothing` is not in
  /// (0, 1].
  explicit predicted_reuse_policy(const cache_shape& shape, const predicted_reuse_config& cfg = {})
      : reuse_history(shape, checked(cfg.smoothing)), bypass_(cfg.bypass), by_interval_(shape), by_recency_(shape) {}

  // The events (on_insert, on_hit, on_bypass, on_prefetch, on_evict, on_layer_begin,
  // on_layer_end) are those of `detail::reuse_history`: O(log n) for n residents of the pool.

  /// Returns: true unless `bypass` is set, admitting would evict, and `k` has a demand
  /// history whose interval with this access folded in is at least the victim's D.
  [[nodiscard]] bool admit(expert_key k, const access_info&, bool must_evict) const noexcept {
    if (!bypass_ || !must_evict) return true;
    const std::size_t f = shape_.flat(k);
    const std::size_t p = shape_.partition_of(k);
    if (last_demand_[f] == 0) return true;
    const auto v = victim(p);
    if (!v) return true;
    return interval_with_access(f, p) < predicted_distance(*v);
  }

  /// Returns: the resident of pool `part` with the largest predicted reuse distance D (see
  /// the header for ties), or nothing when the pool is empty. Complexity: O(1).
  [[nodiscard]] std::optional<expert_key> victim(std::size_t part) const noexcept {
    const auto oldest = by_recency_.back(part);
    if (!oldest) return std::nullopt;
    const auto longest = by_interval_.top(part);
    const std::size_t f = interval_[*longest] > idle(*oldest, part) ? *longest : *oldest;
    return shape_.key(f);
  }

  /// The predicted reuse distance D of `k` now, in accesses to its pool.
  [[nodiscard]] double predicted_distance(expert_key k) const noexcept {
    const std::size_t f = shape_.flat(k);
    const double d = idle(f, shape_.partition_of(k));
    return interval_[f] > d ? interval_[f] : d;
  }
  /// The moving average I of `k`'s demand intervals (0 before its second access).
  [[nodiscard]] double expected_interval(expert_key k) const noexcept { return interval_[shape_.flat(k)]; }

 private:
  friend class detail::reuse_history<predicted_reuse_policy>;

  static double checked(double a) {
    if (!(a > 0.0 && a <= 1.0)) detail::throw_invalid("predicted_reuse_policy", "smoothing must be in (0, 1]", a);
    return a;
  }
  /// Largest I first; then least recent use; then the lower dense index.
  [[nodiscard]] detail::heap_rank rank(std::size_t f) const noexcept { return {-interval_[f], last_touch_[f]}; }

  void rank_in(std::size_t f) noexcept {
    by_recency_.push_front(f);
    by_interval_.push(f, rank(f));
  }
  void rank_out(std::size_t f) noexcept {
    by_recency_.erase(f);
    by_interval_.erase(f);
  }
  void reorder(std::size_t f) noexcept {
    by_recency_.move_to_front(f);
    by_interval_.update(f, rank(f));
  }

  bool bypass_;
  detail::partitioned_heap by_interval_;  // residents, largest I first
  detail::partitioned_list by_recency_;   // residents, most recent first
};

static_assert(EvictionPolicy<predicted_reuse_policy>);
static_assert(!policy_traits<predicted_reuse_policy>::needs_future);
static_assert(policy_traits<predicted_reuse_policy>::observes_bypass &&
              policy_traits<predicted_reuse_policy>::observes_prefetch);

}  // namespace moepolicy
