// The trimoe driver's replay (TriMoE §4.2–4.3, §5.1.2 the baselines, §5.2 Tab. 3, §5.3
// Fig. 8): one recorded trace batched into decode steps, replayed through
// moepolicy/sim/trimoe_replay.hpp on the timed model, and its tables printed — per-layer and
// end-to-end times from the timeline, the ledger, the ablation with each row's added costs,
// the migrations, the solvers beside the exact optimum and the bounds, utilisation, the
// predictor, and a sweep of the hot / warm / cold thresholds; beside each paper figure, one
// line on what the model leaves out.
#pragma once

#include <cstddef>
#include <filesystem>
#include <ostream>

#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/device_spec.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/trimoe_profiles.hpp"
#include "moepolicy/sim/trimoe_replay.hpp"
#include "moepolicy/stats/analysis.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::examples::trimoe {

/// What `run` replays on.
struct options {
  /// The machine (TriMoE Tab. 1 by default).
  device_spec gpu = presets::h100_pcie_gen5();
  device_spec cpu = presets::xeon_8470_amx();
  device_spec ndp = presets::dimm_ndp();
  /// How the GPU's and the CPU's expert compute is priced.
  trimoe_compute_model compute = trimoe_compute_model::profiled;
  /// B, concurrent sequences per step; 0: 64 for models of at most 8 experts, else 32, halved
  /// until the trace gives at least 3 steps (a warm-up and two measured).
  std::size_t batch = 0;
  /// α of the EMA load predictor (Eq. 8).
  double alpha = 0.3;
  /// The hot / warm / cold thresholds (TriMoE §3.1 by default).
  share_classes_config classes = trimoe_paper_classes;
  /// Tokens each sequence had cached at the warm-up step.
  std::size_t prompt_tokens = 512;
  /// Node limit of the exact solver per (step, layer).
  std::size_t exact_nodes = 1'000'000;
  /// The overlap window of §4.3 and its settings.
  trimoe_window window = trimoe_window::attention_mlp;
  double window_scale = 1.0;
  seconds window_seconds = 0.0;
  /// GPU copies per layer; 0: the warm-up's hot experts (within HBM).
  std::size_t gpu_slots = 0;
  /// Whether to print the threshold sweep and the second window reading.
  bool sweep = true;
  /// Threads the replays share: the tables' systems, the second window reading and each
  /// point of the sweep are independent replays, each built and run as one task. The output
  /// does not depend on it; up to `jobs` replayers (each with its timelines) are held at once.
  std::size_t jobs = 1;
};

/// The library's result: every figure the tables print.
using result = trimoe_result;

/// Reads `trace`, matches its model preset, replays it and prints the tables to `out`.
///
/// Throws: `std::runtime_error` when no model preset matches the trace; what the trace
/// reader and the replay throw.
result run(const std::filesystem::path& trace, const options& opt, std::ostream& out);

/// The same on `trace`, already read from `path` (which labels the output).
result run(const std::filesystem::path& path, const routing_trace& trace, const options& opt, std::ostream& out);

}  // namespace moepolicy::examples::trimoe
