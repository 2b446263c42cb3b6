#include "moepolicy/cost/device_spec.hpp"

#include <doctest/doctest.h>

#include "moepolicy/cost/presets.hpp"

using namespace moepolicy;

TEST_CASE("a link costs latency plus bytes over bandwidth, nothing for no bytes") {
  const link_spec l{10.0 * giga, 2e-6};
  CHECK(l.seconds_for(0) == 0.0);
  CHECK(l.seconds_for(10'000'000'000ULL) == doctest::Approx(1.0 + 2e-6));
  const link_spec free_path{};
  CHECK(free_path.seconds_for(1'000'000) == 0.0);
}

TEST_CASE("validate names the device, the field and the value") {
  device_spec d = presets::h100_pcie_gen5();
  CHECK_NOTHROW(d.validate());
  d.compute.peak_flops = 0.0;
  CHECK_THROWS_WITH_AS(d.validate(),
                       "moepolicy::device_spec::validate(H100-PCIe (PCIe Gen5 x16)): compute.peak_flops must be > 0, got 0",
                       invalid_argument);
  d = presets::h100_pcie_gen5();
  d.weight_link.latency_seconds = -1.0;
  CHECK_THROWS_WITH_AS(
      d.validate(),
      "moepolicy::device_spec::validate(H100-PCIe (PCIe Gen5 x16)): weight_link.latency_seconds must be finite and >= 0, got -1",
      invalid_argument);
  d = presets::dimm_ndp();
  d.num_units = 0;
  CHECK_THROWS_WITH_AS(d.validate(), "moepolicy::device_spec::validate(DIMM-NDP): num_units must be >= 1, got 0",
                       invalid_argument);
  d = presets::xeon_8470_amx();
  d.num_units = 4;
  CHECK_THROWS_WITH_AS(d.validate(),
                       "moepolicy::device_spec::validate(Xeon-8470 AMX): a serial device has exactly 1 unit, num_units, got 4",
                       invalid_argument);
  d = presets::xeon_8470_amx();
  d.compute.memory_bandwidth = -5.0;
  CHECK_THROWS_AS(d.validate(), invalid_argument);
  d = presets::xeon_8470_amx();
  d.host_read_bandwidth = 0.0;
  CHECK_THROWS_AS(d.validate(), invalid_argument);
}
