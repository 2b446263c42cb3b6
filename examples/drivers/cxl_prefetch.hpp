// The cxl_prefetch driver's comparison as a function: CXL-MoE (§3–4) and its baselines
// replayed on recorded decode routing on the timed model (sim/offload_replay.hpp) — the
// expert cache by size, the ablations of its predictor and policy, CXL against the PCIe
// host path, and B concurrent streams. The library holds the systems; this file only
// chooses them and prints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <ostream>
#include <vector>

#include "moepolicy/cost/device_spec.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/predict/short_horizon_predictor.hpp"
#include "moepolicy/sim/decode_streams.hpp"
#include "moepolicy/sim/offload_replay.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::examples::cxl_prefetch {

struct options {
  /// GPU expert cache sizes in GB (10^9 bytes) of FP16 experts (empty: a list suited to
  /// the model, unless `cache_experts` is given).
  std::vector<double> cache_gb;
  /// GPU expert cache sizes in experts.
  std::vector<std::uint64_t> cache_experts;
  /// B, concurrent decode streams of the concurrency sweep.
  std::vector<std::size_t> concurrency{1, 4, 8, 16, 32};
  /// CXL-MoE's predictor: m past tokens, n ahead, and the model.
  std::uint32_t history = short_horizon_config{}.history;
  std::uint32_t lookahead = short_horizon_config{}.horizon;
  offload_predictor predictor = offload_predictor::frequency;
  /// The GPU whose missing experts come over CXL, and the same GPU fetching from host DRAM:
  /// each system's link is its GPU's weight link.
  device_spec cxl_gpu = presets::h100_cxl_expander();
  device_spec pcie_gpu = presets::h100_host_pcie5();
  /// When set, the timed replays' rows go to it, and `run` plans their total first.
  replay_progress* progress = nullptr;
  /// Threads each lockstep replay's systems share (`offload_replay_config::jobs`), and that form
  /// each set of decode streams (`make_decode_streams`): the output is the same for every value.
  std::size_t jobs = 1;
  /// When set, gives the decode streams the replays run (`streams(c)`) in place of
  /// `make_decode_streams(trace, c, jobs)`; it must return those same streams, and may share them
  /// with other replays (the report's `shared_decode_streams`: the driver drops each before
  /// asking for the next). Then `trace` need hold no more than its info, requests and
  /// recorded prefills (the report forms the streams from the canonical file's map,
  /// `file_decode_streams`, and `prefill_steps`).
  std::function<std::shared_ptr<const decode_streams>(const decode_streams_config&)> streams;
};

/// Replays the decode steps of `trace` and prints the tables to `out`.
///
/// Throws: what the trace readers and the replay throw; `std::runtime_error` when no model
/// preset matches.
void run(const std::filesystem::path& trace, const options& opt, std::ostream& out);

/// The same on `trace`, already read from `path` (which labels the output).
void run(const std::filesystem::path& path, const routing_trace& trace, const options& opt, std::ostream& out);

}  // namespace moepolicy::examples::cxl_prefetch
