// moepolicy/place/engine_export.hpp — a GPU/CPU expert placement written as the settings
// that serving engines take: llama.cpp's tensor overrides and KTransformers' optimize rules.
//
// Both engines keep the routed experts of one MoE layer together, so only whole layers can
// move between GPU and CPU:
//   - llama.cpp stores a layer's experts in one 3-D tensor per projection
//     (`blk.N.ffn_up_exps`, `blk.N.ffn_gate_exps`, `blk.N.ffn_down_exps`, or a fused
//     `blk.N.ffn_gate_up_exps`); `--override-tensor PATTERN=CPU` (`-ot`) puts every tensor
//     whose name the regex PATTERN matches (std::regex_search) in host memory, and
//     `--n-cpu-moe N` does that for blocks 0..N-1 with the pattern
//     `blk\.<i>\.ffn_(up|down|gate|gate_up)_(ch|)exps` (llama.cpp common/common.h,
//     `llm_ffn_exps_block_regex`); `-ot` takes comma-separated PATTERN=BUFFER pairs.
//   - KTransformers replaces the module `model.layers.N.mlp.experts` (Mixtral:
//     `block_sparse_moe.experts`) by `KTransformersExperts`; a rule with
//     `generate_device: "cuda:0"` and `generate_op: "KExpertsMarlin"` runs that layer's
//     experts on the GPU, and the first rule of the file that matches a module applies
//     (KTransformers' multi-GPU tutorial and FAQ).
// A per-expert placement (place/prefill_placement.hpp: g_l experts of layer l on the GPU)
// therefore cannot be expressed as it is. `whole_layer_split` derives what can: with the
// placement's GPU expert budget S = Σ g_l, K = floor(S / E) whole layers fit in the same
// GPU memory (E experts per layer, all of equal size); the S − K·E experts left over are
// reported as unused, not rounded up. The K GPU layers are those with the most routed
// tokens (the layer's whole traffic runs on the GPU, whichever experts it picks); ties go
// to the later layer, so that with equal traffic the CPU layers are the first ones and the
// split is also `--n-cpu-moe N`.
//
// Block indices: engines count all transformer blocks, dense ones included; MoE layer m is
// block `first_moe_block + m` (a model whose leading `first_moe_block` blocks are dense, as
// core/model_shape.hpp's `num_dense_layers`).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moepolicy/core/error.hpp"

namespace moepolicy {

/// Which MoE layers keep their experts on the GPU when only whole layers can move.
struct whole_layer_split {
  /// Per MoE layer: true when its experts are on the GPU.
  std::vector<bool> on_gpu;
  /// Experts per layer, E.
  std::size_t experts_per_layer = 0;
  /// S: GPU experts in the placement the split was derived from.
  std::size_t placement_gpu_experts = 0;
  /// K: whole layers on the GPU (K·E <= S).
  std::size_t gpu_layers = 0;
  /// S − K·E: GPU slots of the placement that no whole layer fills.
  std::size_t unused_gpu_experts = 0;
  /// Leading dense blocks before MoE layer 0.
  std::size_t first_moe_block = 0;

