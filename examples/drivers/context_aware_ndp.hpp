// The comparison of the context_aware_ndp driver as a function: the context-aware GPU +
// CXL-NDP system of Context-Aware GPU-NDP replayed on recorded routing on the timed model
// (sim/gpu_ndp_replay.hpp), beside MoNDE, a HOBBIT-like GPU-only system and its own ablations.
//
// For a trace: the GPU and CXL-NDP devices (by default the H100 (PCIe Gen4 x16) and CXL-NDP
// presets) priced with the trace's model shape; for each request with a prefill, the
// prefill↔decode similarity per layer; per system, time to first token, decode time per
// token and throughput, end-to-end latency, bytes copied and fetched, the quantisation loss
// (where a loss table matches the model: Mixtral-8x7B's, from
// ../shared/traces/mixtral-8x7b-mc), where the time went, the placement copy's overlap with
// decoding, and a projection over prompt and output lengths from the recorded routing.
#pragma once

#include <cstddef>
#include <filesystem>
#include <ostream>

#include "moepolicy/cost/device_spec.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::examples::context_aware_ndp {

struct options {
  /// Quantisation loss table (MC-MoE JSON); used when it exists and matches the model.
  std::filesystem::path loss_table;
  /// Calibration statistics (MC-MoE activation JSON); used when it exists and matches the
  /// model. Without them, a trace of several requests calibrates on its first request.
  std::filesystem::path calibration;
  /// K, experts per layer on the GPU (0: half of them).
  std::size_t gpu_experts = 0;
  /// Importance weight of activation counts against routing-score sums.
  double alpha = 0.5;
  /// Also print the similarity of every layer.
  bool per_layer = false;
  /// Print the projection over prompt and output lengths.
  bool projection = true;
  device_spec gpu = presets::h100_sxm_gen4();
  device_spec ndp = presets::cxl_ndp();
};

/// Replays `trace` and prints the comparison to `out`.
///
/// Throws: what the trace readers throw; `std::runtime_error` when no model preset matches.
void run(const std::filesystem::path& trace, const options& opt, std::ostream& out);

/// The same on `trace`, already read from `path` (which labels the output).
void run(const std::filesystem::path& path, const routing_trace& trace, const options& opt, std::ostream& out);

}  // namespace moepolicy::examples::context_aware_ndp
