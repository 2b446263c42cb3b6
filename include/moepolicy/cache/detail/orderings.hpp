// moepolicy/cache/detail/orderings.hpp — the ordered sets the eviction policies keep their
// residents in, one per capacity pool, preallocated for every slot of a `cache_shape` so
// that no event allocates:
//
//   partitioned_list  an intrusive doubly linked list per pool (LRU, FIFO): O(1) events;
//   partitioned_heap  an indexed binary min-heap per pool over a (primary, secondary) rank,
//                     ties broken by the lower dense index (LFU, Belady, sticky LRU,
//                     score-aware's membership): O(log n) events, O(1) top.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/core/error.hpp"

namespace moepolicy::detail {

inline constexpr std::uint32_t no_slot = std::numeric_limits<std::uint32_t>::max();

/// Exact division of a 32-bit dividend by a fixed divisor through a multiply (Lemire,
/// Kaser and Kurz, "Faster Remainder by Direct Computation", 2019: with
/// c = ⌊(2^64 − 1) / d⌋ + 1, ⌊n / d⌋ = ⌊c n / 2^64⌋ for every n < 2^32): the layer of a
/// dense slot without a division instruction on the per-access path.
class slot_divider {
 public:
  slot_divider() = default;
  explicit slot_divider(std::uint32_t d) noexcept : d_(d), c_(d <= 1 ? 0 : UINT64_MAX / d + 1) {}
  /// ⌊n / d⌋. Precondition: n < 2^32.
  [[nodiscard]] std::uint32_t divide(std::size_t n) const noexcept {
    MOEPOLICY_ASSERT(n <= UINT32_MAX);
    if (d_ <= 1) return static_cast<std::uint32_t>(n);
    // The high 64 bits of c · n, from 32-bit halves of c (no overflow: see above).
    const std::uint64_t hi = (c_ >> 32) * n + (((c_ & UINT32_MAX) * n) >> 32);
    return static_cast<std::uint32_t>(hi >> 32);
  }

 private:
  std::uint32_t d_ = 1;
  std::uint64_t c_ = 0;
};

/// One doubly linked list per pool; `push_front` makes a slot the most recent, `back` is
/// the oldest.
class partitioned_list {
 public:
  partitioned_list() = default;
  explicit partitioned_list(const cache_shape& s)
      : shape_(s),
        layer_of_(s.num_experts),
        prev_(s.slots(), no_slot),
        next_(s.slots(), no_slot),
        in_(s.slots(), 0),
        head_(s.partitions(), no_slot),
        tail_(s.partitions(), no_slot),
        size_(s.partitions(), 0) {}

  [[nodiscard]] bool contains(std::size_t f) const noexcept { return in_[f] != 0; }
  [[nodiscard]] std::size_t size(std::size_t part) const noexcept { return size_[part]; }

  void push_front(std::size_t f) noexcept {
    MOEPOLICY_ASSERT(!contains(f));
    const std::size_t p = part_of(f);
    const auto s = static_cast<std::uint32_t>(f);
    prev_[f] = no_slot;
    next_[f] = head_[p];
    if (head_[p] != no_slot) prev_[head_[p]] = s;
    head_[p] = s;
    if (tail_[p] == no_slot) tail_[p] = s;
    in_[f] = 1;
    ++size_[p];
  }
  void erase(std::size_t f) noexcept {
    MOEPOLICY_ASSERT(contains(f));
    const std::size_t p = part_of(f);
    if (prev_[f] != no_slot) next_[prev_[f]] = next_[f]; else head_[p] = next_[f];
    if (next_[f] != no_slot) prev_[next_[f]] = prev_[f]; else tail_[p] = prev_[f];
    prev_[f] = next_[f] = no_slot;
    in_[f] = 0;
    --size_[p];
  }
  void move_to_front(std::size_t f) noexcept {
    erase(f);
    push_front(f);
  }
  /// The oldest slot of pool `part`, or nothing when the pool is empty.
  [[nodiscard]] std::optional<std::size_t> back(std::size_t part) const noexcept {
    if (tail_[part] == no_slot) return std::nullopt;
    return tail_[part];
  }

