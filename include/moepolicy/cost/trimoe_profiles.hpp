// SPDX-License-Identifier: Apache-2.0
// moepolicy/cost/trimoe_profiles.hpp — f_calc tables for the TriMoE machine's GPU and AMX
// CPU (TriMoE §4.2: "we offline-profile both the GPU and CPU for various token counts,
// building lookup tables for f_calc_gpu(L_i) and f_calc_cpu(L_i)"), calibrated to the figures
// the paper states, as `profiled_cost` models; and the run-time choice between them and the
// roofline (`trimoe_compute_model`). Models `DeviceCost` through `profiled_cost` and
// `any_device_cost`.
//
// The paper publishes no table, only these figures, and each table below is the smallest
// curve through them. With W an expert's bytes at FP16, F = 2 · 3 · hidden · intermediate its
// FLOPs per token, and a device's spec giving peak (FLOP/s) and bw (its memory bandwidth):
//
// GPU (H100; §3.1 and Fig. 5a: "the H100 GPU requires at least 256 tokens per expert to reach
// 30% utilization, even when the expert is resident in HBM"):
//   f_gpu(L) = launch + W / bw + s · L,   s = max((256 · F / (0.30 · peak) − W / bw) / 256, F / peak)
//   — an affine kernel time whose intercept is one pass over the weights at the HBM bandwidth
//   (the floor any kernel pays at one token) and whose slope puts the utilisation
//   L · F / (peak · f_gpu(L)) at exactly 30% at 256 tokens. On the H100 PCIe preset (819.6
//   TFLOP/s, 2.04 TB/s) this gives, for any FP16 expert, 12% utilisation at 64 tokens, 30% at
//   256, 46% at 1024 and 57% as L grows (a roofline would give 64% at 256 tokens and reach the
//   peak at 402). The slope never beats the peak (the max), so the curve is a valid kernel
//   time for any GPU spec.
// AMX CPU (Xeon 8470; §3.2: AMX CPUs "deliver 10–40 TFLOPS when executing warm experts
// (processing tens to hundreds of tokens)"; §4.1: the 8470 "achieves 22% of a measured A100
// GEMM throughput"):
//   throughput anchors 10 TFLOP/s at 32 tokens ("tens"), 40 TFLOP/s at 256 ("hundreds") and
//   0.22 × 312 TFLOP/s (the A100's BF16 dense peak, NVIDIA's datasheet; the paper gives the
//   ratio, not the A100 figure) = 68.6 TFLOP/s at 2048, interpolated linearly in log L,
//   constant outside [32, 2048]; then
//   f_cpu(L) = launch + max(W / bw, L · F / thr(L))
//   — the weights stream from DRAM at the spec's bandwidth at least once (307.2 GB/s on the
//   preset: 1.15 ms for a Mixtral-8x7B expert, which is also what 32 tokens take at 10
//   TFLOP/s). The anchors are the 8470's (90.1 TFLOP/s peak); another CPU's throughput is
//   scaled by its peak / 90.1 TFLOP/s.
// DIMM-NDP: the paper evaluates its NDP unit with a cycle-accurate simulator, not a profile;
//   it stays the roofline (max of arithmetic at 256 GFLOP/s and the weight stream at the
//   DIMM's internal 153.6 GB/s, Eq. 4).
// Tables hold points at 1, 2, 4, …, 4096 tokens (`profiled_cost` interpolates between them
// and extends the last segment), at FP16 (the paper's precision; lower bitwidths use this
// table too, as `profiled_cost` documents).
//
// Applying the H100's utilisation curve or the 8470's throughput curve to another device (a
// machine file's GPU or CPU) assumes the curve's shape carries over; that is a modelling
// choice, stated here, not a measurement.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/any_device.hpp"
#include "moepolicy/cost/device_spec.hpp"
#include "moepolicy/cost/profiled.hpp"
#include "moepolicy/cost/roofline.hpp"

