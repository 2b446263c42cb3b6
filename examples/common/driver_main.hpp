// What the driver programs' main() functions share: the default traces (the bundled Granite
// trace and a shared one when ../shared is present) and running over each trace.
#pragma once

#include <cstddef>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace moepolicy::examples {

/// The threads a driver's replays share unless told otherwise: the machine's hardware
/// threads (1 when unknown). The outputs are the same for every count.
inline std::size_t default_jobs() noexcept {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<std::size_t>(n);
}

/// The bundled Granite trace below the source tree `here`.
inline std::filesystem::path bundled_granite(const std::filesystem::path& here) {
  return here / "examples" / "traces" / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace";
}

/// The shared trace `name` of `../shared/traces/<folder>/` beside the source tree `here`.
inline std::filesystem::path shared_trace(const std::filesystem::path& here, std::string_view folder,
                                          std::string_view name) {
  return here / ".." / "shared" / "traces" / folder / name;
}

/// The bundled Granite trace, and `shared` when it exists (else a note on stderr).
inline std::vector<std::string> bundled_and_shared(const std::filesystem::path& here,
                                                   const std::filesystem::path& shared) {
  std::vector<std::string> traces{bundled_granite(here).string()};
  if (std::filesystem::exists(shared)) {
    traces.push_back(shared.string());
  } else {
    std::cerr << "note: " << shared.string() << " not found; replaying the bundled trace only\n";
  }
  return traces;
}

/// Runs `f(trace)` for each trace, a blank line between their outputs. Returns the exit
/// status: 1, with "<program>: <what>" on stderr, when `f` throws.
template <class F>
int run_each(std::string_view program, const std::vector<std::string>& traces, F&& f) {
  try {
    bool first = true;
    for (const auto& t : traces) {
      if (!first) std::cout << '\n';
      first = false;
      f(t);
    }
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << '\n';
    return 1;
  }
  return 0;
}

}  // namespace moepolicy::examples
