// moepolicy/cost/roofline.hpp — the roofline device-cost model. Models `DeviceCost`.
//
// Running an expert on `t > 0` tokens costs
//   launch + max( t · 2·3·hidden·intermediate / peak(b),  expert_bytes(b) / memory_bw )
// — the larger of its arithmetic at the device's peak and one pass over its weights at
// the device's memory bandwidth (the roofline model). peak(b) is the quoted peak, or for
// bit-scaled units (CXL-NDP systolic arrays, Context-Aware GPU-NDP §2.3) peak · peak_bits / b.
// The knee where the two terms meet is at t* = expert_bytes · peak / (bw · flops_per_token)
// tokens: below it an expert is memory-bound (decode), above it compute-bound (prefill).
#pragma once

#include <algorithm>
#include <cstddef>

#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/concepts.hpp"
#include "moepolicy/cost/detail/device_base.hpp"
#include "moepolicy/cost/device_spec.hpp"

namespace moepolicy {

/// The roofline model of one device running one model's experts.
class roofline_cost : public detail::device_base {
 public:
  /// Throws: `invalid_argument` if `spec` or `shape` fails validation.
  roofline_cost(device_spec spec, model_shape shape) : device_base(std::move(spec), std::move(shape)) {}

  /// Every expert of the model has its shape: prices do not read the key
  /// (`key_independent_cost`).
  static constexpr bool key_independent = true;

  /// FLOP/s the device reaches with weights at `b`.
  [[nodiscard]] double peak_flops(bitwidth b) const noexcept {
    const auto& c = spec_.compute;
    if (c.bit_scaled_compute && b < c.peak_bits) {
      return c.peak_flops * static_cast<double>(c.peak_bits.bits()) / static_cast<double>(b.bits());
    }
    return c.peak_flops;
  }

  /// See `ComputeCost`.
  [[nodiscard]] seconds compute_seconds(expert_key, bitwidth b, std::size_t tokens) const noexcept {
    if (tokens == 0) return 0.0;
    const double arithmetic = static_cast<double>(tokens) * shape_.flops_per_token() / peak_flops(b);
    return spec_.compute.launch_seconds + std::max(arithmetic, weight_stream_seconds(b));
  }

  /// Tokens at which arithmetic time equals weight-streaming time at `b` (the knee).
  [[nodiscard]] double knee_tokens(bitwidth b) const noexcept {
    return weight_stream_seconds(b) * peak_flops(b) / shape_.flops_per_token();
  }
};

static_assert(DeviceCost<roofline_cost>);
static_assert(DenseComputeCost<roofline_cost>);
static_assert(key_independent_cost<roofline_cost>);

}  // namespace moepolicy
