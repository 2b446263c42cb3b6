// moepolicy/core/ids.hpp — identifiers of layers and experts.
//
// `layer_id` and `expert_id` are plain unsigned integers (a model has at most a few
// hundred of each); `expert_key` names one expert of one layer, orders layer-major and
// hashes, so it can key ordered and unordered containers.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace moepolicy {

/// Index of an MoE layer, 0-based over the model's MoE layers.
using layer_id = std::uint16_t;
/// Index of a routed expert inside its layer, 0-based.
using expert_id = std::uint16_t;

/// One expert of one layer.
struct expert_key {
  layer_id layer = 0;
  expert_id expert = 0;

  friend constexpr auto operator<=>(const expert_key&, const expert_key&) = default;

  /// A dense index `layer * experts_per_layer + expert`, for flat arrays.
  [[nodiscard]] constexpr std::size_t flat(std::size_t experts_per_layer) const noexcept {
    return static_cast<std::size_t>(layer) * experts_per_layer + expert;
  }
};

}  // namespace moepolicy

template <>
struct std::hash<moepolicy::expert_key> {
  std::size_t operator()(const moepolicy::expert_key& k) const noexcept {
    return std::hash<std::uint32_t>{}((static_cast<std::uint32_t>(k.layer) << 16) | k.expert);
  }
};
