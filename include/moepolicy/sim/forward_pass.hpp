// moepolicy/sim/forward_pass.hpp — the work of a forward pass around the routed experts,
// from the model's shape: attention with its KV cache, the dense layers, the router, the
// shared experts and the output head.
//
// The timed model of serving (sim/timeline.hpp) charges every second a device spends, so
// the GPU's time is not only the experts it runs: per forward pass of `tokens` query tokens,
//   each dense layer   attention + a dense SwiGLU FFN (3 · hidden · dense_intermediate weights);
//   each MoE layer     attention + the router (hidden × experts) + the routed experts (priced
//                      by the system that runs them) + the shared experts, each run like a
//                      routed expert on every token (DeviceCost::compute_seconds);
//   once               the output head (vocabulary × hidden).
// Each piece is a `dense_work`: FLOPs and bytes read from the device's own memory, priced by
// `DenseComputeCost::dense_seconds` (the roofline of the device: the larger of arithmetic at
// peak and one pass over the bytes). Attention reads its weights once per pass and its KV
// cache once per cached token a query attends to, and writes the new tokens' entries:
//   flops = 2 · tokens · W_attn + flops_per_cached_token · cached_reads
//   read  = W_attn · weight bytes + kv_elements_per_token · kv_bytes · (cached_reads + tokens)
// where cached_reads is Σ over the query tokens of the cache entries each attends to
// (`decode_cached_reads`, `prefill_cached_reads`). A hybrid model's linear-attention layers
// (Kimi Delta Attention, core/model_shape.hpp) keep no KV cache but a fixed-size state per
// sequence, which each pass reads once and writes back once for every sequence it carries:
//   flops = 2 · tokens · W_lin + 7·H·d² · tokens
//   read  = W_lin · weight bytes + 2 · sequences · (H·d² · state bytes + (K−1)·3·H·d · kv_bytes)
// (the recurrent form that decode kernels run; for a prefill, the chunkwise kernels' extra
// per-chunk states are left out, so its state traffic is a lower bound). The state is FP32
// by default (`recurrent_state_element_bytes`), as flash-linear-attention keeps it; the
// convolution state is held like the KV cache. The per-layer overloads (`attention_work`
// with a layer, `forward_pass_cost::attention_seconds(layer, …)`) pick each layer's kind;
// for a model without linear layers they price exactly as the overloads without a layer.
// `forward_pass_cost` prices these pieces
// in seconds on one device (the GPU in every system the library models); a shared expert is
// priced as a routed expert on all the pass's tokens, keyed as expert `num_experts + s` of
// its layer so that a profiled model can tell it apart. Norms, rotary embeddings, residual adds
// and the embedding lookup are left out: each reads a few activations per token, far below
// the weights' bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/concepts.hpp"

namespace moepolicy {

/// Arithmetic and memory traffic of a dense kernel (or a sum of them).
struct dense_work {
  double flops = 0.0;
  bytes read = 0;

