// The trimoe driver's replay (seed 001 "TriMoE: Augmenting GPU with AMX-Enabled CPU and
// DIMM-NDP for High-Throughput MoE Inference via Offloading", §4.2–4.3, §5.2 Tab. 3,
// §5.3 Fig. 8): one recorded trace batched into decode steps, replayed through
// sim/trimoe_replay.hpp, and its tables printed.
#pragma once

#include <cstddef>
#include <filesystem>
#include <ostream>

#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/device_spec.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/sim/trimoe_replay.hpp"

namespace moepolicy::examples::trimoe {

/// What `run` replays on.
struct options {
  /// The machine (seed 001 Tab. 1 by default).
  device_spec gpu = presets::h100_pcie_gen5();
  device_spec cpu = presets::xeon_8470_amx();
  device_spec ndp = presets::dimm_ndp();
  /// B, concurrent sequences per step; 0: 64 for models of at most 8 experts, else 32.
  std::size_t batch = 0;
  /// α of the EMA load predictor (Eq. 8).
  double alpha = 0.3;
  /// Node limit of the exact solver per (step, layer).
  std::size_t exact_nodes = 1'000'000;
  /// The +Relayout window: `window_scale` × the layer's executed MoE makespan, or, when
  /// `window_seconds` > 0, that many seconds.
  double window_scale = 1.0;
  seconds window_seconds = 0.0;
  /// Experts per layer in GPU HBM under +Relayout; 0: the class layout's count.
  std::size_t gpu_slots = 0;
};

/// The library's result: every figure the tables print.
using result = trimoe_result;

/// Reads `trace`, matches its model preset, replays it and prints the tables to `out`.
///
/// Throws: `std::runtime_error` when no model preset matches the trace; what the trace
/// reader and the replay throw.
result run(const std::filesystem::path& trace, const options& opt, std::ostream& out);

}  // namespace moepolicy::examples::trimoe
