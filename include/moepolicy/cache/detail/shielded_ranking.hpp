// moepolicy/cache/detail/shielded_ranking.hpp — the bookkeeping of the score-ranked
// eviction policies (cache/score_aware.hpp, cache/ema_score.hpp): the unshielded residents
// of each pool in a heap ranked by (score, last use), and the in-layer protection shield of
// Edge-MoE §5.3 — experts selected for the layer being computed leave the heap from the
// layer's begin until its end. The policy keeps its scores and passes a rank function
// `rank(slot) -> heap_rank` to the calls that (re)rank.
#pragma once

#include <algorithm>
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
///
/// A pool whose every rank moved at once (a batch of its layer when the pool is the
/// layer, or the window moving) is marked stale instead of re-ranked: until its next
/// `top`, events on it only add and remove members. The next `top` ranks every member
/// afresh and finds the lowest by a scan, keeping the ranks current but not the heap
/// order (events then cost O(1)); after `max_scans` scans before the pool goes stale
/// again, `top` restores the heap in O(n), and events return to O(log n). So a pool costs
/// O(n) per batch of its layer instead of O(E log n), and nothing until it is asked for a
/// victim.
/// The policies tell the ranking of every change of a rank (the events and the calls
/// here), so the members of a stale pool ranked at `top` hold exactly the ranks the eager
/// updates would have given them, and the order is a strict total order (rank, then
/// slot): the victim is the same as with eager updates
/// (cache/detail/score_aware_reference.hpp keeps the eager ranking).
class shielded_ranking {
 public:
  explicit shielded_ranking(const cache_shape& shape)
      : shape_(shape),
        heap_(shape),
        resident_(shape.slots(), 0),
        last_use_(shape.slots(), 0),
        shield_(shape),
        state_(shape.partitions(), ordered),
        scans_(shape.partitions(), 0) {}

  /// A resident's last insert or hit, in events (the tie-break after the score).
  [[nodiscard]] std::uint64_t last_use(std::size_t f) const noexcept { return last_use_[f]; }
  [[nodiscard]] bool shielded(std::size_t f) const noexcept { return shield_.shielded(f); }
  [[nodiscard]] bool ranked(std::size_t f) const noexcept { return heap_.contains(f); }

  /// Complexity of the events: O(log n) for n residents of the pool; O(1) while its heap
  /// order is not kept.
  template <class Rank>
  void insert(std::size_t f, Rank&& rank) noexcept {
    resident_[f] = 1;
    last_use_[f] = ++clock_;
    if (!shield_.shielded(f)) add(f, rank);
  }
  template <class Rank>
  void hit(std::size_t f, Rank&& rank) noexcept {
    last_use_[f] = ++clock_;
    if (!heap_.contains(f)) return;
    switch (state_[pool(f)]) {
      case ordered:
        heap_.update(f, rank(f));
        break;
      case scanned:
        heap_.set_rank_unordered(f, rank(f));
        break;
      default:
        break;  // stale: ranked at the next `top`
    }
  }
  void evict(std::size_t f) noexcept {
    resident_[f] = 0;
    if (heap_.contains(f)) remove(f);
  }

  /// Shields the `selected` experts of the layer whose slots start at `base`, then re-ranks
  /// every ranked expert of that layer (`experts` of them), whose scores the batch moved:
  /// when the pool is the layer, by marking it stale.
  /// Complexity: O(selected) when pools are per layer, else O((selected + experts) · log n).
  template <class Rank>
  void begin_layer(std::size_t base, std::size_t experts, std::span<const expert_id> selected, Rank&& rank) noexcept {
    const bool whole_pool = shape_.partition_slots() == experts;
    if (whole_pool) state_[pool(base)] = stale;
    shield_.shield(base, selected, [&](std::size_t f) {
      if (heap_.contains(f)) remove(f);
    });
    if (whole_pool) return;
    for (std::size_t f = base; f < base + experts; ++f) {
      if (!heap_.contains(f)) continue;
      if (state_[pool(f)] == ordered) {
        heap_.update(f, rank(f));
      } else if (state_[pool(f)] == scanned) {
        heap_.set_rank_unordered(f, rank(f));
      }
    }
  }