  dense_work& operator+=(const dense_work& o) noexcept {
    flops += o.flops;
    read += o.read;
    return *this;
  }
  friend dense_work operator+(dense_work a, const dense_work& b) noexcept { return a += b; }
  friend bool operator==(const dense_work&, const dense_work&) = default;
};

/// How the non-expert weights and the KV cache are stored.
struct forward_pass_config {
  /// Precision of the attention, dense-FFN, router and output-head weights.
  bitwidth weight_bits = fp16;
  /// Bytes per KV-cache element (2 for FP16/BF16); also the linear layers' convolution state.
  double kv_element_bytes = 2.0;
  /// Bytes per element of a linear-attention layer's recurrent state (4: FP32).
  double recurrent_state_element_bytes = 4.0;
};

namespace detail {
inline void require_forward_pass(const model_shape& shape, std::string_view fn) {
  if (!shape.describes_forward_pass()) {
    throw_invalid(fn,
                  "the model shape \"" + shape.name +
                      "\" does not describe its attention, vocabulary or dense FFN (attention.num_heads)",
                  shape.attention.num_heads);
  }
}
/// The check every timed replay makes at its boundary: the shape describes its forward pass
/// and the trace's layers × experts are the shape's MoE layers × experts.
inline void require_trace_matches(std::uint64_t trace_layers, std::uint64_t trace_experts, const model_shape& shape,
                                  std::string_view fn) {
  require_forward_pass(shape, fn);
  if (trace_layers != shape.num_moe_layers() || trace_experts != shape.num_experts) {
    throw_invalid(fn,
                  "the trace's layers x experts must match the model's " + std::to_string(shape.num_moe_layers()) +
                      " x " + std::to_string(shape.num_experts) + ", trace layers",
                  trace_layers);
  }
}
[[nodiscard]] inline bytes weights_at(std::uint64_t weights, bitwidth bits) {
  return weight_bytes(weights, bits, quant_format{.group_size = 128, .metadata_bits = 32, .full_precision = fp16});
}
}  // namespace detail

/// Σ over a decode step's query tokens of the cache entries each attends to: a sequence
/// with `context[i]` tokens already cached attends to those and to itself.
[[nodiscard]] inline std::uint64_t decode_cached_reads(std::span<const std::uint64_t> context) noexcept {
  std::uint64_t s = 0;
  for (std::uint64_t c : context) s += c + 1;
  return s;
}

/// The same for one sequence's prefill of `prompt` tokens after `already_cached` tokens,
/// causal: Σ_{i=1..prompt} (already_cached + i).
[[nodiscard]] constexpr std::uint64_t prefill_cached_reads(std::uint64_t prompt,
                                                           std::uint64_t already_cached = 0) noexcept {
  return prompt * already_cached + prompt * (prompt + 1) / 2;
}

/// One layer's attention for `tokens` query tokens reading `cached_reads` cache entries.
///
/// Throws: `invalid_argument` when the shape does not describe its forward pass.
[[nodiscard]] inline dense_work attention_work(const model_shape& shape, std::size_t tokens, std::uint64_t cached_reads,
                                               const forward_pass_config& config = {}) {
  detail::require_forward_pass(shape, "attention_work");
  if (tokens == 0) return {};
  const std::uint64_t w = shape.attention.weights(shape.hidden_size);
  const auto t = static_cast<double>(tokens);
  const double kv_bytes = static_cast<double>(shape.attention.kv_elements_per_token()) * config.kv_element_bytes;
  dense_work out;
  out.flops =
      2.0 * t * static_cast<double>(w) + shape.attention.flops_per_cached_token() * static_cast<double>(cached_reads);
  out.read = detail::weights_at(w, config.weight_bits) +
             static_cast<bytes>(kv_bytes * static_cast<double>(cached_reads + tokens));
  return out;
}

/// Bytes of one sequence's state in one linear-attention layer: the recurrent state and the
/// convolution state (0 for a model without linear layers).
[[nodiscard]] inline bytes linear_state_bytes(const model_shape& shape, const forward_pass_config& config = {}) {
  const linear_attention_shape& a = shape.linear_attention;
  return static_cast<bytes>(static_cast<double>(a.state_elements()) * config.recurrent_state_element_bytes +
                            static_cast<double>(a.conv_state_elements()) * config.kv_element_bytes);
}

/// One linear-attention layer for `tokens` query tokens of `sequences` sequences: its
/// weights once, each sequence's state read and written once (see the header).
///
/// Throws: `invalid_argument` when the shape describes no linear attention, or when
/// `sequences` is 0 or more than `tokens` while `tokens > 0`.
[[nodiscard]] inline dense_work linear_attention_work(const model_shape& shape, std::size_t tokens,
                                                      std::size_t sequences, const forward_pass_config& config = {}) {
  constexpr std::string_view fn = "linear_attention_work";
  if (!shape.linear_attention.described()) {
    detail::throw_invalid(fn,
                          "the model shape \"" + shape.name + "\" has no linear attention (linear_attention.num_heads)",
                          shape.linear_attention.num_heads);
  }
  if (tokens == 0) return {};
  if (sequences == 0 || sequences > tokens) {
    detail::throw_invalid(fn, "sequences must be in [1, tokens = " + std::to_string(tokens) + "]", sequences);
  }
  const std::uint64_t w = shape.linear_attention.weights(shape.hidden_size);
  const auto t = static_cast<double>(tokens);
  return {2.0 * t * static_cast<double>(w) + shape.linear_attention.flops_per_token() * t,
          detail::weights_at(w, config.weight_bits) +
              2 * static_cast<bytes>(sequences) * linear_state_bytes(shape, config)};
}

/// Layer `layer`'s attention (counted over all layers, dense ones included): linear attention
/// for `tokens` tokens of `sequences` sequences when the layer is one of the shape's
/// `linear_attention_layers`, else `attention_work(shape, tokens, cached_reads)`.
///
/// Throws: as `attention_work` and `linear_attention_work`; `invalid_argument` when `layer`
/// is not below the shape's `num_layers`.
[[nodiscard]] inline dense_work attention_work(const model_shape& shape, std::uint32_t layer, std::size_t tokens,
                                               std::uint64_t cached_reads, std::size_t sequences,
                                               const forward_pass_config& config = {}) {
  if (layer >= shape.num_layers) {
    detail::throw_invalid("attention_work", "layer must be < num_layers = " + std::to_string(shape.num_layers), layer);
  }
  if (shape.is_linear_attention_layer(layer)) return linear_attention_work(shape, tokens, sequences, config);
  return attention_work(shape, tokens, cached_reads, config);
}

/// The router of one MoE layer: hidden × experts weights.
[[nodiscard]] inline dense_work router_work(const model_shape& shape, std::size_t tokens,
                                            const forward_pass_config& config = {}) {
  if (tokens == 0) return {};
  const std::uint64_t w = shape.hidden_size * shape.num_experts;
  return {2.0 * static_cast<double>(tokens) * static_cast<double>(w), detail::weights_at(w, config.weight_bits)};
}

/// One dense layer's SwiGLU FFN: 3 × hidden × dense_intermediate weights.
///
/// Throws: `invalid_argument` when the shape does not describe its forward pass.
[[nodiscard]] inline dense_work dense_ffn_work(const model_shape& shape, std::size_t tokens,
                                               const forward_pass_config& config = {}) {
  detail::require_forward_pass(shape, "dense_ffn_work");
  if (tokens == 0 || shape.num_dense_layers == 0) return {};
  const std::uint64_t w = 3 * shape.hidden_size * shape.dense_intermediate_size;
  return {2.0 * static_cast<double>(tokens) * static_cast<double>(w), detail::weights_at(w, config.weight_bits)};
}

/// The output head: vocabulary × hidden, once per pass.
///
/// Throws: `invalid_argument` when the shape does not describe its forward pass.
[[nodiscard]] inline dense_work output_head_work(const model_shape& shape, std::size_t tokens,
                                                 const forward_pass_config& config = {}) {
  detail::require_forward_pass(shape, "output_head_work");
  if (tokens == 0) return {};
  const std::uint64_t w = shape.vocab_size * shape.hidden_size;
  return {2.0 * static_cast<double>(tokens) * static_cast<double>(w), detail::weights_at(w, config.weight_bits)};
}

/// Bytes of the weights a GPU keeps for the non-expert part of the model: every layer's
/// attention, the dense layers' FFNs, the routers, the shared experts (at `expert_bits`)
/// and the output head (the embedding table too when it is not tied: counted as a second
/// vocabulary × hidden matrix). What HBM must hold besides routed experts and the KV cache.
///
/// Throws: `invalid_argument` when the shape does not describe its forward pass.
[[nodiscard]] inline bytes non_expert_weight_bytes(const model_shape& shape, const forward_pass_config& config = {},
                                                   bitwidth expert_bits = fp16) {
  detail::require_forward_pass(shape, "non_expert_weight_bytes");
  const std::uint64_t linear = shape.linear_attention_layers.size(), full = shape.num_layers - linear,
                      moe = shape.num_moe_layers();
  std::uint64_t w = full * shape.attention.weights(shape.hidden_size);
  if (linear > 0) w += linear * shape.linear_attention.weights(shape.hidden_size);
  w += std::uint64_t{shape.num_dense_layers} * 3 * shape.hidden_size * shape.dense_intermediate_size;
  w += moe * shape.hidden_size * shape.num_experts;
  w += 2 * shape.vocab_size * shape.hidden_size;
  return detail::weights_at(w, config.weight_bits) + moe * shape.num_shared_experts * expert_bytes(shape, expert_bits);
}

/// Bytes of KV cache one token occupies over all layers that keep one (all but the linear
/// layers of a hybrid model).
///
/// Throws: `invalid_argument` when the shape does not describe its forward pass.
[[nodiscard]] inline bytes kv_bytes_per_token(const model_shape& shape, const forward_pass_config& config = {}) {
  detail::require_forward_pass(shape, "kv_bytes_per_token");
  return static_cast<bytes>(static_cast<double>(shape.num_full_attention_layers()) *
                            static_cast<double>(shape.attention.kv_elements_per_token()) * config.kv_element_bytes);
}

/// Bytes of state one sequence holds over all linear-attention layers, whatever its length
/// (0 for a model without linear layers): what HBM holds per sequence besides its KV cache.
[[nodiscard]] inline bytes linear_state_bytes_per_sequence(const model_shape& shape,
                                                           const forward_pass_config& config = {}) {
  return static_cast<bytes>(shape.linear_attention_layers.size()) * linear_state_bytes(shape, config);
}

/// Seconds of the non-expert work of a forward pass on one device (see the header).
template <class Device>
requires DeviceCost<Device> && DenseComputeCost<Device>
class forward_pass_cost {
 public:
  /// Throws: `invalid_argument` when the shape does not describe its forward pass.
  forward_pass_cost(Device device, model_shape shape, forward_pass_config config = {})
      : device_(std::move(device)), shape_(std::move(shape)), config_(config) {
    detail::require_forward_pass(shape_, "forward_pass_cost");
    shape_.validate();
    attention_weights_ = detail::weights_at(shape_.attention.weights(shape_.hidden_size), config_.weight_bits);
    if (shape_.linear_attention.described()) {
      linear_weights_ = detail::weights_at(shape_.linear_attention.weights(shape_.hidden_size), config_.weight_bits);
      linear_state_ = linear_state_bytes(shape_, config_);
    }
  }

