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
    heap_.push(f, rank(i.next_use));
  }
  void on_hit(expert_key k, const access_info& i) noexcept {
    const std::size_t f = shape_.flat(k);
    next_[f] = i.next_use;
    heap_.update(f, rank(i.next_use));
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
  static detail::heap_rank rank(std::uint64_t next_use) noexcept { return {0.0, no_next_use - next_use}; }

  cache_shape shape_;
  detail::partitioned_heap heap_;
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