namespace moepolicy {

/// One anchor of a throughput curve: `flops_per_second` achieved at `tokens` tokens.
struct throughput_anchor {
  std::size_t tokens = 0;
  double flops_per_second = 0.0;
};

/// The figures the TriMoE tables are calibrated to (see the header).
struct trimoe_profile_config {
  /// GPU utilisation (achieved FLOP/s over peak) at `gpu_anchor_tokens` tokens, in (0, 1].
  double gpu_utilisation = 0.30;
  std::size_t gpu_anchor_tokens = 256;
  /// AMX throughput anchors on the reference CPU, tokens strictly increasing, FLOP/s
  /// non-decreasing.
  std::array<throughput_anchor, 3> cpu_anchors{{{32, 10.0 * tera}, {256, 40.0 * tera}, {2048, 0.22 * 312.0 * tera}}};
  /// Peak FLOP/s of the CPU the anchors were stated for (the Xeon 8470, TriMoE Tab. 1).
  double cpu_reference_peak = 90.1 * tera;
  /// Tokens of the largest table point: points at 1, 2, 4, … up to it (a power of 2, >= 2).
  std::size_t max_tokens = 4096;
};

/// How the replay prices expert compute on the GPU and the CPU.
enum class trimoe_compute_model : std::uint8_t {
  profiled,  ///< the tables of this header (the paper's f_calc lookup tables)
  roofline,  ///< the roofline of each spec (cost/roofline.hpp)
};

/// "profiled" or "roofline".
[[nodiscard]] constexpr std::string_view to_string(trimoe_compute_model m) noexcept {
  return m == trimoe_compute_model::profiled ? "profiled" : "roofline";
}

namespace detail {

inline void check_profile_config(const trimoe_profile_config& c, std::string_view fn) {
  if (!(c.gpu_utilisation > 0.0 && c.gpu_utilisation <= 1.0)) {
    throw_invalid(fn, "gpu_utilisation must be in (0, 1]", c.gpu_utilisation);
  }
  if (c.gpu_anchor_tokens == 0) throw_invalid(fn, "gpu_anchor_tokens must be > 0", c.gpu_anchor_tokens);
  if (c.max_tokens < 2 || (c.max_tokens & (c.max_tokens - 1)) != 0) {
    throw_invalid(fn, "max_tokens must be a power of 2 and >= 2", c.max_tokens);
  }
  if (!(c.cpu_reference_peak > 0.0) || !std::isfinite(c.cpu_reference_peak)) {
    throw_invalid(fn, "cpu_reference_peak must be finite and > 0", c.cpu_reference_peak);
  }
  for (std::size_t i = 0; i < c.cpu_anchors.size(); ++i) {
    const auto& a = c.cpu_anchors[i];
    if (a.tokens == 0 || !(a.flops_per_second > 0.0) || !std::isfinite(a.flops_per_second)) {
      throw_invalid(fn, "cpu_anchors need tokens > 0 and finite FLOP/s > 0, anchor", i);
    }
    if (i > 0 &&
        (a.tokens <= c.cpu_anchors[i - 1].tokens || a.flops_per_second < c.cpu_anchors[i - 1].flops_per_second)) {
      throw_invalid(fn, "cpu_anchors must rise in tokens and not fall in FLOP/s, anchor", i);
    }
  }
}

/// The reference CPU's throughput at `tokens`, linear in log(tokens) between anchors.
[[nodiscard]] inline double cpu_throughput(const trimoe_profile_config& c, double tokens) noexcept {
  const auto& a = c.cpu_anchors;
  if (tokens <= static_cast<double>(a.front().tokens)) return a.front().flops_per_second;
  for (std::size_t i = 1; i < a.size(); ++i) {
    if (tokens <= static_cast<double>(a[i].tokens)) {
      const double x0 = std::log(static_cast<double>(a[i - 1].tokens)), x1 = std::log(static_cast<double>(a[i].tokens));
      const double f = (std::log(tokens) - x0) / (x1 - x0);
      return a[i - 1].flops_per_second + f * (a[i].flops_per_second - a[i - 1].flops_per_second);
    }
  }
  return a.back().flops_per_second;
}

}  // namespace detail

/// The f_calc_gpu table of `gpu` for `shape`'s experts at FP16 (see the header).
///
/// Throws: `invalid_argument` when the spec or shape is invalid or the configuration is out
/// of range (naming the field).
[[nodiscard]] inline compute_profile trimoe_gpu_profile(const device_spec& gpu, const model_shape& shape,
                                                        const trimoe_profile_config& config = {}) {
  detail::check_profile_config(config, "trimoe_gpu_profile");
  gpu.validate();
  shape.validate();
  const double W = static_cast<double>(expert_bytes(shape, fp16, gpu.quant));
  const double F = shape.flops_per_token();
  const double peak = gpu.compute.peak_flops, bw = gpu.compute.memory_bandwidth;
  const double A = static_cast<double>(config.gpu_anchor_tokens);
  const double t0 = W / bw;
  const double slope = std::max((A * F / (config.gpu_utilisation * peak) - t0) / A, F / peak);
  compute_profile p{fp16, {}};
  for (std::size_t t = 1; t <= config.max_tokens; t *= 2) {
    p.points.push_back({t, gpu.compute.launch_seconds + t0 + slope * static_cast<double>(t)});
  }
  return p;
}

/// The f_calc_cpu table of `cpu` for `shape`'s experts at FP16 (see the header).
///
/// Throws: as `trimoe_gpu_profile`.
[[nodiscard]] inline compute_profile trimoe_cpu_profile(const device_spec& cpu, const model_shape& shape,
                                                        const trimoe_profile_config& config = {}) {
  detail::check_profile_config(config, "trimoe_cpu_profile");
  cpu.validate();
  shape.validate();
  const double W = static_cast<double>(expert_bytes(shape, fp16, cpu.quant));
  const double F = shape.flops_per_token();
  const double scale = cpu.compute.peak_flops / config.cpu_reference_peak;
  const double stream = W / cpu.compute.memory_bandwidth;
  compute_profile p{fp16, {}};
  for (std::size_t t = 1; t <= config.max_tokens; t *= 2) {
    const double L = static_cast<double>(t);
    const double thr = scale * detail::cpu_throughput(config, L);
    p.points.push_back({t, cpu.compute.launch_seconds + std::max(stream, L * F / thr)});
  }
  return p;
}

/// The GPU's cost model: the profiled table or the roofline.
///
/// Throws: as `trimoe_gpu_profile` and the models' constructors.
[[nodiscard]] inline any_device_cost trimoe_gpu_cost(const device_spec& gpu, const model_shape& shape,
                                                     trimoe_compute_model model = trimoe_compute_model::profiled,
                                                     const trimoe_profile_config& config = {}) {
  if (model == trimoe_compute_model::roofline) return roofline_cost{gpu, shape};
  std::vector<compute_profile> tables{trimoe_gpu_profile(gpu, shape, config)};
  return profiled_cost{gpu, shape, std::move(tables)};
}

/// The CPU's cost model: the profiled table or the roofline.
///
/// Throws: as `trimoe_cpu_profile` and the models' constructors.
[[nodiscard]] inline any_device_cost trimoe_cpu_cost(const device_spec& cpu, const model_shape& shape,
                                                     trimoe_compute_model model = trimoe_compute_model::profiled,
                                                     const trimoe_profile_config& config = {}) {
  if (model == trimoe_compute_model::roofline) return roofline_cost{cpu, shape};
  std::vector<compute_profile> tables{trimoe_cpu_profile(cpu, shape, config)};
  return profiled_cost{cpu, shape, std::move(tables)};
}

/// The DIMM-NDP units' cost model: the roofline under either choice (see the header).
///
/// Throws: as `roofline_cost`.
[[nodiscard]] inline any_device_cost trimoe_ndp_cost(const device_spec& ndp, const model_shape& shape) {
  return roofline_cost{ndp, shape};
}

}  // namespace moepolicy
