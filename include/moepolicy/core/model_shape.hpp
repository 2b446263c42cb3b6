// moepolicy/core/model_shape.hpp — the shape of an MoE model and the size of its experts.
//
// `model_shape` holds what the policies need to know about a model: its MoE layers,
// routed experts per layer, top-k, shared experts and the FFN dimensions, and — for the
// timed model of serving (sim/timeline.hpp), which prices the work around the experts —
// the attention block, the dense layers' FFN width and the vocabulary. Presets cover the
// models the papers evaluate, with the figures of each model's published configuration.
// `expert_bytes` prices one expert's weights at a bitwidth, including the per-group
// quantisation metadata; `attention_shape` gives the attention block's weights, its KV
// cache per token and its arithmetic per cached token. Hybrid models (Kimi Linear) run a
// `linear_attention_shape` in some layers instead: a fixed-size recurrent state in place of
// a growing KV cache; `model_shape::linear_attention_layers` names those layers.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

/// How a layer's attention is built, for pricing it (sim/forward_pass.hpp).
enum class attention_kind : std::uint8_t {
  grouped_query,  ///< multi-head or grouped-query attention: `num_kv_heads` K/V heads of `head_dim`
  latent,         ///< multi-head latent attention (DeepSeek-V2/V3): a compressed KV latent
};

/// The attention block of one layer. All zero means "not described": the expert-placement
/// policies do not need it; the timed model rejects a shape without it.
///
/// Grouped-query (`grouped_query`): Q has `num_heads` heads and K, V `num_kv_heads` heads of
/// `head_dim`; weights hidden·head_dim·(2·num_heads + 2·num_kv_heads) (Q, K, V, O); the KV
/// cache holds 2·num_kv_heads·head_dim elements per token; each cached token costs a query
/// 4·num_heads·head_dim FLOPs (scores and the weighted sum of values).
///
/// Latent (`latent`, DeepSeek-V2 §2.1): Q through a rank-`q_lora_rank` bottleneck (direct
/// when 0) into num_heads·(qk_nope_head_dim + qk_rope_head_dim); K and V from a
/// rank-`kv_lora_rank` latent plus a shared `qk_rope_head_dim` rotary key; O from
/// num_heads·v_head_dim. The cache holds the latent and the rotary key, kv_lora_rank +
/// qk_rope_head_dim elements per token, and decode kernels attend in the latent space
/// (the up-projections absorbed), so each cached token costs a query
/// 2·num_heads·(2·kv_lora_rank + qk_rope_head_dim) FLOPs.
struct attention_shape {
  attention_kind kind = attention_kind::grouped_query;
  std::uint32_t num_heads = 0;
  /// Grouped-query only.
  std::uint32_t num_kv_heads = 0;
  std::uint32_t head_dim = 0;
  /// Latent only.
  std::uint32_t q_lora_rank = 0;
  std::uint32_t kv_lora_rank = 0;
  std::uint32_t qk_nope_head_dim = 0;
  std::uint32_t qk_rope_head_dim = 0;
  std::uint32_t v_head_dim = 0;

  /// Whether the block is described (num_heads > 0).
  [[nodiscard]] constexpr bool described() const noexcept { return num_heads > 0; }

  /// Weights of the block's projections, for a model of width `hidden`.
  [[nodiscard]] constexpr std::uint64_t weights(std::uint64_t hidden) const noexcept {
    const std::uint64_t h = num_heads;
    if (kind == attention_kind::grouped_query) return hidden * head_dim * (2 * h + 2 * std::uint64_t{num_kv_heads});
    const std::uint64_t qk = std::uint64_t{qk_nope_head_dim} + qk_rope_head_dim;
    const std::uint64_t q =
        q_lora_rank > 0 ? hidden * q_lora_rank + std::uint64_t{q_lora_rank} * h * qk : hidden * h * qk;
    const std::uint64_t kv = hidden * (std::uint64_t{kv_lora_rank} + qk_rope_head_dim) +
                             std::uint64_t{kv_lora_rank} * h * (std::uint64_t{qk_nope_head_dim} + v_head_dim);
    return q + kv + h * v_head_dim * hidden;
  }

  /// Elements the KV cache holds per token (per layer).
  [[nodiscard]] constexpr std::uint64_t kv_elements_per_token() const noexcept {
    if (kind == attention_kind::grouped_query) return 2 * std::uint64_t{num_kv_heads} * head_dim;
    return std::uint64_t{kv_lora_rank} + qk_rope_head_dim;
  }

  /// FLOPs one query token spends on one cached token (scores and values).
  [[nodiscard]] constexpr double flops_per_cached_token() const noexcept {
    const double h = num_heads;
    if (kind == attention_kind::grouped_query) return 4.0 * h * head_dim;
    return 2.0 * h * (2.0 * kv_lora_rank + qk_rope_head_dim);
  }
};

