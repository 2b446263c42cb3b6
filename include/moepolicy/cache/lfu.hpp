// moepolicy/cache/lfu.hpp — least-frequently-used eviction, optionally decayed. Models
// `EvictionPolicy`.
//
// Every demand access to an expert adds 1 to its count — hits, cached misses and misses
// that were not cached alike, and the count survives eviction ("perfect" LFU: an expert's
// popularity is a property of the workload, not of its stay in the cache). With
// `decay < 1` every count is multiplied by `decay` at the end of each forward pass, so a
// count is Σ decay^(age in steps) over past accesses (an exponentially decayed frequency).
// The victim is the resident with the lowest count; ties go to the least recently used,
// then to the lower (layer, expert).
//
// Decay is applied lazily: accesses add `scale = decay^-steps` instead of 1, which orders
// residents identically; when `scale` grows past 1e100 every count is divided by it and
// the heaps are rebuilt (O(slots), once every ~230/|log10 decay| steps).
//
// The heap is also updated lazily. A hit only records the resident's new rank (count,
// time of use); the heap keeps the rank it had when it was last sifted, which is never
// above the recorded one, since a hit only raises both parts. Ranks are compared as the
// total order (count, time, slot), so when the heap's top holds its recorded rank it is
// below every member's stored rank and hence below every member's recorded rank: it is
// the exact victim. `victim` therefore re-sifts stale tops to their recorded ranks until
// the top is current — the same victims, with the same tie-breaks, as sifting on every
// hit, at O(1) per hit instead of O(log n).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/detail/orderings.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"

namespace moepolicy {

/// Configuration of `lfu_policy`.
struct lfu_config {
  /// Factor applied to every count at each step end, in (0, 1]; 1 means no decay.
  double decay = 1.0;
};

/// Least-frequently-used eviction over (optionally decayed) access counts.
class lfu_policy {
 public:
  using config_type = lfu_config;

  /// Throws: `invalid_argument` when `cfg.decay` is not in (0, 1].
  explicit lfu_policy(const cache_shape& shape, const lfu_config& cfg = {})
      : shape_(shape),
        growth_(1.0 / checked_decay(cfg.decay)),
        heap_(shape),
        counts_(shape.slots(), 0.0),
        rank_(shape.slots()) {}

  /// Complexity: `on_hit` O(1); `on_insert`, `on_evict` O(log n) for n residents of the
  /// pool; `victim` O((s + 1) log n) for the s residents hit since they were last sifted
  /// (each hit is sifted at most once, so amortised O(log n) per hit, and only for the
  /// residents that reach the top).
  void on_insert(expert_key k, const access_info&) noexcept {
    const std::size_t f = count(k);
    rank_[f] = {counts_[f], clock_};
    heap_.push(f, rank_[f]);
  }
  void on_hit(expert_key k, const access_info&) noexcept {
    const std::size_t f = count(k);
    rank_[f] = {counts_[f], clock_};
  }
  void on_bypass(expert_key k, const access_info&) noexcept { static_cast<void>(count(k)); }
  void on_evict(expert_key k) noexcept { heap_.erase(shape_.flat(k)); }
  /// Ages every count by `decay`. Complexity: O(1), O(slots) when rescaling.
  void on_step_end() noexcept {
    if (growth_ == 1.0) return;
    scale_ *= growth_;
    if (scale_ > 1e100) {
      for (std::size_t f = 0; f < counts_.size(); ++f) {
        counts_[f] /= scale_;
        if (heap_.contains(f)) {
          rank_[f] = {counts_[f], rank_[f].secondary};
          heap_.set_rank_unordered(f, rank_[f]);
        }
      }
      scale_ = 1.0;
      heap_.rebuild();
    }
  }

  /// Returns: the resident of pool `part` with the lowest count (ties: least recently
  /// used), or nothing when the pool is empty. Sifts the pool's stale tops first, so
  /// concurrent calls on one policy need a lock (as its events do).
  [[nodiscard]] std::optional<expert_key> victim(std::size_t part) const noexcept {
    for (;;) {
      const auto f = heap_.top(part);
      if (!f) return std::nullopt;
      const heap_rank& stored = heap_.rank(*f);
      const heap_rank& current = rank_[*f];
      if (stored.primary == current.primary && stored.secondary == current.secondary) return shape_.key(*f);
      heap_.update(*f, current);
    }
  }

  /// The decayed access count of `k` now (in accesses).
  [[nodiscard]] double frequency(expert_key k) const noexcept { return counts_[shape_.flat(k)] / scale_; }

 private:
  static double checked_decay(double d) {
    if (!(d > 0.0 && d <= 1.0)) detail::throw_invalid("lfu_policy", "decay must be in (0, 1]", d);
    return d;
  }
  std::size_t count(expert_key k) noexcept {
    const std::size_t f = shape_.flat(k);
    counts_[f] += scale_;
    ++clock_;
    return f;
  }

  cache_shape shape_;
  double growth_;
  double scale_ = 1.0;
  std::uint64_t clock_ = 0;
  using heap_rank = detail::heap_rank;
  // Ordered by the rank each resident had when last sifted (`victim` catches up).
  mutable detail::partitioned_heap heap_;
  std::vector<double> counts_;
  std::vector<heap_rank> rank_;  // per slot: the rank of its last insert or hit
};

static_assert(EvictionPolicy<lfu_policy>);
static_assert(policy_traits<lfu_policy>::observes_bypass && policy_traits<lfu_policy>::observes_steps);

}  // namespace moepolicy
