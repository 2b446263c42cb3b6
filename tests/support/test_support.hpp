// Helpers shared by the tests: where the traces are, and a clear notice when the shared
// traces are absent.
#pragma once

#include <doctest/doctest.h>

#include <filesystem>
#include <iostream>
#include <string>

namespace moepolicy::test {

/// The shared traces folder (beside the checkout), or an empty path when absent.
inline std::filesystem::path shared_traces() {
  std::filesystem::path p = MOEPOLICY_SHARED_TRACES;
  return std::filesystem::is_directory(p) ? p : std::filesystem::path{};
}

/// The bundled sample traces of the project.
inline std::filesystem::path bundled_traces() { return MOEPOLICY_BUNDLED_TRACES; }

/// Small hand-made inputs of the tests.
inline std::filesystem::path test_data() { return MOEPOLICY_TEST_DATA; }

}  // namespace moepolicy::test

/// Ends the current test case with a visible notice when the shared traces are absent;
/// ctest reports such a test as skipped (see SKIP_REGULAR_EXPRESSION in tests/).
#define MOEPOLICY_REQUIRE_SHARED_TRACES()                                                   \
  do {                                                                                      \
    if (::moepolicy::test::shared_traces().empty()) {                                       \
      std::cerr << "NOTE: shared traces not found at " MOEPOLICY_SHARED_TRACES              \
                   ": this test of the unbundled traces did not run\n";                    \
      return;                                                                               \
    }                                                                                       \
  } while (false)