/// The linear-attention block of a hybrid model's linear layers: Kimi Delta Attention
/// (KDA; Kimi Linear §3, as built by flash-linear-attention's `KimiDeltaAttention`), with
/// `num_heads` heads whose keys and values both have `head_dim` channels (d) and a
/// depthwise short convolution of `conv_kernel` taps (K) on Q, K and V. All zero means
/// "none". With H = num_heads and D = H·d:
///
///   weights    4·hidden·D (Q, K, V, O) + 2·(hidden·d + d·D) (the low-rank forget gate
///              f_proj and output gate g_proj) + hidden·H (the per-head write strength β)
///              + 3·K·D (the short convolutions); the per-channel vectors (A_log, dt_bias,
///              the gate's bias, the output norm) are left out as norms are elsewhere.
///   state      per sequence: H matrices of d × d (`state_elements`), and the convolutions'
///              last K − 1 inputs of Q, K and V, (K − 1)·3·D elements (`conv_state_elements`).
///              Its size does not grow with the context.
///   per token  the recurrence S ← (I − β k kᵀ) Diag(α) S + β k vᵀ, o = Sᵀ q (Kimi Linear
///              §3, the KDA update), per head: Diag(α)·S d² multiplies, kᵀS 2d², the rank-one
///              update S + k·(β(v − Sᵀk))ᵀ 2d², Sᵀq 2d²: 7·d² FLOPs a head, 7·H·d² a token
///              (`flops_per_token`; the O(d) vector work and the gates' activations are left out).
struct linear_attention_shape {
  std::uint32_t num_heads = 0;
  std::uint32_t head_dim = 0;
  std::uint32_t conv_kernel = 0;

  /// Whether the block is described (num_heads > 0).
  [[nodiscard]] constexpr bool described() const noexcept { return num_heads > 0; }

  /// Weights of the block's projections and convolutions, for a model of width `hidden`.
  [[nodiscard]] constexpr std::uint64_t weights(std::uint64_t hidden) const noexcept {
    const std::uint64_t h = num_heads, d = head_dim, D = h * d;
    return 4 * hidden * D + 2 * (hidden * d + d * D) + hidden * h + 3 * std::uint64_t{conv_kernel} * D;
  }

  /// Elements of one sequence's recurrent state: H matrices of d × d.
  [[nodiscard]] constexpr std::uint64_t state_elements() const noexcept {
    return std::uint64_t{num_heads} * head_dim * head_dim;
  }

  /// Elements of one sequence's short-convolution state: the last K − 1 inputs of Q, K, V.
  [[nodiscard]] constexpr std::uint64_t conv_state_elements() const noexcept {
    return conv_kernel == 0 ? 0 : std::uint64_t{conv_kernel - 1} * 3 * num_heads * head_dim;
  }

  /// FLOPs of the recurrence for one token: 7·H·d².
  [[nodiscard]] constexpr double flops_per_token() const noexcept {
    return 7.0 * static_cast<double>(state_elements());
  }
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
  /// Intermediate width of one routed expert's FFN (shared experts have the same width).
  std::uint64_t expert_intermediate_size = 0;
  /// Intermediate width of the dense layers' FFN (0 when the model has none).
  std::uint64_t dense_intermediate_size = 0;
  /// Vocabulary of the output head (0: not described).
  std::uint64_t vocab_size = 0;
  /// The attention block (all zero: not described). In a hybrid model, the block of the
  /// layers not in `linear_attention_layers` (its full-attention layers).
  attention_shape attention{};
  /// The linear-attention block of a hybrid model (all zero: none).
  linear_attention_shape linear_attention{};
  /// The layers, counted from 0 over all layers (dense ones included), that run
  /// `linear_attention` instead of `attention`; ascending. Empty: every layer runs `attention`.
  std::vector<std::uint32_t> linear_attention_layers{};

  /// Whether layer `layer` (counted over all layers, dense ones included) runs linear attention.
  [[nodiscard]] bool is_linear_attention_layer(std::uint32_t layer) const noexcept {
    return std::binary_search(linear_attention_layers.begin(), linear_attention_layers.end(), layer);
  }
  /// Layers that run `attention` and so keep a KV cache.
  [[nodiscard]] std::uint32_t num_full_attention_layers() const noexcept {
    return num_layers - static_cast<std::uint32_t>(linear_attention_layers.size());
  }

