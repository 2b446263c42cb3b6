// moepolicy/cost/concepts.hpp — the device-cost extension points.
//
// Every algorithm that prices work on a device (placement, makespan scheduling, cache
// routing, CPU/transfer balancing) takes its device through these concepts, so that a
// GPU, a CPU, a CXL-NDP device and DIMM-NDP units are told apart only by their models,
// never by special cases in the algorithms. They compose:
//
//   ComputeCost && TransferCost && ActivationTransferCost && MemoryModel
//     && ExecutionModel && ContentionModel  ->  DeviceCost
//
// The timed model of serving (sim/timeline.hpp) also prices the work around the experts
// (attention, dense layers, the router, the output head) on the device that runs it:
// `DenseComputeCost`, which every shipped model provides too.
//
// Shipped models: `roofline_cost` (cost/roofline.hpp), `profiled_cost`
// (cost/profiled.hpp) and the run-time choice `any_device_cost` (cost/any_device.hpp).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/units.hpp"

namespace moepolicy {

/// Whether a device is one processor that runs its experts one after another (GPU,
/// CPU: their times add up, TriMoE Eq. 5), or a set of identical units that run in
/// parallel, each only the experts whose weights it holds (DIMM-NDP, TriMoE §4.2).
enum class execution_kind : std::uint8_t { serial, parallel_units };

/// Prices running an expert on a device whose memory already holds its weights.
///
/// For `const C& c`, `expert_key e`, `bitwidth b`, `std::size_t t`:
///   1. `c.compute_seconds(e, b, t)` is finite and >= 0, and 0 when `t == 0`;
///   2. it is non-decreasing in `t`;
///   3. for a device whose compute benefits from low precision it is non-increasing
///      as `b` falls (Context-Aware GPU-NDP §2.3); other devices may ignore `b` for compute;
///   4. calls are const, deterministic, noexcept and safe to make concurrently.
template <class C>
concept ComputeCost = requires(const C& c, expert_key e, bitwidth b, std::size_t tokens) {
  { c.compute_seconds(e, b, tokens) } -> std::convertible_to<seconds>;
};

/// Prices moving weights into the device over its link.
///
/// For `const C& c`, `bytes n`:
///   1. `c.transfer_seconds(n)` is finite and >= 0, 0 when `n == 0`, non-decreasing in `n`;
///   2. for a link of bandwidth B and latency λ it equals λ + n / B (CXL-MoE §2);
///   3. calls are const, deterministic, noexcept and safe to make concurrently.
template <class C>
concept TransferCost = requires(const C& c, bytes n) {
  { c.transfer_seconds(n) } -> std::convertible_to<seconds>;
};

/// Prices shipping a batch's activations to a run-in-place device and its results back.
///
/// For `const C& c`, `std::size_t t`:
///   1. `c.activation_transfer_seconds(t)` is finite and >= 0, 0 when `t == 0`,
///      non-decreasing in `t`;
///   2. it is 0 for a device that computes where the activations already are;
///   3. calls are const, deterministic, noexcept and safe to make concurrently.
template <class C>
concept ActivationTransferCost = requires(const C& c, std::size_t tokens) {
  { c.activation_transfer_seconds(tokens) } -> std::convertible_to<seconds>;
};

/// Capacity of a device (of one unit, for parallel devices) and the footprint of an
/// expert at a bitwidth.
///
/// For `const C& c`, `expert_key e`, `bitwidth b`:
///   1. `c.capacity_bytes()` is the memory one unit offers to expert weights;
///   2. `c.footprint_bytes(e, b)` is > 0 and non-decreasing in `b`;
///   3. calls are const, deterministic, noexcept and safe to make concurrently.
template <class C>
concept MemoryModel = requires(const C& c, expert_key e, bitwidth b) {
  { c.capacity_bytes() } -> std::convertible_to<bytes>;
  { c.footprint_bytes(e, b) } -> std::convertible_to<bytes>;
};

/// Whether the device is one serial processor or several parallel units.
///
/// For `const C& c`:
///   1. `c.execution()` is `serial` or `parallel_units`;
///   2. `c.num_units()` is >= 1, and exactly 1 for a serial device.
template <class C>
concept ExecutionModel = requires(const C& c) {
  { c.execution() } -> std::same_as<execution_kind>;
  { c.num_units() } -> std::convertible_to<std::size_t>;
};

/// Prices the time one unit's memory is busy serving weight reads issued by *other*
/// devices — TriMoE Eq. 6's contention term, and the T_DRAM read of Eq. 2–3.
///
/// For `const C& c`, `bytes n`:
///   1. `c.contention_seconds(n)` is finite and >= 0, 0 when `n == 0`, non-decreasing;
///   2. a read striped over all `u` units of `n` bytes busies each unit for
///      `contention_seconds(ceil(n / u))`; a read of an expert localised on one unit
///      busies that unit for `contention_seconds(n)`.
template <class C>
concept ContentionModel = requires(const C& c, bytes n) {
  { c.contention_seconds(n) } -> std::convertible_to<seconds>;
};

/// Prices dense work that is not an expert: a kernel of `flops` arithmetic that reads
/// `read` bytes from the device's own memory (attention with its KV cache, a dense FFN,
/// the router, the output head).
///
/// For `const C& c`, `double flops`, `bytes read`:
///   1. `c.dense_seconds(flops, read)` is finite and >= 0, and 0 when both are 0;
///   2. it is non-decreasing in `flops` and in `read`;
///   3. calls are const, deterministic, noexcept and safe to make concurrently.
template <class C>
concept DenseComputeCost = requires(const C& c, double flops, bytes read) {
  { c.dense_seconds(flops, read) } -> std::convertible_to<seconds>;
};

/// Whether a model prices every expert of its model alike: its `compute_seconds` and
/// `footprint_bytes` do not read the `expert_key` (all experts of a layer have one shape),
/// so a caller may take a price once per token count or bitwidth and reuse it for every
/// expert, with the same values. A model says so with
/// `static constexpr bool key_independent = true;` (`roofline_cost` does); without it,
/// callers assume prices differ by expert.
template <class C>
inline constexpr bool key_independent_cost = requires {
  requires C::key_independent;
};

/// A complete device: everything above plus a name to print.
template <class C>
concept DeviceCost = ComputeCost<C> && TransferCost<C> && ActivationTransferCost<C> &&
                     MemoryModel<C> && ExecutionModel<C> && ContentionModel<C> &&
                     requires(const C& c) {
                       { c.name() } -> std::convertible_to<std::string_view>;
                     };

}  // namespace moepolicy
