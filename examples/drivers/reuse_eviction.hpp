// SPDX-License-Identifier: Apache-2.0
// The reuse_eviction driver's comparison as a function: on recorded routing, the demand
// hit ratio of every online eviction policy — LRU, LFU, Edge-MoE's score-aware (§5.3), the
// HybriMoE-like EMA of the score, the Hawkeye-style policy that learns from Belady's MIN on
// the past (cache/hawkeye.hpp) and the predicted-reuse policy (cache/predicted_reuse.hpp)
// — beside Belady's MIN, per-layer and shared, at every capacity, and the gap of the best
// online policy to MIN; then two further tables:
//   - prefetching with the library's predictors (short-horizon and Markov of CXL-MoE §3, the
//     cross-layer transition counts): LRU, CXL-MoE's sticky LRU, predicted reuse, and ours,
//     the prediction-gated policy (cache/gated_prefetch.hpp), with every prefetched expert
//     counted as moved and the unused ones as wasted (untimed: prefetches land in time);
//   - the same prefetching on the timed model (sim/timed_cache.hpp, `replay_timed_prefetch`):
//     every prefetch and every miss a transfer on the host-to-GPU link of an H100 fetching from
//     host DRAM over PCIe 5 (the CPU-offload device of CXL-MoE §4, cost/presets.hpp), a
//     prefetched expert usable only once its transfer lands, a demand access to an expert
//     still on its way waiting for it, prefetches given only the link time demand misses
//     leave, and every layer's compute charged on the GPU from the model's shape
//     (sim/forward_pass.hpp); per policy the stall, link busy and decode time beside the
//     untimed counts (traces without a model preset are skipped, with a note);
//   - the byte-capacity variant: experts of two sizes (the hottest quarter of each layer at
//     FP16, the rest at 4 bits), a cache whose capacity is in bytes, every demand policy
//     and the size-aware policy (cache/size_aware_reuse.hpp) beside Belady's rule (a heuristic
//     here, not the optimum: with unequal sizes the optimum is NP-hard) and the space-time
//     upper bound (cache/space_time_bound.hpp); below it, how often pred-reuse's moving
//     average of past gaps lies within 2x of the next gap, and the hit ratios of the FP16
//     and the 4-bit experts under ema-score, pred-reuse and size-aware (where the size
//     weighting moves hits).
// The library holds the policies and the replays (sim/cache_replay.hpp); this file only
// chooses them and prints.
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
  /// Print the prefetching table, its timed counterpart and the byte-capacity table.
  bool prefetch = true;
  bool timed = true;
  bool byte_capacity = true;
  /// Threads the timed prefetching table's eight walks share: the output is the same for
  /// every value.
  std::size_t jobs = 1;
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
