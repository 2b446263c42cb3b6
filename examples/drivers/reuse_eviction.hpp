// SPDX-License-Identifier: Apache-2.0
// The reuse_eviction driver's comparison as a function: on recorded routing, the demand
// hit ratio of every online eviction policy — LRU, LFU, Edge-MoE's score-aware (§5.3), the
// HybriMoE-like EMA of the score, the Hawkeye-style policy that learns from Belady's MIN on
// the past (cache/hawkeye.hpp) and the predicted-reuse policy (cache/predicted_reuse.hpp)
// — beside Belady's MIN, per-layer and shared, at every capacity, and the gap of the best
// online policy to MIN. The library holds the policies and the replay
// (sim/cache_replay.hpp); this file only chooses them and prints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::examples::reuse_eviction {

struct options {
  /// Capacities per layer, in experts (empty: every capacity 1 … E − 1 when E <= 64, else
  /// E/32, 2·E/32, … ). The shared cache holds num_layers times as many.
  std::vector<std::uint64_t> capacities;
  /// Replay per-layer pools, one shared pool, or both.
  bool per_layer = true;
  bool shared = true;
  /// Print the hit counts (not only the ratios).
  bool counts = false;
};

/// Reads the trace at `path` with `io::read_trace` (the WARP OLMoE and Kimi-Linear decode
/// files included: io/warp_jsonl.hpp).
///
/// Throws: what `io::read_trace` throws.
[[nodiscard]] routing_trace load(const std::filesystem::path& path);

/// Replays `trace` (named `label`) through every policy at every capacity and prints the
/// tables to `out`.
void run(const routing_trace& trace, const std::string& label, const options& opt, std::ostream& out);

}  // namespace moepolicy::examples::reuse_eviction
