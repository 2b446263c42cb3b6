#include "moepolicy/cost/profiled.hpp"

#include <doctest/doctest.h>

#include "moepolicy/cost/presets.hpp"

using namespace moepolicy;

namespace {

profiled_cost make(std::vector<compute_profile> profiles) {
  return profiled_cost{presets::h100_pcie_gen5(), models::mixtral_8x7b(), std::move(profiles)};
}

}  // namespace

TEST_CASE("interpolates linearly between measured token counts") {
  const auto c = make({{fp16, {{1, 1.0e-4}, {16, 1.0e-4}, {256, 4.0e-4}, {1024, 1.6e-3}}}});
  CHECK(c.compute_seconds({}, fp16, 0) == 0.0);
  CHECK(c.compute_seconds({}, fp16, 1) == doctest::Approx(1.0e-4));
  CHECK(c.compute_seconds({}, fp16, 16) == doctest::Approx(1.0e-4));
  CHECK(c.compute_seconds({}, fp16, 136) == doctest::Approx(2.5e-4));  // halfway 16..256
  CHECK(c.compute_seconds({}, fp16, 640) == doctest::Approx(1.0e-3));  // halfway 256..1024
  // Beyond the last point the last segment's slope (1.2e-3 / 768 per token) continues.
  CHECK(c.compute_seconds({}, fp16, 1792) == doctest::Approx(1.6e-3 + 768 * (1.2e-3 / 768)));
}

TEST_CASE("below the first point the first point's time holds") {
  const auto c = make({{fp16, {{8, 2.0e-4}, {64, 3.0e-4}}}});
  CHECK(c.compute_seconds({}, fp16, 1) == doctest::Approx(2.0e-4));
  CHECK(c.compute_seconds({}, fp16, 7) == doctest::Approx(2.0e-4));
}

TEST_CASE("a single point extrapolates in proportion to tokens") {
  const auto c = make({{fp16, {{100, 1.0e-3}}}});
  CHECK(c.compute_seconds({}, fp16, 50) == doctest::Approx(1.0e-3));
  CHECK(c.compute_seconds({}, fp16, 300) == doctest::Approx(3.0e-3));
}

TEST_CASE("picks the smallest profiled bitwidth at or above the query") {
  const auto c = make({{fp16, {{1, 10.0}}}, {bitwidth{4}, {{1, 4.0}}}, {int8, {{1, 8.0}}}});
  CHECK(c.compute_seconds({}, bitwidth{2}, 1) == 4.0);
  CHECK(c.compute_seconds({}, bitwidth{4}, 1) == 4.0);
  CHECK(c.compute_seconds({}, bitwidth{5}, 1) == 8.0);
  CHECK(c.compute_seconds({}, fp16, 1) == 10.0);
  CHECK(c.compute_seconds({}, fp32, 1) == 10.0);  // none >= 32: the largest table
  CHECK(c.profiles().front().bits == bitwidth{4});
}

TEST_CASE("monotone in tokens over a realistic profile") {
  const auto c = make({{fp16, {{1, 9e-5}, {32, 1.1e-4}, {128, 1.5e-4}, {512, 5.5e-4}, {2048, 2.1e-3}}}});
  double prev = 0.0;
  for (std::size_t t = 0; t < 5000; t += 7) {
    const double now = c.compute_seconds({}, fp16, t);
    CHECK(now >= prev);
    prev = now;
  }
}

TEST_CASE("link, memory and execution come from the spec, as in the roofline model") {
  const auto c = make({{fp16, {{1, 1e-4}}}});
  CHECK(c.transfer_seconds(352'321'536ULL) == doctest::Approx(5.505024e-3 + 1e-6));
  CHECK(c.footprint_bytes({}, fp16) == 352'321'536ULL);
  CHECK(c.execution() == execution_kind::serial);
  CHECK(c.name() == "H100-PCIe (PCIe Gen5 x16)");
}

TEST_CASE("bad profiles are rejected with the profile, point and value") {
  CHECK_THROWS_WITH_AS(make({}), "moepolicy::profiled_cost::profiled_cost: at least one compute profile is required",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(make({{fp16, {}}}), "moepolicy::profiled_cost::profiled_cost: profile at 16 bits has no points",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(make({{fp16, {{0, 1.0}}}}),
                       "moepolicy::profiled_cost::profiled_cost: profile at 16 bits, point 0: tokens must be > 0, got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(
      make({{fp16, {{4, 1.0}, {4, 2.0}}}}),
      "moepolicy::profiled_cost::profiled_cost: profile at 16 bits, point 1: tokens must be strictly increasing, got 4",
      invalid_argument);
  CHECK_THROWS_WITH_AS(make({{fp16, {{4, 2.0}, {8, 1.0}}}}),
                       "moepolicy::profiled_cost::profiled_cost: profile at 16 bits, point 1: seconds must be "
                       "non-decreasing in tokens, got 1",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(make({{fp16, {{4, -1.0}}}}),
                       "moepolicy::profiled_cost::profiled_cost: profile at 16 bits, point 0: seconds must be finite "
                       "and >= 0, got -1",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(make({{fp16, {{4, 1.0}}}, {fp16, {{4, 1.0}}}}),
                       "moepolicy::profiled_cost::profiled_cost: bitwidth profiled twice, got 16", invalid_argument);
}
