// moepolicy/cache/detail/shielded_ranking.hpp — the bookkeeping of the score-ranked
// eviction policies (cache/score_aware.hpp, cache/ema_score.hpp): the unshielded residents
// of each pool in a heap ranked by (score, last use), and the in-layer protection shield of
// Edge-MoE §5.3 — experts selected for the layer being computed leave the heap from the
// layer's begin until its end. The policy keeps its scores and passes a rank function
// `rank(slot) -> heap_rank` to the calls that (re)rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/detail/layer_shield.hpp"
#include "moepolicy/cache/detail/orderings.hpp"
#include "moepolicy/core/ids.hpp"

namespace moepolicy::detail {

/// Residents by (score, last use) per pool, with the in-layer shield.
class shielded_ranking {
 public:
  explicit shielded_ranking(const cache_shape& shape)
      : shape_(shape),
        heap_(shape),
        resident_(shape.slots(), 0),
        last_use_(shape.slots(), 0),
        shield_(shape) {}

  /// A resident's last insert or hit, in events (the tie-break after the score).
  [[nodiscard]] std::uint64_t last_use(std::size_t f) const noexcept { return last_use_[f]; }
  [[nodiscard]] bool shielded(std::size_t f) const noexcept { return shield_.shielded(f); }
  [[nodiscard]] bool ranked(std::size_t f) const noexcept { return heap_.contains(f); }

  /// Complexity of the events: O(log n) for n residents of the pool.
  template <class Rank>
  void insert(std::size_t f, Rank&& rank) noexcept {
    resident_[f] = 1;
    last_use_[f] = ++clock_;
    if (!shield_.shielded(f)) heap_.push(f, rank(f));
  }
  template <class Rank>
  void hit(std::size_t f, Rank&& rank) noexcept {
    last_use_[f] = ++clock_;
    if (heap_.contains(f)) heap_.update(f, rank(f));
  }
  void evict(std::size_t f) noexcept {
    resident_[f] = 0;
    if (heap_.contains(f)) heap_.erase(f);
  }

  /// Shields the `selected` experts of the layer whose slots start at `base`, then re-ranks
  /// every ranked expert of that layer (`experts` of them), whose scores the batch moved.
  /// Complexity: O((selected + experts) · log n).
  template <class Rank>
  void begin_layer(std::size_t base, std::size_t experts, std::span<const expert_id> selected, Rank&& rank) noexcept {
    shield_.shield(base, selected, [&](std::size_t f) {
      if (heap_.contains(f)) heap_.erase(f);
    });
    for (std::size_t f = base; f < base + experts; ++f) {
      if (heap_.contains(f)) heap_.update(f, rank(f));
    }
  }

  /// Revokes the shields of layer `l`'s experts. Complexity: O(shielded · log n).
  template <class Rank>
  void end_layer(layer_id l, Rank&& rank) noexcept {
    shield_.release(l, [&](std::size_t f) {
      if (resident_[f] != 0) heap_.push(f, rank(f));
    });
  }

  /// Re-ranks every ranked resident (all scores moved at once). Complexity: O(slots).
  template <class Rank>
  void rerank_all(Rank&& rank) noexcept {
    for (std::size_t f = 0; f < shape_.slots(); ++f) {
      if (heap_.contains(f)) heap_.set_rank_unordered(f, rank(f));
    }
    heap_.rebuild();
  }

  /// The lowest-ranked unshielded resident of pool `part`, or nothing.
  [[nodiscard]] std::optional<std::size_t> top(std::size_t part) const noexcept { return heap_.top(part); }

 private:
  cache_shape shape_;
  partitioned_heap heap_;
  std::vector<std::uint8_t> resident_;
  std::vector<std::uint64_t> last_use_;
  layer_shield shield_;
  std::uint64_t clock_ = 0;
};

}  // namespace moepolicy::detail
