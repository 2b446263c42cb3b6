// moepolicy/cache/belady.hpp — Belady's offline optimum (MIN). Models `EvictionPolicy`;
// needs the future (`policy_traits<belady_policy>::needs_future`).
//
// The victim is the resident whose next access lies farthest in the future (never
// accessed again counts as infinitely far); ties go to the lower (layer, expert). With
// admission the incoming expert competes too: a miss whose own next access is no nearer
// than the victim's is not cached (MIN with bypass). For a demand cache of experts of
// equal size this is the fewest misses any policy can have at that capacity (Belady 1966;
// Mattson et al. 1970), including policies that decline to cache some misses — so it is
// the bound every online policy is compared with. Per-layer pools are independent, so the
// bound holds pool by pool. With a bytes-unit cache and unequal sizes it is the classic
// heuristic, not an optimum (that problem is NP-hard), and with prefetching a policy may
// beat it on demand hits (prefetches are not demand accesses).
//
// The caller feeds the future: `access_info::next_use` of every access is the position of
// the next access to the same expert in the access sequence, as `next_use_positions`
// computes it. Without it (`no_next_use`) an expert counts as never used again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/detail/orderings.hpp"
#include "moepolicy/core/ids.hpp"

namespace moepolicy {

namespace detail {

/// Belady's residents: one binary heap per pool of (next use, slot) entries held in the heap
/// itself, the farthest next use on top, ties to the lower slot — the order of
/// `partitioned_heap` with the rank {0, no_next_use − next use}, without its indirection
/// through a rank table and its comparison of doubles on every step of a sift.
class next_use_heap {
 public:
  explicit next_use_heap(const cache_shape& s)
      : shape_(s), layer_of_(s.num_experts), heap_(s.slots()), pos_(s.slots(), no_slot), size_(s.partitions(), 0) {}

  void push(std::size_t f, std::uint64_t next_use) noexcept {
    MOEPOLICY_ASSERT(pos_[f] == no_slot);
    const std::size_t p = part_of(f);
    sift_up(p, size_[p]++, {next_use, static_cast<std::uint32_t>(f)});
  }
  void update(std::size_t f, std::uint64_t next_use) noexcept {
    MOEPOLICY_ASSERT(pos_[f] != no_slot);
    const std::size_t p = part_of(f);
    const std::size_t i = pos_[f];
    const entry e{next_use, static_cast<std::uint32_t>(f)};
    if (i > 0 && before(e, heap_[base(p) + (i - 1) / 2])) {
      sift_up(p, i, e);
    } else {
      sift_down(p, i, e);
    }
  }
  void erase(std::size_t f) noexcept {
    MOEPOLICY_ASSERT(pos_[f] != no_slot);
    const std::size_t p = part_of(f);
    const std::size_t i = pos_[f];
    const std::size_t last = --size_[p];
    pos_[f] = no_slot;
    if (i == last) return;
    const entry moved = heap_[base(p) + last];
    if (i > 0 && before(moved, heap_[base(p) + (i - 1) / 2])) {
      sift_up(p, i, moved);
    } else {
      sift_down(p, i, moved);
    }
  }
  /// The resident of pool `part` needed farthest in the future, or nothing when it is empty.
  [[nodiscard]] std::optional<std::size_t> top(std::size_t part) const noexcept {
    if (size_[part] == 0) return std::nullopt;
    return heap_[base(part)].slot;
  }

 private:
  struct entry {
    std::uint64_t next_use = 0;
    std::uint32_t slot = 0;
  };

