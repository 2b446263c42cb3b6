// Compile-time tests of the device-cost concepts: positive and negative archetypes.
#include "moepolicy/cost/concepts.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <string_view>

namespace {

using namespace moepolicy;

struct compute_only {
  seconds compute_seconds(expert_key, bitwidth, std::size_t) const noexcept { return 0.0; }
};

struct full_device {
  std::string_view name() const noexcept { return "archetype"; }
  seconds compute_seconds(expert_key, bitwidth, std::size_t t) const noexcept { return static_cast<double>(t); }
  seconds transfer_seconds(bytes n) const noexcept { return static_cast<double>(n); }
  seconds activation_transfer_seconds(std::size_t) const noexcept { return 0.0; }
  bytes capacity_bytes() const noexcept { return 1; }
  bytes footprint_bytes(expert_key, bitwidth) const noexcept { return 1; }
  execution_kind execution() const noexcept { return execution_kind::serial; }
  std::size_t num_units() const noexcept { return 1; }
  seconds contention_seconds(bytes) const noexcept { return 0.0; }
};

struct no_contention {  // everything but contention_seconds
  std::string_view name() const noexcept { return "x"; }
  seconds compute_seconds(expert_key, bitwidth, std::size_t) const noexcept { return 0.0; }
  seconds transfer_seconds(bytes) const noexcept { return 0.0; }
  seconds activation_transfer_seconds(std::size_t) const noexcept { return 0.0; }
  bytes capacity_bytes() const noexcept { return 1; }
  bytes footprint_bytes(expert_key, bitwidth) const noexcept { return 1; }
  execution_kind execution() const noexcept { return execution_kind::serial; }
  std::size_t num_units() const noexcept { return 1; }
};

struct execution_as_int {  // execution() must return execution_kind exactly
  int execution() const noexcept { return 0; }
  std::size_t num_units() const noexcept { return 1; }
};

struct non_const_compute {  // requirements are on const objects
  seconds compute_seconds(expert_key, bitwidth, std::size_t) { return 0.0; }
};

static_assert(ComputeCost<compute_only>);
static_assert(!TransferCost<compute_only>);
static_assert(!DeviceCost<compute_only>);
static_assert(DeviceCost<full_device>);
static_assert(MemoryModel<no_contention> && ExecutionModel<no_contention>);
static_assert(!ContentionModel<no_contention>);
static_assert(!DeviceCost<no_contention>);
static_assert(!ExecutionModel<execution_as_int>);
static_assert(!ComputeCost<non_const_compute>);

}  // namespace

TEST_CASE("the concept archetypes are checked at compile time") {
  // The static_asserts above are the test; this case only makes the file a test.
  CHECK(full_device{}.compute_seconds({}, fp16, 3) == 3.0);
}
