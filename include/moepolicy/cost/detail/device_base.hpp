// moepolicy/cost/detail/device_base.hpp — the parts of a device model that do not
// depend on how compute is priced: links, memory, execution kind, contention.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/device_spec.hpp"

namespace moepolicy::detail {

/// Shared by the reference models; holds a validated spec and model shape.
class device_base {
 public:
  device_base(device_spec spec, model_shape shape) : spec_(std::move(spec)), shape_(std::move(shape)) {
    spec_.validate();
    shape_.validate();
  }

  [[nodiscard]] std::string_view name() const noexcept { return spec_.name; }
  [[nodiscard]] const device_spec& spec() const noexcept { return spec_; }
  [[nodiscard]] const model_shape& shape() const noexcept { return shape_; }

  [[nodiscard]] seconds transfer_seconds(bytes n) const noexcept {
    return spec_.weight_link.seconds_for(n);
  }

  /// Activations in and results out: 2 × tokens × hidden × element bytes over the link,
  /// one latency each way.
  [[nodiscard]] seconds activation_transfer_seconds(std::size_t tokens) const noexcept {
    if (tokens == 0) return 0.0;
    const double one_way = static_cast<double>(tokens) * static_cast<double>(shape_.hidden_size) *
                           spec_.activation_element_bytes;
    return 2.0 * spec_.activation_link.latency_seconds + 2.0 * one_way / spec_.activation_link.bandwidth;
  }

  [[nodiscard]] bytes capacity_bytes() const noexcept { return spec_.capacity_bytes; }

  [[nodiscard]] bytes footprint_bytes(expert_key, bitwidth b) const noexcept {
    return expert_bytes(shape_, b, spec_.quant);
  }

  [[nodiscard]] execution_kind execution() const noexcept { return spec_.execution; }
  [[nodiscard]] std::size_t num_units() const noexcept { return spec_.num_units; }

  /// Dense work on the roofline of the spec's compute block, whichever model prices the
  /// experts: launch + max(flops / peak, read / memory bandwidth). A profiled model's
  /// tables describe expert kernels only, so its dense work is priced the same way.
  [[nodiscard]] seconds dense_seconds(double flops, bytes read) const noexcept {
    if (!(flops > 0.0) && read == 0) return 0.0;
    const auto& c = spec_.compute;
    return c.launch_seconds + std::max(std::max(flops, 0.0) / c.peak_flops, static_cast<double>(read) / c.memory_bandwidth);
  }

  [[nodiscard]] seconds contention_seconds(bytes n) const noexcept {
    if (n == 0) return 0.0;
    return static_cast<double>(n) / spec_.host_read_bandwidth;
  }

 protected:
  /// Time for the unit's compute to stream an expert's weights at `b` once.
  [[nodiscard]] seconds weight_stream_seconds(bitwidth b) const noexcept {
    return static_cast<double>(expert_bytes(shape_, b, spec_.quant)) / spec_.compute.memory_bandwidth;
  }

  device_spec spec_;
  model_shape shape_;
};

}  // namespace moepolicy::detail