  /// MoE layers: the layers a routing trace covers.
  [[nodiscard]] constexpr std::uint32_t num_moe_layers() const noexcept { return num_layers - num_dense_layers; }
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
    if (num_dense_layers > 0 && dense_intermediate_size == 0 && attention.described()) {
      detail::throw_invalid(fn, "a model with dense layers and an attention block needs dense_intermediate_size > 0",
                            dense_intermediate_size);
    }
    if (attention.described()) {
      if (attention.kind == attention_kind::grouped_query) {
        if (attention.num_kv_heads == 0 || attention.num_heads % attention.num_kv_heads != 0) {
          detail::throw_invalid(fn, "attention.num_kv_heads must be > 0 and divide num_heads", attention.num_kv_heads);
        }
        if (attention.head_dim == 0) detail::throw_invalid(fn, "attention.head_dim must be > 0", attention.head_dim);
      } else {
        if (attention.kv_lora_rank == 0) {
          detail::throw_invalid(fn, "attention.kv_lora_rank must be > 0 for latent attention", attention.kv_lora_rank);
        }
        if (attention.qk_nope_head_dim + attention.qk_rope_head_dim == 0 || attention.v_head_dim == 0) {
          detail::throw_invalid(fn, "latent attention needs qk_nope_head_dim + qk_rope_head_dim > 0 and v_head_dim > 0",
                                attention.v_head_dim);
        }
      }
    }
    if (!linear_attention_layers.empty()) {
      if (!linear_attention.described() || linear_attention.head_dim == 0) {
        detail::throw_invalid(fn, "linear_attention_layers needs linear_attention.num_heads and head_dim > 0",
                              linear_attention.num_heads);
      }
      for (std::size_t i = 0; i < linear_attention_layers.size(); ++i) {
        if (linear_attention_layers[i] >= num_layers) {
          detail::throw_invalid(fn, "linear_attention_layers must be < num_layers", linear_attention_layers[i]);
        }
        if (i > 0 && linear_attention_layers[i] <= linear_attention_layers[i - 1]) {
          detail::throw_invalid(fn, "linear_attention_layers must be strictly ascending", linear_attention_layers[i]);
        }
      }
    }
  }

  /// Whether the shape describes everything the timed model prices: attention, the
  /// vocabulary and, for models with dense layers, their FFN width.
  [[nodiscard]] constexpr bool describes_forward_pass() const noexcept {
    return attention.described() && vocab_size > 0 && (num_dense_layers == 0 || dense_intermediate_size > 0);
  }
};

/// Bytes of `weights` weights stored at `bits` in `format`: the packed weights rounded up
/// to whole bytes, plus `metadata_bits` for each started group when `bits` is below the
/// format's full precision.
///
/// Throws: `invalid_argument` if `format.group_size == 0` while `format.metadata_bits > 0`.
[[nodiscard]] constexpr bytes weight_bytes(std::uint64_t weights, bitwidth bits, const quant_format& format = {}) {
  const auto b = static_cast<std::uint64_t>(bits.bits());
  std::uint64_t total_bits = weights * b;
  if (bits < format.full_precision && format.metadata_bits > 0) {
    if (format.group_size == 0) {
      detail::throw_invalid("weight_bytes", "group_size must be > 0 when metadata_bits > 0", format.group_size);
    }
    const std::uint64_t groups = (weights + format.group_size - 1) / format.group_size;
    total_bits += groups * format.metadata_bits;
  }
  return (total_bits + 7) / 8;
}

/// Bytes of one routed expert of `shape` at `bits`. See `weight_bytes`.
[[nodiscard]] constexpr bytes expert_bytes(const model_shape& shape, bitwidth bits, const quant_format& format = {}) {
  return weight_bytes(shape.weights_per_expert(), bits, format);
}