  /// Whether the CPU layers are exactly the first MoE layers (then `--n-cpu-moe` says it).
  [[nodiscard]] bool cpu_layers_are_prefix() const noexcept {
    const auto first_gpu = std::find(on_gpu.begin(), on_gpu.end(), true);
    return std::find(first_gpu, on_gpu.end(), false) == on_gpu.end();
  }
  /// Block indices of the MoE layers on the CPU (or on the GPU), ascending.
  [[nodiscard]] std::vector<std::size_t> blocks(bool gpu) const {
    std::vector<std::size_t> out;
    for (std::size_t m = 0; m < on_gpu.size(); ++m) {
      if (on_gpu[m] == gpu) out.push_back(first_moe_block + m);
    }
    return out;
  }
};

/// Derives the whole-layer split of a placement with `gpu_experts[l]` GPU experts in MoE
/// layer l, E = `experts_per_layer`, routed tokens `layer_tokens[l]` (empty: all equal).
///
/// Throws: `invalid_argument` naming the value when there are no layers, E is 0, a layer
/// has more GPU experts than E, `layer_tokens` has the wrong size or a negative or
/// non-finite entry.
/// Complexity: O(L log L).
[[nodiscard]] inline whole_layer_split split_whole_layers(std::span<const std::size_t> gpu_experts,
                                                          std::size_t experts_per_layer,
                                                          std::span<const double> layer_tokens = {},
                                                          std::size_t first_moe_block = 0) {
  constexpr std::string_view fn = "split_whole_layers";
  const std::size_t L = gpu_experts.size();
  if (L == 0) detail::throw_invalid(fn, "at least one MoE layer is needed", L);
  if (experts_per_layer == 0) detail::throw_invalid(fn, "experts_per_layer must be >= 1", experts_per_layer);
  if (!layer_tokens.empty() && layer_tokens.size() != L) {
    detail::throw_invalid(fn, "layer_tokens must be empty or hold one entry per MoE layer", layer_tokens.size());
  }
  whole_layer_split s;
  s.experts_per_layer = experts_per_layer;
  s.first_moe_block = first_moe_block;
  for (std::size_t l = 0; l < L; ++l) {
    if (gpu_experts[l] > experts_per_layer) {
      detail::throw_invalid(fn, "layer " + std::to_string(l) + " has more GPU experts than experts_per_layer",
                            gpu_experts[l]);
    }
    s.placement_gpu_experts += gpu_experts[l];
    if (!layer_tokens.empty() && !(std::isfinite(layer_tokens[l]) && layer_tokens[l] >= 0.0)) {
      detail::throw_invalid(fn, "layer_tokens[" + std::to_string(l) + "] must be finite and >= 0", layer_tokens[l]);
    }
  }
  s.gpu_layers = s.placement_gpu_experts / experts_per_layer;
  s.unused_gpu_experts = s.placement_gpu_experts - s.gpu_layers * experts_per_layer;
  std::vector<std::size_t> order(L);
  std::iota(order.begin(), order.end(), std::size_t{0});
  // Most tokens first; ties: the later layer first.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const double ta = layer_tokens.empty() ? 0.0 : layer_tokens[a];
    const double tb = layer_tokens.empty() ? 0.0 : layer_tokens[b];
    if (ta != tb) return ta > tb;
    return a > b;
  });
  s.on_gpu.assign(L, false);
  for (std::size_t i = 0; i < s.gpu_layers; ++i) s.on_gpu[order[i]] = true;
  return s;
}

namespace detail {

/// "(3|4|7)" for blocks {3, 4, 7}; "3" for one block.
inline std::string block_alternation(const std::vector<std::size_t>& blocks) {
  if (blocks.size() == 1) return std::to_string(blocks.front());
  std::string out = "(";
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (i > 0) out += '|';
    out += std::to_string(blocks[i]);
  }
  return out + ")";
}

}  // namespace detail

/// The llama.cpp expert-tensor pattern of llama.cpp's `--n-cpu-moe` (common/common.h).
inline constexpr std::string_view llamacpp_exps_pattern = "\\.ffn_(up|down|gate|gate_up)_(ch|)exps";

/// llama.cpp's command-line arguments for `s`: `-ngl 999` (every block's other tensors on
/// the GPU), then `--n-cpu-moe N` when the CPU layers are the first ones, else one
/// `--override-tensor "blk\.(i|j|...)\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU"`; nothing
/// after `-ngl 999` when every layer is on the GPU. One argument per element, unquoted.
[[nodiscard]] inline std::vector<std::string> llamacpp_args(const whole_layer_split& s) {
  std::vector<std::string> args{"--n-gpu-layers", "999"};
  const std::vector<std::size_t> cpu = s.blocks(false);
  if (cpu.empty()) return args;
  if (s.cpu_layers_are_prefix()) {
    // Blocks 0..N-1; the dense blocks among them have no expert tensors.
    args.insert(args.end(), {"--n-cpu-moe", std::to_string(s.first_moe_block + cpu.size())});
  } else {
    args.insert(args.end(), {"--override-tensor",
                             "blk\\." + detail::block_alternation(cpu) + std::string(llamacpp_exps_pattern) + "=CPU"});
  }
  return args;
}

/// A KTransformers optimize-rules fragment for `s`: one rule moving the experts of the GPU
/// layers to "cuda:0" with the Marlin kernel, to put before the experts rule of the
/// model's rules file (the first matching rule applies); the other layers keep that
/// file's rule (CPU experts). `experts_module` is the experts' module path within a layer
/// ("mlp.experts"; Mixtral: "block_sparse_moe.experts"). Empty when no layer is on the GPU.
[[nodiscard]] inline std::string ktransformers_rules(const whole_layer_split& s,
                                                     std::string_view experts_module = "mlp.experts") {
  const std::vector<std::size_t> gpu = s.blocks(true);
  if (gpu.empty()) return {};
  std::string module;
  for (const char c : experts_module) {
    if (c == '.') module += "\\\\";  // a regex "\." inside a double-quoted YAML string
    module += c;
  }
  return "- match:\n"
         "    name: \"^model\\\\.layers\\\\." +
         detail::block_alternation(gpu) + "\\\\." + module +
         "$\"\n"
         "  replace:\n"
         "    class: ktransformers.operators.experts.KTransformersExperts\n"
         "    kwargs:\n"
         "      generate_device: \"cuda:0\"\n"
         "      generate_op: \"KExpertsMarlin\"\n"
         "  recursive: False\n";
}

}  // namespace moepolicy
