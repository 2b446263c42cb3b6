// moepolicy/cache/detail/layer_shield.hpp — the in-layer protection shield of Edge-MoE §5.3,
// shared by the policies that keep it (score-aware, EMA-score, Hawkeye-style, predicted
// reuse): the experts selected for the layer being computed are shielded from eviction from
// the layer's begin until its end. The policy is told which slots enter and leave the shield
// and takes them out of, and back into, its own ordering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/core/ids.hpp"

namespace moepolicy::detail {

/// Which slots are shielded, and the list of them to release by layer. Allocates at
/// construction only.
class layer_shield {
 public:
  explicit layer_shield(const cache_shape& shape)
      : shape_(shape), shielded_(shape.slots(), 0), list_(shape.slots(), 0) {}

  [[nodiscard]] bool shielded(std::size_t f) const noexcept { return shielded_[f] != 0; }

  /// Shields the `selected` experts of the layer whose slots start at `base`; calls
  /// `entered(slot)` for each slot newly shielded. Complexity: O(selected).
  template <class Entered>
  void shield(std::size_t base, std::span<const expert_id> selected, Entered&& entered) noexcept {
    for (expert_id e : selected) {
      const std::size_t f = base + e;
      if (shielded_[f] != 0) continue;
      shielded_[f] = 1;
      list_[count_++] = static_cast<std::uint32_t>(f);
      entered(f);
    }
  }

  /// Releases the shields of layer `l`'s experts; calls `left(slot)` for each.
  /// Complexity: O(shielded).
  template <class Left>
  void release(layer_id l, Left&& left) noexcept {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < count_; ++i) {
      const std::uint32_t f = list_[i];
      if (shape_.key(f).layer == l) {
        shielded_[f] = 0;
        left(f);
      } else {
        list_[kept++] = f;
      }
    }
    count_ = kept;
  }

 private:
  cache_shape shape_;
  std::vector<std::uint8_t> shielded_;
  std::vector<std::uint32_t> list_;
  std::size_t count_ = 0;
};

}  // namespace moepolicy::detail
