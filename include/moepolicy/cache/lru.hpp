// moepolicy/cache/lru.hpp — least-recently-used eviction. Models `EvictionPolicy`.
//
// The baseline of every expert-caching paper (CXL-MoE §3 builds on it; Edge-MoE §5.3
// contrasts with it; Mixtral-offloading uses it). Residents are kept in one recency list
// per capacity pool; the victim is the least recently inserted, hit, or prefetched while
// resident (a prefetch announces a use). A demand cache of
// this policy has the stack property, so its hit ratio at every capacity comes from one
// pass (`lru_hit_curve`, cache/stack_distance.hpp).
#pragma once

#include <cstddef>
#include <optional>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/detail/orderings.hpp"
#include "moepolicy/core/ids.hpp"

namespace moepolicy {

/// LRU has nothing to configure.
struct lru_config {};

/// Least-recently-used eviction.
class lru_policy {
 public:
  using config_type = lru_config;

  explicit lru_policy(const cache_shape& shape, const lru_config& = {}) : shape_(shape), list_(shape) {}

  /// Complexity of every event and of `victim`: O(1).
  void on_insert(expert_key k, const access_info&) noexcept { list_.push_front(shape_.flat(k)); }
  void on_hit(expert_key k, const access_info&) noexcept { list_.move_to_front(shape_.flat(k)); }
  void on_evict(expert_key k) noexcept { list_.erase(shape_.flat(k)); }
  /// A prefetch of a resident expert announces a use: it becomes the most recent.
  void on_prefetch(expert_key k, const access_info&) noexcept { list_.move_to_front(shape_.flat(k)); }

  /// Returns: the least recently used resident of pool `part`, or nothing when it is empty.
  [[nodiscard]] std::optional<expert_key> victim(std::size_t part) const noexcept {
    const auto f = list_.back(part);
    if (!f) return std::nullopt;
    return shape_.key(*f);
  }

 private:
  cache_shape shape_;
  detail::partitioned_list list_;
};

static_assert(EvictionPolicy<lru_policy>);

}  // namespace moepolicy
