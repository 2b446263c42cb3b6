// Belady's next uses for the example drivers' demand bounds on decode streams.
#pragma once

#include <cstdint>

#include "moepolicy/sim/cache_replay.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::examples {

/// The next uses of the demand replay of `batched`, rebuilt a chunk at a time from an index
/// of a few bytes per key and chunk (sim/cache_replay.hpp) rather than held whole: 8 bytes
/// per access, beside the 4 of the access sequence they are computed from, would set the
/// report's peak on long traces. Belady's positions, and so its hit ratios, are the same.
[[nodiscard]] inline next_use_index chunked_next_uses(const routing_trace& batched) {
  const auto& i = batched.info();
  const auto keys = static_cast<std::uint64_t>(i.num_layers) * i.num_experts;
  return next_use_index(batched, cache_replay_config{},
                        next_use_index::balanced_chunk_accesses(batched.num_rows() * i.top_k, keys));
}

}  // namespace moepolicy::examples
