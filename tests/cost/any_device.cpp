#include "moepolicy/cost/any_device.hpp"

#include <doctest/doctest.h>

#include <vector>

#include "moepolicy/cost/presets.hpp"

using namespace moepolicy;

TEST_CASE("any_device_cost forwards every requirement to the held model") {
  const auto shape = models::mixtral_8x7b();
  const roofline_cost roof{presets::dimm_ndp(), shape};
  const profiled_cost prof{presets::xeon_8470_amx(), shape, {{fp16, {{1, 1e-3}, {64, 2e-3}}}}};
  const std::vector<any_device_cost> devices{roof, prof};

  CHECK(devices[0].name() == "DIMM-NDP");
  CHECK(devices[0].compute_seconds({0, 1}, fp16, 3) == roof.compute_seconds({0, 1}, fp16, 3));
  CHECK(devices[0].execution() == execution_kind::parallel_units);
  CHECK(devices[0].num_units() == 16);
  CHECK(devices[0].contention_seconds(1000) == roof.contention_seconds(1000));
  CHECK(devices[0].transfer_seconds(1000) == roof.transfer_seconds(1000));
  CHECK(devices[0].activation_transfer_seconds(5) == roof.activation_transfer_seconds(5));
  CHECK(devices[0].capacity_bytes() == roof.capacity_bytes());
  CHECK(devices[0].footprint_bytes({0, 1}, bitwidth{4}) == roof.footprint_bytes({0, 1}, bitwidth{4}));

  CHECK(devices[1].name() == "Xeon-8470 AMX");
  CHECK(devices[1].compute_seconds({0, 1}, fp16, 32) == prof.compute_seconds({0, 1}, fp16, 32));
  CHECK(devices[1].execution() == execution_kind::serial);
  CHECK(std::holds_alternative<profiled_cost>(devices[1].model()));
}
