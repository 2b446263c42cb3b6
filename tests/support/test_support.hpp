// Helpers shared by the tests: where the traces are, and a clear notice when the shared
// traces are absent.
#pragma once

#include <doctest/doctest.h>

#include <filesystem>
#include <iostream>
#include <string>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/model_shape.hpp"

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

/// A model of `layers` MoE layers of `experts` Mixtral-8x7B-sized experts (352 MB at FP16:
/// copies take milliseconds) routed top-`top_k`, with Mixtral's attention and vocabulary:
/// the toy machine of the timed replays' hand-worked tests.
inline model_shape mixtral_sized_toy(std::uint32_t layers = 1, std::uint32_t experts = 4, std::uint32_t top_k = 1) {
  model_shape m = models::mixtral_8x7b();
  m.name = "toy";
  m.num_layers = layers;
  m.num_experts = experts;
  m.top_k = top_k;
  return m;
}

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

/// Checks that `expr` throws `moepolicy::parse_error` with exactly `message`, which may be
/// built at run time (doctest's CHECK_THROWS_WITH_AS needs a string that outlives it).
#define CHECK_PARSE_ERROR(expr, message)                                               \
  do {                                                                                 \
    const std::string moepolicy_expected_message_ = (message);                         \
    CHECK_THROWS_WITH_AS(expr, moepolicy_expected_message_.c_str(), ::moepolicy::parse_error); \
  } while (false)
