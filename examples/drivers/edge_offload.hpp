// The edge_offload driver's comparison as a function: the importance-driven expert
// scheduler of Edge-MoE (§4.2, §5.1–5.4) against its baselines on recorded decode routing,
// on the timed model (sim/edge_replay.hpp), priced on the paper's three edge settings
// (Tab. 1; presets in cost/presets.hpp) or on a given GPU and CPU. The library holds the
// systems; this file only chooses them and prints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <vector>

#include "moepolicy/cost/device_spec.hpp"
#include "moepolicy/sim/decode_streams.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::examples::edge_offload {

struct options {
  /// Concurrent decode streams to run.
  std::vector<std::uint32_t> batches{1, 3};
  /// Router thresholds alpha of the sweep (run only on traces with full router scores).
  std::vector<double> alphas{0.1, 0.2, 0.3, 0.4, 0.5};
  /// Cache sizes, as fractions of all experts, for a model that fits the GPU whole.
  std::vector<double> fractions{0.25, 0.5};
  /// A GPU to run instead of the paper's three settings (router alpha 0.3).
  std::optional<device_spec> gpu;
  /// A CPU instead of the paper's (6 cores of a Ryzen 9 5900X).
  std::optional<device_spec> cpu;
  /// When set, the timed replays' rows go to it, and `run` plans their total first.
  replay_progress* progress = nullptr;
  /// Threads each lockstep replay's systems share (`edge_replay_config::jobs`), and that form
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

/// Prints the devices `run` prices on.
void print_settings(const options& opt, std::ostream& out);

/// Replays the decode steps of `trace` on every setting and prints the tables to `out`.
///
/// Throws: what the trace readers and the replay throw; `std::runtime_error` when no model
/// preset matches.
void run(const std::filesystem::path& trace, const options& opt, std::ostream& out);

/// The same on `trace`, already read from `path` (which labels the output).
void run(const std::filesystem::path& path, const routing_trace& trace, const options& opt, std::ostream& out);

}  // namespace moepolicy::examples::edge_offload
