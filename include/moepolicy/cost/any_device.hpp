// moepolicy/cost/any_device.hpp — a device model chosen at run time. Models `DeviceCost`.
//
// Drivers and the command-line tool pick a model by name or from a machine file; they
// hold it as `any_device_cost`, a `std::variant` over the shipped models that forwards
// every requirement of the concept, so algorithms take it like any other model.
#pragma once

#include <cstddef>
#include <string_view>
#include <utility>
#include <variant>

#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/concepts.hpp"
#include "moepolicy/cost/profiled.hpp"
#include "moepolicy/cost/roofline.hpp"

namespace moepolicy {

/// One of the shipped device models.
class any_device_cost {
 public:
  using variant_type = std::variant<roofline_cost, profiled_cost>;

  any_device_cost(roofline_cost m) : model_(std::move(m)) {}  // NOLINT: implicit by design
  any_device_cost(profiled_cost m) : model_(std::move(m)) {}  // NOLINT: implicit by design

  [[nodiscard]] std::string_view name() const noexcept {
    return std::visit([](const auto& m) { return m.name(); }, model_);
  }
  [[nodiscard]] seconds compute_seconds(expert_key e, bitwidth b, std::size_t tokens) const noexcept {
    return std::visit([&](const auto& m) { return m.compute_seconds(e, b, tokens); }, model_);
  }
  [[nodiscard]] seconds transfer_seconds(bytes n) const noexcept {
    return std::visit([&](const auto& m) { return m.transfer_seconds(n); }, model_);
  }
  [[nodiscard]] seconds activation_transfer_seconds(std::size_t tokens) const noexcept {
    return std::visit([&](const auto& m) { return m.activation_transfer_seconds(tokens); }, model_);
  }
  [[nodiscard]] bytes capacity_bytes() const noexcept {
    return std::visit([](const auto& m) { return m.capacity_bytes(); }, model_);
  }
  [[nodiscard]] bytes footprint_bytes(expert_key e, bitwidth b) const noexcept {
    return std::visit([&](const auto& m) { return m.footprint_bytes(e, b); }, model_);
  }
  [[nodiscard]] execution_kind execution() const noexcept {
    return std::visit([](const auto& m) { return m.execution(); }, model_);
  }
  [[nodiscard]] std::size_t num_units() const noexcept {
    return std::visit([](const auto& m) { return m.num_units(); }, model_);
  }
  [[nodiscard]] seconds dense_seconds(double flops, bytes read) const noexcept {
    return std::visit([&](const auto& m) { return m.dense_seconds(flops, read); }, model_);
  }
  [[nodiscard]] seconds contention_seconds(bytes n) const noexcept {
    return std::visit([&](const auto& m) { return m.contention_seconds(n); }, model_);
  }

  /// The held model, for callers that need its own members.
  [[nodiscard]] const variant_type& model() const noexcept { return model_; }

 private:
  variant_type model_;
};

static_assert(DeviceCost<any_device_cost>);
static_assert(DenseComputeCost<any_device_cost>);

}  // namespace moepolicy
