// moepolicy/cache/detail/shielded_ranking.hpp — the bookkeeping of the score-ranked
// eviction policies (cache/score_aware.hpp, cache/ema_score.hpp): the unshielded residents
// of each pool in a heap ranked by (score, last use), and the in-layer protection shield of
// Edge-MoE §5.3 — experts selected for the layer being computed leave the heap from the
// layer's begin until its end. The policy keeps its scores and passes a rank function
// `rank(slot) -> heap_rank` to the calls that (re)rank; it may also offer
// `rank.pool(part)`, a rank function giving the same ranks to the members of one pool
// with what they share computed once, which `top` uses when it ranks a whole pool.
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
/// `top`, events on it only add and remove members, and the experts its layer's batch
/// shields stay members, passed over by the scans (they leave when `top` restores the
/// heap, and the end of the layer adds only those that left). Each of its next `max_scans` calls of
/// `top` ranks every member afresh and finds the lowest by a scan, storing no rank (a
/// pool is asked for about one victim per batch of its layer); the call after them ranks
/// the members, stores the ranks and restores the heap in O(n), and events return to
/// O(log n). So a pool costs O(n) per batch of its layer instead of O(E log n), and
/// nothing until it is asked for a victim.
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
        stale_(shape.partitions(), 0),
        scans_(shape.partitions(), 0) {}

  /// A resident's last insert or hit, in events (the tie-break after the score).
  [[nodiscard]] std::uint64_t last_use(std::size_t f) const noexcept { return last_use_[f]; }
  [[nodiscard]] bool shielded(std::size_t f) const noexcept { return shield_.shielded(f); }
  [[nodiscard]] bool ranked(std::size_t f) const noexcept { return heap_.contains(f) && !shield_.shielded(f); }

  /// Complexity of the events: O(log n) for n residents of the pool; O(1) while it is
  /// stale.
  template <class Rank>
  void insert(std::size_t f, Rank&& rank) noexcept {
    resident_[f] = 1;
    last_use_[f] = ++clock_;
    if (!shield_.shielded(f)) add(f, rank);
  }
  template <class Rank>
  void hit(std::size_t f, Rank&& rank) noexcept {
    last_use_[f] = ++clock_;
    if (heap_.contains(f) && stale_[pool(f)] == 0) heap_.update(f, rank(f));  // a stale pool: ranked at `top`
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
    if (whole_pool) {
      // The pool goes stale: its shielded members stay in it, and its scans pass over them
      // (they leave it if `top` restores the heap before their layer ends).
      mark_stale(pool(base));
      shield_.shield(base, selected, [](std::size_t) {});
      return;
    }
    shield_.shield(base, selected, [&](std::size_t f) {
      if (heap_.contains(f)) remove(f);
    });
    for (std::size_t f = base; f < base + experts; ++f) {
      if (heap_.contains(f) && stale_[pool(f)] == 0) heap_.update(f, rank(f));
    }
  }

  /// Revokes the shields of layer `l`'s experts. Complexity: O(shielded · log n).
  template <class Rank>
  void end_layer(layer_id l, Rank&& rank) noexcept {
    shield_.release(l, [&](std::size_t f) {
      if (resident_[f] != 0 && !heap_.contains(f)) add(f, rank);
    });
  }

  /// Re-ranks every ranked resident (all scores moved at once): marks every pool stale.
  /// Complexity: O(pools); the ranking is paid at each pool's next `top`.
  template <class Rank>
  void rerank_all(Rank&&) noexcept {
    std::fill(stale_.begin(), stale_.end(), std::uint8_t{1});
    std::fill(scans_.begin(), scans_.end(), std::uint8_t{0});
  }

  /// The lowest-ranked unshielded resident of pool `part`, or nothing. Ranks a stale pool
  /// first (logically const: the answer is that of the eager ranking).
  /// Complexity: O(1); O(n) for the first `max_scans` + 1 calls after the pool went stale.
  template <class Rank>
  [[nodiscard]] std::optional<std::size_t> top(std::size_t part, Rank&& rank) const noexcept {
    if (stale_[part] != 0) {
      auto&& pool_rank = for_pool(rank, part);
      if (scans_[part] == max_scans) {
        // Shielded members leave; the others are ranked and the heap restored.
        for (std::size_t i = 0; i < heap_.size(part);) {
          const std::uint32_t f = heap_.members(part)[i];
          if (shield_.shielded(f)) {
            heap_.erase_unordered(f);  // the last member takes its place
          } else {
            ++i;
          }
        }
        for (const std::uint32_t f : heap_.members(part)) heap_.set_rank_unordered(f, pool_rank(f));
        heap_.rebuild(part);
        stale_[part] = 0;
        return heap_.top(part);
      }
      ++scans_[part];
      // Ranks every unshielded member and scans for the lowest in one pass.
      const auto members = heap_.members(part);
      std::size_t i = 0;
      while (i < members.size() && shield_.shielded(members[i])) ++i;
      if (i == members.size()) return std::nullopt;
      std::size_t best = members[i];
      heap_rank low = pool_rank(best);
      for (const std::uint32_t f : members.subspan(i + 1)) {
        if (shield_.shielded(f)) continue;
        const heap_rank r = pool_rank(f);
        if (r.primary < low.primary ||
            (r.primary == low.primary && (r.secondary < low.secondary || (r.secondary == low.secondary && f < best)))) {
          best = f;
          low = r;
        }
      }
      return best;
    }
    return heap_.top(part);
  }

 private:
  /// Scans of a stale pool before `top` restores its heap: a scan costs about as much as
  /// the restoration, and a pool is asked for a victim about once per batch of its layer.
  static constexpr std::uint8_t max_scans = 3;
  void mark_stale(std::size_t part) noexcept {
    stale_[part] = 1;
    scans_[part] = 0;
  }
  /// `rank.pool(part)` where the rank function has it: the same ranks for the members of
  /// pool `part`, with what they share computed once.
  template <class Rank>
  [[nodiscard]] static decltype(auto) for_pool(Rank& rank, std::size_t part) noexcept {
    if constexpr (requires { rank.pool(part); }) {
      return rank.pool(part);
    } else {
      return (rank);
    }
  }
  [[nodiscard]] std::size_t pool(std::size_t f) const noexcept {
    return shape_.scope == capacity_scope::per_layer ? layer_of_.divide(f) : 0;
  }
  template <class Rank>
  void add(std::size_t f, Rank& rank) noexcept {
    if (stale_[pool(f)] == 0) {
      heap_.push(f, rank(f));
    } else {
      heap_.push_unordered(f);
    }
  }
  void remove(std::size_t f) noexcept {
    if (stale_[pool(f)] == 0) {
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
  mutable std::vector<std::uint8_t> stale_;  // per pool: whether the ranks of its members are to refresh
  mutable std::vector<std::uint8_t> scans_;  // per pool: scans since it went stale
  std::uint64_t clock_ = 0;
};

}  // namespace moepolicy::detail