  [[nodiscard]] static bool before(const entry& a, const entry& b) noexcept {
    return a.next_use != b.next_use ? a.next_use > b.next_use : a.slot < b.slot;
  }
  [[nodiscard]] std::size_t part_of(std::size_t f) const noexcept {
    return shape_.scope == capacity_scope::per_layer ? layer_of_.divide(f) : 0;
  }
  [[nodiscard]] std::size_t base(std::size_t part) const noexcept { return part * shape_.partition_slots(); }
  void place(std::size_t b, std::size_t i, const entry& e) noexcept {
    heap_[b + i] = e;
    pos_[e.slot] = static_cast<std::uint32_t>(i);
  }
  void sift_up(std::size_t p, std::size_t i, const entry& e) noexcept {
    const std::size_t b = base(p);
    while (i > 0) {
      const std::size_t parent = (i - 1) / 2;
      if (!before(e, heap_[b + parent])) break;
      place(b, i, heap_[b + parent]);
      i = parent;
    }
    place(b, i, e);
  }
  void sift_down(std::size_t p, std::size_t i, const entry& e) noexcept {
    const std::size_t b = base(p);
    const std::size_t n = size_[p];
    for (;;) {
      std::size_t child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && before(heap_[b + child + 1], heap_[b + child])) ++child;
      if (!before(heap_[b + child], e)) break;
      place(b, i, heap_[b + child]);
      i = child;
    }
    place(b, i, e);
  }

  cache_shape shape_;
  slot_divider layer_of_;  // slot → layer (its pool when pools are per layer)
  std::vector<entry> heap_;
  std::vector<std::uint32_t> pos_;
  std::vector<std::size_t> size_;
};

}  // namespace detail

/// Belady has nothing to configure.
struct belady_config {};

/// Belady's MIN: evict the resident needed farthest in the future.
class belady_policy {
 public:
  using config_type = belady_config;
  /// Reads `access_info::next_use` of every access.
  static constexpr bool needs_future = true;

  explicit belady_policy(const cache_shape& shape, const belady_config& = {})
      : shape_(shape), heap_(shape), next_(shape.slots(), no_next_use) {}

  /// Complexity of every event: O(log n) for n residents of the pool; `victim`: O(1).
  void on_insert(expert_key k, const access_info& i) noexcept {
    const std::size_t f = shape_.flat(k);
    next_[f] = i.next_use;
    heap_.push(f, i.next_use);
  }
  void on_hit(expert_key k, const access_info& i) noexcept {
    const std::size_t f = shape_.flat(k);
    next_[f] = i.next_use;
    heap_.update(f, i.next_use);
  }
  void on_evict(expert_key k) noexcept { heap_.erase(shape_.flat(k)); }

  /// Returns: whether caching the miss `k` can pay: the pool has room, or `k` is needed
  /// again before the current victim.
  [[nodiscard]] bool admit(expert_key k, const access_info& i, bool must_evict) const noexcept {
    if (!must_evict) return true;
    const auto v = heap_.top(shape_.partition_of(k));
    return !v || i.next_use < next_[*v];
  }

  /// Returns: the resident of pool `part` needed farthest in the future, or nothing when
  /// the pool is empty.
  [[nodiscard]] std::optional<expert_key> victim(std::size_t part) const noexcept {
    const auto f = heap_.top(part);
    if (!f) return std::nullopt;
    return shape_.key(*f);
  }

 private:
  cache_shape shape_;
  detail::next_use_heap heap_;
  std::vector<std::uint64_t> next_;
};

static_assert(EvictionPolicy<belady_policy>);
static_assert(policy_traits<belady_policy>::needs_future);
static_assert(policy_traits<belady_policy>::has_admission);

/// For each position i of `accesses`, the position of the next access to the same expert
/// after i, or `no_next_use`: the `access_info::next_use` that `belady_policy` needs.
///
/// Preconditions: every key lies within `num_layers × num_experts`.
/// Complexity: O(accesses + num_layers · num_experts) time and memory.
[[nodiscard]] inline std::vector<std::uint64_t> next_use_positions(std::span<const expert_key> accesses,
                                                                   std::uint32_t num_layers,
                                                                   std::uint32_t num_experts) {
  std::vector<std::uint64_t> next(accesses.size(), no_next_use);
  std::vector<std::uint64_t> seen(static_cast<std::size_t>(num_layers) * num_experts, no_next_use);
  for (std::size_t i = accesses.size(); i-- > 0;) {
    const std::size_t f = accesses[i].flat(num_experts);
    MOEPOLICY_ASSERT(f < seen.size());
    next[i] = seen[f];
    seen[f] = i;
  }
  return next;
}

}  // namespace moepolicy
