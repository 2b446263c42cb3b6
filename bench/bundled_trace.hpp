// The bundled Granite trace, read once per benchmark program: real routing for the
// benchmarks whose inputs are a trace's batches.
#pragma once

#include <filesystem>

#include "moepolicy/trace/canonical.hpp"

namespace moepolicy::bench {

inline const routing_trace& bundled_granite() {
  static const routing_trace t = read_canonical(std::filesystem::path(MOEPOLICY_BUNDLED_TRACES) /
                                                "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace");
  return t;
}

}  // namespace moepolicy::bench