 private:
  [[nodiscard]] std::size_t part_of(std::size_t f) const noexcept {
    return shape_.scope == capacity_scope::per_layer ? layer_of_.divide(f) : 0;
  }

  cache_shape shape_;
  slot_divider layer_of_;  // slot → layer (its pool when pools are per layer)
  std::vector<std::uint32_t> prev_, next_;
  std::vector<std::uint8_t> in_;
  std::vector<std::uint32_t> head_, tail_;
  std::vector<std::size_t> size_;
};

/// A policy's eviction rank: lower is evicted first; `primary` then `secondary` then the
/// dense index decide.
struct heap_rank {
  double primary = 0.0;
  std::uint64_t secondary = 0;
};

/// One binary min-heap per pool over the slots it holds, indexed by slot.
///
/// Each member's rank is kept beside it in heap order (`key_` parallel to `heap_`), so that a
/// sift compares ranks read from consecutive entries instead of looking each one up by slot.
class partitioned_heap {
 public:
  partitioned_heap() = default;
  explicit partitioned_heap(const cache_shape& s)
      : shape_(s),
        layer_of_(s.num_experts),
        heap_(s.slots(), no_slot),
        key_(s.slots()),
        pos_(s.slots(), no_slot),
        size_(s.partitions(), 0) {}

  [[nodiscard]] bool contains(std::size_t f) const noexcept { return pos_[f] != no_slot; }
  [[nodiscard]] std::size_t size(std::size_t part) const noexcept { return size_[part]; }
  /// The rank of member `f`. Precondition: `contains(f)`.
  [[nodiscard]] const heap_rank& rank(std::size_t f) const noexcept {
    MOEPOLICY_ASSERT(contains(f));
    return key_[base(part_of(f)) + pos_[f]];
  }

  /// The slots of pool `part`, in heap order.
  [[nodiscard]] std::span<const std::uint32_t> members(std::size_t part) const noexcept {
    return std::span<const std::uint32_t>(heap_).subspan(base(part), size_[part]);
  }

  void push(std::size_t f, heap_rank r) noexcept {
    MOEPOLICY_ASSERT(!contains(f));
    const std::size_t p = part_of(f);
    sift_up(base(p), size_[p]++, static_cast<std::uint32_t>(f), r);
  }
  void update(std::size_t f, heap_rank r) noexcept {
    MOEPOLICY_ASSERT(contains(f));
    const std::size_t p = part_of(f);
    const std::size_t b = base(p);
    const std::size_t i = pos_[f];
    // The rank moves one way: only that way can the order break.
    if (before(r, f, key_[b + i], f)) {
      sift_up(b, i, static_cast<std::uint32_t>(f), r);
    } else {
      sift_down(b, size_[p], i, static_cast<std::uint32_t>(f), r);
    }
  }
  void erase(std::size_t f) noexcept {
    MOEPOLICY_ASSERT(contains(f));
    const std::size_t p = part_of(f);
    const std::size_t b = base(p);
    const std::size_t i = pos_[f];
    const std::size_t last = --size_[p];
    pos_[f] = no_slot;
    if (i != last) {
      const std::uint32_t moved = heap_[b + last];
      const heap_rank r = key_[b + last];
      // The last member takes the hole at i: it moves up or down from there, not both.
      if (i > 0 && before(r, moved, key_[b + (i - 1) / 2], heap_[b + (i - 1) / 2])) {
        sift_up(b, i, moved, r);
      } else {
        sift_down(b, last, i, moved, r);
      }
    }
    heap_[b + last] = no_slot;
  }
  /// The lowest-ranked slot of pool `part`, or nothing when the pool is empty.
  [[nodiscard]] std::optional<std::size_t> top(std::size_t part) const noexcept {
    if (size_[part] == 0) return std::nullopt;
    return heap_[base(part)];
  }
  /// Sets the rank of member `f` without restoring the heap order (`rebuild` must follow
  /// before `top`, e.g. after a rescale). Precondition: `contains(f)`.
  void set_rank_unordered(std::size_t f, heap_rank r) noexcept {
    MOEPOLICY_ASSERT(contains(f));
    key_[base(part_of(f)) + pos_[f]] = r;
  }
  void rebuild() noexcept {
    for (std::size_t p = 0; p < size_.size(); ++p) rebuild(p);
  }
  /// Restores the heap order of pool `part` (Floyd's heap construction, O(n)).
  void rebuild(std::size_t part) noexcept {
    const std::size_t b = base(part);
    for (std::size_t i = size_[part] / 2; i-- > 0;) sift_down(b, size_[part], i, heap_[b + i], key_[b + i]);
  }
  /// Adds `f` without restoring the heap order or giving it a rank (`set_rank_unordered`
  /// and `rebuild` of its pool must follow before `top`). O(1).
  void push_unordered(std::size_t f) noexcept {
    MOEPOLICY_ASSERT(!contains(f));
    const std::size_t p = part_of(f);
    const std::size_t b = base(p);
    const std::size_t i = size_[p]++;
    heap_[b + i] = static_cast<std::uint32_t>(f);
    key_[b + i] = heap_rank{};
    pos_[f] = static_cast<std::uint32_t>(i);
  }
  /// Removes `f` without restoring the heap order (as `push_unordered`). O(1).
  void erase_unordered(std::size_t f) noexcept {
    MOEPOLICY_ASSERT(contains(f));
    const std::size_t p = part_of(f);
    const std::size_t b = base(p);
    const std::size_t i = pos_[f];
    const std::size_t last = --size_[p];
    pos_[f] = no_slot;
    if (i != last) place(b, i, heap_[b + last], key_[b + last]);
    heap_[b + last] = no_slot;
  }

