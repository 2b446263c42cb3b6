// moepolicy/cost/device_spec.hpp — the published figures that describe one device.
//
// A `device_spec` is plain data: peak throughput, memory bandwidth, links, capacity,
// execution kind. The cost models (`roofline_cost`, `profiled_cost`) turn it into
// times. Presets for the papers' devices are in cost/presets.hpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/concepts.hpp"

namespace moepolicy {

/// Infinite bandwidth: a path that is never the bottleneck (data already in place).
inline constexpr double unlimited_bandwidth = std::numeric_limits<double>::infinity();

/// A point-to-point link: moving `n > 0` bytes takes `latency_seconds + n / bandwidth`.
struct link_spec {
  /// Bytes per second, > 0; `unlimited_bandwidth` for a path that costs nothing.
  double bandwidth = unlimited_bandwidth;
  /// Fixed time per transfer, >= 0.
  seconds latency_seconds = 0.0;

  /// Time to move `n` bytes; 0 for `n == 0`.
  [[nodiscard]] constexpr seconds seconds_for(bytes n) const noexcept {
    if (n == 0) return 0.0;
    return latency_seconds + static_cast<double>(n) / bandwidth;
  }
};

/// The compute side of one unit.
struct compute_spec {
  /// FLOP/s at `peak_bits`, > 0.
  double peak_flops = 0.0;
  /// The precision at which `peak_flops` is quoted.
  bitwidth peak_bits = fp16;
  /// Whether weights below `peak_bits` raise throughput in proportion, peak(b) =
  /// peak_flops · peak_bits / b (bit-serial or packed-MAC units, as the CXL-NDP
  /// systolic arrays of Context-Aware GPU-NDP §2.3: ≈5× at 3 bits and 8× at 2 bits, §5.2).
  /// When false, low-bit weights are dequantised and compute runs at `peak_flops`.
  bool bit_scaled_compute = false;
  /// Bytes per second at which the unit's own compute reads weights from its memory, > 0.
  double memory_bandwidth = 0.0;
  /// Fixed time per expert invocation (kernel launch, command issue), >= 0.
  seconds launch_seconds = 0.0;
};

/// Everything the reference cost models need to know about a device.
struct device_spec {
  std::string name;
  execution_kind execution = execution_kind::serial;
  /// Units of a parallel device (1 for a serial one).
  std::uint32_t num_units = 1;
  /// Memory one unit offers to expert weights.
  bytes capacity_bytes = 0;
  /// Compute of one unit.
  compute_spec compute;
  /// The link that brings expert weights into the device (PCIe into a GPU; DIMM-Link
  /// between DIMM-NDP units).
  link_spec weight_link;
  /// The link that carries activations to a run-in-place device and results back;
  /// unlimited for a device that computes where the activations are.
  link_spec activation_link;
  /// Bytes per second at which one unit's memory serves reads issued by other devices
  /// (TriMoE Eq. 2, 3 and 6); unlimited when such reads never contend.
  double host_read_bandwidth = unlimited_bandwidth;
  /// Bytes of one activation element crossing `activation_link` (2 for FP16/BF16).
  double activation_element_bytes = 2.0;
  /// How low-bit weights are stored, for footprints and reads.
  quant_format quant;

  /// Checks every field.
  ///
  /// Throws: `invalid_argument` naming the first bad field and its value.
  void validate() const {
    const std::string fn = "device_spec::validate(" + name + ")";
    const auto positive = [&](double v, const char* what) {
      if (!(v > 0.0)) detail::throw_invalid(fn, std::string(what) + " must be > 0", v);
    };
    const auto non_negative_finite = [&](double v, const char* what) {
      if (!(v >= 0.0) || !std::isfinite(v)) {
        detail::throw_invalid(fn, std::string(what) + " must be finite and >= 0", v);
      }
    };
    if (num_units == 0) detail::throw_invalid(fn, "num_units must be >= 1", num_units);
    if (execution == execution_kind::serial && num_units != 1) {
      detail::throw_invalid(fn, "a serial device has exactly 1 unit, num_units", num_units);
    }
    positive(compute.peak_flops, "compute.peak_flops");
    if (!std::isfinite(compute.peak_flops)) {
      detail::throw_invalid(fn, "compute.peak_flops must be finite", compute.peak_flops);
    }
    positive(compute.memory_bandwidth, "compute.memory_bandwidth");
    non_negative_finite(compute.launch_seconds, "compute.launch_seconds");
    positive(weight_link.bandwidth, "weight_link.bandwidth");
    non_negative_finite(weight_link.latency_seconds, "weight_link.latency_seconds");
    positive(activation_link.bandwidth, "activation_link.bandwidth");
    non_negative_finite(activation_link.latency_seconds, "activation_link.latency_seconds");
    positive(host_read_bandwidth, "host_read_bandwidth");
    positive(activation_element_bytes, "activation_element_bytes");
    if (!std::isfinite(activation_element_bytes)) {
      detail::throw_invalid(fn, "activation_element_bytes must be finite",
                            activation_element_bytes);
    }
  }
};

}  // namespace moepolicy