/// Model presets: the figures of each model's published configuration (`config.json`
/// of its release: hidden_size, num_hidden_layers, num_attention_heads,
/// num_key_value_heads, head_dim, vocab_size, intermediate_size, moe_intermediate_size,
/// first_k_dense_replace, n_shared_experts, the latent-attention ranks). Where a
/// configuration names no head_dim it is hidden / heads. Multi-token-prediction layers
/// (DeepSeek-V3, GLM-4.5-Air) are not counted: they are not run when decoding without
/// speculation. Kimi-Linear-48B-A3B's `linear_attn_config` gives its KDA heads and the
/// 1-based `full_attn_layers`; every other layer is a KDA layer.
namespace models {

namespace detail_presets {
constexpr attention_shape gqa(std::uint32_t heads, std::uint32_t kv_heads, std::uint32_t head_dim) {
  return {.kind = attention_kind::grouped_query, .num_heads = heads, .num_kv_heads = kv_heads, .head_dim = head_dim};
}
/// DeepSeek-V2 and V3 share their latent attention: 128 heads, q_lora_rank 1536,
/// kv_lora_rank 512, nope 128 + rope 64, v 128.
constexpr attention_shape deepseek_mla() {
  return {.kind = attention_kind::latent,
          .num_heads = 128,
          .q_lora_rank = 1536,
          .kv_lora_rank = 512,
          .qk_nope_head_dim = 128,
          .qk_rope_head_dim = 64,
          .v_head_dim = 128};
}
}  // namespace detail_presets

inline model_shape mixtral_8x7b() {
  return {"Mixtral-8x7B", 32, 0, 8, 2, 0, 4096, 14336, 0, 32000, detail_presets::gqa(32, 8, 128)};
}
inline model_shape mixtral_8x22b() {
  return {"Mixtral-8x22B", 56, 0, 8, 2, 0, 6144, 16384, 0, 32768, detail_presets::gqa(48, 8, 128)};
}
inline model_shape deepseek_v2() {
  return {"DeepSeek-V2", 60, 1, 160, 6, 2, 5120, 1536, 12288, 102400, detail_presets::deepseek_mla()};
}
inline model_shape deepseek_v3() {
  return {"DeepSeek-V3", 61, 3, 256, 8, 1, 7168, 2048, 18432, 129280, detail_presets::deepseek_mla()};
}
inline model_shape qwen3_235b_a22b() {
  return {"Qwen3-235B-A22B", 94, 0, 128, 8, 0, 4096, 1536, 0, 151936, detail_presets::gqa(64, 4, 128)};
}
inline model_shape qwen3_30b_a3b() {
  return {"Qwen3-30B-A3B", 48, 0, 128, 8, 0, 2048, 768, 0, 151936, detail_presets::gqa(32, 4, 128)};
}
inline model_shape glm_4_5_air() {
  return {"GLM-4.5-Air", 46, 1, 128, 8, 1, 4096, 1408, 10944, 151552, detail_presets::gqa(96, 8, 128)};
}
inline model_shape olmoe_1b_7b() {
  return {"OLMoE-1B-7B", 16, 0, 64, 8, 0, 2048, 1024, 0, 50304, detail_presets::gqa(16, 16, 128)};
}
inline model_shape granite_3_1_1b_a400m() {
  return {"Granite-3.1-1B-A400M", 24, 0, 32, 8, 0, 1024, 512, 0, 49155, detail_presets::gqa(16, 8, 64)};
}
/// Kimi-Linear-48B-A3B (moonshotai/Kimi-Linear-48B-A3B-Instruct, `config.json`): 27 layers,
/// hidden 2304, the first layer dense (first_k_dense_replace 1, intermediate_size 9216), then
/// 26 MoE layers of 256 routed experts (moe_intermediate_size 1024), top-8, one shared expert;
/// vocabulary 163840, embeddings not tied. Its full-attention layers are latent attention
/// with 32 heads, no Q bottleneck (q_lora_rank null), kv_lora_rank 512, nope 128 + rope 64,
/// v 128 (mla_use_nope: the rotary part is not rotated but still stored, so the cache holds
/// 576 elements a token). linear_attn_config: 32 heads of head_dim 128, short convolution of
/// 4, full_attn_layers [4, 8, 12, 16, 20, 24, 27] (1-based); the other 20 layers run KDA, the
/// dense layer 0 among them.
inline model_shape kimi_linear_48b_a3b() {
  model_shape s{"Kimi-Linear-48B-A3B",
                27,
                1,
                256,
                8,
                1,
                2304,
                1024,
                9216,
                163840,
                {.kind = attention_kind::latent,
                 .num_heads = 32,
                 .q_lora_rank = 0,
                 .kv_lora_rank = 512,
                 .qk_nope_head_dim = 128,
                 .qk_rope_head_dim = 64,
                 .v_head_dim = 128},
                {.num_heads = 32, .head_dim = 128, .conv_kernel = 4}};
  // 0-based: every layer but the 1-based full_attn_layers 4, 8, ..., 24, 27.
  for (std::uint32_t l = 0; l < 27; ++l) {
    if (l != 26 && (l + 1) % 4 != 0) s.linear_attention_layers.push_back(l);
  }
  return s;
}

/// Every preset, for lookup by name.
inline constexpr std::array<model_shape (*)(), 10> all = {
    mixtral_8x7b,  mixtral_8x22b, deepseek_v2, deepseek_v3,          qwen3_235b_a22b,
    qwen3_30b_a3b, glm_4_5_air,   olmoe_1b_7b, granite_3_1_1b_a400m, kimi_linear_48b_a3b};

/// The preset whose name equals `name` ignoring ASCII case, or nothing.
inline std::optional<model_shape> find(std::string_view name) {
  const auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; };
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