  /// Whether member `a` is evicted before member `b`.
  [[nodiscard]] bool before(std::size_t a, std::size_t b) const noexcept { return before(rank(a), a, rank(b), b); }

 private:
  /// Whether rank `x` of slot `a` comes before rank `y` of slot `b`: `primary`, then
  /// `secondary`, then the slot.
  [[nodiscard]] static bool before(const heap_rank& x, std::size_t a, const heap_rank& y, std::size_t b) noexcept {
    if (x.primary != y.primary) return x.primary < y.primary;
    if (x.secondary != y.secondary) return x.secondary < y.secondary;
    return a < b;
  }
  [[nodiscard]] std::size_t part_of(std::size_t f) const noexcept {
    return shape_.scope == capacity_scope::per_layer ? layer_of_.divide(f) : 0;
  }
  [[nodiscard]] std::size_t base(std::size_t part) const noexcept { return part * shape_.partition_slots(); }
  void place(std::size_t b, std::size_t i, std::uint32_t f, const heap_rank& r) noexcept {
    heap_[b + i] = f;
    key_[b + i] = r;
    pos_[f] = static_cast<std::uint32_t>(i);
  }
  /// Moves `f` of rank `r` from position `i` (a hole) towards the root of the pool whose
  /// entries start at `b`.
  void sift_up(std::size_t b, std::size_t i, std::uint32_t f, heap_rank r) noexcept {
    while (i > 0) {
      const std::size_t parent = (i - 1) / 2;
      if (!before(r, f, key_[b + parent], heap_[b + parent])) break;
      place(b, i, heap_[b + parent], key_[b + parent]);
      i = parent;
    }
    place(b, i, f, r);
  }
  /// Moves `f` of rank `r` from position `i` (a hole) towards the leaves of the pool of `n`
  /// members whose entries start at `b`.
  void sift_down(std::size_t b, std::size_t n, std::size_t i, std::uint32_t f, heap_rank r) noexcept {
    for (;;) {
      std::size_t child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && before(key_[b + child + 1], heap_[b + child + 1], key_[b + child], heap_[b + child]))
        ++child;
      if (!before(key_[b + child], heap_[b + child], r, f)) break;
      place(b, i, heap_[b + child], key_[b + child]);
      i = child;
    }
    place(b, i, f, r);
  }

  cache_shape shape_;
  slot_divider layer_of_;            // slot → layer (its pool when pools are per layer)
  std::vector<std::uint32_t> heap_;  // per pool, its members in heap order
  std::vector<heap_rank> key_;       // the rank of each entry of `heap_`
  std::vector<std::uint32_t> pos_;   // slot → its position in its pool's heap, or `no_slot`
  std::vector<std::size_t> size_;
};

}  // namespace moepolicy::detail
