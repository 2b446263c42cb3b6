// moepolicy/sched/gpu_cpu_ndp.hpp — prices a decode step's activated experts on a
// GPU + AMX CPU + DIMM-NDP system (TriMoE, "TriMoE: Augmenting GPU with AMX-Enabled
// CPU and DIMM-NDP for High-Throughput MoE Inference via Offloading", §4.2, Eq. 1–4 and
// the contention term of Eq. 6) and fills a `makespan_problem`.
//
// The three devices are `DeviceCost` models: a serial GPU, a serial CPU, and a
// parallel-units DIMM-NDP device whose `num_units()` is the number of DIMMs D. With W_i
// the expert's bytes at its bitwidth, L_i its tokens and M_i its layout, each term of the
// paper maps onto one concept call:
//
//   paper                    concept call                                         model
//   W_i                      dimm.footprint_bytes(key, bits)       the host copy's size
//   f_calc_gpu(L_i)          gpu.compute_seconds(key, bits, L_i)    roofline or profiled
//   f_calc_cpu(L_i)          cpu.compute_seconds(key, bits, L_i)    roofline or profiled
//   T_PCIe(W_i)              gpu.transfer_seconds(W_i)              GPU weight link
//   T_DRAM(W_i, striped)     dimm.contention_seconds(ceil(W_i / D)) each DIMM serves 1/D
//   T_DRAM(W_i, localized)   dimm.contention_seconds(W_i)           the home DIMM alone
//   max(f_calc_ndp(L_i),     dimm.compute_seconds(key, bits, L_i)   see below
//       T_Internal(W_i))
//
//   Eq. 1  T_GPU_Hit  = f_calc_gpu(L)
//   Eq. 2  T_GPU_Miss = max(f_calc_gpu(L), T_PCIe(W), T_DRAM(W, M))
//   Eq. 3  T_CPU      = max(f_calc_cpu(L), T_DRAM(W, M))
//   Eq. 4  T_NDP      = max(f_calc_ndp(L), T_Internal(W))     localized experts only
//   Eq. 6  each GPU-miss or CPU read adds T_DRAM to every home DIMM (all D when striped)
//
// Decisions, documented:
//   - T_Internal is *inside* the NDP model's compute_seconds: the roofline model returns
//     max(L · FLOPs / peak, W / memory_bandwidth), which is Eq. 4 with memory_bandwidth the
//     DIMM's internal 153.6 GB/s (presets::dimm_ndp); a profiled NDP table measures both.
//     Adding a separate W / bandwidth term would count the weight stream twice.
//   - T_DRAM comes from the DIMM model's contention_seconds, per the `ContentionModel`
//     contract: with presets::dimm_ndp (19.2 GB/s of host bandwidth per DIMM) a striped
//     read takes W / 307.2 GB/s on each DIMM and a localized one W / 19.2 GB/s on its home.
//     The same number is the read term inside Eq. 2–3 and the busy time Eq. 6 adds.
//   - A resident expert's GPU run reads HBM, not the DIMMs: it adds no contention.
//   - Activations: Eq. 3–4 leave out shipping activations to the CPU or a DIMM and back.
//     `activation_transfer = true` adds `activation_transfer_seconds(L)` of the executing
//     model to T_CPU and T_NDP (after the max: activations arrive before compute starts).
//     Off by default, so that the costs are exactly Eq. 1–4.
//   - The GPU is always an option (any expert can be fetched), so every problem has a
//     schedule; `use_cpu` / `use_ndp` switch the other two off (the paper's GPU-NDP and
//     GPU-CPU baselines and ablations, §5.3).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/concepts.hpp"
#include "moepolicy/sched/problem.hpp"

