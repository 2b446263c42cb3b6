// moepolicy/cache/fifo.hpp — first-in-first-out eviction. Models `EvictionPolicy`.
//
// A baseline: the victim is the resident inserted longest ago, whatever its use since.
#pragma once

#include <cstddef>
#include <optional>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/detail/orderings.hpp"
#include "moepolicy/core/ids.hpp"

namespace moepolicy {

/// FIFO has nothing to configure.
struct fifo_config {};

/// First-in-first-out eviction.
class fifo_policy {
 public:
  using config_type = fifo_config;

  explicit fifo_policy(const cache_shape& shape, const fifo_config& = {}) : shape_(shape), list_(shape) {}

  /// Complexity of every event and of `victim`: O(1).
  void on_insert(expert_key k, const access_info&) noexcept { list_.push_front(shape_.flat(k)); }
  void on_hit(expert_key, const access_info&) noexcept {}
  void on_evict(expert_key k) noexcept { list_.erase(shape_.flat(k)); }

  /// Returns: the resident of pool `part` inserted first, or nothing when it is empty.
  [[nodiscard]] std::optional<expert_key> victim(std::size_t part) const noexcept {
    const auto f = list_.back(part);
    if (!f) return std::nullopt;
    return shape_.key(*f);
  }

 private:
  cache_shape shape_;
  detail::partitioned_list list_;
};

static_assert(EvictionPolicy<fifo_policy>);

}  // namespace moepolicy
