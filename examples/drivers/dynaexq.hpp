// The replay of the dynaexq driver as a function: DynaExq ("Dynamic Expert
// Quantization for Scalable Mixture-of-Experts Inference", §3.2–3.5) on recorded routing
// whose workload shifts. What is modelled and how is stated in drivers/dynaexq.cpp and
// printed with the results.
//
// The trace's requests named *-cal-* are the calibration set and those named *-eval-* the
// serving requests; a trace without such names calibrates on the first half of its requests
// and serves the rest. Two serving streams are built from the serving requests: `recorded`
// (each once, in file order) and `phased` (each replayed `phase_repeats` times back to back,
// in file order, so that each request forms a workload phase). Every forward pass (a prefill
// step or a decode step of a request) is one step of the replay.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::examples::dynaexq {

struct options {
  /// Hotness update interval, ms of modelled time (DynaExq §3.5: "a fixed interval measured
  /// in time").
  double interval_ms = 20.0;
  /// Modelled time of one forward pass, ms.
  double step_ms = 2.0;
  /// Host-to-device link, GB/s.
  double link_gbps = 64.0;
  /// Hotness EMA weight of the interval just ended (its memory is about 1 / alpha intervals).
  double alpha = 0.2;
  /// Additive hysteresis margin, in shares of a layer's selections.
  double margin = 0.01;
  /// Rank slack, in ranks.
  std::size_t slack = 2;
  /// Staging blocks k of the temporary pool.
  std::size_t staging = 64;
  /// Times each serving request is replayed back to back in the phased stream.
  std::size_t phase_repeats = 8;
  /// Reserve a transition's budget when the worker issues it, not when it is requested
  /// (DynaExq §3.4 admits at enqueue).
  bool admit_at_issue = false;
  /// Resolve every routed expert through its handle in the pass's pinned window (the
  /// general path). Otherwise each replay keeps the tier every expert resolves to, and in
  /// each pass's window re-resolves only the experts whose transitions that pass's step
  /// published: a tier changes only by a publication, and the pipeline logs every one, so
  /// both give the same tiers (the golden test runs both).
  bool resolve_each_access = false;
  /// Run replays that share the hotness inputs, the budget and the target rule once, for
  /// every table row that shows them (they differ only in their label). Off: each row's
  /// replay runs on its own (the general path; the golden test runs both).
  bool share_equal_replays = true;
  /// Most points of each per-interval series of the result (for plots), >= 1: a stream of
  /// more update intervals merges ⌈intervals / series_points⌉ consecutive intervals into
  /// each point (examples/common/interval_points.hpp), so that the series, and the plots
  /// drawn from them, do not grow with the trace.
  std::size_t series_points = 1000;
  std::vector<double> sweep_margins{0.0, 0.01, 0.02, 0.05};
  std::vector<double> sweep_alphas{0.05, 0.1, 0.2, 0.5};
  std::vector<double> sweep_intervals_ms{4.0, 10.0, 20.0, 50.0};
  /// Threads the groups of replays share: replays that share the hotness inputs (online or
  /// not, alpha, interval) step together as one group, and each group is one task. The
  /// output does not depend on it; up to `jobs` groups (each with its replays' pools) are
  /// held at once.
  std::size_t jobs = 1;
};

/// One policy over a stream at the budget of half the experts at high precision.
struct policy_series {
  std::string label;
  /// Per point (`stream_result::intervals_per_point` update intervals): the share of its
  /// activations served at high precision (NaN for a point without activations).
  std::vector<double> high_share;
  /// Per point: the promotions and demotions published, per interval (their mean over the
  /// point's intervals; each interval's count when a point is one interval).
  std::vector<double> transitions;
  /// The share over the whole stream.
  double total_high_share = 0.0;
};

/// One serving stream's series, for plots.
struct stream_result {
  /// "recorded" or "phased".
  std::string name;
  /// How the stream is built, in words.
  std::string description;
  double interval_ms = 0.0;
  /// The stream's update intervals, and how many consecutive ones each point of the series
  /// merges (1 unless they outnumber `options::series_points`).
  std::size_t intervals = 0;
  std::size_t intervals_per_point = 1;
  /// Per point: modelled time of the stream at the end of its last interval's last pass, ms.
  std::vector<double> interval_end_ms;
  /// Static, online, + margin, + rank slack.
  std::vector<policy_series> policies;
  /// Per point, the share its intervals' own top-n_l would serve (the clairvoyant,
  /// instantaneous bound), over its activations.
  std::vector<double> oracle_high_share;
};

struct result {
  /// n_l of the budget the series are taken at, of `experts` per layer.
  std::size_t high_experts = 0;
  std::size_t experts = 0;
  /// Recorded, then phased.
  std::vector<stream_result> streams;
};

/// Replays `trace` and prints the tables to `out`.
///
/// Throws: what the trace readers throw; `std::runtime_error` when no model preset matches,
/// the trace has neither named calibration requests nor two requests, or the budget plan
/// fails; `std::invalid_argument` when `opt.series_points` is 0.
result run(const std::filesystem::path& trace, const options& opt, std::ostream& out);

/// The same on `trace`, already read from `path` (which labels the output).
result run(const std::filesystem::path& path, const routing_trace& trace, const options& opt, std::ostream& out);

}  // namespace moepolicy::examples::dynaexq
