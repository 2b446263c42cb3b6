// moepolicy/core/model_shape.hpp — the shape of an MoE model and the size of its experts.
//
// `model_shape` holds what the policies need to know about a model: its MoE layers,
// routed experts per layer, top-k, shared experts and the FFN dimensions. Presets cover
// the models the papers evaluate (DESIGN §6 of the project). `expert_bytes` prices one
// expert's weights at a bitwidth, including the per-group quantisation metadata.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/units.hpp"

namespace moepolicy {

/// How weights below full precision are stored: groups of `group_size` consecutive
/// weights share `metadata_bits` of scale and zero point. The default is the GPTQ/AWQ
/// layout: groups of 128 with one FP16 scale and one FP16 zero point (32 bits).
struct quant_format {
  /// Weights per quantisation group; 0 means no per-group metadata at all.
  std::uint32_t group_size = 128;
  /// Bits of metadata per group (scale plus zero point).
  std::uint32_t metadata_bits = 32;
  /// At or above this bitwidth weights are stored plainly, without group metadata.
  bitwidth full_precision = fp16;
};

/// The shape of a SwiGLU MoE transformer, as far as expert placement cares.
struct model_shape {
  std::string name;
  /// Transformer layers in the model, dense ones included.
  std::uint32_t num_layers = 0;
  /// Dense (non-MoE) layers before the first MoE layer.
  std::uint32_t num_dense_layers = 0;
  /// Routed experts per MoE layer.
  std::uint32_t num_experts = 0;
  /// Experts each token is routed to.
  std::uint32_t top_k = 0;
  /// Always-active shared experts per MoE layer (not routed, not in traces).
  std::uint32_t num_shared_experts = 0;
  /// Model (residual stream) width.
  std::uint64_t hidden_size = 0;
  /// Intermediate width of one routed expert's FFN.
  std::uint64_t expert_intermediate_size = 0;

  /// MoE layers: the layers a routing trace covers.
  [[nodiscard]] constexpr std::uint32_t num_moe_layers() const noexcept {
    return num_layers - num_dense_layers;
  }
  /// Weights of one routed expert: gate, up and down projections, 3 × hidden × intermediate.
  [[nodiscard]] constexpr std::uint64_t weights_per_expert() const noexcept {
    return 3 * hidden_size * expert_intermediate_size;
  }
  /// FLOPs of one token through one expert: a multiply and an add per weight.
  [[nodiscard]] constexpr double flops_per_token() const noexcept {
    return 2.0 * static_cast<double>(weights_per_expert());
  }

  /// Checks the shape's invariants.
  ///
  /// Throws: `invalid_argument` naming the first field that is out of range.
  void validate() const {
    constexpr std::string_view fn = "model_shape::validate";
    if (num_layers == 0) detail::throw_invalid(fn, "num_layers must be > 0", num_layers);
    if (num_dense_layers >= num_layers) {
      detail::throw_invalid(fn, "num_dense_layers must be < num_layers", num_dense_layers);
    }
    if (num_experts == 0 || num_experts > 65535) {
      detail::throw_invalid(fn, "num_experts must be in [1, 65535]", num_experts);
    }
    if (top_k == 0 || top_k > num_experts) {
      detail::throw_invalid(fn, "top_k must be in [1, num_experts]", top_k);
    }
    if (hidden_size == 0) detail::throw_invalid(fn, "hidden_size must be > 0", hidden_size);
    if (expert_intermediate_size == 0) {
      detail::throw_invalid(fn, "expert_intermediate_size must be > 0", expert_intermediate_size);
    }
  }
};

/// Bytes of `weights` weights stored at `bits` in `format`: the packed weights rounded up
/// to whole bytes, plus `metadata_bits` for each started group when `bits` is below the
/// format's full precision.
///
/// Throws: `invalid_argument` if `format.group_size == 0` while `format.metadata_bits > 0`.
[[nodiscard]] constexpr bytes weight_bytes(std::uint64_t weights, bitwidth bits,
                                           const quant_format& format = {}) {
  const auto b = static_cast<std::uint64_t>(bits.bits());
  std::uint64_t total_bits = weights * b;
  if (bits < format.full_precision && format.metadata_bits > 0) {
    if (format.group_size == 0) {
      detail::throw_invalid("weight_bytes", "group_size must be > 0 when metadata_bits > 0",
                            format.group_size);
    }
    const std::uint64_t groups = (weights + format.group_size - 1) / format.group_size;
    total_bits += groups * format.metadata_bits;
  }
  return (total_bits + 7) / 8;
}

/// Bytes of one routed expert of `shape` at `bits`. See `weight_bytes`.
[[nodiscard]] constexpr bytes expert_bytes(const model_shape& shape, bitwidth bits,
                                           const quant_format& format = {}) {
  return weight_bytes(shape.weights_per_expert(), bits, format);
}

/// Model presets. Figures from the models' published configurations, as tabled in the
/// project's design notes (§6); `num_dense_layers` from each model's configuration.
namespace models {

inline model_shape mixtral_8x7b() { return {"Mixtral-8x7B", 32, 0, 8, 2, 0, 4096, 14336}; }
inline model_shape mixtral_8x22b() { return {"Mixtral-8x22B", 56, 0, 8, 2, 0, 6144, 16384}; }
inline model_shape deepseek_v2() { return {"DeepSeek-V2", 60, 1, 160, 6, 2, 5120, 1536}; }
inline model_shape deepseek_v3() { return {"DeepSeek-V3", 61, 3, 256, 8, 1, 7168, 2048}; }
inline model_shape qwen3_235b_a22b() { return {"Qwen3-235B-A22B", 94, 0, 128, 8, 0, 4096, 1536}; }
inline model_shape qwen3_30b_a3b() { return {"Qwen3-30B-A3B", 48, 0, 128, 8, 0, 2048, 768}; }
inline model_shape glm_4_5_air() { return {"GLM-4.5-Air", 46, 1, 128, 8, 1, 4096, 1408}; }
inline model_shape olmoe_1b_7b() { return {"OLMoE-1B-7B", 16, 0, 64, 8, 0, 2048, 1024}; }
inline model_shape granite_3_1_1b_a400m() {
  return {"Granite-3.1-1B-A400M", 24, 0, 32, 8, 0, 1024, 512};
}

/// Every preset, for lookup by name.
inline constexpr std::array<model_shape (*)(), 9> all = {
    mixtral_8x7b,   mixtral_8x22b, deepseek_v2,     deepseek_v3,         qwen3_235b_a22b,
    qwen3_30b_a3b, glm_4_5_air,   olmoe_1b_7b,     granite_3_1_1b_a400m};

/// The preset whose name equals `name` ignoring ASCII case, or nothing.
inline std::optional<model_shape> find(std::string_view name) {
  const auto lower = [](char c) {
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  };
  for (auto make : all) {
    model_shape s = make();
    if (s.name.size() != name.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < name.size() && same; ++i) same = lower(s.name[i]) == lower(name[i]);
    if (same) return s;
  }
  return std::nullopt;
}

}  // namespace models
}  // namespace moepolicy
