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
// (`decode_cached_reads`, `prefill_cached_reads`). `forward_pass_cost` prices these pieces
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
  /// Bytes per KV-cache element (2 for FP16/BF16).
  double kv_element_bytes = 2.0;
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
  const std::uint64_t L = shape.num_layers, moe = shape.num_moe_layers();
  std::uint64_t w = L * shape.attention.weights(shape.hidden_size);
  w += std::uint64_t{shape.num_dense_layers} * 3 * shape.hidden_size * shape.dense_intermediate_size;
  w += moe * shape.hidden_size * shape.num_experts;
  w += 2 * shape.vocab_size * shape.hidden_size;
  return detail::weights_at(w, config.weight_bits) + moe * shape.num_shared_experts * expert_bytes(shape, expert_bits);
}

/// Bytes of KV cache one token occupies over all layers.
///
/// Throws: `invalid_argument` when the shape does not describe its forward pass.
[[nodiscard]] inline bytes kv_bytes_per_token(const model_shape& shape, const forward_pass_config& config = {}) {
  detail::require_forward_pass(shape, "kv_bytes_per_token");
  return static_cast<bytes>(static_cast<double>(shape.num_layers) *
                            static_cast<double>(shape.attention.kv_elements_per_token()) * config.kv_element_bytes);
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
};

}  // namespace moepolicy
