// moepolicy/cache/detail/shielded_ranking.hpp — the bookkeeping of the score-ranked
// eviction policies (cache/score_aware.hpp, cache/ema_score.hpp): the unshielded residents
// of each pool in a heap ranked by (score, last use), and the in-layer protection shield of
// Edge-MoE §5.3 — experts selected for the layer being computed leave the heap from the
// layer's begin until its end. The policy keeps its scores and passes a rank function
// `rank(slot) -> heap_rank` to the calls that (re)rank; it may also offer
// `rank.layer(l)`, a rank function giving the same ranks to the members of one layer
// with what they share computed once, which `top` uses when it ranks a whole layer.
#pragma once

#include <algorithm>
#include <bit>
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
/// The residents are kept in a heap per layer, whatever the pools: a rank moves only by an
/// event on its slot, a batch of its layer, or the window moving (every rank at once). A
/// pool per layer is its layer's heap; a pool shared by the layers is a tournament tree
/// over the layers' lowest members, so that a batch of one layer touches only that
/// layer's members and O(log L) nodes of the tree.
///
/// A layer whose every rank moved at once (its batch, or the window moving) is marked
/// stale instead of re-ranked: until it is next asked for its lowest member, events on it
/// only add and remove members, and the experts its batch shields stay members, passed
/// over by the scans (they leave when the heap is restored, and the end of the layer adds
/// only those that left). Each of its next `max_scans` refreshes ranks every member afresh
/// and finds the lowest by a scan, storing no rank (a layer is asked about once per batch);
/// the refresh after them ranks the members, stores the ranks and restores the heap in
/// O(n), and events return to O(log n). So a layer costs O(n) per batch instead of
/// O(E log n), and nothing until it is asked.
///
/// In a shared pool a layer's lowest member is cached in the tree's leaf; every event that
/// may change it (an insert, a hit or an eviction of one of its members, a shield, a batch,
/// the window moving) marks the layer dirty, and `top` refreshes the dirty leaves and
/// their paths to the root before reading the root.
///
/// The policies tell the ranking of every change of a rank (the events and the calls
/// here), so the members of a stale layer ranked at `top` hold exactly the ranks the eager
/// updates would have given them, and the order is a strict total order (rank, then
/// slot), so the lowest of the layers' lowest is the lowest of the pool: the victim is the
/// same as with eager updates of one heap per pool (cache/detail/score_aware_reference.hpp
/// keeps the eager ranking).
class shielded_ranking {
 public:
  explicit shielded_ranking(const cache_shape& shape)
      : shape_(shape),
        heap_(cache_shape{shape.num_layers, shape.num_experts, capacity_scope::per_layer}),
        resident_(shape.slots(), 0),
        last_use_(shape.slots(), 0),
        shield_(shape),
        stale_(shape.num_layers, 0),
        scans_(shape.num_layers, 0),
        leaves_(std::bit_ceil(static_cast<std::size_t>(shape.num_layers))),
        tree_(shared() ? 2 * leaves_ : 0, no_slot),
        lowest_(shared() ? shape.num_layers : 0, no_slot),
        lowest_rank_(shared() ? shape.num_layers : 0),
        dirty_(shared() ? shape.num_layers : 0, 0),
        dirty_list_(shared() ? shape.num_layers : 0, 0) {}

  /// A resident's last insert or hit, in events (the tie-break after the score).
  [[nodiscard]] std::uint64_t last_use(std::size_t f) const noexcept { return last_use_[f]; }
  [[nodiscard]] bool shielded(std::size_t f) const noexcept { return shield_.shielded(f); }
  [[nodiscard]] bool ranked(std::size_t f) const noexcept { return heap_.contains(f) && !shield_.shielded(f); }