namespace moepolicy {

/// One activated expert of a step, as the router and the placement state give it.
struct step_expert {
  expert_key key{};
  /// L_i: tokens routed to the expert this step, >= 1.
  std::uint32_t load = 0;
  /// M_i.
  expert_layout layout{};
  /// Whether its weights are in GPU HBM.
  bool gpu_resident = false;
  /// The precision its weights are stored at.
  bitwidth bits = fp16;
};

/// Options of `gpu_cpu_ndp_system`.
struct gpu_cpu_ndp_config {
  /// Whether experts may run on the CPU.
  bool use_cpu = true;
  /// Whether localized experts may run on their DIMM's NDP unit.
  bool use_ndp = true;
  /// Whether T_CPU and T_NDP include shipping activations (not in Eq. 3–4; see above).
  bool activation_transfer = false;
};

/// The three devices of a GPU + CPU + DIMM-NDP system, pricing experts by Eq. 1–4, 6.
template <DeviceCost Gpu, DeviceCost Cpu, DeviceCost Dimm>
class gpu_cpu_ndp_system {
 public:
  /// Throws: `invalid_argument` when the GPU or CPU model is not serial, the DIMM model is
  /// not `parallel_units`, or its unit count is not in [1, 65534].
  gpu_cpu_ndp_system(Gpu gpu, Cpu cpu, Dimm dimm, gpu_cpu_ndp_config config = {})
      : gpu_(std::move(gpu)), cpu_(std::move(cpu)), dimm_(std::move(dimm)), config_(config) {
    constexpr std::string_view fn = "gpu_cpu_ndp_system";
    if (gpu_.execution() != execution_kind::serial) detail::throw_invalid(fn, "the GPU model must be serial, got parallel_units");
    if (cpu_.execution() != execution_kind::serial) detail::throw_invalid(fn, "the CPU model must be serial, got parallel_units");
    if (dimm_.execution() != execution_kind::parallel_units) {
      detail::throw_invalid(fn, "the DIMM-NDP model must be parallel_units, got serial");
    }
    const std::size_t d = dimm_.num_units();
    if (d == 0 || d >= expert_layout::striped_home) {
      detail::throw_invalid(fn, "the DIMM-NDP model's num_units must be in [1, 65534]", d);
    }
    dimms_ = d;
  }

  [[nodiscard]] const Gpu& gpu() const noexcept { return gpu_; }
  [[nodiscard]] const Cpu& cpu() const noexcept { return cpu_; }
  [[nodiscard]] const Dimm& dimm() const noexcept { return dimm_; }
  [[nodiscard]] const gpu_cpu_ndp_config& config() const noexcept { return config_; }
  /// D, the DIMM-NDP units.
  [[nodiscard]] std::size_t num_dimms() const noexcept { return dimms_; }

  /// W_i: the expert's bytes in host memory.
  [[nodiscard]] bytes weight_bytes(expert_key key, bitwidth bits) const noexcept {
    return dimm_.footprint_bytes(key, bits);
  }
  /// T_DRAM(W_i, M_i): the time each home DIMM serves one read of the weights.
  [[nodiscard]] seconds dram_seconds(expert_key key, bitwidth bits, expert_layout layout) const noexcept {
    const bytes w = weight_bytes(key, bits);
    if (layout.is_localized()) return dimm_.contention_seconds(w);
    const auto d = static_cast<bytes>(dimms_);
    return dimm_.contention_seconds((w + d - 1) / d);
  }
  /// Eq. 1.
  [[nodiscard]] seconds gpu_hit_seconds(expert_key key, bitwidth bits, std::uint32_t load) const noexcept {
    return gpu_.compute_seconds(key, bits, load);
  }
  /// Eq. 2.
  [[nodiscard]] seconds gpu_miss_seconds(expert_key key, bitwidth bits, std::uint32_t load,
                                         expert_layout layout) const noexcept {
    return std::max({gpu_.compute_seconds(key, bits, load), gpu_.transfer_seconds(weight_bytes(key, bits)),
                     dram_seconds(key, bits, layout)});
  }
  /// Eq. 3 (plus activations when configured).
  [[nodiscard]] seconds cpu_seconds(expert_key key, bitwidth bits, std::uint32_t load,
                                    expert_layout layout) const noexcept {
    const seconds t = std::max(cpu_.compute_seconds(key, bits, load), dram_seconds(key, bits, layout));
    return config_.activation_transfer ? t + cpu_.activation_transfer_seconds(load) : t;
  }
  /// Eq. 4 (plus activations when configured), for an expert localized on its DIMM.
  [[nodiscard]] seconds ndp_seconds(expert_key key, bitwidth bits, std::uint32_t load) const noexcept {
    const seconds t = dimm_.compute_seconds(key, bits, load);
    return config_.activation_transfer ? t + dimm_.activation_transfer_seconds(load) : t;
  }