  /// Revokes the shields of layer `l`'s experts. Complexity: O(shielded · log n).
  template <class Rank>
  void end_layer(layer_id l, Rank&& rank) noexcept {
    shield_.release(l, [&](std::size_t f) {
      if (resident_[f] != 0) add(f, rank);
    });
  }

  /// Re-ranks every ranked resident (all scores moved at once): marks every pool stale.
  /// Complexity: O(pools); the ranking is paid at each pool's next `top`.
  template <class Rank>
  void rerank_all(Rank&&) noexcept {
    std::fill(state_.begin(), state_.end(), stale);
  }

  /// The lowest-ranked unshielded resident of pool `part`, or nothing. Ranks a stale pool
  /// first (logically const: the answer is that of the eager ranking).
  /// Complexity: O(1); O(n) for the first `max_scans` + 1 calls after the pool went stale.
  template <class Rank>
  [[nodiscard]] std::optional<std::size_t> top(std::size_t part, Rank&& rank) const noexcept {
    const auto members = heap_.members(part);
    if (state_[part] == stale) {
      // Ranks every member and scans for the lowest in one pass.
      state_[part] = scanned;
      scans_[part] = 1;
      if (members.empty()) return std::nullopt;
      std::size_t best = members[0];
      heap_rank low = rank(best);
      heap_.set_rank_unordered(best, low);
      for (const std::uint32_t f : members.subspan(1)) {
        const heap_rank r = rank(f);
        heap_.set_rank_unordered(f, r);
        if (r.primary < low.primary ||
            (r.primary == low.primary && (r.secondary < low.secondary || (r.secondary == low.secondary && f < best)))) {
          best = f;
          low = r;
        }
      }
      return best;
    }
    if (state_[part] == scanned) {
      if (scans_[part] < max_scans) {
        ++scans_[part];
        if (members.empty()) return std::nullopt;
        std::size_t best = members[0];
        for (const std::uint32_t f : members.subspan(1)) {
          if (heap_.before(f, best)) best = f;
        }
        return best;
      }
      heap_.rebuild(part);
      state_[part] = ordered;
    }
    return heap_.top(part);
  }

 private:
  /// Scans of a pool whose heap order is not kept before `top` restores it: a scan costs
  /// about as much as the restoration, and a pool is asked for a victim about once per
  /// batch of its layer.
  static constexpr std::uint8_t max_scans = 3;
  enum : std::uint8_t {
    ordered,  // heap order and ranks current
    scanned,  // ranks current, heap order not kept
    stale,    // ranks of members to refresh
  };
  [[nodiscard]] std::size_t pool(std::size_t f) const noexcept {
    return shape_.scope == capacity_scope::per_layer ? layer_of_.divide(f) : 0;
  }
  template <class Rank>
  void add(std::size_t f, Rank& rank) noexcept {
    switch (state_[pool(f)]) {
      case ordered:
        heap_.push(f, rank(f));
        break;
      case scanned:
        heap_.push_unordered(f);
        heap_.set_rank_unordered(f, rank(f));
        break;
      default:
        heap_.push_unordered(f);
        break;
    }
  }
  void remove(std::size_t f) noexcept {
    if (state_[pool(f)] == ordered) {
      heap_.erase(f);
    } else {
      heap_.erase_unordered(f);
    }
  }

  cache_shape shape_;
  slot_divider layer_of_{shape_.num_experts};  // slot → layer
  mutable partitioned_heap heap_;              // ranked lazily by `top` (logically const)
  std::vector<std::uint8_t> resident_;
  std::vector<std::uint64_t> last_use_;
  layer_shield shield_;
  mutable std::vector<std::uint8_t> state_;  // per pool: `ordered`, `scanned` or `stale`
  mutable std::vector<std::uint8_t> scans_;  // per pool: scans since it was last ranked
  std::uint64_t clock_ = 0;
};

}  // namespace moepolicy::detail
