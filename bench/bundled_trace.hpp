// The bundled Granite trace, read once per benchmark program: real routing for the
// benchmarks whose inputs are a trace's batches.
#pragma once

#include <cstdint>
#include <filesystem>

#include "moepolicy/trace/canonical.hpp"

namespace moepolicy::bench {

/// The bundled Granite trace's canonical file.
inline std::filesystem::path bundled_granite_path() {
  return std::filesystem::path(MOEPOLICY_BUNDLED_TRACES) / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace";
}

inline const routing_trace& bundled_granite() {
  static const routing_trace t = read_canonical(bundled_granite_path());
  return t;
}

/// The floor of a benchmark whose input is a trace's routing: every id and gate weight read
/// once. Returns their sums so that the reads cannot be optimised away.
struct routing_sums {
  std::uint64_t ids = 0;
  float weights = 0.0f;
};
/// Adds one batch's ids and gate weights to `s`.
inline void add_routing(routing_sums& s, const batch_view& v) noexcept {
  for (auto e : v.experts) s.ids += e;
  for (auto x : v.weights) s.weights += x;
}
inline routing_sums read_routing_once(const routing_trace& t) noexcept {
  routing_sums s;
  for (const auto& b : t.batches()) add_routing(s, t.view(b));
  return s;
}

}  // namespace moepolicy::bench