  /// The row of prices of one expert.
  ///
  /// Complexity: a handful of model calls; no allocation.
  [[nodiscard]] expert_costs price(const step_expert& e) const noexcept {
    expert_costs c;
    c.key = e.key;
    c.load = e.load;
    c.layout = e.layout;
    c.gpu_resident = e.gpu_resident;
    c.dram = dram_seconds(e.key, e.bits, e.layout);
    c.exec[0] = e.gpu_resident ? gpu_hit_seconds(e.key, e.bits, e.load) : gpu_miss_seconds(e.key, e.bits, e.load, e.layout);
    c.exec[1] = config_.use_cpu ? cpu_seconds(e.key, e.bits, e.load, e.layout) : not_allowed;
    c.exec[2] = (config_.use_ndp && e.layout.is_localized()) ? ndp_seconds(e.key, e.bits, e.load) : not_allowed;
    return c;
  }

  /// Clears `out` and adds every expert of `experts`.
  ///
  /// Preconditions: `out.num_dimms() == num_dimms()`; every load >= 1; every localized
  /// home < `num_dimms()`.
  /// Throws: `invalid_argument` naming the first violated precondition.
  /// Complexity: O(experts); allocates only when `out` is fuller than ever before.
  void build(std::span<const step_expert> experts, makespan_problem& out) const {
    check_out(out, "gpu_cpu_ndp_system::build");
    out.clear();
    for (const auto& e : experts) {
      if (e.load == 0) detail::throw_invalid("gpu_cpu_ndp_system::build", "every load must be >= 1, expert", e.key.expert);
      out.add(price(e));
    }
  }

  /// Clears `out` and adds the activated experts of one layer: expert e with `loads[e] > 0`
  /// tokens, layout `layouts[e]`, resident when `resident[e] != 0`, at `bits`.
  ///
  /// Preconditions: `loads`, `layouts` and `resident` have one entry per expert of the layer;
  /// `out.num_dimms() == num_dimms()`.
  /// Throws: `invalid_argument` on a size mismatch or a home out of range.
  /// Complexity: O(experts of the layer); no allocation beyond `out`'s capacity.
  void build_layer(layer_id layer, std::span<const std::uint32_t> loads, std::span<const expert_layout> layouts,
                   std::span<const std::uint8_t> resident, bitwidth bits, makespan_problem& out) const {
    constexpr std::string_view fn = "gpu_cpu_ndp_system::build_layer";
    check_out(out, fn);
    const auto need = [&](const char* what, std::size_t got) {
      if (got != loads.size()) {
        detail::throw_invalid(fn, std::string(what) + " must have one entry per load (" + std::to_string(loads.size()) + ")",
                              got);
      }
    };
    need("layouts", layouts.size());
    need("resident", resident.size());
    out.clear();
    for (std::size_t e = 0; e < loads.size(); ++e) {
      if (loads[e] == 0) continue;
      out.add(price({expert_key{layer, static_cast<expert_id>(e)}, loads[e], layouts[e], resident[e] != 0, bits}));
    }
  }

 private:
  void check_out(const makespan_problem& out, std::string_view fn) const {
    if (out.num_dimms() != dimms_) {
      detail::throw_invalid(fn, "the problem's num_dimms must equal the DIMM model's " + std::to_string(dimms_),
                            out.num_dimms());
    }
  }

  Gpu gpu_;
  Cpu cpu_;
  Dimm dimm_;
  gpu_cpu_ndp_config config_;
  std::size_t dimms_ = 1;
};

}  // namespace moepolicy