  /// Complexity of the events: O(log n) for n residents of the layer (O(1) while it is
  /// stale), plus O(log L) at the next `top` of a shared pool.
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
    const std::size_t l = layer_of_.divide(f);
    if (stale_[l] == 0) heap_.update(f, rank(f));  // a stale layer: ranked at `top`
    touch(l);
  }
  void evict(std::size_t f) noexcept {
    resident_[f] = 0;
    if (heap_.contains(f)) remove(f);
  }

  /// Shields the `selected` experts of the layer whose slots start at `base`, whose every
  /// score the batch moved (`experts` of them, the layer's all): marks the layer stale.
  /// Complexity: O(selected).
  template <class Rank>
  void begin_layer(std::size_t base, [[maybe_unused]] std::size_t experts, std::span<const expert_id> selected,
                   Rank&&) noexcept {
    MOEPOLICY_ASSERT(experts == shape_.num_experts);
    const std::size_t l = layer_of_.divide(base);
    // The layer goes stale: its shielded members stay in its heap, and its scans pass over
    // them (they leave it if `top` restores the heap before their layer ends).
    stale_[l] = 1;
    scans_[l] = 0;
    touch_held(l);
    shield_.shield(base, selected, [](std::size_t) {});
  }

  /// Revokes the shields of layer `l`'s experts. Complexity: O(shielded · log n).
  template <class Rank>
  void end_layer(layer_id l, Rank&& rank) noexcept {
    shield_.release(l, [&](std::size_t f) {
      if (resident_[f] != 0 && !heap_.contains(f)) add(f, rank);
    });
    touch_held(l);  // the shielded members a stale layer kept count again
  }

  /// Re-ranks every ranked resident (all scores moved at once): marks every layer stale.
  /// Complexity: O(layers); the ranking is paid at each layer's next refresh.
  template <class Rank>
  void rerank_all(Rank&&) noexcept {
    std::fill(stale_.begin(), stale_.end(), std::uint8_t{1});
    std::fill(scans_.begin(), scans_.end(), std::uint8_t{0});
    for (std::size_t l = 0; l < stale_.size(); ++l) touch_held(l);
  }

  /// The lowest-ranked unshielded resident of pool `part`, or nothing. Ranks stale layers
  /// first (logically const: the answer is that of the eager ranking).
  /// Complexity: O(1) for a layer's pool, O(n) for the first `max_scans` + 1 calls after
  /// it went stale; in a shared pool O(log L) per layer touched since the last call, and
  /// O(n) per stale layer touched.
  template <class Rank>
  [[nodiscard]] std::optional<std::size_t> top(std::size_t part, Rank&& rank) const noexcept {
    if (!shared()) {
      heap_rank low;
      const std::uint32_t f = layer_top(part, rank, low);
      if (f == no_slot) return std::nullopt;
      return f;
    }
    MOEPOLICY_ASSERT(part == 0);
    // Few dirty layers: their paths to the root; more (a step end): the whole tree, once.
    const bool paths = dirty_count_ * static_cast<std::size_t>(std::bit_width(leaves_)) < leaves_;
    for (std::size_t i = 0; i < dirty_count_; ++i) {
      const std::uint32_t l = dirty_list_[i];
      dirty_[l] = 0;
      lowest_[l] = layer_top(l, rank, lowest_rank_[l]);
      if (lowest_[l] != no_slot) lowest_rank_[l] = for_leaf(rank, l, lowest_[l], lowest_rank_[l]);
      std::size_t n = leaves_ + l;
      tree_[n] = lowest_[l] == no_slot ? no_slot : l;
      if (paths) {
        for (n /= 2; n >= 1; n /= 2) {
          const std::uint32_t w = better(tree_[2 * n], tree_[2 * n + 1]);
          // A node that another layer still wins, as before: nothing above it changes.
          if (w == tree_[n] && w != l) break;
          tree_[n] = w;
        }
      }
    }
    if (!paths) {
      for (std::size_t n = leaves_; --n >= 1;) tree_[n] = better(tree_[2 * n], tree_[2 * n + 1]);
    }
    dirty_count_ = 0;
    const std::uint32_t best = tree_[1];
    if (best == no_slot) return std::nullopt;
    return lowest_[best];
  }

 private:
  /// Scans of a stale layer before `top` restores its heap: a scan costs about as much as
  /// the restoration, and a layer is asked for its lowest about once per batch.
  static constexpr std::uint8_t max_scans = 3;
  /// Whether one pool holds several layers (a tree over their heaps).
  [[nodiscard]] bool shared() const noexcept { return shape_.scope != capacity_scope::per_layer; }
  /// Marks layer `l`'s lowest member to refresh at the next `top` of a shared pool.
  void touch(std::size_t l) noexcept {
    if (!shared() || dirty_[l] != 0) return;
    dirty_[l] = 1;
    dirty_list_[dirty_count_++] = static_cast<std::uint32_t>(l);
  }
  /// `touch` of a layer whose ranks all moved, where it has members: a layer without any
  /// has had none since its last refresh (every change of its members touches it), so its
  /// leaf is empty already and stays so.
  void touch_held(std::size_t l) noexcept {
    if (heap_.size(l) != 0) touch(l);
  }
  /// Of the leaves' layers `a` and `b` (or `no_slot`), the one whose lowest member comes
  /// first: rank, then slot.
  [[nodiscard]] std::uint32_t better(std::uint32_t a, std::uint32_t b) const noexcept {
    if (a == no_slot) return b;
    if (b == no_slot) return a;
    const heap_rank& x = lowest_rank_[a];
    const heap_rank& y = lowest_rank_[b];
    if (x.primary != y.primary) return x.primary < y.primary ? a : b;
    if (x.secondary != y.secondary) return x.secondary < y.secondary ? a : b;
    return lowest_[a] < lowest_[b] ? a : b;
  }
  /// `rank.layer(l)` where the rank function has it: the same ranks for the members of
  /// layer `l`, with what they share computed once.
  template <class Rank>
  [[nodiscard]] static decltype(auto) for_layer(Rank& rank, std::size_t l) noexcept {
    if constexpr (requires { rank.layer(l); }) {
      return rank.layer(l);
    } else {
      return (rank);
    }
  }
  /// `rank.leaf(l, f, r)` where the rank function has it: the rank among other layers' of
  /// `f`, layer `l`'s lowest member of rank `r` within its layer (a policy may rank within
  /// a layer by a key that orders the layer's members as the rank does, but not members of
  /// different layers).
  template <class Rank>
  [[nodiscard]] static heap_rank for_leaf(Rank& rank, std::size_t l, std::size_t f, const heap_rank& r) noexcept {
    if constexpr (requires { rank.leaf(l, f, r); }) {
      return rank.leaf(l, f, r);
    } else {
      return r;
    }
  }
  /// The lowest-ranked unshielded member of layer `l` (its rank in `low`), or `no_slot`.
  /// Ranks a stale layer first.
  template <class Rank>
  [[nodiscard]] std::uint32_t layer_top(std::size_t l, Rank& rank, heap_rank& low) const noexcept {
    if (stale_[l] != 0) {
      auto&& layer_rank = for_layer(rank, l);
      if (scans_[l] == max_scans) {
        // Shielded members leave; the others are ranked and the heap restored.
        for (std::size_t i = 0; i < heap_.size(l);) {
          const std::uint32_t f = heap_.members(l)[i];
          if (shield_.shielded(f)) {
            heap_.erase_unordered(f);  // the last member takes its place
          } else {
            ++i;
          }
        }
        for (const std::uint32_t f : heap_.members(l)) heap_.set_rank_unordered(f, layer_rank(f));
        heap_.rebuild(l);
        stale_[l] = 0;
      } else {
        ++scans_[l];
        // Ranks every unshielded member and scans for the lowest in one pass.
        const auto members = heap_.members(l);
        std::size_t i = 0;
        while (i < members.size() && shield_.shielded(members[i])) ++i;
        if (i == members.size()) return no_slot;
        std::uint32_t best = members[i];
        low = layer_rank(best);
        for (const std::uint32_t f : members.subspan(i + 1)) {
          if (shield_.shielded(f)) continue;
          const heap_rank r = layer_rank(f);
          if (r.primary < low.primary || (r.primary == low.primary && (r.secondary < low.secondary ||
                                                                       (r.secondary == low.secondary && f < best)))) {
            best = f;
            low = r;
          }
        }
        return best;
      }
    }
    const auto t = heap_.top(l);
    if (!t) return no_slot;
    low = heap_.rank(*t);
    return static_cast<std::uint32_t>(*t);
  }
  template <class Rank>
  void add(std::size_t f, Rank& rank) noexcept {
    const std::size_t l = layer_of_.divide(f);
    if (stale_[l] == 0) {
      heap_.push(f, rank(f));
    } else {
      heap_.push_unordered(f);
    }
    touch(l);
  }
  void remove(std::size_t f) noexcept {
    const std::size_t l = layer_of_.divide(f);
    if (stale_[l] == 0) {
      heap_.erase(f);
    } else {
      heap_.erase_unordered(f);
    }
    touch(l);
  }

  cache_shape shape_;
  slot_divider layer_of_{shape_.num_experts};  // slot → layer
  mutable partitioned_heap heap_;              // per layer; ranked lazily by `top` (logically const)
  std::vector<std::uint8_t> resident_;
  std::vector<std::uint64_t> last_use_;
  layer_shield shield_;
  mutable std::vector<std::uint8_t> stale_;  // per layer: whether the ranks of its members are to refresh
  mutable std::vector<std::uint8_t> scans_;  // per layer: scans since it went stale
  // A shared pool's tree: leaf `leaves_ + l` holds layer l when it has an unshielded
  // member; each node the better of its children's layers (`no_slot`: none).
  std::size_t leaves_;
  mutable std::vector<std::uint32_t> tree_;
  mutable std::vector<std::uint32_t> lowest_;      // per layer: its lowest member, as of its last refresh
  mutable std::vector<heap_rank> lowest_rank_;     // per layer: that member's rank
  mutable std::vector<std::uint8_t> dirty_;        // per layer: whether `lowest_` is to refresh
  mutable std::vector<std::uint32_t> dirty_list_;  // the dirty layers
  mutable std::size_t dirty_count_ = 0;
  std::uint64_t clock_ = 0;
};

}  // namespace moepolicy::detail
