// The comparison of the context_aware_ndp driver as a function: the context-aware GPU +
// CXL-NDP system of seed 000 ("Context-Aware Mixture-of-Experts Inference on CXL-Enabled
// GPU-NDP Systems") replayed on recorded routing, beside its baselines.
//
// For a trace: the GPU and CXL-NDP devices (by default the H100 (PCIe Gen4 x16) and
// CXL-NDP presets) priced with the trace's model shape; for each request with a prefill,
// the prefill↔decode similarity per layer and, summed over the requests, per-token decode
// time, NDP-side time, bytes migrated and the quantisation loss of every system (loss only
// where a loss table matches the model: Mixtral-8x7B's, from ../shared/traces/mixtral-8x7b-mc).
#pragma once

#include <cstddef>
#include <filesystem>
#include <ostream>

#include "moepolicy/cost/device_spec.hpp"
#include "moepolicy/cost/presets.hpp"

namespace moepolicy::examples::context_aware_ndp {

struct options {
  /// Quantisation loss table (MC-MoE JSON); used when it exists and matches the model.
  std::filesystem::path loss_table;
  /// K, experts per layer on the GPU (0: half of them).
  std::size_t gpu_experts = 0;
  /// Importance weight of activation counts against routing-score sums.
  double alpha = 0.5;
  /// Also print the similarity of every layer.
  bool per_layer = false;
  device_spec gpu = presets::h100_sxm_gen4();
  device_spec ndp = presets::cxl_ndp();
};

/// Replays `trace` and prints the comparison to `out`.
///
/// Throws: what the trace readers throw; `std::runtime_error` when no model preset matches.
void run(const std::filesystem::path& trace, const options& opt, std::ostream& out);

}  // namespace moepolicy::examples::context_aware_ndp
