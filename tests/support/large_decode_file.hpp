// A large synthetic decode trace written in the canonical format, for the tests that check
// a walk or a replay holds a bounded window of a file (with peak_rss.hpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "moepolicy/core/ids.hpp"
#include "moepolicy/trace/canonical.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::test {

/// The expert of row `r` of `write_large_decode_file`.
constexpr expert_id large_decode_expert(std::uint64_t r) noexcept {
  return static_cast<expert_id>((r * 2654435761u >> 7) % 8);
}

/// Writes `rows` rows to `path`: 4 layers, 8 experts, top-1 (21 bytes a row, one access a
/// row); row r is layer r mod 4 of decode step r / 4 of one request, with expert
/// `large_decode_expert(r)` and weight 1.
inline void write_large_decode_file(const std::filesystem::path& path, std::uint64_t rows) {
  const trace_info info{.model = "synthetic", .source = "test", .num_layers = 4, .num_experts = 8, .top_k = 1};
  write_canonical_rows(path, info, std::vector<std::string>{"only"}, rows,
                       [](std::uint64_t first, std::uint64_t n, trace_columns& c) {
                         c.request.assign(n, 0);
                         c.kind.assign(n, phase::decode);
                         c.step.resize(n);
                         c.position.resize(n);
                         c.layer.resize(n);
                         c.experts.resize(n);
                         c.weights.assign(n, 1.0f);
                         for (std::uint64_t i = 0; i < n; ++i) {
                           const std::uint64_t r = first + i;
                           c.step[i] = static_cast<std::uint32_t>(r / 4);
                           c.position[i] = static_cast<std::uint32_t>(r / 4);
                           c.layer[i] = static_cast<layer_id>(r % 4);
                           c.experts[i] = large_decode_expert(r);
                         }
                       });
}

}  // namespace moepolicy::test
