// The replay of the dynaexq driver as a function: DynaExq ("Dynamic Expert
// Quantization for Scalable Mixture-of-Experts Inference", §3.2–3.5) on recorded routing
// whose workload shifts. What is modelled and how is stated in drivers/dynaexq.cpp and
// printed with the results.
//
// The trace's requests named *-cal-* are the calibration set and those named *-eval-*, in
// file order, the serving stream; a trace without such names calibrates on the first half
// of its requests and streams the rest. Every forward pass (a prefill step or a decode step
// of a request) is one step of the replay.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

namespace moepolicy::examples::dynaexq {

struct options {
  /// Forward passes per update interval.
  std::size_t interval = 4;
  /// Modelled time of one forward pass, ms.
  double step_ms = 2.0;
  /// Host-to-device link, GB/s.
  double link_gbps = 64.0;
  /// Hotness EMA weight of the interval just ended.
  double alpha = 0.5;
  /// Additive hysteresis margin, in shares of a layer's selections.
  double margin = 0.01;
  /// Rank slack, in ranks.
  std::size_t slack = 2;
  /// Staging versions the budget keeps room for.
  std::size_t staging = 64;
  std::vector<double> sweep_margins{0.0, 0.01, 0.02, 0.05};
  std::vector<double> sweep_alphas{0.2, 0.5, 0.8};
};

/// One policy over the stream at the budget of half the experts at high precision.
struct policy_series {
  std::string label;
  /// Per update interval: the share of its activations served at high precision (NaN for
  /// an interval without activations).
  std::vector<double> high_share;
  /// Per update interval: the promotions and demotions published during it.
  std::vector<std::uint64_t> transitions;
  /// The share over the whole stream.
  double total_high_share = 0.0;
};

struct result {
  std::size_t interval_passes = 0;
  /// n_l of the budget the series are taken at, of `experts` per layer.
  std::size_t high_experts = 0;
  std::size_t experts = 0;
  /// Static, online, + margin, + rank slack.
  std::vector<policy_series> policies;
  /// Per interval, the share that interval's own top-n_l would serve (the clairvoyant,
  /// instantaneous bound).
  std::vector<double> oracle_high_share;
};

/// Replays `trace` and prints the tables to `out`.
///
/// Throws: what the trace readers throw; `std::runtime_error` when no model preset matches,
/// the trace has neither named calibration requests nor two requests, or the budget plan
/// fails.
result run(const std::filesystem::path& trace, const options& opt, std::ostream& out);

}  // namespace moepolicy::examples::dynaexq