  [[nodiscard]] const Device& device() const noexcept { return device_; }
  [[nodiscard]] const model_shape& shape() const noexcept { return shape_; }

  /// Attention of one layer for `tokens` query tokens reading `cached_reads` cache entries.
  [[nodiscard]] seconds attention_seconds(std::size_t tokens, std::uint64_t cached_reads) const noexcept {
    if (tokens == 0) return 0.0;
    const double kv_bytes = static_cast<double>(shape_.attention.kv_elements_per_token()) * config_.kv_element_bytes;
    const double flops =
        2.0 * static_cast<double>(tokens) * static_cast<double>(shape_.attention.weights(shape_.hidden_size)) +
        shape_.attention.flops_per_cached_token() * static_cast<double>(cached_reads);
    const bytes read = attention_weights_ + static_cast<bytes>(kv_bytes * static_cast<double>(cached_reads + tokens));
    return device_.dense_seconds(flops, read);
  }
  /// Attention of layer `layer` (counted over all layers, dense ones included) for `tokens`
  /// query tokens of `sequences` sequences: a linear-attention layer reads its weights and
  /// each sequence's state once and writes the state back; any other layer is priced as
  /// `attention_seconds(tokens, cached_reads)`. Allocates nothing.
  [[nodiscard]] seconds attention_seconds(std::uint32_t layer, std::size_t tokens, std::uint64_t cached_reads,
                                          std::size_t sequences) const noexcept {
    if (tokens == 0) return 0.0;
    if (!shape_.is_linear_attention_layer(layer)) return attention_seconds(tokens, cached_reads);
    const auto t = static_cast<double>(tokens);
    const double flops = 2.0 * t * static_cast<double>(shape_.linear_attention.weights(shape_.hidden_size)) +
                         shape_.linear_attention.flops_per_token() * t;
    return device_.dense_seconds(flops, linear_weights_ + 2 * static_cast<bytes>(sequences) * linear_state_);
  }
  /// The router of one MoE layer.
  [[nodiscard]] seconds router_seconds(std::size_t tokens) const {
    const dense_work w = router_work(shape_, tokens, config_);
    return device_.dense_seconds(w.flops, w.read);
  }
  /// The shared experts of MoE layer `layer`, each one kernel over all `tokens`.
  [[nodiscard]] seconds shared_experts_seconds(layer_id layer, std::size_t tokens) const noexcept {
    seconds s = 0.0;
    for (std::uint32_t i = 0; i < shape_.num_shared_experts; ++i) {
      s += device_.compute_seconds(expert_key{layer, static_cast<expert_id>(shape_.num_experts + i)}, fp16, tokens);
    }
    return s;
  }
  /// One dense layer: attention and its FFN.
  [[nodiscard]] seconds dense_layer_seconds(std::size_t tokens, std::uint64_t cached_reads) const {
    const dense_work w = dense_ffn_work(shape_, tokens, config_);
    return attention_seconds(tokens, cached_reads) + device_.dense_seconds(w.flops, w.read);
  }
  /// Dense layer `layer` (counted from 0): its attention of the layer's kind (see
  /// `attention_seconds(layer, …)`) and its FFN.
  [[nodiscard]] seconds dense_layer_seconds(std::uint32_t layer, std::size_t tokens, std::uint64_t cached_reads,
                                            std::size_t sequences) const {
    const dense_work w = dense_ffn_work(shape_, tokens, config_);
    return attention_seconds(layer, tokens, cached_reads, sequences) + device_.dense_seconds(w.flops, w.read);
  }
  /// The output head.
  [[nodiscard]] seconds output_head_seconds(std::size_t tokens) const {
    const dense_work w = output_head_work(shape_, tokens, config_);
    return device_.dense_seconds(w.flops, w.read);
  }

 private:
  Device device_;
  model_shape shape_;
  forward_pass_config config_;
  bytes attention_weights_ = 0;
  bytes linear_weights_ = 0;
  bytes linear_state_ = 0;
};

}  // namespace moepolicy
