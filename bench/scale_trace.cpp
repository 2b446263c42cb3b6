// scale_trace ROWS OUT.mtrace: writes a synthetic decode trace of Mixtral-8x7B's routing
// shape (32 MoE layers, 8 experts, top-2; 27 bytes a row) with ROWS rows, for the size
// sweeps of bench/scale_table.sh. The file is written in bounded memory
// (write_canonical_rows). Synthetic routing: it measures sizes and speeds, never a policy's
// quality.
//
// Requests of 1,000 decode steps; each (step, layer) routes one token to two distinct
// experts drawn from a skewed distribution (the smaller of two uniform draws), so caches
// see reuse.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "moepolicy/trace/canonical.hpp"

namespace {

constexpr std::uint32_t layers = 32, experts = 8, steps_per_request = 1000;

std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: scale_trace ROWS OUT.mtrace\n");
    return 2;
  }
  std::uint64_t rows = 0;
  const std::string_view arg = argv[1];
  if (std::from_chars(arg.data(), arg.data() + arg.size(), rows).ec != std::errc() || rows % layers != 0) {
    std::fprintf(stderr, "scale_trace: ROWS must be a whole multiple of %u, got %s\n", layers, argv[1]);
    return 2;
  }
  try {
    const std::uint64_t steps = rows / layers;
    const std::uint64_t requests = (steps + steps_per_request - 1) / steps_per_request;
    std::vector<std::string> names;
    for (std::uint64_t q = 0; q < requests; ++q) names.push_back("r" + std::to_string(q));
    const moepolicy::trace_info info{.model = "mistralai/Mixtral-8x7B-v0.1",
                                     .source = "synthetic (bench/scale_trace.cpp)",
                                     .num_layers = layers,
                                     .num_experts = experts,
                                     .top_k = 2};
    moepolicy::write_canonical_rows(
        argv[2], info, names, rows, [&](std::uint64_t first, std::uint64_t n, moepolicy::trace_columns& c) {
          c.request.resize(n);
          c.step.resize(n);
          c.position.resize(n);
          c.layer.resize(n);
          c.kind.assign(n, moepolicy::phase::decode);
          c.experts.resize(2 * n);
          c.weights.resize(2 * n);
          c.scores.clear();
          for (std::uint64_t i = 0; i < n; ++i) {
            const std::uint64_t r = first + i, step = r / layers;
            c.request[i] = static_cast<std::uint32_t>(step / steps_per_request);
            c.step[i] = static_cast<std::uint32_t>(step % steps_per_request);
            c.position[i] = c.step[i];
            c.layer[i] = static_cast<moepolicy::layer_id>(r % layers);
            const std::uint64_t h = mix(r);
            const auto a = static_cast<std::uint16_t>(std::min(h & 7u, (h >> 3) & 7u));
            const auto b = static_cast<std::uint16_t>((a + 1 + (h >> 6) % (experts - 1)) % experts);
            c.experts[2 * i] = a;
            c.experts[2 * i + 1] = b;
            c.weights[2 * i] = 0.625f;
            c.weights[2 * i + 1] = 0.375f;
          }
        });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scale_trace: %s\n", e.what());
    return 1;
  }
  return 0;
}
